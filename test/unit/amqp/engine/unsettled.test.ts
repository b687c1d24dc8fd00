// A session's unsettled deliveries by id (unsettled.ts), held to a Map doing the
// same: consecutive ids as a session makes them, ids wrapping at 2^32, a window
// that fills and empties, and a delivery left unsettled while thousands pass
// (the ids then span far more than the ring may hold).
import { describe, expect, it } from 'vitest';
import { UnsettledDeliveries } from '../../../../src/amqp/engine/unsettled.js';
import { prng } from '../../../../src/util/prng.js';

const d = (id: number) => ({ id });

describe('UnsettledDeliveries', () => {
  it('agrees with a Map over 200,000 seeded operations on consecutive, wrapping ids', () => {
    const rnd = prng(7);
    const book = new UnsettledDeliveries<{ id: number }>();
    const model = new Map<number, { id: number }>();
    let next = 0xffff_ff00; // wraps to 0 on the way
    const live: number[] = [];
    for (let i = 0; i < 200_000; i++) {
      const r = rnd();
      if (r < 0.5 || live.length === 0) {
        const x = d(next);
        next = (next + 1) >>> 0;
        book.set(x);
        model.set(x.id, x);
        live.push(x.id);
      } else if (r < 0.9) {
        // Mostly the oldest settles first; now and then one from the middle.
        const at = rnd() < 0.8 ? 0 : Math.floor(rnd() * live.length);
        const [id] = live.splice(at, 1);
        expect(book.delete(id!)).toBe(model.delete(id!));
      } else {
        const id = live.length && rnd() < 0.7 ? live[Math.floor(rnd() * live.length)]! : (next + 5) >>> 0;
        expect(book.get(id)).toBe(model.get(id));
        expect(book.delete(next)).toBe(false);
      }
      expect(book.size).toBe(model.size);
    }
    expect(book.ids().sort()).toEqual([...model.keys()].sort());
  });

  it('keeps a delivery left unsettled while 100,000 pass, without a ring that spans them', () => {
    const book = new UnsettledDeliveries<{ id: number }>();
    const pinned = d(3);
    book.set(pinned);
    for (let id = 4; id < 100_004; id++) {
      book.set(d(id));
      book.delete(id);
      // A window of eight in flight beside the pinned one.
      if (id % 1000 === 0) for (let k = 1; k <= 8; k++) book.set(d(id + 100_000 + k));
      if (id % 1000 === 0) for (let k = 1; k <= 8; k++) expect(book.delete(id + 100_000 + k)).toBe(true);
    }
    expect(book.size).toBe(1);
    expect(book.get(3)).toBe(pinned);
    // Ids that collide with the pinned one's slot go aside, and are found there.
    for (let k = 1; k <= 3; k++) book.set(d(3 + k * 4096));
    expect(book.size).toBe(4);
    for (let k = 1; k <= 3; k++) expect(book.get(3 + k * 4096)?.id).toBe(3 + k * 4096);
    // Set again while aside: replaced, not counted twice.
    const again = d(3 + 4096);
    book.set(again);
    expect(book.size).toBe(4);
    expect(book.get(3 + 4096)).toBe(again);
    expect(book.ids().sort((a, b) => a - b)).toEqual([3, 4099, 8195, 12291]);
    book.clear();
    expect(book.size).toBe(0);
    expect(book.get(3)).toBeUndefined();
  });
});

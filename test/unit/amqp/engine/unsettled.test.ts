// A session's unsettled deliveries by id (unsettled.ts), held to a Map doing the
// same: consecutive ids as a session makes them, ids wrapping at 2^32, a window
// that fills and empties, and a delivery left unsettled while thousands pass
// (the ids then span far more than the ring may hold). The deliveries in a range
// (what a disposition names) are held to a filter of that Map, and counted
// lookups show what a range costs: what it holds, not how wide it is.
import { describe, expect, it, vi } from 'vitest';
import { inSerialRange } from '../../../../src/amqp/engine/serial.js';
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

  it('inRange agrees with a filter of a Map over 40,000 seeded operations: ranges narrow, wide, wrapping and beyond; ids completing out of order, set again, replaced', () => {
    const rnd = prng(11);
    const book = new UnsettledDeliveries<{ id: number }>();
    const model = new Map<number, { id: number }>();
    let next = 0xffff_f000; // wraps to 0 on the way
    /** Ids taken but not yet complete (a delivery of many frames): they come later, out of order. */
    const pending: number[] = [];
    const live: number[] = [];
    const settled: number[] = [];
    const pick = (): number => (live.length ? live[Math.floor(rnd() * live.length)]! : next);
    const add = (id: number) => {
      const x = d(id);
      book.set(x);
      if (!model.has(id)) live.push(id);
      model.set(id, x);
    };
    for (let i = 0; i < 40_000; i++) {
      const r = rnd();
      if (r < 0.36) {
        const id = next;
        next = (next + 1) >>> 0;
        if (rnd() < 0.05) pending.push(id);
        else add(id);
      } else if (r < 0.38) {
        if (pending.length > 0) add(pending.shift()!);
        else if (settled.length > 0 && rnd() < 0.5) add(settled.pop()!);
        else if (live.length > 0) add(pick());
      } else if (r < 0.72 && live.length > 0) {
        const at = rnd() < 0.7 ? 0 : Math.floor(rnd() * live.length);
        const [id] = live.splice(at, 1);
        expect(book.delete(id!)).toBe(true);
        model.delete(id!);
        settled.push(id!);
      } else {
        const kind = rnd();
        const first = kind < 0.4 ? pick() : kind < 0.6 ? (next + Math.floor(rnd() * 1000)) >>> 0 : Math.floor(rnd() * 0x1_0000_0000);
        const span = rnd() < 0.5 ? Math.floor(rnd() * 50) : rnd() < 0.5 ? Math.floor(rnd() * 0x1_0000_0000) : 0xffff_ffff;
        const last = (first + span) >>> 0;
        // Oldest first: by distance from the oldest id there is (all lie within 2^31 of it).
        const from = (next - 0x1000_0000) >>> 0;
        const expected = [...model.values()].filter((x) => inSerialRange(x.id, first, last)).sort((a, b) => ((a.id - from) >>> 0) - ((b.id - from) >>> 0));
        const got = book.inRange(first, last);
        // The same deliveries (not copies), in the same order; compared whole, as one value each.
        if (got.length !== expected.length || got.some((x, k) => x !== expected[k])) {
          expect(got.map((x) => x.id)).toEqual(expected.map((x) => x.id));
          expect.fail(`range ${first}..${last}: a delivery replaced by set() was returned in its place`);
        }
      }
    }
  });

  it('a range holding no unsettled id looks nothing up; settled ids inside one are stepped over once, not by every range naming them', () => {
    const book = new UnsettledDeliveries<{ id: number }>();
    for (let id = 0; id < 20_000; id++) book.set(d(id));
    // Delivery 0 stays unsettled while 1..9999 are settled: a hole inside the unsettled ids.
    for (let id = 1; id < 10_000; id++) book.delete(id);
    const get = vi.spyOn(book, 'get');
    const values = vi.spyOn(book, 'values');
    for (let k = 0; k < 1000; k++) expect(book.inRange(20_010, 40_000)).toEqual([]);
    for (let k = 0; k < 1000; k++) expect(book.inRange(0xffff_0000, 0xffff_ffff)).toEqual([]);
    expect(get).not.toHaveBeenCalled();
    for (let k = 0; k < 1000; k++) expect(book.inRange(1, 9999)).toEqual([]);
    // The first walk looks each settled id up once; after it, a range over them is one step.
    expect(get.mock.calls.length).toBeLessThanOrEqual(9999 + 2 * 1000);
    expect(values).not.toHaveBeenCalled();
    // The ranges that hold some return exactly those, oldest first.
    expect(book.inRange(0, 10_002).map((x) => x.id)).toEqual([0, 10_000, 10_001, 10_002]);
    expect(book.inRange(19_998, 5).map((x) => x.id)).toEqual([0, 19_998, 19_999]);
    expect(book.inRange(0, 0xffff_ffff)).toHaveLength(10_001);
  });
});

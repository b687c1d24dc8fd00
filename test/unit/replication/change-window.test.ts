// The change window (HA primary, DR source) kept off the heap: what goes in comes out equal, in
// order, found by LSN; the oldest go first by count and by bytes; a reset
// starts over; chunks are reused and freed as entries go.
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { ChangeWindow } from '../../../src/replication/change-window.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { message } from '../store/helpers.js';

const enqueue = (lsn: number, size = 16): LoggedChange => ({ lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(lsn, 'x'.repeat(size)) } });

describe('change window', () => {
  it('change window - returns every change as it was pushed, by sequence and by LSN', () => {
    const w = new ChangeWindow(0, 100_000, 1 << 30);
    const pushed: LoggedChange[] = [];
    for (let lsn = 10; lsn < 5000; lsn += 3) {
      const e: LoggedChange =
        lsn % 7 === 0
          ? { lsn, durable: false, change: { kind: 'dequeue', queue: 'q', id: lsn - 3 } }
          : lsn % 11 === 0
            ? { lsn, durable: true, change: { kind: 'transaction', changes: [enqueue(lsn).change as Extract<LoggedChange['change'], { kind: 'enqueue' }>, { kind: 'dequeue', queue: 'r', id: 1 }] } }
            : enqueue(lsn, lsn % 200);
      pushed.push(e);
      w.push(e, 1000 + lsn);
    }
    expect(w.endSeq - w.firstSeq).toBe(pushed.length);
    pushed.forEach((e, k) => {
      const s = w.at(w.firstSeq + k)!;
      expect(s.entry).toEqual(e);
      expect(s.at).toBe(1000 + e.lsn);
      expect(w.timeAt(w.firstSeq + k)).toBe(1000 + e.lsn);
      expect(w.lsnAt(w.firstSeq + k)).toBe(e.lsn);
      expect(w.recordAt(w.firstSeq + k)).toEqual(encodeChange(e));
    });
    expect(w.at(w.endSeq)).toBeUndefined();
    expect(w.recordAt(w.endSeq)).toBeUndefined();
    expect(w.seqAfter(0)).toBe(w.firstSeq);
    expect(w.seqAfter(10)).toBe(w.firstSeq + 1);
    expect(w.seqAfter(11)).toBe(w.firstSeq + 1);
    expect(w.seqAfter(1_000_000)).toBe(w.endSeq);
  });

  it('change window - drops the oldest by count and by bytes, and keeps what it says it covers', () => {
    const byCount = new ChangeWindow(0, 100, 1 << 30);
    for (let lsn = 1; lsn <= 1000; lsn++) byCount.push(enqueue(lsn), lsn);
    expect(byCount.endSeq - byCount.firstSeq).toBe(100);
    expect(byCount.at(byCount.firstSeq)!.entry.lsn).toBe(901);
    expect(byCount.coversFromLsn).toBe(900);
    // 64 KiB bodies against a 1 MiB budget: about 16 stay; chunks (4 MiB) are reused and freed.
    const byBytes = new ChangeWindow(0, 1_000_000, 1 << 20);
    for (let lsn = 1; lsn <= 500; lsn++) byBytes.push(enqueue(lsn, 64 * 1024), lsn);
    const held = byBytes.endSeq - byBytes.firstSeq;
    expect(held).toBeGreaterThan(10);
    expect(held).toBeLessThan(20);
    expect(byBytes.byteSize).toBeLessThanOrEqual(1 << 20);
    expect(byBytes.at(byBytes.endSeq - 1)!.entry).toEqual(enqueue(500, 64 * 1024));
  });

  it('change window - bytesAfter counts the encoded changes after an LSN, across growth and drops, and knows when it cannot', () => {
    const w = new ChangeWindow(0, 3000, 1 << 30);
    const sizes: number[] = [];
    // Past the first 1024 slots (the arrays grow) and past the count limit (the oldest drop).
    for (let lsn = 1; lsn <= 5000; lsn++) {
      const e = enqueue(lsn, lsn % 300);
      sizes[lsn] = encodeChange(e).length;
      w.push(e, lsn);
    }
    const after = (lsn: number) => sizes.slice(lsn + 1).reduce((a, b) => a + (b ?? 0), 0);
    expect(w.bytesAfter(5000)).toBe(0);
    expect(w.bytesAfter(4999)).toBe(sizes[5000]);
    expect(w.bytesAfter(4000)).toBe(after(4000));
    expect(w.bytesAfter(w.coversFromLsn)).toBe(after(w.coversFromLsn));
    expect(w.bytesAfter(w.coversFromLsn - 1)).toBeUndefined();
    w.reset(6000);
    expect(w.bytesAfter(6000)).toBe(0);
    expect(w.bytesAfter(5000)).toBeUndefined();
  });

  it('change window - a reset forgets everything before and goes on from the same sequence', () => {
    const w = new ChangeWindow(0, 1000, 1 << 30);
    for (let lsn = 1; lsn <= 50; lsn++) w.push(enqueue(lsn), lsn);
    const end = w.endSeq;
    w.reset(70);
    expect(w.firstSeq).toBe(end);
    expect(w.endSeq).toBe(end);
    expect(w.coversFromLsn).toBe(70);
    w.push(enqueue(71), 71);
    expect(w.at(end)!.entry.lsn).toBe(71);
    expect(w.seqAfter(70)).toBe(end);
  });

  it('change window - chunks emptied by drops and resets are written again, and what is held stays intact', () => {
    // 8 KiB bodies against a 6 MiB budget: one 4 MiB chunk turns over every ~500 changes.
    const w = new ChangeWindow(0, 1_000_000, 6 << 20);
    const check = () => {
      for (let seq = w.firstSeq; seq < w.endSeq; seq += 97) {
        const lsn = w.lsnAt(seq)!;
        // Bytes, not objects: toEqual on 8 KiB bodies is slow.
        expect(w.recordAt(seq)!.equals(encodeChange(enqueue(lsn, 8192 + (lsn % 50))))).toBe(true);
      }
      expect(w.at(w.endSeq - 1)!.entry.lsn).toBe(w.lsnAt(w.endSeq - 1));
    };
    let lsn = 0;
    for (let round = 0; round < 3; round++) {
      for (let k = 0; k < 3000; k++, lsn++) {
        w.push(enqueue(lsn + 1, 8192 + ((lsn + 1) % 50)), lsn);
        if (k % 700 === 0) check();
      }
      check();
      w.reset(lsn + 10);
      lsn += 10;
    }
    // A record larger than a chunk gets a chunk of its own, never kept for reuse.
    w.push(enqueue(lsn + 1, 5 << 20), 0);
    w.push(enqueue(lsn + 2, 100), 0);
    expect(w.recordAt(w.endSeq - 2)!.equals(encodeChange(enqueue(lsn + 1, 5 << 20)))).toBe(true);
    expect(w.at(w.endSeq - 1)!.entry).toEqual(enqueue(lsn + 2, 100));
  });
});

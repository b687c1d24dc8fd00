// DedupWindow.rowsFrom: a DR copy reads a live window a piece at a time, as of the
// point its copy stands for. Rows evicted or taken back meanwhile are passed over,
// rows taken in after that point are not read, and the pieces, put together, are
// the rows rows() gives at that point.
import { describe, expect, it } from 'vitest';
import { dedupDigest, DedupKeyType } from '../../../src/broker/dedup-key.js';
import { DedupWindow, DEDUP_ROW_BYTES, dedupRowsAt } from '../../../src/broker/dedup-window.js';

const key = (i: number) => dedupDigest(DedupKeyType.string, Buffer.from(`k${i}`));

/** Every piece from `from` to `end`, `max` rows looked at per call. */
function readAll(w: DedupWindow, end: number, max: number, between?: () => void): Buffer {
  const pieces: Buffer[] = [];
  for (let next = 0, guard = 0; next < end && guard < 1000; guard++) {
    const piece = w.rowsFrom(next, end, max);
    pieces.push(piece.rows);
    next = piece.next;
    between?.();
  }
  return Buffer.concat(pieces);
}

describe('dedup window - rowsFrom', () => {
  it('the pieces of a window, read as of a point, are its rows at that point', () => {
    const w = new DedupWindow(100, 0);
    for (let i = 0; i < 250; i++) w.add(key(i), 1000 + i, i + 1, true);
    const end = w.endSeq;
    expect(end).toBe(250);
    expect(readAll(w, end, 7)).toEqual(w.rows());
  });

  it('rows evicted or taken back while it reads are passed over; rows after the point are not read', () => {
    const w = new DedupWindow(100, 0);
    for (let i = 0; i < 100; i++) w.add(key(i), 1000 + i, i + 1, true);
    const end = w.endSeq;
    w.remove(key(50));
    let next = 200;
    // Each piece read, three keys more: the oldest leave by count.
    const rows = readAll(w, end, 10, () => {
      for (let n = 0; n < 3; n++, next++) w.add(key(next), 1000 + next, next + 1, true);
    });
    const times = Array.from({ length: rows.length / DEDUP_ROW_BYTES }, (_, r) => rows.readDoubleLE(r * DEDUP_ROW_BYTES + 16));
    // Read in order, none of the keys added after the point, nor the one taken back.
    expect(times.every((t, i) => i === 0 || t > times[i - 1]!)).toBe(true);
    expect(times.every((t) => t < 1100 && t !== 1050)).toBe(true);
    // The pieces overtook the eviction (10 rows a piece against 3 evicted): most were read.
    expect(times.length).toBeGreaterThan(70);
  });

  it('dedupRowsAt sets every row to one position and keeps keys and times', () => {
    const w = new DedupWindow(10, 0);
    for (let i = 0; i < 5; i++) w.add(key(i), 1000 + i, i + 1, true);
    const rows = w.rows();
    const stamped = dedupRowsAt(rows, 77);
    for (let at = 0; at < rows.length; at += DEDUP_ROW_BYTES) {
      expect(stamped.subarray(at, at + 24)).toEqual(rows.subarray(at, at + 24));
      expect(stamped.readDoubleLE(at + 24)).toBe(77);
    }
    expect(rows.readDoubleLE(24)).toBe(1);
  });
});

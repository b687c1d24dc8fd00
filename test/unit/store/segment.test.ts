// Segment frames after damage: the search for the next valid frame, which tells
// recovery a torn tail (nothing valid after the bad frame) from damage, and
// where --repair picks up again.
// Property: on segments of real frames damaged the ways disks and crashes damage
// them, the search answers exactly what trying every offset answers (its cheap
// checks only pass over offsets readFrame would refuse).
// Budget: bytes shaped like frame headers cost a bounded amount of checksumming,
// counted by the budget (work done, not time), and a search that reaches the
// bound says so: it never answers that nothing valid follows.
import { describe, expect, it } from 'vitest';
import { encodeChange, RECORD_HEADER_BYTES } from '../../../src/store/record-codec.js';
import {
  badRanges,
  encodeFrame,
  FRAME_HEADER_BYTES,
  nextValidFrame,
  readFrame,
  RESYNC_BYTES_PER_SEGMENT_BYTE,
  RESYNC_FLOOR_BYTES,
  ResyncBudget,
  scanSegment,
  type BadRange,
} from '../../../src/store/segment.js';
import { message, prng, sampleChanges } from './helpers.js';

/** The search as it was before it had cheap checks and a budget: a full frame check at every offset. */
function everyOffset(buf: Buffer, from: number): number | undefined {
  for (let at = from; at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES <= buf.length; at++) if (readFrame(buf, at).status === 'ok') return at;
  return undefined;
}

/** --repair's ranges as the search before the budget made them. */
function everyOffsetRanges(buf: Buffer): Array<Omit<BadRange, 'unsearchedFrom'>> {
  const ranges: Array<Omit<BadRange, 'unsearchedFrom'>> = [];
  for (let at = 0; at < buf.length; ) {
    const f = readFrame(buf, at);
    if (f.status === 'ok') {
      at += f.size;
      continue;
    }
    const end = everyOffset(buf, at + 1) ?? buf.length;
    ranges.push({ offset: at, bytes: end - at, reason: f.reason });
    at = end;
  }
  return ranges;
}

const HEADER_STRIDE = FRAME_HEADER_BYTES + RECORD_HEADER_BYTES;

/**
 * `bytes` of frame headers, one every 18 bytes, each claiming `length` bytes
 * and passing every check but the CRC: an exchange-declare (any length from its
 * minimum up), LSN 0, flags 0. The content that made the search quadratic.
 */
function headerShaped(bytes: number, length: number): Buffer {
  const buf = Buffer.alloc(bytes);
  for (let at = 0; at + HEADER_STRIDE <= bytes; at += HEADER_STRIDE) {
    buf.writeUInt32LE(length, at);
    buf[at + FRAME_HEADER_BYTES] = 3;
  }
  return buf;
}

/** What checksumming every header-shaped offset of `buf` would cost: the work the search did before its budget. */
function unboundedCost(buf: Buffer, length: number): number {
  let bytes = 0;
  for (let at = 0; at + HEADER_STRIDE <= buf.length; at += HEADER_STRIDE) if (at + FRAME_HEADER_BYTES + length <= buf.length) bytes += 4 + length;
  return bytes;
}

const frameOf = (lsn: number, i: number) => {
  const changes = sampleChanges();
  return encodeFrame(encodeChange({ lsn, change: changes[i % changes.length]!, durable: i % 3 !== 0 }));
};

describe('segment', () => {
  it('segment - on damaged segments the search finds what trying every offset finds, and --repair removes the same ranges', () => {
    const rnd = prng(0x5e9);
    const answers = { found: 0, none: 0, whole: 0 };
    for (let round = 0; round < 300; round++) {
      const frames = Array.from({ length: 2 + rnd.int(10) }, (_, i) => frameOf(1 + rnd.int(2 ** 40), round + i));
      let buf = Buffer.concat(frames);
      // One to three damages of the kinds disks and crashes leave.
      for (let d = 1 + rnd.int(3); d > 0 && buf.length > 0; d--) {
        const at = rnd.int(buf.length);
        const run = 1 + rnd.int(64);
        switch (rnd.int(6)) {
          case 0: // a flipped bit
            buf[at]! ^= 1 << rnd.int(8);
            break;
          case 1: // a zeroed run (a lost page, in small)
            buf.fill(0, at, Math.min(buf.length, at + run));
            break;
          case 2: // random bytes over a run
            for (let k = at; k < Math.min(buf.length, at + run); k++) buf[k] = rnd.int(256);
            break;
          case 3: // a torn tail
            buf = buf.subarray(0, at);
            break;
          case 4: // bytes slipped in: every later frame shifted
            buf = Buffer.concat([buf.subarray(0, at), Buffer.from(Array.from({ length: run }, () => rnd.int(256))), buf.subarray(at)]);
            break;
          default: // a run of real frame bytes repeated elsewhere (frames at odd offsets)
            buf = Buffer.concat([buf.subarray(0, at), buf.subarray(rnd.int(buf.length)).subarray(0, run * 4), buf.subarray(at)]);
        }
      }
      buf = Buffer.from(buf);
      const scan = scanSegment(buf);
      if (!scan.bad) {
        answers.whole++;
        expect(badRanges(buf)).toEqual([]);
        continue;
      }
      const expected = everyOffset(buf, scan.bad.offset + 1);
      expect(scan.bad.after, `round ${round}`).toEqual(expected === undefined ? { status: 'none' } : { status: 'found', offset: expected });
      answers[scan.bad.after.status as 'found' | 'none']++;
      // And from every other offset after the damage, not only the first.
      for (let from = scan.bad.offset + 1; from < buf.length; from += 1 + rnd.int(16)) {
        const want = everyOffset(buf, from);
        expect(nextValidFrame(buf, from), `round ${round} from ${from}`).toEqual(want === undefined ? { status: 'none' } : { status: 'found', offset: want });
      }
      expect(badRanges(buf), `round ${round}`).toEqual(everyOffsetRanges(buf));
    }
    // Enough of each answer for the comparison to mean something.
    expect(Math.min(answers.found, answers.none), JSON.stringify(answers)).toBeGreaterThan(40);
  });

  it('segment - frame headers every 18 bytes: the search checksums no more than its budget, linear in the size, then gives up (never "nothing follows")', () => {
    const length = 128 * 1024;
    const buf = headerShaped(256 * 1024, length);
    buf[0]! ^= 0xff; // the first frame is bad anyway; the search starts after it
    const budget = ResyncBudget.forSegment(buf.length);
    expect(budget.limit).toBe(RESYNC_FLOOR_BYTES + RESYNC_BYTES_PER_SEGMENT_BYTE * buf.length);
    // Checking every candidate would cost dozens of times the budget (quadratic in the size).
    expect(unboundedCost(buf, length)).toBeGreaterThan(40 * budget.limit);

    const r = nextValidFrame(buf, 1, budget);
    expect(r).toMatchObject({ status: 'gave-up' });
    expect(budget.spent).toBeLessThanOrEqual(budget.limit);
    // It gave up at a candidate it could not afford; nothing before it is valid.
    const at = (r as { offset: number }).offset;
    expect(at % HEADER_STRIDE).toBe(0);
    expect(budget.spent + 4 + length).toBeGreaterThan(budget.limit);
    expect(everyOffset(buf.subarray(0, at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES - 1), 1)).toBeUndefined();

    // The scan recovery runs says the same: damage, not a torn tail.
    expect(scanSegment(buf).bad?.after).toMatchObject({ status: 'gave-up' });
  });

  it('segment - a valid frame after header-shaped bytes is found when the budget covers them; past the budget the answer is gave-up, not none', () => {
    const junk = headerShaped(18 * 100, 1000);
    const frame = frameOf(7, 0);
    const buf = Buffer.concat([junk, frame]);
    expect(nextValidFrame(buf, 0)).toEqual({ status: 'found', offset: junk.length });
    const small = new ResyncBudget(50_000);
    const r = nextValidFrame(buf, 0, small);
    expect(r).toMatchObject({ status: 'gave-up' });
    expect((r as { offset: number }).offset).toBeLessThan(junk.length);
    expect(small.spent).toBeLessThanOrEqual(50_000);
  });

  it('segment - repair keeps every valid frame around header-shaped bytes; past its budget the last range says where it stopped searching', () => {
    const before = Buffer.concat([frameOf(1, 0), frameOf(2, 1)]);
    const junk = headerShaped(18 * 100, 1000);
    const after = frameOf(3, 2);
    const buf = Buffer.concat([before, junk, after]);
    expect(badRanges(buf)).toEqual([{ offset: before.length, bytes: junk.length, reason: 'CRC mismatch' }]);

    const ranges = badRanges(buf, new ResyncBudget(50_000));
    expect(ranges).toEqual([{ offset: before.length, bytes: buf.length - before.length, reason: 'CRC mismatch', unsearchedFrom: expect.any(Number) }]);
    expect(ranges[0]!.unsearchedFrom).toBeGreaterThan(before.length);
    expect(ranges[0]!.unsearchedFrom).toBeLessThan(before.length + junk.length);
  });

  it('segment - repair past its budget resumes where the bad frame\'s own length says it ends, when a valid frame starts there', () => {
    const first = frameOf(1, 0);
    const bodyShaped = encodeFrame(encodeChange({ lsn: 2, change: { kind: 'enqueue', queue: 'q', message: { ...message(1), bytes: headerShaped(18 * 100, 1000) } }, durable: true }));
    bodyShaped[bodyShaped.length - 50]! ^= 1; // its payload damaged, its length intact
    const last = frameOf(3, 2);
    const buf = Buffer.concat([first, bodyShaped, last]);
    // With budget enough, the search finds `last`; without, it gives up in the body and resumes at `last` all the same.
    expect(badRanges(buf)).toEqual([{ offset: first.length, bytes: bodyShaped.length, reason: 'CRC mismatch' }]);
    const ranges = badRanges(buf, new ResyncBudget(50_000));
    expect(ranges).toEqual([{ offset: first.length, bytes: bodyShaped.length, reason: 'CRC mismatch', unsearchedFrom: expect.any(Number) }]);
    expect(ranges[0]!.unsearchedFrom).toBeGreaterThan(first.length);
    // Its length damaged instead: nowhere to resume, the rest goes.
    const lengthHit = Buffer.from(buf);
    lengthHit.writeUInt32LE(lengthHit.readUInt32LE(first.length) + 1, first.length);
    expect(badRanges(lengthHit, new ResyncBudget(50_000))).toEqual([
      { offset: first.length, bytes: buf.length - first.length, reason: 'CRC mismatch', unsearchedFrom: expect.any(Number) },
    ]);
  });

  it('segment - repair across many bad frames that each claim a long record: the checksums of the bad frames count against the budget too', () => {
    // Valid frame, then a bad one claiming 100 KiB, again and again: checking each
    // bad frame in turn was quadratic even with every search cheap.
    const length = 100 * 1024;
    const units: Buffer[] = [];
    for (let i = 0; i < 6000; i++) units.push(frameOf(i + 1, 5), headerShaped(HEADER_STRIDE, length));
    const buf = Buffer.concat([...units, Buffer.alloc(length)]);
    const budget = ResyncBudget.forSegment(buf.length);
    const ranges = badRanges(buf, budget);
    expect(ranges.at(-1)?.unsearchedFrom).toBeDefined();
    // Over by at most the bad frame charged before the search that gave up and the
    // one check where that frame says it ends.
    expect(budget.spent).toBeLessThanOrEqual(budget.limit + 4 + length + buf.length);
    // Every range before the last is exactly one bad header, ending at a valid frame.
    for (const r of ranges.slice(0, -1)) expect(r.bytes).toBe(HEADER_STRIDE);
  });
});

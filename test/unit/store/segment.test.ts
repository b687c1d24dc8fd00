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
import { crc32c, crc32cPrevious } from '../../../src/store/crc32c.js';
import { encodeChange, RECORD_HEADER_BYTES } from '../../../src/store/record-codec.js';
import {
  badRanges,
  encodeFrame,
  encodeSegmentHeader,
  FRAME_HEADER_BYTES,
  newSalt,
  nextValidFrame,
  readFrame,
  readSegmentHeader,
  RESYNC_BYTES_PER_SEGMENT_BYTE,
  RESYNC_FLOOR_BYTES,
  ResyncBudget,
  scanSegment,
  SEGMENT_HEADER_BYTES,
  type BadRange,
} from '../../../src/store/segment.js';
import { message, prng, sampleChanges } from './helpers.js';

/** The salt of the segments made here (any but 0, which is a segment from before salts). */
const SALT = 0x5a17_c0de;
const HEADER = encodeSegmentHeader(SALT);
/** A segment: its header, then these bytes. */
const segmentOf = (...parts: Buffer[]) => Buffer.concat([HEADER, ...parts]);

/** The search as it was before it had cheap checks and a budget: a full frame check at every offset. */
function everyOffset(buf: Buffer, from: number): number | undefined {
  for (let at = from; at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES <= buf.length; at++) if (readFrame(buf, at, SALT).status === 'ok') return at;
  return undefined;
}

/** --repair's ranges as the search before the budget made them. */
function everyOffsetRanges(buf: Buffer): Array<Omit<BadRange, 'unsearchedFrom'>> {
  const ranges: Array<Omit<BadRange, 'unsearchedFrom'>> = [];
  for (let at = SEGMENT_HEADER_BYTES; at < buf.length; ) {
    const f = readFrame(buf, at, SALT);
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
  return encodeFrame(encodeChange({ lsn, change: changes[i % changes.length]!, durable: i % 3 !== 0 }), SALT);
};

describe('segment', () => {
  it('segment - on damaged segments the search finds what trying every offset finds, and --repair removes the same ranges', () => {
    const rnd = prng(0x5e9);
    const answers = { found: 0, none: 0, whole: 0 };
    for (let round = 0; round < 300; round++) {
      const frames = Array.from({ length: 2 + rnd.int(10) }, (_, i) => frameOf(1 + rnd.int(2 ** 40), round + i));
      let buf = Buffer.concat(frames);
      // One to three damages of the kinds disks and crashes leave (to the frames: a damaged header has its own test).
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
      buf = segmentOf(buf);
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
        expect(nextValidFrame(buf, from, SALT), `round ${round} from ${from}`).toEqual(want === undefined ? { status: 'none' } : { status: 'found', offset: want });
      }
      expect(badRanges(buf), `round ${round}`).toEqual(everyOffsetRanges(buf));
    }
    // Enough of each answer for the comparison to mean something.
    expect(Math.min(answers.found, answers.none), JSON.stringify(answers)).toBeGreaterThan(40);
  });

  it('segment - frame headers every 18 bytes: the search checksums no more than its budget, linear in the size, then gives up (never "nothing follows")', () => {
    const length = 128 * 1024;
    const buf = segmentOf(headerShaped(256 * 1024, length));
    buf[SEGMENT_HEADER_BYTES]! ^= 0xff; // the first frame is bad anyway; the search starts after it
    const budget = ResyncBudget.forSegment(buf.length);
    expect(budget.limit).toBe(RESYNC_FLOOR_BYTES + RESYNC_BYTES_PER_SEGMENT_BYTE * buf.length);
    // Checking every candidate would cost dozens of times the budget (quadratic in the size).
    expect(unboundedCost(buf, length)).toBeGreaterThan(40 * budget.limit);

    const r = nextValidFrame(buf, SEGMENT_HEADER_BYTES + 1, SALT, budget);
    expect(r).toMatchObject({ status: 'gave-up' });
    expect(budget.spent).toBeLessThanOrEqual(budget.limit);
    // It gave up at a candidate it could not afford; nothing before it is valid.
    const at = (r as { offset: number }).offset;
    expect((at - SEGMENT_HEADER_BYTES) % HEADER_STRIDE).toBe(0);
    expect(budget.spent + 4 + length).toBeGreaterThan(budget.limit);
    expect(everyOffset(buf.subarray(0, at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES - 1), SEGMENT_HEADER_BYTES + 1)).toBeUndefined();

    // The scan recovery runs says the same: damage, not a torn tail.
    expect(scanSegment(buf).bad?.after).toMatchObject({ status: 'gave-up' });
  });

  it('segment - a valid frame after header-shaped bytes is found when the budget covers them; past the budget the answer is gave-up, not none', () => {
    const junk = headerShaped(18 * 100, 1000);
    const frame = frameOf(7, 0);
    const buf = Buffer.concat([junk, frame]);
    expect(nextValidFrame(buf, 0, SALT)).toEqual({ status: 'found', offset: junk.length });
    const small = new ResyncBudget(50_000);
    const r = nextValidFrame(buf, 0, SALT, small);
    expect(r).toMatchObject({ status: 'gave-up' });
    expect((r as { offset: number }).offset).toBeLessThan(junk.length);
    expect(small.spent).toBeLessThanOrEqual(50_000);
  });

  it('segment - repair keeps every valid frame around header-shaped bytes; past its budget the last range says where it stopped searching', () => {
    const before = Buffer.concat([frameOf(1, 0), frameOf(2, 1)]);
    const junk = headerShaped(18 * 100, 1000);
    const after = frameOf(3, 2);
    const buf = segmentOf(before, junk, after);
    const junkAt = SEGMENT_HEADER_BYTES + before.length;
    expect(badRanges(buf)).toEqual([{ offset: junkAt, bytes: junk.length, reason: 'CRC mismatch' }]);

    const ranges = badRanges(buf, new ResyncBudget(50_000));
    expect(ranges).toEqual([{ offset: junkAt, bytes: buf.length - junkAt, reason: 'CRC mismatch', unsearchedFrom: expect.any(Number) }]);
    expect(ranges[0]!.unsearchedFrom).toBeGreaterThan(junkAt);
    expect(ranges[0]!.unsearchedFrom).toBeLessThan(junkAt + junk.length);
  });

  it('segment - repair past its budget resumes where the bad frame\'s own length says it ends, when a valid frame starts there', () => {
    const first = frameOf(1, 0);
    const bodyShaped = encodeFrame(encodeChange({ lsn: 2, change: { kind: 'enqueue', queue: 'q', message: { ...message(1), bytes: headerShaped(18 * 100, 1000) } }, durable: true }), SALT);
    bodyShaped[bodyShaped.length - 50]! ^= 1; // its payload damaged, its length intact
    const last = frameOf(3, 2);
    const buf = segmentOf(first, bodyShaped, last);
    const bodyAt = SEGMENT_HEADER_BYTES + first.length;
    // With budget enough, the search finds `last`; without, it gives up in the body and resumes at `last` all the same.
    expect(badRanges(buf)).toEqual([{ offset: bodyAt, bytes: bodyShaped.length, reason: 'CRC mismatch' }]);
    const ranges = badRanges(buf, new ResyncBudget(50_000));
    expect(ranges).toEqual([{ offset: bodyAt, bytes: bodyShaped.length, reason: 'CRC mismatch', unsearchedFrom: expect.any(Number) }]);
    expect(ranges[0]!.unsearchedFrom).toBeGreaterThan(bodyAt);
    // Its length damaged instead: nowhere to resume, the rest goes.
    const lengthHit = Buffer.from(buf);
    lengthHit.writeUInt32LE(lengthHit.readUInt32LE(bodyAt) + 1, bodyAt);
    expect(badRanges(lengthHit, new ResyncBudget(50_000))).toEqual([
      { offset: bodyAt, bytes: buf.length - bodyAt, reason: 'CRC mismatch', unsearchedFrom: expect.any(Number) },
    ]);
  });

  it('segment - repair across many bad frames that each claim a long record: the checksums of the bad frames count against the budget too', () => {
    // Valid frame, then a bad one claiming 100 KiB, again and again: checking each
    // bad frame in turn was quadratic even with every search cheap.
    const length = 100 * 1024;
    const units: Buffer[] = [];
    for (let i = 0; i < 6000; i++) units.push(frameOf(i + 1, 5), headerShaped(HEADER_STRIDE, length));
    const buf = segmentOf(...units, Buffer.alloc(length));
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

describe('segment header and salt', () => {
  /** An enqueue frame whose message body holds `inside` (and some padding after it, so a tear can fall behind it). */
  const carrying = (lsn: number, inside: Buffer, salt: number) =>
    encodeFrame(encodeChange({ lsn, change: { kind: 'enqueue', queue: 'evil', message: { ...message(lsn), bytes: Buffer.concat([inside, Buffer.alloc(64, 0x20)]) } }, durable: true }), salt);
  /** What a client can compute: a whole frame of a record it chose, checked from 0 (CRC-32C is public). */
  const forged = encodeFrame(encodeChange({ lsn: 900, change: { kind: 'queue-delete', name: 'victim' }, durable: true }), 0);

  it('segment - a frame forged inside a message body is not taken for a record after a torn write: the tail is torn, and --repair keeps no forged record', () => {
    const before = frameOf(1, 0);
    const evil = carrying(2, forged, SALT);
    const forgedEnd = evil.indexOf(forged) + forged.length;
    // A crash tore the write of the evil record behind the forged frame it holds.
    const torn = segmentOf(before, evil.subarray(0, forgedEnd + 10));
    const scan = scanSegment(torn);
    expect(scan.records.map((r) => r.entry.lsn)).toEqual([1]);
    expect(scan.bad).toMatchObject({ offset: SEGMENT_HEADER_BYTES + before.length, after: { status: 'none' } });
    expect(badRanges(torn)).toEqual([{ offset: SEGMENT_HEADER_BYTES + before.length, bytes: torn.length - SEGMENT_HEADER_BYTES - before.length, reason: expect.any(String) }]);

    // Without a salt (a segment from before salts), the same bytes make the forged
    // frame a record: the tear reads as damage, and --repair would keep a queue-delete
    // nobody sent. This is what the salt closes.
    const legacy = Buffer.concat([encodeFrame(encodeChange({ lsn: 1, change: sampleChanges()[0]!, durable: true }), 0), carrying(2, forged, 0)]);
    const legacyTorn = legacy.subarray(0, legacy.indexOf(forged) + forged.length + 10);
    const legacyScan = scanSegment(legacyTorn);
    expect(legacyScan.bad?.after).toEqual({ status: 'found', offset: legacyTorn.indexOf(forged) });
  });

  it('segment - frames check only against their own segment\'s salt', () => {
    const frame = frameOf(5, 1);
    expect(readFrame(frame, 0, SALT).status).toBe('ok');
    expect(readFrame(frame, 0, SALT ^ 1)).toEqual({ status: 'bad', reason: 'CRC mismatch' });
    expect(readFrame(frame, 0, 0)).toEqual({ status: 'bad', reason: 'CRC mismatch' });
  });

  it('segment - a segment from before salts (no header) still reads, frames from offset 0 checked from 0', () => {
    const frames = [1, 2, 3].map((lsn) => encodeFrame(encodeChange({ lsn, change: sampleChanges()[lsn]!, durable: true }), 0));
    const scan = scanSegment(Buffer.concat(frames));
    expect(scan.bad).toBeUndefined();
    expect(scan.records.map((r) => [r.offset, r.entry.lsn])).toEqual([[0, 1], [frames[0]!.length, 2], [frames[0]!.length + frames[1]!.length, 3]]);
    expect(readSegmentHeader(Buffer.concat(frames).subarray(0, SEGMENT_HEADER_BYTES))).toEqual({ status: 'ok', layout: { salt: 0, dataStart: 0 } });
    expect(readSegmentHeader(Buffer.alloc(0))).toEqual({ status: 'ok', layout: { salt: 0, dataStart: 0 } });
  });

  it('segment - a header cut short is a torn tail at 0; one damaged copy costs nothing; both damaged, or an unknown format, is damage', () => {
    const frames = [frameOf(1, 0), frameOf(2, 1)];
    const whole = segmentOf(...frames);
    for (let cut = 1; cut < SEGMENT_HEADER_BYTES; cut++) {
      const scan = scanSegment(whole.subarray(0, cut));
      expect(scan, `cut at ${cut}`).toMatchObject({ goodEnd: 0, bad: { offset: 0, after: { status: 'none' } } });
      expect(badRanges(whole.subarray(0, cut))).toEqual([{ offset: 0, bytes: cut, reason: `segment header cut short (${cut} bytes)` }]);
    }
    expect(scanSegment(whole.subarray(0, SEGMENT_HEADER_BYTES))).toEqual({ records: [], goodEnd: SEGMENT_HEADER_BYTES, fileSize: SEGMENT_HEADER_BYTES });

    for (const hit of [0, 5, 9, 13, 16, 21, 25, 30]) {
      const one = Buffer.from(whole);
      one[hit]! ^= 0x10;
      const scan = scanSegment(one);
      expect(scan.bad, `byte ${hit}`).toBeUndefined();
      expect(scan.records).toHaveLength(2);
    }
    const both = Buffer.from(whole);
    both[9]! ^= 1;
    both[25]! ^= 1;
    expect(scanSegment(both).bad).toMatchObject({ offset: 0, after: { status: 'unsalted' } });
    // --repair solves the salt from the first frame, checks it on the second, and rebuilds the header.
    expect(badRanges(both)).toEqual([{ offset: 0, bytes: SEGMENT_HEADER_BYTES, reason: expect.stringContaining('both copies of the segment header'), rewrite: HEADER }]);
    // With the first frame damaged too, nothing confirms a salt: the segment goes whole.
    const worse = Buffer.from(both);
    worse[SEGMENT_HEADER_BYTES + 12]! ^= 1;
    expect(badRanges(worse)).toEqual([{ offset: 0, bytes: worse.length, reason: expect.stringContaining('both copies of the segment header'), unsalted: true }]);
    // A segment of one frame is not rebuilt either: one frame solves for some salt whatever its bytes.
    const single = segmentOf(frames[0]!);
    single[9]! ^= 1;
    single[25]! ^= 1;
    expect(badRanges(single)).toMatchObject([{ offset: 0, bytes: single.length, unsalted: true }]);

    const future = Buffer.from(whole);
    for (const at of [0, 16]) {
      future.writeUInt32LE(2, at + 4);
      future.writeUInt32LE(crc32c(future, 0, at, at + 12), at + 12);
    }
    expect(scanSegment(future).bad).toMatchObject({ offset: 0, reason: 'segment format 2, which this version does not know', after: { status: 'unsalted' } });
    // A newer version's segment is never rebuilt as this one's.
    expect(badRanges(future)).toMatchObject([{ offset: 0, bytes: future.length, unsalted: true }]);
  });

  it('segment - the salt solved from a CRC is the one it was computed from (crc32cPrevious), over any data', () => {
    const rnd = prng(0xc3c);
    for (let round = 0; round < 500; round++) {
      const a = Buffer.from(Array.from({ length: 4 }, () => rnd.int(256)));
      const b = Buffer.from(Array.from({ length: rnd.int(2000) }, () => rnd.int(256)));
      const salt = (rnd.int(2 ** 16) * 2 ** 16 + rnd.int(2 ** 16)) >>> 0;
      const crc = crc32c(b, crc32c(a, salt));
      expect(crc32cPrevious(crc, [{ data: a, start: 0, end: 4 }, { data: b, start: 0, end: b.length }]), `round ${round}`).toBe(salt);
    }
  });

  it('segment - every new salt is a u32 other than 0, and they differ', () => {
    const salts = new Set(Array.from({ length: 1000 }, () => newSalt()));
    expect(salts.size).toBeGreaterThan(995);
    for (const s of salts) expect(s > 0 && s <= 0xffff_ffff && Number.isInteger(s)).toBe(true);
  });
});

// A seeded fuzz of the segment reader (src/store/segment.ts scanSegment, badRanges)
// and of recovery over it (src/store/recovery.ts, through Journal.open). Real
// segments, written by a Journal (salted headers, every record kind), are damaged:
// raw bytes (flips, edge values, length fields made huge, cuts, insertions,
// deletions, splices, zeroed runs), frames whose payload is mutated under a CRC
// recomputed from the segment's salt (the CRC then proves nothing, the record codec
// and the index must judge), frame lengths rewritten, and headers damaged (one copy
// or both, a new salt or an unknown format under a good header CRC). scanSegment and
// badRanges must return, quickly, with answers inside the file; Journal.open on the
// data dir (replaying, or with --repair) must open or refuse with a StoreError:
// never another exception, a hang, or memory out of proportion to the segment.
//
// TANDEM_FUZZ_SEED changes the run; TANDEM_FUZZ_CASES the number of cases.
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { crc32c } from '../../../src/store/crc32c.js';
import { isStoreError } from '../../../src/store/errors.js';
import { Journal } from '../../../src/store/journal.js';
import { badRanges, encodeFrame, encodeSegmentHeader, listSegments, readSegmentHeader, scanSegment, SEGMENT_HEADER_BYTES, segmentPath } from '../../../src/store/segment.js';
import { mutate, mutateSome, type Random } from '../../helpers/mutate.js';
import { durable, prng, removeDir, sampleChanges, tempDir, Workload, withTimeout } from './helpers.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x5e6022);
const CASES = Number(process.env.TANDEM_FUZZ_CASES ?? 6000);
const OPEN_CASES = Math.ceil(CASES / 20);
/** One scan of a segment of tens of KiB: far above this is a stall. */
const SCAN_MS = 2000;
const OPEN_MS = 10_000;
const GROWTH_BOUND = 256 * 1024 * 1024;

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await removeDir(d);
});
const quiet = { info() {}, warn() {}, error() {} };

let base = '';
let ids: number[] = [];
const segments = new Map<number, Buffer>();

/** A segment damaged in one of the ways a disk, a cut write or a forger would. */
function damaged(buf: Buffer, r: Random, donor: Buffer): { bytes: Buffer; how: string } {
  const head = readSegmentHeader(buf.subarray(0, SEGMENT_HEADER_BYTES));
  const salt = head.status === 'ok' ? head.layout.salt : 0;
  const frames = scanSegment(buf).records;
  const way = r.int(6);
  if (way <= 1 || frames.length === 0) return { bytes: mutateSome(buf, r, donor), how: 'raw' };
  if (way === 2) {
    // A frame's payload mutated, then framed again under a good CRC.
    const f = r.pick(frames);
    const payload = mutateSome(buf.subarray(f.offset + 8, f.offset + f.size), r, donor);
    const bytes = Buffer.concat([buf.subarray(0, f.offset), encodeFrame(payload, salt), buf.subarray(f.offset + f.size)]);
    return { bytes, how: `frame at ${f.offset} re-framed (${payload.length} bytes)` };
  }
  if (way === 3) {
    // A frame's length field rewritten (the CRC covers it: bad unless the salt's CRC is redone too).
    const f = r.pick(frames);
    const out = Buffer.from(buf);
    out.writeUInt32LE(r.pick([0, 9, 10, f.size - 9, f.size - 7, 1 << 30, (1 << 30) + 1, 0xffffffff]) >>> 0, f.offset);
    if (r.chance(0.5)) {
      const len = out.readUInt32LE(f.offset);
      if (f.offset + 8 + len <= out.length) out.writeUInt32LE(crc32c(out, crc32c(out, salt, f.offset, f.offset + 4), f.offset + 8, f.offset + 8 + len), f.offset + 4);
    }
    return { bytes: out, how: `frame at ${f.offset} length rewritten` };
  }
  if (way === 4) {
    // The header: one copy or both damaged, or rewritten whole (a new salt, an unknown format) under good CRCs.
    const out = Buffer.from(buf);
    const op = r.int(4);
    if (op === 0) return { bytes: mutate(out, r, r.pick(['flip', 'byte', 'zero'] as const), donor, [0, 16]), how: 'header copy 1' };
    if (op === 1) return { bytes: mutate(mutate(out, r, 'zero', donor, [0, 16]), r, 'flip', donor, [16, 32]), how: 'both header copies' };
    if (op === 2) {
      encodeSegmentHeader(r.pick([1, 0xffffffff, salt ^ 1])).copy(out, 0);
      return { bytes: out, how: 'header with another salt' };
    }
    const header = encodeSegmentHeader(salt);
    for (let at = 0; at < 32; at += 16) {
      header.writeUInt32LE(r.pick([0, 2, 0xffffffff]), at + 4);
      header.writeUInt32LE(crc32c(header, 0, at, at + 12), at + 12);
    }
    header.copy(out, 0);
    return { bytes: out, how: 'header of an unknown format' };
  }
  // Frames that forge records: a donor segment's frames re-framed under this salt, spliced in.
  const donorFrames = scanSegment(donor).records;
  if (donorFrames.length === 0) return { bytes: mutateSome(buf, r, donor), how: 'raw' };
  const d = r.pick(donorFrames);
  const forged = encodeFrame(donor.subarray(d.offset + 8, d.offset + d.size), salt);
  const at = r.pick(frames).offset;
  return { bytes: Buffer.concat([buf.subarray(0, at), forged, buf.subarray(at + (r.chance(0.5) ? 0 : r.int(64)))]), how: `forged frame spliced at ${at}` };
}

describe('journal segment - seeded fuzz', () => {
  beforeAll(async () => {
    base = await tempDir('tandem-seg-fuzz-');
    dirs.push(base);
    const { journal } = await Journal.open({ dataDir: base, autoCompact: false, checkpoint: false, segmentBytes: 16 * 1024 });
    let lsn = 0;
    // (Not the sample of a message id of 2^53 - 1: the journal reserves ids past the highest.)
    for (const change of sampleChanges()) if (change.kind !== 'enqueue' || change.message.id < 1e9) journal.append({ lsn: ++lsn, change, durable: true });
    const work = new Workload(prng(SEED), lsn);
    for (let i = 0; i < 1500; i++) {
      const e = work.step();
      if (e) journal.append(e);
    }
    await durable(journal, work.lsn);
    await journal.close({ checkpoint: false });
    const dir = path.join(base, 'journal');
    ids = await listSegments(dir);
    for (const id of ids) segments.set(id, readFileSync(segmentPath(dir, id)));
    expect(ids.length).toBeGreaterThan(3);
  });

  it(`scanSegment and badRanges read ${CASES} damaged segments without throwing, quickly, and answer inside the file`, () => {
    const r = prng(SEED);
    const counts = { whole: 0, bad: 0 };
    for (let i = 0; i < CASES; i++) {
      const id = r.pick(ids);
      const { bytes, how } = damaged(segments.get(id)!, r, segments.get(r.pick(ids))!);
      const where = `seed ${SEED} case ${i} (segment ${id}, ${how})`;
      const t0 = performance.now();
      const scan = scanSegment(bytes);
      const ranges = badRanges(bytes);
      const ms = performance.now() - t0;
      expect(ms, `${ms} ms: ${where}`).toBeLessThan(SCAN_MS);
      expect(scan.goodEnd, where).toBeLessThanOrEqual(bytes.length);
      expect(scan.fileSize, where).toBe(bytes.length);
      for (const rec of scan.records) expect(rec.offset + rec.size, where).toBeLessThanOrEqual(scan.goodEnd);
      if (scan.bad) {
        counts.bad++;
        expect(scan.bad.offset, where).toBe(scan.goodEnd);
        if (scan.bad.after.status === 'found') expect(scan.bad.after.offset, where).toBeGreaterThan(scan.bad.offset);
        expect(ranges.length, where).toBeGreaterThan(0);
      } else counts.whole++;
      // Ranges in order, not overlapping, inside the file.
      let end = 0;
      for (const range of ranges) {
        expect(range.offset, where).toBeGreaterThanOrEqual(end);
        expect(range.bytes, where).toBeGreaterThan(0);
        end = range.offset + range.bytes;
        expect(end, where).toBeLessThanOrEqual(bytes.length);
      }
    }
    console.log(`segment fuzz (scan): ${JSON.stringify(counts)}`);
    expect(Math.min(counts.whole, counts.bad)).toBeGreaterThan(CASES / 20);
  });

  it(`Journal.open on ${OPEN_CASES} data dirs with a damaged segment opens (replaying or repairing) or refuses with a StoreError`, async () => {
    const r = prng(SEED + 1);
    const counts = { opened: 0, refused: 0, repaired: 0 };
    const refusals = new Map<string, number>();
    for (let i = 0; i < OPEN_CASES; i++) {
      const id = r.pick(ids);
      const { bytes, how } = damaged(segments.get(id)!, r, segments.get(r.pick(ids))!);
      const repair = r.chance(0.25);
      const where = `seed ${SEED + 1} case ${i} (segment ${id}, ${how}${repair ? ', --repair' : ''})`;
      const dir = await tempDir('tandem-seg-case-');
      dirs.push(dir);
      cpSync(base, dir, { recursive: true });
      writeFileSync(segmentPath(path.join(dir, 'journal'), id), bytes);
      const before = process.memoryUsage().rss;
      try {
        const { journal, recovered } = await withTimeout(Journal.open({ dataDir: dir, autoCompact: false, checkpoint: false, materialize: true, repair, logger: quiet }), OPEN_MS, where);
        void recovered.changes;
        await journal.close({ checkpoint: false });
        counts[repair ? 'repaired' : 'opened']++;
      } catch (err) {
        expect(isStoreError(err), `${(err as Error)?.constructor?.name}: ${(err as Error)?.message} at ${where}\n${(err as Error)?.stack}`).toBe(true);
        // --repair removes what is bad: only what it cannot mend (none here) may refuse it.
        const key = (err as Error).constructor.name;
        refusals.set(key, (refusals.get(key) ?? 0) + 1);
        counts.refused++;
      }
      const grown = process.memoryUsage().rss - before;
      expect(grown, `RSS grew by ${grown} bytes: ${where}`).toBeLessThan(GROWTH_BOUND);
      await removeDir(dir);
    }
    console.log(`segment fuzz (open): ${JSON.stringify(counts)}; refused with ${JSON.stringify(Object.fromEntries(refusals))}`);
    expect(Math.min(counts.opened, counts.refused)).toBeGreaterThan(OPEN_CASES / 20);
  }, 240_000);
});

// Rebuild the journal's state from its segments at start.
//
// Reads the segments in order (from a checkpoint's position when one is given)
// and applies each record to the LiveIndex in file order, as it is decoded: no
// map of every record, no message object (the index keeps rows of numbers; see
// live-index.ts for why file order gives the same state as LSN order).
//
// A bad frame with nothing valid after it, in the last segment holding data, is a
// write torn by a crash: it was never confirmed (its fdatasync had not returned),
// so it is cut away and the start continues. A bad frame followed by valid data
// is damage: open fails with JournalCorruptError, unless `repair` is set, in which
// case every frame that fails its check is removed, reading resynchronising on the
// next valid frame, so every valid record is kept; each segment changed is kept as
// it was as *.corrupt for the operator, and each removal is logged. The search for
// valid frames has a budget (segment.ts): when it gives up, whether valid frames
// follow is unknown, which is damage too, never a torn tail; --repair then removes
// what it could not search (up to where the bad frame says it ends, if a valid
// frame starts there, else the rest of the segment) and says that it may have
// held valid records.

import { copyFile, open, rename, stat, writeFile } from 'node:fs/promises';
import { JournalCorruptError } from './errors.js';
import { syncDir, nodeIo } from './io.js';
import { LiveIndex, type Location } from './live-index.js';
import { badRanges, listSegments, scanSegment, segmentHeaderOf, segmentPath, type SegmentScan } from './segment.js';
import type { RecordBody } from './record-codec.js';

export interface RecoveryLogger {
  info(o: object, msg?: string): void;
  warn(o: object, msg?: string): void;
  error(o: object, msg?: string): void;
}

export interface RecoveryResult {
  index: LiveIndex;
  /** Highest LSN of any record or reservation. */
  lastLsn: number;
  /** Highest LSN of a change (reservations not counted): how far the log itself went. */
  lastChangeLsn: number;
  epoch: number;
  /** Highest segment id present (0 if none). */
  lastSegment: number;
  /** What was read: records and bytes (after a checkpoint's position only, if one was used). */
  replayed: { records: number; bytes: number };
  /** End of the last good record read (or the start position): the synced end of the journal. */
  end: { seg: number; offset: number };
  /** The last good record read (or the start's), ending at `end`. */
  lastFrame: { seg: number; offset: number; size: number; lsn: number } | undefined;
}

/** Where to start: an index loaded from a checkpoint and the position it covers. */
export interface RecoveryStart {
  index: LiveIndex;
  seg: number;
  offset: number;
  /** Highest LSN the checkpoint knows (records and reservations). */
  lastLsn: number;
  lastFrame: RecoveryResult['lastFrame'];
}

export interface RecoveryOptions {
  repair?: boolean;
  logger?: RecoveryLogger;
  start?: RecoveryStart;
  /** Sees every record read, after the index (dedup-recovery.ts collects window keys). */
  onRecord?: (lsn: number, body: RecordBody) => void;
}

export async function recoverJournal(dir: string, opts: RecoveryOptions): Promise<RecoveryResult> {
  const log = opts.logger;
  const allIds = await listSegments(dir);
  const allSizes = await Promise.all(allIds.map(async (id) => (await stat(segmentPath(dir, id))).size));
  const start = opts.start;
  const index = start?.index ?? new LiveIndex();
  const from = start ? { seg: start.seg, offset: start.offset } : { seg: 0, offset: 0 };
  const first = allIds.findIndex((id) => id >= from.seg);
  const ids = first < 0 ? [] : allIds.slice(first);
  const sizes = first < 0 ? [] : allSizes.slice(first);
  const segmentBytes = new Map<number, number>(allIds.map((id, k) => [id, allSizes[k]!]));
  const lastSegment = allIds.at(-1) ?? 0;
  let lastLsn = start?.lastLsn ?? 0;
  let records = 0;
  let bytes = 0;
  let end = { seg: from.seg, offset: from.offset };
  let lastFrame = start?.lastFrame;
  // Read the next segment while this one is decoded (a failed read surfaces when awaited).
  const buffers = new SegmentBuffers();
  const readSegment = (k: number): Promise<Buffer> | undefined => {
    if (k >= ids.length) return undefined;
    const p = buffers.read(segmentPath(dir, ids[k]!), sizes[k]!);
    p.catch(() => undefined);
    return p;
  };
  let nextRead = readSegment(0);

  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    const file = segmentPath(dir, id);
    const read = await nextRead!;
    nextRead = readSegment(i + 1);
    const buf = opts.repair ? await dropBadFrames(dir, file, read, log) : read;
    const startAt = id === from.seg ? from.offset : 0;
    if (buf.length < startAt) {
      throw new JournalCorruptError(file, buf.length, `the segment ends before offset ${startAt}, where the checkpoint says the journal continues`);
    }
    // Bodies are views into `buf`: the index copies the numbers it keeps, nothing keeps a view.
    const scan = scanSegment(buf, {
      copyBodies: false,
      start: startAt,
      onRecord: (r) => {
        const loc: Location = { seg: id, offset: r.offset, size: r.size };
        const body = r.entry.change;
        index.apply(r.entry.lsn, body, loc);
        opts.onRecord?.(r.entry.lsn, body);
        lastLsn = Math.max(lastLsn, body.kind === 'lsn-reservation' ? body.upTo : r.entry.lsn);
        records++;
        bytes += r.size;
        end = { seg: id, offset: r.offset + r.size };
        lastFrame = { seg: id, offset: r.offset, size: r.size, lsn: r.entry.lsn };
      },
    });
    let segEnd = scan.fileSize;
    if (scan.bad) {
      const laterData = await anyHoldsFrames(ids.slice(i + 1).map((later) => segmentPath(dir, later)));
      if (scan.bad.after.status === 'none' && !laterData) {
        log?.warn(
          { file, offset: scan.bad.offset, reason: scan.bad.reason, cutBytes: scan.fileSize - scan.goodEnd },
          'journal ends in a torn record (crash during a write); cutting it off',
        );
        await truncateFile(file, scan.goodEnd);
        segEnd = scan.goodEnd;
      } else {
        throw new JournalCorruptError(file, scan.bad.offset, damageReason(scan.bad));
      }
    }
    segmentBytes.set(id, segEnd);
  }

  // Byte counts from the files themselves: they include duplicates and dead records.
  // Segments a checkpoint knew but that compaction deleted since are forgotten.
  for (const id of [...index.segments.keys()]) if (!segmentBytes.has(id)) index.dropSegment(id);
  for (const [id, b] of segmentBytes) index.segment(id).bytes = b;
  log?.info(
    { segments: ids.length, records, live: index.messageCount, lastLsn, epoch: index.epoch, fromCheckpoint: start !== undefined },
    'journal recovered',
  );
  return { index, lastLsn, lastChangeLsn: index.newestLsn, epoch: index.epoch, lastSegment, replayed: { records, bytes }, end, lastFrame };
}

/** Why a bad frame is damage rather than a torn tail, for JournalCorruptError. */
function damageReason(bad: NonNullable<SegmentScan['bad']>): string {
  const { after } = bad;
  switch (after.status) {
    case 'found':
      return `${bad.reason}; a valid record follows at byte offset ${after.offset}`;
    case 'none': // reported as damage only when later segments hold data
      return `${bad.reason}; later segments hold records`;
    case 'unsalted':
      return `${bad.reason} (--repair rebuilds the header if the salt can be solved from its frames, else removes the segment, logging its size)`;
    case 'gave-up':
      return (
        `${bad.reason}; the search for a valid record after it gave up at byte offset ${after.offset}, ` +
        `after checksumming ${after.checked} bytes of data shaped like record headers, so valid records may follow ` +
        `and this cannot be taken for a torn write (--repair removes what it cannot search and logs how much)`
      );
  }
}

/**
 * --repair: remove every frame of a segment that fails its check, resynchronising on
 * the next valid frame (so a bad record costs only itself, and the valid records
 * after it stay), and write the segment back. The segment as it was is kept as
 * *.corrupt; each removal is logged. If the search for valid frames gives up
 * (segment.ts), what it did not search is removed, and the log says it may have
 * held valid records. Returns the segment's content as it now is.
 */
async function dropBadFrames(dir: string, file: string, buf: Buffer, log: RecoveryLogger | undefined): Promise<Buffer> {
  const removed = badRanges(buf);
  if (removed.length === 0) return buf;
  const kept: Buffer[] = [];
  let keptFrom = 0;
  for (const r of removed) {
    kept.push(buf.subarray(keptFrom, r.offset));
    if (r.rewrite) kept.push(r.rewrite);
    keptFrom = r.offset + r.bytes;
  }
  kept.push(buf.subarray(keptFrom));
  const repaired = Buffer.concat(kept);
  await copyFile(file, `${file}.corrupt`);
  const tmp = `${file}.repair`;
  await writeFile(tmp, repaired);
  const fh = await open(tmp, 'r+');
  try {
    await fh.datasync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  await syncDir(nodeIo, dir);
  let unsearched = 0;
  for (const r of removed) {
    if (r.rewrite) {
      log?.error({ file, offset: r.offset, bytes: r.bytes, reason: r.reason, keptAs: `${file}.corrupt` }, `REPAIR: rebuilt the damaged header of ${file} (${r.reason}); its records are kept`);
      continue;
    }
    if (r.unsalted) {
      unsearched += r.bytes;
      log?.error(
        { file, offset: r.offset, bytes: r.bytes, reason: r.reason, keptAs: `${file}.corrupt` },
        `REPAIR: removed all ${r.bytes} bytes of ${file}: ${r.reason}, so they MAY HAVE HELD VALID RECORDS, lost unless recovered from ${file}.corrupt or an HA peer`,
      );
      continue;
    }
    if (r.unsearchedFrom === undefined) {
      log?.error({ file, offset: r.offset, bytes: r.bytes, reason: r.reason, keptAs: `${file}.corrupt` }, 'REPAIR: removed unreadable bytes from the journal; the valid records after them are kept');
      continue;
    }
    const bytes = r.offset + r.bytes - r.unsearchedFrom;
    unsearched += bytes;
    const end = r.offset + r.bytes;
    log?.error(
      { file, offset: r.offset, bytes: r.bytes, reason: r.reason, unsearchedFrom: r.unsearchedFrom, unsearchedBytes: bytes, keptAs: `${file}.corrupt` },
      `REPAIR: removed ${r.bytes} bytes from byte offset ${r.offset}: the search for valid records after the bad one there gave up at byte offset ` +
        `${r.unsearchedFrom} (too much of what follows is shaped like record headers to checksum it all), so the ${bytes} bytes from there ` +
        (end < buf.length ? `to byte offset ${end}, where the bad record's length says it ends and a valid one starts, ` : 'to the end of the segment ') +
        `were not searched and MAY HAVE HELD VALID RECORDS, lost unless recovered from ${file}.corrupt or an HA peer`,
    );
  }
  // A rebuilt header removes nothing: said above, not counted here.
  const removals = removed.filter((r) => !r.rewrite).length;
  if (removals === 0) return repaired;
  log?.error(
    { file, removedRanges: removals, removedBytes: buf.length - repaired.length, unsearchedBytes: unsearched, keptAs: `${file}.corrupt` },
    unsearched === 0
      ? `REPAIR: ${removals} unreadable range(s), ${buf.length - repaired.length} bytes, removed from ${file}; every valid record kept (the segment as it was is ${file}.corrupt)`
      : `REPAIR: ${removals} range(s), ${buf.length - repaired.length} bytes, removed from ${file}, ${unsearched} of them unsearched (they may have held valid records; the segment as it was is ${file}.corrupt)`,
  );
  return repaired;
}

/**
 * Two read buffers used in turn (one being decoded, one being filled). Reusing
 * them matters: a fresh 64 MiB buffer per segment costs a page fault per 4 KiB,
 * which made reading a 1 GiB journal ten times slower than the copy itself. Safe
 * because nothing decoded keeps a view into the buffer.
 */
class SegmentBuffers {
  private readonly bufs = [Buffer.alloc(0), Buffer.alloc(0)];
  private turn = 0;

  async read(file: string, size: number): Promise<Buffer> {
    const i = this.turn;
    this.turn ^= 1;
    if (this.bufs[i]!.length < size) this.bufs[i] = Buffer.allocUnsafe(size);
    const buf = this.bufs[i]!;
    const fh = await open(file, 'r');
    try {
      let done = 0;
      // Bounded: each pass reads at least one byte or stops.
      while (done < size) {
        const { bytesRead } = await fh.read(buf, done, size - done, done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return buf.subarray(0, done);
    } finally {
      await fh.close();
    }
  }
}

/** Whether any of these segment files holds more than a header (a damaged header counts: it may). */
async function anyHoldsFrames(files: string[]): Promise<boolean> {
  for (const file of files) {
    const fh = await open(file, 'r');
    try {
      const size = (await fh.stat()).size;
      const header = await segmentHeaderOf(fh);
      if (header.status === 'damaged' || (header.status === 'ok' && size > header.layout.dataStart)) return true;
    } finally {
      await fh.close();
    }
  }
  return false;
}

async function truncateFile(file: string, length: number): Promise<void> {
  const fh = await open(file, 'r+');
  try {
    await fh.truncate(length);
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

// Rebuild the journal's state from its segments at start.
//
// Reads every segment in order. A bad frame with nothing valid after it, in the
// last segment holding data, is a write torn by a crash: it was never confirmed
// (its fdatasync had not returned), so it is cut away and the start continues.
// A bad frame followed by valid data is damage: open fails with
// JournalCorruptError, unless `repair` is set, in which case the journal is cut at
// that frame and the cut segments are kept as *.corrupt for the operator.
//
// Compaction may leave two copies of a record (crash between copy and delete):
// the same LSN read twice is one record. The first copy in segment order is the
// original and the most complete (a copied transaction keeps only its live part).

import { copyFile, open, rename, stat } from 'node:fs/promises';
import type { LoggedChange, MessageRecord } from '../broker/changes.js';
import { JournalCorruptError } from './errors.js';
import { syncDir, nodeIo } from './io.js';
import { LiveIndex, type Location } from './live-index.js';
import type { RecordBody } from './record-codec.js';
import { listSegments, scanSegment, segmentPath } from './segment.js';

export interface RecoveryLogger {
  info(o: object, msg?: string): void;
  warn(o: object, msg?: string): void;
  error(o: object, msg?: string): void;
}

export interface RecoveryResult {
  index: LiveIndex;
  changes: LoggedChange[];
  /** Highest LSN of any record or reservation. */
  lastLsn: number;
  /** Highest LSN of a change (reservations not counted): how far the log itself went. */
  lastChangeLsn: number;
  epoch: number;
  /** Highest segment id present (0 if none). */
  lastSegment: number;
}

interface Found {
  lsn: number;
  body: RecordBody;
  home: Location;
  segs: number[];
}

export interface RecoveryOptions {
  repair?: boolean;
  logger?: RecoveryLogger;
  /** Turn each recovered message into a paged stand-in (see JournalOptions.pageRecovered). */
  pageRecovered?: (message: MessageRecord, queue: string) => MessageRecord;
}

export async function recoverJournal(dir: string, opts: RecoveryOptions): Promise<RecoveryResult> {
  const page = opts.pageRecovered;
  const log = opts.logger;
  const ids = await listSegments(dir);
  const sizes = await Promise.all(ids.map(async (id) => (await stat(segmentPath(dir, id))).size));
  // Changes by LSN; reservations by upTo (their LSN slot may repeat a change's LSN).
  const found = new ChangesByLsn();
  const reservations = new Map<number, Found>();
  const segmentBytes = new Map<number, number>();
  let lastSegment = ids.at(-1) ?? 0;
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
    const buf = await nextRead!;
    nextRead = readSegment(i + 1);
    // Paging: bodies are views into `buf` until page() replaces them, so no body is copied.
    const scan = scanSegment(buf, { copyBodies: !page });
    if (page) for (const r of scan.records) pageMessages(r.entry.change, page);
    let end = scan.fileSize;
    let stop = false;
    if (scan.bad) {
      const laterData = sizes.slice(i + 1).some((s) => s > 0);
      if (!scan.bad.validAfter && !laterData) {
        log?.warn(
          { file, offset: scan.bad.offset, reason: scan.bad.reason, cutBytes: scan.fileSize - scan.goodEnd },
          'journal ends in a torn record (crash during a write); cutting it off',
        );
        await truncateFile(file, scan.goodEnd);
        end = scan.goodEnd;
      } else if (opts.repair) {
        log?.error(
          { file, offset: scan.bad.offset, reason: scan.bad.reason, keptAs: `${file}.corrupt` },
          'REPAIR: journal is corrupt; cutting it at this record. Records after it are lost; the cut segments are kept as *.corrupt',
        );
        await copyFile(file, `${file}.corrupt`);
        for (const later of ids.slice(i + 1)) {
          const p = segmentPath(dir, later);
          await rename(p, `${p}.corrupt`);
          log?.error({ file: p, keptAs: `${p}.corrupt` }, 'REPAIR: segment after the cut moved aside');
        }
        await truncateFile(file, scan.bad.offset);
        await syncDir(nodeIo, dir);
        end = scan.bad.offset;
        lastSegment = id;
        stop = true;
      } else {
        throw new JournalCorruptError(file, scan.bad.offset, scan.bad.reason);
      }
    }
    segmentBytes.set(id, end);
    for (const r of scan.records) {
      const loc: Location = { seg: id, offset: r.offset, size: r.size };
      const body = r.entry.change;
      // Reservations are not changes: their LSN slot may repeat a change's LSN.
      const seen = body.kind === 'lsn-reservation' ? reservations.get(body.upTo) : found.get(r.entry.lsn);
      if (seen) {
        seen.home = loc;
        seen.segs.push(id);
      } else {
        const f: Found = { lsn: r.entry.lsn, body, home: loc, segs: [id] };
        if (body.kind === 'lsn-reservation') reservations.set(body.upTo, f);
        else found.add(f);
      }
    }
    if (stop) break;
  }

  const index = new LiveIndex();
  const all = found.inOrder(reservations.values());
  let lastLsn = 0;
  for (const f of all) {
    index.apply(f.lsn, f.body, f.home, f.segs, true);
    if (f.body.kind === 'lsn-reservation') lastLsn = Math.max(lastLsn, f.body.upTo);
    else lastLsn = Math.max(lastLsn, f.lsn);
  }
  // Byte counts from the files themselves: they include duplicates and dead records.
  for (const [id, bytes] of segmentBytes) index.segment(id).bytes = bytes;
  const changes: LoggedChange[] = index.liveChanges().map((c) => ({ lsn: c.lsn, change: c.change, durable: true }));
  index.releaseBodies();
  log?.info(
    { segments: ids.length, records: all.length, live: changes.length, lastLsn, epoch: index.epoch },
    'journal recovered',
  );
  return { index, changes, lastLsn, lastChangeLsn: index.newestLsn, epoch: index.epoch, lastSegment };
}

/**
 * Records by LSN. Segments are written in LSN order, so nearly every record is
 * newer than all before it and goes on the end of a sorted array; a copy made by
 * compaction (an older LSN in a newer segment) is found there by binary search.
 * Only what fits neither (rare) goes to a map. A map of every record was the
 * biggest cost of recovering a million records.
 */
class ChangesByLsn {
  private readonly ordered: Found[] = [];
  private readonly others = new Map<number, Found>();

  get(lsn: number): Found | undefined {
    const o = this.ordered;
    if (o.length > 0 && lsn <= o[o.length - 1]!.lsn) {
      let lo = 0;
      let hi = o.length - 1;
      while (lo <= hi) {
        const mid = (lo + hi) >>> 1;
        const v = o[mid]!.lsn;
        if (v === lsn) return o[mid];
        if (v < lsn) lo = mid + 1;
        else hi = mid - 1;
      }
    }
    return this.others.get(lsn);
  }

  add(f: Found): void {
    const o = this.ordered;
    if (o.length === 0 || f.lsn > o[o.length - 1]!.lsn) o.push(f);
    else this.others.set(f.lsn, f);
  }

  /** Every record plus `extra`, in LSN order. */
  inOrder(extra: Iterable<Found>): Found[] {
    const more = [...this.others.values(), ...extra];
    if (more.length === 0) return this.ordered;
    return this.ordered.concat(more).sort((a, b) => a.lsn - b.lsn);
  }
}

/**
 * Two read buffers used in turn (one being decoded, one being filled). Reusing
 * them matters: a fresh 64 MiB buffer per segment costs a page fault per 4 KiB,
 * which made reading a 1 GiB journal ten times slower than the copy itself. Safe
 * because nothing decoded keeps a view into the buffer: bodies are copied, or
 * replaced by paged stand-ins before the buffer is reused.
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

function pageMessages(body: RecordBody, page: (message: MessageRecord, queue: string) => MessageRecord): void {
  if (body.kind === 'enqueue') body.message = page(body.message, body.queue);
  else if (body.kind === 'transaction' || body.kind === 'dr-transaction') for (const op of body.changes) pageMessages(op, page);
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

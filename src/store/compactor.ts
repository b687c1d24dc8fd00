// Background compaction: keep disk use proportional to live data.
//
// Oldest segment first (deleting an old segment can free a newer one whose
// tombstones were waiting for it). A segment with nothing live, whose tombstones
// no longer have targets on disk, is deleted. A segment mostly dead has its live
// records copied into the active segment first (same LSN; a transaction keeps only
// its live enqueues), and is deleted once the copies are synced.
//
// Crash safety, step by step: copies are synced before the old segment is
// unlinked, so a crash in between leaves both copies, and recovery keeps one per
// LSN. Relocation in the index happens when a copy is queued, so a kill arriving
// before the copy is synced already counts the copy as a tombstone target.

import { readFile, unlink } from 'node:fs/promises';
import { JournalIoError } from './errors.js';
import { syncDir, type JournalIo } from './io.js';
import type { Change } from '../broker/changes.js';
import type { LiveFrame, LiveIndex, Location } from './live-index.js';
import { encodeChange } from './record-codec.js';
import { FRAME_HEADER_BYTES, readFrame, readSegmentHeader, SEGMENT_HEADER_BYTES, segmentPath } from './segment.js';
import type { RecoveryLogger } from './recovery.js';

export interface CompactorHost {
  readonly index: LiveIndex;
  readonly dir: string;
  readonly io: JournalIo;
  /**
   * Segments at or above this one are hands off: still written to, or at or after
   * the durable checkpoint's position (a restart from that checkpoint replays them).
   */
  oldestOpenSegment(): number;
  /** Queue a copy of a record (framed anew: the segment it lands in has its own salt); the promise settles after its sync. */
  writeCopy(record: Buffer): { loc: Location; synced: Promise<void> };
  /** A test for changes that queued, unsynced records will kill. */
  pendingKills(): (c: Change) => boolean;
  readonly logger?: RecoveryLogger | undefined;
  /** A segment file was unlinked (readers close their descriptors). */
  segmentDeleted?(id: number): void;
  /** A segment someone still reads dead records from (Journal.keepMessage): not deleted yet. */
  isKept?(id: number): boolean;
}

/** Live frames copied between two turns of the event loop. */
const COPY_SLICE = 8192;

export interface CompactionHooks {
  /** Called after copies are synced, before a segment file is unlinked (tests simulate crashes here). */
  beforeDelete?(file: string): void | Promise<void>;
}

export interface CompactionReport {
  deletedSegments: number[];
  copiedRecords: number;
}

export class Compactor {
  private running: Promise<CompactionReport> | undefined;
  private again = false;

  constructor(
    private readonly host: CompactorHost,
    private readonly liveRatio: number,
    private readonly hooks: CompactionHooks = {},
  ) {}

  /** Run passes until nothing more can be done. Concurrent calls share the run. */
  run(): Promise<CompactionReport> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.loop().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** A run is in progress (copies may be in flight). */
  get busy(): boolean {
    return this.running !== undefined;
  }

  idle(): Promise<void> {
    return this.running ? this.running.then(() => undefined, () => undefined) : Promise.resolve();
  }

  private async loop(): Promise<CompactionReport> {
    const report: CompactionReport = { deletedSegments: [], copiedRecords: 0 };
    do {
      this.again = false;
      while (await this.pass(report)) {
        // Progress may unlock more: go again.
      }
    } while (this.again);
    return report;
  }

  private async pass(report: CompactionReport): Promise<boolean> {
    const { index } = this.host;
    let progress = false;
    const ids = [...index.segments.keys()].sort((a, b) => a - b);
    for (const id of ids) {
      if (id >= this.host.oldestOpenSegment()) break;
      const s = index.segments.get(id);
      if (!s) continue;
      if (s.liveCount > 0 && s.liveBytes < this.liveRatio * s.bytes) {
        const copied = await this.copyForward(id, report);
        if (copied < 0) return false; // a failed copy: try again later
        // Nothing copied (all of it about to die): no progress from this segment yet.
        if (copied > 0) progress = true;
      }
      if (index.isDeletable(id) && !this.host.isKept?.(id)) {
        await this.deleteSegment(id);
        report.deletedSegments.push(id);
        progress = true;
      }
    }
    return progress;
  }

  /** Copy a segment's live records forward: how many were copied, or -1 if a copy failed. */
  private async copyForward(id: number, report: CompactionReport): Promise<number> {
    const { index } = this.host;
    const file = segmentPath(this.host.dir, id);
    const buf = await readFile(file);
    const header = readSegmentHeader(buf.subarray(0, SEGMENT_HEADER_BYTES));
    if (header.status !== 'ok') throw new JournalIoError(`compaction cannot read ${file}: ${header.reason}`);
    const { salt } = header.layout;
    // From here to the last writeCopy nothing awaits: no kill can slip in between
    // the liveness check and the relocation.
    const undos: Array<() => void> = [];
    const synced: Promise<void>[] = [];
    const copied: Array<{ frame: LiveFrame; loc: Location }> = [];
    let killedSoon = this.host.pendingKills();
    const frames = index.liveIn(id);
    for (let k = 0; k < frames.length; k++) {
      const live = frames[k]!;
      if (k > 0 && k % COPY_SLICE === 0) {
        // A segment can hold a million live frames (a copy each took ~2.6 s in one go,
        // docs/stalls.md): let clients, peers and timers in between slices. What died
        // meanwhile is not copied (stillLive), and kills queued meanwhile are seen.
        await new Promise<void>((resolve) => setImmediate(resolve));
        killedSoon = this.host.pendingKills();
      }
      if (k >= COPY_SLICE && !index.stillLive(live)) continue;
      const f = readFrame(buf, live.home.offset, salt);
      if (f.status !== 'ok' || f.entry.lsn !== live.lsn || f.size !== live.home.size) {
        throw new JournalIoError(`compaction found ${file} at offset ${live.home.offset} not holding LSN ${live.lsn} as indexed`);
      }
      let record: Buffer;
      let parts = 1;
      const body = f.entry.change;
      // About to die: leave it; the segment goes in a later pass once the kill is synced.
      if (body.kind !== 'lsn-reservation' && killedSoon(body)) continue;
      if (body.kind === 'transaction' || body.kind === 'dr-transaction') {
        const kept = index.filterTransaction(body, live.lsn);
        // Any part about to die: leave the whole record where it is. Copying a part
        // could lose it if that kill then fails (disk full) and the broker rolls it back.
        if (kept.changes.some((n) => killedSoon(n))) continue;
        record = encodeChange({ lsn: live.lsn, change: kept, durable: true });
        parts = kept.changes.length;
      } else {
        record = buf.subarray(live.home.offset + FRAME_HEADER_BYTES, live.home.offset + live.home.size);
      }
      const copy = this.host.writeCopy(record);
      undos.push(index.relocate(live, copy.loc, parts));
      synced.push(copy.synced);
      copied.push({ frame: live, loc: copy.loc });
    }
    const results = await Promise.allSettled(synced);
    let ok = true;
    results.forEach((r, i) => {
      if (r.status === 'rejected') {
        ok = false;
        undos[i]!();
      } else index.copySynced(copied[i]!.frame, copied[i]!.loc);
    });
    if (!ok) {
      this.host.logger?.warn({ segment: file }, 'compaction could not copy live records forward; will retry later');
      return -1;
    }
    report.copiedRecords += synced.length;
    return synced.length;
  }

  private async deleteSegment(id: number): Promise<void> {
    const file = segmentPath(this.host.dir, id);
    await this.hooks.beforeDelete?.(file);
    await unlink(file).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
    this.host.index.dropSegment(id);
    this.host.segmentDeleted?.(id);
    await syncDir(this.host.io, this.host.dir);
    this.host.logger?.info({ segment: file }, 'compaction removed a dead segment');
  }
}

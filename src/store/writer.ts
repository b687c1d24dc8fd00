// Group commit. append() only queues a frame and gives it its place on disk; one
// flush at a time writes everything queued as one write per segment, then one
// fdatasync (or none: with the default JournalIo segment files are opened O_DSYNC,
// so the write itself returns once the data is on disk). Whatever is queued while a
// flush is in flight goes out in the next flush, so a single sync covers every
// record that arrived during the previous one.
//
// Frames are written straight into the buffer of the next flush, not into a Buffer
// of their own that a flush then concatenates: a frame object per record and a new
// group buffer per flush were a steady stream of memory outside the V8 heap, and
// V8 runs a full collection for every ~64 MiB of it (a busy HA backup did several a
// second). Two buffers take turns: one fills while the other is being written.
//
// Failure rules:
// - disk full (ENOSPC/EDQUOT): the segment is cut back to the last synced offset,
//   the flush's records and everything queued behind them are reported failed
//   (later records may depend on them, and the broker rolls them all back), and
//   the writer carries on: the next append tries again.
// - any other I/O error is fatal: after a failed sync the page cache state is
//   unknown, so nothing more is written and every record is reported failed.

import diagnostics_channel from 'node:diagnostics_channel';
import { constants } from 'node:fs';
import { DiskFullError, JournalIoError } from './errors.js';
import { isDiskFull, syncDir, type JournalIo } from './io.js';
import type { Location } from './live-index.js';
import { recordLsn } from './record-codec.js';
import { encodeSegmentHeader, FRAME_HEADER_BYTES, newSalt, SEGMENT_HEADER_BYTES, segmentPath, writeFrame } from './segment.js';

/** Each write+sync of a flush, `{ seconds }`; timed only while someone listens (metrics). */
export const JOURNAL_SYNC_CHANNEL = 'tandem:journal:synced';
const syncChannel = diagnostics_channel.channel(JOURNAL_SYNC_CHANNEL);

// 'wx' and 'r+' with O_DSYNC, for a JournalIo with syncedWrites (see io.ts).
const O_CREATE_SYNCED = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_DSYNC;
const O_REOPEN_SYNCED = constants.O_RDWR | constants.O_DSYNC;

export interface WriterItem<T> {
  /** Where its frame is in the buffer of its flush. */
  start: number;
  loc: Location;
  /** The LSN in its record. */
  lsn: number;
  tag: T;
}

/** Size of a flush buffer to start with; it grows for a larger flush. */
const FLUSH_BUFFER_BYTES = 1024 * 1024;
/** A flush buffer larger than this is not kept for the next turn. */
const KEEP_FLUSH_BUFFER_BYTES = 16 * 1024 * 1024;

export interface WriterHooks<T> {
  /** Items now on disk and synced, in order. */
  onSynced(items: WriterItem<T>[]): void;
  /** Items that will never be on disk, in order. */
  onFailed(items: WriterItem<T>[], err: Error): void;
  /** The writer moved to a new segment (a chance to compact older ones). */
  onRoll?(seg: number): void;
}

export class SegmentWriter<T> {
  private pending: WriterItem<T>[] = [];
  /** The frames of `pending`, back to back. */
  private staging: Buffer = Buffer.allocUnsafe(FLUSH_BUFFER_BYTES);
  private staged = 0;
  /** The previous flush's buffer, once written: the next one to fill. */
  private spare: Buffer | undefined;
  /** 0 idle, 1 flush scheduled, 2 flushing */
  private state: 0 | 1 | 2 = 0;
  private activeSeg: number;
  /** The salt of the active segment's frames (segment.ts); a new one per segment. */
  private activeSalt = newSalt();
  /** The salt of each segment with frames queued or in flight, for its header. */
  private readonly salts = new Map<number, number>();
  /** Size of the active segment counting its header and queued frames. */
  private logicalSize = SEGMENT_HEADER_BYTES;
  private fd: number | undefined;
  private fdSeg = -1;
  private fatal: Error | undefined;
  private idleWaiters: Array<() => void> = [];
  private lowestUnsynced = Infinity;
  /** Test and metrics counters. */
  readonly stats = { writes: 0, syncs: 0, flushes: 0 };

  constructor(
    private readonly dir: string,
    private readonly io: JournalIo,
    private readonly segmentBytes: number,
    firstSeg: number,
    private readonly hooks: WriterHooks<T>,
  ) {
    this.activeSeg = firstSeg;
    this.salts.set(firstSeg, this.activeSalt);
  }

  get currentSegment(): number {
    return this.activeSeg;
  }

  /** Lowest segment that may still receive or be missing queued frames. */
  get oldestOpenSegment(): number {
    return Math.min(this.activeSeg, this.lowestUnsynced);
  }

  get failedFatally(): Error | undefined {
    return this.fatal;
  }

  /** Queue a record, framed here (length, CRC-32C from its segment's salt, payload; see segment.ts). */
  enqueueRecord(payload: Buffer, tag: T): Location {
    const size = FRAME_HEADER_BYTES + payload.length;
    const loc = this.locate(size);
    const at = this.room(size);
    writeFrame(this.staging, at, payload, this.activeSalt);
    this.pending.push({ start: at, loc, lsn: recordLsn(this.staging, at + FRAME_HEADER_BYTES), tag });
    if (loc.seg < this.lowestUnsynced) this.lowestUnsynced = loc.seg;
    if (this.state === 0) {
      this.state = 1;
      // setImmediate, not nextTick: everything appended by the I/O callbacks of this
      // loop turn joins the same flush.
      setImmediate(() => void this.flush());
    }
    return loc;
  }

  /** Offset of `size` bytes free at the end of the staged frames (growing the buffer if need be). */
  private room(size: number): number {
    if (this.staged + size > this.staging.length) {
      const bigger = Buffer.allocUnsafe(Math.max(2 * this.staging.length, this.staged + size));
      this.staging.copy(bigger, 0, 0, this.staged);
      this.staging = bigger;
    }
    const at = this.staged;
    this.staged += size;
    return at;
  }

  /** Where a frame of `size` bytes goes: the end of the active segment, or a new one if it would not fit. */
  private locate(size: number): Location {
    if (this.logicalSize > SEGMENT_HEADER_BYTES && this.logicalSize + size > this.segmentBytes) {
      this.activeSeg++;
      this.activeSalt = newSalt();
      this.salts.set(this.activeSeg, this.activeSalt);
      this.logicalSize = SEGMENT_HEADER_BYTES;
      this.hooks.onRoll?.(this.activeSeg);
    }
    const loc: Location = { seg: this.activeSeg, offset: this.logicalSize, size };
    this.logicalSize += size;
    return loc;
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (this.state === 0 && this.pending.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  async close(): Promise<void> {
    await this.idle();
    await this.closeFd();
  }

  private async flush(): Promise<void> {
    this.state = 2;
    while (this.pending.length > 0) {
      const batch = this.pending;
      const frames = this.staging;
      this.pending = [];
      this.staging = this.spare ?? Buffer.allocUnsafe(FLUSH_BUFFER_BYTES);
      this.spare = undefined;
      this.staged = 0;
      this.stats.flushes++;
      if (this.fatal) {
        this.hooks.onFailed(batch, this.fatal);
        continue;
      }
      let i = 0;
      while (i < batch.length) {
        if (this.fatal) {
          this.hooks.onFailed(batch.slice(i), this.fatal);
          break;
        }
        const seg = batch[i]!.loc.seg;
        let j = i;
        while (j < batch.length && batch[j]!.loc.seg === seg) j++;
        const group = batch.slice(i, j);
        const err = await this.writeGroup(seg, group, frames);
        if (err) {
          const failed = batch.slice(i).concat(this.pending);
          this.pending = [];
          this.staged = 0;
          this.lowestUnsynced = Infinity;
          this.hooks.onFailed(failed, err);
          break;
        }
        // A segment the writer has moved past needs its salt no more (a disk-full cut only goes back to a failed one).
        if (seg < this.activeSeg) this.salts.delete(seg);
        if (j === batch.length && this.pending.length === 0) this.lowestUnsynced = Infinity;
        else this.lowestUnsynced = (batch[j] ?? this.pending[0])!.loc.seg;
        this.hooks.onSynced(group);
        i = j;
      }
      // Written (or failed): nothing reads it any more.
      if (frames.length <= KEEP_FLUSH_BUFFER_BYTES) this.spare = frames;
    }
    this.state = 0;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  /** Write and sync one segment's share of a flush. Returns the error to report, if any. */
  private async writeGroup(seg: number, group: WriterItem<T>[], frames: Buffer): Promise<Error | undefined> {
    const start = group[0]!.loc.offset;
    const last = group[group.length - 1]!;
    // A group's frames are back to back in `frames`, as they will be in the segment.
    const data = frames.subarray(group[0]!.start, last.start + last.loc.size);
    let fd: number | undefined;
    try {
      fd = await this.fdFor(seg);
      const began = syncChannel.hasSubscribers ? process.hrtime.bigint() : undefined;
      let done = 0;
      while (done < data.length) {
        done += await this.io.write(fd, data, done, data.length - done, start + done);
        this.stats.writes++;
      }
      if (!this.io.syncedWrites) await this.io.fdatasync(fd);
      this.stats.syncs++;
      if (began !== undefined) syncChannel.publish({ seconds: Number(process.hrtime.bigint() - began) / 1e9 });
      return undefined;
    } catch (err) {
      if (isDiskFull(err)) {
        // Cut the half-written tail so nothing of the failed records stays on disk,
        // and so the next write starts at the last good offset.
        try {
          if (fd !== undefined) {
            await this.io.ftruncate(fd, start);
            await this.io.fdatasync(fd);
          }
          this.activeSeg = seg;
          this.activeSalt = this.salts.get(seg)!;
          this.logicalSize = start;
          return new DiskFullError(this.dir, { cause: err });
        } catch (truncErr) {
          this.fatal = new JournalIoError(`cannot cut back segment ${segmentPath(this.dir, seg)} after a full disk`, { cause: truncErr });
          return this.fatal;
        }
      }
      this.fatal = new JournalIoError(`journal write to ${segmentPath(this.dir, seg)} failed (${(err as Error).message})`, { cause: err });
      return this.fatal;
    }
  }

  private async fdFor(seg: number): Promise<number> {
    if (this.fd !== undefined && this.fdSeg === seg) return this.fd;
    await this.closeFd();
    // 'wx': a segment is only ever created here, fresh; never overwrite one.
    // After a disk-full cut the file may exist already (empty or short): reopen it.
    let fd: number;
    try {
      fd = await this.io.open(segmentPath(this.dir, seg), this.io.syncedWrites ? O_CREATE_SYNCED : 'wx');
      await syncDir(this.io, this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      fd = await this.io.open(segmentPath(this.dir, seg), this.io.syncedWrites ? O_REOPEN_SYNCED : 'r+');
    }
    // The header, synced before any frame: its salt is what every frame's CRC
    // starts from. Written again on a reopen (the same bytes, or a header a full
    // disk cut short).
    try {
      const header = encodeSegmentHeader(this.salts.get(seg)!);
      let done = 0;
      while (done < header.length) done += await this.io.write(fd, header, done, header.length - done, done);
      if (!this.io.syncedWrites) await this.io.fdatasync(fd);
    } catch (err) {
      await this.io.close(fd).catch(() => undefined);
      throw err;
    }
    this.fd = fd;
    this.fdSeg = seg;
    return fd;
  }

  private async closeFd(): Promise<void> {
    const fd = this.fd;
    this.fd = undefined;
    this.fdSeg = -1;
    if (fd !== undefined) await this.io.close(fd).catch(() => undefined);
  }

  /** Stop writing: queued items fail with `err`; an in-flight write finishes first. */
  destroy(err: Error): void {
    this.fatal ??= err;
    const failed = this.pending;
    this.pending = [];
    if (failed.length > 0) this.hooks.onFailed(failed, err);
  }
}

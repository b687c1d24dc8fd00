// The durable journal: a ChangeSink that keeps durable changes on disk.
//
// append() is synchronous and only queues; the SegmentWriter writes and syncs in
// groups on the threadpool. whenDurable() reports, per LSN, once every durable
// record up to it is synced, or the typed error that kept one of them off disk.
//
// LSN reservations: non-durable changes are not written, yet HA backups may have
// seen their LSNs. So the journal writes small records "LSNs up to N may be in
// use", a block ahead of the log, and recovery reports lastLsn as at least N. The
// broker then never hands out an LSN twice across restarts. The same N covers the
// message ids the log has carried (restore.ts starts new ids above it): the
// messages with the highest ids may be non-durable or consumed and compacted away,
// and a DR secondary or backup that still holds one under its id must never see
// that id again for another message.

import { existsSync } from 'node:fs';
import { mkdir, open, rename, rm, stat } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import path from 'node:path';
import type { Change, ChangeSink, LoggedChange } from '../broker/changes.js';
import { TandemError } from '../broker/errors.js';
import { Compactor, type CompactionHooks, type CompactionReport } from './compactor.js';
import { JournalIoError, JournalTruncatedError } from './errors.js';
import { isDiskFull, nodeIo, syncDir, type JournalIo } from './io.js';
import { CHECKPOINT_CORRUPT, CHECKPOINT_FILE, CHECKPOINT_TMP, CheckpointError, checkpointSupported, readCheckpoint, writeCheckpoint, type CheckpointMeta, type CheckpointWindow, type LoadedCheckpoint } from './checkpoint.js';
import { DedupRecovery, type RecoveredWindow } from './dedup-recovery.js';
import { LiveIndex, type Location } from './live-index.js';
import { DataDirLock } from './lock.js';
import { encodeChange } from './record-codec.js';
import { recoverJournal, type RecoveryResult } from './recovery.js';
import { listSegments, MAX_RECORD_BYTES, readFrame, segmentHeaderOf, segmentPath } from './segment.js';
import { SegmentReader } from './segment-reader.js';
import { SegmentWriter, type WriterItem } from './writer.js';
import type { MessageRecord } from '../broker/changes.js';
import type { PagedFields, PagedRun } from '../broker/paged-message.js';
import { JournalReadError } from './errors.js';

export interface JournalLogger {
  info(o: object | string, msg?: string): void;
  warn(o: object | string, msg?: string): void;
  error(o: object | string, msg?: string): void;
}

export interface JournalOptions {
  dataDir: string;
  /** Roll to a new segment file past this size. Default 64 MiB. */
  segmentBytes?: number;
  logger?: JournalLogger;
  /** Cut the journal at a corrupt record instead of refusing to start (tandemd --repair). */
  repair?: boolean;
  /** LSNs reserved ahead of the log. Default 1,000,000. */
  reserveLsnBlock?: number;
  /** Compact in the background when a segment fills. Default true. */
  autoCompact?: boolean;
  /** Rewrite a segment whose live bytes are below this share of its size. Default 0.5. */
  compactLiveRatio?: number;
  /** File operations (tests inject failures or count syncs). */
  io?: JournalIo;
  compactionHooks?: CompactionHooks;
  /**
   * Read every recovered message back at open, so Recovered.changes is there even
   * after close (tests and tools). Otherwise it is read when first asked for.
   */
  materialize?: boolean;
  /**
   * Write checkpoints, so a restart replays only what came after the last one
   * (docs/journal.md). Default true. false also removes an existing checkpoint
   * at open (compaction then no longer respects it, so it must not be used later).
   */
  checkpoint?: boolean;
  /** Write a checkpoint once this many journal bytes were synced since the last (or the last one's size, if larger). Default 256 MiB. */
  checkpointBytes?: number;
  /** Bytes per write while a checkpoint is written (tests make it small, so the queues change between writes). Default 4 MiB. */
  checkpointWriteBytes?: number;
}

/** What the last checkpoint write did (tests, logs). */
export interface CheckpointReport {
  bytes: number;
  ms: number;
  position: { seg: number; offset: number };
  messages: number;
}

/** A message on a queue, as the journal knows it. */
export interface MessageRef {
  queue: string;
  id: number;
}

export interface Recovered {
  /**
   * The live configuration (declares, bindings, epoch, DR state) in LSN order: what
   * the broker applies first. Messages come after, as rows (forEachRecovered).
   */
  config: LoggedChange[];
  /** Live messages recovered. */
  messages: number;
  /** The highest message id the journal has seen: new messages must get higher ones. */
  maxMessageId: number;
  /** The queues' duplicate-detection windows (their durable keys), by queue name. */
  dedupWindows: Map<string, RecoveredWindow>;
  /** The next LSN handed out must be above this, even if the last changes before the crash were non-durable. */
  lastLsn: number;
  /** The newest change on disk (reservations not counted). */
  lastChangeLsn: number;
  epoch: number;
  /**
   * Everything recovered as changes, messages with their bodies read back, in LSN
   * order (a transaction's messages as separate enqueues). For tests and tools:
   * it makes an object per message, which a broker with millions must not.
   */
  readonly changes: LoggedChange[];
}

export const JOURNAL_DIR_NAME = 'journal';
const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;
const DEFAULT_RESERVE_BLOCK = 1_000_000;
const DEFAULT_CHECKPOINT_BYTES = 256 * 1024 * 1024;

type Tag =
  | { type: 'change'; entry: LoggedChange }
  | { type: 'reservation'; lsn: number; upTo: number; done?: (err?: Error) => void }
  | { type: 'copy'; done: (err?: Error) => void };

interface Waiter {
  lsn: number;
  cb: (err?: Error) => void;
}

const noopLogger: JournalLogger = { info() {}, warn() {}, error() {} };

export class Journal implements ChangeSink {
  private readonly writer: SegmentWriter<Tag>;
  private readonly compactor: Compactor;
  private readonly reader: SegmentReader;
  private lastAppendedLsn: number;
  /** The newest change appended (or recovered); reservations not counted. */
  private lastChangeLsn = 0;
  /**
   * Durable records queued but not yet synced, in order (a queue with a head index).
   * A synced one's slot is emptied at once: the array is trimmed only every 1,024, and
   * kept until then, synced changes held their messages' bodies (a thousand consumed
   * 1 MiB messages stayed in memory, outside max-memory).
   */
  private unsynced: (LoggedChange | undefined)[] = [];
  private unsyncedHead = 0;
  private waiters: Waiter[] = [];
  private reservedRequested: number;
  private reservedDurable: number;
  private closing: Promise<void> | undefined;
  private destroyed: Error | undefined;
  private lastError: Error | undefined;
  /** Segments compaction must leave on disk: per segment, records kept readable past their death (keepMessage). */
  private readonly kept = new Map<number, number>();
  /** End of the last synced frame applied to the index, and that frame: what a checkpoint covers. */
  private appliedEnd: { seg: number; offset: number };
  private lastFrame: CheckpointMeta['lastFrame'];
  /** Segments from here on are kept for the durable checkpoint (Infinity: there is none). */
  private protectedFrom = Infinity;
  /**
   * Segments from here on are kept for the checkpoint being written (Infinity: none):
   * until its rename it is not protectedFrom yet, and compaction that ran meanwhile
   * deleted the segment of its position (the first checkpoint, or the first after one
   * was removed), so the next start set it aside and replayed everything.
   */
  private writingFrom = Infinity;
  /**
   * Segments from here on hold dedup keys no checkpoint has yet (Infinity: none):
   * kept, as a consumed message's key must outlive its enqueue (dedup-recovery.ts).
   */
  private keyedSince = Infinity;
  /**
   * The queues' duplicate-detection windows, for a checkpoint: each window's
   * durable keys with LSN <= `upToLsn` (set by the broker's owner; none without).
   */
  windowSource: ((upToLsn: number) => CheckpointWindow[]) | undefined;
  private bytesSinceCheckpoint = 0;
  private lastCheckpointBytes = 0;
  private checkpointing: Promise<CheckpointReport | undefined> | undefined;
  /** Checkpoints written by this journal (tests). */
  checkpointsWritten = 0;

  private constructor(
    readonly dir: string,
    private readonly index: LiveIndex,
    private readonly lock: DataDirLock,
    private readonly io: JournalIo,
    private readonly log: JournalLogger,
    private readonly opts: JournalOptions,
    firstSegment: number,
    lastLsn: number,
    recovered: RecoveredIndex & Pick<RecoveryResult, 'end' | 'lastFrame'>,
  ) {
    this.lastAppendedLsn = lastLsn;
    this.appliedEnd = recovered.end;
    this.lastFrame = recovered.lastFrame;
    this.protectedFrom = recovered.protectedFrom;
    if (recovered.keyed && this.checkpointsEnabled) this.keyedSince = 0;
    this.bytesSinceCheckpoint = recovered.replayedBytes;
    this.lastCheckpointBytes = recovered.checkpointBytes;
    this.reader = new SegmentReader(dir);
    this.reservedRequested = this.reservedDurable = lastLsn;
    this.writer = new SegmentWriter<Tag>(dir, io, opts.segmentBytes ?? DEFAULT_SEGMENT_BYTES, firstSegment, {
      onSynced: (items) => this.onSynced(items),
      onFailed: (items, err) => this.onFailed(items, err),
      onRoll: () => this.scheduleCompaction(),
    });
    this.compactor = new Compactor(
      {
        index,
        dir,
        io,
        logger: log as CompactorLogger,
        oldestOpenSegment: () => Math.min(this.writer.oldestOpenSegment, this.protectedFrom, this.writingFrom, this.keyedSince),
        writeCopy: (record) => this.writeCopy(record),
        pendingKills: () => this.pendingKills(),
        segmentDeleted: (id) => this.reader.forget(id),
        isKept: (id) => this.kept.has(id),
      },
      opts.compactLiveRatio ?? 0.5,
      opts.compactionHooks,
    );
  }

  static async open(opts: JournalOptions): Promise<{ journal: Journal; recovered: Recovered }> {
    const log = opts.logger ?? noopLogger;
    const dir = path.join(opts.dataDir, JOURNAL_DIR_NAME);
    await mkdir(dir, { recursive: true });
    const lock = await DataDirLock.acquire(opts.dataDir, log as CompactorLogger);
    let journal: Journal | undefined;
    try {
      const rec = await Journal.recoverIndex(dir, opts, log);
      // Always start a fresh segment: never append behind a tail that was just cut.
      journal = new Journal(dir, rec.index, lock, opts.io ?? nodeIo, log, opts, rec.lastSegment + 1, rec.lastLsn, rec);
      // The first reservation must be on disk before any LSN above lastLsn is used.
      await new Promise<void>((resolve, reject) => journal!.reserve(rec.lastLsn, rec.lastLsn, (err) => (err ? reject(err) : resolve())));
      // A long replay: checkpoint soon, so the next start is quick.
      journal.maybeCheckpoint();
      if (opts.autoCompact ?? true) journal.scheduleCompaction();
      journal.lastChangeLsn = rec.lastChangeLsn;
      const j = journal;
      const config = rec.index.configChanges().map((c) => ({ lsn: c.lsn, change: c.change, durable: true }));
      let materialized: LoggedChange[] | undefined;
      const recovered: Recovered = {
        config,
        messages: rec.index.messageCount,
        maxMessageId: rec.index.maxMessageId,
        dedupWindows: rec.dedup.result(),
        lastLsn: rec.lastLsn,
        lastChangeLsn: rec.lastChangeLsn,
        epoch: rec.epoch,
        get changes() {
          materialized ??= j.materialize(config);
          return materialized;
        },
      };
      if (opts.materialize) void recovered.changes;
      return { journal, recovered };
    } catch (err) {
      if (journal) await journal.close().catch(() => undefined);
      else await lock.release();
      throw err;
    }
  }

  /**
   * Rebuild the index: from the checkpoint and the records after it when there is
   * a usable one, else from every record. A checkpoint that cannot be used is set
   * aside with a warning saying why, and everything is replayed.
   */
  private static async recoverIndex(dir: string, opts: JournalOptions, log: JournalLogger): Promise<RecoveryResult & RecoveredIndex> {
    const logger = log as CompactorLogger;
    await rm(path.join(dir, CHECKPOINT_TMP), { force: true });
    const file = path.join(dir, CHECKPOINT_FILE);
    const enabled = (opts.checkpoint ?? true) && checkpointSupported;
    if (opts.repair || !enabled) {
      const proof = opts.repair ? await truncationProof(dir) : undefined;
      if (existsSync(file)) {
        log.warn({ file, reason: opts.repair ? 'repair' : 'checkpoints are off' }, 'removing the journal checkpoint: the whole journal is replayed');
        await rm(file, { force: true });
        await syncDir(nodeIo, dir);
      }
      const rec = await Journal.fullReplay(dir, opts, logger);
      if (proof) {
        log.error(
          { file: proof.file, size: proof.size, provenEnd: proof.provenEnd, missingBytes: proof.provenEnd - proof.size, liveAtCheckpoint: proof.liveMessages, liveNow: rec.index.messageCount },
          `REPAIR: ${proof.provenEnd - proof.size} bytes of segment ${proof.file} were cut off; every record before the cut is kept; ` +
            `the checkpoint held ${proof.liveMessages} live messages at its position, the repaired journal holds ${rec.index.messageCount}`,
        );
      }
      return rec;
    }
    const setAside = async (reason: string): Promise<void> => {
      log.warn({ file, keptAs: `${file}.corrupt`, reason }, 'the journal checkpoint cannot be used; replaying the whole journal instead (nothing is lost, the start takes longer)');
      await rename(file, path.join(dir, CHECKPOINT_CORRUPT)).catch(() => rm(file, { force: true }));
      await syncDir(nodeIo, dir);
    };
    let loaded: LoadedCheckpoint | undefined;
    try {
      loaded = await readCheckpoint(dir);
      if (loaded) await checkAgainstJournal(dir, loaded);
    } catch (err) {
      if (!(err instanceof CheckpointError)) throw err;
      await setAside(err.message);
      return Journal.fullReplay(dir, opts, logger);
    }
    if (!loaded) return Journal.fullReplay(dir, opts, logger);
    const t0 = performance.now();
    const index = LiveIndex.restore(loaded.state);
    index.maxMessageId = Math.max(index.maxMessageId, loaded.meta.maxMessageId);
    const { position, lastLsn, lastFrame } = loaded.meta;
    // Records after the position with an LSN up to the checkpoint's newest change are compaction copies.
    const dedup = new DedupRecovery(index.newestLsn);
    for (const w of loaded.windows) dedup.seed(w.queue, w.rows);
    const rec = await recoverJournal(dir, {
      repair: false,
      logger,
      start: { index, seg: position.seg, offset: position.offset, lastLsn, lastFrame },
      onRecord: (lsn, body) => dedup.onRecord(lsn, body),
    });
    const present = new Set(await listSegments(dir));
    const orphans = rec.index.homesOutside((seg) => present.has(seg));
    if (orphans > 0) {
      await setAside(`${orphans} live records would be in segments that are gone`);
      return Journal.fullReplay(dir, opts, logger);
    }
    log.info(
      { file, bytes: loaded.bytes, position, replayedRecords: rec.replayed.records, ms: Math.round(performance.now() - t0) },
      'journal recovered from its checkpoint and the records after it',
    );
    return { ...rec, protectedFrom: position.seg, replayedBytes: rec.replayed.bytes, checkpointBytes: loaded.bytes, dedup, keyed: false };
  }

  private static async fullReplay(dir: string, opts: JournalOptions, logger: CompactorLogger): Promise<RecoveryResult & RecoveredIndex> {
    const dedup = new DedupRecovery();
    const rec = await recoverJournal(dir, { repair: opts.repair ?? false, logger, onRecord: (lsn, body) => dedup.onRecord(lsn, body) });
    return { ...rec, protectedFrom: Infinity, replayedBytes: rec.replayed.bytes, checkpointBytes: 0, dedup, keyed: dedup.sawKeys };
  }

  /** All durable records with LSN <= this are synced. */
  get durableLsn(): number {
    return this.unsyncedHead < this.unsynced.length ? this.unsynced[this.unsyncedHead]!.lsn - 1 : this.lastAppendedLsn;
  }

  /** Counters for tests and metrics: writes, syncs, flushes. */
  get stats(): Readonly<{ writes: number; syncs: number; flushes: number }> {
    return this.writer.stats;
  }

  /** Reads of paged message bodies: preads and records decoded. */
  get readStats(): Readonly<{ preads: number; decodes: number }> {
    return this.reader.stats;
  }

  get currentSegment(): number {
    return this.writer.currentSegment;
  }

  append(entry: LoggedChange): void {
    if (this.closing || this.destroyed) throw new Error('journal is closed: append() after close() or destroy()');
    const { lsn } = entry;
    if (!(lsn > this.lastAppendedLsn)) {
      throw new RangeError(`LSN ${lsn} appended after LSN ${this.lastAppendedLsn}: the change log must arrive in LSN order`);
    }
    const block = this.opts.reserveLsnBlock ?? DEFAULT_RESERVE_BLOCK;
    const high = Math.max(lsn, highestMessageId(entry.change));
    if (high + block / 2 > this.reservedRequested) this.reserve(lsn, high);
    this.lastAppendedLsn = lsn;
    this.lastChangeLsn = lsn;
    // The epoch is always kept: a backup must never follow a stale primary after a restart.
    if (!entry.durable && entry.change.kind !== 'epoch') return;
    const kept = entry.change.kind === 'transaction' ? durablePartOf(entry) : entry;
    if (this.keyedSince === Infinity && this.checkpointsEnabled && carriesDedupKey(kept.change)) this.keyedSince = this.writer.oldestOpenSegment;
    const record = encodeChange({ lsn, change: kept.change, durable: true });
    // Recovery reads no frame longer than this as a record: written, it would keep the
    // broker from starting after a crash. Refused here, before anything is queued, so
    // the change fails whole (a publish is rejected with the reason).
    if (record.length > MAX_RECORD_BYTES) {
      throw new TandemError(
        'TANDEM_ERR_INVALID_ARGUMENT',
        `a ${entry.change.kind} of ${record.length} bytes is more than one journal record may be (${MAX_RECORD_BYTES} bytes); nothing of it was kept`,
      );
    }
    this.unsynced.push(kept);
    this.writer.enqueueRecord(record, { type: 'change', entry: kept });
  }

  /**
   * Accept LSNs again from just after the newest change on disk, below the
   * reservation. Only for an HA backup whose journal holds every change it
   * applied: it resumes the primary's log there, and the primary hands out the
   * LSNs (this broker's own reservation no longer matters once it follows).
   */
  rewindTo(lsn: number): void {
    if (lsn < this.lastChangeLsn) throw new RangeError(`cannot rewind the journal to ${lsn}: it holds changes up to ${this.lastChangeLsn}`);
    this.lastAppendedLsn = lsn;
  }

  whenDurable(lsn: number, cb: (err?: Error) => void): void {
    if (this.destroyed) {
      process.nextTick(cb, this.destroyed);
      return;
    }
    if (lsn <= this.durableLsn) {
      process.nextTick(cb);
      return;
    }
    const w = { lsn, cb };
    const last = this.waiters.at(-1);
    if (!last || last.lsn <= lsn) this.waiters.push(w);
    else this.waiters.splice(this.waiters.findIndex((x) => x.lsn > lsn), 0, w);
  }

  /** Queues with recovered (or since journaled) messages. */
  recoveredQueues(): string[] {
    return this.index.messageQueues();
  }

  /**
   * The journal's messages of `queue`, in id order, as the fields of a paged queue
   * row (one object reused for every call: copy what you keep). At start, before
   * anything is appended, these are exactly the recovered messages.
   */
  forEachRecovered(queue: string, fn: (fields: PagedFields, lsn: number) => void): void {
    this.index.forEachMessage(queue, fn);
  }

  /** forEachRecovered, a chunk of rows at a time (views: copy them before the journal changes). */
  forEachRecoveredRun(queue: string, fn: (run: PagedRun) => void): void {
    this.index.forEachMessageRun(queue, fn);
  }

  /** Recovered changes with message bodies read back (see Recovered.changes). */
  private materialize(config: LoggedChange[]): LoggedChange[] {
    const out: LoggedChange[] = [...config];
    for (const queue of this.index.messageQueues()) {
      const rows: Array<{ id: number; lsn: number }> = [];
      this.index.forEachMessage(queue, (f, lsn) => rows.push({ id: f.id, lsn }));
      for (let i = 0; i < rows.length; i += 256) {
        const batch = rows.slice(i, i + 256);
        const records = this.readRecords(batch.map((r) => ({ queue, id: r.id })));
        batch.forEach((r, k) => out.push({ lsn: r.lsn, change: { kind: 'enqueue', queue, message: records[k]! }, durable: true }));
      }
    }
    return out.sort((a, b) => a.lsn - b.lsn);
  }

  /** Is the enqueue of this message synced, so its body can be read back? */
  holds(queue: string, id: number): boolean {
    return this.index.messageLocation(queue, id) !== undefined;
  }

  /**
   * Read message bodies back (paged messages). Synchronous: see segment-reader.ts.
   * Throws JournalReadError if one is not in the synced journal or cannot be read.
   */
  readMessages(refs: readonly MessageRef[]): Buffer[] {
    return this.readRecords(refs).map((m) => m.bytes);
  }

  /** The stored message records (body, subject, header fields) of `refs`; see readMessages. */
  readRecords(refs: readonly MessageRef[]): MessageRecord[] {
    if (this.destroyed) throw new JournalReadError(`journal is closed (${this.destroyed.message})`);
    const locs = refs.map(({ queue, id }) => {
      const loc = this.index.messageLocation(queue, id);
      if (!loc) throw new JournalReadError(`message ${id} of queue '${queue}' is not in the journal`);
      return loc;
    });
    return this.recordsAt(refs, locs);
  }

  /**
   * Keep the synced record of this message readable after its dequeue, until
   * releaseKept(): its segment stays on disk (compaction skips it). For a reader
   * that must still see a message the broker is removing now (a DR copy that has
   * not reached it yet). Undefined if the synced journal does not hold it.
   */
  keepMessage(queue: string, id: number): Location | undefined {
    const loc = this.index.messageLocation(queue, id);
    if (!loc) return undefined;
    this.kept.set(loc.seg, (this.kept.get(loc.seg) ?? 0) + 1);
    return { ...loc };
  }

  /** Message records kept by keepMessage, read back (the keep still holds: release it after). */
  readKept(refs: readonly MessageRef[], locs: readonly Location[]): MessageRecord[] {
    if (this.destroyed) throw new JournalReadError(`journal is closed (${this.destroyed.message})`);
    return this.recordsAt(refs, locs);
  }

  /** One keepMessage is over; its segment may go once nothing else holds it. */
  releaseKept(seg: number): void {
    const n = (this.kept.get(seg) ?? 0) - 1;
    if (n > 0) {
      this.kept.set(seg, n);
      return;
    }
    this.kept.delete(seg);
    // It may have been left for us alone: let compaction look again.
    if (this.index.isDeletable(seg)) this.scheduleCompaction();
  }

  private recordsAt(refs: readonly MessageRef[], locs: readonly Location[]): MessageRecord[] {
    const entries = this.reader.read(locs);
    return refs.map(({ queue, id }, i) => {
      const body = entries[i]!.change;
      const ops = body.kind === 'enqueue' ? [body] : body.kind === 'transaction' || body.kind === 'dr-transaction' ? body.changes : [];
      for (const op of ops) if (op.kind === 'enqueue' && op.queue === queue && op.message.id === id) return op.message;
      throw new JournalReadError(`the journal record at segment ${locs[i]!.seg} offset ${locs[i]!.offset} does not hold message ${id} of queue '${queue}'`);
    });
  }

  /** Run compaction now (it also runs by itself when a segment fills). */
  compact(): Promise<CompactionReport> {
    return this.compactor.run();
  }

  /**
   * Write a checkpoint now (they are also written by themselves, see
   * JournalOptions.checkpointBytes). Resolves with what was written, or undefined
   * if checkpoints are off or it failed (logged; the previous one stays).
   */
  checkpoint(): Promise<CheckpointReport | undefined> {
    if (!this.checkpointsEnabled || this.destroyed) return Promise.resolve(undefined);
    this.checkpointing ??= this.writeCheckpoint().finally(() => {
      this.checkpointing = undefined;
    });
    return this.checkpointing;
  }

  close(options: { checkpoint?: boolean } = {}): Promise<void> {
    this.closing ??= (async () => {
      await this.compactor.idle();
      await this.checkpointing?.catch(() => undefined);
      await this.writer.close();
      // A clean stop leaves a checkpoint of everything: the next start replays nothing.
      if ((options.checkpoint ?? true) && !this.destroyed && this.bytesSinceCheckpoint > 0) {
        await this.checkpoint().catch((err: unknown) => this.log.warn({ err }, 'journal checkpoint at close not written; the next start replays more'));
      }
      this.reader.close();
      await this.lock.release();
      this.log.info({ dir: this.dir, durableLsn: this.durableLsn }, 'journal closed');
    })();
    return this.closing;
  }

  destroy(err?: Error): void {
    if (this.destroyed) return;
    this.destroyed = err ?? new JournalIoError('journal destroyed before the record was synced');
    this.closing ??= (async () => {
      this.writer.destroy(this.destroyed!);
      this.failWaiters(this.destroyed!);
      await this.compactor.idle();
      await this.checkpointing?.catch(() => undefined);
      // Let an in-flight write finish before another process may take the directory.
      await this.writer.close();
      this.reader.close();
      await this.lock.release();
    })();
    this.closing.catch(() => undefined);
  }

  // ---- internals ----------------------------------------------------------

  private get checkpointsEnabled(): boolean {
    return (this.opts.checkpoint ?? true) && checkpointSupported;
  }

  /** Start a checkpoint in the background if enough was written since the last one. */
  private maybeCheckpoint(): void {
    if (!this.checkpointsEnabled || this.checkpointing || this.closing || this.destroyed) return;
    const due = Math.max(this.opts.checkpointBytes ?? DEFAULT_CHECKPOINT_BYTES, this.lastCheckpointBytes);
    if (this.bytesSinceCheckpoint < due) return;
    setImmediate(() => {
      if (!this.closing) this.checkpoint().catch((err: unknown) => this.log.warn({ err }, 'journal checkpoint failed; retrying later'));
    });
  }

  private async writeCheckpoint(): Promise<CheckpointReport | undefined> {
    // The snapshot needs a moment with no compaction copy in flight (every live
    // record then has one synced home). Bounded: compaction runs end.
    for (let i = 0; this.compactor.busy; i++) {
      if (i > 1000) return undefined;
      await this.compactor.idle();
    }
    if (this.destroyed) return undefined;
    const t0 = performance.now();
    const snap = this.index.snapshot();
    // The same moment as the index: keys of records synced so far (a key the journal may not keep is left out).
    const windows = this.windowSource?.(this.durableLsn) ?? [];
    const keyedBefore = this.keyedSince;
    const meta: CheckpointMeta = {
      position: { ...this.appliedEnd },
      lastFrame: this.lastFrame,
      lastLsn: Math.max(this.index.newestLsn, this.index.reservedUpTo),
      maxMessageId: this.index.maxMessageId,
    };
    const messages = this.index.messageCount;
    const since = this.bytesSinceCheckpoint;
    this.bytesSinceCheckpoint = 0;
    // Set before the first await: no compaction pass from now on touches the position's segment.
    this.writingFrom = meta.position.seg;
    let bytes: number;
    try {
      bytes = await writeCheckpoint(this.dir, this.io, snap, meta, () => this.destroyed !== undefined, this.opts.checkpointWriteBytes, windows);
    } catch (err) {
      this.bytesSinceCheckpoint += since;
      if (this.destroyed) return undefined;
      if (isDiskFull(err) && this.protectedFrom !== Infinity) {
        // The old checkpoint holds segments back from compaction, which is what frees space now.
        await rm(path.join(this.dir, CHECKPOINT_FILE), { force: true }).catch(() => undefined);
        await syncDir(this.io, this.dir).catch(() => undefined);
        this.protectedFrom = Infinity;
        this.log.warn({ err }, 'disk full: no room for a journal checkpoint; removed the old one so compaction can free space (the next start replays the whole journal)');
        this.scheduleCompaction();
      } else {
        this.log.warn({ err }, 'journal checkpoint not written; the previous one (if any) still stands, retrying later');
      }
      return undefined;
    } finally {
      snap.release();
      this.writingFrom = Infinity;
    }
    this.protectedFrom = meta.position.seg;
    // Keys before the position are in the checkpoint now; later ones are behind protectedFrom.
    if (this.keyedSince === keyedBefore) this.keyedSince = Infinity;
    this.lastCheckpointBytes = bytes;
    this.checkpointsWritten++;
    const report: CheckpointReport = { bytes, ms: Math.round(performance.now() - t0), position: meta.position, messages };
    this.log.info({ ...report }, 'journal checkpoint written');
    // Segments before the new position may be compacted now.
    this.scheduleCompaction();
    return report;
  }

  /** Reserve LSNs and message ids up to a block above `covering`, in a record at LSN `atLsn`. */
  private reserve(atLsn: number, covering: number, done?: (err?: Error) => void): void {
    // Never past what a record holds: a covering LSN near 2^53 (only a damaged or
    // hostile source makes one) threw a TypeError from the codec here, at open.
    const upTo = Math.min(covering + (this.opts.reserveLsnBlock ?? DEFAULT_RESERVE_BLOCK), Number.MAX_SAFE_INTEGER);
    this.reservedRequested = upTo;
    this.writer.enqueueRecord(encodeChange({ lsn: atLsn, change: { kind: 'lsn-reservation', upTo }, durable: true }), {
      type: 'reservation',
      lsn: atLsn,
      upTo,
      done,
    });
  }

  private writeCopy(record: Buffer): { loc: Location; synced: Promise<void> } {
    let loc!: Location;
    const synced = new Promise<void>((resolve, reject) => {
      loc = this.writer.enqueueRecord(record, { type: 'copy', done: (err) => (err ? reject(err) : resolve()) });
    });
    return { loc, synced };
  }

  /**
   * Which changes are killed by records queued but not yet synced (the index only
   * knows synced ones). Compaction must not copy those: the copy would land after
   * its own tombstone, and two dead segments could end up waiting on each other.
   */
  private pendingKills(): (c: Change) => boolean {
    const messages = new Set<string>();
    const queues = new Set<string>();
    const exchanges = new Set<string>();
    const bindings = new Set<string>();
    const note = (c: Change): void => {
      if (c.kind === 'dequeue') messages.add(`${c.queue}\u0000${c.id}`);
      // A declare over an existing queue or exchange replaces it (what it had dies) like a delete.
      else if (c.kind === 'queue-delete' || c.kind === 'queue-declare') queues.add(c.name);
      else if (c.kind === 'exchange-delete' || c.kind === 'exchange-declare') exchanges.add(c.name);
      else if (c.kind === 'unbind') bindings.add(`${c.exchange}\u0000${c.queue}\u0000${c.key}`);
      else if (c.kind === 'transaction' || c.kind === 'dr-transaction') c.changes.forEach(note);
    };
    for (let i = this.unsyncedHead; i < this.unsynced.length; i++) note(this.unsynced[i]!.change);
    return (c) => {
      switch (c.kind) {
        case 'queue-declare':
        case 'queue-dedup':
        case 'queue-consumed':
          return queues.has(c.name);
        case 'exchange-declare':
          return exchanges.has(c.name);
        case 'bind':
          return queues.has(c.queue) || exchanges.has(c.exchange) || bindings.has(`${c.exchange}\u0000${c.queue}\u0000${c.key}`);
        case 'enqueue':
          return queues.has(c.queue) || messages.has(`${c.queue}\u0000${c.message.id}`);
        case 'dr-transaction':
          // Live for its source position even without enqueues; skipping one only delays it a pass.
          if (!c.changes.some((n) => n.kind === 'enqueue')) return false;
          return c.changes.every((n) => n.kind !== 'enqueue' || queues.has(n.queue) || messages.has(`${n.queue}\u0000${n.message.id}`));
        case 'transaction':
          // Without enqueues it is live only as the newest change: no kill reaches it.
          if (!c.changes.some((n) => n.kind === 'enqueue')) return false;
          return c.changes.every((n) => n.kind !== 'enqueue' || queues.has(n.queue) || messages.has(`${n.queue}\u0000${n.message.id}`));
        default:
          return false;
      }
    };
  }

  private onSynced(items: WriterItem<Tag>[]): void {
    for (const { tag, loc, lsn } of items) {
      this.appliedEnd = { seg: loc.seg, offset: loc.offset + loc.size };
      this.lastFrame = { seg: loc.seg, offset: loc.offset, size: loc.size, lsn };
      this.bytesSinceCheckpoint += loc.size;
      switch (tag.type) {
        case 'change':
          this.unsynced[this.unsyncedHead++] = undefined;
          this.index.apply(tag.entry.lsn, tag.entry.change, loc);
          break;
        case 'reservation':
          this.reservedDurable = Math.max(this.reservedDurable, tag.upTo);
          this.index.apply(tag.lsn, { kind: 'lsn-reservation', upTo: tag.upTo }, loc);
          tag.done?.();
          break;
        case 'copy':
          this.index.addCopyBytes(loc);
          tag.done();
          break;
      }
    }
    if (this.unsyncedHead > 1024 && this.unsyncedHead * 2 > this.unsynced.length) {
      this.unsynced = this.unsynced.slice(this.unsyncedHead);
      this.unsyncedHead = 0;
    }
    const durable = this.durableLsn;
    while (this.waiters.length > 0 && this.waiters[0]!.lsn <= durable) {
      const w = this.waiters.shift()!;
      this.safeCall(w.cb);
    }
    this.maybeCheckpoint();
  }

  private onFailed(items: WriterItem<Tag>[], err: Error): void {
    if (err !== this.lastError) {
      this.lastError = err;
      this.log[this.writer.failedFatally ? 'error' : 'warn']({ err, records: items.length }, 'journal records not stored');
    }
    // Every unsynced record is in `items` (the writer fails all that is queued), so
    // every waiter still outstanding depends on a failed record.
    this.unsynced = [];
    this.unsyncedHead = 0;
    for (const { tag } of items) {
      if (tag.type === 'copy') tag.done(err);
      else if (tag.type === 'reservation') {
        this.reservedRequested = this.reservedDurable;
        tag.done?.(err);
      }
    }
    this.failWaiters(err);
  }

  private failWaiters(err: Error): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) this.safeCall(w.cb, err);
  }

  private safeCall(cb: (err?: Error) => void, err?: Error): void {
    try {
      cb(err);
    } catch (cbErr) {
      // A throwing callback must not leave the writer's bookkeeping half done.
      process.nextTick(() => {
        throw cbErr;
      });
    }
  }

  private scheduleCompaction(): void {
    if (this.closing || this.opts.autoCompact === false) return;
    setImmediate(() => {
      if (this.closing) return;
      this.compactor.run().catch((err: unknown) => this.log.error({ err }, 'journal compaction failed; will retry at the next segment roll'));
    });
  }
}

function carriesDedupKey(c: Change): boolean {
  if (c.kind === 'enqueue') return c.dedup !== undefined;
  // A forget is kept as keys are: until a checkpoint covers it (one before it still holds the key).
  if (c.kind === 'dedup-keys' || c.kind === 'dedup-forget') return true;
  if (c.kind !== 'transaction' && c.kind !== 'dr-transaction') return false;
  return c.changes.some((op) => op.kind === 'enqueue' && op.dedup !== undefined);
}

/** The highest message id a change carries (0 if none). */
function highestMessageId(c: Change): number {
  if (c.kind === 'enqueue') return c.message.id;
  if (c.kind !== 'transaction' && c.kind !== 'dr-transaction') return 0;
  let max = 0;
  for (const op of c.changes) if (op.kind === 'enqueue' && op.message.id > max) max = op.message.id;
  return max;
}

interface RecoveredIndex {
  /** Segments from here on must stay for the checkpoint in use (Infinity: none). */
  protectedFrom: number;
  /** Bytes read after the checkpoint (all of them without one). */
  replayedBytes: number;
  checkpointBytes: number;
  /** The windows' keys read (dedup-recovery.ts). */
  dedup: DedupRecovery;
  /** Dedup keys were read without a checkpoint: their segments stay until one covers them. */
  keyed: boolean;
}

/**
 * Does the checkpoint belong to this journal as it is now? Its position must be
 * inside the files, the frame before it must be the one it names, and every
 * segment before it with data must be one it knows.
 */
async function checkAgainstJournal(dir: string, loaded: LoadedCheckpoint): Promise<void> {
  const { position, lastFrame } = loaded.meta;
  const ids = await listSegments(dir);
  const sizeOf = async (id: number): Promise<number> => (await stat(segmentPath(dir, id))).size;
  if (position.offset > 0) {
    if (!ids.includes(position.seg)) throw new CheckpointError(`its position is in segment ${position.seg}, which is not there`);
    const size = await sizeOf(position.seg);
    // The checkpoint was written after every record before its position was synced:
    // a shorter file lost accepted records. Damage, never replayed as a torn tail.
    if (size < position.offset) throw new JournalTruncatedError(segmentPath(dir, position.seg), size, position.offset);
  }
  if (lastFrame && ids.includes(lastFrame.seg)) {
    const fh = await open(segmentPath(dir, lastFrame.seg), 'r');
    try {
      const header = await segmentHeaderOf(fh);
      const buf = Buffer.alloc(lastFrame.size);
      const { bytesRead } = await fh.read(buf, 0, lastFrame.size, lastFrame.offset);
      const f = bytesRead === lastFrame.size && header.status === 'ok' ? readFrame(buf, 0, header.layout.salt) : undefined;
      if (!f || f.status !== 'ok' || f.entry.lsn !== lastFrame.lsn) {
        throw new CheckpointError(`the record before its position (segment ${lastFrame.seg} offset ${lastFrame.offset}) is not LSN ${lastFrame.lsn}: it belongs to another journal`);
      }
    } finally {
      await fh.close();
    }
  }
  const known = new Set(loaded.state.segments.map((s) => s.id));
  for (const id of ids) {
    if (id >= position.seg) break;
    if (!known.has(id) && (await sizeOf(id)) > 0) throw new CheckpointError(`segment ${id} holds data the checkpoint does not know`);
  }
}

/**
 * What a readable checkpoint proves was cut from its position's segment, if anything
 * (for --repair's report); a checkpoint that cannot be read proves nothing.
 */
async function truncationProof(dir: string): Promise<{ file: string; size: number; provenEnd: number; liveMessages: number } | undefined> {
  let loaded: LoadedCheckpoint | undefined;
  try {
    loaded = await readCheckpoint(dir);
  } catch (err) {
    if (err instanceof CheckpointError) return undefined;
    throw err;
  }
  if (!loaded) return undefined;
  const { position } = loaded.meta;
  const file = segmentPath(dir, position.seg);
  const size = await stat(file).then((s) => s.size, () => 0);
  if (size >= position.offset) return undefined;
  return { file, size, provenEnd: position.offset, liveMessages: LiveIndex.restore(loaded.state).messageCount };
}

type CompactorLogger = { info(o: object, msg?: string): void; warn(o: object, msg?: string): void; error(o: object, msg?: string): void };

/**
 * A transaction as the journal keeps it: without the enqueues of non-durable
 * messages. Their dequeues are not durable, so never journaled; kept, such a
 * message would come back at the next start after it was consumed. (Enqueues to
 * a non-durable queue are dropped at recovery: the journal never declares it.)
 */
function durablePartOf(entry: LoggedChange): LoggedChange {
  const change = entry.change as Extract<Change, { kind: 'transaction' }>;
  if (change.changes.every((c) => c.kind !== 'enqueue' || c.message.durable)) return entry;
  return { ...entry, change: { kind: 'transaction', changes: change.changes.filter((c) => c.kind !== 'enqueue' || c.message.durable) } };
}

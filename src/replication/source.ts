// The primary's side of replication. It reads the change log (as a ChangeSink),
// keeps a bounded window of recent replicated changes, and feeds each backup
// link: a diff from the backup's position when the window and the epoch history
// allow it, else a snapshot, then the live stream. It is also the settlement
// gate for HA: a publisher is settled only when every *ready* backup has
// acknowledged the change and at least `minReadyBackups` of them are ready (the
// settlement quorum, src/ha/settle-quorum.ts); short of them, settlements wait.
import type { Broker } from '../broker/broker.js';
import type { ChangeSink, LoggedChange, ReplicationLevel } from '../broker/changes.js';
import type { SettlementGate } from '../broker/settlement.js';
import { Deque } from '../util/deque.js';
import { Outbound, batchHasRoom, type Outcome } from '../peer-link/outbound.js';
import { Heartbeats } from '../peer-link/heartbeats.js';
import type { PeerSender } from '../peer-link/transport.js';
import type { Logger } from '../ops/log.js';
import { sharedThrough, type EpochHistory } from '../ha/epoch-history.js';
import { ReplicationFilter } from './filter.js';
import { DROPPED, encodeStreamMessage, type StreamMessage } from './protocol.js';
import { snapshotOf, type SnapshotSource } from './snapshot.js';
import { ChangeWindow } from './change-window.js';
import { monotonicNow } from '../util/monotonic-clock.js';

export interface SourceOptions {
  broker: Broker;
  defaultLevel: ReplicationLevel;
  history: EpochHistory;
  heartbeatMs: number;
  log: Logger;
  /** Most changes kept for diffs (`ha-retain-changes`); older positions get a snapshot. */
  retainCount: number;
  /** Most bytes they may hold (`ha-retain-size`). */
  retainBytes: number;
  /** Ready backups a change needs before it is settled (ha-min-ready-backups, resolved). */
  minReadyBackups: number;
  /** Ready backups changed (for membership and status). */
  onMembership?(ready: string[]): void;
}

export interface BackupHello {
  brokerId: string;
  address: string;
  lsn: number;
  epoch: number;
  /** The newest change in its journal (`lsn` is 0 when it cannot resume from it); defaults to `lsn`. */
  journalLsn?: number;
}

/** Changes a backup's journal holds that this primary's log lacks: after `after`, up to `through`. */
export interface Divergence {
  after: number;
  through: number;
}

/** A backup is sent a snapshot: from this point, why, and what of its own it must keep. */
interface SnapshotStart {
  snapshot: SnapshotSource;
  lsn: number;
  reason: string;
  diverged?: Divergence;
}


/** Transfers in flight to one backup: bounds its queue, so acknowledgements stay prompt. */
const MAX_UNACKED = 16;
/** How many times per heartbeat interval backups are checked for silence. */
const STALL_CHECKS_PER_INTERVAL = 20;

function sizeOf(e: LoggedChange): number {
  const c = e.change;
  if (c.kind === 'enqueue') return 64 + c.message.bytes.length;
  if (c.kind === 'transaction') return 64 + c.changes.reduce((n, op) => n + (op.kind === 'enqueue' ? op.message.bytes.length + 64 : 32), 0);
  return 64;
}

export class BackupStream {
  state: 'catchup' | 'ready' = 'catchup';
  private snapshot: SnapshotSource | undefined;
  private snapshotCount = 0;
  private snapshotLsn = 0;
  private cursor: number;
  /** Primary LSN covered by what was sent (skipped, filtered changes included). */
  private sentThrough: number;
  private ackedThrough: number;
  /** The link to the backup: transfers against its credit, each acknowledged in order. */
  private readonly out: Outbound;
  private liveAt: number | undefined;
  private pendingBegin: StreamMessage | undefined;
  closed = false;

  constructor(
    readonly hello: BackupHello,
    link: PeerSender,
    private readonly source: ReplicationSource,
    start: SnapshotStart | { fromSeq: number; fromLsn: number },
  ) {
    this.out = new Outbound(link, MAX_UNACKED, (outcome) => this.onOutcome(outcome));
    if ('snapshot' in start) {
      this.snapshot = start.snapshot;
      this.snapshotLsn = start.lsn;
      this.cursor = source.retained.seqAfter(start.lsn);
      this.sentThrough = this.ackedThrough = 0;
      // Sent by the first pump: rhea writes our attach frame on its next tick.
      this.pendingBegin = { kind: 'snapshot-begin', lsn: start.lsn, epoch: source.epoch, reason: start.reason, divergedAfter: start.diverged?.after, divergedThrough: start.diverged?.through };
    } else {
      this.cursor = start.fromSeq;
      this.sentThrough = this.ackedThrough = start.fromLsn;
    }
  }

  /** When this backup last acknowledged anything (heartbeats included); 0: never. */
  get lastAckedAt(): number {
    return this.out.lastAckedAt;
  }

  get acked(): number {
    return this.ackedThrough;
  }

  get lag(): number {
    return Math.max(0, this.source.headLsn - this.ackedThrough);
  }

  /** Bytes of the changes this backup has not acknowledged (encoded), or null while the window cannot tell (a snapshot). */
  get lagBytes(): number | null {
    if (this.snapshot) return null;
    return this.source.retained.bytesAfter(this.ackedThrough) ?? null;
  }

  /** When the oldest change this backup has not acknowledged was sent (undefined: it owes none). */
  get oldestUnackedSentAt(): number | undefined {
    return this.out.oldestSentAt;
  }

  /**
   * Since when this backup has made no progress while owing acknowledgements
   * (undefined: it owes none). A slow backup that keeps acknowledging is not stalled.
   */
  get stalledSince(): number | undefined {
    return this.out.stalledSince;
  }

  /** Send what credit allows: snapshot first, then the window, then mark live. */
  pump(): void {
    if (this.closed) return;
    for (let guard = 0; guard < 10_000 && this.out.room() > 0; guard++) {
      if (this.pendingBegin) {
        this.send(this.pendingBegin, 0);
        this.pendingBegin = undefined;
        continue;
      }
      if (this.snapshot) {
        const batch = this.takeSnapshot(this.snapshot);
        if (batch.length > 0) {
          this.send({ kind: 'changes', lsn: 0, entries: batch }, 0);
          continue;
        }
        this.snapshot = undefined;
        this.send({ kind: 'snapshot-end', lsn: this.snapshotLsn, epoch: this.source.epoch }, this.snapshotLsn);
        this.sentThrough = Math.max(this.sentThrough, this.snapshotLsn);
        continue;
      }
      const window = this.source.retained;
      const end = window.endSeq;
      if (this.cursor < window.firstSeq) {
        // The window dropped changes this backup has not been sent (a long snapshot copy
        // under load, or a small ha-retain-changes): it cannot be served a diff any more.
        // Dropped, it rejoins from the position it has and is sent a snapshot.
        this.source.dropBackup(this, `fell behind the primary's window of recent changes (ha-retain-changes, ha-retain-size); it rejoins with a snapshot`);
        return;
      }
      if (this.cursor < end) {
        const batch = this.source.batchAt(this.cursor);
        this.cursor = batch.toSeq;
        this.sendEncoded(batch.bytes, batch.lsn);
        this.sentThrough = Math.max(this.sentThrough, batch.lsn);
        continue;
      }
      break;
    }
    if (!this.snapshot && this.cursor >= this.source.retained.endSeq) {
      // Everything retained was sent; filtered changes since count as covered.
      this.sentThrough = Math.max(this.sentThrough, this.source.headLsn);
      if (this.out.unacknowledged === 0) this.advanceAcked();
      if (this.liveAt === undefined) this.liveAt = this.source.headLsn;
      this.checkReady();
    }
  }

  heartbeat(): void {
    if (this.closed || this.pendingBegin || this.snapshot || !this.out.idle) return;
    this.send({ kind: 'heartbeat', lsn: this.sentThrough }, this.sentThrough);
  }

  sendControl(m: StreamMessage): void {
    if (!this.closed) this.send(m, 0);
  }

  /** The backup answered one of our transfers (the link settled it). */
  private onOutcome(outcome: Outcome): void {
    if (this.closed) return;
    if (outcome === 'refused') {
      this.source.dropBackup(this, 'backup refused a replicated change');
      return;
    }
    this.advanceAcked();
    // Room in the in-flight window again.
    this.pump();
    this.checkReady();
    this.source.progress();
  }

  /** Stop feeding this backup; with a reason, tell it (it must not think itself ready). */
  close(reason?: string): void {
    if (this.closed) return;
    this.closed = true;
    this.out.close();
    if (reason) this.out.link.close({ condition: DROPPED, description: reason });
  }

  private advanceAcked(): void {
    if (this.out.acknowledged > this.ackedThrough) this.ackedThrough = this.out.acknowledged;
    if (this.out.unacknowledged === 0 && !this.snapshot && this.sentThrough > this.ackedThrough) this.ackedThrough = this.sentThrough;
  }

  private checkReady(): void {
    if (this.state === 'ready' || this.liveAt === undefined || this.ackedThrough < this.liveAt) return;
    this.state = 'ready';
    this.sendControl({ kind: 'ready', lsn: this.ackedThrough, epoch: this.source.epoch });
    this.source.backupReady(this);
  }

  /** Next batch of snapshot records, numbered 1..N (never past the bound fixed at the start). */
  private takeSnapshot(snap: SnapshotSource): LoggedChange[] {
    const out: LoggedChange[] = [];
    let bytes = 0;
    while (batchHasRoom(out.length, bytes) && this.snapshotCount < snap.bound) {
      const next = snap.records.next();
      if (next.done) break;
      const entry: LoggedChange = { lsn: ++this.snapshotCount, change: next.value.change, durable: next.value.durable };
      out.push(entry);
      bytes += sizeOf(entry);
    }
    return out;
  }

  /** ackLsn 0: a transfer that moves no position (snapshot content, control). */
  private send(m: StreamMessage, ackLsn: number): void {
    this.sendEncoded(encodeStreamMessage(m), ackLsn);
  }

  private sendEncoded(bytes: Buffer, ackLsn: number): void {
    this.out.send(bytes, ackLsn);
  }
}

export class ReplicationSource implements ChangeSink, SettlementGate {
  readonly retained: ChangeWindow;
  readonly filter: ReplicationFilter;
  readonly streams = new Set<BackupStream>();
  private pending = new Deque<{ lsn: number; cb: (err?: Error) => void }>();
  private holding = false;
  /** The operator lifted the settlement quorum (tandem ha settle-alone). */
  private alone = false;
  private pumpScheduled = false;
  private readonly heartbeats: Heartbeats;
  private stallTimer: NodeJS.Timeout | undefined;
  headLsn: number;

  constructor(private readonly opts: SourceOptions) {
    this.headLsn = opts.broker.log.lsn;
    this.retained = new ChangeWindow(this.headLsn, opts.retainCount, opts.retainBytes);
    this.filter = new ReplicationFilter(opts.defaultLevel);
    this.learnLevels();
    this.heartbeats = new Heartbeats(opts.heartbeatMs, () => this.streams);
    this.stallTimer = setInterval(() => this.dropStalled(), Math.max(10, Math.floor(opts.heartbeatMs / STALL_CHECKS_PER_INTERVAL)));
    this.stallTimer.unref();
  }

  get epoch(): number {
    return this.opts.broker.epoch;
  }

  private anyReady(): boolean {
    for (const s of this.streams) if (s.state === 'ready') return true;
    return false;
  }

  private get readyCount(): number {
    let n = 0;
    for (const s of this.streams) if (s.state === 'ready') n++;
    return n;
  }

  /**
   * Whether settlements wait for want of ready backups, and the figures that say so
   * (`holding`, a new primary in recovering, is reported by its state).
   */
  get quorum(): { ready: number; needed: number; short: boolean; settleAlone: boolean; waiting: number } {
    const ready = this.readyCount;
    const needed = this.opts.minReadyBackups;
    return { ready, needed, short: ready < needed && !this.alone, settleAlone: this.alone, waiting: this.pending.length };
  }

  /** Lift the settlement quorum (the missing backups are known to be stopped) or restore it. */
  settleAlone(on: boolean): void {
    this.alone = on;
    this.progress();
  }

  get readyBackups(): BackupStream[] {
    return [...this.streams].filter((s) => s.state === 'ready');
  }

  /** Forget the window (a backup loaded a snapshot): diffs start at `lsn`. */
  resetWindow(lsn: number): void {
    this.retained.reset(lsn);
    this.headLsn = lsn;
    this.filter.reset();
    this.learnLevels();
  }

  /** Hold every settlement (a new primary in `recovering`) or release them. */
  hold(on: boolean): void {
    this.holding = on;
    if (!on) this.progress();
  }

  append(entry: LoggedChange): void {
    this.headLsn = entry.lsn;
    const passed = this.filter.pass(entry);
    if (passed) this.retained.push(passed, 0);
    // Once per tick, not per change: every change the tick made (a client's read of many
    // transfers) goes to each backup in one stream message, with one acknowledgement.
    // One transfer per change made replication cost the primary more than the change did.
    if (this.streams.size > 0 && !this.pumpScheduled) {
      this.pumpScheduled = true;
      queueMicrotask(this.pumpAll);
    }
  }

  /** The last batch of window changes encoded (see batchAt). */
  private lastBatch: { fromSeq: number; toSeq: number; lsn: number; bytes: Buffer; full: boolean } | undefined;

  /**
   * The stream message carrying the window's changes from `fromSeq` on (as many as
   * one batch holds), encoded. Backups at the same position, the usual case, get the
   * same bytes: encoded and copied once per tick, not once per backup. A sequence
   * number always names the same change (a reset starts after the last one), so the
   * bytes stay right for as long as they are kept.
   */
  batchAt(fromSeq: number): { toSeq: number; lsn: number; bytes: Buffer } {
    const window = this.retained;
    const end = window.endSeq;
    const cached = this.lastBatch;
    if (cached && cached.fromSeq === fromSeq && (cached.toSeq === end || cached.full)) return cached;
    // The window holds each change encoded as the stream carries it: send those bytes as they are.
    const records: Buffer[] = [];
    let bytes = 0;
    let seq = fromSeq;
    while (seq < end && batchHasRoom(records.length, bytes)) {
      const record = window.recordAt(seq++) as Buffer;
      records.push(record);
      bytes += record.length;
    }
    const lsn = window.lsnAt(seq - 1) as number;
    const full = seq < end;
    this.lastBatch = { fromSeq, toSeq: seq, lsn, bytes: encodeStreamMessage({ kind: 'changes', lsn, records }), full };
    return this.lastBatch;
  }

  private readonly pumpAll = (): void => {
    this.pumpScheduled = false;
    for (const s of this.streams) s.pump();
  };

  whenSafe(lsn: number, _durable: boolean, cb: (err?: Error) => void): void {
    if (!this.holding && !this.anyReady() && (this.alone || this.opts.minReadyBackups === 0)) return cb();
    this.pending.push({ lsn, cb });
    this.progress();
  }

  /** A backup link attached: decide diff or snapshot and start feeding it. */
  attach(link: PeerSender, hello: BackupHello): BackupStream {
    const start = this.startFor(hello);
    const stream = new BackupStream(hello, link, this, start);
    this.streams.add(stream);
    this.opts.log.info(
      { backup: hello.brokerId, address: hello.address, from: hello.lsn, epoch: hello.epoch, mode: 'snapshot' in start ? 'snapshot' : 'diff', reason: 'reason' in start ? start.reason : undefined },
      'snapshot' in start ? 'backup joined: sending a snapshot' : 'backup joined: sending the changes it lacks',
    );
    if ('snapshot' in start && start.diverged) {
      this.opts.log.warn(
        { backup: hello.brokerId, address: hello.address, epoch: hello.epoch, divergedAfter: start.diverged.after, divergedThrough: start.diverged.through },
        `backup ${hello.address} holds changes this primary lacks (LSN ${start.diverged.after + 1} to ${start.diverged.through} of epoch ${hello.epoch}); they may have been confirmed to clients: it keeps them aside (tandem ha diverged on that broker)`,
      );
    }
    setImmediate(() => stream.pump());
    return stream;
  }

  onLinkGone(stream: BackupStream): void {
    this.dropBackup(stream, 'link closed');
  }

  dropBackup(stream: BackupStream, reason: string): void {
    if (!this.streams.delete(stream)) return;
    const wasReady = stream.state === 'ready';
    stream.close(reason);
    this.opts.log.warn({ backup: stream.hello.brokerId, address: stream.hello.address, reason, wasReady }, 'backup dropped');
    if (wasReady) this.membershipChanged();
    this.progress();
  }

  backupReady(stream: BackupStream): void {
    this.opts.log.info({ backup: stream.hello.brokerId, address: stream.hello.address, lsn: stream.acked }, 'backup is ready');
    this.membershipChanged();
    this.progress();
  }

  /** Release settlements every ready backup has acknowledged, if enough backups are ready. */
  progress(): void {
    if (this.holding || this.pending.length === 0) return;
    // Called for every publisher's message: no arrays.
    let floor = Infinity;
    let ready = 0;
    for (const s of this.streams) {
      if (s.state !== 'ready') continue;
      ready++;
      if (s.acked < floor) floor = s.acked;
    }
    if (ready < this.opts.minReadyBackups && !this.alone) return;
    while (this.pending.length > 0 && (this.pending.peek() as { lsn: number }).lsn <= floor) {
      (this.pending.shift() as { cb: () => void }).cb();
    }
  }

  close(): void {
    this.heartbeats.stop();
    clearInterval(this.stallTimer);
    this.stallTimer = undefined;
    for (const s of this.streams) s.close();
    this.streams.clear();
    // Whoever still waits is told the truth: this broker no longer replicates.
    const err = Object.assign(new Error('replication stopped before the change reached the backups'), { code: 'TANDEM_ERR_HA_NOT_PRIMARY' });
    while (this.pending.length > 0) (this.pending.shift() as { cb: (e?: Error) => void }).cb(err);
  }

  /** A control message (no change of state, never journaled) to every backup. */
  sendToAll(m: StreamMessage): void {
    for (const s of this.streams) s.sendControl(m);
  }

  private membershipChanged(): void {
    const ready = this.readyBackups.map((s) => s.hello.brokerId);
    for (const s of this.streams) s.sendControl({ kind: 'membership', lsn: 0, ready });
    this.opts.onMembership?.(ready);
  }

  /**
   * Drop a backup silent for two heartbeat intervals. Checked a twentieth of an interval
   * apart, not once per interval: checked with the heartbeats, a stalled backup held
   * publishers up to three intervals (4.9-5.6 s at 2 s), not the two documented.
   */
  private dropStalled(): void {
    const now = monotonicNow();
    for (const s of [...this.streams]) {
      const since = s.stalledSince;
      if (since !== undefined && now - since > 2 * this.opts.heartbeatMs) {
        this.dropBackup(s, `no acknowledgement for ${now - since} ms (heartbeat timeout)`);
      }
    }
  }


  private startFor(hello: BackupHello): SnapshotStart | { fromSeq: number; fromLsn: number } {
    const reason = this.diffRefusal(hello);
    if (!reason) return { fromSeq: this.retained.seqAfter(hello.lsn), fromLsn: hello.lsn };
    const diverged = this.divergence(hello);
    const snapshot = snapshotOf(this.opts.broker);
    // Snapshot records are numbered 1..N and must stay below the snapshot point.
    if (snapshot.bound >= this.opts.broker.log.lsn) this.opts.broker.log.resumeAfter(snapshot.bound + 1);
    return { snapshot, lsn: this.opts.broker.log.lsn, reason, diverged };
  }

  /**
   * The changes in the backup's journal that this primary's log does not have. They
   * may well have been confirmed to clients (by a primary of an older epoch, before
   * a promotion of a broker that lacked them), so the backup keeps them aside
   * instead of letting the snapshot replace them.
   */
  private divergence(hello: BackupHello): Divergence | undefined {
    const through = hello.journalLsn ?? hello.lsn;
    if (through === 0) return undefined;
    const after = sharedThrough(this.opts.history, hello.epoch, through, this.opts.broker.log.lsn);
    return after < through ? { after, through } : undefined;
  }

  /** Why a backup at this position cannot get a diff (undefined = it can). */
  private diffRefusal(hello: BackupHello): string | undefined {
    const head = this.opts.broker.log.lsn;
    if (hello.lsn === 0) return 'the backup cannot resume from its journal (it is empty, or held changes that were not journaled)';
    if (hello.lsn > head) return `the backup is ahead of this primary (${hello.lsn} > ${head}): this primary's log lacks its newest changes`;
    if (hello.lsn < this.retained.coversFromLsn) return `the backup is at ${hello.lsn}, older than the retained log (from ${this.retained.coversFromLsn})`;
    if (!this.opts.history.sharesPrefix(hello.epoch, hello.lsn)) {
      return `the backup's log (epoch ${hello.epoch}, LSN ${hello.lsn}) diverged from this primary's history`;
    }
    return undefined;
  }

  private learnLevels(): void {
    const b = this.opts.broker;
    for (const ex of b.exchanges.values()) {
      if (!ex.builtIn) this.filter.pass({ lsn: 0, durable: false, change: { kind: 'exchange-declare', name: ex.name, type: ex.type, settings: ex.settings } });
    }
    for (const q of b.queues.values()) this.filter.pass({ lsn: 0, durable: false, change: { kind: 'queue-declare', name: q.name, settings: q.settings } });
  }
}

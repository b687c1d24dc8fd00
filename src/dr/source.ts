// The primary's side of DR. A ChangeSink on every broker (HA backups too, so a
// newly promoted primary can serve a bridge from its own window): it keeps a
// bounded window of recent queue changes, stamped with the time they were made.
// Where the broker serves clients, DR bridges attach to DR_ADDRESS; each link
// (DrStream) gets, in LSN order, the changes of the queues it asked for, from
// the window, or a snapshot of a queue first when the window cannot serve it.
// Only changes the broker's settlement gate calls safe (journaled, and held by
// every ready HA backup) are sent, so a source failover never un-happens
// something a secondary already applied.
import type { PeerSender } from '../peer-link/transport.js';
import { BATCH_BYTES, BATCH_RECORDS, Outbound, batchHasRoom } from '../peer-link/outbound.js';
import { Heartbeats } from '../peer-link/heartbeats.js';
import type { Broker } from '../broker/broker.js';
import type { Queue } from '../broker/queue.js';
import { copyMessage } from '../broker/paged-message.js';
import type { Change, ChangeSink, LoggedChange } from '../broker/changes.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import { ChangeWindow, type Stamped } from '../replication/change-window.js';
import { encodeChange } from '../store/record-codec.js';
import { DR_ADDRESS, DrProps, encodeDrMessage, inRanges, parseRequest, clipPeerText, type DrRequestQueue, type DrStreamMessage } from './protocol.js';
import { displaySource } from './config.js';
import { peekQueueChange } from './record-peek.js';
import { epochOf, roleOf } from './roles.js';
import { exchangeDeclare, exchangeMatcher, topologyOf } from './topology.js';
import { DrSnapshotReader, type KeepingJournal } from './snapshot.js';
import { crossesGap, heldBefore, type LogGap } from './restart-gap.js';
import { monotonicNow } from '../util/monotonic-clock.js';

/** A copy held this long by the safety rule is logged (HA backups or the journal lag). */
const COPY_WAIT_LOG_MS = 1000;
/**
 * Batches a copy reads ahead of what it may send (each waits until the LSN it was read
 * at is safe): as many as a tandem bridge's credit window (bridge.ts), so at most 8 MiB
 * per stream. Bounded by the bridge's credit alone, a peer granting 10,000 while the
 * source was busy had the whole queue read into memory, paged-out bodies included.
 */
const MAX_READ_AHEAD = 32;
/**
 * Bytes read ahead by all the copies of this source together. Per stream alone it was
 * not bounded: 100 links granting a bridge's 32 credits each while the source was busy,
 * and reading nothing after, held 880 MB of batches at the source.
 */
export const READ_AHEAD_BUDGET = 64 * 1024 * 1024;
/**
 * A copy whose read batches could go but that the secondary has taken none of for this
 * long is closed: what it holds of the budget goes to the other copies (a bridge takes
 * a batch as soon as it can; one that resumes after a stop starts the copy again).
 */
export const STUCK_COPY_MS = 30_000;
/**
 * DR links one source serves at once. A tandem bridge opens one per source it follows
 * (bridge.ts: one receiver, on the one connection to the primary it found, carrying
 * every queue it copies from there; the next only once that one is gone), so a source
 * serves one for each secondary broker that follows it (and each spelling of its URL
 * there), plus, for a while, one whose secondary vanished without closing it. Each
 * holds its request (up to MAX_REQUEST_QUEUES queues), its declares and a copy's
 * state besides its share of READ_AHEAD_BUDGET: a peer attaching again and again
 * without closing had the source hold as many as max-links-per-connection allows,
 * on each connection.
 */
export const MAX_DR_STREAMS = 256;

export interface DrSourceOptions {
  broker: Broker;
  gate: SettlementGate;
  log: Logger;
  retainCount: number;
  retainBytes: number;
  heartbeatMs: number;
  /** The journal in use (an enqueue-only copy keeps the records of messages consumed before it reads them). */
  journal?: () => KeepingJournal | undefined;
  /** This broker restarted and continued its log above its reservation (restart-gap.ts). */
  restart?: LogGap;
}

export class DrSource implements ChangeSink {
  readonly window: ChangeWindow;
  readonly streams = new Set<DrStream>();
  /** Newest LSN the gate called safe. */
  safeLsn: number;
  headLsn: number;
  headTime = Date.now();
  private asking = false;
  private askScheduled = false;
  /** Bytes of read batches the copies hold (READ_AHEAD_BUDGET), and the copies waiting for some. */
  private readAheadBytes = 0;
  private readonly readAheadWaiting = new Set<DrStream>();
  private readAheadWake = false;
  private readonly heartbeats: Heartbeats;
  /** Attaches refused past MAX_DR_STREAMS: logged once a minute, with how many more there were. */
  private readonly refusals = new LogThrottle(60_000);
  /**
   * The window is kept only once a DR copy follows this cluster (the 'dr-followed'
   * change, journaled and replicated, so restarts and promoted backups keep it too),
   * or this cluster holds DR queues of its own (a 'dr-role': activated, it serves its
   * old site from the activation point). Until then nobody could be served from it,
   * and filling it cost ~16% of a non-durable message's CPU. The first bridge arms it:
   * it is served from a snapshot, as any copy that starts is.
   */
  private armed: boolean;
  /**
   * The gap the restart left just before the window, while the window starts right
   * after it: a copy current before the restart resumes across it (restart-gap.ts).
   */
  gap: LogGap | undefined;

  constructor(readonly opts: DrSourceOptions) {
    this.headLsn = this.safeLsn = opts.broker.log.lsn;
    this.window = new ChangeWindow(this.headLsn, opts.retainCount, opts.retainBytes);
    this.armed = opts.broker.drFollowedSince > 0 || opts.broker.drQueues.size > 0;
    // Only if nothing was logged since the restart: the window must start at the gap's end.
    if (this.armed && opts.restart && opts.restart.lsn === this.headLsn && opts.restart.after < opts.restart.lsn) this.gap = opts.restart;
    this.heartbeats = new Heartbeats(opts.heartbeatMs, () => this.streams);
  }

  append(entry: LoggedChange): void {
    // The log went backwards: an HA backup taking its primary's log (which may hold anything
    // in our gap), even before the window holds anything.
    if (entry.lsn <= this.headLsn) this.gap = undefined;
    if (entry.lsn <= this.headLsn && this.window.endSeq > this.window.firstSeq) {
      // An HA backup loading a snapshot. resetWindow() follows.
      this.window.reset(entry.lsn);
    }
    this.headLsn = entry.lsn;
    this.headTime = Date.now();
    const k = entry.change.kind;
    if (k === 'dr-followed' || k === 'dr-role' || k === 'dr-queue') this.arm();
    // Nothing to keep yet: arm() starts the window at the head then.
    if (!this.armed) return;
    if (k === 'enqueue' || k === 'dequeue' || k === 'transaction' || k === 'queue-declare' || k === 'queue-delete' || k === 'bind' || k === 'unbind' || k === 'exchange-delete' || k === 'dedup-forget' || k === 'queue-dedup') {
      this.window.push(entry, this.headTime);
      if (k === 'enqueue' || k === 'transaction') for (const s of this.streams) s.noteChange(entry.change);
    }
    if (this.streams.size > 0 && !this.askScheduled) {
      // After the other sinks: a backup that loaded a snapshot attached its new journal after us,
      // and a journal asked about an LSN it has not seen waits for a sync that may never come.
      this.askScheduled = true;
      queueMicrotask(() => {
        this.askScheduled = false;
        this.askSafe();
      });
    }
  }

  /** Whether the window is kept (a DR copy follows this cluster). */
  get keepsWindow(): boolean {
    return this.armed;
  }

  private arm(): void {
    if (this.armed) return;
    this.armed = true;
    this.window.reset(this.headLsn);
    this.gap = undefined;
    this.opts.log.info({ lsn: this.headLsn }, 'DR: a copy follows this cluster: keeping the window of recent changes from now on');
  }

  /** After an HA snapshot load: nothing before `lsn` can be served from the window. */
  resetWindow(lsn: number): void {
    this.window.reset(lsn);
    this.gap = undefined;
    this.headLsn = this.safeLsn = lsn;
  }

  /** A bridge attached to DR_ADDRESS; the caller checked that this broker serves clients. */
  attach(sender: PeerSender, remote: string): DrStream | undefined {
    // Before anything of the request is read: a refused link costs nothing more.
    if (this.streams.size >= MAX_DR_STREAMS) {
      const held = this.refusals.admit('max-streams');
      if (held !== undefined) this.opts.log.warn({ bridge: remote, streams: this.streams.size, ...suppressedField(held) }, `DR: refused a DR link: this source serves ${MAX_DR_STREAMS} already, the most it takes`);
      sender.refuse({
        condition: 'amqp:resource-limit-exceeded',
        description: `this DR source serves ${this.streams.size} DR links already, the most it takes (${MAX_DR_STREAMS}); a tandem bridge opens one per source it follows: close the links that are not bridges (tandem connection list shows who holds them)`,
      });
      return undefined;
    }
    const props = sender.hello;
    let request: DrRequestQueue[];
    try {
      request = parseRequest(props[DrProps.queues]);
    } catch (err) {
      sender.refuse({ condition: 'amqp:invalid-field', description: (err as Error).message });
      return undefined;
    }
    const unfit = this.unfitRequest(request);
    if (unfit) {
      sender.refuse(unfit);
      return undefined;
    }
    // The first copy: from now on the whole cluster keeps the window (recorded, then armed by append()).
    this.opts.broker.noteDrFollowed();
    const epochs = Object.fromEntries(request.map((r) => [r.queue, epochOf(this.opts.broker.drQueues.get(r.queue))]));
    sender.accept(DR_ADDRESS, { [DrProps.source]: true, [DrProps.epochs]: JSON.stringify(epochs), 'tandem.lsn': this.headLsn });
    const stream = new DrStream(this, sender, request, remote, { crossesGaps: props[DrProps.gaps] === true, dedupKeys: props[DrProps.dedupKeys] === true });
    this.streams.add(stream);
    this.askSafe();
    setImmediate(() => stream.pump());
    return stream;
  }

  /**
   * Only the site that serves a queue is its source (a fenced one still, for the
   * drain of its switchover); a copy resuming from a position must be of the same
   * epoch, or it would apply this site's changes on top of another history. A copy
   * from position 0 starts over and takes this site's epoch.
   */
  private unfitRequest(request: DrRequestQueue[]): { condition: string; description: string } | undefined {
    for (const r of request) {
      const c = this.opts.broker.drQueues.get(r.queue);
      if (c && c.state !== 'active' && c.state !== 'fenced') {
        return {
          condition: 'tandem:dr:not-source',
          description: `queue '${clipPeerText(r.queue)}' is not served by this site: it is ${roleOf(c, false)} here (of ${displaySource(c.source) || 'the other site'}, epoch ${c.epoch}); point the DR source at the site that serves it`,
        };
      }
      const epoch = epochOf(c);
      // A fenced queue carries the epoch it moves to; the copy draining it is still at the
      // pair's epoch before the move. Refused, a drain whose link broke (a restart or a
      // failover of this site, a cut) could never finish, and the switchover was abandoned.
      const drainedAt = c?.state === 'fenced' ? epoch - 1 : epoch;
      if (r.from > 0 && (r.epoch ?? 1) !== epoch && (r.epoch ?? 1) !== drainedAt) {
        return {
          condition: 'tandem:dr:stale-epoch',
          description: `queue '${clipPeerText(r.queue)}' is at DR epoch ${epoch} on this source and ${r.epoch ?? 1} on the secondary: ${(r.epoch ?? 1) < epoch ? 'the secondary is stale (the pair moved on without it)' : 'this source is stale (the pair moved on without it: tandem dr reattach it)'}; nothing was sent`,
        };
      }
    }
    return undefined;
  }

  detach(stream: DrStream): void {
    if (!this.streams.delete(stream)) return;
    stream.end();
    this.opts.log.info({ bridge: stream.remote }, 'DR bridge detached');
  }

  /**
   * A clean stop, before the bridges are disconnected: once everything logged is safe,
   * each stream sends what is left and a heartbeat up to the head, so a copy's position
   * reaches the newest change on disk and it resumes across the restart by the log
   * (restart-gap.ts), even when other queues were busy until the stop. True when every
   * stream is there; the caller polls it until its deadline.
   */
  flushStreams(): boolean {
    if (this.safeLsn < this.headLsn) {
      this.askSafe();
      return false;
    }
    let all = true;
    for (const s of this.streams) {
      if (s.coversUpTo(this.headLsn)) continue;
      s.pump();
      if (!s.toldUpTo(this.headLsn)) s.heartbeat();
      if (!s.coversUpTo(this.headLsn)) all = false;
    }
    return all;
  }

  close(): void {
    this.heartbeats.stop();
    for (const s of this.streams) s.end();
    this.streams.clear();
  }

  /** Bytes read ahead by every copy now. */
  get readAhead(): number {
    return this.readAheadBytes;
  }

  /** Whether a copy may read another batch now; if not, it is pumped once some is given back. */
  admitReadAhead(stream: DrStream): boolean {
    if (this.readAheadBytes < READ_AHEAD_BUDGET) return true;
    this.readAheadWaiting.add(stream);
    return false;
  }

  /** A copy read (bytes > 0) or sent or dropped (bytes < 0) batches. */
  noteReadAhead(bytes: number): void {
    this.readAheadBytes += bytes;
    if (bytes >= 0 || this.readAheadWaiting.size === 0 || this.readAheadWake) return;
    this.readAheadWake = true;
    setImmediate(() => {
      this.readAheadWake = false;
      const waiting = [...this.readAheadWaiting];
      this.readAheadWaiting.clear();
      for (const s of waiting) if (this.streams.has(s)) s.pump();
    });
  }

  /** One question to the gate at a time, for the newest LSN: cheap under load. */
  askSafe(): void {
    if (this.asking || this.safeLsn >= this.headLsn) return;
    this.asking = true;
    const lsn = this.headLsn;
    this.opts.gate.whenSafe(lsn, true, (err) => {
      this.asking = false;
      if (err) {
        // Not safe and never will be here (journal failure, lost primary role): try later, streams wait.
        const t = setTimeout(() => this.askSafe(), 500);
        t.unref();
        return;
      }
      if (lsn > this.safeLsn) this.safeLsn = lsn;
      for (const s of this.streams) s.pump();
      if (this.streams.size > 0) this.askSafe();
    });
  }
}

/** One bridge's link: declares, the copies it needs, then the window, by credit. */
export class DrStream {
  closed = false;
  private readonly queues = new Map<string, { mode: DrRequestQueue['mode']; from: number; exchanges: (name: string) => boolean }>();
  private declares: LoggedChange[] | undefined;
  /** A reattached copy's missing messages, sent before the log (see DrRequestQueue.fill). */
  private fill: PendingFill[] | undefined;
  /** A fill's walk used its turn without finding a message to send: one pump is scheduled. */
  private fillWalkScheduled = false;
  private snapshot: PendingSnapshot | undefined;
  /** Queues resuming across this source's restart: the `restart` message, sent once `readAt` is safe. */
  private restart: { gap: LogGap; queues: string[]; held: Record<string, number[]>; readAt: number } | undefined;
  private cursor: number;
  private covered: number;
  /** The position the bridge was last sent (covered may be ahead: changes it filtered out). */
  private told = 0;
  /** The most credit the bridge has given: back at it, the bridge has applied all it was sent. */
  private fullCredit = 0;
  /** The link to the bridge: presettled transfers against its credit, its only acknowledgement. */
  private readonly out: Outbound;
  private readonly link: PeerSender;

  constructor(
    private readonly source: DrSource,
    link: PeerSender,
    request: DrRequestQueue[],
    readonly remote: string,
    /**
     * What the bridge takes beyond the first version's stream: `restart` messages (older
     * ones get a snapshot after a restart here), and queues' windows with their copies.
     */
    { crossesGaps = false, dedupKeys = false }: { crossesGaps?: boolean; dedupKeys?: boolean } = {},
  ) {
    this.link = link;
    this.out = new Outbound(link, undefined);
    const broker = source.opts.broker;
    const head = source.headLsn;
    const window = source.window;
    // Looked up for every queue of the request (up to MAX_REQUEST_QUEUES): a Set, in request order.
    const snapQueues = new Set<string>();
    const reasons: string[] = [];
    const gap = source.gap;
    const restartQueues: string[] = [];
    const held: Record<string, number[]> = {};
    for (const r of request) {
      let from = r.from;
      // A reattached copy's fill is settled against what it holds as a whole: not mixed with this.
      const acrossGap = crossesGaps && r.fill === undefined && crossesGap(gap, window, from);
      const ranges = acrossGap && r.mode === 'enqueue-and-dequeue' ? heldBefore(broker, r.queue, gap!.floor) : [];
      if (from === 0) {
        snapQueues.add(r.queue);
        reasons.push(`${r.queue}: new on the secondary, copying its current contents`);
      } else if (r.copy === true) {
        snapQueues.add(r.queue);
        reasons.push(`${r.queue}: the secondary asks for a copy (it lacks messages this source held when it restarted)`);
      } else if (from > head) {
        snapQueues.add(r.queue);
        reasons.push(`${r.queue}: the secondary is at ${from}, ahead of this source (${head}); its extra changes were never confirmed here`);
      } else if (acrossGap && ranges) {
        // Nothing it lacks was journaled before the restart: on from the log's restart point.
        restartQueues.push(r.queue);
        if (r.mode === 'enqueue-and-dequeue') held[r.queue] = ranges;
        from = gap!.lsn;
      } else if (acrossGap) {
        snapQueues.add(r.queue);
        reasons.push(`${r.queue}: resuming across this source's restart, but what it holds from before is in too many id ranges to send`);
      } else if (from < window.coversFromLsn) {
        snapQueues.add(r.queue);
        reasons.push(`${r.queue}: the secondary is at ${from}, older than the retained log (from ${window.coversFromLsn})`);
      }
      if (snapQueues.has(r.queue)) from = head;
      this.queues.set(r.queue, { mode: r.mode, from, exchanges: exchangeMatcher(r.exchanges ?? '') });
    }
    // Exchanges before the queues (a queue's alternate exchange must exist when it is created), bindings after.
    const topology = topologyOf(broker, new Map([...this.queues].map(([q, s]) => [q, s.exchanges])));
    this.declares = [...topology.exchanges];
    for (const r of request) {
      const q = broker.queues.get(r.queue);
      if (q) this.declares.push({ lsn: 0, durable: true, change: { kind: 'queue-declare', name: q.name, settings: q.settings } });
    }
    this.declares.push(...topology.bindings);
    if (snapQueues.size > 0) {
      const copied = [...snapQueues];
      // An enqueue-only secondary sees every enqueue: its copy keeps what consumers take before the reading gets there.
      const keepDequeued = new Set(copied.filter((q) => this.queues.get(q)?.mode === 'enqueue-only'));
      const reader = new DrSnapshotReader(broker, copied, head, { keepDequeued, journal: source.opts.journal?.(), dedupKeys });
      this.snapshot = { reader, reason: reasons.join('; '), begun: false, ready: [], waitingSince: undefined, waitLogged: false };
      source.opts.log.info({ bridge: remote, queues: copied, lsn: head, messages: reader.bound, reason: this.snapshot.reason }, 'DR: sending a snapshot of queues before the log');
    }
    if (gap && restartQueues.length > 0) {
      this.restart = { gap, queues: restartQueues, held, readAt: head };
      source.opts.log.info({ bridge: remote, queues: restartQueues, after: gap.after, lsn: gap.lsn }, "DR: a copy resumes across this source's restart (nothing it lacks was journaled before it): from the log, no snapshot");
    }
    const fills = request.filter((r) => r.fill !== undefined && !snapQueues.has(r.queue));
    if (fills.length > 0) {
      // Walked as credit allows, not listed here: listing a queue of a million ids took 130 ms and
      // 8 MiB for each attach, held until the bridge gave credit (and a peer may never give any).
      const newIds = broker.peekNextMessageId();
      this.fill = fills.map((r) => pendingFill(broker, r.queue, r.fill!, newIds));
      source.opts.log.info({ bridge: remote, queues: fills.map((r) => r.queue) }, 'DR: a reattached copy gets what this site held before its activation and it lacks');
    }
    const froms = [...this.queues.values()].map((q) => q.from);
    const start = Math.min(head, ...froms);
    this.cursor = window.seqAfter(start);
    this.covered = start;
    source.opts.log.info({ bridge: remote, queues: request.map((r) => `${r.queue}(${r.mode}) from ${r.from}`), start, ...(gap ? { restartGap: `${gap.after}..${gap.lsn}` } : {}) }, 'DR bridge attached');
  }

  /**
   * Whether the bridge was told it has everything up to `lsn` and has taken it in (or
   * the stream is over). The stream has no acknowledgements, but the bridge gives back a
   * heartbeat's credit as soon as it applied it: all its credit back, nothing is unread.
   */
  coversUpTo(lsn: number): boolean {
    return this.closed || (this.told >= lsn && this.credit() >= this.fullCredit);
  }

  toldUpTo(lsn: number): boolean {
    return this.told >= lsn;
  }

  /** The queues this bridge follows here. */
  get queueNames(): string[] {
    return [...this.queues.keys()];
  }

  /** The source logged a change (after the snapshot point of a copy in progress). */
  noteChange(change: Change): void {
    this.snapshot?.reader.noteChange(change);
    if (this.fill) {
      const ops = change.kind === 'enqueue' ? [change] : change.kind === 'transaction' ? change.changes : [];
      for (const op of ops) {
        if (op.kind !== 'enqueue') continue;
        // An older id enqueued again after the request: it comes with the log, not in the fill.
        const f = this.fill.find((x) => x.name === op.queue);
        if (f && op.message.id < f.below) f.enqueuedAfter.add(op.message.id);
      }
    }
  }

  /** Send what credit allows. */
  pump(): void {
    if (this.closed) return;
    try {
      this.pumpOrThrow();
    } catch (err) {
      // A body the journal cannot give back, for instance: the bridge reconnects and the copy starts over.
      const description = `the DR source could not read what it sends: ${(err as Error).message}`;
      this.source.opts.log.error({ bridge: this.remote, err: (err as Error).message }, 'DR: stream failed; closing the link');
      this.end();
      this.link.close({ condition: 'amqp:internal-error', description });
    }
  }

  /** The stream is over: a copy in progress stops watching the queues and lets go of what it kept. */
  end(): void {
    this.closed = true;
    const snap = this.snapshot;
    if (!snap) return;
    snap.reader.close();
    // What it read and never sent goes back to the other copies.
    const held = readAheadOf(snap);
    snap.ready.length = 0;
    if (held > 0) this.source.noteReadAhead(-held);
  }

  private pumpOrThrow(): void {
    const src = this.source;
    for (let guard = 0; guard < 10_000 && this.credit() > 0; guard++) {
      if (this.declares) {
        this.send({ kind: 'declares', lsn: 0, entries: this.declares });
        this.declares = undefined;
        continue;
      }
      const restart = this.restart;
      if (restart) {
        // `held` was read at readAt: it may show later dequeues, which a source failover could take back.
        if (src.safeLsn < restart.readAt) {
          src.askSafe();
          break;
        }
        this.restart = undefined;
        this.send({ kind: 'restart', lsn: restart.gap.lsn, queues: restart.queues, floor: restart.gap.floor, held: restart.held });
        continue;
      }
      if (this.fill) {
        if (this.pumpFill(this.fill)) continue;
        // A long run of ids the copy holds: the rest of the walk on a later turn, the event loop free meanwhile.
        if (!this.fillWalkScheduled) {
          this.fillWalkScheduled = true;
          setImmediate(() => {
            this.fillWalkScheduled = false;
            this.pump();
          });
        }
        break;
      }
      const snap = this.snapshot;
      if (snap) {
        if (!this.pumpSnapshot(snap)) break;
        continue;
      }
      const w = src.window;
      if (this.cursor < w.firstSeq) {
        // Fell out of the window while waiting for credit: the bridge reconnects and gets a snapshot.
        this.link.close({ condition: 'tandem:dr:behind', description: 'the secondary fell behind the retained log; reconnect for a snapshot' });
        this.end();
        return;
      }
      const records: Buffer[] = [];
      let bytes = 0;
      let lastSeq = -1;
      while (this.cursor < w.endSeq && batchHasRoom(records.length, bytes)) {
        const lsn = w.lsnAt(this.cursor) as number;
        if (lsn > src.safeLsn) break;
        const record = this.filtered(this.cursor, lsn);
        lastSeq = this.cursor++;
        for (const r of record === undefined ? [] : Array.isArray(record) ? record : [record]) {
          records.push(r);
          bytes += r.length;
        }
      }
      if (lastSeq < 0) break;
      this.covered = w.lsnAt(lastSeq) as number;
      if (records.length > 0) this.send({ kind: 'changes', lsn: this.covered, time: w.timeAt(lastSeq) as number, records });
    }
  }

  /**
   * One batch of a fill, or its end; false when the walk used its turn finding
   * nothing to send. The messages are from before this site's activation, long
   * safe; one consumed here before the walk reaches it is skipped (the log brings
   * its dequeue anyway), as is one enqueued after the request (the log brings it).
   */
  private pumpFill(fill: PendingFill[]): boolean {
    const broker = this.source.opts.broker;
    const records: Buffer[] = [];
    let bytes = 0;
    // Bounded: every step takes one id of the walk or finishes a queue, at most FILL_WALK_STEPS of them.
    for (let steps = 0; fill.length > 0 && batchHasRoom(records.length, bytes); steps++) {
      if (steps >= FILL_WALK_STEPS) {
        if (records.length > 0) break;
        return false;
      }
      const f = fill[0]!;
      // A queue missing, or deleted (or made again) since the request: the log says what became of it.
      const q = f.queue && broker.queues.get(f.name) === f.queue ? f.queue : undefined;
      const step = q ? f.ids.next() : undefined;
      if (!q || !step || step.done || step.value >= f.below) {
        fill.shift();
        this.source.opts.log.info({ bridge: this.remote, queue: f.name, messages: f.sent }, 'DR: sent a reattached copy what it lacked');
        continue;
      }
      const id = step.value;
      if (inRanges(f.held, id) || f.enqueuedAfter.has(id)) continue;
      const entry = q.entry(id);
      if (!entry) continue;
      const record = encodeChange({ lsn: 0, durable: true, change: { kind: 'enqueue', queue: f.name, message: copyMessage(entry.msg, entry.deliveryCount) } });
      records.push(record);
      bytes += record.length;
      f.sent++;
    }
    if (records.length > 0) {
      this.send({ kind: 'snapshot', lsn: 0, records });
      return true;
    }
    this.fill = undefined;
    this.send({ kind: 'fill-end', lsn: 0, queues: [...this.queues.keys()] });
    return true;
  }

  /**
   * One step of a copy; false when it must wait. A batch is read when there is
   * credit for it, but sent only once the source LSN it was read at is safe: it
   * may show changes after the snapshot point (a dequeue) that a source failover
   * could take back.
   */
  private pumpSnapshot(snap: PendingSnapshot): boolean {
    const src = this.source;
    // A copy of changes not yet safe could show a state a source failover loses.
    if (src.safeLsn < snap.reader.lsn) return this.waitSafe(snap, snap.reader.lsn);
    if (!snap.begun) {
      snap.begun = true;
      this.send({ kind: 'snapshot-begin', lsn: 0, queues: snap.reader.queues, reason: snap.reason });
      return this.progressed(snap);
    }
    const first = snap.ready[0];
    if (first && first.readAt <= src.safeLsn) {
      snap.ready.shift();
      this.send({ kind: 'snapshot', lsn: 0, records: first.records });
      snap.unsentSince = undefined;
      src.noteReadAhead(-first.bytes);
      return this.progressed(snap);
    }
    if (!snap.reader.done && snap.ready.length < Math.min(this.credit(), MAX_READ_AHEAD)) {
      // The budget shared by every copy: wait for another to send (or end) what it read.
      if (!src.admitReadAhead(this)) return false;
      const batch = snap.reader.next(BATCH_RECORDS, BATCH_BYTES);
      if (batch.length > 0) {
        const records = batch.map((e) => encodeChange(e));
        const bytes = records.reduce((n, r) => n + r.length, 0);
        snap.ready.push({ records, readAt: src.headLsn, bytes });
        src.noteReadAhead(bytes);
      }
      return true;
    }
    // The end, too, waits until what the reading saw is safe: the messages it skipped
    // were dequeued, and the secondary's mirror drops what the copy did not show.
    if (snap.reader.done) snap.doneAt ??= src.headLsn;
    if (first) return this.waitSafe(snap, first.readAt);
    if (snap.doneAt === undefined || src.safeLsn < snap.doneAt) return this.waitSafe(snap, snap.doneAt ?? src.headLsn);
    this.snapshot = undefined;
    snap.reader.close();
    this.send({ kind: 'snapshot-end', lsn: snap.reader.lsn, queues: snap.reader.queues });
    this.progressed(snap);
    src.opts.log.info(
      { bridge: this.remote, queues: snap.reader.queues, lsn: snap.reader.lsn, messages: snap.reader.copied, consumedMeanwhile: snap.reader.keptOnLeaving, dedupKeys: snap.reader.keysCopied },
      'DR: snapshot sent; following the log',
    );
    return true;
  }

  /** The copy waits until `lsn` is safe (journaled, and held by every ready HA backup). */
  private waitSafe(snap: PendingSnapshot, lsn: number): false {
    snap.waitingSince ??= monotonicNow();
    snap.waitingFor = lsn;
    this.source.askSafe();
    return false;
  }

  private progressed(snap: PendingSnapshot): true {
    if (snap.waitLogged) {
      this.source.opts.log.info({ bridge: this.remote, queues: snap.reader.queues, waitedMs: monotonicNow() - (snap.waitingSince ?? monotonicNow()) }, 'DR: the copy goes on');
    }
    snap.waitingSince = undefined;
    snap.waitLogged = false;
    return true;
  }

  heartbeat(): void {
    const snap = this.snapshot;
    const first = snap?.ready[0];
    // A batch that could go (safe) and does not: the secondary gives no credit, or reads nothing.
    if (snap) snap.unsentSince = first && first.readAt <= this.source.safeLsn ? (snap.unsentSince ?? monotonicNow()) : undefined;
    if (!this.closed && snap?.unsentSince !== undefined && monotonicNow() - snap.unsentSince >= STUCK_COPY_MS) {
      const held = readAheadOf(snap);
      this.source.opts.log.warn({ bridge: this.remote, queues: snap.reader.queues, heldBytes: held }, 'DR: a copy the secondary takes nothing of; closing its link');
      this.end();
      this.link.close({
        condition: 'amqp:resource-limit-exceeded',
        description: `the secondary took nothing of its copy for ${STUCK_COPY_MS / 1000} s while this source held ${held} bytes of it read; reconnect to start the copy again`,
      });
      return;
    }
    if (!this.closed && snap?.waitingSince !== undefined && !snap.waitLogged && monotonicNow() - snap.waitingSince >= COPY_WAIT_LOG_MS) {
      // Operators see why a copy stalls: a ready HA backup that lags or hangs holds it until it catches up or is dropped.
      snap.waitLogged = true;
      this.source.opts.log.info(
        { bridge: this.remote, queues: snap.reader.queues, waitingFor: snap.waitingFor, safe: this.source.safeLsn, copied: snap.reader.copied },
        "DR: the copy waits until the source's journal and ready HA backups hold what it read",
      );
    }
    // Unacknowledged stream: idle is credit for one more transfer.
    if (this.closed || this.snapshot || this.declares || this.restart || !this.out.idle) return;
    // Everything safe is sent (or filtered out): the secondary is current up to safeLsn.
    const w = this.source.window;
    const upTo = this.cursor >= w.endSeq || (w.lsnAt(this.cursor) ?? Infinity) > this.source.safeLsn ? this.source.safeLsn : this.covered;
    this.covered = Math.max(this.covered, upTo);
    this.send({ kind: 'heartbeat', lsn: this.covered, time: Date.now() });
  }

  /**
   * The window's change at `seq` as this bridge gets it, encoded (undefined: not
   * for it). Enqueues and dequeues, nearly all of the log, are filtered on their
   * queue name and sent as the window holds them: no decode, no encode.
   */
  private filtered(seq: number, lsn: number): Buffer | Buffer[] | undefined {
    const w = this.source.window;
    const record = w.recordAt(seq) as Buffer;
    const peeked = peekQueueChange(record);
    if (peeked) return this.wants(peeked.queue, lsn, peeked.dequeue) ? record : undefined;
    const entry = (w.at(seq) as Stamped).entry;
    const c = entry.change;
    if (c.kind === 'bind' || c.kind === 'unbind') {
      const q = this.queues.get(c.queue);
      if (!q || lsn <= q.from || !q.exchanges(c.exchange)) return undefined;
      // The secondary may not have the exchange yet: its declare (as it is now) goes first.
      const declare = c.kind === 'bind' ? exchangeDeclare(this.source.opts.broker, c.exchange) : undefined;
      return declare ? [encodeChange(declare), record] : record;
    }
    if (c.kind === 'exchange-delete') return [...this.queues.values()].some((q) => lsn > q.from && q.exchanges(c.name)) ? record : undefined;
    const f = this.filter(entry);
    if (!f) return undefined;
    return f === entry ? record : encodeChange(f);
  }

  private wants(queue: string, lsn: number, dequeue: boolean): boolean {
    const q = this.queues.get(queue);
    return q !== undefined && lsn > q.from && (!dequeue || q.mode === 'enqueue-and-dequeue');
  }

  private filter(entry: LoggedChange): LoggedChange | undefined {
    const c = entry.change;
    switch (c.kind) {
      case 'queue-declare':
      case 'queue-delete':
      // A window set on the queue after the copy was made goes with it too (bridge.ts).
      case 'queue-dedup':
        return this.queues.has(c.name) ? entry : undefined;
      case 'enqueue':
        return this.wants(c.queue, entry.lsn, false) ? entry : undefined;
      // Keys of messages refused after their enqueue went out (their purge is a dequeue
      // after it), and the ids of those a copy keyed on its own, go where dequeues go. An
      // enqueue-only copy keeps the refused message, and so its key: a resend there is a
      // duplicate of a copy it holds.
      case 'dequeue':
      case 'dedup-forget':
        return this.wants(c.queue, entry.lsn, true) ? entry : undefined;
      case 'transaction': {
        const changes = c.changes.filter((op) => this.wants(op.queue, entry.lsn, op.kind === 'dequeue'));
        if (changes.length === 0) return undefined;
        return changes.length === c.changes.length ? entry : { lsn: entry.lsn, durable: entry.durable, change: { kind: 'transaction', changes } };
      }
      default:
        return undefined;
    }
  }

  private credit(): number {
    const room = this.out.room();
    if (room > this.fullCredit) this.fullCredit = room;
    return room;
  }

  private send(m: Omit<DrStreamMessage, 'time' | 'head' | 'now'> & { time?: number }): void {
    const now = Date.now();
    const full: DrStreamMessage = { ...m, time: m.time ?? now, head: this.source.safeLsn, now };
    if (m.kind === 'changes' || m.kind === 'heartbeat') this.told = Math.max(this.told, m.lsn);
    // Settled at once: the bridge's credit is the only acknowledgement.
    this.out.send(encodeDrMessage(full));
  }
}

interface PendingSnapshot {
  reader: DrSnapshotReader;
  reason: string;
  begun: boolean;
  /** Batches read, encoded, waiting for credit or for the LSN they were read at to be safe (READ_AHEAD_BUDGET). */
  ready: Array<{ records: Buffer[]; readAt: number; bytes: number }>;
  /** Since when (ms) a batch could go and none went (STUCK_COPY_MS); undefined: none waits so. */
  unsentSince?: number;
  /** Source LSN when the reading was seen to be over. */
  doneAt?: number;
  /** Since when (ms) the copy has been held by the safety rule, and for which LSN. */
  waitingSince: number | undefined;
  waitingFor?: number;
  waitLogged: boolean;
}

/** Bytes of the batches a copy read and has not sent (its share of READ_AHEAD_BUDGET). */
function readAheadOf(snap: PendingSnapshot): number {
  return snap.ready.reduce((n, b) => n + b.bytes, 0);
}

/** Ids a fill's walk looks at in one turn (a copy holding a long run of them is skipped over a few turns). */
const FILL_WALK_STEPS = 65_536;

/** One queue of a reattached copy's fill: the queue's ids walked in order, those the copy holds skipped. */
interface PendingFill {
  name: string;
  /** The queue as it was at the request (undefined: there was none). */
  queue: Queue | undefined;
  /** The queue's ids from the walk's position on (live: each step looks up the next). */
  ids: Iterator<number>;
  /** The copy's ranges (DrRequestQueue.fill). */
  held: readonly number[];
  /** Ids from here on were given after this site's activation, or after the request: not part of it. */
  below: number;
  /** Older ids enqueued again after the request (the log brings them). */
  enqueuedAfter: Set<number>;
  sent: number;
}

/** The fill of `queue` for a copy holding `held`: its messages from before this site's activation, and before `newIds`. */
function pendingFill(broker: Broker, queue: string, held: readonly number[], newIds: number): PendingFill {
  const q = broker.queues.get(queue);
  const floor = broker.drQueues.get(queue)?.idFloor || Infinity;
  return { name: queue, queue: q, ids: q ? q.ids() : [].values(), held, below: Math.min(floor, newIds), enqueuedAfter: new Set(), sent: 0 };
}

// The secondary's side of DR for one source cluster: find its primary among the
// source URL's brokers (HA backups refuse us, so we try the next), ask for our
// passive queues from the positions this broker has applied, and apply what
// comes, in order. Each source batch becomes ONE local dr-transaction change
// holding its enqueues/dequeues and the source position they reach, so the
// position is journaled (and replicated to our own HA backups) atomically with
// the effects: a restart or failover on either side neither loses nor repeats.
import { drRoleChange, type Broker } from '../broker/broker.js';
import type { Change, DrMode, QueueSettings } from '../broker/changes.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Queue } from '../broker/queue.js';
import { parseBrokersUrl, type BrokerEndpoint } from '../ha/brokers-url.js';
import type { Logger } from '../ops/log.js';
import type { LinkTls } from '../admin/link-tls.js';
import { PeerSearch, type FollowedLink } from '../peer-link/search.js';
import { EngineDialer } from '../peer-link/engine-dialer.js';
import type { InboundDelivery, PeerDialer, PeerMessage, ReceiverOptions } from '../peer-link/transport.js';
import { DR_ADDRESS, DR_DEDUP_ROWS, DrProps, decodeDrMessage, idRanges, inRanges, quotePeerValue, type DrRequestQueue, type DrStreamKind, type DrStreamMessage } from './protocol.js';
import { badDedupRows } from '../broker/dedup-window.js';
import { MAX_EPOCH } from './roles.js';
import { copySettings, copyWindow, sameSourceQueue } from './copy-settings.js';
import { exchangeMatcher, unbindQueue } from './topology.js';
import { displaySource } from './config.js';
import { checkDeclares, refuseDrMark, settingsProblem, windowProblem, type Declared } from './declares.js';
import { monotonicNow } from '../util/monotonic-clock.js';

type TxOp = Extract<Change, { kind: 'enqueue' | 'dequeue' }>;
type DedupKeys = Extract<Change, { kind: 'dedup-keys' }>;

export interface BridgeHost {
  broker: Broker;
  /** Local settlement gate (journal + our HA backups): credit is granted once a batch is safe. */
  gate: SettlementGate;
  log: Logger;
  autoCreate: boolean;
  instanceId: string;
  /** The source's password (credentials.ts); the source URL itself never carries one. */
  password: string | undefined;
  /** For an amqps: source: the CA its certificates must chain to, and our client certificate (dr-tls-*). */
  tls: LinkTls;
  /** How source brokers are dialled (tests: a scripted link); default tandem's engine. */
  dialer?: PeerDialer;
}

/** Batches the source may send before we have made the earlier ones safe. */
const CREDIT = 32;
const IDLE_TIMEOUT_MS = 4000;
/**
 * How far ahead of the source's clock (its `now`) a key's time in a copied window may be:
 * a window the source loaded from an HA snapshot holds its old primary's times, whose clock
 * may run a little ahead. Further, the key would hold back eviction by age here.
 */
const KEY_TIME_AHEAD_MS = 60 * 60 * 1000;
/**
 * A source site may be far away (a WAN, a lost SYN resent after a second): its TCP
 * handshake gets as long as its answer, not the 500 ms an HA backup gives a broker
 * of its own cluster.
 */
const HANDSHAKE_DEADLINE_MS = 5000;
/** Dequeues per record when a mirror made again at its source drops what it held (remakeChanged). */
const REMAKE_DROP_BATCH = 10_000;

export type LinkState = 'idle' | 'connecting' | 'connected' | 'snapshot' | 'stopped';

interface StreamQueue {
  mode: DrMode;
  /** Source position applied (in memory; the journaled one is broker.drPositions). */
  pos: number;
  time: number;
  /** Waiting for a copy of its contents (requested from 0, or announced by snapshot-begin). */
  awaitingCopy: boolean;
  /** The exchange filter the request carried (the source sends the bindings it passes, no others). */
  exchanges: string;
}

export class DrBridge {
  private readonly endpoints: BrokerEndpoint[];
  readonly password: string | undefined;
  private readonly search: PeerSearch;
  /** The source primary's link we follow (credit is granted on it as batches are made safe). */
  private link: FollowedLink | undefined;
  /** The request each hello carried (the one the source accepted is followed). */
  private readonly requests = new WeakMap<ReceiverOptions, DrRequestQueue[]>();
  private stopped = true;
  private retryTimer: NodeJS.Timeout | undefined;
  /** This round's refusals, per address: reported once every address has refused. */
  private readonly failures = new Map<string, string>();
  private stream = new Map<string, StreamQueue>();
  /**
   * Mirrors that found, crossing a source's restart, a message the source holds and they
   * do not: they ask for a copy on the next link (`copy`, from their position: not from 0,
   * which would start the pair over without the epoch check). In memory: a restart here
   * asks from the position, and the source checks again.
   */
  private readonly needCopy = new Set<string>();
  /** Stream messages taken on the current link (its first is the source's declares). */
  private linkMessages = 0;
  /** During a copy: per mirror, the messages it held that the copy has not shown yet. */
  private snapshotStale: Map<string, Set<number>> | undefined;
  /** During a copy: the queues whose windows took the source's keys (their messages are taken as the source holds them). */
  private snapshotKeyed: Set<string> | undefined;
  /** What the current link began with (its `declares` message): each queue's settings and bindings (exchange to keys); undefined: none yet. */
  private declared: Declared | undefined;
  /**
   * What the exchanges this bridge makes are marked with (ExchangeSettings.madeByDr): the
   * source's brokers, without the user, so a copy added again under another login to the
   * same cluster still knows them for its own.
   */
  private readonly mark: string;
  /** The queue set the current link was opened for (the manager restarts us when it changes). */
  carries = '';
  state: LinkState = 'idle';
  connectedTo: string | undefined;
  lastError: string | undefined;
  /** Per queue: why it is not replicated right now (missing here and auto-create off...). */
  readonly queueErrors = new Map<string, string>();
  sourceHead = 0;
  private sourceNow = 0;
  private heardAt = 0;
  /** Counters for status and bench. */
  appliedChanges = 0;
  appliedBatches = 0;
  /** Messages applied from copies (snapshots, fills). */
  appliedCopies = 0;

  constructor(
    readonly source: string,
    private readonly host: BridgeHost,
  ) {
    const url = parseBrokersUrl(source);
    this.endpoints = url.endpoints;
    this.mark = displaySource(source);
    this.password = host.password;
    const tls = url.tls ? host.tls : undefined;
    const user = url.user;
    this.search = new PeerSearch({
      dialer: host.dialer ?? new EngineDialer(`tandem-dr-${host.instanceId}`),
      endpoints: url.endpoints,
      log: host.log,
      dial: {
        tls,
        // A source URL without a user and a dr-tls-cert: the certificate is the identity (SASL EXTERNAL).
        credentials: tls?.cert !== undefined && user === undefined ? { mechanism: 'EXTERNAL', orAnonymous: true } : { mechanism: 'PLAIN', user, password: this.password },
        idleTimeoutMs: IDLE_TIMEOUT_MS,
        handshakeDeadlineMs: HANDSHAKE_DEADLINE_MS,
        properties: { [DrProps.bridge]: host.instanceId },
      },
      hello: () => {
        const request = this.request();
        const hello: ReceiverOptions = { address: DR_ADDRESS, creditWindow: 0, properties: { [DrProps.queues]: JSON.stringify(request), [DrProps.gaps]: true, [DrProps.dedupKeys]: true } };
        this.requests.set(hello, request);
        return hello;
      },
      // A refusing tandem broker detaches right after; its reason beats this guess.
      judge: (remote) =>
        remote.properties[DrProps.source] === true
          ? { serving: true }
          : { serving: false, graceMs: 300, reason: `not a tandem DR source (its attach to ${DR_ADDRESS} lacks ${DrProps.source}): point --source at the brokers of a tandem primary cluster` },
      retryMs: 1000,
      selfRetryMs: 1000,
      answerTimeoutMs: 5000,
      // The source sends something at least every half of our idle-time-out.
      silenceLimitMs: 2 * IDLE_TIMEOUT_MS,
      names: { link: 'DR link', peer: 'source' },
      tlsOption: 'dr-tls',
      events: {
        refused: (address, reason) => this.refused(address, reason),
        following: (link) => this.following(link),
        message: (m, delivery) => this.onMessage(m, delivery),
        lost: (reason) => this.lost(reason),
      },
    });
  }

  /** Passive DR queues of this source, per the broker's (journaled) DR state. */
  configured(): Array<{ queue: string; mode: DrMode }> {
    const out: Array<{ queue: string; mode: DrMode }> = [];
    for (const [queue, c] of this.host.broker.drQueues) if (c.source === this.source && c.state === 'passive') out.push({ queue, mode: c.mode });
    return out;
  }

  /** (Re)connect with the current configuration. */
  restart(): void {
    this.stopped = false;
    this.dropConnection();
    this.state = 'connecting';
    this.tryNext(0);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.dropConnection();
    this.state = 'stopped';
  }

  /** Periodic check: a queue that was missing (auto-create off) may exist now. */
  tick(): void {
    if (this.stopped) return;
    for (const queue of this.queueErrors.keys()) {
      if (this.host.broker.queues.has(queue) && this.configured().some((c) => c.queue === queue)) {
        this.host.log.info({ queue, source: this.source }, 'DR: queue now exists here; reconnecting to replicate it');
        this.restart();
        return;
      }
    }
  }

  /** What status reports for one queue. */
  queueStatus(queue: string): { pos: number; time: number; lagChanges: number; lagSeconds: number | null; streaming: boolean } {
    const s = this.stream.get(queue);
    const persisted = this.host.broker.drPositions.get(queue);
    const pos = Math.max(s?.pos ?? 0, persisted?.lsn ?? 0);
    const time = s && s.pos >= (persisted?.lsn ?? 0) ? s.time : (persisted?.time ?? 0);
    const head = Math.max(this.sourceHead, pos);
    let lagSeconds: number | null = 0;
    if (pos < head) {
      const sourceNow = this.sourceNow + (monotonicNow() - this.heardAt);
      lagSeconds = time > 0 ? Math.max(0, (sourceNow - time) / 1000) : null;
    }
    return { pos, time, lagChanges: head - pos, lagSeconds, streaming: s !== undefined && !s.awaitingCopy };
  }

  // ---- connection loop ---------------------------------------------------------

  private tryNext(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.attempt(), delayMs);
    this.retryTimer.unref();
  }

  private request(): DrRequestQueue[] {
    const broker = this.host.broker;
    const out: DrRequestQueue[] = [];
    this.queueErrors.clear();
    for (const { queue, mode } of this.configured()) {
      if (!broker.queues.has(queue) && !this.host.autoCreate) {
        this.queueErrors.set(queue, `queue '${queue}' does not exist on this broker and auto-create is off: create it (tandem queue add ${queue} --durable, with the source's settings) or set auto-create=yes; the other DR queues go on`);
        continue;
      }
      const c = broker.drQueues.get(queue);
      let from = broker.drPositions.get(queue)?.lsn ?? 0;
      // A reattached copy names what it holds, so the source sends only what it lacks; with too many gaps, a full copy.
      const fill = c?.fill && from > 0 ? idRanges(broker.queues.get(queue)?.ids() ?? []) : undefined;
      if (c?.fill && from > 0 && !fill) from = 0;
      out.push({ queue, mode, from, epoch: c?.epoch ?? 1, exchanges: c?.exchanges ?? '*', ...(fill ? { fill } : {}), ...(this.needCopy.has(queue) && from > 0 ? { copy: true } : {}) });
    }
    return out;
  }

  /** Search the source's brokers for its primary, unless there is nothing to ask for. */
  private attempt(): void {
    if (this.stopped) return;
    const asked = this.request().length;
    // Said once per search, not once per address tried.
    for (const [queue, error] of this.queueErrors) this.host.log.warn({ queue, source: this.source }, error);
    if (asked === 0) {
      this.state = 'idle';
      return;
    }
    this.state = 'connecting';
    this.failures.clear();
    this.search.start();
  }

  private refused(address: string, reason: string): void {
    this.failures.set(address, reason);
    if (this.failures.size < this.endpoints.length) return;
    const reasons = [...this.failures].map(([a, r]) => `${a}: ${r}`);
    this.lastError = `no tandem primary found in ${this.source}: ${reasons.join('; ')}`;
    this.host.log.warn({ source: this.source, reasons }, 'DR: no source primary found; retrying');
    this.failures.clear();
  }

  private following(link: FollowedLink): void {
    const request = this.requests.get(link.hello) ?? [];
    this.link = link;
    this.failures.clear();
    this.adoptEpochs(request, link.remote.properties[DrProps.epochs]);
    this.connectedTo = link.address;
    this.lastError = undefined;
    this.state = 'connected';
    this.stream = new Map(
      request.map((r) => {
        const p = this.host.broker.drPositions.get(r.queue);
        return [r.queue, { mode: r.mode, pos: r.from, time: p?.time ?? 0, awaitingCopy: r.from === 0, exchanges: r.exchanges ?? '*' }];
      }),
    );
    this.snapshotStale = undefined;
    this.snapshotKeyed = undefined;
    this.declared = undefined;
    this.linkMessages = 0;
    this.host.log.info({ source: link.address, queues: request.map((r) => `${r.queue} from ${r.from}`) }, 'DR: replicating from the source primary');
    link.addCredit(CREDIT);
  }

  /**
   * A copy that starts over (from 0) joins the pair at the source's epoch; one that
   * resumes was checked by the source (same epoch or refused).
   */
  private adoptEpochs(request: DrRequestQueue[], raw: unknown): void {
    if (typeof raw !== 'string') return;
    let epochs: Record<string, unknown>;
    try {
      epochs = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      return;
    }
    const broker = this.host.broker;
    for (const r of request) {
      const epoch = epochs[r.queue];
      const c = broker.drQueues.get(r.queue);
      // At most MAX_EPOCH: a hostile source naming 2^53 - 1 left a pair that could never move again (epoch + 1).
      if (r.from !== 0 || !c || !Number.isSafeInteger(epoch) || epoch === c.epoch || (epoch as number) < 1 || (epoch as number) > MAX_EPOCH) continue;
      broker.recordDr(drRoleChange(r.queue, { ...c, epoch: epoch as number }));
      this.host.log.info({ queue: r.queue, epoch }, "DR: the copy starts over at the source's epoch");
    }
  }

  private lost(reason: string): void {
    if (this.stopped) return;
    this.host.log.warn({ source: this.connectedTo, reason }, 'DR: lost the source; reconnecting');
    this.lastError = reason;
    // Called from socket and timer events, where a throw would end the process: a
    // position that cannot be journaled is logged, and the copy resumes from the last one kept.
    try {
      this.keepPositions();
    } catch (err) {
      this.host.log.error({ source: this.connectedTo, err: (err as Error).message }, 'DR: could not keep the positions the copies reached; they resume from the last ones journaled');
    }
    this.dropConnection();
    this.state = 'connecting';
    this.tryNext(100);
  }

  /**
   * Heartbeats move a queue's position only in memory (journaling one every 500 ms would
   * cost an idle copy a sync each time), so the journaled one is that of the last batch
   * that changed it. When the link goes, the positions the heartbeats reached are
   * journaled: a source that restarted can then tell that the copy lacks nothing it
   * journaled before (restart-gap.ts) and resume it by the log instead of with a snapshot.
   */
  private keepPositions(): void {
    const broker = this.host.broker;
    const byPos = new Map<number, { time: number; queues: string[] }>();
    for (const [q, s] of this.stream) {
      if (s.awaitingCopy || !this.live(q) || s.pos <= (broker.drPositions.get(q)?.lsn ?? 0)) continue;
      const at = byPos.get(s.pos) ?? { time: s.time, queues: [] };
      at.queues.push(q);
      byPos.set(s.pos, at);
    }
    for (const [lsn, { time, queues }] of byPos) this.record(queues, lsn, time, [], true);
  }

  /** We found the stream bad: let go of the source, as if it had gone. */
  private drop(reason: string): void {
    if (!this.link) return;
    this.search.unfollow();
    this.lost(reason);
  }

  private dropConnection(): void {
    this.search.stop();
    this.link = undefined;
    this.connectedTo = undefined;
  }

  // ---- applying ----------------------------------------------------------------

  private onMessage(message: PeerMessage, delivery: InboundDelivery): void {
    const link = this.link;
    if (!link) return;
    let m: DrStreamMessage;
    let localLsn: number;
    try {
      m = decodeDrMessage(message);
      localLsn = this.apply(m);
    } catch (err) {
      this.host.log.error({ err: (err as Error).message, source: this.connectedTo }, 'DR: could not apply a change from the source; reconnecting');
      this.drop(`apply failed: ${(err as Error).message}`);
      return;
    }
    // Presettled by the source: credit is the acknowledgement, granted once the batch is safe here.
    delivery.accept();
    if (localLsn === 0) {
      link.addCredit(1);
      return;
    }
    this.host.gate.whenSafe(localLsn, true, (err) => {
      if (this.link !== link) return;
      if (err) return this.drop(`local journal or HA backups refused the change: ${err.message}`);
      link.addCredit(1);
    });
  }

  /** Apply one stream message; returns the LSN of the last local change it made (0 if none). */
  private apply(m: DrStreamMessage): number {
    this.sourceHead = Math.max(this.sourceHead, m.head);
    this.sourceNow = m.now;
    this.heardAt = monotonicNow();
    this.linkMessages++;
    const broker = this.host.broker;
    switch (m.kind) {
      case 'declares': {
        // A source sends it once, first (source.ts): another, later, would redo what the link has applied since.
        if (this.declared) throw new Error('DR stream: a second declares on one link');
        if (this.linkMessages > 1) throw new Error('DR stream: declares after other messages on this link (a source sends it first)');
        // Checked whole before any of it is applied (declares.ts); kept for a copy of the contents that follows (remakeChanged, pruneBindings).
        const declared = checkDeclares(m.entries ?? [], {
          filterOf: (queue) => this.stream.get(queue)?.exchanges,
          builtIn: (exchange) => broker.exchanges.get(exchange)?.builtIn === true,
        });
        this.declared = declared;
        for (const x of declared.exchanges) this.applyTopology(x);
        for (const [name, settings] of declared.queues) if (this.live(name)) this.ensureQueue(name, settings);
        for (const [queue, byExchange] of declared.binds) for (const [exchange, keys] of byExchange) for (const key of keys) this.applyTopology({ kind: 'bind', exchange, queue, key });
        return 0;
      }
      case 'snapshot-begin': {
        this.state = 'snapshot';
        this.snapshotStale = new Map();
        this.snapshotKeyed = new Set();
        let lsn = 0;
        for (const q of m.queues ?? []) {
          const s = this.stream.get(q);
          if (s) s.awaitingCopy = true;
          if (s?.mode === 'enqueue-and-dequeue' && this.live(q)) lsn = this.remakeChanged(q) || lsn;
          if (this.live(q)) lsn = this.pruneBindings(q) || lsn;
          // Memory goes with what a mirror already holds, not with the size of the copy.
          const local = broker.queues.get(q);
          if (s?.mode === 'enqueue-and-dequeue' && local && local.depth > 0) this.snapshotStale.set(q, new Set(local.ids()));
        }
        this.host.log.info({ queues: m.queues, reason: m.reason }, 'DR: the source is sending a snapshot of queues');
        return lsn;
      }
      case 'snapshot': {
        // A queue's window comes before its messages: its keys are ours before they are.
        // All of the batch's rows are checked before any is taken.
        const keys = (m.entries ?? []).flatMap((e) => (e.change.kind === 'dedup-keys' && this.live(e.change.queue) ? [e.change] : []));
        for (const c of keys) this.checkKeys(c, m.now);
        let keysLsn = 0;
        for (const c of keys) keysLsn = this.takeKeys(c) || keysLsn;
        const ops: TxOp[] = [];
        for (const e of m.entries ?? []) {
          if (e.change.kind !== 'enqueue' || !this.live(e.change.queue)) continue;
          this.snapshotStale?.get(e.change.queue)?.delete(e.change.message.id);
          if (broker.queues.get(e.change.queue)?.has(e.change.message.id)) continue;
          // A reattached copy's fill (or its copy of the contents, when the other site's log
          // no longer reaches back to its activation): among them, messages this site took
          // before the divergence point and consumed after it, which the other site still
          // holds. Their keys are in our window (from their first copy): taken whatever it
          // holds, as given-back messages are, or the copy lacks what the other site serves.
          // A copy that brought the source's window: each message is one the source holds, its
          // key (if any) is in the window now, and the message is taken all the same.
          const reattached = broker.drQueues.get(e.change.queue)?.fill === true;
          const keyed = this.snapshotKeyed?.has(e.change.queue) === true;
          ops.push(reattached || keyed ? { ...e.change, restored: true } : e.change);
        }
        this.appliedCopies += ops.length;
        return this.record([], 0, 0, ops) || keysLsn;
      }
      case 'fill-end': {
        // The reattached copy has what it lacked: from now on only the log.
        let lsn = 0;
        for (const q of m.queues ?? []) {
          const c = broker.drQueues.get(q);
          if (c?.fill && this.live(q)) lsn = broker.recordDr(drRoleChange(q, { ...c, fill: false })).lsn;
        }
        return lsn;
      }
      case 'snapshot-end': {
        const ops: TxOp[] = [];
        const queues: string[] = [];
        for (const q of m.queues ?? []) {
          const s = this.stream.get(q);
          if (!s || !this.live(q)) continue;
          // A copy announced by snapshot-begin replaces the contents, so its position may be
          // lower (a source behind the copy); without one, nothing undoes what was applied.
          if (!s.awaitingCopy) notBack('snapshot-end', q, s, m.lsn);
          queues.push(q);
          // A mirror holds exactly the source's contents: what the copy lacks was dequeued there.
          const local = broker.queues.get(q);
          const stale = this.snapshotStale?.get(q);
          if (s.mode === 'enqueue-and-dequeue' && local && stale) for (const id of stale) if (local.has(id)) ops.push({ kind: 'dequeue', queue: q, id });
        }
        const lsn = this.record(queues, m.lsn, m.time, ops, true);
        for (const q of queues) Object.assign(this.stream.get(q)!, { pos: m.lsn, time: m.time, awaitingCopy: false });
        this.snapshotStale = undefined;
        this.snapshotKeyed = undefined;
        for (const q of queues) this.needCopy.delete(q);
        this.state = 'connected';
        this.host.log.info({ queues, lsn: m.lsn }, 'DR: snapshot applied; following the log');
        return lsn;
      }
      case 'restart':
        return this.crossRestart(m);
      case 'heartbeat':
        for (const [q, s] of this.stream) if (!s.awaitingCopy && s.pos < m.lsn && this.live(q)) Object.assign(s, { pos: m.lsn, time: m.time });
        return 0;
      case 'changes':
        return this.applyChanges(m);
    }
  }

  /**
   * Rows of the source's duplicate-detection window, sent with a copy of the queue's
   * contents, taken into this queue's window as a change of our own log
   * (Broker.adoptDedupRows): so a client that resends after an activation what the
   * source took and consumed before the copy was read is refused as a duplicate. Returns
   * the change's LSN (0: nothing taken). The caller checked them (checkKeys).
   */
  private takeKeys(c: DedupKeys): number {
    const logged = this.host.broker.adoptDedupRows(c.queue, c.rows);
    if (!logged) return 0;
    this.snapshotKeyed!.add(c.queue);
    return logged.lsn;
  }

  /** Rows no tandem source sends (or sent outside a copy of the queue's contents) stop the stream. */
  private checkKeys(c: DedupKeys, sourceNow: number): void {
    if (!this.stream.get(c.queue)?.awaitingCopy || !this.snapshotKeyed) throw new Error(`DR stream: the keys of queue ${JSON.stringify(c.queue)} came outside a copy of its contents`);
    const bad = badDedupRows(c.rows, DR_DEDUP_ROWS, sourceNow + KEY_TIME_AHEAD_MS);
    if (bad) throw new Error(`DR stream: the keys of queue ${JSON.stringify(c.queue)} are malformed: ${bad}`);
  }

  /**
   * The source restarted and nothing these queues lack was journaled before it: they go
   * on from its restart point. A mirror drops what it holds from before the restart that
   * the source no longer has (non-durable messages the restart lost), in the change that
   * moves its position, so a mirror equals its source as a snapshot would have left it.
   * One that lacks a message the source holds cannot be mended by the log: it asks for a copy.
   */
  private crossRestart(m: DrStreamMessage): number {
    const broker = this.host.broker;
    const floor = m.floor ?? 0;
    const ops: TxOp[] = [];
    const queues: string[] = [];
    const lacking: string[] = [];
    for (const q of m.queues ?? []) {
      const s = this.stream.get(q);
      if (!s || !this.live(q) || s.awaitingCopy) continue;
      // The log goes on above the reservation, past every position a copy can hold.
      notBack('restart', q, s, m.lsn);
      const held = m.held?.[q];
      const local = broker.queues.get(q);
      if (s.mode === 'enqueue-and-dequeue' && held && local) {
        if (lacksAny(held, local)) {
          lacking.push(q);
          continue;
        }
        for (const id of local.ids()) {
          if (id >= floor) break;
          if (!inRanges(held, id)) ops.push({ kind: 'dequeue', queue: q, id });
        }
      }
      queues.push(q);
    }
    const lsn = queues.length > 0 ? this.record(queues, m.lsn, m.time, ops, true) : 0;
    for (const q of queues) Object.assign(this.stream.get(q)!, { pos: m.lsn, time: m.time });
    this.host.log.info({ queues, lsn: m.lsn, dropped: ops.length }, "DR: the source restarted; following its log across the gap (the mirrors dropped what the restart lost there)");
    if (lacking.length > 0) {
      for (const q of lacking) this.needCopy.add(q);
      this.host.log.warn({ queues: lacking }, 'DR: the restarted source holds messages these mirrors lack; asking for a copy');
      queueMicrotask(() => this.drop('a mirror lacks messages its restarted source holds: asking for a copy'));
    }
    return lsn;
  }

  private applyChanges(m: DrStreamMessage): number {
    const broker = this.host.broker;
    let ops: TxOp[] = [];
    let last = 0;
    let prev = 0;
    const flush = (lsn: number, time: number) => {
      const queues = [...this.stream].filter(([q, s]) => !s.awaitingCopy && s.pos < lsn && this.live(q)).map(([q]) => q);
      if (ops.length > 0) last = this.record(queues, lsn, time, ops);
      for (const q of queues) Object.assign(this.stream.get(q)!, { pos: lsn, time });
      ops = [];
    };
    const wants = (queue: string, lsn: number, dequeue: boolean): boolean => {
      const s = this.stream.get(queue);
      return s !== undefined && !s.awaitingCopy && lsn > s.pos && this.live(queue) && (!dequeue || s.mode === 'enqueue-and-dequeue');
    };
    const op = (o: TxOp, lsn: number) => {
      if (!wants(o.queue, lsn, o.kind === 'dequeue')) return;
      const q = broker.queues.get(o.queue);
      if (!q) return;
      // A dequeue may follow its enqueue in this same batch, so only enqueues are checked.
      // A message given back (a failed commit at the source had accepted it) may follow
      // that commit's dequeue of it in this batch: held here still, it is coming back.
      if (o.kind === 'dequeue' || !q.has(o.message.id) || (o.restored === true && leavesIn(ops, o.queue, o.message.id))) ops.push(o);
    };
    for (const e of m.entries ?? []) {
      const c = e.change;
      switch (c.kind) {
        case 'queue-declare':
          if (ops.length > 0) flush(prev, m.time);
          // In the log, a declare of a queue the copy holds is the source's making it again.
          if (this.live(c.name)) this.ensureQueue(c.name, checkedSettings(c.name, c.settings, settingsProblem), wants(c.name, e.lsn, false));
          break;
        case 'queue-dedup':
          // After what came before it, as at the source: the enqueues before it were keyed by the old window.
          if (ops.length > 0) flush(prev, m.time);
          if (this.live(c.name)) this.matchDedup(c.name, checkedSettings(c.name, c, windowProblem));
          break;
        case 'queue-delete': {
          // Deleted at the source: a mirror empties (a later declare refills it); enqueue-only keeps what it has.
          const s = this.stream.get(c.name);
          const local = broker.queues.get(c.name);
          if (local && wants(c.name, e.lsn, false)) this.unbindAll(c.name);
          if (s && local && wants(c.name, e.lsn, true)) {
            if (ops.length > 0) flush(prev, m.time);
            for (const id of [...local.ids()]) ops.push({ kind: 'dequeue', queue: c.name, id });
            flush(e.lsn, m.time);
          }
          break;
        }
        case 'exchange-declare':
        case 'exchange-delete':
        case 'bind':
        case 'unbind':
          // Topology is applied as it comes (each its own local change); redone after a restart, it changes nothing.
          if (c.kind === 'exchange-declare') refuseDrMark(c);
          this.applyTopology(c);
          break;
        case 'enqueue':
        case 'dequeue':
          op(c, e.lsn);
          break;
        case 'transaction':
          for (const o of c.changes) op(o, e.lsn);
          break;
        case 'dedup-forget':
          // Logged before the purge of the refused messages (dequeues after it): those
          // enqueued here are, once what came before is applied, so the keys this
          // queue's window read from the messages it names (`ids`) go too.
          if (wants(c.queue, e.lsn, true)) {
            if (ops.length > 0) flush(prev, m.time);
            broker.forgetDedupKeys(c.queue, c.keys, c.ids);
          }
          break;
        default:
          break;
      }
      prev = e.lsn;
      this.appliedChanges++;
    }
    flush(m.lsn, m.time);
    this.appliedBatches++;
    return last;
  }

  /** Still a passive DR queue of this source (activation or `dr del` stops it at once). */
  private live(queue: string): boolean {
    const c = this.host.broker.drQueues.get(queue);
    return c !== undefined && c.source === this.source && c.state === 'passive' && this.stream.has(queue);
  }

  private record(queues: string[], lsn: number, time: number, ops: TxOp[], always = false): number {
    if (ops.length === 0 && !always) return 0;
    return this.host.broker.recordDr({ kind: 'dr-transaction', queues, lsn, time, changes: ops.map(keptCopy) }).lsn;
  }

  /**
   * The source's delete took the queue's bindings there with it (none is logged as an
   * unbind): the copy's go too, in either mode. Kept, an activated copy of a queue the
   * source had deleted (a JMS subscription unsubscribed) took what its topic carries.
   */
  private unbindAll(queue: string): void {
    unbindQueue(this.host.broker, queue, () => false);
  }

  /** An exchange or binding of the source's that goes with our DR queues (see topology.ts). */
  private applyTopology(c: Change): void {
    const broker = this.host.broker;
    try {
      switch (c.kind) {
        case 'exchange-declare':
          if (!broker.exchanges.has(c.name)) {
            // Durable and HA-replicated whatever the source says, like the queues (copySettings):
            // the copies' bindings to them must survive a restart here and a failover of this
            // site's cluster (an exchange of the source's at level none reached no backup here).
            // Marked as made by this bridge (journaled and HA-replicated with the declare): only such an exchange does the source's delete take.
            const alternate = c.settings.alternateExchange && broker.exchanges.has(c.settings.alternateExchange) ? c.settings.alternateExchange : '';
            broker.declareExchange(c.name, c.type, { ...c.settings, durable: true, replicate: 'all', alternateExchange: alternate, madeByDr: this.mark });
            this.host.log.info({ exchange: c.name, source: this.source }, "DR: created the exchange with the source's settings");
          }
          break;
        case 'exchange-delete':
          this.deleteExchange(c.name);
          break;
        case 'bind':
          if (broker.exchanges.has(c.exchange) && broker.queues.has(c.queue) && this.follows(c.queue, c.exchange)) broker.bind(c.exchange, c.queue, c.key);
          break;
        case 'unbind':
          if (broker.exchanges.get(c.exchange)?.hasBinding(c.queue, c.key) && this.follows(c.queue, c.exchange)) broker.unbind(c.exchange, c.queue, c.key);
          break;
        default:
          break;
      }
    } catch (err) {
      // An exchange still used here (an alternate exchange of a local queue): ours stays, the stream goes on.
      this.host.log.warn({ change: c.kind, err: (err as Error).message }, 'DR: a topology change of the source was not applied here');
    }
  }

  /**
   * The source deleted exchange `name`, and its bindings there with it (none is logged as
   * an unbind): the copies' bindings to it here go too. The exchange itself goes only if
   * this bridge made it (marked with its source) and nothing else here still uses it: a
   * binding of a queue that is not a passive copy following it (the site's own, an
   * activated copy's, another source's copy's) keeps it, and so does its use as an
   * alternate exchange (deleteExchange refuses; applyTopology logs it). An exchange this
   * site had before DR, or one an older bridge made unmarked, is never deleted: its own
   * queues' bindings and routing stay as they were.
   */
  private deleteExchange(name: string): void {
    const broker = this.host.broker;
    const ex = broker.exchanges.get(name);
    if (!ex || ex.builtIn) return;
    for (const b of ex.bindings) if (this.follows(b.queue, name)) broker.unbind(name, b.queue, b.key);
    if (ex.settings.madeByDr !== this.mark || ex.bindingCount > 0) {
      this.host.log.info({ exchange: name, source: this.source, madeByDr: ex.settings.madeByDr, bindings: ex.bindingCount }, "DR: the source deleted the exchange; kept here (not made by this bridge, or still bound), without the copies' bindings");
      return;
    }
    broker.deleteExchange(name);
    this.host.log.info({ exchange: name, source: this.source }, 'DR: deleted the exchange, as the source did');
  }

  /**
   * Whether the copy `queue` takes the source's bindings to `exchange`: a passive copy, and
   * an exchange that the filter its request carried passes (the source sends no others).
   * A binding outside the filter is this site's own (pruneBindings keeps it): taken, a
   * source's unbind removed one, and its bind routed to the copy what it had not asked for.
   */
  private follows(queue: string, exchange: string): boolean {
    return this.live(queue) && exchangeMatcher(this.stream.get(queue)!.exchanges)(exchange);
  }

  /** `remade`: the source deleted the queue and made it again, after what the copy has applied (see remake). */
  private ensureQueue(name: string, settings: QueueSettings, remade = false): void {
    const broker = this.host.broker;
    if (remade && this.remake(name, settings)) return;
    if (broker.queues.has(name)) {
      // The source's window may have changed while no change could tell us (a copy of the
      // contents after a gap): its declare, sent with every link, says what it is now.
      this.matchDedup(name, settings);
      return;
    }
    if (!this.host.autoCreate) {
      this.queueErrors.set(name, `queue '${name}' does not exist on this broker and auto-create is off`);
      return;
    }
    // Journaled and HA-replicated whatever the source says: the DR position and contents must agree after a restart or failover.
    broker.declareQueue(name, this.copyOf(settings));
    this.host.log.info({ queue: name, source: this.source }, "DR: created the queue with the source's settings");
  }

  /**
   * The source deleted the queue and made it again (a JMS subscription replaced for
   * another topic, selector or noLocal, say): the copy, emptied by that delete, is made
   * again too, with the new settings and without the old bindings (the source's delete
   * dropped them; its new ones follow in the log). Kept as it was, the copy went on
   * selecting by the old selector and stayed bound to the old topic, and after activation
   * its subscriber's attach replaced it, backlog and all. An enqueue-only copy that kept
   * messages through the delete keeps its queue. False when nothing was remade.
   */
  private remake(name: string, settings: QueueSettings): boolean {
    const broker = this.host.broker;
    const q = broker.queues.get(name);
    if (!q || q.depth > 0 || !this.host.autoCreate) return false;
    broker.deleteQueue(name);
    this.ensureQueue(name, settings);
    this.host.log.info({ queue: name, source: this.source }, 'DR: the source made the queue again: so is the copy, with its settings');
    return true;
  }

  /**
   * At a copy of the contents: a mirror whose settings are not those the source declared
   * for it on this link (sameSourceQueue) was deleted and made again there while this copy
   * was away. What it holds was the deleted queue's: dropped (no dead letters: the
   * source's delete sent its own on), the queue made again as remake does, with the
   * declared bindings; the copy refills it. Returns the LSN of the last local change (0:
   * none).
   */
  private remakeChanged(name: string): number {
    const broker = this.host.broker;
    const local = broker.queues.get(name);
    const declared = this.declared?.queues.get(name);
    if (!local || !declared || !this.host.autoCreate || sameSourceQueue(local.settings, declared)) return 0;
    let lsn = 0;
    const ids = [...local.ids()];
    // In records of at most REMAKE_DROP_BATCH dequeues: an interrupted drop is finished by the next copy.
    for (let i = 0; i < ids.length; i += REMAKE_DROP_BATCH) {
      lsn = this.record([], 0, 0, ids.slice(i, i + REMAKE_DROP_BATCH).map((id): TxOp => ({ kind: 'dequeue', queue: name, id })));
    }
    if (!this.remake(name, declared)) return lsn;
    for (const [exchange, keys] of this.declared?.binds.get(name) ?? []) for (const key of keys) this.applyTopology({ kind: 'bind', exchange, queue: name, key });
    return broker.log.lsn;
  }

  /**
   * At a copy of the contents: the copy's bindings, among the exchanges its filter passes,
   * that the source did not declare on this link go (unbound there, or its queue made
   * again for another topic, while this copy was away past the kept changes), as the log
   * would have taken them. Kept, an activated copy took what the old topic carried.
   * Returns the LSN of the last local change (0: none).
   */
  private pruneBindings(name: string): number {
    const broker = this.host.broker;
    const declared = this.declared;
    if (!declared || !declared.queues.has(name)) return 0;
    const passes = exchangeMatcher(broker.drQueues.get(name)?.exchanges ?? '*');
    const kept = declared.binds.get(name);
    return unbindQueue(broker, name, (exchange, key) => !passes(exchange) || kept?.get(exchange)?.has(key) === true) ? broker.log.lsn : 0;
  }

  /** The settings a copy of a source queue with `settings` is made with (copy-settings.ts). */
  private copyOf(settings: QueueSettings): QueueSettings {
    const broker = this.host.broker;
    return copySettings(settings, broker.queueDefaults, (name) => broker.exchanges.has(name));
  }

  /** The window a copy keeps for the source's: the same, or this broker's default (tandemd.conf dedup-window) for a source queue without one. */
  private dedupOf(s: Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>): Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'> {
    return copyWindow(s, this.host.broker.queueDefaults);
  }

  /**
   * Give the copy the source's window (dedupOf) when it differs: one set at the source
   * after the copy was made (`tandem queue set --dedup-window`), so that after an
   * activation a client's resends are refused here as they were there. As at the source,
   * a resized window keeps its keys.
   */
  private matchDedup(name: string, s: Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>): void {
    const broker = this.host.broker;
    const q = broker.queues.get(name);
    // Only a passive copy follows the source: an activated queue is this site's own.
    if (!q || !this.live(name)) return;
    const want = this.dedupOf(s);
    const have = q.settings;
    if (have.dedupWindow === want.dedupWindow && have.dedupTtlMs === want.dedupTtlMs && have.dedupKey === want.dedupKey) return;
    broker.setQueueDedup(name, want);
    this.host.log.info({ queue: name, source: this.source, ...want }, "DR: the queue's duplicate-detection window set as the source's");
  }
}

/**
 * Refuse a source position below what the copy has applied, as decodeDrMessage refuses
 * numbers no position can be. Taken, it was journaled as the copy's position: the next
 * link asked from there (from 0 as a new copy, which skips the epoch check), and an
 * activation took it as the divergence point. Within one link the source and epoch are
 * those it accepted the request for, so a position only moves on, except by a copy of the
 * contents (snapshot-begin ... snapshot-end), which replaces what was applied.
 */
function notBack(kind: DrStreamKind, queue: string, s: StreamQueue, lsn: number): void {
  if (lsn < s.pos) throw new Error(`DR stream: ${kind} would move queue ${JSON.stringify(queue)} back to source position ${lsn}; it has applied up to ${s.pos}`);
}

/** `settings` of queue `queue` from the source's log, refused (the link with them) when `problem` finds them none a tandem queue has. */
function checkedSettings<T>(queue: string, settings: T, problem: (s: T) => string | undefined): T {
  const why = problem(settings);
  if (why) throw new Error(`DR stream: the source's log gives queue ${quotePeerValue(queue)} settings no tandem queue has: ${why}`);
  return settings;
}

/**
 * A copy is kept here as a durable message, whatever it was at the source: the
 * dr-transaction that brings it is journaled (with the position), so a restart keeps
 * it, and once the queue is activated and a consumer takes it, its dequeue must be
 * journaled too, or the next restart would bring it back. (The bytes, and so what a
 * consumer is told, are the source's.)
 */
function keptCopy(op: TxOp): TxOp {
  return op.kind === 'enqueue' && !op.message.durable ? { ...op, message: { ...op.message, durable: true } } : op;
}

/** Whether `ops` (a batch not applied yet) dequeues message `id` of `queue`. Asked only of a given-back message: rare. */
function leavesIn(ops: readonly TxOp[], queue: string, id: number): boolean {
  return ops.some((op) => op.kind === 'dequeue' && op.queue === queue && op.id === id);
}

/**
 * Whether some id of the ranges (sorted, not overlapping: decodeDrMessage checks) is
 * not in `queue`: it holds fewer of them than the ranges name. Counted range by range,
 * so the work is the queue's rows inside them, not the ranges' span: one range can
 * name millions of ids (a source's long queue), and id by id that held the event loop.
 */
function lacksAny(ranges: readonly number[], queue: Queue): boolean {
  for (let i = 0; i < ranges.length; i += 2) {
    const lo = ranges[i]!;
    const hi = ranges[i + 1]!;
    if (queue.countIdsBetween(lo, hi) < hi - lo + 1) return true;
  }
  return false;
}

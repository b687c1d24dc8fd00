// The broker model: queues, exchanges and bindings, and the one change log
// every state change goes through. Plain data and functions: no sockets, no
// timers (the clock is injected), so tests drive it directly.
import { ChangeLog } from './change-log.js';
import type {
  Change,
  DedupStamp,
  DrQueueState,
  DrRoleChange,
  ExchangeSettings,
  ExchangeType,
  LoggedChange,
  MessageRecord,
  QueueSettings,
  ReplicationLevel,
} from './changes.js';
import type { DeadLetterReason, DeadLetterWriter } from './dead-letter.js';
import { DEDUP_DIGEST_BYTES, dedupDigestAt, dedupDigestHex, writeDedupDigest, type DedupDigest, type DedupKeyReader, type DedupLookup } from './dedup-key.js';
import { dedupRowsAt, type DedupHit } from './dedup-window.js';
import { TandemError, invalidArgument, notFound } from './errors.js';
import { Exchange, checkBindingKey } from './exchange.js';
import { oneMoreDelivery } from './delivery-count.js';
import { Queue, type QueueEntry, type QueueHost, type RemovalReason } from './queue.js';
import { messageExpiry } from './message-expiry.js';
import { RoutingSelectors, type SelectorCompiler } from './routing-selectors.js';
import { heldUntilOf, type DeliveryTimeReader } from './scheduled.js';
import type { Publisher } from './no-local.js';
import { bodySize, copyMessage } from './paged-message.js';
import { keptRoutingKey } from './routed-by.js';
import { defaultExchangeSettings, defaultQueueSettings, refuseUnreplicatedAlternate } from './settings.js';

/** A message as received, before the broker gives it an id and an expiry. */
export interface IncomingMessage {
  bytes: Buffer;
  headerLength: number;
  durable: boolean;
  priority: number;
  /** Header ttl in ms, if the sender set one. */
  ttlMs: number | undefined;
  /** properties.absolute-expiry-time, ms since epoch, if set. */
  absoluteExpiry: number | undefined;
  deliveryCount: number;
  /** properties.subject; a dead letter's: the key its message was routed by (MessageRecord.subject). */
  subject: string | undefined;
  /** Where the properties section starts in `bytes` (-1: none), when the reader of the head found it; undefined: not known. */
  propertiesAt?: number;
}

export interface PublishResult {
  /** Queues the message went to. */
  queues: string[];
  /** The message id on those queues (0 if it went nowhere). */
  id: number;
  /** LSN of the last change the publish made (0 if it changed nothing). */
  lsn: number;
  /** Whether any of those changes must reach the journal before the sender is settled. */
  durable: boolean;
  /**
   * Every queue it was for already had its key: nothing was enqueued, and `lsn`/`durable`
   * are the first copy's, which the sender's settlement waits for.
   */
  duplicate?: boolean;
  /** Keys the publish put into windows (taken back if its journal write fails). */
  dedupKeys?: Array<{ queue: Queue; key: DedupDigest }>;
  /** A commit's messages (its `id` is 0), each where it went: taken back if its journal write fails. */
  enqueued?: Array<{ queue: string; id: number }>;
  /** A commit's acceptances, each message as it was taken: given back if its journal write fails. */
  accepted?: Array<{ queue: Queue; entry: QueueEntry }>;
}

export interface BrokerEvents {
  /** A queue has messages for consumers; the caller decides when to dispatch. */
  queueReady?(queue: Queue): void;
  /** An auto-delete queue lost its last consumer: delete it after its delay. */
  queueUnused?(queue: Queue): void;
  queueDeleted?(queue: Queue): void;
  /** A message's dedup key could not be compared (it passed, counted): worth a log line. */
  dedupKeyInvalid?(queue: Queue, reason: string, count: number): void;
  /**
   * A message leaving `queue` (rejected, expired, or left on it when it was deleted)
   * could not go on to its alternate exchange and was dropped: worth a warning.
   * `total`: Broker.deadLettersLost, this one counted.
   */
  deadLetterLost?(queue: Queue, id: number, reason: string, total: number): void;
}

export const builtInExchanges: Array<[string, ExchangeType]> = [
  ['amq.direct', 'direct'],
  ['amq.topic', 'topic'],
  ['amq.fanout', 'fanout'],
  ['amq.match', 'topic'],
];

export interface BrokerOptions {
  now?: () => number;
  /** ha-replicate: the level for queues and exchanges that set none. */
  defaultReplicate?: ReplicationLevel;
  events?: BrokerEvents;
  /** Reads a message's dedup key from its bytes (the AMQP edge's reader); without it no queue finds keys. */
  dedupKeys?: DedupKeyReader;
  /** Reads a message's group-id from its bytes (the AMQP edge's reader); without it no message is in a group. */
  groupKeys?: (bytes: Buffer, maxBytes: number) => string | undefined;
  /** Reads the delivery time a message's sender asked for (the AMQP edge's reader); without it no message is held (scheduled.ts). */
  deliveryTimes?: DeliveryTimeReader;
  /** Compiles a topic subscription's selector (QueueSettings.selector; the AMQP edge's); without it every message is selected. */
  selectors?: SelectorCompiler;
  /**
   * Writes what a dead letter says into its bytes (the AMQP edge's writer); without it
   * a dead letter goes on as the bytes its message arrived as, with the expiry it had
   * (none if it expired).
   */
  deadLetters?: DeadLetterWriter;
  /** Settings a queue declared without arguments gets (tandemd.conf's dedup-window and friends). */
  queueDefaults?: QueueSettings;
}

/** Where a message goes once dedup windows had their say. */
interface DedupRouting {
  /** The queues that take it, and beside each the stamp its window will hold (undefined: none). Two arrays, not an object per queue: this runs per message. */
  take: Queue[];
  stamps: Array<DedupStamp | undefined>;
  /** The first copy, when a window held the key. */
  hit: DedupHit | undefined;
}

type TxOp = Extract<Change, { kind: 'enqueue' | 'dequeue' }>;

/** A window's verdict that the message is a duplicate: the first copy. */
function isFirstCopy(verdict: DedupStamp | DedupHit | undefined): verdict is DedupHit {
  return verdict !== undefined && 'lsn' in verdict;
}

/** The answer to a publish every queue of which had its key: settled once the first copy is safe. */
function duplicateOf(hit: DedupHit): PublishResult {
  return { queues: [], id: 0, lsn: hit.lsn, durable: hit.durable, duplicate: true };
}

/** Whether any of `queues` keeps a duplicate-detection window. */
function anyWindow(queues: Queue[]): boolean {
  for (const q of queues) if (q.dedup) return true;
  return false;
}

/** `expiresAt` (0: none), or `queue`'s default ttl from `now` for a message that set neither a ttl nor an absolute expiry. */
function withDefaultTtl(queue: Queue, expiresAt: number, now: number): number {
  return expiresAt === 0 && queue.settings.defaultTtlMs > 0 ? now + queue.settings.defaultTtlMs : expiresAt;
}

/** An enqueue without the `restored` mark (a DR copy's record: see withoutDrDuplicates). */
function unmarked(op: Extract<Change, { kind: 'enqueue' }>): Extract<Change, { kind: 'enqueue' }> {
  if (op.restored === undefined) return op;
  const { restored: _restored, ...plain } = op;
  return plain;
}

/** Digests packed one after another, 16 bytes each (a dedup-forget's `keys`). */
function packDigests(keys: readonly DedupDigest[]): Buffer {
  const bytes = Buffer.allocUnsafe(keys.length * DEDUP_DIGEST_BYTES);
  keys.forEach((key, i) => writeDedupDigest(key, bytes, i * DEDUP_DIGEST_BYTES));
  return bytes;
}
export type DrChange = Extract<Change, { kind: 'dr-transaction' | 'dr-queue' | 'dr-role' }>;

/**
 * Sees each message just before it leaves its queue for good (consumed, rejected,
 * expired, dropped by a ring, purged, or taken by a committed transaction), while
 * the entry still holds the message: a DR copy in progress keeps what it has not
 * read yet (src/dr/snapshot.ts). A queue's delete is not reported per message.
 */
export interface RemovalWatcher {
  leaving(queue: Queue, entry: QueueEntry): void;
}

/** A queue in a DR pair with another cluster: its dr-role change as applied (see src/dr). */
export type DrQueueConfig = Omit<DrRoleChange, 'kind' | 'queue' | 'state'> & { state: Exclude<DrQueueState, 'removed'> };

/** The dr-role change that records `config` (HA snapshots, and every state change). */
export function drRoleChange(queue: string, c: DrQueueConfig | (Omit<DrQueueConfig, 'state'> & { state: DrQueueState })): DrRoleChange {
  const { source, mode, state, epoch, divergence, since, idFloor, fill, exchanges, tell } = c;
  return { kind: 'dr-role', queue, source, mode, state, epoch, divergence, since, idFloor, fill, exchanges, tell };
}

/**
 * Why a client may not publish to or consume from a DR queue here, or undefined
 * when it serves clients (activated, or not in a DR pair). Only a pair's source serves.
 */
export type DrRefusal = (queue: string, c: DrQueueConfig) => TandemError;

export class Broker implements QueueHost {
  readonly queues = new Map<string, Queue>();
  readonly exchanges = new Map<string, Exchange>();
  readonly log = new ChangeLog();
  readonly now: () => number;
  readonly defaultReplicate: ReplicationLevel;
  private readonly dedupKeys: DedupKeyReader | undefined;
  private readonly groupKeys: ((bytes: Buffer, maxBytes: number) => string | undefined) | undefined;
  private readonly deliveryTimes: DeliveryTimeReader | undefined;
  private readonly routingSelectors: RoutingSelectors;
  private readonly deadLetters: DeadLetterWriter | undefined;
  readonly queueDefaults: QueueSettings;
  epoch = 0;
  /** When a DR copy first attached to this cluster (0: never): see the 'dr-followed' change. */
  drFollowedSince = 0;
  events: BrokerEvents;
  /** DR secondary: configured queues, and the source position each has applied. */
  readonly drQueues = new Map<string, DrQueueConfig>();
  readonly drPositions = new Map<string, { lsn: number; time: number }>();
  /** Told of every message about to leave a queue (see RemovalWatcher); empty almost always. */
  readonly removalWatchers = new Set<RemovalWatcher>();
  /**
   * Set while the process is short of memory (src/ops/memory-alarm.ts): new
   * messages are refused with this reason; consumers, replication and DR go on.
   */
  memoryAlarm: string | undefined;
  /** Set by src/dr: the refusal a client gets from a DR queue that does not serve here. */
  drRefusal: DrRefusal | undefined;
  /**
   * Set by the daemon: why this broker takes no local change now (an HA backup, a
   * broker stopping), or undefined. Asked where a change follows from what a client
   * may still do there (a browser attaching to a backup's queue): see firstConsumer.
   */
  localChangesRefused: (() => string | undefined) | undefined;
  /** Messages that could not go on to an alternate exchange, and were dropped (events.deadLetterLost). */
  deadLettersLost = 0;
  private nextMessageId = 1;

  constructor(options: BrokerOptions = {}) {
    this.now = options.now ?? Date.now;
    this.defaultReplicate = options.defaultReplicate ?? 'all';
    this.events = options.events ?? {};
    this.dedupKeys = options.dedupKeys;
    this.groupKeys = options.groupKeys;
    this.deliveryTimes = options.deliveryTimes;
    this.routingSelectors = new RoutingSelectors(options.selectors, () => this.now());
    this.deadLetters = options.deadLetters;
    this.queueDefaults = options.queueDefaults ?? defaultQueueSettings;
    for (const [name, type] of builtInExchanges) {
      this.exchanges.set(name, new Exchange(name, type, { ...defaultExchangeSettings, durable: true }, true));
    }
  }

  /** Message ids up to `maxId` exist or existed (a recovered journal): new ones start above. */
  noteMessageIds(maxId: number): void {
    if (maxId >= this.nextMessageId) this.nextMessageId = maxId + 1;
  }

  /** The id the next new message will get (messages below it existed before now). */
  peekNextMessageId(): number {
    return this.nextMessageId;
  }

  /**
   * Every message held now is in doubt (Queue.markInDoubt): this broker becomes the one
   * serving them (a start from the journal, an HA promotion), and the broker that served
   * them before, or this one before a restart, may have delivered them. A queue made later
   * holds only newer ids, or messages moved here with their count (moveMessages).
   */
  markHeldInDoubt(): void {
    const now = this.now();
    for (const queue of this.queues.values()) queue.markInDoubt(this.nextMessageId, now);
  }

  /**
   * Does this broker hold anything the journal does not keep: a non-durable queue or
   * exchange (and so any binding to one), or a non-durable message? An HA backup
   * journals what a primary journals; while this is false its journal plus the
   * primary's log after it is everything it holds.
   */
  holdsNonDurableState(): boolean {
    for (const q of this.queues.values()) if (!q.settings.durable || q.nonDurableDepth > 0) return true;
    for (const x of this.exchanges.values()) if (!x.builtIn && !x.settings.durable) return true;
    return false;
  }

  /**
   * Refuse what an operator or client declares (management, the CLI, the console) when it
   * is replicated but names an alternate exchange that is not (refuseUnreplicatedAlternate).
   * Not part of declareQueue: a DR copy keeps the alternate its source gave it, and the
   * journal and HA backups never declare.
   */
  checkAlternateReplicated(what: 'queue' | 'exchange', name: string, settings: QueueSettings | ExchangeSettings): void {
    const alternate = settings.alternateExchange ? this.exchanges.get(settings.alternateExchange) : undefined;
    if (!alternate) return;
    refuseUnreplicatedAlternate(what, name, this.replicationOf(settings), { name: alternate.name, level: this.replicationOf(alternate.settings), builtIn: alternate.builtIn });
  }

  replicationOf(settings: { replicate: ReplicationLevel | undefined }): ReplicationLevel {
    return settings.replicate ?? this.defaultReplicate;
  }

  // ---- configuration -------------------------------------------------------

  queue(name: string): Queue {
    const q = this.queues.get(name);
    if (!q) throw notFound('queue', name);
    return q;
  }

  exchange(name: string): Exchange {
    const e = this.exchanges.get(name);
    if (!e) throw notFound('exchange', name);
    return e;
  }

  /** Create a queue; an existing one with the same name is returned as is. */
  declareQueue(name: string, settings: QueueSettings, owner?: string): { queue: Queue; created: boolean } {
    validateName('queue', name);
    const existing = this.queues.get(name);
    if (existing) return { queue: existing, created: false };
    if (this.exchanges.has(name)) {
      throw new TandemError('TANDEM_ERR_ALREADY_EXISTS', `'${name}' is already an exchange; pick another queue name`);
    }
    if (settings.alternateExchange && !this.exchanges.has(settings.alternateExchange)) {
      throw notFound('alternate exchange', settings.alternateExchange, 'create it first');
    }
    this.log.record({ kind: 'queue-declare', name, settings }, settings.durable);
    const queue = this.createQueue(name, settings);
    if (settings.exclusive) queue.owner = owner;
    return { queue, created: true };
  }

  /** Set an existing queue's duplicate-detection window (`tandem queue set`): one logged change. */
  setQueueDedup(name: string, s: Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>): Queue {
    const queue = this.queue(name);
    const change: Change = { kind: 'queue-dedup', name, dedupWindow: s.dedupWindow, dedupTtlMs: s.dedupTtlMs, dedupKey: s.dedupKey };
    this.log.record(change, queue.settings.durable);
    queue.changeDedup(s, this.now());
    return queue;
  }

  deleteQueue(name: string, options: { ifEmpty?: boolean; ifUnused?: boolean } = {}): number {
    const queue = this.queue(name);
    if (options.ifEmpty && queue.depth > 0) {
      throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${name}' holds ${queue.depth} messages; purge it or delete without --if-empty`);
    }
    if (options.ifUnused && queue.consumerCount > 0) {
      throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${name}' has ${queue.consumerCount} consumers; delete without --if-unused`);
    }
    const count = queue.depth;
    // Messages left on a deleted queue go to its alternate exchange (as qpidd does), each
    // sent on and dequeued in one record before the queue-delete, as moveToAlternate
    // does: logged after it, a crash or failover part-way through lost every message
    // not yet sent on (the queue gone, its dead letter never made). Each goes on by
    // itself, and one that cannot (reroute counts and reports it) never leaves the
    // delete half done.
    if (queue.settings.alternateExchange) {
      for (const entry of [...queue.liveEntries()]) {
        this.sendOnAndLeave(queue, entry, () => {
          try {
            this.reroute(queue, entry, 'deleted', true);
          } catch (err) {
            this.deadLetterLost(queue, entry, `it could not be rerouted: ${(err as Error).message}`);
          }
          // The model's copy goes with the queue (discard, below): only the log is told here.
          this.log.record({ kind: 'dequeue', queue: name, id: entry.msg.id }, messageDurable(entry.msg, queue));
        });
      }
    }
    for (const ex of this.exchanges.values()) ex.unbindQueue(name);
    this.queues.delete(name);
    queue.discard();
    this.log.record({ kind: 'queue-delete', name }, queue.settings.durable);
    this.events.queueDeleted?.(queue);
    return count;
  }

  /**
   * One slice of deleting a queue whose messages go to its alternate exchange
   * (deleteQueueInSlices, queue-slices.ts, runs slices with the event loop free between
   * them, then deleteQueue for what is left): up to `max` messages, the available ones in delivery order, then
   * the held ones (delivery delay) in id order, each sent on as deleteQueue sends it and
   * dequeued from `queue`, the two in one record; its body is read while its journal
   * record is still live. Returns how many left the queue (fewer than `max`: no
   * available or held message is left). A queue without an alternate exchange (or not
   * this broker's any more) moves nothing.
   */
  moveToAlternate(queue: Queue, max: number): number {
    if (this.queues.get(queue.name) !== queue || !queue.settings.alternateExchange) return 0;
    let n = 0;
    // Held ones too: left to deleteQueue's final pass, a million of them went in one step.
    for (const entries of [queue.availableEntries(), queue.heldEntries()]) {
      for (const entry of entries) {
        if (n >= max) return n;
        this.sendOnAndLeave(queue, entry, () => {
          try {
            // Not back into the queue being deleted (deleteQueue finds it gone already).
            this.reroute(queue, entry, 'deleted', true);
          } catch (err) {
            this.deadLetterLost(queue, entry, `it could not be rerouted: ${(err as Error).message}`);
          }
          queue.remove(entry, 'deleted');
        });
        n++;
      }
    }
    return n;
  }

  /**
   * One slice of moving messages from `from` to `to` (tandem queue move; moveInSlices,
   * queue-move.ts, runs the slices with the event loop free between them): up to `max`
   * available messages of `from`, in delivery order, each enqueued at the back of `to` as
   * a new message (a new id) with the same bytes and routing key, the expiry it set
   * itself (else `to`'s default-ttl, as for a publish: ownExpiresAt), and the
   * delivery-count `from` would deliver it with (deliveryCountOf), and dequeued from
   * `from`, the two as one record (inOneRecord). Held messages (delivery time), those out
   * with consumers and those set aside as unreadable stay. `to`'s limits hold as for a
   * publish: a full reject queue throws (TANDEM_ERR_QUEUE_FULL), a ring makes room by
   * dropping its oldest; one that cannot (those out with consumers or of a higher
   * priority) throws too, the message staying in `from`: a move loses nothing. `to`'s
   * duplicate-detection window is not consulted (a replayed message must reach its
   * consumers again though the window holds its key). Annotations consumers' modified
   * outcomes added in `from` (kept in memory only) do not go with it. Returns how many
   * moved: fewer than `max` when no available message of `from` is left, or when `to`
   * refused the next (a call then throws why: the first message of a call that `to`
   * refuses throws, so the caller knows how many moved before).
   */
  moveAvailable(from: Queue, to: Queue, max: number): number {
    if (from === to || this.queues.get(from.name) !== from || this.queues.get(to.name) !== to) return 0;
    const evictedFanOut = to.settings.limitPolicy === 'ring' ? this.deadLetterFanOut(to) + 1 : 0;
    let n = 0;
    for (const entry of from.availableEntries()) {
      if (n >= max) break;
      if (entry.unreadable !== undefined) continue; // never delivered here; a purge or delete removes it
      try {
        this.moveOne(from, to, entry, evictedFanOut);
      } catch (err) {
        if (n === 0 || !(err instanceof TandemError)) throw err;
        break;
      }
      n++;
    }
    if (n > 0) this.events.queueReady?.(to);
    return n;
  }

  /** moveAvailable's move of one message; `evictedFanOut`: a ring target's, for the record's bound (0: not a ring). */
  private moveOne(from: Queue, to: Queue, entry: QueueEntry, evictedFanOut: number): void {
    const size = bodySize(entry.msg);
    this.checkLimits([to], size);
    let copy: MessageRecord;
    try {
      copy = copyMessage(entry.msg, from.deliveryCountOf(entry));
    } catch (err) {
      throw new TandemError('TANDEM_ERR_PRECONDITION', `message ${entry.msg.id} of queue '${from.name}' cannot be read back (${(err as Error).message}); it stays there`);
    }
    // A ring's evictions join the record, each with its dead letter if it has an alternate exchange.
    const evicted = evictedFanOut > 0 ? to.byteDepth * evictedFanOut + to.depth * (128 + Buffer.byteLength(to.name)) : 0;
    this.inOneRecord(size + evicted, () => {
      // Not lost when there is no room: it stays in `from`.
      if (evictedFanOut > 0 && !to.makeRoom(size, copy.priority, false)) {
        throw new TandemError('TANDEM_ERR_QUEUE_FULL', `ring queue '${to.name}' cannot make room: its available messages cannot make way (out with consumers, held, or of a higher priority)`);
      }
      // Its own expiry goes with it; one from `from`'s default-ttl stays there, and `to`'s applies as for a publish.
      const message: MessageRecord = { ...copy, id: this.nextMessageId++, expiresAt: withDefaultTtl(to, this.ownExpiresAt(copy, copy.bytes), this.now()) };
      // Marked `restored`, as a given-back message is: no new publish, so a DR copy whose
      // window holds its key (its first copy's) takes it, as this broker's target did,
      // rather than drop it as a duplicate while its dequeue from `from` goes through.
      this.log.record({ kind: 'enqueue', queue: to.name, message, restored: true }, messageDurable(message, to));
      // Available in `from`, so due: not held again for a delivery time its bytes may name.
      to.enqueue(message, 0);
      from.remove(entry, 'purged');
    });
  }

  /**
   * Run `move`, which sends `entry` on to `from`'s alternate exchange and dequeues it, as
   * one record (inOneRecord).
   */
  private sendOnAndLeave(from: Queue, entry: QueueEntry, move: () => void): void {
    this.inOneRecord(bodySize(entry.msg) * (this.deadLetterFanOut(from) + 1), move);
  }

  /**
   * Run `move`, which puts a message in its new place(s) and dequeues it from its old, as
   * one record (ChangeLog.asOneChange): logged as two, a crash or failover between them
   * left the message in both places (a replication batch, 256 KiB, ends after a large
   * enqueue more often than not), and a new primary dead-lettered an expired one again.
   * Separate records, in that order, when one could be too large for the journal
   * (`bound`, the bytes it may take: a large message fanned out to many queues).
   */
  private inOneRecord(bound: number, move: () => void): void {
    if (bound > MAX_TRANSACTION_RECORD_BYTES / 2) return move();
    this.log.asOneChange(move);
  }

  /** At most how many queues a dead letter of `from` goes to: the most bindings of an exchange routeVia may route it by. */
  private deadLetterFanOut(from: Queue): number {
    let most = 0;
    let exchange = this.exchanges.get(from.settings.alternateExchange);
    // routeVia follows at most 8 alternate exchanges past the first.
    for (let depth = 0; exchange && depth <= 8; depth++) {
      most = Math.max(most, exchange.bindingCount);
      exchange = exchange.settings.alternateExchange ? this.exchanges.get(exchange.settings.alternateExchange) : undefined;
    }
    return most;
  }

  declareExchange(name: string, type: ExchangeType, settings: ExchangeSettings): { exchange: Exchange; created: boolean } {
    validateName('exchange', name);
    const existing = this.exchanges.get(name);
    if (existing) {
      if (existing.type !== type) {
        throw new TandemError('TANDEM_ERR_ALREADY_EXISTS', `exchange '${name}' exists with type ${existing.type}, not ${type}`);
      }
      return { exchange: existing, created: false };
    }
    if (this.queues.has(name)) {
      throw new TandemError('TANDEM_ERR_ALREADY_EXISTS', `'${name}' is already a queue; pick another exchange name`);
    }
    if (settings.alternateExchange && !this.exchanges.has(settings.alternateExchange)) {
      throw notFound('alternate exchange', settings.alternateExchange, 'create it first');
    }
    this.log.record({ kind: 'exchange-declare', name, type, settings }, settings.durable);
    const exchange = new Exchange(name, type, settings);
    this.exchanges.set(name, exchange);
    return { exchange, created: true };
  }

  deleteExchange(name: string): void {
    const exchange = this.exchange(name);
    if (exchange.builtIn) throw new TandemError('TANDEM_ERR_PRECONDITION', `'${name}' is built in and cannot be deleted`);
    for (const e of this.exchanges.values()) {
      if (e.settings.alternateExchange === name) {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `exchange '${e.name}' uses '${name}' as alternate exchange`);
      }
    }
    for (const q of this.queues.values()) {
      if (q.settings.alternateExchange === name) {
        throw new TandemError('TANDEM_ERR_PRECONDITION', `queue '${q.name}' uses '${name}' as alternate exchange`);
      }
    }
    this.exchanges.delete(name);
    this.log.record({ kind: 'exchange-delete', name }, exchange.settings.durable);
  }

  bind(exchangeName: string, queueName: string, key: string): boolean {
    const exchange = this.exchange(exchangeName);
    const queue = this.queue(queueName);
    checkBindingKey(exchange.type, key);
    if (exchange.hasBinding(queueName, key)) return false;
    this.log.record({ kind: 'bind', exchange: exchangeName, queue: queueName, key }, bindingDurable(exchange, queue));
    return exchange.bind(queueName, key);
  }

  unbind(exchangeName: string, queueName: string, key: string): boolean {
    const exchange = this.exchange(exchangeName);
    if (!exchange.hasBinding(queueName, key)) {
      throw notFound('binding', `${exchangeName} -> ${queueName} (key '${key}')`);
    }
    const queue = this.queues.get(queueName);
    this.log.record({ kind: 'unbind', exchange: exchangeName, queue: queueName, key }, queue ? bindingDurable(exchange, queue) : false);
    return exchange.unbind(queueName, key);
  }

  // ---- messages --------------------------------------------------------------

  /**
   * Where an address leads: a queue, an exchange, or `exchange/key`, an exchange with the
   * routing key after the first '/' (qpid's address form, and how JMS topics are named
   * here: docs/jms.md). Queue names cannot hold '/', so the forms never collide.
   */
  resolve(address: string): { queue: Queue } | { exchange: Exchange; key?: string } | undefined {
    const queue = this.queues.get(address);
    if (queue) return { queue };
    const exchange = this.exchanges.get(address);
    if (exchange) return { exchange };
    const slash = address.indexOf('/');
    const keyed = slash > 0 ? this.exchanges.get(address.slice(0, slash)) : undefined;
    if (keyed) return { exchange: keyed, key: address.slice(slash + 1) };
    return undefined;
  }

  /** The queue or exchange an address names, for access checks: `exchange/key` is its exchange. */
  addressBase(address: string): string {
    const target = this.resolve(address);
    return target && 'exchange' in target ? target.exchange.name : address;
  }

  /**
   * Route a message sent to an address and enqueue it. Throws a TandemError if a
   * queue with the reject policy is full (nothing is enqueued anywhere then).
   * `publisher`: who sent it, so a noLocal subscription of theirs does not get it (no-local.ts).
   * `heldUntil`: the delivery time the edge read from it (the deliveryTimes reader's, as
   * Broker.heldUntil gives it; 0: not held), read once for every queue it reaches;
   * undefined: each queue reads it.
   */
  publish(address: string, msg: IncomingMessage, options: { internal?: boolean; publisher?: Publisher; heldUntil?: number } = {}): PublishResult {
    // Management replies to the requester's own temporary queue still go out: operators need them most now.
    if (this.memoryAlarm && !options.internal) throw new TandemError('TANDEM_ERR_MEMORY_FULL', this.memoryAlarm);
    const target = this.resolve(address);
    if (!target) throw notFound('queue or exchange', address);
    const key = 'queue' in target ? undefined : target.key;
    const queues = this.routingSelectors.filter('queue' in target ? [target.queue] : this.routeVia(target.exchange, key ?? msg.subject), msg, options.publisher);
    // No DR queue here (the usual case): not even the list of names is made.
    if (!options.internal && this.drQueues.size > 0) this.checkDrServing(queues.map((q) => q.name));
    // Its records keep the key it was routed by, for its dead letter (routed-by.ts).
    return this.enqueueAll(queues, msg, options.heldUntil, keptRoutingKey(msg.subject, key));
  }

  /** Throw the DR refusal of the first of `queues` that does not serve clients here. */
  checkDrServing(queues: Iterable<string>): void {
    if (this.drQueues.size === 0) return;
    for (const q of queues) {
      const c = this.drQueues.get(q);
      if (c && c.state !== 'active') {
        throw this.drRefusal?.(q, c) ?? new TandemError('TANDEM_ERR_PRECONDITION', `queue '${q}' is a DR queue that does not serve clients here (${c.state})`);
      }
    }
  }

  /** A consumer accepted a delivery: the message leaves the queue. */
  accept(queue: Queue, entry: QueueEntry): void {
    if (this.keptForDr(queue, entry)) return;
    queue.remove(entry, 'accepted');
  }

  /** A consumer rejected a delivery: it leaves the queue, to the alternate exchange if any. */
  reject(queue: Queue, entry: QueueEntry): void {
    if (this.keptForDr(queue, entry)) return;
    queue.remove(entry, 'rejected');
  }

  /**
   * A DR queue that no longer serves here takes no settlement: the change would never
   * reach the site that serves it now. The message goes back (its consumer was detached).
   */
  private keptForDr(queue: Queue, entry: QueueEntry): boolean {
    if (this.drQueues.size === 0) return false;
    const c = this.drQueues.get(queue.name);
    if (!c || c.state === 'active') return false;
    queue.release(entry, { deliveryFailed: false, undeliverableHere: false });
    return true;
  }

  /** Commit a transaction's sends (each from `publisher`, for noLocal) and acceptances as one change. */
  commit(sends: Array<{ address: string; msg: IncomingMessage }>, accepts: Array<{ queue: Queue; entry: QueueEntry }>, publisher?: Publisher): PublishResult {
    if (this.memoryAlarm && sends.length > 0) throw new TandemError('TANDEM_ERR_MEMORY_FULL', `${this.memoryAlarm}; the transaction was rolled back`);
    // Check every limit first so a failing commit changes nothing.
    const routed = sends.map(({ address, msg }) => {
      const target = this.resolve(address);
      if (!target) throw notFound('queue or exchange', address, 'the transaction was rolled back');
      const key = 'queue' in target ? undefined : target.key;
      const queues = this.routingSelectors.filter('queue' in target ? [target.queue] : this.routeVia(target.exchange, key ?? msg.subject), msg, publisher);
      // Kept for its dead letter, as publish keeps it (and counted in the record's size below).
      return { queues, msg, key: keptRoutingKey(msg.subject, key) };
    });
    // Sends to the same queue add up: check each against the ones before it.
    const pending = new Map<Queue, { count: number; bytes: number }>();
    for (const { queues, msg } of routed) this.checkLimits(queues, msg.bytes.length, pending);
    // A DR queue that hands over (or is a copy) takes no sends and no acceptances: they would never reach the other site.
    this.checkDrServing([...routed.flatMap((r) => r.queues.map((q) => q.name)), ...accepts.map((a) => a.queue.name)]);
    // One record however many queues its messages fan out to: one the journal could not read back
    // would keep the broker from starting after a crash (a restart from the checkpoint is spared).
    // Counted as if every copy were taken (duplicates only make it smaller), with the
    // most dequeues the ring queues among them may add to it (ringEvictionBound).
    const recordBytes = transactionRecordBound(
      [...routed.flatMap(({ queues, msg, key }) => queues.map((q) => ({ queue: q.name, message: { bytes: msg.bytes, subject: key } }))), ...accepts.map(({ queue }) => ({ queue: queue.name }))],
      ringEvictionBound(routed),
    );
    if (recordBytes > MAX_TRANSACTION_RECORD_BYTES) {
      throw new TandemError(
        'TANDEM_ERR_TRANSACTION',
        `the transaction's sends and acceptances (each message once for each queue it routes to, with a dequeue for each message they may push out of a ring queue) would make a journal record of about ${recordBytes} bytes, more than the ${MAX_TRANSACTION_RECORD_BYTES / 1024 ** 3} GiB one record may be: send fewer or smaller messages in each transaction, or route them to fewer queues`,
      );
    }
    const ops: TxOp[] = [];
    let durable = false;
    // Keys enter windows at commit; a key sent twice in one transaction is taken once.
    const seen = new Map<Queue, Set<string>>();
    const keys: Array<{ queue: Queue; key: DedupDigest }> = [];
    let firstCopyLsn = 0;
    for (const { queues, msg, key } of routed) {
      const now = this.now();
      const { take, stamps, hit } = this.dedupRoute(queues, msg, now, seen);
      if (hit && hit.lsn > firstCopyLsn) firstCopyLsn = hit.lsn;
      if (take.length === 0) continue;
      const id = this.nextMessageId++;
      for (let i = 0; i < take.length; i++) {
        const queue = take[i]!;
        const stamp = stamps[i];
        const record = this.messageFor(queue, msg, id, now, key);
        durable ||= messageDurable(record, queue);
        ops.push(stamp ? { kind: 'enqueue', queue: queue.name, message: record, dedup: stamp } : { kind: 'enqueue', queue: queue.name, message: record });
        if (stamp) keys.push({ queue, key: stamp.key });
      }
    }
    for (const { queue, entry } of accepts) {
      if (!queue.has(entry.msg.id)) continue;
      durable ||= messageDurable(entry.msg, queue);
      ops.push({ kind: 'dequeue', queue: queue.name, id: entry.msg.id });
    }
    // Only duplicates: safe once their first copies are (durable: those may be).
    if (ops.length === 0) return { queues: [], id: 0, lsn: firstCopyLsn, durable: firstCopyLsn > 0, duplicate: firstCopyLsn > 0 };
    if (this.removalWatchers.size > 0) {
      for (const { queue, entry } of accepts) if (queue.has(entry.msg.id)) for (const w of this.removalWatchers) w.leaving(queue, entry);
    }
    const touched = new Set<Queue>();
    const enqueued: Array<{ queue: string; id: number }> = [];
    const accepted: Array<{ queue: Queue; entry: QueueEntry }> = [];
    let logged: LoggedChange | undefined;
    // One record: the transaction's ops, then the dequeues of what its enqueues pushed out
    // of a ring. Logged after it, a failover between the two left the promoted backup's
    // ring over its max-count by the evicted messages.
    this.log.asOneChange(() => {
      for (const op of ops) logged = this.log.record(op, durable);
      for (const a of accepts) if (a.queue.drop(a.entry.msg.id)) accepted.push(a);
      for (const op of ops) {
        if (op.kind !== 'enqueue') continue;
        const queue = this.queue(op.queue);
        // A full ring whose available messages cannot make way loses the new one, as on a
        // publish (see makeRoom); its enqueue is in the record, so it leaves as a ring drop.
        const room = queue.settings.limitPolicy !== 'ring' || queue.makeRoom(op.message.bytes.length);
        queue.enqueue(op.message);
        if (!room) queue.remove(queue.entry(op.message.id)!, 'ring');
        if (op.dedup) queue.dedup?.add(op.dedup.key, op.dedup.at, logged!.lsn, durable);
        touched.add(queue);
        enqueued.push({ queue: queue.name, id: op.message.id });
      }
    });
    for (const queue of touched) this.events.queueReady?.(queue);
    return { queues: [...touched].map((q) => q.name), id: 0, lsn: Math.max(logged!.lsn, this.log.lsn, firstCopyLsn), durable, dedupKeys: keys, enqueued, accepted };
  }

  /**
   * Drop expired messages from every queue, at most `limit` of them: a caller that gets
   * `limit` back calls again (after letting the event loop run) for the rest.
   */
  expire(limit = Infinity): number {
    const now = this.now();
    let n = 0;
    for (const queue of [...this.queues.values()]) {
      if (n >= limit) break;
      n += queue.expire(now, limit - n);
    }
    return n;
  }

  /**
   * Move available messages to another queue as one transaction (the quarantine of a
   * reattached DR queue): each keeps its id and bytes and is kept durable there, with the
   * delivery-count `from` would deliver it with (in doubt there: counted once, not again
   * in `to`). Returns how many moved.
   */
  moveMessages(from: string, to: string, ids: Iterable<number>): number {
    const source = this.queue(from);
    const target = this.queue(to);
    const ops: TxOp[] = [];
    for (const id of ids) {
      const entry = source.entry(id);
      if (!entry || entry.acquiredBy) continue;
      ops.push({ kind: 'dequeue', queue: from, id }, { kind: 'enqueue', queue: to, message: { ...copyMessage(entry.msg, source.deliveryCountOf(entry)), durable: true } });
    }
    if (ops.length === 0) return 0;
    this.log.record({ kind: 'transaction', changes: ops }, true);
    for (const op of ops) {
      if (op.kind === 'dequeue') source.drop(op.id);
      else {
        target.enqueue(op.message);
        target.alreadyCounted(op.message.id);
      }
    }
    this.events.queueReady?.(target);
    return ops.length / 2;
  }

  /** Record and apply a DR change (bridge or `tandem dr`): one logged, journaled change. */
  recordDr(change: DrChange): LoggedChange {
    if (change.kind === 'dr-transaction') change = { ...change, changes: this.withoutDrDuplicates(change.changes) };
    const logged = this.log.record(change, true);
    this.applyChange(change, logged.lsn, true);
    return logged;
  }

  /** A DR copy attached: say so in the log once (journaled, replicated), so the whole cluster keeps the DR window. */
  noteDrFollowed(): void {
    if (this.drFollowedSince > 0) return;
    this.drFollowedSince = this.now();
    this.log.record({ kind: 'dr-followed', since: this.drFollowedSince }, true);
  }

  raiseEpoch(epoch: number): LoggedChange {
    if (epoch <= this.epoch) throw invalidArgument(`epoch ${epoch} is not above the current ${this.epoch}`);
    this.epoch = epoch;
    return this.log.record({ kind: 'epoch', epoch }, true);
  }

  // ---- applying changes made elsewhere (journal replay, HA, DR) ---------------

  /**
   * Forget every queue, exchange and binding (built-ins stay), without logging:
   * a backup about to load a primary's snapshot into a fresh journal.
   */
  resetState(): void {
    // Dropping each queue also drops its bindings, on built-in exchanges too.
    for (const queue of [...this.queues.values()]) this.dropQueue(queue.name);
    for (const ex of [...this.exchanges.values()]) if (!ex.builtIn) this.exchanges.delete(ex.name);
    this.epoch = 0;
    this.drFollowedSince = 0;
    this.drQueues.clear();
    this.drPositions.clear();
    this.log.rewind(0);
  }

  /** Apply a change recorded by another broker (or by this one before a restart). */
  apply(entry: LoggedChange, options: { adopt: boolean } = { adopt: true }): void {
    this.applyChange(entry.change, entry.lsn, entry.durable);
    if (options.adopt) this.log.adopt(entry);
    else this.log.resumeAfter(entry.lsn);
  }

  /** `lsn`, `durable`: of the logged change this is (or is part of). */
  private applyChange(change: Change, lsn: number, durable: boolean): void {
    switch (change.kind) {
      case 'queue-declare': {
        // A declare for a queue we hold means it was deleted and re-created elsewhere.
        if (this.queues.has(change.name)) this.dropQueue(change.name);
        this.createQueue(change.name, change.settings);
        break;
      }
      case 'queue-delete':
        if (this.queues.has(change.name)) this.dropQueue(change.name);
        break;
      case 'exchange-declare':
        if (!this.exchanges.get(change.name)?.builtIn) {
          this.exchanges.set(change.name, new Exchange(change.name, change.type, change.settings));
        }
        break;
      case 'exchange-delete':
        if (!this.exchanges.get(change.name)?.builtIn) this.exchanges.delete(change.name);
        break;
      case 'bind':
        this.exchanges.get(change.exchange)?.bind(change.queue, change.key);
        break;
      case 'unbind':
        this.exchanges.get(change.exchange)?.unbind(change.queue, change.key);
        break;
      case 'enqueue': {
        const queue = this.queues.get(change.queue);
        if (queue && !queue.has(change.message.id)) {
          queue.enqueue(change.message);
          this.events.queueReady?.(queue);
        }
        // The broker that logged it decided it was no duplicate; its key enters the window
        // here too, appended (a backup's window is indexed only once it must answer).
        if (change.dedup && queue?.dedup) queue.dedup.appended(change.dedup.key, change.dedup.at, lsn, durable && messageDurable(change.message, queue), this.now());
        if (change.message.id >= this.nextMessageId) this.nextMessageId = change.message.id + 1;
        break;
      }
      case 'dequeue':
        this.queues.get(change.queue)?.drop(change.id);
        break;
      case 'dedup-keys':
        // Not durable: keys of non-durable messages (an HA snapshot's), which a restart forgets.
        this.queues.get(change.queue)?.dedup?.addRows(change.rows, this.now(), 0, durable);
        break;
      case 'dedup-forget': {
        // Its `ids` name messages of a queue without a window here (forgetDedupKeys):
        // nothing to take out. A backup's window is indexed here if it was not (a rare
        // change: the cost of indexing once beats a walk of the ring for each key).
        const window = this.queues.get(change.queue)?.dedup;
        if (window) for (let at = 0; at + DEDUP_DIGEST_BYTES <= change.keys.length; at += DEDUP_DIGEST_BYTES) window.remove(dedupDigestAt(change.keys, at));
        break;
      }
      case 'queue-dedup':
        this.queues.get(change.name)?.changeDedup(change, this.now());
        break;
      case 'queue-consumed':
        this.queues.get(change.name)?.markConsumed();
        break;
      case 'transaction':
        for (const op of change.changes) this.applyChange(op, lsn, durable);
        break;
      case 'epoch':
        if (change.epoch > this.epoch) this.epoch = change.epoch;
        break;
      case 'dr-followed':
        if (this.drFollowedSince === 0) this.drFollowedSince = change.since;
        break;
      case 'dr-transaction':
        for (const op of change.changes) this.applyChange(op, lsn, durable);
        for (const q of change.queues) this.drPositions.set(q, { lsn: change.lsn, time: change.time });
        break;
      case 'dr-queue':
        // Written before the DR round trip: epoch 1, no activation recorded.
        if (change.state === 'removed') this.drQueues.delete(change.queue);
        else this.drQueues.set(change.queue, { source: change.source, mode: change.mode, state: change.state, epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false });
        break;
      case 'dr-role': {
        const { kind: _kind, queue, state, ...rest } = change;
        if (state === 'removed') this.drQueues.delete(queue);
        else this.drQueues.set(queue, { ...rest, state });
        // Activated: what the copy holds (ids below the floor) the other site may have delivered.
        if (state === 'active') this.queues.get(queue)?.markInDoubt(change.idFloor, this.now());
        break;
      }
    }
  }

  // ---- QueueHost -------------------------------------------------------------

  removed(queue: Queue, entry: QueueEntry, reason: RemovalReason): void {
    for (const w of this.removalWatchers) w.leaving(queue, entry);
    // The dead letter and the dequeue are one record, as in moveToAlternate: a crash or
    // failover leaves the message in one of the two queues, never both, never neither.
    // In a commit (a ring's eviction) the dequeue joins the commit's record (Broker.commit).
    const dequeue = () => this.log.record({ kind: 'dequeue', queue: queue.name, id: entry.msg.id }, messageDurable(entry.msg, queue));
    if ((reason === 'rejected' || reason === 'expired') && queue.settings.alternateExchange) {
      this.sendOnAndLeave(queue, entry, () => {
        // An expired message routed back into its own queue would reach its consumers after
        // all, and expire (and be dead-lettered) again with each default-ttl, for ever.
        this.reroute(queue, entry, reason, reason === 'expired');
        dequeue();
      });
    } else dequeue();
  }

  unused(queue: Queue): void {
    this.events.queueUnused?.(queue);
  }

  /**
   * A DR queue that does not serve here (a passive copy; a fenced or diverged source)
   * expires nothing: the site that serves it does, and its dequeues and dead letters come
   * by the DR stream. Expired here too, a copy dead-lettered each message a second time,
   * under an id of this broker's that the source gives another message.
   */
  expiresHere(queue: Queue): boolean {
    return this.servesHere(queue);
  }

  /** Whether `queue` serves clients on this site: not a DR queue, or an active one. */
  private servesHere(queue: Queue): boolean {
    if (this.drQueues.size === 0) return true;
    const c = this.drQueues.get(queue.name);
    return c === undefined || c.state === 'active';
  }

  /** A dispatch passed over all the rows it may of groups others own, or dropped all the expired rows it may (queue.ts GROUP_SCAN_LIMIT, EXPIRED_PER_DISPATCH): it goes on after the event loop ran. */
  moreToDispatch(queue: Queue): void {
    this.events.queueReady?.(queue);
  }

  groupKey(bytes: Buffer, maxBytes: number): string | undefined {
    return this.groupKeys?.(bytes, maxBytes);
  }

  heldUntil(bytes: Buffer): number {
    if (!this.deliveryTimes) return 0;
    const now = this.now();
    return heldUntilOf(this.deliveryTimes(bytes, now), now);
  }

  deliveryTimeFixed(bytes: Buffer): boolean {
    const time = this.deliveryTimes?.(bytes, this.now());
    return time?.status === 'at' && time.fixed;
  }

  /**
   * Move held messages whose delivery time has come into their queues' rows, at most
   * `limit` of them (a caller that gets `limit` back calls again after letting the event
   * loop run, as for expire); each queue that took some is dispatched.
   */
  releaseDue(limit = Infinity): number {
    const now = this.now();
    let n = 0;
    for (const queue of this.queues.values()) {
      if (n >= limit) break;
      if (queue.scheduledDepth === 0) continue;
      const moved = queue.releaseDue(now, limit - n);
      if (moved > 0) this.events.queueReady?.(queue);
      n += moved;
    }
    return n;
  }

  /**
   * An auto-delete queue's first consumer: logged ('queue-consumed'), so the broker
   * that serves it after a restart or a failover deletes it once it has no consumer,
   * and keeps one that never had any. A queue that is neither durable nor replicated
   * is known to this broker alone: marked without a record. A broker that takes no
   * local change (a backup's browser) leaves it unmarked: the log is its primary's.
   */
  firstConsumer(queue: Queue): void {
    if (this.queues.get(queue.name) !== queue) return;
    if (!queue.settings.durable && this.replicationOf(queue.settings) === 'none') {
      queue.markConsumed();
      return;
    }
    if (this.localChangesRefused?.() !== undefined) return;
    this.log.record({ kind: 'queue-consumed', name: queue.name }, queue.settings.durable);
    queue.markConsumed();
  }

  // ---- internals -------------------------------------------------------------

  private createQueue(name: string, settings: QueueSettings): Queue {
    const queue = new Queue(name, settings, this);
    this.queues.set(name, queue);
    return queue;
  }

  /** Remove a queue without logging (the log already says it is gone). */
  private dropQueue(name: string): void {
    const queue = this.queues.get(name);
    if (!queue) return;
    for (const ex of this.exchanges.values()) ex.unbindQueue(name);
    this.queues.delete(name);
    queue.discard();
    this.events.queueDeleted?.(queue);
  }

  private routeVia(exchange: Exchange, subject: string | undefined, depth = 0): Queue[] {
    const names = exchange.route(subject);
    if (names.length === 0 && exchange.settings.alternateExchange && depth < 8) {
      const alternate = this.exchanges.get(exchange.settings.alternateExchange);
      if (alternate) return this.routeVia(alternate, subject, depth + 1);
    }
    const out: Queue[] = [];
    for (const n of names) {
      const q = this.queues.get(n);
      if (q) out.push(q);
    }
    return out;
  }

  private checkLimits(queues: Queue[], size: number, pending?: Map<Queue, { count: number; bytes: number }>): void {
    for (const queue of queues) {
      const { limitPolicy, maxSize } = queue.settings;
      if (limitPolicy !== 'reject') {
        // A ring makes room by dropping its oldest; for a message larger than the whole
        // queue that would empty it and still go over max-size. qpidd refuses it too.
        if (maxSize > 0 && size > maxSize) {
          throw new TandemError(
            'TANDEM_ERR_QUEUE_FULL',
            `a message of ${size} bytes is larger than queue '${queue.name}' may hold (max-size ${maxSize} bytes); send smaller messages, or raise its limit`,
          );
        }
        continue;
      }
      let promised = pending?.get(queue);
      if (pending && !promised) pending.set(queue, (promised = { count: 0, bytes: 0 }));
      const limit = queue.limitExceeded(size, promised);
      if (limit) {
        throw new TandemError(
          'TANDEM_ERR_QUEUE_FULL',
          `queue '${queue.name}' is full (${limit}); consume from it, or raise its limit, or use policy ring`,
        );
      }
      if (promised) {
        promised.count++;
        promised.bytes += size;
      }
    }
  }

  /** `key`: what the record keeps as its subject, the key its dead letter is routed by (routed-by.ts). */
  private messageFor(queue: Queue, msg: IncomingMessage, id: number, now: number, key: string | undefined): MessageRecord {
    // The queue's default ttl is for messages that set neither a ttl nor an absolute expiry.
    const expiresAt = withDefaultTtl(queue, messageExpiry(msg, now), now);
    return {
      id,
      bytes: msg.bytes,
      headerLength: msg.headerLength,
      durable: msg.durable,
      priority: msg.priority,
      expiresAt,
      deliveryCount: msg.deliveryCount,
      subject: key,
    };
  }

  /**
   * `heldUntil`: as publish's (undefined: each queue reads it). `key`: what its records
   * keep as their subject (messageFor): the key it was routed by.
   */
  private enqueueAll(all: Queue[], msg: IncomingMessage, heldUntil: number | undefined, key: string | undefined): PublishResult {
    if (all.length === 0) return { queues: [], id: 0, lsn: 0, durable: false };
    // One clock reading per publish (the windows' and the records' time alike): it costs as much as a window's probe.
    const now = this.now();
    // No window among the queues (the usual case): every one takes the message, and
    // no routing record is made for it (a publish's allocations are its cost here).
    if (!anyWindow(all)) return this.enqueueRouted(all, msg, now, undefined, undefined, heldUntil, key);
    // One queue, with a window (how a window is nearly always used): its verdict
    // alone. A routing record (an object and two arrays) cost about as much as the
    // window's own work on a cached line.
    if (all.length === 1) {
      const queue = all[0]!;
      const verdict = this.dedupVerdict(queue, this.readKey(msg.bytes, queue.settings.dedupKey, msg.propertiesAt), now);
      if (isFirstCopy(verdict)) return duplicateOf(verdict);
      return this.enqueueRouted(all, msg, now, verdict ? [verdict] : undefined, undefined, heldUntil, key);
    }
    const { take, stamps, hit } = this.dedupRoute(all, msg, now);
    if (take.length === 0) return duplicateOf(hit!);
    return this.enqueueRouted(take, msg, now, stamps, hit, heldUntil, key);
  }

  /**
   * Enqueue `msg` on `queues` as one message id; beside each queue, the stamp its
   * window takes (none: undefined). `hit`: a queue left out had the key already.
   * `heldUntil`: as publish's; `key`: as enqueueAll's.
   */
  private enqueueRouted(queues: Queue[], msg: IncomingMessage, now: number, stamps: ReadonlyArray<DedupStamp | undefined> | undefined, hit: DedupHit | undefined, heldUntil: number | undefined, key: string | undefined): PublishResult {
    const count = queues.length;
    this.checkLimits(queues, msg.bytes.length);
    const id = this.nextMessageId++;
    let lsn = 0;
    let durable = false;
    let keys: PublishResult['dedupKeys'];
    let dropped: Queue[] | undefined;
    let i = 0;
    try {
      for (; i < count; i++) {
        const queue = queues[i]!;
        const stamp = stamps?.[i];
        // A priority ring full of messages above this one's priority loses this one instead (see makeRoom).
        if (queue.settings.limitPolicy === 'ring' && !queue.makeRoom(msg.bytes.length, msg.priority)) {
          (dropped ??= []).push(queue);
          continue;
        }
        const record = this.messageFor(queue, msg, id, now, key);
        const journaled = messageDurable(record, queue);
        const change: Change = stamp ? { kind: 'enqueue', queue: queue.name, message: record, dedup: stamp } : { kind: 'enqueue', queue: queue.name, message: record };
        lsn = this.log.record(change, journaled).lsn;
        durable ||= journaled;
        queue.enqueue(record, heldUntil);
        if (stamp) {
          queue.dedup!.add(stamp.key, stamp.at, lsn, journaled);
          // A literal for the first (nearly always the only) key: an empty array's first push costs twice as much.
          if (keys) keys.push({ queue, key: stamp.key });
          else keys = [{ queue, key: stamp.key }];
        }
      }
    } catch (err) {
      // A queue past the first refused its copy (the journal refuses a record of more
      // than 1 GiB, and a longer queue name makes a longer record): the sender is told
      // the message was refused, so the copies the queues before it took go again, as a
      // publish whose journal write failed does. Ring evictions made room for them stay.
      if (i > 0) this.withdraw({ queues: queues.slice(0, i).filter((q) => !dropped?.includes(q)).map((q) => q.name), id, lsn, durable, dedupKeys: keys });
      throw err;
    }
    for (let i = 0; i < count; i++) this.events.queueReady?.(queues[i]!);
    // A queue that had the key waits for its first copy too: the sender is settled once both are safe.
    if (hit && hit.lsn > lsn) lsn = hit.lsn;
    const taken = dropped ? queues.filter((q) => !dropped.includes(q)) : queues;
    return { queues: taken.map((q) => q.name), id, lsn, durable: durable || (hit?.durable ?? false), dedupKeys: keys };
  }

  // ---- duplicate detection ---------------------------------------------------

  /**
   * Which of `queues` take a message: a queue whose window holds its key does not
   * (counted as a duplicate); one that takes it gets the stamp its window will
   * hold. `seen`: keys already taken by this transaction, per queue.
   */
  private dedupRoute(queues: Queue[], msg: IncomingMessage, now: number, seen?: Map<Queue, Set<string>>): DedupRouting {
    // Each key property is read (and digested) once per message. Nearly always every
    // queue keys on the same one, so the first is kept aside and a map made only for more.
    let firstProperty: string | undefined;
    let firstLookup: DedupLookup | undefined;
    let others: Map<string, DedupLookup> | undefined;
    const out: DedupRouting = { take: [], stamps: [], hit: undefined };
    for (const queue of queues) {
      if (!queue.dedup) {
        out.take.push(queue);
        out.stamps.push(undefined);
        continue;
      }
      const property = queue.settings.dedupKey;
      let lookup = firstLookup !== undefined && property === firstProperty ? firstLookup : others?.get(property);
      if (lookup === undefined) {
        lookup = this.readKey(msg.bytes, property, msg.propertiesAt);
        if (firstLookup === undefined) {
          firstProperty = property;
          firstLookup = lookup;
        } else (others ??= new Map()).set(property, lookup);
      }
      const verdict = this.dedupVerdict(queue, lookup, now, seen);
      if (isFirstCopy(verdict)) {
        if (!out.hit || verdict.lsn > out.hit.lsn) out.hit = verdict;
        continue;
      }
      out.take.push(queue);
      out.stamps.push(verdict);
    }
    return out;
  }

  /**
   * What `queue`'s window says of a message whose key is `lookup`: the stamp it
   * takes the message with; undefined for a message without a key (it passes,
   * counted); or, for a duplicate (counted), its first copy (LSN 0: sent earlier
   * in this transaction). `seen`: keys already taken by this transaction, per queue.
   */
  private dedupVerdict(queue: Queue, lookup: DedupLookup, now: number, seen?: Map<Queue, Set<string>>): DedupStamp | DedupHit | undefined {
    if (lookup.status !== 'key') {
      this.countKeyless(queue, lookup);
      return undefined;
    }
    const hit = queue.dedup!.find(lookup.digest, now);
    const inThisTx = seen?.get(queue);
    const hex = seen ? dedupDigestHex(lookup.digest) : '';
    if (hit || inThisTx?.has(hex)) {
      queue.dedupCounts.duplicates++;
      return hit ?? { lsn: 0, durable: false };
    }
    if (seen) {
      if (inThisTx) inThisTx.add(hex);
      else seen.set(queue, new Set([hex]));
    }
    return { key: lookup.digest, at: now };
  }

  /** A message's key for a window keyed on `property` ('' : the message-id). */
  private readKey(bytes: Buffer, property: string, propertiesAt?: number): DedupLookup {
    return this.dedupKeys ? this.dedupKeys(bytes, property === '' ? undefined : property, propertiesAt) : { status: 'missing' };
  }

  private countKeyless(queue: Queue, lookup: Exclude<DedupLookup, { status: 'key' }>): void {
    if (lookup.status === 'missing') {
      queue.dedupCounts.withoutKey++;
      return;
    }
    const n = ++queue.dedupCounts.invalidKey;
    this.events.dedupKeyInvalid?.(queue, lookup.reason, n);
  }

  /**
   * A DR copy's enqueues, before they are logged: the copy is this cluster's own
   * decision, so one whose key a window here holds (the source published it twice
   * without a window of its own, or a client sent it here after an activation)
   * is left out, counted. A source without a window sent no key, so it is read
   * from the message. What remains carries its stamp, so this cluster's backups
   * and its journal take the same keys. A message given back at the source
   * (`restored`: a failed commit had accepted it) is no new publish: it is taken
   * whatever the window holds, its key kept as the window has it (from its first
   * copy) or, if the window lost it, taken in with it. A message moved by tandem
   * queue move (moveAvailable) is marked so too. The copy's own record does
   * not carry the mark: only its source's duplicate check needed it.
   */
  private withoutDrDuplicates(ops: TxOp[]): TxOp[] {
    if (!ops.some((op) => op.kind === 'enqueue' && (op.restored !== undefined || this.queues.get(op.queue)?.dedup))) return ops;
    const now = this.now();
    const seen = new Map<Queue, Set<string>>();
    const out: TxOp[] = [];
    for (const op of ops) {
      const queue = op.kind === 'enqueue' ? this.queues.get(op.queue) : undefined;
      if (op.kind !== 'enqueue' || !queue?.dedup) {
        out.push(op.kind === 'enqueue' ? unmarked(op) : op);
        continue;
      }
      let stamp = op.dedup;
      if (!stamp) {
        const lookup = this.readKey(op.message.bytes, queue.settings.dedupKey);
        if (lookup.status === 'key') stamp = { key: lookup.digest, at: now };
      }
      if (!stamp) {
        out.push(unmarked(op));
        continue;
      }
      const hex = dedupDigestHex(stamp.key);
      const batch = seen.get(queue) ?? new Set<string>();
      seen.set(queue, batch);
      const held = batch.has(hex) || queue.dedup.find(stamp.key, now) !== undefined;
      batch.add(hex);
      if (op.restored) {
        const { dedup: _dedup, ...plain } = unmarked(op);
        out.push(held ? plain : { ...plain, dedup: stamp });
        continue;
      }
      if (held) {
        queue.dedupCounts.duplicates++;
        continue;
      }
      out.push({ ...op, dedup: stamp });
    }
    return out;
  }

  /**
   * Index every duplicate-detection window the log alone fed (a restart, a
   * backup's replication): done when this broker starts serving publishers, so
   * that cost falls on its start or promotion and not on the first publish.
   * Returns the keys indexed.
   */
  indexDedupWindows(): number {
    let keys = 0;
    for (const q of this.queues.values()) {
      if (!q.dedup || q.dedup.isIndexed) continue;
      q.dedup.ensureIndexed();
      keys += q.dedup.size;
    }
    return keys;
  }

  /**
   * Take back the keys a publish or commit put into windows (its journal write
   * failed), as a logged change: its records reached the HA backups (and their
   * journals), which took the keys in too, and a backup promoted later must not
   * answer a resend as a duplicate of a message that was never kept.
   */
  private forgetKeys(result: PublishResult, copies: ReadonlyArray<{ queue: string; id: number }>): void {
    const byQueue = new Map<Queue, { keys: DedupDigest[]; ids: number[] }>();
    const of = (queue: Queue) => {
      let taken = byQueue.get(queue);
      if (!taken) byQueue.set(queue, (taken = { keys: [], ids: [] }));
      return taken;
    };
    for (const { queue, key } of result.dedupKeys ?? []) if (this.queues.get(queue.name) === queue) of(queue).keys.push(key);
    // A queue without a window took no key from them, but a DR copy of it that keeps
    // one read a key from each (withoutDrDuplicates): the change names them for it.
    if (this.drFollowedSince > 0) {
      for (const { queue: name, id } of copies) {
        const queue = this.queues.get(name);
        if (queue && !queue.dedup) of(queue).ids.push(id);
      }
    }
    for (const [queue, { keys, ids }] of byQueue) this.forgetDedupKeys(queue.name, packDigests(keys), ids);
  }

  /**
   * Take keys (16-byte digests) out of a queue's window as a logged change: a refused
   * publish's (forgetKeys), or a DR copy applying its source's take-back. `ids`:
   * refused messages no window of the source took a key from. A window here reads
   * each one's key from the message, as it did when it took the message in (a DR
   * copy; the change it logs names keys alone, which its journal and backups apply
   * as any). A queue without a window names them in its change, for the DR copies
   * that keep one, on a cluster a DR copy follows (and not on a copy fed by one).
   * The change is logged before the messages are purged: a copy reads their keys
   * from them.
   */
  forgetDedupKeys(queue: string, keys: Buffer, ids: readonly number[] = []): void {
    const q = this.queues.get(queue);
    if (!q) return;
    let change: Change;
    if (q.dedup) {
      const all = ids.length > 0 ? Buffer.concat([keys, this.keysReadFrom(q, ids)]) : keys;
      if (all.length === 0) return;
      change = { kind: 'dedup-forget', queue, keys: all };
    } else {
      if (ids.length === 0 || this.drFollowedSince === 0 || this.drQueues.get(queue)?.state === 'passive') return;
      change = { kind: 'dedup-forget', queue, keys: Buffer.alloc(0), ids: [...ids] };
    }
    const logged = this.log.record(change, q.settings.durable);
    this.applyChange(change, logged.lsn, logged.durable);
  }

  /**
   * A DR copy of `queue`'s contents brought its source's duplicate-detection window
   * (rows of DedupWindow.rows, checked by the caller): logged as this broker's own
   * dedup-keys change, so it is journaled and goes to the HA backups as any change,
   * each row stamped with that change's LSN, so the keys sit in this log as if taken
   * here (a duplicate's settlement waits for that LSN, a checkpoint and a restart's
   * recovery order keys by it, a failback compares it with the divergence point).
   * Their times stay the source's: a key's age goes on, it does not restart here.
   */
  adoptDedupRows(queue: string, rows: Buffer): LoggedChange | undefined {
    const q = this.queues.get(queue);
    if (!q?.dedup || rows.length === 0) return undefined;
    // The LSN record() gives it: the next one (the bridge never records inside asOneChange, which holds changes back).
    const change: Change = { kind: 'dedup-keys', queue, rows: dedupRowsAt(rows, this.log.lsn + 1) };
    const logged = this.log.record(change, q.settings.durable);
    this.applyChange(change, logged.lsn, logged.durable);
    return logged;
  }

  /**
   * The keys `queue`'s window reads from those of `ids` it holds, packed (16 bytes
   * each). A body that cannot be read back (paged out, its segment unreadable) is
   * passed over: its key stays.
   */
  private keysReadFrom(queue: Queue, ids: readonly number[]): Buffer {
    const keys: DedupDigest[] = [];
    for (const id of ids) {
      const entry = queue.entry(id);
      if (!entry) continue;
      let lookup: DedupLookup;
      try {
        lookup = this.readKey(entry.msg.bytes, queue.settings.dedupKey);
      } catch {
        continue;
      }
      if (lookup.status === 'key') keys.push(lookup.digest);
    }
    return packDigests(keys);
  }

  /**
   * Take back a published message, or a commit, whose journal write failed (disk
   * full): the sender is told it was refused (rolled back), so its messages must not
   * stay and its acceptances must not hold. Copies already handed to a consumer are
   * left to it. Returns the acceptances that could not be given back (their bodies
   * unreadable): the journal still holds those, so a restart brings them back.
   */
  withdraw(result: PublishResult): number {
    const copies = result.enqueued ?? result.queues.map((queue) => ({ queue, id: result.id }));
    // Before the purge: a DR copy reads the keys of the messages it names from them (forgetDedupKeys).
    this.forgetKeys(result, copies);
    for (const { queue: name, id } of copies) {
      const queue = this.queues.get(name);
      const entry = queue?.entry(id);
      if (queue && entry && !entry.acquiredBy) queue.remove(entry, 'purged');
    }
    let notGivenBack = 0;
    for (const { queue, entry } of result.accepted ?? []) if (!this.giveBack(queue, entry)) notGivenBack++;
    return notGivenBack;
  }

  /**
   * A message a failed commit accepted goes back on its queue under its own id, so
   * where it was, as a rollback leaves it (its delivery-count raised: a delivery
   * that failed). The commit's record may have reached every reader but the
   * journal that failed (HA backups, a DR copy), so this is a change of its own:
   * those take the message back, and the journal, which never got the commit,
   * takes this newer record of the id in place of the old one. It is marked
   * `restored`: a DR copy whose window holds the message's key (from its first
   * copy) must take it back, not drop it as a duplicate (withoutDrDuplicates).
   */
  private giveBack(queue: Queue, entry: QueueEntry): boolean {
    if (this.queues.get(queue.name) !== queue || queue.has(entry.msg.id)) return true;
    let message: MessageRecord;
    try {
      message = copyMessage(entry.msg, oneMoreDelivery(queue.deliveryCountOf(entry)));
    } catch {
      return false;
    }
    this.log.record({ kind: 'enqueue', queue: queue.name, message, restored: true }, messageDurable(message, queue));
    queue.enqueue(message);
    queue.alreadyCounted(message.id);
    this.events.queueReady?.(queue);
    return true;
  }

  /**
   * Send a message leaving `from` on to its alternate exchange as a new message, its
   * dead letter (deadLetter), not back into `from` if `notBack`, routed by the key the
   * message was routed by (its record's subject: routed-by.ts), through the alternate
   * exchange's own alternates as a publish is. One that cannot go on
   * (its body or key cannot be read back from the journal, or the queues it routes
   * to refuse it, full) is dropped, counted (deadLettersLost) and reported
   * (events.deadLetterLost), not thrown: the removal, or queue delete, that sent it
   * completes. Anything else that fails (a bug, a closed journal) still throws.
   */
  private reroute(from: Queue, entry: QueueEntry, reason: DeadLetterReason, notBack = false): void {
    const exchange = this.exchanges.get(from.settings.alternateExchange);
    if (!exchange) return;
    let bytes: Buffer;
    let key: string | undefined;
    try {
      // A paged message reads both back (a damaged record throws).
      key = entry.msg.subject;
      bytes = entry.msg.bytes;
    } catch (err) {
      this.deadLetterLost(from, entry, `its body cannot be read back: ${(err as Error).message}`);
      return;
    }
    const { durable, priority } = entry.msg;
    // What a consumer of `from` would have got (in doubt: one more): the dead letter goes on with it.
    const deliveryCount = from.deliveryCountOf(entry);
    // A selector on the way judges the dead letter as its consumers get it: with its own expiry, not the message's.
    const expiresAt = this.deadLetterExpiresAt(entry, reason, bytes);
    const own = { bytes, durable, priority, deliveryCount, ttlMs: undefined, absoluteExpiry: expiresAt || undefined };
    const routed = this.routingSelectors.filter(this.routeVia(exchange, key), own);
    const self = notBack ? routed.indexOf(from) : -1;
    if (self >= 0) routed.splice(self, 1);
    // A DR queue that does not serve here (a passive copy of the other site's) is not a
    // target, as a publish to it is refused: put in, the copy would hold a message its
    // source never had, under an id the source gives another one, which the copy then
    // skips as already held. Only such targets: the dead letter is lost, and said so.
    const queues = this.drQueues.size === 0 ? routed : routed.filter((q) => this.servesHere(q));
    if (queues.length === 0 && routed.length > 0) {
      // Named as many as a log line holds well: the first three, and how many more.
      const named = routed.slice(0, 3).map((q) => `'${q.name}' (${this.drQueues.get(q.name)?.state})`);
      const copies = named.join(', ') + (routed.length > 3 ? ` and ${routed.length - 3} more` : '');
      this.deadLetterLost(from, entry, `its alternate exchange routes it only to DR copies that do not serve here: ${copies}; activate them with the queue (tandem dr activate)`);
      return;
    }
    if (queues.length === 0) return;
    try {
      this.enqueueAll(queues, this.deadLetter(from, entry, reason, { bytes, key, deliveryCount, expiresAt }), undefined, key);
    } catch (err) {
      if (!(err instanceof TandemError)) throw err;
      this.deadLetterLost(from, entry, err.message);
    }
  }

  /**
   * The message a dead letter is: the bytes of the one that left `from` with its header
   * and message-annotations saying what happened to it there (deadLetters: the
   * delivery-count it reached, as `from` would deliver it (Queue.deliveryCountOf), the
   * annotations consumers added, the queue and the reason, the ttl it has left), and its
   * own expiry (deadLetterExpiresAt). These bytes are its enqueue record's, so a restart, a
   * failover or a DR copy gives the same. `read`: what reroute read and made of it; `key`,
   * what the message was routed by, stays its dead letter's (dead-lettered again, it goes
   * by that key again).
   */
  private deadLetter(from: Queue, entry: QueueEntry, reason: DeadLetterReason, read: { bytes: Buffer; key: string | undefined; deliveryCount: number; expiresAt: number }): IncomingMessage {
    const { bytes, key, deliveryCount, expiresAt } = read;
    const msg = entry.msg;
    let out = { bytes, headerLength: msg.headerLength };
    if (this.deadLetters) {
      const writer = this.deadLetters;
      try {
        const ttlMs = expiresAt > 0 ? Math.max(1, expiresAt - this.now()) : 0;
        out = writer.write(bytes, msg.headerLength, { queue: from.name, reason, deliveryCount, ttlMs, annotations: entry.annotations });
      } catch (err) {
        // Bytes the edge cannot read (it checked them on arrival: only a record from
        // before that check can hold such) go on as they arrived, not lost.
        if (!(err instanceof TandemError)) throw err;
      }
    }
    return {
      bytes: out.bytes,
      headerLength: out.headerLength,
      durable: msg.durable,
      priority: msg.priority,
      // As an absolute time: it runs from the message's first arrival, not from now.
      ttlMs: undefined,
      absoluteExpiry: expiresAt > 0 ? expiresAt : undefined,
      deliveryCount,
      subject: key,
    };
  }

  /**
   * When the dead letter of `entry` (its bytes: `bytes`) expires, ms since epoch, 0: never
   * (the dead-letter queue's default-ttl then applies). An expired message's has none: it
   * would expire again at once (and go on to that queue's alternate exchange in turn). A
   * rejected or deleted one keeps the expiry it set itself (ownExpiresAt).
   */
  private deadLetterExpiresAt(entry: QueueEntry, reason: DeadLetterReason, bytes: Buffer): number {
    return reason === 'expired' ? 0 : this.ownExpiresAt(entry.msg, bytes);
  }

  /**
   * The expiry `msg` (its bytes: `bytes`) set itself, counted from when it first arrived
   * (its header ttl, or its absolute-expiry-time); 0 when it has none or its expiry came
   * from its queue's default-ttl, which stays with that queue (the queue it goes to gives
   * its own). Bytes the edge cannot read (only a record from before it checked them can
   * hold such) keep the message's expiry, as they go on unchanged.
   */
  private ownExpiresAt(msg: MessageRecord, bytes: Buffer): number {
    const writer = this.deadLetters;
    if (!writer || msg.expiresAt === 0) return msg.expiresAt;
    try {
      return writer.setsOwnExpiry(bytes) ? msg.expiresAt : 0;
    } catch (err) {
      if (!(err instanceof TandemError)) throw err;
      return msg.expiresAt;
    }
  }

  /** Count and report a message reroute had to drop. */
  private deadLetterLost(from: Queue, entry: QueueEntry, reason: string): void {
    this.deadLettersLost++;
    this.events.deadLetterLost?.(from, entry.msg.id, reason, this.deadLettersLost);
  }
}

/**
 * The most bytes one transaction's record may take: what the journal reads back
 * (MAX_RECORD_BYTES in src/store/segment.ts; test/unit/amqp/coordinator-hostile.test.ts
 * holds the two equal). The broker does not import the store.
 */
export const MAX_TRANSACTION_RECORD_BYTES = 1 << 30;

/**
 * At least the bytes a transaction of `ops` (enqueues with their message, dequeues
 * without) takes as one record (src/store/record-codec.ts): each op's fixed fields (under
 * 128 bytes with a dedup stamp), its queue's name, and an enqueue's message and subject.
 */
export function transactionRecordBound(
  ops: ReadonlyArray<{ queue: string; message?: { bytes: Buffer; subject: string | undefined } }>,
  moreDequeues: ReadonlyArray<{ queue: string; count: number }> = [],
): number {
  let n = 64;
  for (const op of ops) {
    n += 128 + Buffer.byteLength(op.queue);
    if (op.message) n += op.message.bytes.length + (op.message.subject === undefined ? 0 : Buffer.byteLength(op.message.subject));
  }
  for (const d of moreDequeues) n += d.count * (128 + Buffer.byteLength(d.queue));
  return n;
}

/**
 * The most messages a commit's sends may push out of each ring queue they go to (each
 * a dequeue in the commit's record): with a byte limit, every available message and
 * every one sent; with a count limit alone, one per message sent (the new one, when
 * the ring cannot make way) and those already over the limit.
 */
function ringEvictionBound(routed: ReadonlyArray<{ queues: Queue[] }>): Array<{ queue: string; count: number }> {
  const sent = new Map<Queue, number>();
  for (const { queues } of routed) for (const q of queues) if (q.settings.limitPolicy === 'ring') sent.set(q, (sent.get(q) ?? 0) + 1);
  return [...sent].map(([q, n]) => {
    const { maxCount, maxSize } = q.settings;
    const all = q.available + n;
    return { queue: q.name, count: maxSize > 0 ? all : Math.min(all, n + Math.max(0, q.depth - maxCount)) };
  });
}

/** Whether a message's enqueue and dequeue are journaled: a durable message on a durable queue. */
export function messageDurable(msg: { durable: boolean }, queue: Queue): boolean {
  return msg.durable && queue.settings.durable;
}

/** Whether a binding is journaled: a durable (or built-in) exchange to a durable queue. */
export function bindingDurable(exchange: Exchange, queue: Queue): boolean {
  return (exchange.settings.durable || exchange.builtIn) && queue.settings.durable;
}

function validateName(what: string, name: string): void {
  if (typeof name !== 'string' || name.length === 0 || name.length > 255) {
    throw invalidArgument(`${what} name must be 1 to 255 characters`);
  }
  if (/[\u0000-\u001f]/.test(name)) throw invalidArgument(`${what} name must not contain control characters`);
}

// A queue: messages held in id order per priority level, handed to consumers by
// credit, round-robin. No I/O, no timers: the broker drives it and records every
// removal in the change log through QueueHost.
import { Deque } from '../util/deque.js';
import type { MessageRecord, QueueSettings } from './changes.js';
import { bodySize, PagedMessage } from './paged-message.js';

export interface QueueEntry {
  /** Replaced by a PagedMessage when the Pager moves the body out of memory. */
  msg: MessageRecord;
  /** Times this entry was delivered without being accepted. */
  deliveryCount: number;
  acquiredBy: Consumer | undefined;
  /** Consumers that declined it with undeliverable-here. */
  refusedBy?: Set<Consumer>;
  /** Set while a transaction holds an acceptance of it. */
  txAccepted?: boolean;
}

export interface Consumer {
  readonly id: string;
  readonly connectionId: string;
  /** Browsers see messages without acquiring them (distribution-mode copy). */
  readonly browse: boolean;
  credit: number;
  /** For browsers: the id of the last message seen. */
  cursor: number;
  deliver(entry: QueueEntry, queue: Queue): void;
}

export type RemovalReason = 'accepted' | 'rejected' | 'expired' | 'ring' | 'purged' | 'deleted';

/** How a queue tells its owner about removals and idleness; the broker logs them. */
export interface QueueHost {
  removed(queue: Queue, entry: QueueEntry, reason: RemovalReason): void;
  /** Last consumer gone from an auto-delete queue that had one. */
  unused(queue: Queue): void;
}

export class Queue {
  private readonly levels: Deque<QueueEntry>[];
  private readonly byId = new Map<number, QueueEntry>();
  readonly consumers: Consumer[] = [];
  private nextConsumer = 0;
  private bytes = 0;
  /** Messages (and their body bytes) whose bodies are paged out to the journal. */
  private pagedCount = 0;
  private pagedBytes = 0;
  private withTtl = 0;
  private hadConsumer = false;
  private dispatching = false;
  /** Connection that owns an exclusive queue. */
  owner: string | undefined;
  /** Counters for status and metrics. */
  enqueued = 0;
  dequeued = 0;

  constructor(
    readonly name: string,
    readonly settings: QueueSettings,
    private readonly host: QueueHost,
  ) {
    this.levels = Array.from({ length: Math.max(1, Math.min(10, settings.priorities)) }, () => new Deque<QueueEntry>());
  }

  get depth(): number {
    return this.byId.size;
  }

  get byteDepth(): number {
    return this.bytes;
  }

  /** Body bytes held in memory (the queue's bytes minus the paged ones). */
  get residentBytes(): number {
    return this.bytes - this.pagedBytes;
  }

  get pagedDepth(): number {
    return this.pagedCount;
  }

  get pagedByteDepth(): number {
    return this.pagedBytes;
  }

  get available(): number {
    let n = 0;
    for (const level of this.levels) n += level.length;
    return n;
  }

  get acquired(): number {
    return this.depth - this.available;
  }

  get consumerCount(): number {
    return this.consumers.length;
  }

  has(id: number): boolean {
    return this.byId.has(id);
  }

  entry(id: number): QueueEntry | undefined {
    return this.byId.get(id);
  }

  /**
   * The limit a new message of this size would break, or undefined if it fits;
   * `pending` counts messages already promised to this queue (earlier sends of a transaction).
   */
  limitExceeded(size: number, pending = { count: 0, bytes: 0 }): string | undefined {
    const { maxCount, maxSize } = this.settings;
    if (maxCount > 0 && this.depth + pending.count + 1 > maxCount) return `max-count ${maxCount}`;
    if (maxSize > 0 && this.bytes + pending.bytes + size > maxSize) return `max-size ${maxSize} bytes`;
    return undefined;
  }

  /** Make room under the ring policy by dropping the oldest available messages. */
  makeRoom(size: number): void {
    const { maxCount, maxSize } = this.settings;
    // Bounded by the queue depth: each pass removes one message.
    for (let guard = this.depth; guard > 0; guard--) {
      const full = (maxCount > 0 && this.depth + 1 > maxCount) || (maxSize > 0 && this.bytes + size > maxSize);
      if (!full) return;
      const oldest = this.oldestAvailable();
      if (!oldest) return;
      this.remove(oldest, 'ring');
    }
  }

  /** Add a message (already recorded in the log). */
  enqueue(msg: MessageRecord): QueueEntry {
    const entry: QueueEntry = { msg, deliveryCount: msg.deliveryCount, acquiredBy: undefined };
    this.byId.set(msg.id, entry);
    this.bytes += bodySize(msg);
    if (msg instanceof PagedMessage) this.notePaged(msg, 1);
    if (msg.expiresAt) this.withTtl++;
    const level = this.levelOf(msg);
    const last = level.at(level.length - 1);
    if (!last || last.msg.id < msg.id) level.push(entry);
    else level.insertAt(level.lowerBound(msg.id, (e) => e.msg.id), entry);
    this.enqueued++;
    return entry;
  }

  /** Remove an entry for good (dequeue); reports it to the host. */
  remove(entry: QueueEntry, reason: RemovalReason): void {
    if (!this.byId.delete(entry.msg.id)) return;
    if (!entry.acquiredBy) this.unlink(entry);
    entry.acquiredBy = undefined;
    this.forget(entry);
    this.host.removed(this, entry, reason);
  }

  /** Remove by id without reporting (applying a replicated or replayed dequeue). */
  drop(id: number): QueueEntry | undefined {
    const entry = this.byId.get(id);
    if (!entry) return undefined;
    this.byId.delete(id);
    if (!entry.acquiredBy) this.unlink(entry);
    entry.acquiredBy = undefined;
    this.forget(entry);
    return entry;
  }

  /** Move an entry's body out of memory: `paged` stands in for its message from now on. */
  pageOut(entry: QueueEntry, paged: PagedMessage): void {
    if (entry.msg instanceof PagedMessage || this.byId.get(entry.msg.id) !== entry) return;
    entry.msg = paged;
    this.notePaged(paged, 1);
  }

  /**
   * Paged messages after `entry` in delivery order (its priority level), whose
   * bodies are not read ahead yet: what a read-ahead should fetch with it.
   */
  pagedAfter(entry: QueueEntry, maxCount: number, maxBytes: number): PagedMessage[] {
    const level = this.levelOf(entry.msg);
    const out: PagedMessage[] = [];
    let bytes = 0;
    let i = level.lowerBound(entry.msg.id + 1, (e) => e.msg.id);
    for (; i < level.length && out.length < maxCount && bytes < maxBytes; i++) {
      const m = (level.at(i) as QueueEntry).msg;
      if (!(m instanceof PagedMessage)) continue;
      if (m.cached) break; // read ahead already from here on
      out.push(m);
      bytes += m.size;
    }
    return out;
  }

  /** Put an acquired entry back where its id belongs, so order is kept. */
  release(entry: QueueEntry, options: { deliveryFailed: boolean; undeliverableHere: boolean }): void {
    if (!this.byId.has(entry.msg.id) || !entry.acquiredBy) return;
    if (options.undeliverableHere) (entry.refusedBy ??= new Set()).add(entry.acquiredBy);
    if (options.deliveryFailed) entry.deliveryCount++;
    entry.acquiredBy = undefined;
    entry.txAccepted = false;
    const level = this.levelOf(entry.msg);
    level.insertAt(level.lowerBound(entry.msg.id, (e) => e.msg.id), entry);
  }

  addConsumer(consumer: Consumer): void {
    this.consumers.push(consumer);
    this.hadConsumer = true;
  }

  /**
   * Detach a consumer; what it held unsettled goes back with delivery-count raised.
   * Entries a transaction accepted stay acquired: its commit dequeues them, its
   * rollback releases them (released now, they could be redelivered and then
   * removed by the commit under the new holder).
   */
  removeConsumer(consumer: Consumer): void {
    const i = this.consumers.indexOf(consumer);
    if (i < 0) return;
    this.consumers.splice(i, 1);
    if (this.nextConsumer > i) this.nextConsumer--;
    for (const entry of this.byId.values()) {
      if (entry.acquiredBy === consumer && !entry.txAccepted) {
        this.release(entry, { deliveryFailed: true, undeliverableHere: false });
      }
      entry.refusedBy?.delete(consumer);
    }
    if (this.consumers.length === 0 && this.hadConsumer && this.settings.autoDelete) this.host.unused(this);
  }

  /** Hand available messages to consumers with credit. Returns how many were delivered. */
  dispatch(now: number): number {
    if (this.dispatching) return 0; // a deliver() callback re-entered; the outer loop continues
    this.dispatching = true;
    let delivered = 0;
    try {
      if (this.withTtl > 0) this.expireHeads(now);
      for (const c of this.consumers) if (c.browse && c.credit > 0) delivered += this.feedBrowser(c, now);
      delivered += this.feedConsumers(now);
    } finally {
      this.dispatching = false;
    }
    return delivered;
  }

  /** Drop every expired message (called periodically by the broker). */
  expire(now: number): number {
    if (this.withTtl === 0) return 0;
    const expired: QueueEntry[] = [];
    for (const entry of this.byId.values()) {
      if (!entry.acquiredBy && entry.msg.expiresAt && entry.msg.expiresAt <= now) expired.push(entry);
    }
    for (const entry of expired) this.remove(entry, 'expired');
    return expired.length;
  }

  /** Remove up to `limit` available messages (all if 0). */
  purge(limit = 0): number {
    let n = 0;
    for (const level of this.levels) {
      while (level.length > 0 && (limit === 0 || n < limit)) {
        this.remove(level.peek() as QueueEntry, 'purged');
        n++;
      }
    }
    return n;
  }

  /**
   * Forget every message without reporting (the queue was deleted; its messages
   * went with the queue-delete change). Deliveries still held by consumers can
   * then no longer be settled, which would log dequeues (or dead letters) for a
   * queue that is gone, or for a new queue of the same name.
   */
  discard(): void {
    for (const level of this.levels) level.clear();
    this.byId.clear();
    this.bytes = 0;
    this.pagedBytes = 0;
    this.pagedCount = 0;
    this.withTtl = 0;
  }

  /** Every entry, available or acquired, in id order (for snapshots and deletion). */
  entries(): QueueEntry[] {
    return [...this.byId.values()].sort((a, b) => a.msg.id - b.msg.id);
  }

  /** Every entry, available or acquired, in no particular order; safe while the queue changes. */
  liveEntries(): IterableIterator<QueueEntry> {
    return this.byId.values();
  }

  /** Available messages in delivery order (for browsing by management). */
  *availableEntries(): IterableIterator<QueueEntry> {
    for (let p = this.levels.length - 1; p >= 0; p--) yield* this.levels[p];
  }

  /** Bookkeeping for an entry leaving the queue. */
  private forget(entry: QueueEntry): void {
    this.bytes -= bodySize(entry.msg);
    if (entry.msg instanceof PagedMessage) this.notePaged(entry.msg, -1);
    if (entry.msg.expiresAt) this.withTtl--;
    this.dequeued++;
  }

  private notePaged(msg: PagedMessage, sign: 1 | -1): void {
    this.pagedCount += sign;
    this.pagedBytes += sign * msg.size;
  }

  private levelOf(msg: MessageRecord): Deque<QueueEntry> {
    const n = this.levels.length;
    if (n === 1) return this.levels[0];
    // AMQP priorities 0-9 map onto the queue's levels evenly (as qpidd does).
    const p = Math.max(0, Math.min(9, msg.priority));
    return this.levels[Math.min(n - 1, Math.floor((p * n) / 10))];
  }

  private unlink(entry: QueueEntry): void {
    const level = this.levelOf(entry.msg);
    const i = level.lowerBound(entry.msg.id, (e) => e.msg.id);
    if (level.at(i) === entry) level.removeAt(i);
  }

  private oldestAvailable(): QueueEntry | undefined {
    for (const level of this.levels) if (level.length > 0) return level.peek();
    return undefined;
  }

  private expireHeads(now: number): void {
    for (const level of this.levels) {
      for (let head = level.peek(); head && head.msg.expiresAt && head.msg.expiresAt <= now; head = level.peek()) {
        this.remove(head, 'expired');
      }
    }
  }

  /** Next available entry for a consumer, highest priority first; skips ones it refused. */
  private takeFor(consumer: Consumer, now: number): QueueEntry | undefined {
    for (let p = this.levels.length - 1; p >= 0; p--) {
      const level = this.levels[p];
      for (let i = 0; i < level.length; i++) {
        const entry = level.at(i) as QueueEntry;
        if (entry.msg.expiresAt && entry.msg.expiresAt <= now) {
          this.remove(entry, 'expired');
          i--;
          continue;
        }
        if (entry.refusedBy?.has(consumer)) continue;
        level.removeAt(i);
        return entry;
      }
    }
    return undefined;
  }

  private feedConsumers(now: number): number {
    let delivered = 0;
    // Each pass over the consumers delivers at least one message or stops.
    while (this.available > 0) {
      let progressed = false;
      for (let tries = 0; tries < this.consumers.length && this.available > 0; tries++) {
        if (this.nextConsumer >= this.consumers.length) this.nextConsumer = 0;
        const c = this.consumers[this.nextConsumer++];
        if (c.browse || c.credit <= 0) continue;
        const entry = this.takeFor(c, now);
        if (!entry) continue;
        entry.acquiredBy = c;
        c.credit--;
        delivered++;
        progressed = true;
        c.deliver(entry, this);
      }
      if (!progressed) break;
    }
    return delivered;
  }

  private feedBrowser(c: Consumer, now: number): number {
    let delivered = 0;
    while (c.credit > 0) {
      let next: QueueEntry | undefined;
      for (const level of this.levels) {
        const candidate = level.at(level.lowerBound(c.cursor + 1, (e) => e.msg.id));
        if (candidate && (!next || candidate.msg.id < next.msg.id)) next = candidate;
      }
      if (!next) break;
      c.cursor = next.msg.id;
      if (next.msg.expiresAt && next.msg.expiresAt <= now) continue;
      c.credit--;
      delivered++;
      c.deliver(next, this);
    }
    return delivered;
  }
}

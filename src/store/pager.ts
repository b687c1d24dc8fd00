// Keeps the message bodies held in memory under a budget (--max-memory).
//
// Bodies of messages the journal holds can leave memory: the queue keeps a
// PagedMessage (id, size, priority, expiry) and the body is read back from the
// journal when a consumer, a browser, a reroute or a snapshot needs it.
//
// Which bodies go: the newest first. Consumers take from the head of a queue, so
// with a backlog the head stays in memory and the tail waits on disk, and a
// message that arrives while the budget is spent goes to disk as soon as its
// record is synced. Only synced records are paged (the journal must be able to
// read them back), so non-durable messages on durable queues, and everything on
// a standalone broker's non-durable queues, always stay in memory; the pager
// says so in the log when they alone exceed the budget. A message out with a
// consumer stays a candidate: it leaves the queue when settled, or comes back
// with its body (a release) and is paged as any other.
//
// Reading back is batched: a read fetches the message asked for plus the paged
// messages after it on its queue (read-ahead), with one pread per contiguous run
// of records. Read-ahead bodies wait in a small cache (bounded in bytes, oldest
// dropped first) and are handed out once, then dropped again: a queue keeps its
// paged messages as rows of numbers, not objects that could hold a body.

import type { Broker } from '../broker/broker.js';
import type { Change, ChangeSink, LoggedChange } from '../broker/changes.js';
import type { BodyLoader, PagedMessage } from '../broker/paged-message.js';
import { JournalReadError } from './errors.js';
import type { Journal } from './journal.js';
import { monotonicNow } from '../util/monotonic-clock.js';

export interface PagerLogger {
  warn(o: object, msg?: string): void;
}

export interface PagerOptions {
  broker: Broker;
  /** The journal in use now (an HA backup swaps it when it loads a snapshot). */
  journal: () => Journal | undefined;
  /** Body bytes allowed in memory. */
  maxMemory: number;
  log: PagerLogger;
  /** Messages read ahead with one that is asked for. Default 256. */
  readAheadCount?: number;
  /** ...up to this many body bytes. Default 1 MiB. */
  readAheadBytes?: number;
}

export interface PagerStats {
  /** Bodies moved out of memory. */
  pagedOut: number;
  /** Bodies read back (including read-ahead). */
  readBack: number;
  /** Read operations (each one or more preads). */
  reads: number;
}

/** Page down to this share of the budget, so one pass makes room for a while. */
const LOW_WATER = 0.9;
const WARN_EVERY_MS = 60_000;
const MIN_PRUNE_AT = 65_536;

const cacheKey = (queue: string, id: number): string => `${queue}\u0000${id}`;

export class Pager implements ChangeSink, BodyLoader {
  /** Enqueues that may be paged once synced, oldest first (newest are paged first): queue names and ids side by side. */
  private candQueues: string[] = [];
  private candIds: number[] = [];
  private addedSinceCheck = 0;
  /** Prune stale candidates when the list grows past this. */
  private pruneAt = MIN_PRUNE_AT;
  private scheduled = false;
  private lastWarning = 0;
  private readonly readAheadCount: number;
  private readonly readAheadBytes: number;
  /** Bodies read ahead and not handed out yet, oldest first. */
  private readonly ahead = new Map<string, Buffer>();
  private aheadBytes = 0;
  /**
   * The body handed out last, by key: a row is often read twice in a row (its delivery
   * time, group or a consumer's selector, then its delivery), and a body is handed out of
   * `ahead` only once; without this the second read went to the journal alone, outside
   * its read-ahead batch. One body, replaced at the next load.
   */
  private lastGiven: { key: string; body: Buffer } | undefined;
  private readonly aheadLimit: number;
  readonly stats: PagerStats = { pagedOut: 0, readBack: 0, reads: 0 };

  constructor(private readonly opts: PagerOptions) {
    this.readAheadCount = opts.readAheadCount ?? 256;
    this.readAheadBytes = opts.readAheadBytes ?? 1024 * 1024;
    // A few consumers' worth of read-ahead at once.
    this.aheadLimit = Math.max(4 * 1024 * 1024, 8 * this.readAheadBytes);
  }

  get maxMemory(): number {
    return this.opts.maxMemory;
  }

  /** Body bytes now held in memory by queued messages. */
  residentBytes(): number {
    let n = 0;
    for (const q of this.opts.broker.queues.values()) n += q.residentBytes;
    return n;
  }

  append(entry: LoggedChange): void {
    // Only journaled changes can be read back; the journal has the final say (holds()).
    if (!entry.durable) return;
    this.collect(entry.change);
    if (this.candIds.length > this.pruneAt) this.prune();
    if (this.addedSinceCheck > this.opts.maxMemory / 16) this.schedule();
  }

  /** Page out until under the budget (called on a timer and after enough new bytes). */
  pass(): void {
    this.addedSinceCheck = 0;
    const journal = this.opts.journal();
    if (!journal) return;
    let resident = this.residentBytes();
    if (resident <= this.opts.maxMemory) return;
    const target = this.opts.maxMemory * LOW_WATER;
    // Candidates that cannot go yet, kept in their places for a later pass.
    const notYetQueues: string[] = [];
    const notYetIds: number[] = [];
    let waitingForSync = 0;
    const { broker } = this.opts;
    while (resident > target && this.candIds.length > 0) {
      const name = this.candQueues.pop()!;
      const id = this.candIds.pop()!;
      const queue = broker.queues.get(name);
      if (!queue) continue;
      if (queue.isAcquired(id)) {
        // Out with a consumer: kept, as a release (a detach, a rollback, a released or
        // modified outcome) puts it back with its body in memory; dropped here, that body
        // stayed in memory, over the budget, until a consumer took the message again.
        notYetQueues.push(name);
        notYetIds.push(id);
        continue;
      }
      // Gone or paged already: skip.
      if (!queue.isResident(id)) continue;
      if (!journal.holds(name, id)) {
        notYetQueues.push(name); // not synced yet: try again next pass
        notYetIds.push(id);
        waitingForSync++;
        continue;
      }
      const freed = queue.pageOut(id, this);
      if (freed === 0) continue; // not reached: resident and not acquired
      resident -= freed;
      this.stats.pagedOut++;
    }
    for (let i = notYetIds.length - 1; i >= 0; i--) {
      this.candQueues.push(notYetQueues[i]!);
      this.candIds.push(notYetIds[i]!);
    }
    if (resident > this.opts.maxMemory && monotonicNow() - this.lastWarning > WARN_EVERY_MS) {
      this.lastWarning = monotonicNow();
      const outWithConsumers = notYetIds.length - waitingForSync;
      this.opts.log.warn(
        { residentBytes: resident, maxMemory: this.opts.maxMemory, waitingForSync, outWithConsumers },
        'message bodies in memory exceed max-memory: the rest are out with consumers (paged once settled or given back), non-durable or not yet synced, and cannot be paged to the journal now',
      );
    }
  }

  load(msg: PagedMessage): Buffer {
    const key = cacheKey(msg.queue, msg.id);
    if (this.lastGiven?.key === key) return this.lastGiven.body;
    const body = this.read(msg, key);
    this.lastGiven = { key, body };
    return body;
  }

  private read(msg: PagedMessage, key: string): Buffer {
    const cached = this.ahead.get(key);
    if (cached) {
      this.ahead.delete(key);
      this.aheadBytes -= cached.length;
      return cached;
    }
    const journal = this.opts.journal();
    if (!journal) throw new JournalReadError(`message ${msg.id} of queue '${msg.queue}' is paged out but no journal is open`);
    const queue = this.opts.broker.queues.get(msg.queue);
    const ahead = queue ? queue.pagedAfter(msg.id, msg.priority, this.readAheadCount - 1, this.readAheadBytes, (id) => this.ahead.has(cacheKey(msg.queue, id))) : [];
    const ids = [msg.id, ...ahead];
    let bodies: Buffer[];
    try {
      bodies = journal.readMessages(ids.map((id) => ({ queue: msg.queue, id })));
    } catch (err) {
      if (ids.length === 1) throw err;
      // A neighbour's trouble must not fail this one: read it alone.
      bodies = journal.readMessages([{ queue: msg.queue, id: msg.id }]);
      ids.length = 1;
    }
    for (let i = 1; i < ids.length; i++) this.keepAhead(cacheKey(msg.queue, ids[i]!), bodies[i]!);
    this.stats.reads++;
    this.stats.readBack += ids.length;
    return bodies[0]!;
  }

  loadSubject(msg: PagedMessage): string | undefined {
    const journal = this.opts.journal();
    if (!journal) throw new JournalReadError(`message ${msg.id} of queue '${msg.queue}' is paged out but no journal is open`);
    return journal.readRecords([{ queue: msg.queue, id: msg.id }])[0]!.subject;
  }

  /** The broker's state was replaced (an HA backup loading a snapshot). */
  reset(): void {
    this.candQueues = [];
    this.candIds = [];
    this.pruneAt = MIN_PRUNE_AT;
    this.addedSinceCheck = 0;
    this.ahead.clear();
    this.lastGiven = undefined;
    this.aheadBytes = 0;
  }

  private keepAhead(key: string, body: Buffer): void {
    if (this.ahead.has(key)) return;
    this.ahead.set(key, body);
    this.aheadBytes += body.length;
    // Oldest first: a consumer that went away leaves its read-ahead to be dropped.
    for (const [k, b] of this.ahead) {
      if (this.aheadBytes <= this.aheadLimit) break;
      this.ahead.delete(k);
      this.aheadBytes -= b.length;
    }
  }

  private collect(change: Change): void {
    if (change.kind === 'enqueue') {
      this.candQueues.push(change.queue);
      this.candIds.push(change.message.id);
      this.addedSinceCheck += change.message.bytes.length;
    } else if (change.kind === 'transaction' || change.kind === 'dr-transaction') {
      for (const op of change.changes) this.collect(op);
    }
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pass();
    });
  }

  /** Drop candidates that are gone or paged already; amortised (the threshold doubles). */
  private prune(): void {
    const { broker } = this.opts;
    const queues: string[] = [];
    const ids: number[] = [];
    for (let i = 0; i < this.candIds.length; i++) {
      const name = this.candQueues[i]!;
      const id = this.candIds[i]!;
      if (broker.queues.get(name)?.isResident(id)) {
        queues.push(name);
        ids.push(id);
      }
    }
    this.candQueues = queues;
    this.candIds = ids;
    this.pruneAt = Math.max(MIN_PRUNE_AT, 2 * ids.length);
  }
}

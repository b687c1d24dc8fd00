// A queue: messages held in id order per priority level, handed to consumers by
// credit, round-robin. No I/O, no timers: the broker drives it and records every
// removal in the change log through QueueHost.
//
// Storage (for queues of millions): each priority level is an IdTable, one row
// per available message in id order. A row whose message is in memory, or needs
// per-message state (refused by a consumer, redelivered, annotated), holds a QueueEntry
// object; a row whose body is paged out to the journal is only numbers in typed
// arrays (size, expiry, delivery count, header length, priority, flags), about
// 30 bytes, and becomes a QueueEntry with a PagedMessage only when a consumer,
// browser, snapshot or lookup needs one. Acquired messages (out with a consumer)
// are objects in their own id-ordered table.
//
// A queue with message groups (settings.messageGroups, message-groups.ts) keeps one
// more column, each row's group, so a consumer can pass over the messages of a group
// another consumer owns without reading a body back; other queues pay one branch.
//
// A consumer with a message selector (Consumer.selects) passes over the rows it does not
// select the same way: the same per-consumer marks and per-dispatch budget, so a row's
// verdict is asked once while it stays, and a long run of them never holds the event
// loop. Consumers without one pay one branch per row.
//
// A message whose sender asked for a later delivery time (QueueHost.heldUntil) is held
// (scheduled.ts): in the depth, not in the rows, until the broker's timer moves it into
// its level at its id (releaseDue). Rows recovery made from the journal's index are
// read for it at their first look (F_UNCHECKED), as their group is.
//
// Messages held when this broker became the one serving the queue (a start from the
// journal, an HA promotion, a DR activation) are in doubt: the broker that served them
// before may have delivered them to a consumer that processed them, and delivery counts
// are neither journaled nor replicated. Ids are broker-global and increasing, so one
// watermark says which (markInDoubt), and no message is walked: the first delivery of
// each from here counts one more (deliveryCountOf), which JMS shows as JMSRedelivered.
import { IdTable, type ColumnType, type IdChunk } from '../util/id-table.js';
import type { MessageRecord, QueueSettings } from './changes.js';
import { DedupWindow } from './dedup-window.js';
import { oneMoreDelivery } from './delivery-count.js';
import { GROUP_NONE, GROUP_UNKNOWN, isGroup, MAX_GROUP_ID_BYTES, MessageGroups } from './message-groups.js';
import { HELD_EXPIRES, HeldMessages } from './scheduled.js';
import { RecheckRegions } from './recheck-regions.js';
import { borrowsMemory, BorrowedRanges, BorrowedShares, ownedCopy, sharedOwnedCopy, type BorrowingQueue } from './borrowed-bodies.js';
import { bodySize, PAGED_DURABLE, PAGED_SUBJECT, PagedMessage, pagedFields, type BodyLoader, type PagedFields, type PagedRun } from './paged-message.js';

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
  /**
   * Message-annotations consumers' modified outcomes added (AMQP 1.0 3.4.5), merged over
   * one another: an encoded map the outgoing path merges into the message's own, bounded
   * by the caller. In memory only, like the raised deliveryCount: not journaled, not replicated.
   */
  annotations?: Buffer;
  /**
   * Its body could not be read back here (a damaged journal record): set aside, given
   * to no consumer of this broker, so the ones behind it still flow; why, for status.
   */
  unreadable?: string;
  /** On a queue with message groups: its group's row value (message-groups.ts), once known. */
  group?: number;
  /**
   * The mark (Queue.markInDoubt, by its number) whose doubt is in deliveryCount already:
   * it was delivered from here since, came from a queue here that counted it
   * (alreadyCounted), or was held past that mark (releaseDue). A later mark (a DR copy
   * activated again after the other site served it) puts it in doubt again.
   */
  doubtCounted?: number;
}

export interface Consumer {
  readonly id: string;
  readonly connectionId: string;
  /** Browsers see messages without acquiring them (distribution-mode copy). */
  readonly browse: boolean;
  credit: number;
  /** For browsers: the id of the last message seen. */
  cursor: number;
  /**
   * A message selector (JMS): only the messages it selects are this consumer's (or,
   * browsing, shown to it); the others stay for other consumers, in order. False for a
   * message whose body cannot be read back. Undefined: every message. `deliveryCount`:
   * the one its delivery would carry (Queue.deliveryCountOf), for JMSXDeliveryCount.
   */
  readonly selects?: (msg: MessageRecord, deliveryCount: number) => boolean;
  deliver(entry: QueueEntry, queue: Queue): void;
  /**
   * Called after a dispatch left this consumer with credit: the queue has nothing more
   * for it now. A link whose receiver asked to drain answers it here.
   */
  idle?(): void;
  /**
   * The queue was deleted under this consumer (it is no longer one of the queue's): it
   * gets nothing from it again, so it ends, telling its client why, not left waiting.
   */
  queueDeleted?(queue: Queue): void;
  /**
   * The entries it holds unsettled (entries it no longer holds may be among them), which
   * its detach gives back: kept by the consumer (an AMQP link does), so a detach of one
   * holding a few visits those alone, not every message out with any consumer (a client
   * attaching and detaching in a loop would pay that walk each time). Past
   * GIVEN_BACK_AT_ONCE the queue's own acquired rows are walked instead, in id order and in
   * slices (Queue.giveBack): the consumer may forget its entries once it is removed.
   */
  held(): Iterable<QueueEntry>;
  /**
   * The lowest message id its queue ever gave it, kept by the queue (takeFor): no message
   * it holds is below it, so a give-back walk for it begins there, not at the first
   * acquired row (which could be a long run out with other consumers).
   */
  lowestTaken?: number;
}

export type RemovalReason = 'accepted' | 'rejected' | 'expired' | 'ring' | 'purged' | 'deleted';

/** How a queue tells its owner about removals and idleness; the broker logs them. */
export interface QueueHost {
  removed(queue: Queue, entry: QueueEntry, reason: RemovalReason): void;
  /** Last consumer gone from an auto-delete queue that had one. */
  unused(queue: Queue): void;
  /**
   * A consumer is attaching to an auto-delete queue that never had one: the host
   * records that in its log and marks the queue (markConsumed), or leaves it
   * unmarked on a broker that takes no local changes. Without this, the queue
   * marks itself.
   */
  firstConsumer?(queue: Queue): void;
  /**
   * A dispatch stopped short of the end of its scan (GROUP_SCAN_LIMIT, EXPIRED_PER_DISPATCH):
   * dispatch the queue again after letting the event loop run, so a consumer passing a
   * long run of another consumer's group, or of expired messages, reaches the messages
   * behind it.
   */
  moreToDispatch?(queue: Queue): void;
  /**
   * A message's group-id as its group's key (at most `maxBytes` of it), or undefined:
   * none, or bytes it cannot be read from. The AMQP edge reads it (the model knows no
   * wire); a host without a reader puts every message in no group.
   */
  groupKey?(bytes: Buffer, maxBytes: number): string | undefined;
  /**
   * Whether this broker drops the queue's expired messages. Not where another site decides
   * its contents (a passive DR copy): there each expiry, and its dead letter, comes from
   * that site as changes of its own. Without this, every queue expires its own.
   */
  expiresHere?(queue: Queue): boolean;
  /**
   * The time (ms since the epoch) a message's sender asked it delivered at, while that
   * is ahead, else 0: read from its bytes by the AMQP edge (the model knows no wire).
   * Without this no message is held.
   */
  heldUntil?(bytes: Buffer): number;
  /**
   * Whether the delivery time a message's sender asked for is a time it named
   * (x-opt-delivery-time), which every broker reads alike, rather than a delay each
   * counts from its own read. Without this none is.
   */
  deliveryTimeFixed?(bytes: Buffer): boolean;
}

/**
 * How far apart two brokers' clocks may be for a held message's delivery time to tell
 * that nobody delivered it before a mark (Queue.releaseDue): an HA cluster's or two DR
 * sites' hosts, kept in step by NTP to milliseconds; this allows seconds more.
 */
export const MARK_CLOCK_SKEW_MS = 10_000;

// Columns of a level's rows. SIZE and EXPIRES are kept for every row (expiry and
// byte counts never need the object); the others only mean something for rows
// without an object (paged rows).
const SIZE = 0;
const EXPIRES = 1;
const DELIVERY_COUNT = 2;
const HEADER_LENGTH = 3;
const PRIORITY = 4;
const FLAGS = 5;
const COLUMNS: readonly ColumnType[] = ['u32', 'f64', 'u32', 'u32', 'u8', 'u8'];
/** A queue with message groups: every row's group (message-groups.ts), object or not. */
const GROUP = 6;
const COLUMNS_GROUPED: readonly ColumnType[] = [...COLUMNS, 'u32'];
/**
 * Rows of groups other consumers own that one dispatch passes over, all its consumers
 * together: a run of a million messages of one owned group costs a thousand dispatches
 * of this many, each after the event loop ran (QueueHost.moreToDispatch), not one long
 * stall; the marks (skipTo) keep each consumer's progress, so it is walked once.
 */
export const GROUP_SCAN_LIMIT = 1024;
/**
 * Expired rows one dispatch drops (or a browser passes over), all its consumers together:
 * past it the dispatch stops as GROUP_SCAN_LIMIT does (scanCutShort, moreToDispatch). A
 * consumer with credit meeting a million expired messages before the expiry timer did
 * removed them all in one go, each a dequeue record (and a dead letter with an alternate
 * exchange): 2.3 s without answering anyone at 1M durable (docs/stalls.md).
 */
export const EXPIRED_PER_DISPATCH = 1024;
/**
 * Rows recovered from the journal that one dispatch reads for a delivery time (their
 * bodies from disk), all its consumers and browsers together: past it the dispatch stops
 * as GROUP_SCAN_LIMIT does. A consumer meeting a long run of held messages after a
 * restart read every one of them in one go: 0.7 s without answering anyone for 100,000
 * paged messages of 1 KiB, in-process (docs/stalls.md).
 */
export const UNCHECKED_PER_DISPATCH = 1024;
/**
 * A detaching consumer's unsettled messages given back at once when they are at most this
 * many (visited in its held()); more go back in slices, GIVEN_BACK_PER_DISPATCH per dispatch.
 */
export const GIVEN_BACK_AT_ONCE = 1024;
/**
 * Acquired rows one dispatch walks to give a detached consumer's messages back (giveBackSome):
 * a client holding a million (a large session window) that detached put them all back in
 * one go, 0.4 s in-process without answering anyone (docs/stalls.md).
 */
export const GIVEN_BACK_PER_DISPATCH = 4096;
const F_DURABLE = PAGED_DURABLE;
const F_SUBJECT = PAGED_SUBJECT;
/** A paged row recovery made, not yet read for a delivery time (this queue's own bit, never stored). */
const F_UNCHECKED = 4;

type Level = IdTable<QueueEntry>;

export class Queue implements BorrowingQueue {
  private readonly levels: Level[];
  /** Entries out with a consumer (or held by a transaction), by id. */
  private readonly acquiredRows = new IdTable<QueueEntry>([]);
  /**
   * Per consumer, the entries it refused (undeliverable-here), so its detach visits
   * those alone, not every entry any consumer refused.
   */
  private readonly refused = new Map<Consumer, Set<QueueEntry>>();
  /**
   * Per consumer, per level: every available row of that level with an id up to this
   * one is a row the consumer may not take (it refused it, or it is unreadable), so its
   * next look starts after it. A consumer that refused every message (undeliverable-here)
   * would otherwise walk all of them at each dispatch, which each of its flows can ask
   * for. A row put back at or below a mark lowers it; a detach forgets the consumer's.
   */
  private readonly skipTo = new Map<Consumer, number[]>();
  /** Rows put back below a mark, and how far past them the consumer had judged: its looks visit those alone (recheck-regions.ts). */
  private readonly rechecks = new RecheckRegions<Consumer>();
  /** Bumped whenever a mark is lowered: a look that saw it change sets no mark. */
  private marksLowered = 0;
  /** The highest message id ever put in a level (noteInsert). */
  private highestId = 0;
  /** Messages with lower ids are in doubt until delivered from here (markInDoubt); 0: none. */
  private inDoubtBelow = 0;
  /** When (ms since the epoch) the latest mark was made: held messages due well after it are not in doubt (releaseDue). */
  private inDoubtAt = 0;
  /** Marks made so far: an entry's doubtCounted names the one its count includes. */
  private marks = 0;
  /** Reads paged bodies back (set when the first paged row arrives). */
  private loader: BodyLoader | undefined;
  readonly consumers: Consumer[] = [];
  private nextConsumer = 0;
  /** Bumped when a consumer comes or goes: a dispatch's positions in the list hold while it is unchanged. */
  private membership = 0;
  private bytes = 0;
  /** Body bytes of the acquired messages (the rest of `bytes` is available, and can make way in a ring). */
  private acquiredBytes = 0;
  /** Messages (and their body bytes) whose bodies are paged out to the journal. */
  private pagedCount = 0;
  private pagedBytes = 0;
  private withTtl = 0;
  /**
   * No available row expires before this (a lower bound: lowered by every row put in a
   * level, raised only by expire()'s look at every row), so the expiry timer's tick skips
   * a queue with nothing due without reading its rows.
   */
  private nextExpiry = Infinity;
  /** Messages that are not durable: the journal does not keep them. */
  private nonDurable = 0;
  /** Has had a consumer, as the change log says ('queue-consumed'): only then does its last consumer's departure delete an auto-delete queue. */
  private hadConsumer = false;
  private dispatching = false;
  /** Connection that owns an exclusive queue. */
  owner: string | undefined;
  /**
   * Its owner keeps it however its consumers come and go (a JMS TemporaryQueue lives
   * until delete() or its connection's close): an auto-delete queue whose last consumer
   * leaves is then not deleted; its owner deletes it.
   */
  keptByOwner = false;
  /** Counters for status and metrics. */
  enqueued = 0;
  dequeued = 0;
  /** New messages a full ring lost because the available ones could not make way (makeRoom). */
  ringOverflow = 0;
  /** Duplicate detection (settings.dedupWindow > 0): the keys, and what became of messages. */
  dedup: DedupWindow | undefined;
  readonly dedupCounts = { duplicates: 0, withoutKey: 0, invalidKey: 0 };
  /** Entries set aside because their body cannot be read back (setAside). */
  private readonly unreadable = new Set<QueueEntry>();
  /** Messages held until their delivery time (scheduled.ts): counted in the depth, in no level. */
  private readonly held = new HeldMessages();
  /** Some row may carry F_UNCHECKED: only then does a look test the bit. */
  private uncheckedRows = false;
  /** Message groups (settings.messageGroups): their keys and owners; undefined on other queues. */
  private readonly groups: MessageGroups | undefined;
  /** Rows of owned groups the current dispatch may still pass over (GROUP_SCAN_LIMIT). */
  private scanBudget = 0;
  /** Expired rows the current dispatch may still drop or pass over (EXPIRED_PER_DISPATCH). */
  private expiryBudget = 0;
  /** Recovered rows the current dispatch may still read for a delivery time (UNCHECKED_PER_DISPATCH). */
  private uncheckedBudget = 0;
  /** The current dispatch ran out of scanBudget, expiryBudget or uncheckedBudget: more may be there for someone. */
  private scanCutShort = false;
  /**
   * Detached consumers whose unsettled messages are still going back, in slices, by a walk
   * of acquiredRows in id order (giveBackSome). While any is here no consumer is given a
   * row at or above givenBackBelow: a message still to come back may be before it.
   */
  private readonly departed = new Set<Consumer>();
  /** The give-back walk's place: every departed consumer's message below this id is back. */
  private givenBackBelow = 0;
  /** Ids of messages whose bodies borrow a larger buffer's memory, until they get their own (borrowed-bodies.ts). */
  readonly borrowed = new BorrowedRanges();
  /** Rows of groups owned by other consumers passed over by dispatches, ever (a measure of work, for tests and status). */
  groupRowsSkipped = 0;
  /** Rows consumers' selectors did not select, looked at by dispatches, ever (a measure of work, for tests). */
  selectorRowsSkipped = 0;

  constructor(
    readonly name: string,
    /** Replaced (never changed in place: the log may hold the object) by changeDedup. */
    public settings: QueueSettings,
    private readonly host: QueueHost,
  ) {
    this.dedup = settings.dedupWindow > 0 ? new DedupWindow(settings.dedupWindow, settings.dedupTtlMs) : undefined;
    this.groups = settings.messageGroups === true ? new MessageGroups() : undefined;
    const columns = this.groups ? COLUMNS_GROUPED : COLUMNS;
    this.levels = Array.from({ length: Math.max(1, Math.min(10, settings.priorities)) }, () => new IdTable<QueueEntry>(columns));
  }

  /** Message groups with messages here now (undefined: the queue has no message groups). */
  get groupCount(): number | undefined {
    return this.groups?.size;
  }

  /** Message groups a consumer owns now (it holds messages of each). */
  get ownedGroupCount(): number | undefined {
    return this.groups?.owned;
  }

  get depth(): number {
    return this.available + this.acquiredRows.length + this.held.length;
  }

  /** Messages held until their delivery time (counted in the depth, not available). */
  get scheduledDepth(): number {
    return this.held.length;
  }

  /** The earliest delivery time of a held message (Infinity: none held). */
  get nextDue(): number {
    return this.held.nextDue();
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

  /** Messages set aside here: queued, counted in the depth, but never delivered (setAside). */
  get unreadableDepth(): number {
    return this.unreadable.size;
  }

  /**
   * An acquired entry whose body could not be read back goes back to its place, set
   * aside: no consumer here takes it again, and the messages behind it flow on. It is
   * still queued (a purge or delete removes it; an HA backup's copy is intact, and a
   * restart reads the journal again).
   */
  setAside(entry: QueueEntry, reason: string): void {
    entry.unreadable = reason;
    this.unreadable.add(entry);
    this.release(entry, { deliveryFailed: false, undeliverableHere: false });
  }

  get pagedByteDepth(): number {
    return this.pagedBytes;
  }

  /** Messages here that are not durable (kept in memory only, never in the journal). */
  get nonDurableDepth(): number {
    return this.nonDurable;
  }

  get available(): number {
    let n = 0;
    for (const level of this.levels) n += level.length;
    return n;
  }

  get acquired(): number {
    return this.acquiredRows.length;
  }

  get consumerCount(): number {
    return this.consumers.length;
  }

  /**
   * Every message here with an id below `below` is in doubt: this broker becomes the one
   * serving them (a start from the journal, an HA promotion: every queue gets the next
   * message id; a DR activation: the queue gets its idFloor), and whoever served them
   * before may have delivered them. Only raised: a mark never takes back an earlier one.
   * `now`: the mark's time. The latest is kept, so a held message is in doubt if any mark
   * came after a moment it could have been delivered at.
   */
  markInDoubt(below: number, now: number): void {
    if (below > this.inDoubtBelow) this.inDoubtBelow = below;
    if (now > this.inDoubtAt) this.inDoubtAt = now;
    this.marks++;
  }

  /**
   * The delivery-count a delivery of this entry carries now: the one place that decides
   * it, for consumers and browsers, selectors (JMSXDeliveryCount, JMSRedelivered), dead
   * letters and moves. One more than the entry's while it is in doubt and its first
   * delivery from here has not counted it yet (takeFor does, in the entry), unless it is
   * still held past the mark (heldPastMark: its release would not count it either, so
   * neither does its dead letter nor a move while it waits). Copies for other brokers (HA
   * and DR snapshots) carry the entry's own: the one that serves them next counts its own doubt.
   */
  deliveryCountOf(entry: QueueEntry): number {
    if (!this.doubtUncounted(entry) || this.heldPastMark(entry)) return entry.deliveryCount;
    return oneMoreDelivery(entry.deliveryCount);
  }

  /** Held here now, until a time that says nobody can have had it before the mark (notDueAtMark). */
  private heldPastMark(entry: QueueEntry): boolean {
    const due = this.held.dueOf(entry.msg.id);
    return due !== undefined && this.notDueAtMark(entry, due);
  }

  /** In doubt (held at the mark) and its first delivery from here not yet counted in its entry. */
  private doubtUncounted(entry: QueueEntry): boolean {
    return entry.msg.id < this.inDoubtBelow && entry.doubtCounted !== this.marks;
  }

  /**
   * Message `id`, just enqueued, came from a queue of this broker with the delivery-count
   * deliveryCountOf gave it there (a move, a failed commit's message given back): its
   * in-doubt delivery is counted in it, not counted again here.
   */
  alreadyCounted(id: number): void {
    if (id >= this.inDoubtBelow) return;
    const entry = this.entry(id);
    if (entry) entry.doubtCounted = this.marks;
  }

  /** Whether the queue has had a consumer (see hadConsumer). */
  get consumed(): boolean {
    return this.hadConsumer;
  }

  /** It has had a consumer: recorded in the log now, or applied from it. */
  markConsumed(): void {
    this.hadConsumer = true;
  }

  /** Every table a message can be in by id: the levels, the acquired rows, the held ones. */
  private everyTable(): Array<IdTable<QueueEntry>> {
    return [...this.levels, this.acquiredRows, this.held.rows];
  }

  has(id: number): boolean {
    if (this.acquiredRows.find(id) >= 0) return true;
    if (this.held.rows.find(id) >= 0) return true;
    for (const level of this.levels) if (level.find(id) >= 0) return true;
    return false;
  }

  /** How many of its messages have ids in [lo, hi]: a walk of those rows alone, whatever the span. */
  countIdsBetween(lo: number, hi: number): number {
    let n = 0;
    for (const t of this.everyTable()) {
      for (let pos = t.lowerBound(lo); pos >= 0 && t.id(pos) <= hi; pos = t.next(pos)) n++;
    }
    return n;
  }

  /** The entry for a message id (a paged row becomes an object, kept from then on). */
  entry(id: number): QueueEntry | undefined {
    const a = this.acquiredRows.find(id);
    if (a >= 0) return this.acquiredRows.obj(a);
    for (const level of this.levels) {
      const pos = level.find(id);
      if (pos >= 0) return this.entryAt(level, pos, true);
    }
    return this.held.find(id);
  }

  /** Is this message here with its body in memory? (Looks without making objects.) */
  isResident(id: number): boolean {
    const a = this.acquiredRows.find(id);
    if (a >= 0) return !(this.acquiredRows.obj(a)!.msg instanceof PagedMessage);
    const held = this.held.find(id);
    if (held) return !(held.msg instanceof PagedMessage);
    for (const level of this.levels) {
      const pos = level.find(id);
      if (pos < 0) continue;
      const e = level.obj(pos);
      return e !== undefined && !(e.msg instanceof PagedMessage);
    }
    return false;
  }

  /** Is this message out with a consumer (or held by a transaction)? */
  isAcquired(id: number): boolean {
    return this.acquiredRows.find(id) >= 0;
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

  /**
   * Make room under the ring policy for a message of this size and priority by dropping
   * the oldest available messages, lowest priority first. Only available messages make
   * way: one out with a consumer is the consumer's until it settles it. When those
   * cannot free enough (every message is acquired, say), nothing is dropped and the
   * answer is false: the new message is the one the ring loses (counted in
   * ringOverflow), as qpidd's ring does, so the limit holds. On a priority queue only
   * messages of the new one's level or below make way for it (as qpidd does): false
   * too if those are not enough while higher ones would have to go. No priority (a
   * commit): any level makes way. `lost`: false when the message is not lost for
   * want of room (a move leaves it where it was), so it is not counted.
   */
  makeRoom(size: number, priority = 9, lost = true): boolean {
    const { maxCount, maxSize } = this.settings;
    // What stays over each limit: the count and bytes the drops must free.
    const count = maxCount > 0 ? this.depth + 1 - maxCount : 0;
    const bytes = maxSize > 0 ? this.bytes + size - maxSize : 0;
    if (count <= 0 && bytes <= 0) return true;
    // Counting every available row and byte is enough on one level with nothing held: held
    // messages do not make way, and their bytes are in `bytes`, as are the rows recovery
    // made that may be held ones not read for a delivery time yet (roomBelow reads them).
    const counted = this.levels.length === 1 && this.held.length === 0 && !this.uncheckedRows;
    const fits = count <= this.available && bytes <= this.bytes - this.acquiredBytes && (counted || this.roomBelow(this.levelIndex(priority), count, bytes));
    if (!fits) {
      if (lost) this.ringOverflow++;
      return false;
    }
    // Bounded by the queue depth: each pass removes one message.
    for (let guard = this.depth; guard > 0; guard--) {
      const full = (maxCount > 0 && this.depth + 1 > maxCount) || (maxSize > 0 && this.bytes + size > maxSize);
      if (!full) return true;
      const level = this.levels.find((l) => l.length > 0);
      if (!level) return true; // not reached: the available ones free enough (checked above)
      this.removeRow(level, level.first(), 'ring');
    }
    return true;
  }

  /**
   * Would dropping available messages of levels 0..`top`, oldest first, free `count`
   * messages and `bytes` bytes? Walks only the rows a drop would take. A row recovery
   * made is read for its delivery time on the way (holdUnchecked): one still held is
   * taken out of its level, never dropped (after a restart, the ring dropped such a
   * message before its time, in place of an available one).
   */
  private roomBelow(top: number, count: number, bytes: number): boolean {
    for (let p = 0; p <= top; p++) {
      const level = this.levels[p]!;
      // Bounded: each step moves past a row or takes it out of the level.
      for (let pos = level.first(); pos >= 0; ) {
        const id = level.id(pos);
        if (this.uncheckedRows && this.holdUnchecked(level, pos)) {
          pos = level.lowerBound(id); // out of the level now: on with the row after it
          continue;
        }
        count--;
        bytes -= level.get(pos, SIZE);
        if (count <= 0 && bytes <= 0) return true;
        pos = level.next(pos);
      }
    }
    return false;
  }

  /** New duplicate-detection settings: the keys held stay, within the new bounds. */
  changeDedup(s: Pick<QueueSettings, 'dedupWindow' | 'dedupTtlMs' | 'dedupKey'>, now: number): void {
    this.settings = { ...this.settings, dedupWindow: s.dedupWindow, dedupTtlMs: s.dedupTtlMs, dedupKey: s.dedupKey };
    const old = this.dedup;
    if (s.dedupWindow === 0) this.dedup = undefined;
    else if (old) this.dedup = old.resized(s.dedupWindow, s.dedupTtlMs, now);
    else this.dedup = new DedupWindow(s.dedupWindow, s.dedupTtlMs);
  }

  /**
   * Add a message (already recorded in the log). A PagedMessage becomes a paged row.
   * `heldUntil`: its delivery time as the publish read it (QueueHost.heldUntil's answer,
   * read once for all the queues it reaches); undefined: read here.
   */
  enqueue(msg: MessageRecord, heldUntil?: number): void {
    if (msg instanceof PagedMessage) {
      this.enqueuePaged(pagedFields(msg), msg.loader);
      return;
    }
    const entry: QueueEntry = { msg, deliveryCount: msg.deliveryCount, acquiredBy: undefined };
    if (borrowsMemory(msg.bytes)) this.borrowed.note(msg.id);
    const due = heldUntil ?? this.host.heldUntil?.(msg.bytes) ?? 0;
    if (due > 0) this.hold(entry, due);
    else this.putEntry(entry);
    this.bytes += bodySize(msg);
    if (msg.expiresAt) this.withTtl++;
    if (!msg.durable) this.nonDurable++;
    this.enqueued++;
  }

  /** Add a message whose body is in the journal, as a paged row (recovery). */
  enqueuePaged(fields: PagedFields, loader: BodyLoader): void {
    this.loader = loader;
    const level = this.levelOf(fields.priority);
    this.noteInsert(level, fields.id);
    const pos = level.insert(fields.id);
    this.writePaged(level, pos, fields);
    if (this.host.heldUntil) {
      level.set(pos, FLAGS, level.get(pos, FLAGS) | F_UNCHECKED);
      this.uncheckedRows = true;
    }
    this.bytes += fields.size;
    this.notePaged(fields.size, 1);
    if (fields.expiresAt) {
      this.withTtl++;
      this.noteExpiry(fields.expiresAt);
    }
    if (!fields.durable) this.nonDurable++;
    this.enqueued++;
  }

  /**
   * Add many paged rows at once (recovery): copied column by column when they go,
   * in id order, after everything on a one-level queue; else one by one.
   */
  enqueuePagedRun(run: PagedRun, loader: BodyLoader): void {
    this.loader = loader;
    const level = this.levels[0]!;
    const n = run.count;
    const lastId = level.length > 0 ? level.id(level.last()) : -Infinity;
    if (this.levels.length === 1 && n > 0 && run.ids[0]! > lastId && this.acquiredRows.length === 0) {
      this.noteInsert(level, run.ids[0]!);
      this.highestId = Math.max(this.highestId, run.ids[n - 1]!);
      let flags = run.flags.subarray(0, n);
      if (this.host.heldUntil) {
        // Each row is read for a delivery time at its first look (holdUnchecked), not here: that would read every body back.
        flags = flags.map((f) => f | F_UNCHECKED);
        this.uncheckedRows = true;
      }
      const cols = [run.size, run.expiresAt, run.deliveryCount, run.headerLength, run.priority, flags].map((c) => c.subarray(0, n));
      // Groups are not in the journal's index: read at each row's first look (GROUP_UNKNOWN is 0).
      if (this.groups) cols.push(new Uint32Array(n));
      level.appendRows(run.ids.subarray(0, n), cols);
      let bytes = 0;
      let ttl = 0;
      let nonDurable = 0;
      for (let i = 0; i < n; i++) {
        bytes += run.size[i]!;
        if (run.expiresAt[i]) {
          ttl++;
          this.noteExpiry(run.expiresAt[i]!);
        }
        if ((run.flags[i]! & F_DURABLE) === 0) nonDurable++;
      }
      this.bytes += bytes;
      this.pagedCount += n;
      this.pagedBytes += bytes;
      this.withTtl += ttl;
      this.nonDurable += nonDurable;
      this.enqueued += n;
      return;
    }
    const f: PagedFields = { id: 0, size: 0, headerLength: 0, durable: true, priority: 0, expiresAt: 0, deliveryCount: 0, hasSubject: false };
    for (let i = 0; i < n; i++) {
      f.id = run.ids[i]!;
      f.size = run.size[i]!;
      f.headerLength = run.headerLength[i]!;
      f.durable = (run.flags[i]! & F_DURABLE) !== 0;
      f.priority = run.priority[i]!;
      f.expiresAt = run.expiresAt[i]!;
      f.deliveryCount = run.deliveryCount[i]!;
      f.hasSubject = (run.flags[i]! & F_SUBJECT) !== 0;
      if (!this.has(f.id)) this.enqueuePaged(f, loader);
    }
  }

  /**
   * Look at one step of the due range of borrowed bodies (borrowed-bodies.ts): copy those
   * that hold much more memory than themselves, note the others for a later look. At
   * most about `maxRows` rows per table. Returns the rows looked at, at least 1 while a
   * range was due; 0 when none is.
   */
  ownBorrowedBodies(maxRows: number): number {
    const due = this.borrowed;
    if (!due.hasDue) return 0;
    const tables = this.everyTable();
    // A step takes a sub-range [lo, end] whole, in every table: a message that moves
    // between tables between steps (dispatched, given back, released when due) was either
    // in a sub-range done before it moved or is found where it went.
    const lo = due.dueLo;
    let end = due.dueHi;
    for (const t of tables) {
      let n = 0;
      for (let pos = t.lowerBound(lo); pos >= 0 && t.id(pos) <= end; pos = t.next(pos)) {
        if (++n < maxRows) continue;
        end = t.id(pos);
        break;
      }
    }
    const borrowing = (entry: QueueEntry | undefined): entry is QueueEntry => entry !== undefined && !(entry.msg instanceof PagedMessage) && borrowsMemory(entry.msg.bytes);
    const shares = new BorrowedShares();
    let rows = 0;
    for (const t of tables) {
      for (let pos = t.lowerBound(lo); pos >= 0 && t.id(pos) <= end; pos = t.next(pos)) {
        rows++;
        const entry = t.obj(pos);
        if (borrowing(entry)) shares.add(entry.msg.bytes);
      }
    }
    for (const t of tables) {
      for (let pos = t.lowerBound(lo); pos >= 0 && t.id(pos) <= end; pos = t.next(pos)) {
        // No object: a paged row, its body on disk.
        const entry = t.obj(pos);
        if (entry?.annotations !== undefined && borrowsMemory(entry.annotations)) entry.annotations = ownedCopy(entry.annotations);
        if (!borrowing(entry)) continue;
        // Shared: the other queues' records of one publish hold the same body (sharedOwnedCopy).
        if (!shares.worthCopying(entry.msg.bytes)) {
          due.noteKept(t.id(pos));
          continue;
        }
        entry.msg.bytes = sharedOwnedCopy(entry.msg.bytes);
        due.noteCopied(t.id(pos));
      }
    }
    due.doneThrough(end);
    return Math.max(rows, 1);
  }

  /** Remove an entry for good (dequeue); reports it to the host. */
  remove(entry: QueueEntry, reason: RemovalReason): void {
    if (!this.take(entry.msg.id)) return;
    entry.acquiredBy = undefined;
    this.host.removed(this, entry, reason);
  }

  /** Remove by id without reporting (applying a replicated or replayed dequeue). */
  drop(id: number): boolean {
    const entry = this.take(id);
    if (entry) entry.acquiredBy = undefined;
    return entry !== undefined;
  }

  /**
   * Move a message's body out of memory (the journal holds it). A plain available
   * one becomes a paged row; one with state of its own keeps its object, with a
   * PagedMessage standing in. Returns the body bytes freed (0: gone, paged
   * already, or acquired).
   */
  pageOut(id: number, loader: BodyLoader): number {
    const held = this.held.find(id);
    if (held) {
      if (held.msg instanceof PagedMessage) return 0;
      this.loader = loader;
      const size = bodySize(held.msg);
      held.msg = PagedMessage.of(held.msg, this.name, loader);
      this.notePaged(size, 1);
      return size;
    }
    for (const level of this.levels) {
      const pos = level.find(id);
      if (pos < 0) continue;
      const entry = level.obj(pos);
      if (!entry || entry.msg instanceof PagedMessage) return 0;
      this.loader = loader;
      const size = bodySize(entry.msg);
      // One counted for a mark keeps its object (which mark is not a row's to say): rare,
      // as a move's copy or a message held past a mark is.
      const plain = !entry.refusedBy && !entry.txAccepted && !entry.unreadable && !entry.annotations && entry.deliveryCount === entry.msg.deliveryCount && entry.doubtCounted === undefined;
      if (plain) {
        level.setObj(pos, undefined);
        this.writePaged(level, pos, pagedFields(entry.msg));
      } else {
        entry.msg = PagedMessage.of(entry.msg, this.name, loader);
      }
      this.notePaged(size, 1);
      return size;
    }
    return 0;
  }

  /**
   * Ids of paged messages after `id` in delivery order (its priority level) for a
   * read-ahead to fetch with it, stopping at one `isCached` says is read already.
   */
  pagedAfter(id: number, priority: number, maxCount: number, maxBytes: number, isCached: (id: number) => boolean): number[] {
    const level = this.levelOf(priority);
    const out: number[] = [];
    let bytes = 0;
    for (let pos = level.lowerBound(id + 1); pos >= 0 && out.length < maxCount && bytes < maxBytes; pos = level.next(pos)) {
      const e = level.obj(pos);
      if (e && !(e.msg instanceof PagedMessage)) continue;
      const next = level.id(pos);
      if (isCached(next)) break; // read ahead already from here on
      out.push(next);
      bytes += level.get(pos, SIZE);
    }
    return out;
  }

  /**
   * Put an acquired entry back where its id belongs, so order is kept. `annotations`
   * (a modified outcome's, already merged over what the entry held) replace the entry's.
   */
  release(entry: QueueEntry, options: { deliveryFailed: boolean; undeliverableHere: boolean; annotations?: Buffer }): void {
    const a = this.acquiredRows.find(entry.msg.id);
    const by = entry.acquiredBy;
    if (a < 0 || !by) return;
    // Only a consumer still attached: a detach is what forgets its refusals.
    if (options.undeliverableHere && this.consumers.includes(by)) {
      (entry.refusedBy ??= new Set()).add(by);
      addTo(this.refused, by, entry);
    }
    if (options.deliveryFailed) entry.deliveryCount = oneMoreDelivery(entry.deliveryCount);
    if (options.annotations) entry.annotations = options.annotations;
    entry.acquiredBy = undefined;
    entry.txAccepted = false;
    this.acquiredRows.removeAt(a);
    this.acquiredBytes -= bodySize(entry.msg);
    this.putEntry(entry);
    if (this.groups !== undefined && isGroup(entry.group!)) this.unholdGroup(entry.group!);
  }

  addConsumer(consumer: Consumer): void {
    // Before it joins: a log that cannot take the record fails the attach whole.
    if (!this.hadConsumer && this.settings.autoDelete) {
      if (this.host.firstConsumer) this.host.firstConsumer(this);
      else this.hadConsumer = true;
    }
    this.consumers.push(consumer);
    this.membership++;
  }

  /**
   * Detach a consumer; what it held unsettled goes back with delivery-count raised (many
   * of them in slices: giveBack). Entries a transaction accepted stay acquired: its
   * commit dequeues them, its rollback releases them (released now, they could be
   * redelivered and then removed by the commit under the new holder).
   */
  removeConsumer(consumer: Consumer): void {
    const i = this.consumers.indexOf(consumer);
    if (i < 0) return;
    this.consumers.splice(i, 1);
    this.membership++;
    if (this.nextConsumer > i) this.nextConsumer--;
    this.giveBack(consumer);
    for (const entry of this.refused.get(consumer) ?? []) {
      entry.refusedBy?.delete(consumer);
      if (entry.refusedBy?.size === 0) entry.refusedBy = undefined;
    }
    this.refused.delete(consumer);
    this.skipTo.delete(consumer);
    this.rechecks.forget(consumer);
    if (this.consumers.length === 0 && this.hadConsumer && this.settings.autoDelete && !this.keptByOwner) this.host.unused(this);
  }

  /**
   * What a detached consumer held unsettled goes back, each to its own place (by id), its
   * delivery-count raised; not those a transaction accepted (see removeConsumer). At most
   * GIVEN_BACK_AT_ONCE at once; more in slices, by the dispatches (giveBackSome), when the
   * host can ask for those (moreToDispatch). Meanwhile they are still acquired (in the
   * depth, not available), their groups still the departed consumer's.
   */
  private giveBack(consumer: Consumer): void {
    const few: QueueEntry[] = [];
    let visited = 0;
    for (const e of consumer.held()) {
      if (++visited > GIVEN_BACK_AT_ONCE && this.host.moreToDispatch) {
        // Back from its lowest id when the walk under way is past it (or none is under way).
        const from = consumer.lowestTaken ?? 0;
        this.givenBackBelow = this.departed.size === 0 ? from : Math.min(this.givenBackBelow, from);
        this.departed.add(consumer);
        this.host.moreToDispatch(this);
        return;
      }
      if (e.acquiredBy === consumer && !e.txAccepted) few.push(e);
    }
    for (const entry of few) this.release(entry, { deliveryFailed: true, undeliverableHere: false });
  }

  /** A detached consumer's messages are still going back (giveBack). */
  get givingBack(): boolean {
    return this.departed.size > 0;
  }

  /**
   * The give-back walk (giveBack): visits at most `limit` acquired rows from givenBackBelow,
   * in id order, putting back each a departed consumer held (but one a transaction
   * accepted); returns how many it visited. At the end of the rows every departed
   * consumer's message is back. Run by dispatch, and by a delete (queue-slices.ts).
   */
  giveBackSome(limit: number): number {
    if (this.departed.size === 0) return 0;
    const rows = this.acquiredRows;
    let pos = rows.lowerBound(this.givenBackBelow);
    let n = 0;
    // Bounded: at most `limit` rows, each visited once (the next is looked up past its id).
    for (; pos >= 0 && n < limit; n++) {
      const entry = rows.obj(pos)!;
      const id = rows.id(pos);
      if (entry.acquiredBy !== undefined && this.departed.has(entry.acquiredBy) && !entry.txAccepted) {
        this.release(entry, { deliveryFailed: true, undeliverableHere: false });
      }
      this.givenBackBelow = id + 1;
      pos = rows.lowerBound(id + 1);
    }
    if (pos < 0) {
      this.departed.clear();
      this.givenBackBelow = 0;
    }
    return n;
  }

  /** Hand available messages to consumers with credit. Returns how many were delivered. */
  dispatch(now: number): number {
    if (this.dispatching) return 0; // a deliver() callback re-entered; the outer loop continues
    this.dispatching = true;
    this.scanBudget = GROUP_SCAN_LIMIT;
    this.expiryBudget = EXPIRED_PER_DISPATCH;
    this.uncheckedBudget = UNCHECKED_PER_DISPATCH;
    this.scanCutShort = false;
    let delivered = 0;
    try {
      if (this.departed.size > 0) {
        this.giveBackSome(GIVEN_BACK_PER_DISPATCH);
        // Not idle while messages are still to come back; the next dispatch goes on with them.
        if (this.departed.size > 0) this.scanCutShort = true;
      }
      if (this.withTtl > 0 && this.nextExpiry <= now && this.host.expiresHere?.(this) !== false) this.expireHeads(now);
      for (const c of this.consumers) if (c.browse && c.credit > 0) delivered += this.feedBrowser(c, now);
      delivered += this.feedConsumers(now);
    } finally {
      this.dispatching = false;
    }
    if (this.scanCutShort) {
      // Not idle: rows not looked at yet may be some consumer's (the next dispatch tells).
      this.host.moreToDispatch?.(this);
      return delivered;
    }
    // A copy: an idle consumer may detach (and leave the list) while answering.
    for (const c of [...this.consumers]) if (c.idle && c.credit > 0) c.idle();
    return delivered;
  }

  /**
   * Drop expired messages, at most `limit` (called periodically by the broker, which
   * runs more slices while a slice takes its whole limit: removing a million at once
   * held the event loop for seconds, docs/stalls.md).
   */
  expire(now: number, limit = Infinity): number {
    if (this.withTtl === 0 || limit <= 0 || this.nextExpiry > now || this.host.expiresHere?.(this) === false) return 0;
    const expired: number[] = [];
    // The earliest expiry of the rows that stay, when every row was looked at.
    let soonest = Infinity;
    for (const level of this.levels) {
      if (expired.length >= limit) break;
      soonest = Math.min(soonest, collectExpired(level.chunkList(), EXPIRES, now, limit, expired));
    }
    // Held messages expire as the others do (in the depth, not in any level).
    if (expired.length < limit && this.held.length > 0) soonest = Math.min(soonest, collectExpired(this.held.rows.chunkList(), HELD_EXPIRES, now, limit, expired));
    // Before the removals: a reroute back into this queue lowers it again (noteExpiry).
    if (expired.length < limit) this.nextExpiry = soonest;
    let n = 0;
    for (const id of expired) {
      const found = this.findAvailable(id);
      if (found) this.removeRow(found.level, found.pos, 'expired');
      else if (!this.removeHeld(id, 'expired')) continue; // a removal reported earlier took it (reroute, re-entry)
      n++;
    }
    return n;
  }

  /** Remove up to `limit` available messages (all if 0), then held ones. */
  purge(limit = 0): number {
    let n = 0;
    for (const level of this.levels) {
      // Bounded: each pass removes one row.
      while (level.length > 0 && (limit === 0 || n < limit)) {
        this.removeRow(level, level.first(), 'purged');
        n++;
      }
    }
    // Bounded: each pass removes one held message.
    while (this.held.length > 0 && (limit === 0 || n < limit)) {
      this.removeHeld(this.held.rows.id(this.held.rows.first()), 'purged');
      n++;
    }
    return n;
  }

  /**
   * Move at most `limit` held messages whose delivery time is `now` or before into their
   * levels, each at its id (where it was sent among the others); how many moved.
   */
  releaseDue(now: number, limit: number): number {
    if (this.held.length === 0 || limit <= 0) return 0;
    const due = this.held.takeDue(now, limit);
    for (const { entry, due: at } of due) {
      if (this.doubtUncounted(entry) && this.notDueAtMark(entry, at)) entry.doubtCounted = this.marks;
      this.putEntry(entry);
    }
    return due.length;
  }

  /**
   * Whether a held message in doubt was in fact still held by whoever served it before
   * the mark, so no consumer can have had it: its delivery time is named in it (by its
   * sender, or as the end of its delay by the broker that took it: a delay alone, in a
   * message from an older broker, is counted again from each read), and that time
   * lies past the mark by more than two hosts' clocks may differ. Its in-doubt delivery
   * is then counted as done (doubtCounted) without raising its count. A paged body that
   * cannot be read back leaves it in doubt (its delivery sets it aside).
   */
  private notDueAtMark(entry: QueueEntry, due: number): boolean {
    if (due <= this.inDoubtAt + MARK_CLOCK_SKEW_MS) return false;
    try {
      return this.host.deliveryTimeFixed?.(entry.msg.bytes) === true;
    } catch {
      return false;
    }
  }

  /**
   * Forget every message without reporting (the queue was deleted; its messages
   * went with the queue-delete change). Deliveries still held by consumers can
   * then no longer be settled, which would log dequeues (or dead letters) for a
   * queue that is gone, or for a new queue of the same name.
   */
  discard(): void {
    const consumers = this.consumers.splice(0);
    this.membership++;
    this.nextConsumer = 0;
    for (const level of this.levels) level.clear();
    this.acquiredRows.clear();
    this.held.clear();
    this.departed.clear();
    this.givenBackBelow = 0;
    this.acquiredBytes = 0;
    this.refused.clear();
    this.skipTo.clear();
    this.rechecks.clear();
    this.groups?.clear();
    this.bytes = 0;
    this.pagedBytes = 0;
    this.pagedCount = 0;
    this.withTtl = 0;
    this.nextExpiry = Infinity;
    this.nonDurable = 0;
    // Its consumers go with it, each told: one left on a queue that is gone would wait
    // for ever (a queue made again under the name is another object).
    for (const c of consumers) c.queueDeleted?.(this);
  }

  /** Every entry, available or acquired, in id order. Paged rows become objects: for small queues and tests. */
  entries(): QueueEntry[] {
    const out: QueueEntry[] = [];
    for (const e of this.liveEntries(true)) out.push(e);
    return out;
  }

  /**
   * Every entry, available or acquired, in id order, one at a time; safe while the
   * queue changes (each step looks up the next id), so a snapshot can stream a
   * queue of millions. Paged rows come as short-lived objects unless `keep`.
   */
  *liveEntries(keep = false): IterableIterator<QueueEntry> {
    let last = -Infinity;
    const tables = this.everyTable();
    // Bounded: every step yields an entry with a larger id, or stops.
    for (;;) {
      let best: Level | undefined;
      let bestPos = -1;
      let bestId = Infinity;
      for (const t of tables) {
        const pos = t.lowerBound(last + 1);
        if (pos >= 0 && t.id(pos) < bestId) {
          best = t;
          bestPos = pos;
          bestId = t.id(pos);
        }
      }
      if (!best) return;
      last = bestId;
      yield best === this.acquiredRows || best === this.held.rows ? best.obj(bestPos)! : this.entryAt(best, bestPos, keep);
    }
  }

  /** Ids of every message, available or acquired, in id order (no objects made). */
  *ids(): IterableIterator<number> {
    let last = -Infinity;
    const tables = this.everyTable();
    for (;;) {
      let bestId = Infinity;
      for (const t of tables) {
        const pos = t.lowerBound(last + 1);
        if (pos >= 0 && t.id(pos) < bestId) bestId = t.id(pos);
      }
      if (bestId === Infinity) return;
      last = bestId;
      yield bestId;
    }
  }

  /** Available messages in delivery order (for browsing by management); held ones are not shown. */
  *availableEntries(): IterableIterator<QueueEntry> {
    for (let p = this.levels.length - 1; p >= 0; p--) {
      const level = this.levels[p]!;
      // By id, not position: the caller may change the queue between steps.
      for (let pos = level.first(); pos >= 0; ) {
        const id = level.id(pos);
        if (this.uncheckedRows && this.holdUnchecked(level, pos)) {
          pos = level.lowerBound(id);
          continue;
        }
        yield this.entryAt(level, pos, false);
        pos = level.lowerBound(id + 1);
      }
    }
  }

  /** Messages held until their delivery time, in id order (safe while the queue changes: each step looks up the next id). */
  *heldEntries(): IterableIterator<QueueEntry> {
    const rows = this.held.rows;
    for (let pos = rows.first(); pos >= 0; ) {
      const id = rows.id(pos);
      yield rows.obj(pos)!;
      pos = rows.lowerBound(id + 1);
    }
  }

  // ---- internals -------------------------------------------------------------

  /** The entry at a row: its object, or one made from a paged row (stored in the row if `keep`). */
  private entryAt(level: Level, pos: number, keep: boolean): QueueEntry {
    const obj = level.obj(pos);
    if (obj) return obj;
    const flags = level.get(pos, FLAGS);
    const fields: PagedFields = {
      id: level.id(pos),
      size: level.get(pos, SIZE),
      headerLength: level.get(pos, HEADER_LENGTH),
      durable: (flags & F_DURABLE) !== 0,
      priority: level.get(pos, PRIORITY),
      expiresAt: level.get(pos, EXPIRES),
      deliveryCount: level.get(pos, DELIVERY_COUNT),
      hasSubject: (flags & F_SUBJECT) !== 0,
    };
    const entry: QueueEntry = { msg: new PagedMessage(fields, this.name, this.loader!), deliveryCount: fields.deliveryCount, acquiredBy: undefined };
    if (keep) level.setObj(pos, entry);
    return entry;
  }

  private putEntry(entry: QueueEntry): void {
    const level = this.levelOf(entry.msg.priority);
    this.noteInsert(level, entry.msg.id);
    const pos = level.insert(entry.msg.id);
    level.setObj(pos, entry);
    level.set(pos, SIZE, bodySize(entry.msg));
    level.set(pos, EXPIRES, entry.msg.expiresAt);
    if (entry.msg.expiresAt) this.noteExpiry(entry.msg.expiresAt);
    if (this.groups !== undefined) {
      // A new message's group is read from it here, once; one put back keeps its own.
      if (entry.group === undefined) entry.group = this.enterGroup(entry.msg);
      else if (isGroup(entry.group)) this.groups.available(entry.group, entry.msg.id);
      level.set(pos, GROUP, entry.group);
    }
  }

  private hold(entry: QueueEntry, due: number): void {
    this.held.add(entry, due);
    if (entry.msg.expiresAt) this.noteExpiry(entry.msg.expiresAt);
  }

  /**
   * A row recovery made (F_UNCHECKED), read now for a delivery time: one still ahead takes
   * it out of its level into the held ones (true). The bit is cleared either way; a body
   * that cannot be read back stays (its delivery sets it aside).
   */
  private holdUnchecked(level: Level, pos: number): boolean {
    const flags = level.get(pos, FLAGS);
    if ((flags & F_UNCHECKED) === 0) return false;
    level.set(pos, FLAGS, flags & ~F_UNCHECKED);
    const entry = this.entryAt(level, pos, false);
    let due: number;
    try {
      due = this.host.heldUntil?.(entry.msg.bytes) ?? 0;
    } catch {
      return false;
    }
    if (due <= 0) return false;
    if (this.groups !== undefined) {
      const group = level.get(pos, GROUP);
      if (isGroup(group)) this.groups.leave(group);
      entry.group = undefined;
    }
    // Still queued and still paged: only its place changes (no forget()).
    level.removeAt(pos);
    this.hold(entry, due);
    return true;
  }

  /** Remove a held message by id and report it; false if it is not held. */
  private removeHeld(id: number, reason: RemovalReason): boolean {
    const entry = this.held.find(id);
    if (!entry) return false;
    // Its removal is reported (its dead letter's count asked) once it is no longer held:
    // counted now as releaseDue would count it (heldPastMark: nobody can have had it).
    if (this.doubtUncounted(entry) && this.heldPastMark(entry)) entry.doubtCounted = this.marks;
    this.held.remove(id);
    this.forget(bodySize(entry.msg), entry.msg instanceof PagedMessage, entry.msg.expiresAt, entry.msg.durable, entry);
    this.host.removed(this, entry, reason);
    return true;
  }

  /** The row value of a message new to this queue with groups: its group, counted, or GROUP_NONE. */
  private enterGroup(msg: MessageRecord): number {
    let key: string | undefined;
    try {
      key = this.host.groupKey?.(msg.bytes, MAX_GROUP_ID_BYTES);
    } catch {
      // A paged body that cannot be read back: no group here; its delivery sets it aside (setAside).
      key = undefined;
    }
    return key === undefined ? GROUP_NONE : this.groups!.enter(key, msg.id);
  }

  /** A paged row recovery made, whose group is not known yet: read once, kept in the row. */
  private resolveGroup(level: Level, pos: number): number {
    const group = this.enterGroup(this.entryAt(level, pos, false).msg);
    level.set(pos, GROUP, group);
    return group;
  }

  /** The owner of `group` no longer holds this message of it: when it held no other, the group is free for every consumer. */
  private unholdGroup(group: number): void {
    if (!this.groups!.unhold(group)) return;
    // Free now: its next messages may be another consumer's, and a settlement (unlike a
    // release) brings no new message or credit that would dispatch them.
    if (this.consumers.length > 1) this.host.moreToDispatch?.(this);
    // Marks past the group's first available row would hide it from the consumers that passed it while it was owned.
    if (this.skipTo.size === 0) return;
    const below = this.groups!.lowestAvailable(group) - 1;
    // The rows a consumer passed over may be its own now: every one is looked at again.
    this.rechecks.clear();
    let lowered = false;
    for (const marks of this.skipTo.values()) {
      for (let p = 0; p < marks.length; p++) {
        if (marks[p]! > below) {
          marks[p] = below;
          lowered = true;
        }
      }
    }
    if (lowered) this.marksLowered++;
  }

  private writePaged(level: Level, pos: number, f: PagedFields): void {
    level.set(pos, SIZE, f.size);
    level.set(pos, EXPIRES, f.expiresAt);
    level.set(pos, DELIVERY_COUNT, f.deliveryCount);
    level.set(pos, HEADER_LENGTH, f.headerLength);
    level.set(pos, PRIORITY, f.priority);
    level.set(pos, FLAGS, (f.durable ? F_DURABLE : 0) | (f.hasSubject ? F_SUBJECT : 0));
  }

  private findAvailable(id: number): { level: Level; pos: number } | undefined {
    for (const level of this.levels) {
      const pos = level.find(id);
      if (pos >= 0) return { level, pos };
    }
    return undefined;
  }

  /** Take a message out of the queue by id, with its bookkeeping; the entry, or undefined if absent. */
  private take(id: number): QueueEntry | undefined {
    const a = this.acquiredRows.find(id);
    if (a >= 0) {
      const entry = this.acquiredRows.obj(a)!;
      this.acquiredRows.removeAt(a);
      this.acquiredBytes -= bodySize(entry.msg);
      this.forget(bodySize(entry.msg), entry.msg instanceof PagedMessage, entry.msg.expiresAt, entry.msg.durable, entry);
      if (this.groups !== undefined && isGroup(entry.group!)) {
        this.unholdGroup(entry.group!);
        this.groups.leave(entry.group!);
      }
      return entry;
    }
    const found = this.findAvailable(id);
    if (!found) {
      const held = this.held.remove(id);
      if (held) this.forget(bodySize(held.msg), held.msg instanceof PagedMessage, held.msg.expiresAt, held.msg.durable, held);
      return held;
    }
    const entry = this.entryAt(found.level, found.pos, false);
    this.unlinkRow(found.level, found.pos);
    return entry;
  }

  /** Remove an available row with its bookkeeping; returns the position after it. */
  private unlinkRow(level: Level, pos: number): number {
    const obj = level.obj(pos);
    const durable = obj ? obj.msg.durable : (level.get(pos, FLAGS) & F_DURABLE) !== 0;
    this.forget(level.get(pos, SIZE), obj ? obj.msg instanceof PagedMessage : true, level.get(pos, EXPIRES), durable, obj);
    if (this.groups !== undefined) {
      const group = level.get(pos, GROUP);
      if (isGroup(group)) this.groups.leave(group);
    }
    return level.removeAt(pos);
  }

  /** Remove an available row and report it. */
  private removeRow(level: Level, pos: number, reason: RemovalReason): void {
    const entry = this.entryAt(level, pos, false);
    this.unlinkRow(level, pos);
    this.host.removed(this, entry, reason);
  }

  /** Bookkeeping for a message leaving the queue. */
  private forget(size: number, paged: boolean, expiresAt: number, durable: boolean, entry: QueueEntry | undefined): void {
    this.bytes -= size;
    if (paged) this.notePaged(size, -1);
    if (expiresAt) this.withTtl--;
    if (!durable) this.nonDurable--;
    if (entry?.refusedBy) for (const c of entry.refusedBy) deleteFrom(this.refused, c, entry);
    if (entry?.unreadable) this.unreadable.delete(entry);
    this.dequeued++;
  }

  private notePaged(size: number, sign: 1 | -1): void {
    this.pagedCount += sign;
    this.pagedBytes += sign * size;
  }

  /** A row is going into `level` at `id`: the consumers' marks at or past it come down below it. */
  private noteInsert(level: Level, id: number): void {
    // A new message's id is above every id the queue has held, so above every mark: only
    // a row put back (a release, a rollback) can be at or below one. Without this, a client
    // holding refusals on many links would make every publish to the queue visit them all.
    if (id > this.highestId) {
      this.highestId = id;
      return;
    }
    if (this.skipTo.size === 0) return;
    const p = this.levels.indexOf(level);
    for (const [consumer, marks] of this.skipTo) {
      if (!this.rechecks.putBack(consumer, p, this.levels.length, id, marks[p]!)) continue;
      // Counted for a row put back above the mark too (in a region): a look under way then sets no mark that would pass it.
      this.marksLowered++;
      if (marks[p]! >= id) marks[p] = id - 1;
    }
  }

  private levelOf(priority: number): Level {
    return this.levels[this.levelIndex(priority)]!;
  }

  private levelIndex(priority: number): number {
    const n = this.levels.length;
    if (n === 1) return 0;
    // AMQP priorities 0-9 map onto the queue's levels evenly (as qpidd does).
    const p = Math.max(0, Math.min(9, priority));
    return Math.min(n - 1, Math.floor((p * n) / 10));
  }

  private expireHeads(now: number): void {
    for (const level of this.levels) {
      // Bounded: each pass removes the head, or ends the dispatch's expiry (expiryBudget).
      for (let head = level.first(); head >= 0; head = level.first()) {
        const at = level.get(head, EXPIRES);
        if (!at || at > now) break;
        if (!this.spendExpiry()) return;
        this.removeRow(level, head, 'expired');
      }
    }
  }

  /**
   * Whether the dispatch may look at the row at `pos`: any row but a recovered one not yet
   * read for its delivery time, which spends one of uncheckedBudget (its body is read,
   * from disk when paged); false, and scanCutShort, when none is left.
   */
  private mayCheck(level: Level, pos: number): boolean {
    if ((level.get(pos, FLAGS) & F_UNCHECKED) === 0) return true;
    if (this.uncheckedBudget <= 0) {
      this.scanCutShort = true;
      return false;
    }
    this.uncheckedBudget--;
    return true;
  }

  /** One more expired row for this dispatch, if its budget allows; else the dispatch is cut short. */
  private spendExpiry(): boolean {
    if (this.expiryBudget <= 0) {
      this.scanCutShort = true;
      return false;
    }
    this.expiryBudget--;
    return true;
  }

  /** A row with this expiry went into a level. */
  private noteExpiry(at: number): void {
    if (at < this.nextExpiry) this.nextExpiry = at;
  }

  /**
   * Next available entry for a consumer, highest priority first, now acquired by it; skips
   * ones it refused, on a queue with message groups those of groups another consumer
   * owns, and those its selector does not select (at most scanBudget of those two per
   * dispatch: past it, scanCutShort); removes the expired ones it meets (at most
   * expiryBudget per dispatch, likewise).
   */
  private takeFor(consumer: Consumer, now: number): QueueEntry | undefined {
    let marks = this.skipTo.size === 0 ? undefined : this.skipTo.get(consumer);
    const lowered = this.marksLowered;
    const groups = this.groups;
    const selects = consumer.selects;
    const regions = marks ? this.rechecks.of(consumer) : undefined;
    // Rows from here on wait for a give-back under way: one still to come back may be before them.
    const givingBackAt = this.departed.size > 0 ? this.givenBackBelow : Infinity;
    for (let p = this.levels.length - 1; p >= 0; p--) {
      const level = this.levels[p]!;
      let pos = marks ? this.rechecks.look(regions, p, level, marks[p]! + 1) : level.first();
      // Bounded: each pass moves past or removes one row.
      while (pos >= 0) {
        if (level.id(pos) >= givingBackAt) break;
        const at = level.get(pos, EXPIRES);
        if (at && at <= now) {
          // Out of budget: nothing behind it is given this time (that would pass it, and
          // change the order), the next dispatch goes on from here.
          if (!this.spendExpiry()) return undefined;
          const id = level.id(pos);
          this.removeRow(level, pos, 'expired');
          // The report may have changed the queue (a reroute back into it): look again from here.
          pos = this.rechecks.look(regions, p, level, id);
          continue;
        }
        if (this.uncheckedRows) {
          const id = level.id(pos);
          // Out of budget: nothing behind it is given this time (that would pass it), as for expired rows.
          if (!this.mayCheck(level, pos)) return undefined;
          if (this.holdUnchecked(level, pos)) {
            // A recovered row held until its delivery time: out of the level now, never looked at again here.
            pos = this.rechecks.look(regions, p, level, id);
            continue;
          }
        }
        const obj = level.obj(pos);
        let group = GROUP_NONE;
        let skip = obj?.unreadable !== undefined || obj?.refusedBy?.has(consumer) === true;
        if (!skip && groups !== undefined) {
          group = level.get(pos, GROUP);
          if (group === GROUP_UNKNOWN) group = this.resolveGroup(level, pos);
          if (groups.ownedByOther(group, consumer)) {
            if (this.scanBudget <= 0) {
              this.scanCutShort = true;
              return undefined;
            }
            this.scanBudget--;
            this.groupRowsSkipped++;
            skip = true;
          }
        }
        let looked: QueueEntry | undefined;
        let outOfBudget = false;
        if (!skip && selects !== undefined) {
          looked = obj ?? this.entryAt(level, pos, false);
          if (!this.selectsEntry(selects, looked)) {
            // Counted after the look (its verdict is kept by the mark below), so a consumer
            // always gets past at least one row: a long run of rows it does not select is
            // walked over many dispatches, each after the event loop ran (moreToDispatch).
            outOfBudget = this.scanBudget-- <= 0;
            if (outOfBudget) this.scanCutShort = true;
            this.selectorRowsSkipped++;
            skip = true;
          }
        }
        if (skip) {
          // Every row before this one was skipped or removed: the next look may start after it.
          const id = level.id(pos);
          if (lowered === this.marksLowered) {
            if (!marks) this.skipTo.set(consumer, (marks = this.levels.map(() => -Infinity)));
            marks[p] = id;
            this.rechecks.passed(regions, p, id);
          }
          if (outOfBudget) return undefined;
          pos = regions === undefined ? level.next(pos) : this.rechecks.look(regions, p, level, id + 1);
          continue;
        }
        const entry = obj ?? looked ?? this.entryAt(level, pos, false);
        if (groups !== undefined) {
          entry.group = group;
          if (isGroup(group)) {
            groups.acquire(group, consumer);
            // The first row of the only level: no row of its group is left below it.
            if (this.levels.length === 1 && pos === level.first()) groups.raiseLowest(group, level.id(pos) + 1);
          }
        }
        this.acquiredBytes += level.get(pos, SIZE);
        level.removeAt(pos);
        entry.acquiredBy = consumer;
        if (!(entry.msg.id >= consumer.lowestTaken!)) consumer.lowestTaken = entry.msg.id;
        // Its first delivery from here since it came into doubt: counted once, in the entry,
        // so a release adds on top and the next delivery does not count it again.
        if (this.doubtUncounted(entry)) {
          entry.deliveryCount = oneMoreDelivery(entry.deliveryCount);
          entry.doubtCounted = this.marks;
        }
        this.acquiredRows.setObj(this.acquiredRows.insert(entry.msg.id), entry);
        return entry;
      }
    }
    return undefined;
  }

  private feedConsumers(now: number): number {
    const n = this.consumers.length;
    if (n === 0 || this.available === 0) return 0;
    if (n === 1) return this.feedOnly(this.consumers[0]!, now);
    const list = this.consumers.slice();
    // One look at each consumer per dispatch: those with credit, in turn from where the
    // last dispatch stopped. The passes then go over those alone, so consumers holding no
    // credit (a client may attach thousands) cost nothing per message the others get.
    const start = this.nextConsumer < n ? this.nextConsumer : 0;
    let ready: number[] = [];
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      const c = list[i]!;
      if (!c.browse && c.credit > 0) ready.push(i);
    }
    const membership = this.membership;
    let delivered = 0;
    // Each pass delivers at least one message or stops: a consumer stays in the turn only
    // while it has credit and took one.
    while (ready.length > 0 && this.available > 0) {
      const still: number[] = [];
      for (const i of ready) {
        if (this.available === 0) break;
        const c = list[i]!;
        if (c.credit <= 0) continue;
        // Consumers came or went inside a deliver (rare): one that left takes nothing more.
        const moved = membership !== this.membership;
        const at = moved ? this.consumers.indexOf(c) : i;
        if (at < 0) continue;
        const entry = this.takeFor(c, now);
        if (!entry) continue;
        c.credit--;
        delivered++;
        this.nextConsumer = at + 1;
        c.deliver(entry, this);
        if (c.credit > 0) still.push(i);
      }
      ready = still;
    }
    return delivered;
  }

  /**
   * feedConsumers for a queue with one consumer (the usual case), with nothing made per
   * dispatch: one that comes or goes inside a delivery ends this run (either schedules
   * the queue again).
   */
  private feedOnly(c: Consumer, now: number): number {
    let delivered = 0;
    while (!c.browse && c.credit > 0 && this.available > 0 && this.consumers.length === 1 && this.consumers[0] === c) {
      const entry = this.takeFor(c, now);
      if (!entry) break;
      c.credit--;
      delivered++;
      this.nextConsumer = 1;
      c.deliver(entry, this);
    }
    return delivered;
  }

  private feedBrowser(c: Consumer, now: number): number {
    let delivered = 0;
    // As for consumers (takeFor): its cursor would pass the messages still to come back.
    const givingBackAt = this.departed.size > 0 ? this.givenBackBelow : Infinity;
    while (c.credit > 0) {
      let best: Level | undefined;
      let bestPos = -1;
      for (const level of this.levels) {
        const pos = level.lowerBound(c.cursor + 1);
        if (pos >= 0 && (!best || level.id(pos) < best.id(bestPos))) {
          best = level;
          bestPos = pos;
        }
      }
      if (!best || best.id(bestPos) >= givingBackAt) break;
      if (this.uncheckedRows) {
        if (!this.mayCheck(best, bestPos)) break;
        if (this.holdUnchecked(best, bestPos)) continue;
      }
      const at = best.get(bestPos, EXPIRES);
      if (at && at <= now) {
        // Passed over, not removed (a browser takes nothing), but a long run of them is
        // as long a walk: it counts against the dispatch's expiry budget.
        if (!this.spendExpiry()) break;
        c.cursor = best.id(bestPos);
        continue;
      }
      c.cursor = best.id(bestPos);
      const entry = this.entryAt(best, bestPos, false);
      if (c.selects !== undefined && !this.selectsEntry(c.selects, entry)) {
        // Passed over (the cursor keeps the place); a long run of them is walked over
        // several dispatches, as a consumer's is.
        this.selectorRowsSkipped++;
        if (this.scanBudget-- <= 0) {
          this.scanCutShort = true;
          break;
        }
        continue;
      }
      c.credit--;
      delivered++;
      c.deliver(entry, this);
    }
    return delivered;
  }

  /**
   * A selector's verdict on an entry, with the delivery-count its delivery would carry; a
   * paged body that cannot be read back is not selected (its delivery to another consumer
   * sets it aside).
   */
  private selectsEntry(selects: (msg: MessageRecord, deliveryCount: number) => boolean, entry: QueueEntry): boolean {
    try {
      return selects(entry.msg, this.deliveryCountOf(entry));
    } catch {
      return false;
    }
  }
}

/**
 * Adds to `expired` the ids of rows whose expiry (column `col`; 0: none) is at or before
 * `now`, until it holds `limit`; returns the earliest expiry still ahead among the rows
 * looked at. Straight over the columns: a generator step and a lookup per row made the
 * tick's look at 1M rows 25-150 ms, every second, whether any expired or not (docs/stalls.md).
 */
function collectExpired(chunks: readonly IdChunk<QueueEntry>[], col: number, now: number, limit: number, expired: number[]): number {
  let soonest = Infinity;
  for (const chunk of chunks) {
    const expires = chunk.cols[col]!;
    for (let i = chunk.start; i < chunk.end; i++) {
      const at = expires[i]!;
      if (!at) continue;
      if (at > now) {
        if (at < soonest) soonest = at;
        continue;
      }
      expired.push(chunk.ids[i]!);
      if (expired.length >= limit) return soonest;
    }
  }
  return soonest;
}

function addTo(index: Map<Consumer, Set<QueueEntry>>, c: Consumer, entry: QueueEntry): void {
  let set = index.get(c);
  if (!set) index.set(c, (set = new Set()));
  set.add(entry);
}

/** Out of a consumer's set; the set goes when it is empty. */
function deleteFrom(index: Map<Consumer, Set<QueueEntry>>, c: Consumer, entry: QueueEntry): void {
  const set = index.get(c);
  if (!set) return;
  set.delete(entry);
  if (set.size === 0) index.delete(c);
}

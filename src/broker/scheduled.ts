// Messages of one queue held back until their delivery time (JMS 2.0 delivery delay,
// the x-opt-delivery-time message annotation): counted in the queue's depth, but kept
// out of its dispatch rows, so no dispatch and no consumer's skip mark (queue.ts
// takeFor, skipTo) ever walks them. When one is due the broker's timer moves it into
// the rows at its id (its place as sent), in bounded slices (Broker.releaseDue).
//
// Two views of the same messages: an id-ordered table (lookups, removal by id,
// snapshots and id walks, the expiry scan over its EXPIRES column) and a min-heap of
// (due, id) for "which are due now". A message that leaves early (expired, purged,
// dequeued by a peer) leaves a stale heap item, passed over when it comes up; the heap
// is rebuilt when stale items outnumber the live ones, so it stays within twice the table.
import { IdTable, type ColumnType } from '../util/id-table.js';
import type { QueueEntry } from './queue.js';

/**
 * When a message's sender asked it delivered (ms since the epoch), read from its bytes
 * (the AMQP edge's reader: x-opt-delivery-time, or `now` + x-opt-delivery-delay):
 * 'none' when it did not ask, 'invalid' (with why) when what it asked cannot be
 * honoured. A time at or before `now` is deliverable at once. `fixed`: the time is named
 * in the message, so every broker that reads it, whenever, reads the same; a delay alone
 * is counted from each read (the broker that takes one from its sender names its end:
 * delivery-time-reader.ts heldMessage).
 */
export type DeliveryTimeReader = (bytes: Buffer, now: number) => DeliveryTime;
export type DeliveryTime = { status: 'none' } | { status: 'at'; at: number; fixed: boolean } | { status: 'invalid'; reason: string };

/**
 * Until when a message with this delivery time, read at `now`, is held (0: not held). An
 * invalid time is refused at publish (the AMQP edge): one a journal or a peer hands back
 * is delivered at once.
 */
export function heldUntilOf(time: DeliveryTime, now: number): number {
  return time.status === 'at' && time.at > now ? time.at : 0;
}

/** How far ahead a delivery time may be: one further is refused at publish (a sender's mistake, or a hold nobody would see end). */
export const MAX_DELIVERY_AHEAD_MS = 10 * 366 * 24 * 3600 * 1000;

/** Due times one timer tick moves into a queue's rows at most per slice (see Broker.releaseDue). */
export const RELEASE_SLICE = 5000;

const DUE = 0;
/** The message's expiry (0: none), beside its due time, so an expiry scan reads columns only. */
export const HELD_EXPIRES = 1;
const COLUMNS: readonly ColumnType[] = ['f64', 'f64'];
/** Stale heap items tolerated beyond the live ones before a rebuild. */
const STALE_SLACK = 1024;

export class HeldMessages {
  /** By id: each held entry, its due time and expiry. */
  readonly rows = new IdTable<QueueEntry>(COLUMNS);
  /** Min-heap of (due, id), parallel arrays; may hold stale items (see the file comment). */
  private dues: number[] = [];
  private ids: number[] = [];

  get length(): number {
    return this.rows.length;
  }

  /** Hold `entry` until `due` (its id must not be held already). */
  add(entry: QueueEntry, due: number): void {
    const pos = this.rows.insert(entry.msg.id);
    this.rows.setObj(pos, entry);
    this.rows.set(pos, DUE, due);
    this.rows.set(pos, HELD_EXPIRES, entry.msg.expiresAt);
    this.push(due, entry.msg.id);
  }

  find(id: number): QueueEntry | undefined {
    const pos = this.rows.find(id);
    return pos < 0 ? undefined : this.rows.obj(pos);
  }

  /** When a held message with this id is due (undefined: not held). */
  dueOf(id: number): number | undefined {
    const pos = this.rows.find(id);
    return pos < 0 ? undefined : this.rows.get(pos, DUE);
  }

  /** Take a held message out by id (its heap item goes stale); undefined if not held. */
  remove(id: number): QueueEntry | undefined {
    const pos = this.rows.find(id);
    if (pos < 0) return undefined;
    const entry = this.rows.obj(pos);
    this.rows.removeAt(pos);
    return entry;
  }

  /** The earliest due time held (Infinity: none). */
  nextDue(): number {
    this.dropStaleTop();
    return this.dues.length > 0 ? this.dues[0]! : Infinity;
  }

  /**
   * Take out at most `limit` messages due at or before `now`, earliest first (ties by id),
   * each with its due time.
   */
  takeDue(now: number, limit: number): Array<{ entry: QueueEntry; due: number }> {
    const out: Array<{ entry: QueueEntry; due: number }> = [];
    // Bounded: each pass pops one heap item (live or stale), and stops at `limit` live ones.
    while (out.length < limit) {
      this.dropStaleTop();
      if (this.dues.length === 0 || this.dues[0]! > now) break;
      const due = this.dues[0]!;
      const entry = this.remove(this.ids[0]!);
      this.pop();
      if (entry) out.push({ entry, due });
    }
    return out;
  }

  clear(): void {
    this.rows.clear();
    this.dues = [];
    this.ids = [];
  }

  // ---- the heap ------------------------------------------------------------

  /** Whether the heap's top is a message still held with that due time. */
  private topIsLive(): boolean {
    const pos = this.rows.find(this.ids[0]!);
    return pos >= 0 && this.rows.get(pos, DUE) === this.dues[0];
  }

  private dropStaleTop(): void {
    // Bounded by the heap's size: each pass pops one item.
    while (this.dues.length > 0 && !this.topIsLive()) this.pop();
  }

  private push(due: number, id: number): void {
    if (this.dues.length >= 2 * this.rows.length + STALE_SLACK) this.rebuild();
    this.dues.push(due);
    this.ids.push(id);
    this.up(this.dues.length - 1);
  }

  /** The heap again from the table alone: stale items gone. */
  private rebuild(): void {
    const dues: number[] = [];
    const ids: number[] = [];
    for (let pos = this.rows.first(); pos >= 0; pos = this.rows.next(pos)) {
      dues.push(this.rows.get(pos, DUE));
      ids.push(this.rows.id(pos));
    }
    this.dues = dues;
    this.ids = ids;
    for (let i = (dues.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  private pop(): void {
    const last = this.dues.length - 1;
    this.swap(0, last);
    this.dues.pop();
    this.ids.pop();
    if (this.dues.length > 0) this.down(0);
  }

  private before(a: number, b: number): boolean {
    const da = this.dues[a]!;
    const db = this.dues[b]!;
    return da < db || (da === db && this.ids[a]! < this.ids[b]!);
  }

  private up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(i, parent)) return;
      this.swap(i, parent);
      i = parent;
    }
  }

  private down(i: number): void {
    const n = this.dues.length;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let least = i;
      if (l < n && this.before(l, least)) least = l;
      if (r < n && this.before(r, least)) least = r;
      if (least === i) return;
      this.swap(i, least);
      i = least;
    }
  }

  private swap(a: number, b: number): void {
    const d = this.dues[a]!;
    this.dues[a] = this.dues[b]!;
    this.dues[b] = d;
    const id = this.ids[a]!;
    this.ids[a] = this.ids[b]!;
    this.ids[b] = id;
  }
}

// A session's unsettled deliveries in one direction, by delivery-id. Ids are
// consecutive in a session (2.7.5) and most deliveries are settled soon after they
// come, so the live ones sit in a short run of ids: a ring of slots indexed by
// the id's low bits finds, takes and drops one with no hashing and no garbage.
// A JavaScript Map did the same with a rehash each time it grew and shrank, and
// a session's unsettled count swings from a full window to none with every
// batch (profiled: a tenth of a delivery's allocation, 4% of the broker's CPU).
//
// The ring doubles while its live ids span more than it holds, up to MAX_SLOTS;
// beyond that (a peer that leaves one delivery unsettled for ever while
// thousands pass) the ids that collide go to a Map, so memory follows the
// number of unsettled deliveries, never the span of their ids.
//
// A disposition names a range of ids as wide as the peer likes, and a peer can
// send thousands a second. Visiting each id of the range, or each unsettled
// delivery, made one frame cost up to every outstanding delivery (2,000 frames
// naming ids never sent held the event loop 2.6 s beside 20,000 unsettled). So
// the ids are also kept in `order`, oldest first, as they become unsettled (ids
// only grow in a session: an append). A range is clipped to the oldest..newest
// kept and found by binary search; the ids in it settled since are stepped over by
// jumps that each walk shortens (as union-find does), so walking over a settled id
// is paid once, not by every disposition naming it. A disposition then costs a
// binary search and a step per unsettled delivery in its range, and one naming
// none of the ids kept a comparison. `order` holds ids, not deliveries (nothing
// settled is kept alive by it); the settled ones leave it when it is full.
import { U32_SPAN, serialDiff } from './serial.js';

/** What the ring keys by: a delivery's id. */
export interface HasDeliveryId {
  readonly id: number;
}

const FIRST_SLOTS = 16;
const MAX_SLOTS = 4096;
const FIRST_ORDER = 64;

/** How far `id` comes after `base`, as a serial number (0 .. 2^32-1). */
const offset = (base: number, id: number): number => (id - base) >>> 0;

/** Whether `id` comes after `other` (serialDiff(other, id) > 0, without its division). */
const isAfter = (id: number, other: number): boolean => (offset(other, id) - 1) >>> 0 < 0x7fffffff;

export class UnsettledDeliveries<D extends HasDeliveryId> {
  private slots: Array<D | undefined> = new Array<D | undefined>(FIRST_SLOTS).fill(undefined);
  private mask = FIRST_SLOTS - 1;
  private overflow: Map<number, D> | undefined;
  private count = 0;
  /** The ids made unsettled since the last compaction, oldest first; some settled since. */
  private order = new Uint32Array(FIRST_ORDER);
  /** jump[i] === i: order[i] may be unsettled; else order[i] up to (not with) order[jump[i]] are settled. */
  private jump = new Int32Array(FIRST_ORDER);
  private length = 0;

  get size(): number {
    return this.count;
  }

  get(id: number): D | undefined {
    const d = this.slots[id & this.mask];
    if (d !== undefined && d.id === id) return d;
    return this.overflow?.get(id);
  }

  set(d: D): void {
    if (this.put(d)) this.addToOrder(d.id);
  }

  delete(id: number): boolean {
    const i = id & this.mask;
    const d = this.slots[i];
    if (d !== undefined && d.id === id) {
      this.slots[i] = undefined;
      this.count--;
      return true;
    }
    if (this.overflow?.delete(id)) {
      this.count--;
      return true;
    }
    return false;
  }

  /**
   * The unsettled deliveries whose ids lie in first..last (inclusive, wrapping as
   * serial numbers do, spec 2.8.9), oldest first. A range that holds none of the ids
   * made unsettled (ids never sent, or long settled) costs nothing; any other costs a
   * binary search and a step per delivery returned, however wide it is.
   */
  inRange(first: number, last: number): D[] {
    const found: D[] = [];
    if (this.count === 0) return found;
    // Offsets from the oldest id kept: every unsettled id lies at 0..top.
    const base = this.order[0]!;
    const top = offset(base, this.order[this.length - 1]!);
    const from = offset(base, first);
    const to = from + offset(first, last);
    // Past 2^32 the range wraps round to the base: its tail comes first, being older.
    if (to >= U32_SPAN) this.collect(0, Math.min(to - U32_SPAN, top), found);
    if (from <= top) this.collect(from, Math.min(to, top), found);
    return found;
  }

  /** Every unsettled delivery (no order promised). */
  *values(): IterableIterator<D> {
    for (const d of this.slots) if (d !== undefined) yield d;
    if (this.overflow) yield* this.overflow.values();
  }

  /** The ids, for tests and status (no order promised). */
  ids(): number[] {
    return [...this.values()].map((d) => d.id);
  }

  clear(): void {
    this.slots.fill(undefined);
    this.overflow = undefined;
    this.count = 0;
    this.length = 0;
    this.order = new Uint32Array(FIRST_ORDER);
    this.jump = new Int32Array(FIRST_ORDER);
  }

  /** Into its slot (or aside); true when the id was not unsettled already. */
  private put(d: D): boolean {
    if (this.overflow?.has(d.id)) {
      this.overflow.set(d.id, d);
      return false;
    }
    for (;;) {
      const i = d.id & this.mask;
      const there = this.slots[i];
      if (there === undefined || there.id === d.id) {
        this.slots[i] = d;
        if (there !== undefined) return false;
        this.count++;
        return true;
      }
      if (this.slots.length >= MAX_SLOTS) {
        this.count++;
        (this.overflow ??= new Map()).set(d.id, d);
        return true;
      }
      this.grow();
    }
  }

  /**
   * Twice the slots. Two ids apart in the smaller ring are apart in the larger
   * (equal low bits over more bits means equal over fewer), so none collide.
   */
  private grow(): void {
    const old = this.slots;
    this.slots = new Array<D | undefined>(old.length * 2).fill(undefined);
    this.mask = this.slots.length - 1;
    for (const d of old) if (d !== undefined) this.slots[d.id & this.mask] = d;
  }

  private addToOrder(id: number): void {
    // Not after the newest: a delivery of many frames completed after later ones
    // (ours come in id order), or an id made unsettled again. Rare: rebuilt in place.
    if (this.length > 0 && !isAfter(id, this.order[this.length - 1]!)) {
      this.compact(id);
      return;
    }
    if (this.length === this.order.length) this.makeRoom();
    this.order[this.length] = id;
    this.jump[this.length] = this.length;
    this.length++;
  }

  /**
   * The unsettled deliveries at offsets lo..hi from order[0], oldest first. Each run
   * of settled ids walked over is made one jump, so the next walk takes one step.
   */
  private collect(lo: number, hi: number, found: D[]): void {
    const { order, jump } = this;
    const base = order[0]!;
    let i = this.firstAtOrAfter(base, lo);
    let settledFrom = -1;
    while (i < this.length && offset(base, order[i]!) <= hi) {
      const d = jump[i] === i ? this.get(order[i]!) : undefined;
      if (d !== undefined) {
        if (settledFrom >= 0) this.shortcut(settledFrom, i);
        settledFrom = -1;
        found.push(d);
        i++;
        continue;
      }
      if (settledFrom < 0) settledFrom = i;
      i = jump[i] === i ? i + 1 : jump[i]!;
    }
    if (settledFrom >= 0) this.shortcut(settledFrom, i);
  }

  /** The first position whose id is at offset `lo` from `base` or later (ids are kept in that order). */
  private firstAtOrAfter(base: number, lo: number): number {
    let a = 0;
    let b = this.length;
    while (a < b) {
      const m = (a + b) >>> 1;
      if (offset(base, this.order[m]!) < lo) a = m + 1;
      else b = m;
    }
    return a;
  }

  /** Positions from..to-1 hold settled ids: point each straight at `to`. */
  private shortcut(from: number, to: number): void {
    const { jump } = this;
    for (let p = from; p < to; ) {
      const next = jump[p] === p ? p + 1 : jump[p]!;
      jump[p] = to;
      p = next;
    }
  }

  /**
   * `order` is full: drop the ids settled since they were added (a lookup each, paid
   * for by the appends that filled it), and double it only if half is still unsettled.
   */
  private makeRoom(): void {
    this.compact();
    const capacity = this.order.length;
    if (this.length >= capacity / 2) this.resize(2 * capacity);
    // A burst of unsettled deliveries is over: give its room back, a half at a time.
    else if (capacity > FIRST_ORDER && this.length < capacity / 8) this.resize(capacity / 2);
  }

  /** Drop the settled ids from `order` (and put `extra` where it belongs); every jump is forgotten. */
  private compact(extra?: number): void {
    const { order } = this;
    let kept = 0;
    for (let r = 0; r < this.length; r++) {
      const id = order[r]!;
      if (id !== extra && this.get(id) !== undefined) order[kept++] = id;
    }
    this.length = kept;
    if (extra !== undefined) {
      // Before the ids after it: the deliveries that completed while it came, so few.
      let p = kept;
      while (p > 0 && serialDiff(extra, order[p - 1]!) > 0) p--;
      if (kept === order.length) this.resize(2 * kept);
      this.order.copyWithin(p + 1, p, kept);
      this.order[p] = extra;
      this.length++;
    }
    for (let i = 0; i < this.length; i++) this.jump[i] = i;
  }

  private resize(capacity: number): void {
    const order = new Uint32Array(capacity);
    const jump = new Int32Array(capacity);
    order.set(this.order.subarray(0, this.length));
    jump.set(this.jump.subarray(0, this.length));
    this.order = order;
    this.jump = jump;
  }
}

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

/** What the ring keys by: a delivery's id. */
export interface HasDeliveryId {
  readonly id: number;
}

const FIRST_SLOTS = 16;
const MAX_SLOTS = 4096;

export class UnsettledDeliveries<D extends HasDeliveryId> {
  private slots: Array<D | undefined> = new Array<D | undefined>(FIRST_SLOTS).fill(undefined);
  private mask = FIRST_SLOTS - 1;
  private overflow: Map<number, D> | undefined;
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(id: number): D | undefined {
    const d = this.slots[id & this.mask];
    if (d !== undefined && d.id === id) return d;
    return this.overflow?.get(id);
  }

  set(d: D): void {
    if (this.overflow?.has(d.id)) {
      this.overflow.set(d.id, d);
      return;
    }
    for (;;) {
      const i = d.id & this.mask;
      const there = this.slots[i];
      if (there === undefined || there.id === d.id) {
        if (there === undefined) this.count++;
        this.slots[i] = d;
        return;
      }
      if (this.slots.length >= MAX_SLOTS) {
        this.count++;
        (this.overflow ??= new Map()).set(d.id, d);
        return;
      }
      this.grow();
    }
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
}

// The unsettled deliveries of links that detached, leaving their session's books. The
// books are keyed by delivery-id, not by link, so finding a link's deliveries is a walk of
// every unsettled delivery of the session: a consumer link holding a million unsettled
// made its detach such a walk, ~0.35 s without answering anyone (docs/stalls.md). Books
// of at most SWEEP_STEP deliveries are still walked at once; bigger ones in slices of
// SWEEP_STEP, an event-loop turn apart. Meanwhile a leaving delivery may still be in a
// book: a disposition naming it drops it (Session.onDisposition asks `has`), as if gone.
// A link detached while a walk is under way waits for the next walk (the one under way may
// have passed some of its deliveries): starting the walk again at each detach, a client
// detaching a link every turn kept it at its first slice for ever, and every link it
// detached in the session's set.
import type { Delivery } from './delivery.js';
import type { Link } from './link.js';
import type { UnsettledDeliveries } from './unsettled.js';

/** Deliveries one slice visits (about 1.5 ms). */
export const SWEEP_STEP = 4096;

export class LeavingDeliveries {
  /** Links whose deliveries leave the books: those of the walk under way, and those detached since. */
  private readonly links = new Set<Link>();
  /** The walk under way: the links it began with, which book, and where in it. */
  private walk: { links: Link[]; book: number; at: Iterator<Delivery> } | undefined;
  private scheduled = false;

  constructor(private readonly books: readonly UnsettledDeliveries<Delivery>[]) {}

  /** Whether `link` detached and its deliveries are still leaving the books. */
  has(link: Link): boolean {
    return this.links.size > 0 && this.links.has(link);
  }

  /** `link` detached: its unsettled deliveries leave the books, at once when they are small. */
  add(link: Link): void {
    let size = 0;
    for (const book of this.books) size += book.size;
    if (size <= SWEEP_STEP) {
      for (const book of this.books) {
        const gone = [...book.values()].filter((d) => d.link === link);
        for (const d of gone) book.delete(d.id);
      }
      return;
    }
    this.links.add(link);
    // The walk under way drops what it still meets of this link's; the next one the rest.
    if (!this.walk) this.begin();
  }

  /** The session ended: its books were cleared. */
  clear(): void {
    this.links.clear();
    this.walk = undefined;
  }

  /** A walk of every book from the start, for the links leaving now. */
  private begin(): void {
    this.walk = { links: [...this.links], book: 0, at: this.books[0]!.values() };
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.sweep());
  }

  private sweep(): void {
    this.scheduled = false;
    const walk = this.walk;
    if (!walk) return; // the session ended meanwhile
    // Bounded: SWEEP_STEP deliveries, or the end of the books.
    for (let n = 0; n < SWEEP_STEP; ) {
      const book = this.books[walk.book]!;
      const next = walk.at.next();
      if (next.done) {
        const following = this.books[walk.book + 1];
        if (!following) return this.walked(walk);
        walk.book++;
        walk.at = following.values();
        continue;
      }
      n++;
      const d = next.value;
      // Only that delivery: the walk may see one its book has replaced or dropped since.
      if (this.links.has(d.link) && book.get(d.id) === d) book.delete(d.id);
    }
    this.scheduled = true;
    setImmediate(() => this.sweep());
  }

  /** A walk reached the end of the books: its links are gone from them; those detached meanwhile get a walk of their own. */
  private walked(walk: { links: Link[] }): void {
    this.walk = undefined;
    for (const link of walk.links) this.links.delete(link);
    if (this.links.size > 0) this.begin();
  }
}

// Rows put back below a consumer's skip mark (Queue.skipTo): a release, a rollback, a
// held message coming due. The mark comes down below such a row, or the consumer would
// never look at it; but every other row between it and the old mark was looked at
// already and passed over (refused, a group another consumer owns, not selected by its
// selector), and still is. So, per consumer and level, the old mark and the ids put back
// below it are kept here: the consumer's looks visit those few rows, then jump past the
// old mark, rather than judging every row between again (with a selector over 100,000
// paged rows, each read back from the journal, about half a second of work per release).
// Bounded: past MAX_RETURNED ids put back into one region it is forgotten, and the rows
// are walked again as before. Whatever frees a verdict (a group freed) forgets them all.
import type { IdTable } from '../util/id-table.js';

/** Ids put back below one consumer's mark in one level that are remembered; past it the region is forgotten. */
export const MAX_RETURNED = 64;

interface Region {
  /** Every row of the level with an id up to this one, other than `returned`, was passed over by the consumer. */
  upTo: number;
  /** Ids put back at or below upTo since, ascending, above the consumer's mark. */
  returned: number[];
}

/** One consumer's regions, by level index. */
export type ConsumerRegions = Array<Region | undefined>;

export class RecheckRegions<C> {
  private readonly byConsumer = new Map<C, ConsumerRegions>();

  /** The consumer's regions, if it has any (for its looks). */
  of(consumer: C): ConsumerRegions | undefined {
    return this.byConsumer.size === 0 ? undefined : this.byConsumer.get(consumer);
  }

  /**
   * A row goes back into level `p` (of `levels`) at `id`, where the consumer's mark is `mark`:
   * remembered when it is at or below the mark or in the consumer's region; false when it is
   * neither (the consumer's looks will meet it anyway). The caller lowers the mark below `id`
   * when it is at or past it.
   */
  putBack(consumer: C, p: number, levels: number, id: number, mark: number): boolean {
    let regions = this.byConsumer.get(consumer);
    let region = regions?.[p];
    if (id > mark && (region === undefined || id > region.upTo)) return false;
    if (region === undefined) {
      if (!regions) this.byConsumer.set(consumer, (regions = new Array<Region | undefined>(levels).fill(undefined)));
      regions[p] = region = { upTo: mark, returned: [] };
    }
    const returned = region.returned;
    if (returned.length >= MAX_RETURNED) {
      regions![p] = undefined;
      return true;
    }
    let i = returned.length;
    while (i > 0 && returned[i - 1]! > id) i--;
    if (returned[i - 1] !== id) returned.splice(i, 0, id);
    return true;
  }

  /** Where a look of the consumer's in level `p` goes on from `fromId`: the next row put back in its region, or the first row past the region. */
  look(regions: ConsumerRegions | undefined, p: number, level: IdTable<unknown>, fromId: number): number {
    const region = regions?.[p];
    if (region === undefined || fromId > region.upTo) return level.lowerBound(fromId);
    // Bounded: MAX_RETURNED ids at most.
    for (const id of region.returned) {
      if (id < fromId) continue;
      const pos = level.find(id);
      if (pos >= 0) return pos;
    }
    return level.lowerBound(region.upTo + 1);
  }

  /** The consumer's mark in level `p` moved up to `mark`: what is at or below it needs no look. */
  passed(regions: ConsumerRegions | undefined, p: number, mark: number): void {
    const region = regions?.[p];
    if (region === undefined) return;
    if (mark >= region.upTo) {
      regions![p] = undefined;
      return;
    }
    let drop = 0;
    while (drop < region.returned.length && region.returned[drop]! <= mark) drop++;
    if (drop > 0) region.returned.splice(0, drop);
  }

  forget(consumer: C): void {
    this.byConsumer.delete(consumer);
  }

  clear(): void {
    this.byConsumer.clear();
  }
}

// The gap a restart leaves in a DR source's log, and whether a copy can cross it.
//
// A broker that restarts continues its log above its LSN reservation (store/log-position.ts),
// so LSNs between the newest change on disk and the reservation were either never used or
// were non-durable changes, which the restart lost. A copy's position is at most what the
// source called safe, and every durable change up to a safe LSN is on disk. So a copy at or
// past the newest change on disk has every durable change the source still has: the gap
// holds nothing it lacks, and it resumes from the reservation instead of taking a snapshot.
// What the restart did lose, the non-durable messages the copy may hold, is settled by the
// `restart` message (protocol.ts): a mirror drops what the source no longer holds.
import type { Broker } from '../broker/broker.js';
import type { ChangeWindow } from '../replication/change-window.js';
import { idRanges } from './protocol.js';

export interface LogGap {
  /** The newest change on disk when the broker started: a copy at or past it lacks no durable change. */
  after: number;
  /** The log went on after this LSN (the reservation): where a copy crossing the gap resumes. */
  lsn: number;
  /** Messages with ids below this existed before the restart. */
  floor: number;
}

/**
 * Whether a copy at `from` crosses the gap by the log: it lacks nothing from before
 * the restart, and the window still holds every change since (nothing dropped).
 */
export function crossesGap(gap: LogGap | undefined, window: ChangeWindow, from: number): gap is LogGap {
  return gap !== undefined && from >= gap.after && from < gap.lsn && window.coversFromLsn <= gap.lsn;
}

/** The ids from before the restart that `queue` holds, as ranges (undefined: too many ranges to send). */
export function heldBefore(broker: Broker, queue: string, floor: number): number[] | undefined {
  const q = broker.queues.get(queue);
  if (!q) return [];
  function* below(): Generator<number> {
    for (const id of q!.ids()) {
      if (id >= floor) return;
      yield id;
    }
  }
  return idRanges(below());
}

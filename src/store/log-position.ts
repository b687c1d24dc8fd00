// Where the broker's change log continues after the journal is recovered.
import type { Broker } from '../broker/broker.js';
import { clearJournalComplete, isJournalComplete } from '../ha/journal-marker.js';
import type { Journal, Recovered } from './journal.js';

/**
 * An HA backup whose journal is marked complete (it held nothing non-durable: see
 * journal-marker.ts) resumes the primary's log at its newest change (then it gets
 * only what it lacks): that LSN is returned. Anyone else continues above its LSN
 * reservation, so no LSN it may have handed out is used twice.
 */
export function continueLog(broker: Broker, journal: Journal, recovered: Recovered, where: { haCluster: boolean; dataDir: string }): number | undefined {
  // Outside a cluster the journal keeps durable changes only: forget the marker for good.
  if (!where.haCluster) clearJournalComplete(where.dataDir);
  const resumeLsn = where.haCluster && isJournalComplete(where.dataDir) ? recovered.lastChangeLsn : undefined;
  if (resumeLsn !== undefined) {
    broker.log.rewind(resumeLsn);
    journal.rewindTo(resumeLsn);
  } else {
    broker.log.resumeAfter(recovered.lastLsn);
  }
  if (recovered.epoch > broker.epoch) broker.epoch = recovered.epoch;
  return resumeLsn;
}

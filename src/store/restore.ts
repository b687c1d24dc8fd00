// Load what the journal recovered into the broker model: the configuration as
// changes in LSN order, then every queue's messages as paged rows, straight from
// the journal's index to the queue's typed arrays. No object per message is made,
// so a restart's memory and time do not grow with an object per queued message.
import type { Broker } from '../broker/broker.js';
import type { BodyLoader } from '../broker/paged-message.js';
import type { Journal, Recovered } from './journal.js';

export function restoreBroker(broker: Broker, journal: Journal, recovered: Recovered, loader: BodyLoader): void {
  for (const entry of recovered.config) broker.apply(entry, { adopt: false });
  for (const name of journal.recoveredQueues()) {
    // Messages of a queue the journal does not declare (never durable here): dropped, as replay always did.
    const queue = broker.queues.get(name);
    if (!queue) continue;
    journal.forEachRecoveredRun(name, (run) => queue.enqueuePagedRun(run, loader));
  }
  // Duplicate-detection windows: the checkpoint's keys, then the ones read after it, in LSN order.
  const now = broker.now();
  for (const [name, w] of recovered.dedupWindows) {
    const window = broker.queues.get(name)?.dedup;
    if (!window) continue;
    window.addRows(w.checkpointRows, now);
    window.addRows(w.rows, now);
  }
  // The LSN reservation covers the message ids handed out too (journal.ts): ids of
  // messages the journal no longer holds must not be given to new ones.
  broker.noteMessageIds(Math.max(recovered.maxMessageId, recovered.lastLsn));
  // Any of them may have been delivered before the restart and not settled (a kill -9, or
  // a stop: raised delivery counts are not journaled): each counts one more delivery.
  broker.markHeldInDoubt();
}

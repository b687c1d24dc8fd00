// A snapshot of the replicated state, for a backup that cannot catch up from the
// retained log: declares (and which auto-delete queues had a consumer), bindings, then every message of every `all` queue
// (acquired ones included: they are not dequeued yet). It is produced lazily, a
// batch at a time as credit allows, so a primary holding millions of messages
// answers at once and never copies its queues. The records are numbered 1..N
// (N below a bound fixed at the start); the backup writes them into a fresh
// journal and then jumps to the snapshot's LSN P, where the live stream resumes.
//
// Laziness is safe because the live stream replays every change after P and
// applying is idempotent: a message enqueued after P is skipped here (its id is
// new) and arrives live; one dequeued after P is either not seen here or removed
// by the live dequeue; a queue re-created after P is replaced by the live declare.
import { bindingDurable, drRoleChange, messageDurable, type Broker } from '../broker/broker.js';
import type { Change } from '../broker/changes.js';
import { copyMessage } from '../broker/paged-message.js';

/** Keys per dedup-keys record of a snapshot. */
const DEDUP_SNAPSHOT_ROWS = 65_536;

/**
 * One record of a snapshot. `durable` as the primary's journal has it, so a backup
 * journals what the primary does (a non-durable message marked durable would come
 * back after a restart of the backup although it was consumed: its dequeue is not
 * durable, so never journaled).
 */
export interface SnapshotRecord {
  change: Change;
  durable: boolean;
}

/** The snapshot as a generator of changes, plus the most records it can yield. */
export interface SnapshotSource {
  records: Iterator<SnapshotRecord>;
  /** Upper bound on the number of records. */
  bound: number;
}

export function snapshotOf(broker: Broker): SnapshotSource {
  const levelOf = (s: { replicate: 'none' | 'configuration' | 'all' | undefined }) => broker.replicationOf(s);
  // Messages with ids from here on were enqueued after the snapshot point: they come live.
  const firstNewId = broker.peekNextMessageId();
  const exchanges = [...broker.exchanges.values()].filter((ex) => !ex.builtIn && levelOf(ex.settings) !== 'none');
  const queues = [...broker.queues.values()].filter((q) => levelOf(q.settings) !== 'none');
  const config: SnapshotRecord[] = [
    ...exchanges.map((ex): SnapshotRecord => ({ change: { kind: 'exchange-declare', name: ex.name, type: ex.type, settings: ex.settings }, durable: ex.settings.durable })),
    ...queues.map((q): SnapshotRecord => ({ change: { kind: 'queue-declare', name: q.name, settings: q.settings }, durable: q.settings.durable })),
    // An auto-delete queue that has had a consumer: a backup promoted later deletes it once it has none, and keeps the others.
    ...queues.filter((q) => q.consumed).map((q): SnapshotRecord => ({ change: { kind: 'queue-consumed', name: q.name }, durable: q.settings.durable })),
  ];
  for (const ex of broker.exchanges.values()) {
    if (!ex.builtIn && levelOf(ex.settings) === 'none') continue;
    for (const b of ex.bindings) {
      const q = broker.queues.get(b.queue);
      if (q && levelOf(q.settings) !== 'none') config.push({ change: { kind: 'bind', exchange: ex.name, queue: b.queue, key: b.key }, durable: bindingDurable(ex, q) });
    }
  }
  // DR source: a copy follows this cluster, so the backup keeps the DR window too.
  if (broker.drFollowedSince > 0) config.push({ change: { kind: 'dr-followed', since: broker.drFollowedSince }, durable: true });
  // DR secondary state (src/dr): each queue's configuration and applied source position.
  for (const [queue, c] of broker.drQueues) config.push({ change: drRoleChange(queue, c), durable: true });
  for (const [queue, p] of broker.drPositions) config.push({ change: { kind: 'dr-transaction', queues: [queue], lsn: p.lsn, time: p.time, changes: [] }, durable: true });
  const full = queues.filter((q) => levelOf(q.settings) === 'all');
  // Windows copied now, not lazily: a key must be in the backup's window exactly
  // when its enqueue is at or before the snapshot point (the live stream brings the rest).
  // In pieces, so no stream message grows with the window (2 MiB each).
  // Keys of non-durable messages go in records that are not durable, so the backup
  // neither journals nor checkpoints them: they must not outlive a restart of the whole
  // cluster (their messages do not), or a resend of one would be taken for a duplicate.
  for (const q of full) {
    if (!q.dedup) continue;
    for (const run of q.dedup.runs(DEDUP_SNAPSHOT_ROWS)) config.push({ change: { kind: 'dedup-keys', queue: q.name, rows: run.rows }, durable: run.durable && q.settings.durable });
  }
  const messages = full.reduce((n, q) => n + q.depth, 0);
  function* records(): Generator<SnapshotRecord> {
    yield* config;
    for (const q of full) {
      // A queue deleted (or replaced) since the snapshot point: the live stream says so.
      if (broker.queues.get(q.name) !== q) continue;
      for (const entry of q.liveEntries()) {
        if (entry.msg.id >= firstNewId) continue;
        yield { change: { kind: 'enqueue', queue: q.name, message: copyMessage(entry.msg, entry.deliveryCount) }, durable: messageDurable(entry.msg, q) };
      }
    }
  }
  return { records: records(), bound: config.length + messages };
}

// A snapshot of the replicated state, for a backup that cannot catch up from the
// retained log: declares, bindings, then every message of every `all` queue in
// id order (acquired ones included: they are not dequeued yet). The records are
// numbered 1..N; the backup writes them into a fresh journal and then jumps to
// the snapshot's LSN.
import type { Broker } from '../broker/broker.js';
import type { LoggedChange } from '../broker/changes.js';

export function buildSnapshot(broker: Broker): LoggedChange[] {
  const out: LoggedChange[] = [];
  let n = 0;
  const push = (change: LoggedChange['change']) => out.push({ lsn: ++n, change, durable: true });
  const levelOf = (s: { replicate: 'none' | 'configuration' | 'all' | undefined }) => broker.replicationOf(s);
  for (const ex of broker.exchanges.values()) {
    if (ex.builtIn || levelOf(ex.settings) === 'none') continue;
    push({ kind: 'exchange-declare', name: ex.name, type: ex.type, settings: ex.settings });
  }
  for (const q of broker.queues.values()) {
    if (levelOf(q.settings) === 'none') continue;
    push({ kind: 'queue-declare', name: q.name, settings: q.settings });
  }
  for (const ex of broker.exchanges.values()) {
    if (!ex.builtIn && levelOf(ex.settings) === 'none') continue;
    for (const b of ex.bindings) {
      const q = broker.queues.get(b.queue);
      if (q && levelOf(q.settings) !== 'none') push({ kind: 'bind', exchange: ex.name, queue: b.queue, key: b.key });
    }
  }
  for (const q of broker.queues.values()) {
    if (levelOf(q.settings) !== 'all') continue;
    for (const entry of q.entries()) {
      push({ kind: 'enqueue', queue: q.name, message: { ...entry.msg, deliveryCount: entry.deliveryCount } });
    }
  }
  // DR secondary state (src/dr): each queue's configuration and applied source position.
  for (const [queue, c] of broker.drQueues) push({ kind: 'dr-queue', queue, source: c.source, mode: c.mode, state: c.state });
  for (const [queue, p] of broker.drPositions) push({ kind: 'dr-transaction', queues: [queue], lsn: p.lsn, time: p.time, changes: [] });
  return out;
}

// Which changes a backup gets, by replication level (qpid.replicate):
// none = nothing; configuration = the object (declare, delete, bindings);
// all = the object and its messages. A binding travels when both its exchange
// and its queue are replicated. Levels are learned from the log itself, so a
// delete is filtered by the level its object had.
import type { Change, LoggedChange, ReplicationLevel } from '../broker/changes.js';

export class ReplicationFilter {
  private readonly queues = new Map<string, ReplicationLevel>();
  private readonly exchanges = new Map<string, ReplicationLevel>();

  constructor(private readonly defaultLevel: ReplicationLevel) {
    for (const name of ['amq.direct', 'amq.topic', 'amq.fanout', 'amq.match']) this.exchanges.set(name, 'all');
  }

  /** Forget learned levels (before rebuilding from a snapshot of the state). */
  reset(): void {
    this.queues.clear();
    for (const name of [...this.exchanges.keys()]) if (!name.startsWith('amq.')) this.exchanges.delete(name);
  }

  queueLevel(name: string): ReplicationLevel {
    return this.queues.get(name) ?? 'none';
  }

  /** Learn from a change and return what of it a backup should get (undefined = nothing). */
  pass(entry: LoggedChange): LoggedChange | undefined {
    const change = this.passChange(entry.change);
    if (!change) return undefined;
    return change === entry.change ? entry : { lsn: entry.lsn, change, durable: entry.durable };
  }

  private passChange(change: Change): Change | undefined {
    switch (change.kind) {
      case 'queue-declare': {
        const level = change.settings.replicate ?? this.defaultLevel;
        this.queues.set(change.name, level);
        return level === 'none' ? undefined : change;
      }
      case 'queue-delete': {
        const level = this.queueLevel(change.name);
        this.queues.delete(change.name);
        return level === 'none' ? undefined : change;
      }
      case 'exchange-declare': {
        const level = change.settings.replicate ?? this.defaultLevel;
        this.exchanges.set(change.name, level);
        return level === 'none' ? undefined : change;
      }
      case 'exchange-delete': {
        const level = this.exchanges.get(change.name) ?? 'none';
        this.exchanges.delete(change.name);
        return level === 'none' ? undefined : change;
      }
      case 'queue-dedup':
      case 'queue-consumed':
        return this.queueLevel(change.name) !== 'none' ? change : undefined;
      case 'bind':
      case 'unbind':
        return (this.exchanges.get(change.exchange) ?? 'none') !== 'none' && this.queueLevel(change.queue) !== 'none' ? change : undefined;
      case 'enqueue':
      case 'dequeue':
      case 'dedup-keys':
      case 'dedup-forget':
        return this.queueLevel(change.queue) === 'all' ? change : undefined;
      case 'transaction': {
        const changes = change.changes.filter((c) => this.queueLevel(c.queue) === 'all');
        if (changes.length === 0) return undefined;
        return changes.length === change.changes.length ? change : { kind: 'transaction', changes };
      }
      case 'epoch':
      case 'dr-followed':
        return change;
      // DR secondary state: positions and queue states always travel (a failover
      // must resume the bridge where it was); messages only to `all` queues.
      case 'dr-queue':
      case 'dr-role':
        return change;
      case 'dr-transaction': {
        const changes = change.changes.filter((c) => this.queueLevel(c.queue) === 'all');
        return changes.length === change.changes.length ? change : { ...change, changes };
      }
    }
  }
}

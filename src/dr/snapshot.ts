// A DR source's copy of queues for a bridge that cannot follow the log from
// where it is (new queue, behind the retained log, ahead of this source). It is
// read from the live queues a batch at a time as the bridge's credit allows, so
// a source holding millions of messages never copies a queue: memory is one
// batch, and bodies paged out to the journal are read back by the pager in
// read-ahead runs (bounded counts and bytes), never all at once.
//
// The copy is taken as of source LSN P (where the log stream resumes), but read
// later, so what happens after P is sorted out here and by the log:
// - a message enqueued after P is skipped and comes with the log, so a copy never
//   shows part of a transaction committed after P: its id is new (the broker
//   gives ids in order, a transaction's at commit), or, for a change that keeps
//   an id given elsewhere, noteChange saw its enqueue;
// - a message dequeued after P that the copy has not reached is not copied: a
//   mirror would remove it anyway with the log's dequeue; an enqueue-only copy
//   misses it (docs/dr.md: like messages consumed while a secondary is behind);
// - a queue deleted or re-created after P is not read further: the log says so.
import type { Broker } from '../broker/broker.js';
import type { Change, LoggedChange } from '../broker/changes.js';
import { bodySize, copyMessage } from '../broker/paged-message.js';
import type { Queue, QueueEntry } from '../broker/queue.js';

interface Reading {
  queue: Queue;
  entries: Iterator<QueueEntry>;
}

export class DrSnapshotReader {
  /** Ids from here on were given out after P: such messages come with the log. */
  private readonly firstNewId: number;
  /** Messages with older ids whose enqueue is after P. */
  private readonly enqueuedAfter = new Set<number>();
  private readonly readings: Reading[] = [];
  /** Messages copied so far. */
  copied = 0;

  constructor(
    private readonly broker: Broker,
    readonly queues: string[],
    /** The source LSN the copy stands for. */
    readonly lsn: number,
  ) {
    this.firstNewId = broker.peekNextMessageId();
    for (const name of queues) {
      const queue = broker.queues.get(name);
      if (queue) this.readings.push({ queue, entries: queue.liveEntries() });
    }
  }

  /** Messages the queues held at P (an upper bound on what the copy brings). */
  get bound(): number {
    return this.readings.reduce((n, r) => n + r.queue.depth, 0);
  }

  get done(): boolean {
    return this.readings.length === 0;
  }

  /** The source logged `change` after P: an enqueue of an older id is not part of the copy. */
  noteChange(change: Change): void {
    if (change.kind === 'enqueue') this.noteEnqueue(change.message.id);
    else if (change.kind === 'transaction') for (const op of change.changes) if (op.kind === 'enqueue') this.noteEnqueue(op.message.id);
  }

  /** The next batch of enqueue records (lsn 0), or [] once every queue is read. */
  next(maxRecords: number, maxBytes: number): LoggedChange[] {
    const out: LoggedChange[] = [];
    let bytes = 0;
    while (this.readings.length > 0 && out.length < maxRecords && bytes < maxBytes) {
      const r = this.readings[0]!;
      // Replaced or deleted after P: the log carries what became of it.
      const step = this.broker.queues.get(r.queue.name) === r.queue ? r.entries.next() : { done: true as const, value: undefined };
      if (step.done) {
        this.readings.shift();
        continue;
      }
      const entry = step.value;
      const id = entry.msg.id;
      if (id >= this.firstNewId || this.enqueuedAfter.has(id)) continue;
      // Reading `bytes` of a paged message brings it back, with a read-ahead run of its neighbours.
      out.push({ lsn: 0, durable: true, change: { kind: 'enqueue', queue: r.queue.name, message: copyMessage(entry.msg, entry.deliveryCount) } });
      bytes += 64 + bodySize(entry.msg);
      this.copied++;
    }
    return out;
  }

  private noteEnqueue(id: number): void {
    if (id < this.firstNewId) this.enqueuedAfter.add(id);
  }
}

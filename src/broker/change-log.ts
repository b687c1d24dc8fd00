// One counter per broker hands out log sequence numbers; every change is passed,
// in LSN order, to the sinks that read the log (journal, replication source).
import type { Change, ChangeSink, LoggedChange } from './changes.js';

type MessageChange = Extract<Change, { kind: 'enqueue' | 'dequeue' }>;

export class ChangeLog {
  private readonly sinks: ChangeSink[] = [];
  private last = 0;
  /** Enqueues and dequeues held for one record (asOneChange); undefined: none held. */
  private held: Array<{ change: MessageChange; durable: boolean }> | undefined;

  /** LSN of the last change recorded or applied. */
  get lsn(): number {
    return this.last;
  }

  /** Continue after a recovered position (never backwards). */
  resumeAfter(lsn: number): void {
    if (lsn > this.last) this.last = lsn;
  }

  /** Start over at `lsn` (a backup replacing its state with a primary's snapshot). */
  rewind(lsn: number): void {
    this.last = lsn;
  }

  /** Add a reader; `first` puts it before the others (the journal, which others may ask about durability). */
  attach(sink: ChangeSink, options: { first?: boolean } = {}): void {
    if (options.first) this.sinks.unshift(sink);
    else this.sinks.push(sink);
  }

  detach(sink: ChangeSink): void {
    const i = this.sinks.indexOf(sink);
    if (i >= 0) this.sinks.splice(i, 1);
  }

  /** A change made here: give it the next LSN. */
  record(change: Change, durable: boolean): LoggedChange {
    if (this.held) {
      // Held for asOneChange: the LSN it is given is the one its record will take.
      if (change.kind === 'enqueue' || change.kind === 'dequeue') {
        this.held.push({ change, durable });
        return { lsn: this.last + 1, change, durable };
      }
      // Any other kind cannot be part of a transaction record: what is held goes first, in order.
      this.recordAsOne(this.held.splice(0));
    }
    return this.append(change, durable);
  }

  /**
   * Run `fn`; the enqueues and dequeues it records go out as one record (a transaction,
   * or the change itself when it is one), so no reader of the log has some of them
   * without the others: a message sent on as a dead letter and dequeued is, after a
   * crash or a failover at any instant, in one of its two places, never in both. Inside
   * another asOneChange, part of that one.
   */
  asOneChange(fn: () => void): void {
    if (this.held) return fn();
    this.held = [];
    try {
      fn();
    } finally {
      // What `fn` changed before it threw is recorded too: the log says what the model did.
      const held = this.held;
      this.held = undefined;
      this.recordAsOne(held);
    }
  }

  private recordAsOne(held: Array<{ change: MessageChange; durable: boolean }>): void {
    if (held.length === 1) this.append(held[0]!.change, held[0]!.durable);
    else if (held.length > 1) this.append({ kind: 'transaction', changes: held.map((h) => h.change) }, held.some((h) => h.durable));
  }

  private append(change: Change, durable: boolean): LoggedChange {
    const entry: LoggedChange = { lsn: ++this.last, change, durable };
    for (const sink of this.sinks) sink.append(entry);
    return entry;
  }

  /** A change made elsewhere (a primary's, replicated here) keeps its LSN. */
  adopt(entry: LoggedChange): void {
    if (entry.lsn <= this.last) {
      throw new Error(`change log out of order: LSN ${entry.lsn} after ${this.last}`);
    }
    this.last = entry.lsn;
    for (const sink of this.sinks) sink.append(entry);
  }
}

// One counter per broker hands out log sequence numbers; every change is passed,
// in LSN order, to the sinks that read the log (journal, replication source).
import type { Change, ChangeSink, LoggedChange } from './changes.js';

export class ChangeLog {
  private readonly sinks: ChangeSink[] = [];
  private last = 0;

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

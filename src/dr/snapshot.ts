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
// - a message dequeued after P that the copy has not reached: a mirror's copy
//   leaves it out (the log's dequeue would remove it anyway); an enqueue-only
//   copy must still show it, since its secondary sees every enqueue. So while
//   the copy runs the reader watches removals (Broker.removalWatchers) and keeps
//   each such message as it leaves: its journal record, kept readable (the
//   journal's compaction leaves its segment until the copy has read it), or, if
//   the journal does not hold it (non-durable, not yet synced), the message in
//   memory. Kept messages are merged back in id order, so the copy is still in
//   source order. What is kept is only what consumers overtook the reading by,
//   and only its journal positions for durable messages;
// - a queue deleted or re-created after P is not read further: the log says so
//   (an enqueue-only copy still gets what it kept before the delete).
//
// A queue's duplicate-detection window goes first (when the bridge takes it): its
// rows as of P (keys taken after P come with the log's enqueues), read from the live
// window a record at a time like the messages, so a stream never holds a whole
// window of a million keys. A key evicted before the reading reaches it is left out:
// the keys after P that evicted it reach the copy's window too.
import type { Broker, RemovalWatcher } from '../broker/broker.js';
import type { Change, LoggedChange, MessageRecord } from '../broker/changes.js';
import { bodySize, copyMessage } from '../broker/paged-message.js';
import type { Queue, QueueEntry } from '../broker/queue.js';
import { DEDUP_ROW_BYTES, rowsNotAfter, type DedupWindow } from '../broker/dedup-window.js';
import { DR_DEDUP_ROWS } from './protocol.js';
import { IdTable } from '../util/id-table.js';

/** Where a journal holds a message record (src/store/live-index.ts Location). */
export interface RecordLocation {
  seg: number;
  offset: number;
  size: number;
}

/** What the reader needs of the journal to keep a dequeued message readable (src/store/journal.ts). */
export interface KeepingJournal {
  keepMessage(queue: string, id: number): RecordLocation | undefined;
  readKept(refs: ReadonlyArray<{ queue: string; id: number }>, locs: readonly RecordLocation[]): MessageRecord[];
  releaseKept(seg: number): void;
}

// Columns of a kept message without an object: where its journal record is.
const SEG = 0;
const OFFSET = 1;
const SIZE = 2;

interface Reading {
  queue: Queue;
  entries: Iterator<QueueEntry>;
  /** Messages that leave the queue before the reading reaches them are kept (enqueue-only). */
  keeps: boolean;
  /** The largest id the reading has taken from the live queue. */
  last: number;
  /** The live queue is read to its end (or gone); what is kept may remain. */
  liveDone: boolean;
  /** Taken from the live queue but not yet copied: the entry within one next(), then a copy of its message. */
  peeked: QueueEntry | undefined;
  carried: MessageRecord | undefined;
  /**
   * Messages of the copy no longer on the queue by id: a row with the journal
   * location of its record, or one holding the message itself.
   */
  kept: IdTable<MessageRecord>;
  /** The window's rows still to send, numbered as DedupWindow.rowsFrom takes them (undefined: none, or all sent). */
  keys: { window: DedupWindow; next: number; end: number } | undefined;
}

export class DrSnapshotReader implements RemovalWatcher {
  /** Ids from here on were given out after P: such messages come with the log. */
  private readonly firstNewId: number;
  /** Messages with older ids whose enqueue is after P. */
  private readonly enqueuedAfter = new Set<number>();
  private readonly readings: Reading[] = [];
  private readonly journal: KeepingJournal | undefined;
  private failure: Error | undefined;
  private closed = false;
  /** Messages copied so far. */
  copied = 0;
  /** Messages kept because they left their queue before the reading reached them. */
  keptOnLeaving = 0;
  /** Keys of the queues' windows copied so far. */
  keysCopied = 0;

  constructor(
    private readonly broker: Broker,
    readonly queues: string[],
    /** The source LSN the copy stands for. */
    readonly lsn: number,
    /** `dedupKeys`: the bridge takes the queues' windows (DrProps.dedupKeys). */
    options: { keepDequeued?: ReadonlySet<string>; journal?: KeepingJournal; dedupKeys?: boolean } = {},
  ) {
    this.journal = options.journal;
    this.firstNewId = broker.peekNextMessageId();
    for (const name of queues) {
      const queue = broker.queues.get(name);
      if (!queue) continue;
      const keeps = options.keepDequeued?.has(name) ?? false;
      const window = options.dedupKeys ? queue.dedup : undefined;
      const keys = window && window.size > 0 ? { window, next: 0, end: window.endSeq } : undefined;
      this.readings.push({ queue, entries: queue.liveEntries(), keeps, last: 0, liveDone: false, peeked: undefined, carried: undefined, kept: new IdTable<MessageRecord>(['u32', 'u32', 'u32']), keys });
    }
    if (this.readings.some((r) => r.keeps)) broker.removalWatchers.add(this);
  }

  /** Messages the queues held at P (an upper bound on what the copy brings). */
  get bound(): number {
    return this.readings.reduce((n, r) => n + r.queue.depth + r.kept.length + (r.carried ? 1 : 0), 0);
  }

  /** Messages kept now for the copy after they left their queue. */
  get keptCount(): number {
    return this.readings.reduce((n, r) => n + r.kept.length, 0);
  }

  get done(): boolean {
    return this.readings.length === 0;
  }

  /** The source logged `change` after P: an enqueue of an older id is not part of the copy. */
  noteChange(change: Change): void {
    if (change.kind === 'enqueue') this.noteEnqueue(change.message.id);
    else if (change.kind === 'transaction') for (const op of change.changes) if (op.kind === 'enqueue') this.noteEnqueue(op.message.id);
  }

  /** RemovalWatcher: a message leaves a queue; keep it if an enqueue-only copy has not reached it yet. */
  leaving(queue: Queue, entry: QueueEntry): void {
    const r = this.readings.find((x) => x.queue === queue);
    if (!r || !r.keeps || r.liveDone) return;
    const id = entry.msg.id;
    if (id <= r.last || !this.partOfCopy(id) || r.kept.find(id) >= 0) return;
    try {
      const loc = this.journal?.keepMessage(queue.name, id);
      const pos = r.kept.insert(id);
      if (loc) {
        r.kept.set(pos, SEG, loc.seg);
        r.kept.set(pos, OFFSET, loc.offset);
        r.kept.set(pos, SIZE, loc.size);
      } else {
        // Not in the synced journal, so its body is in memory (non-durable, or not synced yet).
        r.kept.setObj(pos, copyMessage(entry.msg, entry.deliveryCount));
      }
      this.keptOnLeaving++;
    } catch (err) {
      // Never fail the broker's removal: the stream fails instead, and the bridge's reconnect redoes the copy.
      this.failure ??= err as Error;
    }
  }

  /** The next batch of enqueue records (lsn 0), in id order per queue, or [] once every queue is read. */
  next(maxRecords: number, maxBytes: number): LoggedChange[] {
    if (this.failure) throw this.failure;
    const out: LoggedChange[] = [];
    /** Records of `out` to read from the journal, all in one read after the loop. */
    const fromJournal: Array<{ at: number; queue: string; id: number; loc: RecordLocation }> = [];
    let bytes = 0;
    const push = (queue: string, message: MessageRecord) => {
      out.push({ lsn: 0, durable: true, change: { kind: 'enqueue', queue, message } });
      bytes += 64 + bodySize(message);
      this.copied++;
    };
    // Bounded: every pass copies a message, moves the reading on, or finishes a queue.
    while (this.readings.length > 0 && out.length < maxRecords && bytes < maxBytes) {
      const r = this.readings[0]!;
      // Replaced or deleted after P: the log carries what became of it.
      if (!r.liveDone && this.broker.queues.get(r.queue.name) !== r.queue) r.liveDone = true;
      if (r.keys) {
        const rows = this.nextKeys(r);
        if (rows && rows.length > 0) {
          out.push({ lsn: 0, durable: true, change: { kind: 'dedup-keys', queue: r.queue.name, rows } });
          bytes += 64 + rows.length;
          this.keysCopied += rows.length / DEDUP_ROW_BYTES;
        }
        continue;
      }
      if (!r.peeked && !r.carried && !r.liveDone) {
        const step = r.entries.next();
        if (step.done) r.liveDone = true;
        else {
          r.last = step.value.msg.id;
          if (!this.partOfCopy(r.last)) continue;
          r.peeked = step.value;
        }
      }
      const pos = r.kept.first();
      const keptId = pos >= 0 ? r.kept.id(pos) : Infinity;
      if (r.carried && r.carried.id < keptId) {
        push(r.queue.name, r.carried);
        r.carried = undefined;
        continue;
      }
      if (r.peeked && r.peeked.msg.id < keptId) {
        // Reading `bytes` of a paged message brings it back, with a read-ahead run of its neighbours.
        push(r.queue.name, copyMessage(r.peeked.msg, r.peeked.deliveryCount));
        r.peeked = undefined;
        continue;
      }
      if (pos < 0) {
        if (!r.peeked && !r.carried && r.liveDone) this.readings.shift();
        continue;
      }
      const held = r.kept.obj(pos);
      if (held) push(r.queue.name, held);
      else {
        const loc = { seg: r.kept.get(pos, SEG), offset: r.kept.get(pos, OFFSET), size: r.kept.get(pos, SIZE) };
        fromJournal.push({ at: out.length, queue: r.queue.name, id: keptId, loc });
        out.push(undefined as unknown as LoggedChange); // read below
        bytes += loc.size;
        this.copied++;
      }
      r.kept.removeAt(pos);
    }
    const r = this.readings[0];
    if (r?.peeked) {
      // Taken from the live queue past the batch's end: carried to the next one as it is now (no watcher sees it go).
      r.carried = copyMessage(r.peeked.msg, r.peeked.deliveryCount);
      r.peeked = undefined;
    }
    if (fromJournal.length > 0) this.readFromJournal(out, fromJournal);
    if (this.readings.length === 0) this.close();
    return out;
  }

  /**
   * The next rows of the reading's window (undefined once they are all read). A window
   * replaced since P (a queue-dedup change) or a queue gone is not read further: the
   * copy's window keeps what came, as it would have kept them had they come first.
   */
  private nextKeys(r: Reading): Buffer | undefined {
    const k = r.keys!;
    if (r.liveDone || r.queue.dedup !== k.window || k.next >= k.end) {
      r.keys = undefined;
      return undefined;
    }
    const piece = k.window.rowsFrom(k.next, k.end, DR_DEDUP_ROWS);
    k.next = piece.next;
    // rowsFrom's buffer is the copy's own. Times ahead of this clock (it stepped back) are sent as now.
    return rowsNotAfter(piece.rows, this.broker.now());
  }

  /** Stop watching and let go of every kept journal record (the copy is over, or its stream is gone). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.broker.removalWatchers.delete(this);
    for (const r of this.readings) this.releaseAll(r);
    this.readings.length = 0;
  }

  private readFromJournal(out: LoggedChange[], rows: Array<{ at: number; queue: string; id: number; loc: RecordLocation }>): void {
    const journal = this.journal!;
    try {
      const records = journal.readKept(rows, rows.map((x) => x.loc));
      rows.forEach((x, i) => {
        out[x.at] = { lsn: 0, durable: true, change: { kind: 'enqueue', queue: x.queue, message: records[i]! } };
      });
    } finally {
      for (const x of rows) journal.releaseKept(x.loc.seg);
    }
  }

  private releaseAll(r: Reading): void {
    if (this.journal) for (const pos of r.kept.positions()) if (!r.kept.obj(pos)) this.journal.releaseKept(r.kept.get(pos, SEG));
    r.kept.clear();
  }

  /** Was a message with this id on its queue at P (given that it is, or was until now)? */
  private partOfCopy(id: number): boolean {
    return id < this.firstNewId && !this.enqueuedAfter.has(id);
  }

  private noteEnqueue(id: number): void {
    if (id < this.firstNewId) this.enqueuedAfter.add(id);
  }
}

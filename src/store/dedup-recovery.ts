// Rebuilding the queues' duplicate-detection windows at start, without
// replaying the journal from its beginning: a checkpoint holds each window's
// durable keys (DedupWindow.rows) as of its position, and the records after it
// bring the rest: enqueues that carried a key (live or consumed since) and the
// windows an HA snapshot wrote ('dedup-keys').
//
// Order: records come in file order, which is LSN order except for compaction
// copies (an older LSN in a newer segment; a copy at or below the newest change a
// checkpoint holds, also the first record read after it; reservations, whose LSN
// slots are no change's, are not counted). A window's state depends on the
// order keys came in (the oldest leave first), so the keys read here are put in
// LSN order before they are handed over, and a copy older than what the
// checkpoint holds is left out (it is in the checkpoint, or was evicted before it).
// A record read twice (a copy and its original) gives its keys once.
// A queue declared or deleted (not a copy) forgets the keys before it, as the
// broker's queue does. A 'dedup-forget' takes its keys out of what came before it
// (the checkpoint's rows included), not out of a later copy of the key.
//
// Compaction may delete a segment only once a checkpoint covers it, while it
// holds keys (journal.ts, keyedSince): a consumed message's key outlives its enqueue.
import type { RecordBody } from './record-codec.js';
import { DEDUP_DIGEST_BYTES, DEDUP_ROW_BYTES } from '../broker/dedup-window.js';
import { writeDedupDigest, type DedupDigest } from '../broker/dedup-key.js';

/** What a restart hands each queue's window: the checkpoint's rows, then keys in LSN order. */
export interface RecoveredWindow {
  checkpointRows: Buffer;
  /** Rows (DEDUP_ROW_BYTES each) after the checkpoint's, ascending LSN. */
  rows: Buffer;
}

/**
 * One queue's keys as read, in file order: rows packed into one growing buffer and
 * their LSNs in a growing Float64Array (a restart may read a million of them: no
 * object per key).
 */
class Collected {
  lsns = new Float64Array(1024);
  /** Which record read brought each row (DedupRecovery.reads). */
  reads = new Float64Array(1024);
  rows = Buffer.allocUnsafe(1024 * DEDUP_ROW_BYTES);
  count = 0;
  /** Whether the LSNs came ascending (no compaction copy among them): then no sort is needed. */
  ascending = true;
  /** An LSN came again from another record read (a copy read with its original): rows to drop. */
  reread = false;
  /** Keys taken back out ('dedup-forget'), by digest (hex): the newest LSN each was taken out at. */
  forgotten: Map<string, number> | undefined;

  constructor(
    readonly checkpointRows: Buffer,
    /** Highest LSN among checkpointRows: a replayed key at or below it is a copy. */
    readonly checkpointLsn: number,
  ) {}

  /** Room for one more row; returns where it goes. */
  next(lsn: number, read: number): number {
    if (this.count === this.lsns.length) {
      const lsns = new Float64Array(this.lsns.length * 2);
      lsns.set(this.lsns);
      this.lsns = lsns;
      const reads = new Float64Array(this.reads.length * 2);
      reads.set(this.reads);
      this.reads = reads;
      const rows = Buffer.allocUnsafe(this.rows.length * 2);
      this.rows.copy(rows, 0, 0, this.count * DEDUP_ROW_BYTES);
      this.rows = rows;
    }
    if (this.count > 0 && lsn < this.lsns[this.count - 1]!) this.ascending = false;
    else if (this.count > 0 && lsn === this.lsns[this.count - 1]! && read !== this.reads[this.count - 1]!) this.reread = true;
    this.lsns[this.count] = lsn;
    this.reads[this.count] = read;
    return this.count++ * DEDUP_ROW_BYTES;
  }

  /** `rows` without those a later 'dedup-forget' took out (a key taken in again after it stays). */
  remembered(rows: Buffer): Buffer {
    const forgotten = this.forgotten;
    if (!forgotten) return rows;
    const out = Buffer.allocUnsafe(rows.length);
    let n = 0;
    for (let at = 0; at + DEDUP_ROW_BYTES <= rows.length; at += DEDUP_ROW_BYTES) {
      const outAt = forgotten.get(rows.toString('hex', at, at + DEDUP_DIGEST_BYTES));
      if (outAt !== undefined && rows.readDoubleLE(at + DEDUP_DIGEST_BYTES + 8) < outAt) continue;
      rows.copy(out, n, at, at + DEDUP_ROW_BYTES);
      n += DEDUP_ROW_BYTES;
    }
    return out.subarray(0, n);
  }

  /**
   * The rows after the checkpoint's, ascending LSN (equal LSNs in file order), each
   * once: a record read twice (a compaction copy and the original a crash before
   * the unlink left) brought its keys twice, and a key held twice takes two of the
   * window's places, so an older key was evicted early. Of an LSN, only the rows
   * of its first read are kept (the original: a copy holds only part of it).
   */
  sorted(): Buffer {
    const n = this.count;
    const lsns = this.lsns;
    if (this.ascending && !this.reread) {
      let first = 0;
      while (first < n && lsns[first]! <= this.checkpointLsn) first++;
      return Buffer.from(this.rows.subarray(first * DEDUP_ROW_BYTES, n * DEDUP_ROW_BYTES));
    }
    let order: number[] = [];
    for (let i = 0; i < n; i++) if (lsns[i]! > this.checkpointLsn) order.push(i);
    if (!this.ascending) order.sort((a, b) => lsns[a]! - lsns[b]! || a - b);
    let lsn = -1;
    let read = -1;
    order = order.filter((i) => {
      if (lsns[i] !== lsn) {
        lsn = lsns[i]!;
        read = this.reads[i]!;
      }
      return this.reads[i] === read;
    });
    const out = Buffer.allocUnsafe(order.length * DEDUP_ROW_BYTES);
    for (let k = 0; k < order.length; k++) this.rows.copy(out, k * DEDUP_ROW_BYTES, order[k]! * DEDUP_ROW_BYTES, (order[k]! + 1) * DEDUP_ROW_BYTES);
    return out;
  }
}

export class DedupRecovery {
  private readonly queues = new Map<string, Collected>();
  /** Highest LSN of a change read so far: a record below it is a compaction copy. */
  private high: number;
  /** Records read so far: which read brought a key (a record read twice brings its keys twice). */
  private reads = 0;
  /** A record with a key was read. */
  sawKeys = false;

  /**
   * `after`: the newest change a checkpoint holds (0 without one). A record after its
   * position with an LSN up to that is a compaction copy, also the first one read:
   * compaction runs as soon as a checkpoint is written and copies its declares past
   * it, and a copy taken for a declare dropped the window the checkpoint held.
   */
  constructor(after = 0) {
    this.high = after;
  }

  /** A checkpoint's window for `queue`. */
  seed(queue: string, rows: Buffer): void {
    const lsn = rows.length > 0 ? rows.readDoubleLE(rows.length - 8) : 0;
    this.queues.set(queue, new Collected(rows, lsn));
  }

  /** One record, as recovery reads it. */
  onRecord(lsn: number, body: RecordBody): void {
    // A reservation's LSN slot is no change's: the one an open writes is the last
    // reservation's end, and an HA backup's changes after it (Journal.rewindTo) come
    // below it. Counted, they made that backup's declares and deletes look like copies.
    if (body.kind === 'lsn-reservation') return;
    const copy = lsn < this.high;
    if (!copy) this.high = lsn;
    this.reads++;
    switch (body.kind) {
      case 'queue-declare':
        if (!copy) this.queues.delete(body.name);
        break;
      case 'queue-delete':
        if (!copy) this.queues.delete(body.name);
        break;
      case 'enqueue':
        if (body.dedup) this.key(body.queue, lsn, body.dedup.key, body.dedup.at);
        break;
      case 'transaction':
      case 'dr-transaction':
        for (const c of body.changes) if (c.kind === 'enqueue' && c.dedup) this.key(c.queue, lsn, c.dedup.key, c.dedup.at);
        break;
      case 'dedup-keys': {
        this.sawKeys = true;
        // Rows of a primary's window, each with the primary's LSN for it (below this record's).
        const q = this.collected(body.queue);
        for (let at = 0; at + DEDUP_ROW_BYTES <= body.rows.length; at += DEDUP_ROW_BYTES) {
          const to = q.next(body.rows.readDoubleLE(at + DEDUP_DIGEST_BYTES + 8), this.reads);
          body.rows.copy(q.rows, to, at, at + DEDUP_ROW_BYTES);
        }
        break;
      }
      case 'dedup-forget': {
        this.sawKeys = true;
        const q = this.collected(body.queue);
        q.forgotten ??= new Map();
        for (let at = 0; at + DEDUP_DIGEST_BYTES <= body.keys.length; at += DEDUP_DIGEST_BYTES) {
          const hex = body.keys.toString('hex', at, at + DEDUP_DIGEST_BYTES);
          q.forgotten.set(hex, Math.max(lsn, q.forgotten.get(hex) ?? 0));
        }
        break;
      }
      default:
        break;
    }
  }

  /** The windows, by queue name. */
  result(): Map<string, RecoveredWindow> {
    const out = new Map<string, RecoveredWindow>();
    for (const [name, q] of this.queues) out.set(name, { checkpointRows: q.remembered(q.checkpointRows), rows: q.remembered(q.sorted()) });
    return out;
  }

  private collected(queue: string): Collected {
    let q = this.queues.get(queue);
    if (!q) this.queues.set(queue, (q = new Collected(Buffer.alloc(0), 0)));
    return q;
  }

  private key(queue: string, lsn: number, key: DedupDigest, at: number): void {
    const q = this.collected(queue);
    const to = q.next(lsn, this.reads);
    writeDedupDigest(key, q.rows, to);
    q.rows.writeDoubleLE(at, to + DEDUP_DIGEST_BYTES);
    q.rows.writeDoubleLE(lsn, to + DEDUP_DIGEST_BYTES + 8);
    this.sawKeys = true;
  }
}

// Rebuilding the queues' duplicate-detection windows at start, without
// replaying the journal from its beginning: a checkpoint holds each window's
// durable keys (DedupWindow.rows) as of its position, and the records after it
// bring the rest: enqueues that carried a key (live or consumed since) and the
// windows an HA snapshot wrote ('dedup-keys').
//
// Order: records come in file order, which is LSN order except for compaction
// copies (an older LSN in a newer segment). A window's state depends on the
// order keys came in (the oldest leave first), so the keys read here are put in
// LSN order before they are handed over, and a copy older than what the
// checkpoint holds is left out (it is in the checkpoint, or was evicted before it).
// A queue declared or deleted (not a copy) forgets the keys before it, as the
// broker's queue does.
//
// Compaction may delete a segment only once a checkpoint covers it, while it
// holds keys (journal.ts, keyedSince): a consumed message's key outlives its enqueue.
import type { RecordBody } from './record-codec.js';
import { DEDUP_DIGEST_BYTES, DEDUP_ROW_BYTES } from '../broker/dedup-window.js';

/** What a restart hands each queue's window: the checkpoint's rows, then keys in LSN order. */
export interface RecoveredWindow {
  checkpointRows: Buffer;
  /** Rows (DEDUP_ROW_BYTES each) after the checkpoint's, ascending LSN. */
  rows: Buffer;
}

interface Collected {
  checkpointRows: Buffer;
  /** Highest LSN among checkpointRows: a replayed key at or below it is a copy. */
  checkpointLsn: number;
  lsns: number[];
  rows: Buffer[];
}

export class DedupRecovery {
  private readonly queues = new Map<string, Collected>();
  /** Highest LSN read so far: a record below it is a compaction copy. */
  private high = 0;
  /** A record with a key was read. */
  sawKeys = false;

  /** A checkpoint's window for `queue`. */
  seed(queue: string, rows: Buffer): void {
    const lsn = rows.length > 0 ? rows.readDoubleLE(rows.length - 8) : 0;
    this.queues.set(queue, { checkpointRows: rows, checkpointLsn: lsn, lsns: [], rows: [] });
  }

  /** One record, as recovery reads it. */
  onRecord(lsn: number, body: RecordBody): void {
    const copy = lsn < this.high;
    if (!copy) this.high = lsn;
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
          q.lsns.push(body.rows.readDoubleLE(at + DEDUP_DIGEST_BYTES + 8));
          q.rows.push(Buffer.from(body.rows.subarray(at, at + DEDUP_ROW_BYTES)));
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
    for (const [name, q] of this.queues) {
      const order = q.lsns.map((_, i) => i).filter((i) => q.lsns[i]! > q.checkpointLsn);
      order.sort((a, b) => q.lsns[a]! - q.lsns[b]! || a - b);
      out.set(name, { checkpointRows: q.checkpointRows, rows: Buffer.concat(order.map((i) => q.rows[i]!)) });
    }
    return out;
  }

  private collected(queue: string): Collected {
    let q = this.queues.get(queue);
    if (!q) this.queues.set(queue, (q = { checkpointRows: Buffer.alloc(0), checkpointLsn: 0, lsns: [], rows: [] }));
    return q;
  }

  private key(queue: string, lsn: number, key: Buffer, at: number): void {
    if (key.length !== DEDUP_DIGEST_BYTES) return;
    const row = Buffer.allocUnsafe(DEDUP_ROW_BYTES);
    key.copy(row, 0);
    row.writeDoubleLE(at, DEDUP_DIGEST_BYTES);
    row.writeDoubleLE(lsn, DEDUP_DIGEST_BYTES + 8);
    const q = this.collected(queue);
    q.lsns.push(lsn);
    q.rows.push(row);
    this.sawKeys = true;
  }
}

// Rebuilding windows at start (src/store/dedup-recovery.ts): keys come back in LSN
// order whatever the file order, a compaction copy older than the checkpoint's keys
// is left out, and a queue declared again forgets the keys before it.
import { describe, expect, it } from 'vitest';
import type { RecordBody } from '../../../src/store/record-codec.js';
import { DedupRecovery } from '../../../src/store/dedup-recovery.js';
import { dedupDigestAt, dedupDigestBytes, type DedupDigest } from '../../../src/broker/dedup-key.js';
import { DedupWindow, DEDUP_ROW_BYTES } from '../../../src/broker/dedup-window.js';
import { queueSettings } from './helpers.js';

const key = (n: number): DedupDigest => dedupDigestAt(Buffer.alloc(16, n));
const enqueue = (queue: string, n: number): RecordBody => ({
  kind: 'enqueue',
  queue,
  message: { id: n, bytes: Buffer.alloc(0), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined },
  dedup: { key: key(n), at: 1000 + n },
});
const lsnsOf = (rows: Buffer): number[] => Array.from({ length: rows.length / DEDUP_ROW_BYTES }, (_, i) => rows.readDoubleLE(i * DEDUP_ROW_BYTES + 24));

describe('dedup recovery', () => {
  it('dedup recovery - keys in LSN order, copies below the checkpoint left out, a re-declare forgets', () => {
    const seed = new DedupWindow(10, 0);
    for (const n of [1, 2, 3]) seed.add(key(n), 1000 + n, n, true);
    const r = new DedupRecovery();
    r.seed('q', seed.rows());
    r.seed('gone', seed.rows());
    r.onRecord(5, enqueue('q', 5));
    r.onRecord(2, enqueue('q', 2)); // a compaction copy of a message the checkpoint has
    r.onRecord(6, { kind: 'transaction', changes: [enqueue('q', 6) as Extract<RecordBody, { kind: 'enqueue' }>] });
    r.onRecord(4, enqueue('q', 4)); // a copy above the checkpoint: put in order
    r.onRecord(7, { kind: 'queue-declare', name: 'gone', settings: queueSettings() });
    r.onRecord(8, enqueue('gone', 8));
    r.onRecord(3, { kind: 'queue-declare', name: 'q', settings: queueSettings() }); // a copy: not a re-declare
    const out = r.result();
    expect(lsnsOf(out.get('q')!.checkpointRows)).toEqual([1, 2, 3]);
    expect(lsnsOf(out.get('q')!.rows)).toEqual([4, 5, 6]);
    expect(out.get('gone')!.checkpointRows.length).toBe(0);
    expect(lsnsOf(out.get('gone')!.rows)).toEqual([8]);
    expect(r.sawKeys).toBe(true);
  });

  it('dedup recovery - thousands of keys in order (no compaction copy) come back whole, past the first growth of the buffers', () => {
    const seed = new DedupWindow(10, 0);
    for (const n of [1, 2, 3]) seed.add(key(n), 1000 + n, n, true);
    const r = new DedupRecovery();
    r.seed('q', seed.rows());
    for (let lsn = 2; lsn <= 3000; lsn++) r.onRecord(lsn, enqueue('q', lsn % 250));
    const rows = r.result().get('q')!.rows;
    expect(lsnsOf(rows)).toEqual(Array.from({ length: 2997 }, (_, i) => i + 4));
    // Each row still carries its own key and time.
    expect(rows.subarray(0, 16)).toEqual(dedupDigestBytes(key(4)));
    expect(rows.readDoubleLE((2999 - 4) * DEDUP_ROW_BYTES + 16)).toBe(1000 + (2999 % 250));
  });

  it('dedup recovery - a dedup-forget takes its keys out of the checkpoint and of what came before it, not out of a key taken in again after it', () => {
    const seed = new DedupWindow(10, 0);
    for (const n of [1, 2]) seed.add(key(n), 1000 + n, n, true);
    const r = new DedupRecovery();
    r.seed('q', seed.rows());
    r.onRecord(3, enqueue('q', 3));
    r.onRecord(4, enqueue('q', 4));
    r.onRecord(5, { kind: 'dedup-forget', queue: 'q', keys: Buffer.concat([dedupDigestBytes(key(1)), dedupDigestBytes(key(3)), dedupDigestBytes(key(4))]) });
    // Key 4 sent again and kept, after its first copy was refused.
    r.onRecord(6, { ...enqueue('q', 4), message: { ...(enqueue('q', 4) as Extract<RecordBody, { kind: 'enqueue' }>).message, id: 6 } } as RecordBody);
    const out = r.result().get('q')!;
    expect(lsnsOf(out.checkpointRows)).toEqual([2]);
    expect(lsnsOf(out.rows)).toEqual([6]);
    expect(out.rows.subarray(0, 16)).toEqual(dedupDigestBytes(key(4)));
    expect(r.sawKeys).toBe(true);
  });
});

// The 'queue-consumed' record (code 23): an auto-delete queue had its first consumer,
// so the broker that serves it after a restart deletes it once it has none (and keeps
// one without the record: it waits for its first). A kind of its own, written only
// then: every other record keeps its code and bytes. The journal keeps it while its
// queue lives (as the queue's newest queue-dedup), through compaction copies and
// file order, and a checkpoint carries it.
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { readCheckpoint } from '../../../src/store/checkpoint.js';
import { Journal } from '../../../src/store/journal.js';
import { couldStartRecord, decodeChange, encodeChange, recordLengthFits } from '../../../src/store/record-codec.js';
import { listSegments } from '../../../src/store/segment.js';
import { durable, journalDirOf, queueSettings, removeDir, sampleChanges, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const rec = (lsn: number, change: Change): LoggedChange => ({ lsn, change, durable: true });
const declare = (lsn: number, delay = 1000) => rec(lsn, { kind: 'queue-declare', name: 'ad', settings: queueSettings({ autoDelete: true, autoDeleteDelayMs: delay }) });
const consumed = (lsn: number) => rec(lsn, { kind: 'queue-consumed', name: 'ad' });
const del = (lsn: number) => rec(lsn, { kind: 'queue-delete', name: 'ad' });
const epoch = (lsn: number, e: number) => rec(lsn, { kind: 'epoch', epoch: e });

/** journalDirOf, removed after the test. */
async function journalOf(segments: LoggedChange[][]): Promise<string> {
  const dataDir = await journalDirOf(segments);
  dirs.push(dataDir);
  return dataDir;
}

async function recoveredConfig(dataDir: string, opts: { checkpoint?: boolean; fromCheckpoint?: (yes: boolean) => void } = {}): Promise<Change[]> {
  let loaded = false;
  const logger = { info: (_o: unknown, msg?: string) => void (loaded ||= msg?.includes('from its checkpoint') ?? false), warn() {}, error() {} };
  const { journal, recovered } = await Journal.open({ dataDir, autoCompact: false, checkpoint: opts.checkpoint ?? false, logger });
  await journal.close({ checkpoint: false });
  opts.fromCheckpoint?.(loaded);
  return recovered.config.map((c) => c.change).filter((c) => c.kind !== 'epoch');
}

describe('record codec - queue-consumed', () => {
  it('queue-consumed - is code 23: the header, then the queue name (u32 length, UTF-8); it round-trips and every truncation is incomplete', () => {
    const entry: LoggedChange = { lsn: 2 ** 40 + 7, change: { kind: 'queue-consumed', name: 'ünï' }, durable: false };
    const buf = encodeChange(entry);
    const name = Buffer.from('ünï');
    const expected = Buffer.alloc(10 + 4 + name.length);
    expected[0] = 23;
    expected.writeUInt32LE(7, 1);
    expected.writeUInt32LE(2 ** 8, 5);
    expected[9] = 0;
    expected.writeUInt32LE(name.length, 10);
    name.copy(expected, 14);
    expect(buf).toEqual(expected);
    expect(decodeChange(buf)).toEqual({ status: 'ok', entry, size: buf.length });
    expect(couldStartRecord(buf, 0)).toBe(true);
    expect(recordLengthFits(23, buf.length)).toBe(true);
    for (let n = 0; n < buf.length; n++) expect(decodeChange(Buffer.from(buf.subarray(0, n)))).toEqual({ status: 'incomplete' });
  });

  it('queue-consumed - every other record is written as before: no other kind takes code 23, and a declare of an auto-delete queue keeps its code', () => {
    for (const change of sampleChanges()) {
      const code = encodeChange({ lsn: 3, change, durable: true })[0];
      if (change.kind === 'queue-consumed') expect(code).toBe(23);
      else expect(code, change.kind).not.toBe(23);
    }
    expect(encodeChange(declare(1))[0]).toBe(13);
  });
});

describe('journal - queue-consumed', () => {
  it('queue-consumed - recovered after its declare while the queue lives; gone with its delete; a queue declared again under the name starts without it', async () => {
    expect(await recoveredConfig(await journalOf([[declare(1), consumed(2)]]))).toEqual([declare(1).change, consumed(2).change]);
    expect(await recoveredConfig(await journalOf([[declare(1), consumed(2), del(3)]]))).toEqual([]);
    expect(await recoveredConfig(await journalOf([[declare(1), consumed(2), del(3), declare(4, 5000)]]))).toEqual([declare(4, 5000).change]);
    // A declare over the queue (as an HA backup applies one) replaces it: its record dies too.
    expect(await recoveredConfig(await journalOf([[declare(1), consumed(2), declare(3, 5000)]]))).toEqual([declare(3, 5000).change]);
  });

  it('queue-consumed - file order as compaction leaves it: a copy after a newer declare is dead; one before its own declare copied forward lives', async () => {
    // Copied forward (LSN 2) while the re-declare (LSN 3) was not synced: dead.
    expect(await recoveredConfig(await journalOf([[declare(1), consumed(2)], [declare(3, 5000)], [consumed(2)]]))).toEqual([declare(3, 5000).change]);
    // The declare was copied forward from a segment compaction deleted; its record stayed behind, earlier in file order.
    expect(await recoveredConfig(await journalOf([[consumed(2), epoch(3, 1)], [declare(1)]]))).toEqual([declare(1).change, consumed(2).change]);
    // Copied forward itself, then the queue deleted: dead.
    expect(await recoveredConfig(await journalOf([[declare(1)], [consumed(2)], [del(3)]]))).toEqual([]);
  });

  it('queue-consumed - compaction copies it forward with its declare: the segment that held them goes, and a restart still finds it', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { journal } = await Journal.open({ dataDir, autoCompact: false, checkpoint: false, segmentBytes: 512, compactLiveRatio: 1 });
    let lsn = 0;
    journal.append(declare(++lsn));
    journal.append(consumed(++lsn));
    // Dead filler (only the newest epoch lives), so the first segments roll mostly dead.
    for (let i = 0; i < 40; i++) journal.append(epoch(++lsn, i + 1));
    await durable(journal, lsn);
    const before = await listSegments(path.join(dataDir, 'journal'));
    await journal.compact();
    const after = await listSegments(path.join(dataDir, 'journal'));
    expect(after).not.toContain(before[0]);
    await journal.close({ checkpoint: false });
    expect(await recoveredConfig(dataDir)).toEqual([declare(1).change, consumed(2).change]);
  });

  it('queue-consumed - a checkpoint carries it: a restart from the checkpoint alone has it, and one after the delete does not', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { journal } = await Journal.open({ dataDir, autoCompact: false });
    journal.append(declare(1));
    journal.append(consumed(2));
    await durable(journal, 2);
    expect(await journal.checkpoint()).toBeDefined();
    const cp = await readCheckpoint(path.join(dataDir, 'journal'));
    expect(cp?.state.records.map((r) => r.body)).toContainEqual(consumed(2).change);
    journal.destroy(); // a crash: the restart loads the checkpoint, nothing after it
    await journal.close();
    let loaded = false;
    expect(await recoveredConfig(dataDir, { checkpoint: true, fromCheckpoint: (yes) => (loaded = yes) })).toEqual([declare(1).change, consumed(2).change]);
    expect(loaded).toBe(true);
    // The queue deleted after the checkpoint: replayed from it, the record is dead.
    const { journal: again, recovered } = await Journal.open({ dataDir, autoCompact: false });
    const lsn = recovered.lastLsn + 1;
    again.append(del(lsn));
    await durable(again, lsn);
    expect(await again.checkpoint()).toBeDefined();
    const cp2 = await readCheckpoint(path.join(dataDir, 'journal'));
    expect(cp2?.state.records.map((r) => r.body.kind)).not.toContain('queue-consumed');
    again.destroy();
    await again.close();
    expect(await recoveredConfig(dataDir, { checkpoint: true })).toEqual([]);
  });
});

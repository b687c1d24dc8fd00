// A declare over a queue or exchange that exists replaces it (as the broker
// applies it: an HA backup or DR secondary can journal one). What the old one had
// must stay dead across a restart, whatever file order and compaction did with its
// records; found by restore-property.test.ts, pinned down here with journals
// written frame by frame (file order as compaction leaves it) and with compaction
// running while the declare is not synced yet.
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { Journal } from '../../../src/store/journal.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { encodeFrame, listSegments, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, exchangeSettings, holdableSyncIo, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const rec = (lsn: number, change: Change): LoggedChange => ({ lsn, change, durable: true });
const declareQ = (lsn: number, priorities = 1) => rec(lsn, { kind: 'queue-declare', name: 'q', settings: queueSettings({ priorities }) });
const declareE = (lsn: number, type: 'direct' | 'fanout' = 'direct') => rec(lsn, { kind: 'exchange-declare', name: 'e', type, settings: exchangeSettings() });
const bind = (lsn: number, exchange = 'amq.direct') => rec(lsn, { kind: 'bind', exchange, queue: 'q', key: 'k' });

/** A data dir whose journal is these segments, frame by frame, in this order. */
async function journalOf(segments: LoggedChange[][]): Promise<string> {
  const dataDir = await tempDir();
  dirs.push(dataDir);
  const dir = path.join(dataDir, 'journal');
  await mkdir(dir);
  for (const [i, records] of segments.entries()) await writeFile(segmentPath(dir, i + 1), Buffer.concat(records.map((r) => encodeFrame(encodeChange(r)))));
  return dataDir;
}

async function recoveredConfig(dataDir: string): Promise<Change[]> {
  const { journal, recovered } = await Journal.open({ dataDir, autoCompact: false, checkpoint: false });
  await journal.close();
  return recovered.config.map((c) => c.change);
}

describe('journal: declares over existing queues and exchanges', () => {
  it('redeclare - a binding copied forward after the declare that replaced its queue stays dead', async () => {
    // Compaction copied the bind (LSN 2) while the re-declare (LSN 3) was not synced yet.
    const dataDir = await journalOf([[declareQ(1), bind(2)], [declareQ(3, 3)], [declareQ(1), bind(2)]]);
    expect(await recoveredConfig(dataDir)).toEqual([declareQ(3, 3).change]);
  });

  it('redeclare - the bindings of a replaced queue die even when its old declare is gone from the files', async () => {
    // The old declare's segment went first (the target of a kill may); its bind is still there.
    const dataDir = await journalOf([[bind(2)], [declareQ(3)]]);
    expect(await recoveredConfig(dataDir)).toEqual([declareQ(3).change]);
  });

  it('redeclare - a bind made after an exchange is declared over itself survives a restart; the old bindings do not', async () => {
    const dataDir = await journalOf([[declareQ(1), declareE(2), bind(3, 'e'), declareE(4, 'fanout'), bind(5, 'e')]]);
    expect(await recoveredConfig(dataDir)).toEqual([declareQ(1).change, declareE(4, 'fanout').change, bind(5, 'e').change]);
    // And in file order with compaction copies of the old exchange and its bind after the new declare.
    const copied = await journalOf([[declareQ(1), declareE(2), bind(3, 'e')], [declareE(4, 'fanout')], [declareE(2), bind(3, 'e')]]);
    expect(await recoveredConfig(copied)).toEqual([declareQ(1).change, declareE(4, 'fanout').change]);
  });

  it('redeclare - compaction does not copy what a declare not yet synced is about to replace', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    // fdatasync can be held, so the re-declares stay unsynced while compaction runs.
    const { io, hold, release } = holdableSyncIo();
    const { journal } = await Journal.open({ dataDir, io, autoCompact: false, segmentBytes: 512, compactLiveRatio: 1 });
    const first = [declareQ(1), declareE(2), bind(3), bind(4, 'e')];
    for (const r of first) journal.append(r);
    // Dead filler, so the first segment is mostly dead and rolls.
    let lsn = 4;
    for (let i = 0; i < 12; i++) journal.append(rec(++lsn, { kind: 'epoch', epoch: i + 1 }));
    await durable(journal, lsn);
    hold();
    journal.append(declareQ(++lsn, 3));
    journal.append(declareE(++lsn, 'fanout'));
    const compacted = journal.compact();
    await new Promise((r) => setTimeout(r, 20));
    release();
    await durable(journal, lsn);
    expect((await compacted).deletedSegments).toContain(1);
    await journal.close({ checkpoint: false });
    // No copy of the old declares or binds was written after the declares that replaced them.
    const jdir = path.join(dataDir, 'journal');
    for (const id of await listSegments(jdir)) {
      for (const r of scanSegment(await readFile(segmentPath(jdir, id))).records) if (r.entry.change.kind !== 'lsn-reservation') expect(r.entry.lsn, `segment ${id}`).toBeGreaterThan(4);
    }
    expect(await recoveredConfig(dataDir)).toEqual([{ kind: 'epoch', epoch: 12 }, declareQ(lsn - 1, 3).change, declareE(lsn, 'fanout').change]);
  });
});

describe('journal: the newest change copied forward', () => {
  it('newest - an unbind kept as the newest change and copied forward after a new bind of the same key does not kill it', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const jdir = path.join(dataDir, 'journal');
    const { io, hold, release } = holdableSyncIo();
    const segmentBytes = 2048;
    const { journal } = await Journal.open({ dataDir, io, autoCompact: false, segmentBytes });
    const frameOf = (r: LoggedChange) => encodeFrame(encodeChange(r)).length;
    const enqueue = (lsn: number, id: number, size: number) => rec(lsn, { kind: 'enqueue', queue: 'q', message: { id, bytes: Buffer.alloc(size), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined } });
    const dequeue = (lsn: number, id: number) => rec(lsn, { kind: 'dequeue', queue: 'q', id });
    const unbind = (lsn: number) => rec(lsn, { kind: 'unbind', exchange: 'amq.direct', queue: 'q', key: 'k' });
    let lsn = 0;
    journal.append(declareQ(++lsn));
    journal.append(bind(++lsn));
    // Dead weight, so the segment is mostly dead when it closes.
    for (let id = 1; id <= 8; id++) journal.append(enqueue(++lsn, id, 60));
    for (let id = 1; id <= 8; id++) journal.append(dequeue(++lsn, id));
    await durable(journal, lsn);
    // One more message, sized so that after its dequeue and the unbind the segment has no room for a bind.
    const seg = journal.currentSegment;
    const used = (await stat(segmentPath(jdir, seg))).size;
    const room = segmentBytes - used - frameOf(enqueue(0, 9, 0)) - frameOf(dequeue(0, 9)) - frameOf(unbind(0)) - frameOf(bind(0)) + 1;
    journal.append(enqueue(++lsn, 9, room));
    journal.append(dequeue(++lsn, 9));
    journal.append(unbind(++lsn)); // the newest change: kept (and copied forward) though dead
    await durable(journal, lsn);
    expect(journal.currentSegment).toBe(seg);
    // Bound again: the bind opens the next segment and is not synced yet when compaction copies the unbind.
    hold();
    journal.append(bind(++lsn));
    expect(journal.currentSegment).toBe(seg + 1);
    journal.append(rec(++lsn, { kind: 'epoch', epoch: 1 }));
    const compacted = journal.compact();
    await new Promise((r) => setTimeout(r, 20));
    release();
    await durable(journal, lsn);
    await compacted;
    await journal.close({ checkpoint: false });
    const config = await recoveredConfig(dataDir);
    expect(config.filter((c) => c.kind === 'bind')).toEqual([bind(0).change]);
  });

  it('newest - a dequeue copied forward after a newer enqueue of the same id does not kill it', async () => {
    const m = (id: number) => ({ id, bytes: Buffer.from(`m${id}`), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined });
    const dataDir = await journalOf([
      [declareQ(1), rec(2, { kind: 'enqueue', queue: 'q', message: m(5) }), rec(3, { kind: 'dequeue', queue: 'q', id: 5 })],
      [rec(4, { kind: 'enqueue', queue: 'q', message: m(5) }), rec(3, { kind: 'dequeue', queue: 'q', id: 5 })],
    ]);
    const { journal, recovered } = await Journal.open({ dataDir, autoCompact: false, checkpoint: false });
    const ids: number[] = [];
    journal.forEachRecovered('q', (f, lsn) => ids.push(f.id, lsn));
    await journal.close();
    expect(recovered.messages).toBe(1);
    expect(ids).toEqual([5, 4]);
  });
});

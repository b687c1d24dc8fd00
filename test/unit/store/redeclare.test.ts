// A declare over a queue or exchange that exists replaces it (as the broker
// applies it: an HA backup or DR secondary can journal one). What the old one had
// must stay dead across a restart, whatever file order and compaction did with its
// records; found by restore-property.test.ts, pinned down here with journals
// written frame by frame (file order as compaction leaves it) and with compaction
// running while the declare is not synced yet.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal } from '../../../src/store/journal.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { encodeFrame, listSegments, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, exchangeSettings, queueSettings, removeDir, tempDir } from './helpers.js';

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
    let hold: Promise<void> | undefined;
    let release = () => {};
    const io: JournalIo = {
      ...nodeIo,
      fdatasync: async (fd) => {
        await hold;
        return nodeIo.fdatasync(fd);
      },
    };
    const { journal } = await Journal.open({ dataDir, io, autoCompact: false, segmentBytes: 512, compactLiveRatio: 1 });
    const first = [declareQ(1), declareE(2), bind(3), bind(4, 'e')];
    for (const r of first) journal.append(r);
    // Dead filler, so the first segment is mostly dead and rolls.
    let lsn = 4;
    for (let i = 0; i < 12; i++) journal.append(rec(++lsn, { kind: 'epoch', epoch: i + 1 }));
    await durable(journal, lsn);
    hold = new Promise((r) => (release = r));
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

// Property test: random broker workloads across restarts, then a crash simulated
// by cutting the last segment at every byte offset of its final records (and by
// flipping a byte there). Each recovery is compared with a model built from the
// records that survived the cut. Twice: replaying the whole journal, and from a
// checkpoint written just before the final records (the crash came after it).

import { mkdir, readdir, readFile, rm, writeFile, copyFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { JournalCorruptError } from '../../../src/store/errors.js';
import { Journal } from '../../../src/store/journal.js';
import { CHECKPOINT_CORRUPT, CHECKPOINT_FILE } from '../../../src/store/checkpoint.js';
import { existsSync } from 'node:fs';
import { listSegments, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, journaled, modelState, prng, removeDir, tempDir, Workload } from './helpers.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await removeDir(d);
});

async function runSessions(seed: number, dataDir: string, withCheckpoint: boolean) {
  const rnd = prng(seed);
  const work = new Workload(rnd, 0);
  let maxLsnEver = 0;
  const sessions = 3;
  let lastChunkFirstLsn = 0;
  for (let s = 0; s < sessions; s++) {
    const { journal, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 2048, reserveLsnBlock: 50, checkpoint: withCheckpoint });
    // Every earlier session closed cleanly: the recovery equals the whole model.
    expect(modelState(recovered.changes.map((c) => c.change))).toEqual(modelState(journaled(work.log)));
    expect(recovered.lastLsn).toBeGreaterThanOrEqual(maxLsnEver);
    const lsns = recovered.changes.map((c) => c.lsn);
    expect([...lsns].sort((a, b) => a - b)).toEqual(lsns);
    work.lsn = recovered.lastLsn;
    for (let chunk = 0; chunk < 8; chunk++) {
      const last = s === sessions - 1 && chunk === 7;
      if (last && withCheckpoint) expect(await journal.checkpoint()).toBeDefined();
      if (last) lastChunkFirstLsn = work.lsn + 1;
      for (let i = 0; i < (last ? 3 : 25); ) {
        const e = work.step();
        if (!e) continue;
        journal.append(e);
        maxLsnEver = e.lsn;
        i++;
      }
      await durable(journal, work.lsn);
    }
    // The last session crashes (with a checkpoint written before its final records), or closes.
    if (withCheckpoint && s === sessions - 1) journal.destroy();
    await journal.close();
  }
  return { work, maxLsnEver, lastChunkFirstLsn };
}

/**
 * Make `crashDir` hold the original segments with the last one replaced by `last`.
 * The earlier segments are copied once; later calls only undo what the previous
 * recovery added (its new segment) and rewrite the last one.
 */
async function stage(srcJournal: string, crashDir: string, segIds: number[], last: Buffer): Promise<void> {
  const j = path.join(crashDir, 'journal');
  const lastId = segIds.at(-1)!;
  await mkdir(j, { recursive: true });
  const present = await listSegments(j);
  if (present.length === 0) {
    for (const id of segIds.slice(0, -1)) await copyFile(segmentPath(srcJournal, id), segmentPath(j, id));
  }
  for (const id of present) if (id > lastId) await rm(segmentPath(j, id));
  await writeFile(segmentPath(j, lastId), last);
  // The crash image's checkpoint (if any), not what an earlier recovery of another image wrote or set aside.
  for (const name of [CHECKPOINT_FILE, CHECKPOINT_CORRUPT]) await rm(path.join(j, name), { force: true });
  if (existsSync(path.join(srcJournal, CHECKPOINT_FILE))) await copyFile(path.join(srcJournal, CHECKPOINT_FILE), path.join(j, CHECKPOINT_FILE));
}

describe('journal crash property', () => {
  for (const [seed, withCheckpoint] of [[1, false], [2, false], [3, false], [1, true], [2, true], [3, true]] as const) {
    it(`journal crash property - seed ${seed}${withCheckpoint ? ', from a checkpoint' : ''}: every cut of the tail recovers exactly the surviving records`, async () => {
      const dataDir = await tempDir();
      const crashDir = await tempDir();
      dirs.push(dataDir, crashDir);
      const { work, maxLsnEver, lastChunkFirstLsn } = await runSessions(seed, dataDir, withCheckpoint);
      expect(existsSync(path.join(dataDir, 'journal', CHECKPOINT_FILE))).toBe(withCheckpoint);
      let fromCheckpoint = 0;
      const logger = { info: (_o: unknown, msg?: string) => void (msg?.includes('from its checkpoint') && fromCheckpoint++), warn() {}, error() {} };
      const srcJournal = path.join(dataDir, 'journal');
      const segIds = await listSegments(srcJournal);
      const lastBuf = await readFile(segmentPath(srcJournal, segIds.at(-1)!));
      const scan = scanSegment(lastBuf);
      // Survivors outside the last segment.
      const before = new Set<number>();
      for (const id of segIds.slice(0, -1)) {
        for (const r of scanSegment(await readFile(segmentPath(srcJournal, id))).records) {
          if (r.entry.change.kind !== 'lsn-reservation') before.add(r.entry.lsn);
        }
      }
      const tail = scan.records.filter((r) => r.entry.change.kind !== 'lsn-reservation' && r.entry.lsn >= lastChunkFirstLsn);
      expect(tail.length).toBeGreaterThan(0);
      const firstCut = tail[0]!.offset;
      const byLsn = new Map<number, LoggedChange>(work.log.map((e) => [e.lsn, e]));
      const expectedFor = (cut: number) => {
        const survive = new Set(before);
        for (const r of scan.records) {
          if (r.entry.change.kind !== 'lsn-reservation' && r.offset + r.size <= cut) survive.add(r.entry.lsn);
        }
        // Confirmed records (all before the last chunk) must always survive.
        for (const e of work.log) if (e.lsn < lastChunkFirstLsn && (e.durable || e.change.kind === 'epoch')) expect(survive.has(e.lsn)).toBe(true);
        return modelState(journaled(work.log.filter((e) => survive.has(e.lsn) && byLsn.has(e.lsn))));
      };

      for (let cut = firstCut; cut <= lastBuf.length; cut++) {
        await stage(srcJournal, crashDir, segIds, lastBuf.subarray(0, cut));
        const { journal, recovered } = await Journal.open({ materialize: true, dataDir: crashDir, autoCompact: false, logger });
        await journal.close({ checkpoint: false });
        expect(modelState(recovered.changes.map((c) => c.change)), `cut at ${cut}`).toEqual(expectedFor(cut));
        expect(recovered.lastLsn).toBeGreaterThanOrEqual(maxLsnEver);
      }

      // A flipped byte in the final record looks like a torn write: cut, and the rest recovered.
      const lastRec = scan.records.at(-1)!;
      const flippedTail = Buffer.from(lastBuf);
      flippedTail[lastRec.offset + lastRec.size - 1]! ^= 0x01;
      await stage(srcJournal, crashDir, segIds, flippedTail);
      const t = await Journal.open({ materialize: true, dataDir: crashDir, autoCompact: false, logger });
      await t.journal.close({ checkpoint: false });
      expect(modelState(t.recovered.changes.map((c) => c.change))).toEqual(expectedFor(lastRec.offset));

      // A flipped byte in a record with valid records after it is damage: refuse, name it.
      const flippedMid = Buffer.from(lastBuf);
      flippedMid[tail[0]!.offset + 9]! ^= 0x01;
      await stage(srcJournal, crashDir, segIds, flippedMid);
      const err = await Journal.open({ materialize: true, dataDir: crashDir, autoCompact: false }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(JournalCorruptError);
      expect((err as JournalCorruptError).offset).toBe(tail[0]!.offset);
      expect((await readdir(crashDir)).includes('tandemd.lock')).toBe(false);
      // With a checkpoint, every recovery above started from it.
      if (withCheckpoint) expect(fromCheckpoint).toBe(lastBuf.length - firstCut + 2);
    }, 30_000);
  }
});

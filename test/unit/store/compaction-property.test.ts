// Property test: random broker workloads on small segments with compaction in
// between (copies land in newer segments, out of LSN order; queues are deleted
// and declared again under the same names; their dedup settings change and
// auto-delete queues get their first consumer), across restarts. Crash images are
// taken at quiet points and just before every segment unlink of compaction; each
// one must recover exactly the journaled model at that moment, with every
// message body readable (a row left pointing into a deleted segment would fail
// the read).
import { cp, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Journal } from '../../../src/store/journal.js';
import { durable, journaled, modelState, prng, removeDir, tempDir, Workload, type ModelState } from './helpers.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await removeDir(d);
});

interface CrashImage {
  dir: string;
  expected: ModelState;
  lsn: number;
  where: string;
}

describe('journal compaction property', () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`journal compaction property - seed ${seed}: crash images taken around compaction recover the journaled model`, async () => {
      const dataDir = await tempDir();
      const images = await tempDir();
      dirs.push(dataDir, images);
      const rnd = prng(seed);
      // With queues' changed dedup settings and first consumers: records that live while
      // their queue does, read before its declare once compaction copied that past them.
      const work = new Workload(rnd, 0, { queueChanges: true });
      const taken: CrashImage[] = [];
      const take = async (where: string) => {
        if (taken.length >= 40) return;
        const dir = path.join(images, String(taken.length));
        await mkdir(dir);
        await cp(path.join(dataDir, 'journal'), path.join(dir, 'journal'), { recursive: true });
        taken.push({ dir, expected: modelState(journaled(work.log)), lsn: work.lsn, where });
      };
      for (let session = 0; session < 3; session++) {
        const { journal, recovered } = await Journal.open({
          materialize: true,
          dataDir,
          autoCompact: false,
          segmentBytes: 1024,
          reserveLsnBlock: 100,
          compactionHooks: { beforeDelete: (file) => (rnd.chance(0.5) ? take(`session ${session}, before unlinking ${path.basename(file)}`) : undefined) },
        });
        expect(modelState(recovered.changes.map((c) => c.change))).toEqual(modelState(journaled(work.log)));
        work.lsn = recovered.lastLsn;
        for (let round = 0; round < 24; round++) {
          for (let i = 0; i < 20; ) {
            const e = work.step();
            if (!e) continue;
            journal.append(e);
            i++;
          }
          await durable(journal, work.lsn);
          if (rnd.chance(0.2)) await take(`session ${session}, round ${round}`);
          if (round % 3 === 2) await journal.compact();
        }
        await journal.close();
      }
      expect(taken.length).toBeGreaterThan(5);
      for (const image of taken) {
        // Recover the image; compact what it recovered (with crash images of that, too); recover again.
        const nested: string[] = [];
        const { journal, recovered } = await Journal.open({
          materialize: true,
          dataDir: image.dir,
          autoCompact: false,
          segmentBytes: 1024,
          compactionHooks: {
            async beforeDelete() {
              const dir = `${image.dir}-n${nested.length}`;
              await cp(path.join(image.dir, 'journal'), path.join(dir, 'journal'), { recursive: true });
              nested.push(dir);
              dirs.push(dir);
            },
          },
        });
        expect(modelState(recovered.changes.map((c) => c.change)), image.where).toEqual(image.expected);
        expect(recovered.lastLsn, image.where).toBeGreaterThanOrEqual(image.lsn);
        await journal.compact();
        await journal.close();
        for (const dir of [image.dir, ...nested]) {
          const again = await Journal.open({ materialize: true, dataDir: dir, autoCompact: false });
          await again.journal.close();
          expect(modelState(again.recovered.changes.map((c) => c.change)), `${image.where}, compacted after recovery (${dir})`).toEqual(image.expected);
        }
      }
    }, 60_000);
  }
});

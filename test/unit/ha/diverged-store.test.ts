// The diverged area (src/ha/diverged-store.ts): a replaced journal is kept only
// when a divergence was noted for it, moved whole, listed, and its re-publish
// progress recorded.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { dropDivergenceNote, keepIfDiverged, listDiverged, noteDivergence, readDiverged, readSnapshotPoint, recordRepublished, writeSnapshotPoint, type DivergedInfo } from '../../../src/ha/diverged-store.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function dataDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tandem-diverged-'));
  dirs.push(d);
  return d;
}

function replaced(dir: string, stamp: number): string {
  const aside = join(dir, `journal.replaced-${stamp}`);
  mkdirSync(aside);
  writeFileSync(join(aside, 'seg-1'), 'records');
  return aside;
}

const info = (over: Partial<DivergedInfo> = {}): DivergedInfo => ({
  epoch: 1, after: 11, through: 1018, primaryEpoch: 2, reason: 'ahead', setAsideAt: '2026-12-01T00:00:00.000Z', snapshotPoint: 3, history: [{ epoch: 1, startLsn: 1 }], ...over,
});

describe('diverged store', () => {
  it('keeps a replaced journal with a divergence note, whole, under <epoch>-<first>-<last>; one without a note is not kept', () => {
    const dir = dataDir();
    const plain = replaced(dir, 1);
    expect(keepIfDiverged(dir, plain)).toBeUndefined();
    expect(existsSync(plain), 'left for the caller to delete').toBe(true);
    const aside = replaced(dir, 2);
    noteDivergence(aside, info());
    const kept = keepIfDiverged(dir, aside)!;
    expect(kept).toMatchObject({ name: '1-12-1018', epoch: 1, after: 11, through: 1018, republished: 0 });
    expect(existsSync(aside)).toBe(false);
    expect(readFileSync(join(kept.path, 'journal', 'seg-1'), 'utf8')).toBe('records');
    // The same range again (a second divergence): a second set, not a clash.
    const again = replaced(dir, 3);
    noteDivergence(again, info({ setAsideAt: '2026-12-01T00:01:00.000Z' }));
    expect(keepIfDiverged(dir, again)!.name).toBe('1-12-1018-2');
    expect(listDiverged(dir).map((d) => d.name)).toEqual(['1-12-1018', '1-12-1018-2']);
  });

  it('an interrupted snapshot drops the note with it; progress and the snapshot point survive a re-read', () => {
    const dir = dataDir();
    const aside = replaced(dir, 4);
    noteDivergence(aside, info());
    dropDivergenceNote(aside);
    expect(keepIfDiverged(dir, aside)).toBeUndefined();
    const kept = (noteDivergence(aside, info()), keepIfDiverged(dir, aside))!;
    recordRepublished(kept, 640);
    expect(readDiverged(kept.path)?.republished).toBe(640);
    expect(readSnapshotPoint(dir)).toBe(0);
    writeSnapshotPoint(dir, 77);
    expect(readSnapshotPoint(dir)).toBe(77);
    expect(listDiverged(join(dir, 'nowhere'))).toEqual([]);
  });
});

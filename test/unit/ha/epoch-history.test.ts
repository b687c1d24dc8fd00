// How far a backup's log agrees with the primary's (sharedThrough): the changes
// after that point are the ones a rejoining backup keeps aside (issue 21).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { EpochHistory, sharedThrough } from '../../../src/ha/epoch-history.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function history(entries: Array<[number, number]>): EpochHistory {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-epochs-'));
  dirs.push(dir);
  const h = new EpochHistory(dir);
  for (const [epoch, startLsn] of entries) h.record(epoch, startLsn);
  return h;
}

describe('epoch history - shared prefix', () => {
  it('issue 21: a backup of epoch 1 at 1018 shares only what came before epoch 2 began at 12', () => {
    const h = history([[1, 1], [2, 12]]);
    expect(sharedThrough(h, 1, 1018, 20)).toBe(11);
    expect(sharedThrough(h, 1, 9, 20), 'behind the divergence point: all shared').toBe(9);
  });

  it('the current epoch is shared up to the primary head; an unknown or newer epoch proves nothing', () => {
    const h = history([[1, 1], [3, 50]]);
    expect(sharedThrough(h, 3, 70, 60)).toBe(60);
    expect(sharedThrough(h, 3, 55, 60)).toBe(55);
    expect(sharedThrough(h, 2, 70, 60)).toBe(0);
    expect(sharedThrough(h, 4, 70, 60)).toBe(0);
    expect(sharedThrough(h, 0, 70, 60), 'no epoch yet: shared until the first one began').toBe(0);
    expect(sharedThrough(history([[1, 5]]), 0, 70, 60)).toBe(4);
  });
});

describe('epoch history - the file', () => {
  it('epoch history - records of one batch reach ha-epochs.json in one write at its end, in epoch order, and a restart reads them', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-epochs-'));
    dirs.push(dir);
    const file = join(dir, 'ha-epochs.json');
    const h = new EpochHistory(dir);
    h.record(1, 1);
    const before = readFileSync(file, 'utf8');
    const seen = h.batch(() => {
      // 5,000 epochs in one batch were 5,000 rewrites of a growing file (4 s on a backup).
      for (let epoch = 5001; epoch >= 2; epoch--) h.record(epoch, epoch * 10);
      return readFileSync(file, 'utf8');
    });
    expect(seen).toBe(before);
    const written = JSON.parse(readFileSync(file, 'utf8')) as Array<{ epoch: number; startLsn: number }>;
    expect(written).toHaveLength(5001);
    expect(written.map((e) => e.epoch)).toEqual(Array.from({ length: 5001 }, (_, i) => i + 1));
    expect(new EpochHistory(dir).latest).toEqual({ epoch: 5001, startLsn: 50010 });
    // Outside a batch each record is written at once, as before.
    h.record(6000, 60000);
    expect(new EpochHistory(dir).latest).toEqual({ epoch: 6000, startLsn: 60000 });
  });
});

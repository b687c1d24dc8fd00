// How far a backup's log agrees with the primary's (sharedThrough): the changes
// after that point are the ones a rejoining backup keeps aside (issue 21).
import { mkdtempSync, rmSync } from 'node:fs';
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

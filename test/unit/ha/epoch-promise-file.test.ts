// The promise a broker keeps in <data-dir>/ha-promised-epoch (src/ha/epoch-promise.ts),
// read back at start: a file that is not one it wrote (garbage, too large, an epoch out of
// bounds, no `by`) is ignored with a warning, as a broker that never promised, never a
// failed start; a good one is kept.
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { EpochPromise, MAX_HA_EPOCH } from '../../../src/ha/epoch-promise.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function promiseFrom(content: string): { epoch: number; warnings: number } {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-promise-file-'));
  dirs.push(dir);
  writeFileSync(join(dir, 'ha-promised-epoch'), content);
  let warnings = 0;
  const log = pino({ level: 'warn', hooks: { logMethod: (args, method) => { warnings++; method.apply(log, args); } } }, { write: () => undefined });
  return { epoch: new EpochPromise(dir, log).epoch, warnings };
}

describe('ha epoch promise - the file read back at start', () => {
  it('ignores, with a warning, what it did not write; keeps a good promise', () => {
    for (const bad of ['not json', '{}', JSON.stringify({ epoch: MAX_HA_EPOCH + 1, by: 'b' }), JSON.stringify({ epoch: -1, by: 'b' }), JSON.stringify({ epoch: 3 }), JSON.stringify({ epoch: 3, by: 'x'.repeat(5000) })]) {
      expect(promiseFrom(bad), bad.slice(0, 40)).toEqual({ epoch: 0, warnings: 1 });
    }
    expect(promiseFrom(JSON.stringify({ epoch: 7, by: 'broker-b' })).epoch).toBe(7);
  });

  it('a link to a device is read no further than a promise can be long', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-promise-file-'));
    dirs.push(dir);
    symlinkSync('/dev/zero', join(dir, 'ha-promised-epoch'));
    expect(new EpochPromise(dir, pino({ level: 'silent' })).epoch).toBe(0);
  });
});

// A DR copy that starts over takes its source's epoch from the link's attach
// (`tandem.dr.epochs`). A source (hostile, or garbled) naming an epoch past MAX_EPOCH
// is not followed there: at 2^53 - 1 the pair could never move again (an activation
// raises the epoch by one, and 2^53 is no exact step). One within bounds is taken.
// On the old code the copy took 2^53 - 1.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { HostileSite } from './hostile-site.js';
import { drRowOf } from './helpers.js';

let site: HostileSite;
let copy: TestBroker;

beforeAll(async () => {
  site = await new HostileSite(() => ({ status: 501, description: 'not here' })).start();
  site.drSourceProperties = { 'tandem.dr.source': true, 'tandem.dr.epochs': JSON.stringify({ huge: 2 ** 53 - 1, five: 5 }) };
  copy = await TestBroker.start();
}, 60_000);

afterAll(async () => {
  await site?.stop();
  await killAllBrokers();
});

describe('DR copy - epochs a source names at attach', () => {
  it('DR copy - an epoch past MAX_EPOCH is not taken; one within bounds is', async () => {
    for (const q of ['huge', 'five']) {
      const add = await tandem(['dr', 'add', q, '--source', site.url, '-b', copy.url]);
      expect(add.code, add.stderr).toBe(0);
    }
    await waitFor(async () => (await drRowOf(copy.port, 'five')).epoch === 5, { timeout: 20_000, name: 'the copy took epoch 5' }).catch((e: Error) => {
      throw new Error(`${e.message}; links ${site.drLinks}; log ${`${copy.stdout}\n${copy.stderr}`.split('\n').slice(-8).join('\n')}`);
    });
    expect(site.drLinks).toBeGreaterThan(0);
    expect((await drRowOf(copy.port, 'huge')).epoch).toBe(1);
    expect(copy.errorLogLines).toEqual([]);
  }, 60_000);
});

// A duplicate-detection window set on a source queue after its DR copy was made
// (`tandem queue set --dedup-window`) reaches the copy: live, by the change itself, and
// after the copy was away longer than the source keeps changes, by the declare every
// link starts with. After activation a client's resends are refused at the secondary
// as they were at the source. Before, the copy kept the settings it was made with: no
// window, and every resend after activation was a second copy.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { drFlush, mgmt, publishKeyed } from './helpers.js';

const ids = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `m-${from + i}`);
const show = async (port: number) => (await manage(port, 'READ', 'queue', 'orders')) as Record<string, number>;

afterAll(async () => {
  await killAllBrokers();
});

/** Kill the source, activate the copy, resend every id it took: each must be a duplicate. */
async function resendAfterActivation(source: TestBroker, secondary: TestBroker, sent: string[]): Promise<void> {
  await source.kill();
  const r = await tandem(['dr', 'activate', 'orders', '-b', secondary.url]);
  expect(r.code, r.stderr).toBe(0);
  const before = (await show(secondary.port)).depth;
  await publishKeyed(secondary.port, sent);
  expect((await show(secondary.port)).depth).toBe(before);
  expect((await show(secondary.port))['dedup-duplicates']).toBe(sent.length);
}

describe('DR - a window set at the source after the copy was made', () => {
  it('DR dedup settings - the change reaches a connected copy, and resends after activation are refused', async () => {
    const source = await TestBroker.start();
    const secondary = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'orders', source: source.url, mode: 'enqueue-and-dequeue' });
    await publishKeyed(source.port, ['before']);
    await drFlush(source.port, secondary.port);
    expect((await show(secondary.port))['qpid.dedup-window']).toBe(0);
    const set = await tandem(['queue', 'set', 'orders', '--dedup-window', '1000', '--dedup-ttl', '10m', '-b', source.url]);
    expect(set.code, set.stderr).toBe(0);
    await publishKeyed(source.port, ids(0, 20));
    await drFlush(source.port, secondary.port);
    expect((await show(secondary.port))['qpid.dedup-window']).toBe(1000);
    expect((await show(secondary.port))['qpid.dedup-ttl']).toBe(600_000);
    await resendAfterActivation(source, secondary, ids(0, 20));
  }, 90_000);

  it('DR dedup settings - a copy away past the source\'s kept changes takes the window from the declare it is sent on return', async () => {
    const source = await TestBroker.start({ args: ['--dr-retain-changes', '10'] });
    let secondary = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'orders', source: source.url, mode: 'enqueue-and-dequeue' });
    await publishKeyed(source.port, ['before']);
    await drFlush(source.port, secondary.port);
    await secondary.stop();
    expect((await tandem(['queue', 'set', 'orders', '--dedup-window', '1000', '-b', source.url])).code).toBe(0);
    // Far more changes than the source keeps: the copy comes back to a copy of the contents.
    await publishKeyed(source.port, ids(0, 40));
    secondary = await TestBroker.start({ dataDir: secondary.dataDir });
    await drFlush(source.port, secondary.port);
    expect((await show(secondary.port))['qpid.dedup-window']).toBe(1000);
    expect((await show(secondary.port)).depth).toBe(41);
    await resendAfterActivation(source, secondary, ids(0, 40));
  }, 90_000);
});

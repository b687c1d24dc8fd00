// failback (reattach) of a queue with a duplicate-detection window. The old
// site's window holds the keys of (1) messages it consumed after the divergence point,
// which the activated site still holds and sends back as the fill, and (2) messages it
// took after the divergence point (quarantined at reattach), which a publisher resent
// to the activated site when the old one was lost. Both come back to the old site as
// copies of what the activated site serves: a mirror must take them, or it is not the
// activated site's copy, and the switch back loses what the activated site had
// acknowledged.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, publishKeyed, range, receive } from './helpers.js';


describe('DR round trip - failback with a duplicate-detection window', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  // The activated site's log since its activation, or (its window too short: retained changes 10) a copy of its contents.
  it.each([
    ['the log since the activation', []],
    ['a copy of the contents', ['--dr-retain-changes', '10']],
  ])('DR round trip - after reattach (%s) the old site holds what the activated site holds (fill and resent messages are not dropped as duplicates), and the switch back loses nothing', async (_how, bArgs) => {
    let a = await TestBroker.start();
    let b = await TestBroker.start({ args: bArgs });
    expect((await tandem(['queue', 'add', 'orders', '--durable', '--dedup-window', '10000', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url])).code).toBe(0);
    await publishKeyed(a.port, range('m-', 0, 100));
    await drFlush(a.port, b.port);
    // The link breaks (the secondary is lost for a while); the source goes on: 10 consumed, 5 taken.
    await b.kill();
    expect(await receive(a.port, 'orders', 10)).toEqual(range('m-', 0, 10));
    await publishKeyed(a.port, range('p-', 0, 5));
    await a.kill();
    b = await TestBroker.start({ port: b.port, dataDir: b.dataDir, args: bArgs });
    await waitFor(async () => (await drRowOf(b.port, 'orders')).link !== 'connected', { timeout: 30_000, name: 'the secondary without its source' });
    const act = await tandem(['dr', 'activate', 'orders', '-b', b.url]);
    expect(act.code, act.stderr).toBe(0);
    // The publisher resends what it sent the lost site (its window there never saw them), and goes on.
    await publishKeyed(b.port, [...range('p-', 0, 5), ...range('q-', 0, 30)]);
    const served = [...range('m-', 0, 100), ...range('p-', 0, 5), ...range('q-', 0, 30)];
    expect(await contents(b.port, 'orders')).toEqual(served);

    a = await TestBroker.start({ port: a.port, dataDir: a.dataDir });
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'diverged', { timeout: 30_000, name: 'old site demoted' });
    const r = await tandem(['dr', 'reattach', 'orders', '--source', b.url, '-b', a.url, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { quarantined: Record<string, number> }).quarantined.orders).toBe(5);
    await drFlush(b.port, a.port, 30_000, ['orders']);
    expect(await contents(a.port, 'orders.dr-diverged')).toEqual(range('p-', 0, 5));
    // The passive copy equals what the activated site serves, message by message.
    expect(await contents(a.port, 'orders')).toEqual(served);

    // And back: everything the activated site held is served by the old one.
    const back = await tandem(['dr', 'switchover', 'orders', '-b', a.url, '--json']);
    expect(back.code, back.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'source' && (await drRowOf(b.port, 'orders')).role === 'passive copy', { timeout: 30_000, name: 'switched back' });
    expect(await receive(a.port, 'orders', served.length)).toEqual(served);
  }, 180_000);
});

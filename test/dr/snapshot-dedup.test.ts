// A copy of a queue's contents (a snapshot: here a copy that fell behind the source's
// retained window of 100 changes) brings the source's duplicate-detection window with
// it, as the copy's own: its keys go through the secondary's change log to the
// secondary cluster's HA backups, and keep the ages the source gave them (a key does
// not start a new dedup-ttl at the copy). The same case in a standalone secondary
// killed -9 is in queue-kinds.test.ts.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, depthOf, drFlush, drRowOf, publishKeyed, range, receive } from './helpers.js';
import { relay, type Relay } from './relay.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let sec: TestCluster | undefined;

afterAll(async () => {
  await sec?.stopAll();
  await killAllBrokers();
});

/**
 * Source `a` (queue orders with `queueArgs`) copied by `secondaryUrl` through a relay:
 * 10 messages by the log, then, while the link is down, 500 more (past the window) of
 * which 310 in all are consumed; `beforeCopy` runs before the link comes back and the
 * copy gets a snapshot of the 200 left.
 */
async function copiedBySnapshot(queueArgs: string[], secondaryUrl: string, secondaryPort: number, beforeCopy = async () => {}): Promise<{ a: TestBroker; link: Relay }> {
  const a = await TestBroker.start({ args: ['--dr-retain-changes', '100'] });
  const link = await relay(a.port);
  expect((await tandem(['queue', 'add', 'orders', '--durable', ...queueArgs, '-b', a.url])).code).toBe(0);
  const add = await tandem(['dr', 'add', 'orders', '--source', link.url, '-b', secondaryUrl]);
  expect(add.code, add.stderr).toBe(0);
  await publishKeyed(a.port, range('m', 0, 10));
  await drFlush(a.port, secondaryPort);
  // The link may come up after those 10 were published, and then they came by a first copy.
  const copiedBefore = (await drRowOf(secondaryPort, 'orders'))['received-copies'];
  link.refuseNew();
  link.cut();
  await publishKeyed(a.port, range('m', 10, 510));
  expect(await receive(a.port, 'orders', 310)).toEqual(range('m', 0, 310));
  await beforeCopy();
  link.admitNew();
  await drFlush(a.port, secondaryPort);
  expect((await drRowOf(secondaryPort, 'orders'))['received-copies']).toBe(copiedBefore + 200);
  return { a, link };
}

describe('DR - a copy by snapshot keeps the source window', () => {
  it("DR snapshot dedup - into an HA secondary: the keys reach its backup; after a kill -9 of the secondary's primary, the promoted backup activated refuses every resend", async () => {
    sec = await TestCluster.start(2, ['--ha-min-ready-backups', '0']);
    expect((await sec.promote(0)).code).toBe(0);
    await sec.waitState(1, 'ready');
    const [d0, d1] = sec.ports as [number, number];
    const { a, link } = await copiedBySnapshot(['--dedup-window', '100000'], sec.address(0), d0);
    await sec.backupsCaughtUp(0);
    await a.kill();
    await sec.kill(0);
    const promoted = await sec.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await sec.waitState(1, 'active');
    const r = await tandem(['dr', 'activate', 'orders', '-b', sec.address(1)]);
    expect(r.code, r.stderr).toBe(0);
    await publishKeyed(d1, range('m', 0, 510));
    expect(await depthOf(d1, 'orders')).toBe(200);
    expect(await contents(d1, 'orders')).toEqual(range('m', 310, 510));
    link.close();
  }, 120_000);

  it('DR snapshot dedup - the keys keep their source ages: past the dedup-ttl counted from the source, a resend after activation is taken', async () => {
    const b = await TestBroker.start();
    let published = 0;
    // The copy is read 2 s after the last key was taken: a key whose age restarted at the
    // copy would still be held 4 s after the source took it; one that kept its age is gone.
    const { a, link } = await copiedBySnapshot(['--dedup-window', '100000', '--dedup-ttl', '4s'], b.url, b.port, async () => {
      published = Date.now();
      await sleep(2000);
    });
    await a.kill();
    expect((await tandem(['dr', 'activate', 'orders', '-b', b.url])).code).toBe(0);
    await sleep(Math.max(0, published + 4500 - Date.now()));
    // Every key is older than 4 s by the source's clock: the resends are all new messages.
    await publishKeyed(b.port, range('m', 300, 510));
    expect(await depthOf(b.port, 'orders')).toBe(200 + 210);
    link.close();
  }, 60_000);
});

// DR between two 2-broker HA clusters: the bridge runs in the secondary
// cluster's primary and follows the source cluster's primary. Each side fails
// over (kill -9 of its primary, the other promoted) while messages flow; the
// secondary still ends exactly equal to the source.
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { contents, drFlush, drStatus, mgmt, range, receive, send } from './helpers.js';

let src: TestCluster | undefined;
let sec: TestCluster | undefined;

afterAll(async () => {
  await src?.stopAll();
  await sec?.stopAll();
});

async function cluster(): Promise<TestCluster> {
  // Each side fails over without its old primary coming back: its new primary serves
  // alone, the explicit choice (by default a primary needs a majority of its cluster).
  const c = await TestCluster.start(2, ['--ha-min-ready-backups', '0']);
  const p = await c.promote(0);
  expect(p.code, p.stderr).toBe(0);
  await c.waitState(1, 'ready');
  return c;
}

describe('DR between HA clusters', () => {
  it('DR - fail over the source cluster, then the secondary cluster, during replication: the secondary ends equal', async () => {
    src = await cluster();
    sec = await cluster();
    const [s0, s1] = src.ports;
    const [d0, d1] = sec.ports;
    for (const q of ['ha-mirror', 'ha-log']) await send(s0, q, []);
    await mgmt(d0, 'DR-ADD', { queue: 'ha-mirror', source: src.url, mode: 'enqueue-and-dequeue' });
    await mgmt(d0, 'DR-ADD', { queue: 'ha-log', source: src.url, mode: 'enqueue-only' });
    await send(s0, 'ha-mirror', range('a', 0, 1000));
    await send(s0, 'ha-log', range('a', 0, 1000));
    await receive(s0, 'ha-mirror', 300);
    await drFlush(s0, d0);

    // Source failover while sending: the sender loses its broker part-way.
    const sending = send(s0, 'ha-log', range('b', 0, 3000), { window: 50 }).catch((e: Error) => e);
    await new Promise((r) => setTimeout(r, 300));
    await src.kill(0);
    await sending;
    const promoted = await src.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await src.waitState(1, 'active');
    await send(s1, 'ha-mirror', range('c', 0, 500));
    await receive(s1, 'ha-mirror', 200);
    await drFlush(s1, d0, 20_000).catch(async (err: Error) => {
      throw new Error(`${err.message}\nsec0 HA: ${JSON.stringify(await sec!.status(0))}\nsrc1 HA: ${JSON.stringify(await src!.status(1))}\nsrc1 log: ${src!.brokers[1]?.stdout.split('\n').filter((l) => /"dr"|error|warn/i.test(l)).slice(-8).join('\n')}\nsec0 log: ${sec!.brokers[0]?.stdout.split('\n').filter((l) => /"dr"|error|warn/i.test(l)).slice(-8).join('\n')}`);
    });
    expect((await drStatus(d0)).every((r) => r['connected-to'] === `127.0.0.1:${s1}`)).toBe(true);

    // Secondary failover while sending: the new secondary primary resumes the bridge from the replicated position.
    const sending2 = send(s1, 'ha-log', range('d', 0, 3000), { window: 50 });
    await new Promise((r) => setTimeout(r, 300));
    await sec.kill(0);
    const p2 = await sec.promote(1);
    expect(p2.code, p2.stderr).toBe(0);
    await sending2;
    await send(s1, 'ha-mirror', range('e', 0, 300));
    await receive(s1, 'ha-mirror', 100);
    await waitFor(async () => (await sec!.status(1))?.state === 'active', { timeout: 20_000, name: 'secondary promoted' });
    await drFlush(s1, d1, 60_000).catch((err: Error) => {
      const b = sec!.brokers[1];
      throw new Error(`${err.message}\nsecondary broker 1 (alive ${b?.alive}):\n${b?.stderr.slice(-2000)}\n${b?.stdout.split('\n').filter((l) => /dr|ha"|error|fatal/i.test(l)).slice(-15).join('\n')}`);
    });

    for (const q of ['ha-mirror', 'ha-log']) {
      const want = await contents(s1, q);
      const got = await contents(d1, q);
      expect(got.length, q).toBe(want.length);
      expect(got, q).toEqual(want);
    }
    // Sanity: everything the sender was told about is there.
    const log = (await contents(d1, 'ha-log')) as string[];
    expect(log.slice(0, 1000)).toEqual(range('a', 0, 1000));
    expect(log.filter((b) => b.startsWith('d'))).toEqual(range('d', 0, 3000));
  }, 180_000);
});

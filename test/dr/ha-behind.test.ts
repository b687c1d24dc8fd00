// DR from a 3-broker HA cluster whose primary fails over while the bridge is
// behind: the bridge's link is held (a relay in front of each source broker)
// while the source takes messages, consumption and multi-queue transactions, and
// its ready backups get all of it; the primary is killed -9 and a backup promoted.
// Then the link is let go, and the secondary, killed -9 itself while it applies
// that backlog, restarts and resumes. The secondary must end with exactly the new
// source primary's queues: compared message by message, nothing lost, nothing
// twice, in order, transactions whole. And the mirror image: a secondary that is
// an HA cluster, its primary killed -9 while it applies a backlog, a backup promoted.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { debianPython } from '../helpers/python.js';
import { contents, drFlush, drStatus, mgmt, range, receive, send } from './helpers.js';
import { relay, type Relay } from './relay.js';

const relays: Relay[] = [];

afterAll(async () => {
  for (const r of relays.splice(0)) r.close();
  await killAllBrokers();
});

function txMulti(url: string, a: string, b: string, count: number): Promise<Record<string, string[]>> {
  return new Promise((resolve, reject) => {
    execFile(debianPython, [join(import.meta.dirname, 'py', 'tx_multi.py'), url, a, b, String(count)], { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`tx_multi.py: ${err.message}\n${stderr}`));
      resolve(JSON.parse(stdout.trim().split('\n').at(-1) as string) as Record<string, string[]>);
    });
  });
}

/** Applied position of a queue's copy on the secondary (0 before its first row). */
async function applied(port: number, queue: string): Promise<number> {
  return (await drStatus(port)).find((r) => r.queue === queue)?.['applied-position'] ?? 0;
}

describe('DR from an HA cluster that fails over while the bridge is behind', () => {
  it('DR behind - source primary killed -9 with a backlog the bridge has not copied, the secondary killed -9 while applying it: equal message by message', async () => {
    const src = await TestCluster.ready(3);
    const [s0, s1] = src.ports;
    let sec = await TestBroker.start();
    for (const p of src.ports) relays.push(await relay(p));
    const sourceUrl = relays.map((r) => r.url).join(',');
    for (const q of ['drm', 'drl']) await send(s0!, q, []);
    await mgmt(sec.port, 'DR-ADD', { queue: 'drm', source: sourceUrl, mode: 'enqueue-and-dequeue' });
    await mgmt(sec.port, 'DR-ADD', { queue: 'drl', source: sourceUrl, mode: 'enqueue-only' });
    await send(s0!, 'drm', range('a', 0, 2000));
    await send(s0!, 'drl', range('a', 0, 2000));
    await receive(s0!, 'drm', 500);
    await drFlush(s0!, sec.port);

    // The bridge stalls; the source goes on, and its backups get everything.
    for (const r of relays) r.holdNew();
    await send(s0!, 'drm', range('b', 0, 3000), { window: 200 });
    await send(s0!, 'drl', range('b', 0, 3000), { window: 200 });
    const tx1 = await txMulti(`amqp://${src.address(0)}`, 'drm', 'drl', 30);
    expect(tx1.drm!.length).toBe(60);
    await receive(s0!, 'drm', 700);
    // The consumer's accepts are on the primary and its backups before the kill.
    await waitFor(async () => (await contents(s0!, 'drm')).length === 1500 + 3000 + 60 - 700, { timeout: 20_000, name: 'accepts taken' });
    await src.backupsCaughtUp(0);
    await src.kill(0);
    const promoted = await src.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await src.waitState(1, 'active', 30_000);
    await send(s1!, 'drm', range('c', 0, 1000), { window: 200 });
    await send(s1!, 'drl', range('c', 0, 1000), { window: 200 });
    await txMulti(`amqp://${src.address(1)}`, 'drm', 'drl', 15);
    await receive(s1!, 'drm', 300);

    // Let the bridge go; kill the secondary as soon as it applies part of the backlog.
    // It was behind: nothing of the backlog crossed.
    expect((await contents(sec.port, 'drl')).length).toBe(2000);
    const before = await applied(sec.port, 'drl');
    for (const r of relays) r.release();
    await waitFor(async () => (await applied(sec.port, 'drl')) > before, { timeout: 30_000, interval: 5, name: 'the secondary applies the backlog' });
    await sec.kill();
    sec = await TestBroker.start({ dataDir: sec.dataDir });
    await drFlush(s1!, sec.port, 90_000);

    for (const q of ['drm', 'drl']) {
      const want = await contents(s1!, q);
      const got = await contents(sec.port, q, want.length);
      expect(got.length, q).toBe(want.length);
      expect(got, q).toEqual(want);
    }
    // What the source held, from the publishers' side: the log copy has every message once, in order.
    const log = (await contents(sec.port, 'drl')) as string[];
    expect(log.filter((b) => /^[abc]\d/.test(b))).toEqual([...range('a', 0, 2000), ...range('b', 0, 3000), ...range('c', 0, 1000)]);
    expect(log.filter((b) => b.startsWith('t')).length).toBe((20 + 10) * 3);
  }, 240_000);

  it('DR behind - the secondary cluster primary killed -9 while it applies a backlog of messages and transactions, a backup promoted: it resumes, equal message by message', async () => {
    const src = await TestBroker.start();
    const sec = await TestCluster.ready(3);
    const toSrc = await relay(src.port);
    relays.push(toSrc);
    for (const q of ['sbm', 'sbl']) await send(src.port, q, []);
    await mgmt(sec.ports[0]!, 'DR-ADD', { queue: 'sbm', source: toSrc.url, mode: 'enqueue-and-dequeue' });
    await mgmt(sec.ports[0]!, 'DR-ADD', { queue: 'sbl', source: toSrc.url, mode: 'enqueue-only' });
    await send(src.port, 'sbm', range('a', 0, 1000));
    await send(src.port, 'sbl', range('a', 0, 1000));
    await drFlush(src.port, sec.ports[0]!);

    // A backlog builds up behind a stalled link: messages, consumption, transactions.
    toSrc.holdNew();
    await send(src.port, 'sbm', range('b', 0, 6000), { window: 500 });
    await send(src.port, 'sbl', range('b', 0, 6000), { window: 500 });
    const tx = await txMulti(`amqp://${src.url}`, 'sbm', 'sbl', 60);
    expect(tx.sbl!.length).toBe(40 * 3);
    await receive(src.port, 'sbm', 2500);
    expect((await contents(sec.ports[0]!, 'sbl')).length).toBe(1000);
    const before = await applied(sec.ports[0]!, 'sbl');
    toSrc.release();
    await waitFor(async () => (await applied(sec.ports[0]!, 'sbl')) > before, { timeout: 30_000, interval: 5, name: 'the secondary applies the backlog' });
    await sec.kill(0);
    const promoted = await sec.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await sec.waitState(1, 'active', 30_000);
    await drFlush(src.port, sec.ports[1]!, 90_000);

    for (const q of ['sbm', 'sbl']) {
      const want = await contents(src.port, q);
      const got = await contents(sec.ports[1]!, q, want.length);
      expect(got.length, q).toBe(want.length);
      expect(got, q).toEqual(want);
    }
    const log = (await contents(sec.ports[1]!, 'sbl')) as string[];
    expect(log.filter((b) => /^[ab]\d/.test(b))).toEqual([...range('a', 0, 1000), ...range('b', 0, 6000)]);
    expect(log.filter((b) => b.startsWith('t'))).toEqual(tx.sbl);
  }, 240_000);
});

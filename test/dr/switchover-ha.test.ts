// DR switchover between site A, a 3-broker HA cluster, and site B, one broker,
// while site A fails over in the middle of it: A's primary killed -9 at a random
// point of the switchover (whichever direction), a ready backup promoted, the
// killed broker restarted as a backup. Each switchover must either complete or
// leave both sites as they were, the two sites never both serving, and the queue
// must hold every message once, in order, on the site that serves and on its copy.
import { afterAll, describe, expect, it } from 'vitest';
import { killAllBrokers, TestBroker, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, range, receive, send } from './helpers.js';

afterAll(async () => {
  await killAllBrokers();
});

/** Index of site A's primary (HA state active). */
async function primaryOf(c: TestCluster): Promise<number> {
  return waitFor(
    async () => {
      for (let i = 0; i < c.ports.length; i++) if (c.brokers[i]?.alive && (await c.status(i))?.state === 'active') return i + 1;
      return 0;
    },
    { timeout: 30_000, interval: 200, name: "site A's primary" },
  ).then((i) => i - 1);
}

/** Which site serves the queue (port of its primary) and which holds the copy, at which DR epoch. */
interface Pair {
  source: number;
  copy: number;
  epoch: number;
  aServes: boolean;
}

/** One site serves the queue, the other is its connected passive copy: the pair is settled. */
async function settled(aPort: () => Promise<number>, b: TestBroker, queue: string): Promise<Pair> {
  let seen = '';
  const pair = await waitFor(
    async (): Promise<Pair | undefined> => {
      const a = await aPort();
      const [ra, rb] = await Promise.all([drRowOf(a, queue).catch(() => undefined), drRowOf(b.port, queue).catch(() => undefined)]);
      seen = JSON.stringify([ra, rb]);
      if (!ra || !rb || ra.epoch !== rb.epoch) return undefined;
      if (ra.role === 'passive copy' && rb.role === 'source' && ra.link === 'connected') return { source: b.port, copy: a, epoch: rb.epoch, aServes: false };
      if (rb.role === 'passive copy' && ra.role === 'source' && rb.link === 'connected') return { source: a, copy: b.port, epoch: ra.epoch, aServes: true };
      return undefined;
    },
    { timeout: 90_000, interval: 250, name: `settled DR pair for ${queue}` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; last: ${seen}`);
  });
  return pair!;
}

/** Four switchovers, alternating direction, each with A's primary killed at a random point; run against A, each names every broker of A as the reverse source. */
async function switchoversWithFailovers(): Promise<void> {
  const siteA = await TestCluster.ready(3);
  const b = await TestBroker.start();
  const aPort = async () => siteA.ports[await primaryOf(siteA)]!;
  expect((await tandem(['queue', 'add', 'sw', '--durable', '-b', siteA.address(0)])).code).toBe(0);
  // B reaches A by every broker of A, and A reaches B by its address.
  expect((await tandem(['dr', 'add', 'sw', '--source', siteA.url, '-b', b.url])).code).toBe(0);
  const expected: string[] = [];
  const outcomes: string[] = [];
  let sent = 0;
  for (let round = 0; round < 4; round++) {
    const before = await settled(aPort, b, 'sw');
    const batch = range('s', sent, sent + 300);
    sent += 300;
    await send(before.source, 'sw', batch);
    expected.push(...batch);
    expect(await receive(before.source, 'sw', 50)).toEqual(expected.splice(0, 50));
    await drFlush(before.source, before.copy);
    const aPrimary = await primaryOf(siteA);
    await siteA.backupsCaughtUp(aPrimary);
    const copyAddress = before.aServes ? b.url : `127.0.0.1:${before.copy}`;
    const killAfterMs = Math.floor(Math.random() * 1500);
    // Run against A, it names every broker of A for B to follow (the default, -b, is the one broker).
    const reverse = before.aServes ? [] : ['--reverse-source', siteA.url];
    const cli = tandem(['dr', 'switchover', 'sw', '-b', copyAddress, ...reverse, '--timeout', '10'], { timeoutMs: 90_000 });
    await new Promise((r) => setTimeout(r, killAfterMs)); // a random kill point, not a wait for a condition
    await siteA.kill(aPrimary);
    const next = (aPrimary + 1) % 3;
    const promoted = await siteA.promote(next);
    expect(promoted.code, promoted.stderr).toBe(0);
    await siteA.waitState(next, 'active', 30_000);
    await siteA.startBroker(aPrimary);
    const moved = await cli;
    const after = await settled(aPort, b, 'sw');
    const completed = after.epoch === before.epoch + 1 && after.aServes !== before.aServes;
    const undone = after.epoch === before.epoch && after.aServes === before.aServes;
    outcomes.push(`${before.aServes ? 'A->B' : 'B->A'} with A's primary killed at ${killAfterMs} ms: ${completed ? 'completed' : undone ? 'undone' : 'NEITHER'} (cli ${moved.code}: ${moved.stderr.trim().slice(0, 200)})`);
    expect(completed || undone, outcomes.join('; ')).toBe(true);
    await drFlush(after.source, after.copy, 60_000);
    expect(await contents(after.source, 'sw'), outcomes.join('; ')).toEqual(expected);
    expect(await contents(after.copy, 'sw', expected.length), outcomes.join('; ')).toEqual(expected);
    await siteA.waitState(aPrimary, 'ready', 60_000);
  }
  console.log(`DR switchover HA: ${outcomes.join('; ')}`);
}

describe('DR switchover with a site that fails over during it', () => {
  it('DR switchover HA - site A primary killed -9 at a random point of each switchover, a backup promoted: completed or undone, every message once, in order', async () => {
    await switchoversWithFailovers();
  }, 400_000);

  // Run against site A without --reverse-source: the CLI sends its -b address, one broker
  // of A. B followed that address alone and lost A at its next failover (its copy stayed
  // `connecting` to a backup); the broker now names every broker of A's ha-brokers-url.
  it('DR switchover HA - back to site A with the default reverse source, then a failover of A: B follows the new primary of A', async () => {
    const siteA = await TestCluster.ready(3);
    const b = await TestBroker.start();
    const aPort = async () => siteA.ports[await primaryOf(siteA)]!;
    expect((await tandem(['queue', 'add', 'dflt', '--durable', '-b', siteA.address(0)])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'dflt', '--source', siteA.url, '-b', b.url])).code).toBe(0);
    await send(siteA.ports[0]!, 'dflt', range('d', 0, 100));
    await drFlush(siteA.ports[0]!, b.port);
    const toB = await tandem(['dr', 'switchover', 'dflt', '-b', b.url, '--timeout', '20']);
    expect(toB.code, toB.stderr).toBe(0);
    expect((await settled(aPort, b, 'dflt')).aServes).toBe(false);
    const back = await tandem(['dr', 'switchover', 'dflt', '-b', siteA.address(0), '--timeout', '20']);
    expect(back.code, back.stderr).toBe(0);
    expect((await settled(aPort, b, 'dflt')).aServes).toBe(true);
    await siteA.backupsCaughtUp(0);
    await siteA.kill(0);
    const promoted = await siteA.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await siteA.waitState(1, 'active', 30_000);
    await send(siteA.ports[1]!, 'dflt', range('d', 100, 200));
    const after = await settled(aPort, b, 'dflt');
    expect(after.source).toBe(siteA.ports[1]);
    await drFlush(siteA.ports[1]!, b.port);
    expect(await contents(b.port, 'dflt', 200)).toEqual(range('d', 0, 200));
  }, 240_000);
});

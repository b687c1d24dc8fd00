// `tandem dr activate` run against the secondary while a switchover of the same
// queue waits there for its drain. The secondary reaches the source through a TCP relay
// of the test's, whose DR link is held still (a link that stalls: the source is fenced,
// the drain cannot finish). However the two commands end, the two sites must never
// both serve the queue. Nor may a late unfence from an earlier, abandoned switchover
// run end the run that now holds the fence.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, mgmt, range, send } from './helpers.js';
import { relay } from './relay.js';

describe('DR round trip - activation during a switchover', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR round trip - activate while a switchover drains: the two sites never both serve the queue', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const toA = await relay(a.port);
    // The source reaches this site (its questions on how the switchover ended) through one too.
    const toB = await relay(b.port);
    try {
      expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
      expect((await tandem(['dr', 'add', 'orders', '--source', toA.url, '-b', b.url])).code).toBe(0);
      await send(a.port, 'orders', range('m', 0, 10));
      await drFlush(a.port, b.port);
      // The DR link stalls; the switchover's own requests to the source go through.
      toA.hold();
      const switchover = tandem(['dr', 'switchover', 'orders', '-b', b.url, '--reverse-source', toB.url, '--timeout', '5'], { timeoutMs: 60_000 });
      await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'fenced', { timeout: 30_000, name: 'the source fenced' });
      // And the source cannot ask this site meanwhile.
      toB.holdNew();
      const activate = await tandem(['dr', 'activate', 'orders', '-b', b.url]);
      const moved = await switchover;
      toA.release();
      toB.release();
      await waitFor(async () => (await drRowOf(a.port, 'orders')).role !== 'fenced', { timeout: 30_000, name: 'the fence resolved' });
      const roles = { a: (await drRowOf(a.port, 'orders')).role, b: (await drRowOf(b.port, 'orders')).role };
      const serving = (r: string) => r === 'source' || r === 'activated';
      expect(serving(roles.a) && serving(roles.b), `activate: ${activate.code} ${activate.stderr}; switchover: ${moved.code} ${moved.stderr}; roles ${JSON.stringify(roles)}`).toBe(false);
    } finally {
      toA.close();
      toB.close();
    }
  }, 120_000);

  it('DR round trip - an unfence naming another switchover run leaves the fence of the run that holds it; that run completes', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const toA = await relay(a.port);
    try {
      expect((await tandem(['queue', 'add', 'runs', '--durable', '-b', a.url])).code).toBe(0);
      expect((await tandem(['dr', 'add', 'runs', '--source', toA.url, '-b', b.url])).code).toBe(0);
      await send(a.port, 'runs', range('r', 0, 10));
      await drFlush(a.port, b.port, 30_000, ['runs']);
      const epoch = (await drRowOf(a.port, 'runs')).epoch;
      // The DR link stalls, so this run waits for its drain with the source fenced.
      toA.hold();
      const switchover = tandem(['dr', 'switchover', 'runs', '-b', b.url, '--reverse-source', b.url, '--timeout', '60'], { timeoutMs: 90_000 });
      await waitFor(async () => (await drRowOf(a.port, 'runs')).role === 'fenced', { timeout: 30_000, name: 'the source fenced' });
      // What an earlier run, abandoned at its timeout, would send late: its own run id, the same epoch.
      const late = await mgmt(a.port, 'DR-UNFENCE', { queues: JSON.stringify([{ queue: 'runs', epoch: epoch + 1 }]), run: '00000000-0000-4000-8000-000000000000' });
      expect(late.unfenced).toEqual([]);
      expect((await drRowOf(a.port, 'runs')).role).toBe('fenced');
      toA.release();
      const moved = await switchover;
      expect(moved.code, moved.stderr).toBe(0);
      expect(['source', 'activated']).toContain((await drRowOf(b.port, 'runs')).role);
      await waitFor(async () => (await drRowOf(a.port, 'runs')).role === 'passive copy', { timeout: 30_000, name: 'the old source follows' });
      expect(await contents(b.port, 'runs')).toEqual(range('r', 0, 10));
    } finally {
      toA.close();
    }
  }, 120_000);
});

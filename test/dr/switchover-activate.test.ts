// `tandem dr activate` run against the secondary while a switchover of the same
// queue waits there for its drain. The secondary reaches the source through a TCP relay
// of the test's, whose DR link is held still (a link that stalls: the source is fenced,
// the drain cannot finish). However the two commands end, the two sites must never
// both serve the queue.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, drRowOf, range, send } from './helpers.js';
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
});

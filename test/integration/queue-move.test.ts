// tandem queue move against real tandemd processes: a dead-letter queue replayed to the
// queue its messages came from, over the CLI, a consumer then getting them in order; and
// a move of many durable messages cut short by a kill -9 (or by the failover of an HA
// primary): after it each message is in exactly one of the two queues, none lost, none
// in both, the target holding them in the source's order.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { fill, indexesIn } from '../helpers/queue-contents.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { declareWithDeadLetters, manage, queueDepth, tandem } from '../helpers/tandem-cli.js';

afterAll(async () => {
  await killAllBrokers();
});

/** Where the messages 0..n-1 are after a move from `from` to `to` was cut short: `to` holds a head, `from` the rest, each in order. */
async function splitExactly(port: number, from: string, to: string, n: number): Promise<number> {
  const moved = await indexesIn(port, to, 120_000);
  const left = await indexesIn(port, from, 120_000);
  // Message by message: the target holds 0..k-1 in order, the source k..n-1 in order, so none is lost and none in both.
  const k = moved.length;
  expect(moved.every((index, i) => index === i)).toBe(true);
  expect(left.every((index, i) => index === k + i)).toBe(true);
  expect(k + left.length).toBe(n);
  return k;
}

describe('tandem queue move', () => {
  it('queue move - a dead-letter queue replayed to its source over the CLI: a consumer gets them in order, each once', async () => {
    const broker = await TestBroker.start();
    const b = ['-b', `127.0.0.1:${broker.port}`];
    await declareWithDeadLetters(broker.port, 'orders');
    const client = await TestClient.connect({ port: broker.port });
    try {
      await client.send('orders', Array.from({ length: 30 }, (_, i) => ({ body: `m${i}`, durable: true })));
      // A consumer rejects every one: each goes to orders.dlq, in order.
      const r = await client.openReceiver('orders');
      r.receiver.add_credit(30);
      for (const got of await r.next(30)) got.delivery.reject();
      await r.close();
      await waitFor(async () => (await queueDepth(broker.port, 'orders.dlq')) === 30, { name: 'dead-lettered' });

      const some = await tandem(['queue', 'move', 'orders.dlq', 'orders', '--count', '10', ...b]);
      expect(some.code, some.stderr).toBe(0);
      expect(some.stdout.trim()).toBe("10 messages moved from 'orders.dlq' to 'orders'");
      const rest = await tandem(['queue', 'move', 'orders.dlq', 'orders', '--json', ...b]);
      expect(rest.code, rest.stderr).toBe(0);
      expect(JSON.parse(rest.stdout)).toEqual({ name: 'orders.dlq', to: 'orders', moved: 20 });
      expect(await queueDepth(broker.port, 'orders.dlq')).toBe(0);
      // Audited, naming both queues.
      const audit = broker.stderr.split('\n').filter((l) => l.includes('"audit":true') && l.includes('"operation":"MOVE"'));
      expect(audit).toHaveLength(2);
      expect(JSON.parse(audit[0]!)).toMatchObject({ name: 'orders.dlq', to: 'orders', msg: expect.stringMatching(/^audit: MOVE queue 'orders\.dlq' to 'orders' by /) });

      const back = await client.receiveAndAccept('orders', 30);
      expect(back.map((m) => bodyOf(m))).toEqual(Array.from({ length: 30 }, (_, i) => `m${i}`));
      expect(await queueDepth(broker.port, 'orders')).toBe(0);

      // Unknown queues: exit 4, as elsewhere; a queue moved to itself: exit 2.
      const unknownTo = await tandem(['queue', 'move', 'orders.dlq', 'nowhere', ...b]);
      expect(unknownTo.code).toBe(4);
      expect(unknownTo.stderr).toContain("queue 'nowhere' does not exist");
      expect((await tandem(['queue', 'move', 'nowhere', 'orders', ...b])).code).toBe(4);
      const itself = await tandem(['queue', 'move', 'orders', 'orders', ...b]);
      expect(itself.code).toBe(2);
      expect(itself.stderr).toContain("queue 'orders' cannot be moved to itself");
    } finally {
      await client.close();
      await broker.stop();
      broker.cleanup();
    }
  }, 60_000);

  it('queue move - tandemd killed -9 in the middle of a move of 120,000 durable messages: after a restart each is in exactly one of the two queues, in order', async () => {
    const N = 120_000;
    const first = await TestBroker.start();
    await manage(first.port, 'CREATE', 'queue', 'big.dlq', { durable: true });
    await manage(first.port, 'CREATE', 'queue', 'big', { durable: true });
    await fill(first.port, 'big.dlq', N, {}, 'p');
    const moving = manage(first.port, 'MOVE', 'queue', 'big.dlq', { to: 'big' }).catch((err: Error) => err);
    await waitFor(async () => (await queueDepth(first.port, 'big')) > 5000, { timeout: 60_000, interval: 10, name: 'move under way' });
    await first.kill();
    expect(await moving).toBeInstanceOf(Error);
    const again = await TestBroker.start({ dataDir: first.dataDir });
    try {
      const k = await splitExactly(again.port, 'big.dlq', 'big', N);
      expect(k).toBeGreaterThan(5000);
      expect(k).toBeLessThan(N);
    } finally {
      await again.stop();
      first.cleanup();
    }
  }, 300_000);

  it('queue move - HA primary killed mid-move: on the new primary each message is in exactly one of the two queues, in order', async () => {
    const c = await TestCluster.ready(3);
    try {
      const N = 30_000;
      await manage(c.ports[0]!, 'CREATE', 'queue', 'ha.dlq', { durable: true });
      await manage(c.ports[0]!, 'CREATE', 'queue', 'ha', { durable: true });
      await fill(c.ports[0]!, 'ha.dlq', N);
      await c.backupsCaughtUp(0);
      const moving = manage(c.ports[0]!, 'MOVE', 'queue', 'ha.dlq', { to: 'ha' }).catch((err: Error) => err);
      await waitFor(async () => (await queueDepth(c.ports[0]!, 'ha')) > 500, { timeout: 30_000, interval: 10, name: 'move under way' });
      await c.kill(0);
      await moving;
      const next = await promoteFurtherAhead(c);
      const k = await splitExactly(c.ports[next]!, 'ha.dlq', 'ha', N);
      // Cut short: the failover came in the middle of the move.
      expect(k).toBeLessThan(N);
    } finally {
      await c.stopAll();
    }
  }, 120_000);
});

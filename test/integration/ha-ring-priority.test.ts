// A priority ring queue (max-count, policy ring, 10 priorities) across kill -9 of the
// primary and a promotion: the new primary holds what the old one held, in priority
// order, and goes on evicting as the old one would have. The yardstick is a standalone
// broker fed the same messages and consumer moves: its queue must equal the cluster's.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { TestClient, browseBodies } from '../helpers/rhea-client.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';
import { prng } from '../../src/util/prng.js';

const QUEUE = 'pr';

async function send(port: number, from: number, priorities: number[]): Promise<void> {
  const client = await TestClient.connect({ port });
  try {
    const outcomes = await client.send(
      QUEUE,
      priorities.map((priority, k) => ({ body: `${from + k}:p${priority}`, priority, durable: true })),
      { timeoutMs: 30_000 },
    );
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
  } finally {
    await client.close();
  }
}

async function contents(port: number): Promise<string[]> {
  return browseBodies(port, QUEUE, await queueDepth(port, QUEUE));
}

describe('ha - priority ring queue across failover', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('ha ring priority - after kill -9 and promotion the queue equals a standalone broker fed the same, before and after more evictions', async () => {
    const random = prng(77);
    const batch = (n: number) => Array.from({ length: n }, () => Math.floor(random() * 10));
    const c = await TestCluster.ready(3);
    const reference = await TestBroker.start();
    const declare = { durable: true, 'max-count': '40', policy: 'ring', priorities: '10' };
    await manage(c.ports[0]!, 'CREATE', 'queue', QUEUE, declare);
    await manage(reference.port, 'CREATE', 'queue', QUEUE, declare);

    const a = batch(100);
    await send(c.ports[0]!, 0, a);
    await send(reference.port, 0, a);
    // A consumer holds the 5 it is given (never evicted while held), on both.
    const holders = await Promise.all([c.ports[0]!, reference.port].map((port) => TestClient.connect({ port })));
    const held = await Promise.all(
      holders.map(async (h) => {
        const r = await h.openReceiver(QUEUE);
        r.receiver.add_credit(5);
        return (await r.next(5)).map((g) => String(g.message.body));
      }),
    );
    expect(held[0]).toEqual(held[1]);
    const b = batch(60);
    await send(c.ports[0]!, 100, b);
    await send(reference.port, 100, b);
    await c.backupsCaughtUp(0);

    await c.kill(0);
    const next = await promoteFurtherAhead(c);
    // The reference's consumer goes too: its 5 are back, as on the new primary.
    holders[1]!.destroy();
    await expectSame(c.ports[next]!, reference.port);

    const more = batch(60);
    await send(c.ports[next]!, 160, more);
    await send(reference.port, 160, more);
    await expectSame(c.ports[next]!, reference.port);
    holders[0]!.destroy();
  }, 120_000);
});

async function expectSame(cluster: number, reference: number): Promise<void> {
  // The reference's released messages are back once its depth counts them available.
  const want = await contents(reference);
  expect(want.length).toBe(40);
  expect(await contents(cluster)).toEqual(want);
}

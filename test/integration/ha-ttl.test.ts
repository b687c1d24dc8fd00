// Messages with a ttl or an absolute-expiry-time on a queue with a dead-letter queue,
// the primary killed -9 before they expire and a backup promoted after: a consumer that
// attaches at once is given none of them, each has its one dead letter, and a message
// the old primary delivered is rejected on the new one into the dead-letter queue once.
import { afterAll, describe, expect, it } from 'vitest';
import { killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { TestClient, browseBodies } from '../helpers/rhea-client.js';
import { declareWithDeadLetters, queueDepth } from '../helpers/tandem-cli.js';

describe('ha - ttl and dead letters across failover', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('ha ttl - expired before the promotion: none delivered by the new primary, each dead-lettered once; a rejected one once', async () => {
    const c = await TestCluster.ready(3);
    await declareWithDeadLetters(c.ports[0]!, 't');
    const due = Date.now() + 2000;
    const messages = [{ body: 'r', durable: true }];
    for (let i = 0; i < 10; i++) {
      messages.push(
        { body: `ttl-${i}`, durable: true, ttl: 2000 } as (typeof messages)[number],
        { body: `abs-${i}`, durable: true, absolute_expiry_time: new Date(due) } as (typeof messages)[number],
        { body: `live-${i}`, durable: true },
      );
    }
    const first = await TestClient.connect({ port: c.ports[0]! });
    expect((await first.send('t', messages)).every((o) => o.state === 'accepted')).toBe(true);
    // Delivered (not settled) by the old primary: it comes again from the new one.
    const r = await first.openReceiver('t');
    r.receiver.add_credit(1);
    expect(String((await r.next(1))[0]!.message.body)).toBe('r');
    await c.kill(0);
    first.destroy();
    // Past every expiry before a broker serves the queue again.
    await waitFor(() => Date.now() > due + 500, { timeout: 5000, name: 'past the expiry' });
    const next = await promoteFurtherAhead(c);

    const after = await TestClient.connect({ port: c.ports[next]! });
    try {
      const rr = await after.openReceiver('t');
      rr.receiver.add_credit(100);
      const got = await rr.next(11);
      expect(got.map((g) => String(g.message.body))).toEqual(['r', ...Array.from({ length: 10 }, (_, i) => `live-${i}`)]);
      for (const g of got.slice(1)) g.delivery.accept();
      expect(await rr.drainFor(300)).toEqual([]);
      // Apart from the accepts: rhea 3.0.5 sends a delivery settled next to a single one
      // of another outcome in that one's disposition range (write_dispositions).
      got[0]!.delivery.reject();
    } finally {
      await after.close();
    }
    const np = c.ports[next]!;
    await waitFor(async () => (await queueDepth(np, 't.dlq')) >= 21, { timeout: 10_000, name: 'dead letters' });
    const dead = (await browseBodies(np, 't.dlq', await queueDepth(np, 't.dlq'))).sort();
    const want = ['r', ...Array.from({ length: 10 }, (_, i) => [`abs-${i}`, `ttl-${i}`]).flat()].sort();
    expect(dead).toEqual(want);
    expect(await queueDepth(np, 't')).toBe(0);
  }, 120_000);
});

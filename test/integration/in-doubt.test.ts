// Messages in doubt come back marked redelivered: what a broker holds when it becomes the
// one serving it (a restart from its journal, a backup promoted after kill -9 of the
// primary or in a planned move) may have been delivered, unsettled, to a consumer that
// processed it, and delivery counts are neither journaled nor replicated. Its first
// delivery from then on carries a delivery-count one higher (JMSRedelivered,
// JMSXDeliveryCount 2); a message sent afterwards does not; a delivery that fails adds
// on top as always, and the doubt is not counted twice.
import rhea from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { TestClient, bodyOf, type Received } from '../helpers/rhea-client.js';
import { queueDepth } from '../helpers/tandem-cli.js';

afterEach(async () => {
  await killAllBrokers();
});

/** body:delivery-count of each, as the client got them (an absent header is count 0). */
const counts = (got: Received[]): string[] => got.map((g) => `${String(bodyOf(g.message))}:${g.message.delivery_count ?? 0}`);

/** Lets a disposition reach the broker before the link's close. */
const turn = () => new Promise((resolve) => setTimeout(resolve, 20));

describe('messages in doubt', () => {
  it('in doubt - after kill -9 and a restart, every message the journal held is delivered with delivery-count 1, once; one sent after with 0', async () => {
    const first = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'doubt', '--durable', '-b', first.url])).code).toBe(0);
    const client = await TestClient.connect({ port: first.port });
    await client.send('doubt', ['out-1', 'out-2', 'held'].map((body) => ({ body, durable: true })));
    const consumer = await client.openReceiver('doubt');
    consumer.receiver.add_credit(2);
    // Delivered, never settled: the consumer may have processed them when the broker died.
    expect(counts(await consumer.next(2))).toEqual(['out-1:0', 'out-2:0']);
    await first.kill();
    client.destroy();

    const again = await TestBroker.start({ dataDir: first.dataDir });
    const after = await TestClient.connect({ port: again.port });
    try {
      await after.send('doubt', [{ body: 'new', durable: true }]);
      // A browser sees what a consumer would get, and takes nothing.
      const browsed = await after.openReceiver({ address: 'doubt', distribution_mode: 'copy' });
      browsed.receiver.add_credit(4);
      expect(counts(await browsed.next(4))).toEqual(['out-1:1', 'out-2:1', 'held:1', 'new:0']);
      await browsed.close();
      // A selector reads that count (JMSRedelivered).
      const selected = await after.openReceiver({ address: 'doubt', filter: rhea.filter.selector('JMSRedelivered = TRUE') });
      selected.receiver.add_credit(10);
      const old = await selected.next(3);
      expect(counts(old)).toEqual(['out-1:1', 'out-2:1', 'held:1']);
      expect(await selected.drainFor(200)).toEqual([]);
      // One accepted; the link's close gives the others back delivery-failed: counted on top, the doubt not again.
      old[2]!.delivery.accept();
      await turn();
      await selected.close();
      const plain = await after.openReceiver('doubt');
      plain.receiver.add_credit(10);
      const rest = await plain.next(3);
      expect(counts(rest)).toEqual(['out-1:2', 'out-2:2', 'new:0']);
      for (const g of rest) g.delivery.accept();
    } finally {
      await after.close();
    }
  });

  it('in doubt - kill -9 of the primary: the promoted backup delivers what the old one held with delivery-count 1, a message sent after the promotion with 0', async () => {
    const c = await TestCluster.ready(3);
    expect((await tandem(['queue', 'add', 'ha.doubt', '--durable', '-b', c.address(0)])).code).toBe(0);
    const client = await TestClient.connect({ port: c.ports[0] });
    await client.send('ha.doubt', ['out-1', 'out-2', 'held'].map((body) => ({ body, durable: true })));
    const consumer = await client.openReceiver('ha.doubt');
    consumer.receiver.add_credit(2);
    expect(counts(await consumer.next(2))).toEqual(['out-1:0', 'out-2:0']);
    await c.backupsCaughtUp(0);
    await c.kill(0);
    client.destroy();
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);

    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      await after.send('ha.doubt', [{ body: 'new', durable: true }]);
      const r = await after.openReceiver('ha.doubt');
      r.receiver.add_credit(10);
      const got = await r.next(4, 20_000);
      expect(counts(got)).toEqual(['out-1:1', 'out-2:1', 'held:1', 'new:0']);
      for (const g of got) g.delivery.accept();
    } finally {
      await after.close();
    }
  });

  it('in doubt - a planned move (the primary stopped cleanly, then a ready backup promoted): what the old primary held comes back with delivery-count 1, once; what it had settled does not; a message sent after the move with 0', async () => {
    // A short shutdown-timeout: the stop waits that long for the deliveries the consumer keeps unsettled.
    const c = await TestCluster.ready(3, ['--shutdown-timeout', '1s']);
    expect((await tandem(['queue', 'add', 'ha.move', '--durable', '-b', c.address(0)])).code).toBe(0);
    const client = await TestClient.connect({ port: c.ports[0] });
    await client.send('ha.move', ['done', 'out-1', 'out-2', 'held'].map((body) => ({ body, durable: true })));
    const consumer = await client.openReceiver('ha.move');
    consumer.receiver.add_credit(3);
    const out = await consumer.next(3);
    expect(counts(out)).toEqual(['done:0', 'out-1:0', 'out-2:0']);
    out[0]!.delivery.accept();
    await waitFor(async () => (await queueDepth(c.ports[0]!, 'ha.move')) === 3, { timeout: 10_000, interval: 50, name: 'done accepted' });
    // The move, as a cluster manager makes it: a promotion is refused while a primary is
    // alive, so the old one is demoted (a clean stop) first, with out-1 and out-2 still held.
    expect((await c.promote(1)).stderr).toMatch(/is already the primary/);
    expect(await c.brokers[0]!.stop()).toBe(0);
    client.destroy();
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);

    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      await after.send('ha.move', [{ body: 'new', durable: true }]);
      const r = await after.openReceiver('ha.move');
      r.receiver.add_credit(10);
      const got = await r.next(4, 20_000);
      expect(counts(got)).toEqual(['out-1:1', 'out-2:1', 'held:1', 'new:0']);
      expect(await r.drainFor(300), 'done was settled before the move, and nothing comes twice').toEqual([]);
      for (const g of got) g.delivery.accept();
    } finally {
      await after.close();
    }
  });
});

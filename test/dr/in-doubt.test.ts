// After `tandem dr activate`, what the copy held is in doubt: the source site's consumers
// may have had those messages, unsettled, when the site was lost, and delivery counts do
// not cross. Each is delivered with its delivery-count one higher (JMSRedelivered); a
// message sent to the activated queue afterwards is not, and neither is another queue's.
// A message held until well after the activation (x-opt-delivery-time) that expires while
// held goes on as a dead letter with the count it had: its release would not have counted
// it either (on the old code its dead letter came out redelivered).
import { describe, expect, it } from 'vitest';
import type { TestBroker } from '../helpers/broker.js';
import { TestClient, bodyOf, type Received } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { waitFor } from '../helpers/broker.js';
import { declareOrdersWithDeadLetters, depthOf, drFlush, send, twoSites } from './helpers.js';

const counts = (got: Received[]): string[] => got.map((g) => `${String(bodyOf(g.message))}:${g.message.delivery_count ?? 0}`);

async function take(port: number, queue: string, n: number, timeoutMs?: number): Promise<string[]> {
  const client = await TestClient.connect({ port });
  try {
    const r = await client.openReceiver(queue);
    r.receiver.add_credit(n + 5);
    const got = await r.next(n, timeoutMs);
    for (const g of got) g.delivery.accept();
    expect(await r.drainFor(200)).toEqual([]);
    return counts(got);
  } finally {
    await client.close();
  }
}

describe('DR activation: messages in doubt', () => {
  let a: TestBroker;
  let b: TestBroker;
  twoSites((siteA, siteB) => {
    a = siteA;
    b = siteB;
  });

  it('DR in doubt - the activated copy delivers what it held with delivery-count 1, a message sent after the activation with 0', async () => {
    for (const q of ['orders', 'local']) expect((await tandem(['queue', 'add', q, '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['queue', 'add', 'local', '--durable', '-b', b.url])).code).toBe(0);
    const added = await tandem(['dr', 'add', 'orders', '--source', a.url, '--mode', 'enqueue-and-dequeue', '-b', b.url]);
    expect(added.code, added.stderr).toBe(0);
    await send(a.port, 'orders', ['out', 'held'], { durable: true });
    // Site A's consumer has the first, unsettled, when site A is lost.
    const consumer = await TestClient.connect({ port: a.port });
    const r = await consumer.openReceiver('orders');
    r.receiver.add_credit(1);
    expect(counts(await r.next(1))).toEqual(['out:0']);
    await drFlush(a.port, b.port);
    await send(b.port, 'local', ['mine'], { durable: true });
    await a.kill();
    consumer.destroy();

    const activated = await tandem(['dr', 'activate', 'orders', '-b', b.url]);
    expect(activated.code, activated.stderr).toBe(0);
    await send(b.port, 'orders', ['new'], { durable: true });
    expect(await take(b.port, 'orders', 3)).toEqual(['out:1', 'held:1', 'new:0']);
    // Not a queue the activation left alone.
    expect(await take(b.port, 'local', 1)).toEqual(['mine:0']);
  });
});

describe('DR activation: held messages in doubt', () => {
  let a: TestBroker;
  let b: TestBroker;
  twoSites((siteA, siteB) => {
    a = siteA;
    b = siteB;
  });

  it("DR in doubt - a message held past the activation and expired while held goes on as a dead letter not counted as delivered, as its release would not have been", async () => {
    await declareOrdersWithDeadLetters(a.url);
    for (const q of ['orders', 'orders.dead']) {
      const added = await tandem(['dr', 'add', q, '--source', a.url, '-b', b.url]);
      expect(added.code, added.stderr).toBe(0);
    }
    const client = await TestClient.connect({ port: a.port });
    // Both expire at the copy after its activation: one may have been with a consumer at
    // the source (in doubt: counted), the other was held there until a time nobody reached
    // (more than MARK_CLOCK_SKEW_MS, 10 s, after the activation). Its dead letter keeps that
    // time, and is held on orders.dead until then.
    const heldUntil = Date.now() + 20_000;
    const sent = await client.send('orders', [
      { body: 'plain', durable: true, ttl: 4000 },
      { body: 'held', durable: true, ttl: 4000, message_annotations: { 'x-opt-delivery-time': heldUntil } },
    ]);
    expect(sent.map((o) => o.state)).toEqual(['accepted', 'accepted']);
    await client.close();
    await drFlush(a.port, b.port);
    await a.kill();
    const activated = await tandem(['dr', 'activate', '--all', '-b', b.url]);
    expect(activated.code, activated.stderr).toBe(0);
    expect(Date.now()).toBeLessThan(heldUntil - 12_000);
    await waitFor(async () => (await depthOf(b.port, 'orders.dead')) === 2, { name: 'both dead-lettered at the copy', timeout: 20_000 });
    // Old code: held:1, JMSRedelivered for a message no consumer can have had.
    expect((await take(b.port, 'orders.dead', 2, 30_000)).sort()).toEqual(['held:0', 'plain:1']);
  });
});

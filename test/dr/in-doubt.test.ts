// After `tandem dr activate`, what the copy held is in doubt: the source site's consumers
// may have had those messages, unsettled, when the site was lost, and delivery counts do
// not cross. Each is delivered with its delivery-count one higher (JMSRedelivered); a
// message sent to the activated queue afterwards is not, and neither is another queue's.
import { describe, expect, it } from 'vitest';
import type { TestBroker } from '../helpers/broker.js';
import { TestClient, bodyOf, type Received } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, send, twoSites } from './helpers.js';

const counts = (got: Received[]): string[] => got.map((g) => `${String(bodyOf(g.message))}:${g.message.delivery_count ?? 0}`);

async function take(port: number, queue: string, n: number): Promise<string[]> {
  const client = await TestClient.connect({ port });
  try {
    const r = await client.openReceiver(queue);
    r.receiver.add_credit(n + 5);
    const got = await r.next(n);
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

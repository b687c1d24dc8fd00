// A consumer that names a subscription by its link name alone (no source address:
// how qpid-jms finds a durable subscription again) is held to what any consumer is:
// an HA backup takes no consumer, even from an admin connection it admits.
import { afterAll, describe, expect, it } from 'vitest';
import { AmqpClient, AmqpClientError } from '../../src/amqp/engine/client.js';
import { terminus } from '../../src/amqp/engine/link.js';
import { encodeMessage, fieldsValue } from '../../src/amqp/engine/message.js';
import { subscriptionQueue } from '../../src/amqp/subscriptions.js';
import { waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';

let cluster: TestCluster | undefined;

afterAll(async () => {
  await cluster?.stopAll();
});

async function depthOn(c: TestCluster, i: number, queue: string): Promise<number | undefined> {
  const r = await tandem(['queue', 'list', '--json', '-b', c.address(i)]);
  if (r.code !== 0) return undefined;
  return (JSON.parse(r.stdout) as Array<{ name: string; depth: number }>).find((q) => q.name === queue)?.depth;
}

describe('consumer on an HA backup', () => {
  it('ha - attaching to a durable subscription by its name alone is refused on a backup, as an attach with an address is; the backup keeps its copy', async () => {
    cluster = await TestCluster.start(2);
    const c = cluster;
    expect((await c.promote(0)).code).toBe(0);
    await c.waitState(1, 'ready');

    const containerId = 'jms-client-1';
    const sub = subscriptionQueue('news-sub', containerId, false, false);
    const primary = await AmqpClient.connect({ host: '127.0.0.1', port: c.ports[0]!, sasl: false, containerId });
    const session = await primary.openSession();
    await primary.openReceiver(session, undefined, { name: 'news-sub', source: terminus('source', { address: 'amq.topic/news', durable: 2, expiryPolicy: 'never' }) });
    // Closed without a detach: the subscription stays (a JMS client that went away).
    await primary.close();
    const publisher = await AmqpClient.connect({ host: '127.0.0.1', port: c.ports[0]!, sasl: false });
    const sender = await publisher.openSender(await publisher.openSession(), 'amq.topic/news');
    expect((await publisher.send(sender, encodeMessage({ body: 'headline' })))?.def.name).toBe('accepted');
    await publisher.close();
    await waitFor(async () => (await depthOn(c, 1, sub)) === 1, { name: 'subscription replicated to the backup', timeout: 20_000 });

    // The same client id, on the backup, as an admin connection (which a backup admits).
    const admin = await AmqpClient.connect({ host: '127.0.0.1', port: c.ports[1]!, sasl: false, containerId, properties: fieldsValue({ 'qpid.ha-admin': true }) });
    const err = await admin
      .openReceiver(await admin.openSession(), undefined, { name: 'news-sub', source: terminus('source', {}) })
      .then(
        (link) => {
          admin.receive(link, 10, (d) => d.accept());
          return undefined;
        },
        (e: unknown) => e,
      );
    // Taken, the backup would hand the message out and drop it on the accept: a copy the primary still has.
    await new Promise((r) => setTimeout(r, 500));
    expect({ backup: await depthOn(c, 1, sub), primary: await depthOn(c, 0, sub) }).toEqual({ backup: 1, primary: 1 });
    expect(err, 'the attach was taken by a backup').toBeInstanceOf(AmqpClientError);
    expect((err as Error).message).toMatch(/backup/);
    await admin.close();
  });
});

// A dead letter on an activated DR copy is routed by the key its message was routed by
// at the source: a message sent there to `ex/k1` with subject `s` is kept in its record
// with the key (src/broker/routed-by.ts), the record the DR stream carries as it is, so
// rejected on the activated copy it goes through the copied alternate exchange (a topic
// exchange) to the site's queue bound by `k1`, not to the one bound by its subject `s`.
// On the old code the copy's record kept only the subject, and it went to `s`.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { depthOf, drFlush, send } from './helpers.js';

async function run(url: string, ...args: string[]): Promise<void> {
  const r = await tandem([...args, '-b', url]);
  expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
}

describe('DR - the routing key of a dead letter', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR dead letters - a message sent to ex/k1 at the source, rejected on the activated copy, goes by k1, not by its subject', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    await run(a.url, 'exchange', 'add', 'topic', 'orders.dlx', '--durable');
    await run(a.url, 'exchange', 'add', 'direct', 'ex', '--durable');
    await run(a.url, 'queue', 'add', 'orders', '--durable', '--alternate-exchange', 'orders.dlx');
    await run(a.url, 'bind', 'ex', 'orders', 'k1');
    await run(b.url, 'dr', 'add', 'orders', '--source', a.url);
    await send(a.port, 'ex/k1', ['o0'], { subject: 's' });
    await drFlush(a.port, b.port);
    // The site's own dead-letter queues, on the alternate exchange the copy brought.
    for (const key of ['k1', 's']) {
      await run(b.url, 'queue', 'add', `dead.${key}`, '--durable');
      await run(b.url, 'bind', 'orders.dlx', `dead.${key}`, key);
    }
    await run(b.url, 'dr', 'activate', 'orders', '--keep-source-serving');

    const c = await TestClient.connect({ port: b.port });
    const r = await c.openReceiver('orders');
    r.receiver.add_credit(1);
    const [got] = await r.next(1);
    expect(bodyOf(got!.message)).toBe('o0');
    expect(got!.message.subject).toBe('s');
    got!.delivery.reject({ condition: 'test:rejected', description: 'rejected by the test' });
    await r.close();
    await c.close();
    await waitFor(async () => (await depthOf(b.port, 'dead.k1')) + (await depthOf(b.port, 'dead.s')) === 1, { name: 'the dead letter routed' });
    expect(await depthOf(b.port, 'dead.k1')).toBe(1);
    expect(await depthOf(b.port, 'dead.s')).toBe(0);
  });
});

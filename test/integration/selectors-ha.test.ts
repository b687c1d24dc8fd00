// A queue consumer's selector belongs to the consumer: nothing of it is replicated.
// After kill -9 of the primary and the promotion of a backup, a consumer attaching
// again with its selector gets the selected messages the new primary holds, in order,
// and the others stay for a plain consumer. A durable topic subscription's selector is
// one of its queue's settings, replicated with it: the new primary goes on selecting.
import rhea, { type Message } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

let cluster: TestCluster | undefined;

async function depthOn(c: TestCluster, i: number, queue: string): Promise<number | undefined> {
  const r = await tandem(['queue', 'list', '--json', '-b', c.address(i)]);
  if (r.code !== 0) return undefined;
  return (JSON.parse(r.stdout) as Array<{ name: string; depth: number }>).find((q) => q.name === queue)?.depth;
}

afterAll(async () => {
  await cluster?.stopAll();
});

describe('selectors across a failover', () => {
  it('ha - after kill -9 of the primary and promotion, a consumer with a selector gets the right messages from the new primary', async () => {
    // Settling alone once the other is gone (the publishes after the failover).
    cluster = await TestCluster.ready(2, ['--auto-create', 'yes', '--ha-min-ready-backups', '0']);
    const c = cluster;
    const colours = ['blue', 'red', 'blue', 'red', 'blue', 'red'];
    const messages: Message[] = colours.map((colour, i) => ({ body: `${i}-${colour}`, durable: true, application_properties: { colour } }));
    const first = await TestClient.connect({ port: c.ports[0]! });
    await first.send('sel.ha', messages);
    // A durable subscription with a selector, left without a detach (a JMS client gone away).
    const subscriber = await TestClient.connect({ port: c.ports[0]!, container_id: 'ha-app' });
    await subscriber.openReceiver({ address: 'amq.topic/sel.ha', durable: 2, expiry_policy: 'never', filter: rhea.filter.selector("colour = 'blue'") }, { name: 'blues' });
    subscriber.destroy();
    await first.send('amq.topic/sel.ha', messages.slice(0, 2));
    const blue = await first.openReceiver({ address: 'sel.ha', filter: rhea.filter.selector("colour = 'blue'") });
    blue.receiver.add_credit(1);
    const [one] = await blue.next(1);
    expect(bodyOf(one!.message)).toBe('0-blue');
    one!.delivery.accept();
    // The acceptance is on the primary, then on its backup, before the kill.
    await waitFor(async () => (await depthOn(c, 0, 'sel.ha')) === 5, { name: 'the accepted message dequeued', timeout: 20_000 });
    await c.backupsCaughtUp(0);
    first.destroy();

    await c.kill(0);
    expect((await c.promote(1)).code).toBe(0);
    const again = await TestClient.connect({ port: c.ports[1]! });
    const blueAgain = await again.openReceiver({ address: 'sel.ha', filter: rhea.filter.selector("colour = 'blue'") });
    blueAgain.receiver.add_credit(10);
    const got = await blueAgain.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['2-blue', '4-blue']);
    for (const g of got) g.delivery.accept();
    expect(await blueAgain.drainFor(300)).toEqual([]);
    expect((await again.receiveAndAccept('sel.ha', 3)).map(bodyOf)).toEqual(['1-red', '3-red', '5-red']);
    // The subscription's selector came with its queue: the new primary routes by it.
    await again.send('amq.topic/sel.ha', messages.slice(2));
    const sub = await TestClient.connect({ port: c.ports[1]!, container_id: 'ha-app' });
    const r = await sub.openReceiver({ address: 'amq.topic/sel.ha', durable: 2, expiry_policy: 'never', filter: rhea.filter.selector("colour = 'blue'") }, { name: 'blues' });
    r.receiver.add_credit(10);
    expect((await r.next(3)).map((g) => bodyOf(g.message))).toEqual(['0-blue', '2-blue', '4-blue']);
    expect(await r.drainFor(300)).toEqual([]);
    expect(await depthOn(c, 1, 'sub:ha-app:blues')).toBe(3);
    await sub.close();
    await again.close();
  });
});

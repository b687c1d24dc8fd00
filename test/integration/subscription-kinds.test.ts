// A durable subscription is shared or not, and JMS 2.0 says the two kinds may not have
// the same name and clientID (container-id). Both kinds name one queue, which records
// the kind that made it: the other kind is refused while the subscription is attached
// or not, on a promoted HA backup as on the primary; a queue that records no kind (made
// before kinds were recorded) takes either, as it always did. qpid-jms itself, and a
// restart, are in test/jms/subscription-kinds.test.ts.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { ClientError, TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const unshared = (address: string) => ({ address, durable: 2, expiry_policy: 'never' });
const shared = (address: string) => ({ ...unshared(address), capabilities: ['shared'] });

/** What an attach of `name` with `source` by container `id` on `port` came to: 'opened' (then dropped, so the subscription stays) or the refusal. */
async function attach(port: number, id: string, name: string, source: Record<string, unknown>): Promise<string | { condition?: string; description?: string }> {
  const client = await TestClient.connect({ port, container_id: id });
  try {
    await client.openReceiver(source, { name });
    return 'opened';
  } catch (err) {
    if (!(err instanceof ClientError)) throw err;
    return { condition: err.condition, description: err.description };
  } finally {
    // A close without detaching the link: a durable subscription outlives it.
    await client.close();
  }
}

const refusedAsUnshared = (name: string, id: string) => ({
  condition: 'amqp:resource-locked',
  description: `a durable subscription that is not shared named '${name}' already exists for clientID '${id}', so a shared one cannot have that name; unsubscribe it first, or pick another name`,
});
const refusedAsShared = (name: string, id: string) => ({
  condition: 'amqp:resource-locked',
  description: `a shared durable subscription named '${name}' already exists for clientID '${id}', so one that is not shared cannot have that name; unsubscribe it first, or pick another name`,
});

afterAll(async () => {
  await killAllBrokers();
});

describe('subscription kinds on one broker', () => {
  it('subscription kinds - the other kind is refused while the subscription has a consumer, and that consumer carries on', async () => {
    const broker = await TestBroker.start();
    const holder = await TestClient.connect({ port: broker.port, container_id: 'kinds-app' });
    const one = await holder.openReceiver(unshared('amq.topic/kinds.one'), { name: 'one' });
    const two = await holder.openReceiver(shared('amq.topic/kinds.two'), { name: 'two' });
    expect(await attach(broker.port, 'kinds-app', 'one', shared('amq.topic/kinds.one'))).toEqual(refusedAsUnshared('one', 'kinds-app'));
    expect(await attach(broker.port, 'kinds-app', 'two', unshared('amq.topic/kinds.two'))).toEqual(refusedAsShared('two', 'kinds-app'));
    // Another topic is no way round it: the subscription is not replaced by the other kind.
    expect(await attach(broker.port, 'kinds-app', 'two', unshared('amq.topic/kinds.elsewhere'))).toEqual(refusedAsShared('two', 'kinds-app'));
    // Management shows the kind of each.
    expect(await manage(broker.port, 'READ', 'queue', 'sub:kinds-app:one')).toMatchObject({ subscription: 'unshared' });
    expect(await manage(broker.port, 'READ', 'queue', 'sub:kinds-app:two')).toMatchObject({ subscription: 'shared' });
    const sender = await TestClient.connect({ port: broker.port });
    await sender.send('amq.topic/kinds.one', ['to one']);
    await sender.send('amq.topic/kinds.two', ['to two']);
    one.receiver.add_credit(5);
    two.receiver.add_credit(5);
    expect((await one.next(1)).map((g) => bodyOf(g.message))).toEqual(['to one']);
    expect((await two.next(1)).map((g) => bodyOf(g.message))).toEqual(['to two']);
    await sender.close();
    await holder.close();
  });

  it('subscription kinds - a subscription queue that records no kind (made before kinds were recorded) takes either kind', async () => {
    const broker = await TestBroker.start();
    // Declared and bound as an administrator would, or as a broker before this change did: no kind.
    for (const args of [['queue', 'add', 'sub:legacy-app:old', '--durable'], ['bind', 'amq.topic', 'sub:legacy-app:old', 'legacy.t']]) {
      const r = await tandem([...args, '-b', broker.url]);
      expect(r.code, r.stderr).toBe(0);
    }
    expect(await attach(broker.port, 'legacy-app', 'old', unshared('amq.topic/legacy.t'))).toBe('opened');
    expect(await attach(broker.port, 'legacy-app', 'old', shared('amq.topic/legacy.t'))).toBe('opened');
    expect(await attach(broker.port, 'legacy-app', 'old', unshared('amq.topic/legacy.t'))).toBe('opened');
  });
});

describe('a subscription read by its queue address', () => {
  it('subscriptions - browsing or draining a durable subscription by its queue address and closing the link leaves the subscription; an unsubscribe by name still ends it', async () => {
    const broker = await TestBroker.start();
    expect(await attach(broker.port, 'read-app', 's1', unshared('amq.topic/read.t'))).toBe('opened');
    const sender = await TestClient.connect({ port: broker.port });
    await sender.send('amq.topic/read.t', ['m1', 'm2']);
    const reader = await TestClient.connect({ port: broker.port });
    // An operator's browse, then a consumer of one message, each closing its link (detach closed=true).
    expect((await reader.browse('sub:read-app:s1', 2)).map(bodyOf)).toEqual(['m1', 'm2']);
    expect((await reader.receiveAndAccept('sub:read-app:s1', 1)).map(bodyOf)).toEqual(['m1']);
    await reader.close();
    // Still subscribed: what the topic carries next reaches it.
    await sender.send('amq.topic/read.t', ['m3']);
    expect(await manage(broker.port, 'READ', 'queue', 'sub:read-app:s1')).toMatchObject({ depth: 2 });
    // JMS's unsubscribe: an attach naming the subscription alone, detached with closed=true.
    const jms = await TestClient.connect({ port: broker.port, container_id: 'read-app' });
    const byName = await jms.openReceiver({}, { name: 's1' });
    await byName.close();
    await waitFor(async () => !(await tandem(['queue', 'list', '--json', '-b', broker.url])).stdout.includes('sub:read-app:s1'), { name: 'the subscription gone', timeout: 10_000 });
    await jms.close();
    await sender.close();
  });
});

describe('subscription kinds across an HA failover', () => {
  let cluster: TestCluster | undefined;

  afterAll(async () => {
    await cluster?.stopAll();
  });

  it('subscription kinds - a promoted backup refuses the other kind, as the primary did', async () => {
    cluster = await TestCluster.start(2);
    const c = cluster;
    expect((await c.promote(0)).code).toBe(0);
    await c.waitState(1, 'ready');
    expect(await attach(c.ports[0]!, 'ha-app', 'h1', unshared('amq.topic/ha.one'))).toBe('opened');
    expect(await attach(c.ports[0]!, 'ha-app', 'h2', shared('amq.topic/ha.two'))).toBe('opened');
    await waitFor(
      async () => {
        const r = await tandem(['queue', 'list', '--json', ...c.cliTarget(1)]);
        const names = r.code === 0 ? (JSON.parse(r.stdout) as Array<{ name: string }>).map((q) => q.name) : [];
        return names.includes('sub:ha-app:h1') && names.includes('sub:ha-app:h2');
      },
      { name: 'subscriptions replicated to the backup', timeout: 20_000 },
    );
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    expect(await attach(c.ports[1]!, 'ha-app', 'h1', shared('amq.topic/ha.one'))).toEqual(refusedAsUnshared('h1', 'ha-app'));
    expect(await attach(c.ports[1]!, 'ha-app', 'h2', unshared('amq.topic/ha.two'))).toEqual(refusedAsShared('h2', 'ha-app'));
    expect(await attach(c.ports[1]!, 'ha-app', 'h1', unshared('amq.topic/ha.one'))).toBe('opened');
    expect(await attach(c.ports[1]!, 'ha-app', 'h2', shared('amq.topic/ha.two'))).toBe('opened');
  });
});

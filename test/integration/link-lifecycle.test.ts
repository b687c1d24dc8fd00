// Link and address behaviours that JMS clients lean on, checked with rhea: a session end
// detaches its links (their deliveries go back at once), a dynamic target is a temporary
// queue that goes with its link, `exchange/key` publishes with that routing key, and
// named (durable, shared) subscriptions keep their messages across detach and kill -9.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sender } from 'rhea';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, TestReceiver, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

let broker: TestBroker;
let client: TestClient;

beforeAll(async () => {
  broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
  client = await TestClient.connect({ port: broker.port });
});

afterAll(async () => {
  await client?.close();
  await killAllBrokers();
});

async function queueInfo(name: string): Promise<Record<string, unknown> | undefined> {
  try {
    return (await manage(broker.port, 'READ', 'queue', name)) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

describe('link lifecycle', () => {
  it('ending a session gives its unsettled deliveries back at once, with the connection still open', async () => {
    await client.send('life.end', ['one', 'two']);
    const session = client.connection.create_session();
    session.begin();
    const holder = new TestReceiver(session.open_receiver({ source: { address: 'life.end' }, credit_window: 0, autoaccept: false } as never));
    holder.receiver.add_credit(10);
    const held = await holder.next(2);
    expect(held.map((g) => bodyOf(g.message))).toEqual(['one', 'two']);
    held[0]!.delivery.accept();
    await waitFor(async () => (await queueInfo('life.end'))?.depth === 1, { name: 'one accepted' });
    session.close();
    await waitFor(async () => (await queueInfo('life.end'))?.acquired === 0, { name: 'the ended session holds nothing', timeout: 5000 });

    const again = await client.receiveAndAccept('life.end', 1);
    expect(again.map(bodyOf)).toEqual(['two']);
    expect(again[0]!.delivery_count).toBe(1);
  });

  it('a dynamic target is a temporary queue named by the broker, gone when its link detaches', async () => {
    const sender = client.connection.open_sender({ target: { dynamic: true } } as never) as Sender;
    await new Promise<void>((resolve) => sender.once('sender_open', () => resolve()));
    const address = (sender as unknown as { remote: { attach: { target: { address: string } } } }).remote.attach.target.address;
    expect(address).toMatch(/^tmp\./);
    const replies = await client.openReceiver(address);
    replies.receiver.add_credit(5);
    // Another connection replies to it by name, as a JMS replier does to JMSReplyTo.
    const other = await TestClient.connect({ port: broker.port });
    expect((await other.send(address, ['reply'])).map((o) => o.state)).toEqual(['accepted']);
    await other.close();
    const got = await replies.next(1);
    expect(bodyOf(got[0]!.message)).toBe('reply');
    got[0]!.delivery.accept();

    sender.close();
    await waitFor(async () => (await queueInfo(address)) === undefined, { name: 'temporary queue deleted', timeout: 5000 });
    await replies.close();
  });

  it('exchange/key as a target address publishes with that key', async () => {
    const sport = await client.openReceiver('amq.topic/score.sport');
    const any = await client.openReceiver('amq.topic/score.*');
    sport.receiver.add_credit(5);
    any.receiver.add_credit(5);
    expect((await client.send('amq.topic/score.sport', ['goal'])).map((o) => o.state)).toEqual(['accepted']);
    expect((await client.send('amq.topic/score.chess', ['mate'])).map((o) => o.state)).toEqual(['accepted']);
    expect((await sport.next(1)).map((g) => bodyOf(g.message))).toEqual(['goal']);
    expect((await any.next(2)).map((g) => bodyOf(g.message))).toEqual(['goal', 'mate']);
    expect(await sport.drainFor(200)).toHaveLength(0);
    // No queue was made for the keyed address.
    expect(await queueInfo('amq.topic/score.sport')).toBeUndefined();
  });

  it('a durable subscription keeps what was published while detached, across kill -9, until a closing detach', async () => {
    const sub = { name: 'orders-audit', source: { address: 'amq.topic/audit.#', durable: 2, expiry_policy: 'never' } };
    const subscriber = await TestClient.connect({ port: broker.port, container_id: 'auditor' });
    const first = await subscriber.openReceiver(sub.source, { name: sub.name });
    await first.close(); // rhea detaches with closed=true: that would unsubscribe; attach again and drop the connection instead
    const again = await subscriber.openReceiver(sub.source, { name: sub.name });
    expect(again.receiver.is_open()).toBe(true);
    subscriber.destroy();
    await client.send('amq.topic/audit.created', [{ body: 'a1', durable: true }, { body: 'a2', durable: true }]);

    await broker.kill();
    broker = await TestBroker.start({ args: ['--auto-create', 'yes'], dataDir: broker.dataDir });
    client = await TestClient.connect({ port: broker.port });

    // Another client, same container-id and link name: the same subscription.
    const back = await TestClient.connect({ port: broker.port, container_id: 'auditor' });
    const r = await back.openReceiver(sub.source, { name: sub.name });
    r.receiver.add_credit(10);
    const got = await r.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['a1', 'a2']);
    for (const g of got) g.delivery.accept();
    // Only one consumer at a time on a subscription that is not shared.
    const twin = await TestClient.connect({ port: broker.port, container_id: 'auditor' });
    const second = await twin.openReceiver(sub.source, { name: sub.name }).then(() => 'opened', (e: Error) => e.message);
    expect(second).toMatch(/already has a consumer/);
    await twin.close();
    // A detach with closed=true is the unsubscribe: the subscription's queue goes.
    expect(await queueInfo('sub:auditor:orders-audit')).toMatchObject({ durable: true, depth: 0 });
    await r.close();
    await waitFor(async () => (await queueInfo('sub:auditor:orders-audit')) === undefined, { name: 'subscription deleted', timeout: 5000 });
    await back.close();
  });

  it('a shared subscription spreads its messages over its consumers; another name gets its own copy', async () => {
    const shared = (name: string) => ({ name, source: { address: 'amq.topic/feed.x', capabilities: ['shared'] } });
    const a = await client.openReceiver(shared('s1').source, { name: 's1' });
    const b = await client.openReceiver(shared('s1|2').source, { name: 's1|2' });
    const other = await client.openReceiver(shared('s2').source, { name: 's2' });
    for (const r of [a, b, other]) r.receiver.add_credit(20);
    await client.send('amq.topic/feed.x', Array.from({ length: 10 }, (_, i) => `f${i}`));
    await waitFor(() => a.received.length + b.received.length === 10 && other.received.length === 10, { name: 'all delivered' });
    expect(a.received.length).toBe(5);
    expect(b.received.length).toBe(5);
    for (const r of [a, b, other]) for (const g of r.received.splice(0)) g.delivery.accept();
    expect(await a.drainFor(200)).toHaveLength(0);
  });
});

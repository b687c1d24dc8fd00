// JMS noLocal (apache.org:no-local-filter:list) on a real tandemd, from rhea: a
// connection that publishes to a topic and subscribes with noLocal gets only others'
// messages (another connection with the same container-id is another); the attach
// names the filter as in force on a topic, and not on a queue, where it is not applied;
// a durable noLocal subscription leaves out its clientID's (container-id's) messages
// across kill -9 and a restart, and is replaced when attached again without noLocal;
// a subscription without a clientID (global) refuses noLocal.
import rhea, { type Message } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { ClientError, TestClient, bodyOf, type TestReceiver } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';
import { rowsOf } from '../../src/admin/client.js';

afterAll(async () => {
  await killAllBrokers();
});

/** The filter qpid-jms sends for noLocal: its code, holding the string qpid-jms puts there. */
const NO_LOCAL = { 'no-local': rhea.types.wrap_described('NoLocalFilter{}', 0x468c00000003) };
const durableSub = (address: string, filter?: Record<string, unknown>) => ({ address, durable: 2, expiry_policy: 'never', ...(filter ? { filter } : {}) });

const durableMessages = (...names: string[]): Message[] => names.map((body) => ({ body, durable: true }));

/** The filters the broker's attach said are in force, by key. */
function answeredFilters(r: TestReceiver): string[] {
  const source = (r.receiver as unknown as { remote: { attach: { source: { filter?: Record<string, unknown> } } } }).remote.attach.source;
  return Object.keys(source.filter ?? {});
}

async function take(r: TestReceiver, n: number): Promise<string[]> {
  r.receiver.add_credit(n + 10);
  const got = n === 0 ? [] : await r.next(n);
  for (const g of got) g.delivery.accept();
  // Nothing more comes.
  expect(await r.drainFor(300)).toEqual([]);
  return got.map((g) => String(bodyOf(g.message)));
}

describe('noLocal', () => {
  it("a connection publishing to a topic and subscribing with noLocal gets only others' messages; its plain subscriber gets all", async () => {
    const broker = await TestBroker.start();
    const me = await TestClient.connect({ port: broker.port, container_id: 'nl-me' });
    // Another connection with the same container-id is not this connection.
    const twin = await TestClient.connect({ port: broker.port, container_id: 'nl-me' });
    const other = await TestClient.connect({ port: broker.port });
    const noLocal = await me.openReceiver({ address: 'amq.topic/nl.news', filter: NO_LOCAL });
    const plain = await me.openReceiver('amq.topic/nl.news');
    expect(answeredFilters(noLocal)).toEqual(['no-local']);
    await me.send('amq.topic/nl.news', ['mine-1']);
    await other.send('amq.topic/nl.news', ['other-1']);
    await twin.send('amq.topic/nl.news', ['twin-1']);
    // Through the anonymous relay too: the message's `to`.
    await me.send(undefined, [{ body: 'mine-2', to: 'amq.topic/nl.news' }]);
    await other.send('amq.topic/nl.news', ['other-2']);
    expect(await take(noLocal, 3)).toEqual(['other-1', 'twin-1', 'other-2']);
    expect(await take(plain, 5)).toEqual(['mine-1', 'other-1', 'twin-1', 'mine-2', 'other-2']);
    for (const c of [me, twin, other]) await c.close();
  });

  it('on a queue it is not applied, and the answer does not name it: the consumer gets its own messages', async () => {
    const broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
    const me = await TestClient.connect({ port: broker.port });
    await me.send('nl.queue', ['mine-1', 'mine-2']);
    const r = await me.openReceiver({ address: 'nl.queue', filter: NO_LOCAL });
    expect(answeredFilters(r)).toEqual([]);
    expect(await take(r, 2)).toEqual(['mine-1', 'mine-2']);
    await me.close();
  });

  it("a durable noLocal subscription leaves out its clientID's messages across kill -9 and a restart; attached without noLocal it is replaced", async () => {
    let broker = await TestBroker.start();
    const subscriber = await TestClient.connect({ port: broker.port, container_id: 'nl-app' });
    const first = await subscriber.openReceiver(durableSub('amq.topic/nl.durable', NO_LOCAL), { name: 'd1' });
    expect(answeredFilters(first)).toEqual(['no-local']);
    // Left without a detach, as a JMS client that went away.
    subscriber.destroy();
    const sameClientId = await TestClient.connect({ port: broker.port, container_id: 'nl-app' });
    const other = await TestClient.connect({ port: broker.port, container_id: 'nl-other' });
    await sameClientId.send('amq.topic/nl.durable', durableMessages('own-1'));
    await other.send('amq.topic/nl.durable', durableMessages('other-1'));
    await broker.kill();

    broker = await TestBroker.start({ dataDir: broker.dataDir });
    // The setting came back from the journal with its queue.
    const rows = rowsOf(await manage(broker.port, 'QUERY', 'queue', undefined));
    expect(rows.find((r) => r.name === 'sub:nl-app:d1')).toMatchObject({ 'no-local': 'container nl-app', depth: 1 });
    const own = await TestClient.connect({ port: broker.port, container_id: 'nl-app' });
    const other2 = await TestClient.connect({ port: broker.port, container_id: 'nl-other' });
    await own.send('amq.topic/nl.durable', durableMessages('own-2'));
    await other2.send('amq.topic/nl.durable', durableMessages('other-2'));
    const again = await own.openReceiver(durableSub('amq.topic/nl.durable', NO_LOCAL), { name: 'd1' });
    expect(await take(again, 2)).toEqual(['other-1', 'other-2']);
    await own.send('amq.topic/nl.durable', durableMessages('own-3'));
    own.destroy();

    // Without noLocal it is another subscription: the old one goes, with what it held.
    await other2.send('amq.topic/nl.durable', durableMessages('other-3'));
    const plainSub = await TestClient.connect({ port: broker.port, container_id: 'nl-app' });
    const replaced = await plainSub.openReceiver(durableSub('amq.topic/nl.durable'), { name: 'd1' });
    expect(answeredFilters(replaced)).toEqual([]);
    await plainSub.send('amq.topic/nl.durable', durableMessages('own-4'));
    expect(await take(replaced, 1)).toEqual(['own-4']);
    await plainSub.close();
    await other2.close();
  });

  it('a shared subscription without a clientID (global) refuses noLocal with amqp:precondition-failed', async () => {
    const broker = await TestBroker.start();
    const client = await TestClient.connect({ port: broker.port });
    const err = await client.openReceiver({ ...durableSub('amq.topic/nl.global', NO_LOCAL), capabilities: ['topic', 'shared', 'global'] }, { name: 'g1|global' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ClientError);
    expect((err as ClientError).condition).toBe('amqp:precondition-failed');
    expect((err as ClientError).description).toMatch(/noLocal .* needs a clientID/);
    // Nothing was made: the same name without noLocal is a new subscription.
    const r = await client.openReceiver({ ...durableSub('amq.topic/nl.global'), capabilities: ['topic', 'shared', 'global'] }, { name: 'g1|global' });
    await client.send('amq.topic/nl.global', ['g']);
    expect(await take(r, 1)).toEqual(['g']);
    await client.close();
  });
});

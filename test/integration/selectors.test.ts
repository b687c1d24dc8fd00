// JMS message selectors (apache.org:selector-filter:string) on a real tandemd, from
// rhea: consumers of a queue get only what their selector selects, in order; the rest
// stays for other consumers; the attach names the selector as in force; a bad one is
// refused with amqp:invalid-field naming its place; a browser with a selector sees the
// selected ones only; messages read back from the journal after a restart are judged
// too; a long run of messages a selector passes over does not stop the broker
// answering others.
import rhea, { type Message } from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { ClientError, TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';
import { rowsOf } from '../../src/admin/client.js';

let broker: TestBroker;

beforeAll(async () => {
  broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
});

afterAll(async () => {
  await killAllBrokers();
});

const selected = (address: string, selector: string, extra: Record<string, unknown> = {}) => ({ address, filter: rhea.filter.selector(selector), ...extra });

function colourMessages(prefix: string, colours: string[]): Message[] {
  return colours.map((colour, i) => ({ body: `${prefix}-${i}-${colour}`, application_properties: { colour, weight: i } }));
}

describe('selectors on queue consumers', () => {
  it('two consumers with complementary selectors each get exactly theirs, in order, and the attach names the selector', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const colours = ['blue', 'red', 'red', 'blue', 'blue', 'red', 'blue', 'red', 'red', 'blue'];
    await client.send('sel.pair', colourMessages('p', colours));
    const blue = await client.openReceiver(selected('sel.pair', "colour = 'blue'"));
    const red = await client.openReceiver(selected('sel.pair', "colour <> 'blue' AND weight >= 0"));
    // The broker's source lists the selector filter as applied (qpid-jms reads this).
    const filter = (blue.receiver as unknown as { remote: { attach: { source: { filter?: Record<string, { descriptor?: unknown; value?: unknown }> } } } }).remote.attach.source.filter;
    expect(JSON.stringify(filter)).toContain("colour = 'blue'");
    blue.receiver.add_credit(100);
    red.receiver.add_credit(100);
    const gotBlue = await blue.next(5);
    const gotRed = await red.next(5);
    expect(gotBlue.map((g) => bodyOf(g.message))).toEqual(colours.flatMap((c, i) => (c === 'blue' ? [`p-${i}-blue`] : [])));
    expect(gotRed.map((g) => bodyOf(g.message))).toEqual(colours.flatMap((c, i) => (c === 'red' ? [`p-${i}-red`] : [])));
    for (const g of [...gotBlue, ...gotRed]) g.delivery.accept();
    expect(await blue.drainFor(200)).toEqual([]);
    await client.close();
  });

  it('a selector that matches nothing leaves everything, in order, for a plain consumer', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const none = await client.openReceiver(selected('sel.none', "colour = 'green' OR missing IS NOT NULL"));
    none.receiver.add_credit(100);
    await client.send('sel.none', colourMessages('n', ['blue', 'red', 'blue']));
    expect(await none.drainFor(300)).toEqual([]);
    const all = await client.receiveAndAccept('sel.none', 3);
    expect(all.map(bodyOf)).toEqual(['n-0-blue', 'n-1-red', 'n-2-blue']);
    await client.close();
  });

  it('the JMS header names select on the AMQP fields qpid-jms maps them to', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('sel.headers', [
      { body: 'a', correlation_id: 'req-1', subject: 'order', priority: 7, durable: true },
      { body: 'b', correlation_id: 'req-2', subject: 'order', priority: 2, durable: false },
      { body: 'c', correlation_id: 'req-1', subject: 'invoice', priority: 9, durable: true },
    ]);
    const r = await client.openReceiver(selected('sel.headers', "JMSCorrelationID = 'req-1' AND JMSType = 'order' AND JMSPriority > 4 AND JMSDeliveryMode = 'PERSISTENT'"));
    r.receiver.add_credit(10);
    const got = await r.next(1);
    expect(bodyOf(got[0]!.message)).toBe('a');
    expect(await r.drainFor(200)).toEqual([]);
    got[0]!.delivery.accept();
    await client.close();
  });

  it('JMSXDeliveryCount and JMSRedelivered select by the delivery count as it is now; JMSExpiration by the expiry', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('sel.count', ['failed', 'released', 'kept']);
    const plain = await client.openReceiver('sel.count');
    plain.receiver.add_credit(3);
    const first = await plain.next(3);
    expect(first.map((g) => bodyOf(g.message))).toEqual(['failed', 'released', 'kept']);
    // Given back once as delivery-failed (its delivery-count raised), once plainly released (not raised).
    // One at a time: rhea writes dispositions of consecutive deliveries made in one turn as
    // one range with the first one's outcome when the first two differ.
    const turn = () => new Promise((resolve) => setTimeout(resolve, 20));
    first[0]!.delivery.modified({ delivery_failed: true });
    await turn();
    first[1]!.delivery.release();
    await turn();
    first[2]!.delivery.accept();
    await turn();
    await plain.close();
    const again = await client.openReceiver(selected('sel.count', 'JMSXDeliveryCount > 1 AND JMSRedelivered'));
    again.receiver.add_credit(10);
    const redelivered = await again.next(1);
    expect(bodyOf(redelivered[0]!.message)).toBe('failed');
    expect(redelivered[0]!.message.delivery_count).toBe(1);
    expect((await again.drainFor(200)).map((g) => bodyOf(g.message))).toEqual([]);
    redelivered[0]!.delivery.accept();
    const fresh = await client.openReceiver(selected('sel.count', 'JMSXDeliveryCount = 1'));
    fresh.receiver.add_credit(10);
    const firstTime = await fresh.next(1);
    expect(bodyOf(firstTime[0]!.message)).toBe('released');
    expect((await fresh.drainFor(200)).map((g) => bodyOf(g.message))).toEqual([]);
    firstTime[0]!.delivery.accept();
    // JMSExpiration: the absolute expiry time when set, else the expiry the ttl gives, else 0.
    const now = Date.now();
    await client.send('sel.expiry', [
      { body: 'never' },
      { body: 'ttl', ttl: 600_000 },
      { body: 'absolute', absolute_expiry_time: new Date(now + 3_600_000) },
    ]);
    const expiring = await client.openReceiver(selected('sel.expiry', `JMSExpiration > ${now} AND JMSExpiration < ${now + 1_800_000}`));
    expiring.receiver.add_credit(10);
    expect((await expiring.next(1)).map((g) => bodyOf(g.message))).toEqual(['ttl']);
    expect((await expiring.drainFor(200)).map((g) => bodyOf(g.message))).toEqual([]);
    const later = await client.openReceiver(selected('sel.expiry', `JMSExpiration >= ${now + 3_600_000}`));
    later.receiver.add_credit(10);
    expect((await later.next(1)).map((g) => bodyOf(g.message))).toEqual(['absolute']);
    const unset = await client.openReceiver(selected('sel.expiry', 'JMSExpiration = 0'));
    unset.receiver.add_credit(10);
    expect((await unset.next(1)).map((g) => bodyOf(g.message))).toEqual(['never']);
    await client.close();
  });

  it('a bad selector is refused with amqp:invalid-field naming the problem and its place', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const err = await client.openReceiver(selected('sel.bad', "colour = 'blue")).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ClientError);
    expect((err as ClientError).condition).toBe('amqp:invalid-field');
    expect((err as ClientError).description).toMatch(/invalid message selector: a string literal is not closed .*at character 10/);
    const long = await client.openReceiver(selected('sel.bad', `a = '${'x'.repeat(5000)}'`)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((long as ClientError).condition).toBe('amqp:invalid-field');
    expect((long as ClientError).description).toMatch(/at most 4096/);
    // The connection carries on.
    await client.send('sel.bad', ['still here']);
    expect((await client.receiveAndAccept('sel.bad', 1)).map(bodyOf)).toEqual(['still here']);
    await client.close();
  });

  it('a browser with a selector sees only the selected messages, and takes none', async () => {
    const client = await TestClient.connect({ port: broker.port });
    await client.send('sel.browse', colourMessages('b', ['blue', 'red', 'blue', 'red']));
    const b = await client.openReceiver(selected('sel.browse', "colour = 'red'", { distribution_mode: 'copy' }));
    b.receiver.add_credit(10);
    const seen = await b.next(2);
    expect(seen.map((g) => bodyOf(g.message))).toEqual(['b-1-red', 'b-3-red']);
    expect(await b.drainFor(200)).toEqual([]);
    await b.close();
    expect((await client.receiveAndAccept('sel.browse', 4)).map(bodyOf)).toEqual(['b-0-blue', 'b-1-red', 'b-2-blue', 'b-3-red']);
    await client.close();
  });

  it('50,000 messages the selector does not select ahead of one it does: that one is delivered, and other clients are answered meanwhile', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const n = 50_000;
    const sender = await client.openSender('sel.long');
    for (let sent = 0; sent < n; sent += 5000) {
      await client.send(sender, Array.from({ length: 5000 }, (_, i) => ({ body: `s${sent + i}`, application_properties: { colour: 'grey' } })), { timeoutMs: 60_000 });
    }
    await client.send(sender, [{ body: 'wanted', application_properties: { colour: 'blue' } }]);
    const r = await client.openReceiver(selected('sel.long', "colour = 'blue'"));
    r.receiver.add_credit(1);
    // Meanwhile another client does a round trip on another queue.
    const other = await TestClient.connect({ port: broker.port });
    await other.send('sel.other', ['ping']);
    expect((await other.receiveAndAccept('sel.other', 1)).map(bodyOf)).toEqual(['ping']);
    const got = await r.next(1, 60_000);
    expect(bodyOf(got[0]!.message)).toBe('wanted');
    got[0]!.delivery.accept();
    await other.close();
    await client.close();
  });
});

/** The queues whose selector setting is `selector` (a subscription's), by name, with their depth. */
async function queuesSelecting(port: number, selector: string): Promise<Array<{ name: string; depth: number }>> {
  const rows = rowsOf(await manage(port, 'QUERY', 'queue', undefined));
  return rows.filter((r) => r.selector === selector).map((r) => ({ name: r.name as string, depth: r.depth as number }));
}

/** A durable subscription's source (qpid-jms' createDurableConsumer), with a selector. */
const durableSource = (address: string, selector: string) => ({ address, durable: 2, expiry_policy: 'never', filter: rhea.filter.selector(selector) });

describe('selectors on topic subscriptions', () => {
  it('a private subscription keeps only the messages its selector selects', async () => {
    const client = await TestClient.connect({ port: broker.port });
    const r = await client.openReceiver(selected('amq.topic/sel.news', "colour = 'blue'"));
    await client.send('amq.topic/sel.news', colourMessages('t', ['blue', 'red', 'red', 'blue', 'red']));
    // Selected as they were routed: the subscription's queue never held the red ones.
    expect(await queuesSelecting(broker.port, "colour = 'blue'")).toEqual([{ name: expect.stringMatching(/^tmp\.sub\./), depth: 2 }]);
    r.receiver.add_credit(10);
    const got = await r.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['t-0-blue', 't-3-blue']);
    for (const g of got) g.delivery.accept();
    expect(await r.drainFor(200)).toEqual([]);
    await client.close();
  });

  it('a durable subscription keeps its selector across kill -9 and a restart; attached again with another selector it is replaced', async () => {
    const own = await TestBroker.start({ args: ['--auto-create', 'yes'] });
    const cid = 'sel-durable-app';
    const queue = `sub:${cid}:blues`;
    const first = await TestClient.connect({ port: own.port, container_id: cid });
    await first.openReceiver(durableSource('amq.topic/sel.d', "colour = 'blue'"), { name: 'blues' });
    // Gone without a detach: the subscription stays, as a JMS client's that went away.
    first.destroy();
    const publisher = await TestClient.connect({ port: own.port });
    await publisher.send('amq.topic/sel.d', colourMessages('a', ['blue', 'red', 'blue', 'red']).map((m) => ({ ...m, durable: true })));
    await publisher.close();
    expect(await queueDepth(own.port, queue)).toBe(2);
    await own.kill();
    const again = await TestBroker.start({ dataDir: own.dataDir, args: ['--auto-create', 'yes'] });
    expect(await queuesSelecting(again.port, "colour = 'blue'")).toEqual([{ name: queue, depth: 2 }]);
    const p2 = await TestClient.connect({ port: again.port });
    await p2.send('amq.topic/sel.d', colourMessages('b', ['red', 'blue']).map((m) => ({ ...m, durable: true })));
    const sub = await TestClient.connect({ port: again.port, container_id: cid });
    const r = await sub.openReceiver(durableSource('amq.topic/sel.d', "colour = 'blue'"), { name: 'blues' });
    r.receiver.add_credit(10);
    const got = await r.next(3);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['a-0-blue', 'a-2-blue', 'b-1-blue']);
    for (const g of got) g.delivery.accept();
    sub.destroy();
    // Another selector under the same name: the subscription is made again (JMS: as if unsubscribed first).
    await p2.send('amq.topic/sel.d', colourMessages('c', ['blue']).map((m) => ({ ...m, durable: true })));
    const sub2 = await TestClient.connect({ port: again.port, container_id: cid });
    const r2 = await sub2.openReceiver(durableSource('amq.topic/sel.d', "colour = 'red'"), { name: 'blues' });
    expect(await queuesSelecting(again.port, "colour = 'red'")).toEqual([{ name: queue, depth: 0 }]);
    await p2.send('amq.topic/sel.d', colourMessages('d', ['blue', 'red']));
    r2.receiver.add_credit(10);
    expect((await r2.next(1)).map((g) => bodyOf(g.message))).toEqual(['d-1-red']);
    expect(await r2.drainFor(200)).toEqual([]);
    // While it has a consumer, another selector is refused.
    const other = await TestClient.connect({ port: again.port, container_id: cid });
    const err = await other.openReceiver(durableSource('amq.topic/sel.d', "colour = 'green'"), { name: 'blues' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as ClientError).condition).toBe('amqp:resource-locked');
    expect((err as ClientError).description).toMatch(/in use for another selector/);
    await other.close();
    await sub2.close();
    await p2.close();
  });
});

describe('selectors after a restart', () => {
  it('messages read back from the journal are judged by their content', async () => {
    const own = await TestBroker.start({ args: ['--auto-create', 'yes'] });
    const client = await TestClient.connect({ port: own.port });
    await client.send('sel.durable', colourMessages('d', ['blue', 'red', 'blue', 'red']).map((m) => ({ ...m, durable: true })));
    await client.close();
    await own.kill();
    const again = await TestBroker.start({ dataDir: own.dataDir, args: ['--auto-create', 'yes'] });
    const c2 = await TestClient.connect({ port: again.port });
    const r = await c2.openReceiver(selected('sel.durable', "colour = 'red'"));
    r.receiver.add_credit(10);
    const got = await r.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['d-1-red', 'd-3-red']);
    for (const g of got) g.delivery.accept();
    expect((await c2.receiveAndAccept('sel.durable', 2)).map(bodyOf)).toEqual(['d-0-blue', 'd-2-blue']);
    await c2.close();
  });
});

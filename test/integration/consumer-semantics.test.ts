// The consuming side as a hostile or careless client drives it, on a real tandemd:
// a receiver whose queue is deleted under it, links the broker detaches itself (a
// message over the client's max-message-size), and what each leaves behind.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AmqpClient, AmqpClientError } from '../../src/amqp/engine/client.js';
import type { Composite } from '../../src/amqp/engine/composite.js';
import { type Link, terminus } from '../../src/amqp/engine/link.js';
import { encodeMessage } from '../../src/amqp/engine/message.js';
import { type ErrorInfo, describedList } from '../../src/amqp/engine/performative.js';
import { rowsOf } from '../../src/admin/client.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';

let broker: TestBroker;

beforeAll(async () => {
  broker = await TestBroker.start({ args: ['--auto-create', 'yes'] });
});

afterAll(async () => {
  await killAllBrokers();
});

async function connect(containerId?: string): Promise<AmqpClient> {
  return AmqpClient.connect({ host: '127.0.0.1', port: broker.port, sasl: false, containerId });
}

/** Records the error of the broker's detach of `link`, when it comes. */
function detachErrorOf(link: Link): { error?: ErrorInfo; detached: boolean } {
  const seen: { error?: ErrorInfo; detached: boolean } = { detached: false };
  const onDetach = link.onDetach.bind(link);
  link.onDetach = (d: Composite) => {
    const error = onDetach(d);
    seen.error = error;
    seen.detached = true;
    return error;
  };
  return seen;
}

async function publish(client: AmqpClient, address: string, bodies: string[]): Promise<void> {
  const sender = await client.openSender(await client.openSession(), address);
  for (const body of bodies) expect((await client.send(sender, encodeMessage({ body })))?.def.name).toBe('accepted');
  client.detach(sender);
}

/** The links the broker counts for the connection with this container-id. */
async function linksOf(containerId: string): Promise<number> {
  const rows = rowsOf(await manage(broker.port, 'QUERY', 'connection', undefined));
  const row = rows.find((r) => r.container === containerId);
  expect(row, `connection ${containerId} listed`).toBeDefined();
  return row!.links as number;
}

describe('consumer semantics - what a client can leave the consuming side in', () => {
  it('queue deleted under a consumer - the receiver is detached with amqp:resource-deleted, not left waiting on a queue that is gone', async () => {
    const client = await connect();
    await publish(client, 'c.deleted', ['before']);
    const session = await client.openSession();
    const link = await client.openReceiver(session, 'c.deleted');
    const seen = detachErrorOf(link);
    const got: string[] = [];
    client.receive(link, 10, (d) => {
      got.push(d.payload.toString('latin1'));
      d.accept();
    });
    await waitFor(() => got.length === 1, { name: 'first message' });

    await manage(broker.port, 'DELETE', 'queue', 'c.deleted');
    await waitFor(() => seen.detached, { name: 'consumer detached', timeout: 5000 });
    expect(seen.error?.condition).toBe('amqp:resource-deleted');
    expect(seen.error?.description).toMatch(/c\.deleted/);

    // The address made again (auto-create): a new receiver gets what is sent to it.
    await publish(client, 'c.deleted', ['after']);
    const again = await client.openReceiver(session, 'c.deleted');
    const later: string[] = [];
    client.receive(again, 10, (d) => {
      later.push(d.payload.toString('latin1'));
      d.accept();
    });
    await waitFor(() => later.length === 1, { name: 'message on the new queue' });
    expect(later[0]).toMatch(/after/);
    await client.close();
  });

  it('a deleted queue takes browsers and every connection\'s consumers with it', async () => {
    const a = await connect();
    const b = await connect();
    await publish(a, 'c.deleted2', ['m']);
    const consumer = await a.openReceiver(await a.openSession(), 'c.deleted2');
    const browser = await b.openReceiver(await b.openSession(), undefined, { source: describedList('source', { address: 'c.deleted2', 'distribution-mode': { type: 'symbol', value: 'copy' } }) });
    const seenConsumer = detachErrorOf(consumer);
    const seenBrowser = detachErrorOf(browser);
    a.receive(consumer, 0, () => undefined);
    b.receive(browser, 10, () => undefined);
    await manage(broker.port, 'DELETE', 'queue', 'c.deleted2');
    await waitFor(() => seenConsumer.detached && seenBrowser.detached, { name: 'both detached', timeout: 5000 });
    expect(seenConsumer.error?.condition).toBe('amqp:resource-deleted');
    expect(seenBrowser.error?.condition).toBe('amqp:resource-deleted');
    await a.close();
    await b.close();
  });

  it('a durable subscription that is not shared, named by its link name alone while it has a consumer, is refused as locked (not a second consumer taking its messages)', async () => {
    const containerId = `jms-lock-${process.pid}`;
    const owner = await connect(containerId);
    const sub = await owner.openReceiver(await owner.openSession(), undefined, { name: 'locked-sub', source: terminus('source', { address: 'amq.topic/locked', durable: 2, expiryPolicy: 'never' }) });
    const got: string[] = [];
    owner.receive(sub, 10, (d) => got.push(d.payload.toString('latin1')));
    // Another connection of the same client id (a JMS clientID), by name alone.
    const other = await connect(containerId);
    const err = await other.openReceiver(await other.openSession(), undefined, { name: 'locked-sub', source: terminus('source', {}) }).then(
      (link) => {
        other.receive(link, 10, () => undefined);
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(err, 'a second consumer was taken').toBeInstanceOf(AmqpClientError);
    expect((err as AmqpClientError).condition).toBe('amqp:resource-locked');
    await publish(other, 'amq.topic/locked', ['a', 'b']);
    await waitFor(() => got.length === 2, { name: 'the subscriber has both' });
    await other.close();
    await owner.close();
  });

  it('a browsing receiver on an exchange consumes its private copy: the subscription queue does not keep every message the topic ever carried', async () => {
    const client = await connect();
    const link = await client.openReceiver(await client.openSession(), undefined, { source: describedList('source', { address: 'amq.topic/browsed.#', 'distribution-mode': { type: 'symbol', value: 'copy' } }) });
    // The broker says what the link does: it takes (move) from a queue only it can see.
    expect(link.source?.fields['distribution-mode']).toBe('move');
    let got = 0;
    client.receive(link, 100, (d) => {
      got++;
      d.accept();
    });
    const bodies = Array.from({ length: 50 }, (_, i) => `t${i}`);
    await publish(client, 'amq.topic/browsed.x', bodies);
    await waitFor(() => got === 50, { name: 'all 50 received' });
    // Old: every message stayed on the private queue (50 here, without end on a live topic).
    const held = async () => rowsOf(await manage(broker.port, 'QUERY', 'queue', undefined)).filter((r) => String(r.name).startsWith('tmp.')).reduce((n, r) => n + (r.depth as number), 0);
    await waitFor(async () => (await held()) === 0, { name: 'private queue drained', timeout: 5000 });
    // A durable subscription asked with copy is consumed as well, and says so.
    const sub = await client.openReceiver(await client.openSession(), undefined, { name: 'copy-sub', source: describedList('source', { address: 'amq.topic/copy.sub', durable: 2, 'expiry-policy': { type: 'symbol', value: 'never' }, 'distribution-mode': { type: 'symbol', value: 'copy' } }) });
    expect(sub.source?.fields['distribution-mode']).toBe('move');
    await client.close();
  });

  it('links the broker detaches itself (a message over the client\'s max-message-size) are forgotten by the connection, not kept until it closes', async () => {
    const containerId = `consumer-small-${process.pid}`;
    const client = await connect(containerId);
    await publish(client, 'c.big', ['x'.repeat(4096)]);
    const session = await client.openSession();
    const ROUNDS = 20;
    for (let i = 0; i < ROUNDS; i++) {
      const link = await client.openReceiver(session, 'c.big', { maxMessageSize: 1024 });
      const seen = detachErrorOf(link);
      client.receive(link, 1, () => undefined);
      await waitFor(() => seen.detached, { name: `small receiver ${i} detached`, timeout: 5000 });
      expect(seen.error?.condition).toBe('amqp:link:message-size-exceeded');
    }
    // The message is still there for a receiver that takes it.
    expect(await queueDepth(broker.port, 'c.big')).toBe(1);
    // Only the management link of this query's own connection is not ours: ours holds none now.
    expect(await linksOf(containerId)).toBe(0);
    await client.close();
  });
});

// A message sent to `exchange/key` is routed by that key, its subject arriving
// unchanged; its dead letter (rejected, expired) goes to its queue's alternate exchange
// routed by the same key, as RabbitMQ and qpidd do, also after kill -9 and a restart
// between the publish and the reject or expiry (the key is in the journal's record). A
// message sent with no key in the address is routed by its subject, its dead letter too.
// The backup an HA failover promotes has the key as well (the replicated record).
// On the old code every dead letter was routed by the subject.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient, bodyOf, type Received } from '../helpers/rhea-client.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';

/**
 * Direct exchange `name`.ex binding queue `name` by both `k1` and `s`; the queue's
 * alternate exchange `name`.dlx, a topic exchange, binds `name`.k1 by `k1` and `name`.s
 * by `s`: which of the two a dead letter lands on says which key it was routed by.
 */
async function declare(port: number, name: string): Promise<void> {
  await manage(port, 'CREATE', 'exchange', `${name}.dlx`, { 'exchange-type': 'topic', durable: true });
  for (const key of ['k1', 's']) {
    await manage(port, 'CREATE', 'queue', `${name}.${key}`, { durable: true });
    await manage(port, 'CREATE', 'binding', undefined, { exchange: `${name}.dlx`, queue: `${name}.${key}`, key });
  }
  await manage(port, 'CREATE', 'exchange', `${name}.ex`, { 'exchange-type': 'direct', durable: true });
  await manage(port, 'CREATE', 'queue', name, { durable: true, 'alternate-exchange': `${name}.dlx` });
  for (const key of ['k1', 's']) await manage(port, 'CREATE', 'binding', undefined, { exchange: `${name}.ex`, queue: name, key });
}

async function withClient<T>(port: number, fn: (client: TestClient) => Promise<T>): Promise<T> {
  const client = await TestClient.connect({ port });
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/** Take `n` messages from `queue` and reject them. */
async function rejectFrom(port: number, queue: string, n: number): Promise<void> {
  await withClient(port, async (client) => {
    const r = await client.openReceiver(queue);
    r.receiver.add_credit(n);
    for (const g of await r.next(n)) g.delivery.reject();
    await r.close();
  });
}

async function depths(port: number, name: string): Promise<{ k1: number; s: number }> {
  return { k1: await queueDepth(port, `${name}.k1`), s: await queueDepth(port, `${name}.s`) };
}

/** Wait until `count` dead letters are on `name`.k1 and `name`.s together; then their depths. */
async function deadLetters(port: number, name: string, count: number): Promise<{ k1: number; s: number }> {
  await waitFor(async () => {
    const d = await depths(port, name);
    return d.k1 + d.s === count;
  }, { name: `${count} dead letters of ${name}`, timeout: 20_000 });
  return depths(port, name);
}

async function receiveAll(port: number, queue: string, n: number): Promise<Received[]> {
  return withClient(port, async (client) => {
    const r = await client.openReceiver(queue);
    r.receiver.add_credit(n);
    const got = await r.next(n);
    for (const g of got) g.delivery.accept();
    await r.close();
    return got;
  });
}

afterAll(async () => {
  await killAllBrokers();
});

describe('dead letters are routed by the key their message was routed by', () => {
  let broker: TestBroker;
  beforeAll(async () => {
    broker = await TestBroker.start();
  });

  it('dead letter key - sent to ex/k1 with subject s, rejected and expired: the dead letters arrive on the k1 queue, subject s', async () => {
    await declare(broker.port, 'dk');
    await withClient(broker.port, (c) => c.send('dk.ex/k1', [{ subject: 's', body: 'rejected' }, { subject: 's', body: 'expired', ttl: 300 }]));
    await waitFor(async () => (await queueDepth(broker.port, 'dk')) === 1, { name: 'expired one gone', timeout: 20_000 });
    await rejectFrom(broker.port, 'dk', 1);
    // Old code: { k1: 0, s: 2 }, routed by the subject.
    expect(await deadLetters(broker.port, 'dk', 2)).toEqual({ k1: 2, s: 0 });
    const got = await receiveAll(broker.port, 'dk.k1', 2);
    expect(got.map((g) => [bodyOf(g.message), g.message.subject, g.message.message_annotations?.['x-opt-tandem-dead-letter-reason']])).toEqual([
      ['expired', 's', 'expired'],
      ['rejected', 's', 'rejected'],
    ]);
  });

  it('dead letter key - sent with no key (to the exchange, routed by its subject): its dead letter goes by its subject, as before', async () => {
    await declare(broker.port, 'dk.plain');
    await withClient(broker.port, (c) => c.send('dk.plain.ex', [{ subject: 's', body: 'rejected' }, { subject: 's', body: 'expired', ttl: 300 }]));
    await waitFor(async () => (await queueDepth(broker.port, 'dk.plain')) === 1, { name: 'expired one gone', timeout: 20_000 });
    await rejectFrom(broker.port, 'dk.plain', 1);
    expect(await deadLetters(broker.port, 'dk.plain', 2)).toEqual({ k1: 0, s: 2 });
  });
});

describe('dead letters after kill -9 and a restart', () => {
  it('dead letter key - sent to ex/k1 before the crash, rejected and expired after the restart: the dead letters go by k1', async () => {
    const first = await TestBroker.start();
    await declare(first.port, 'dkc');
    await withClient(first.port, (c) =>
      c.send('dkc.ex/k1', [
        { subject: 's', body: 'rejected', durable: true },
        { subject: 's', body: 'expired', durable: true, ttl: 2000 },
      ]),
    );
    // Both still queued at the crash: whatever happens to them happens after the restart.
    expect(await queueDepth(first.port, 'dkc')).toBe(2);
    await first.kill();
    const second = await TestBroker.start({ dataDir: first.dataDir });
    try {
      await waitFor(async () => (await queueDepth(second.port, 'dkc')) === 1, { name: 'expired one gone', timeout: 20_000 });
      await rejectFrom(second.port, 'dkc', 1);
      // Old code: { k1: 0, s: 2 }.
      expect(await deadLetters(second.port, 'dkc', 2)).toEqual({ k1: 2, s: 0 });
    } finally {
      await second.stop();
    }
  });
});

describe('dead letters on the backup an HA failover promotes', () => {
  it('dead letter key - sent to ex/k1 on the primary, rejected on the promoted backup: the dead letter goes by k1', async () => {
    const cluster = await TestCluster.ready(2);
    const primary = cluster.brokers[0]!;
    await declare(primary.port, 'dkh');
    await withClient(primary.port, (c) => c.send('dkh.ex/k1', [{ subject: 's', body: 'rejected', durable: true }]));
    await cluster.backupsCaughtUp(0);
    await primary.kill();
    expect((await cluster.promote(1)).code).toBe(0);
    await cluster.waitState(1, 'active');
    const port = cluster.ports[1]!;
    await rejectFrom(port, 'dkh', 1);
    // Old code: { k1: 0, s: 1 }.
    expect(await deadLetters(port, 'dkh', 1)).toEqual({ k1: 1, s: 0 });
  }, 120_000);
});

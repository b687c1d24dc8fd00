// Exactly-once publishing on a standalone broker (issue 16): a queue with a
// duplicate-detection window settles a resend `accepted` without a second copy,
// across kill -9 (keys from the journal and from its checkpoint), for consumed
// messages too, and for transactions (keys at commit; a rollback leaves none).
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';
import { encode } from '../../src/amqp/engine/encoder.js';
import { amqp } from '../../src/amqp/engine/types.js';
import { TestClient, bodyOf, sendRaw } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

const ids = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `m-${from + i}`);
const messages = (list: string[]) => list.map((id) => ({ message_id: id, body: id, durable: true }));

async function send(port: number, list: string[], address = 'orders'): Promise<string[]> {
  const c = await TestClient.connect({ port });
  try {
    return (await c.send(address, messages(list), { timeoutMs: 30_000 })).map((o) => o.state);
  } finally {
    await c.close();
  }
}

async function consume(port: number, n: number): Promise<string[]> {
  const c = await TestClient.connect({ port });
  try {
    return (await c.receiveAndAccept('orders', n, 20_000)).map((m) => String(bodyOf(m)));
  } finally {
    await c.close();
  }
}

// A consumer that settles first (rhea's default) is at-least-once: its
// acceptance is journaled after the broker already forgot the delivery, so a
// kill -9 straight after may bring the message back. A durable send acknowledged
// afterwards is a barrier: the journal writes in order and settles a send only
// once everything before it is written.
async function journalBarrier(port: number): Promise<void> {
  expect(await send(port, ['barrier'], 'barrier')).toEqual(['accepted']);
}

const show = async (port: number) => (await manage(port, 'READ', 'queue', 'orders')) as Record<string, number>;

describe('dedup - standalone broker', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('dedup - a resend after kill -9 is accepted and not enqueued again, queued or consumed, from the checkpoint and the journal', async () => {
    let broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'orders', { durable: true, 'qpid.dedup-window': 1_000_000, 'qpid.dedup-ttl': '10m' });
    await manage(broker.port, 'CREATE', 'queue', 'barrier', { durable: true });
    expect(await send(broker.port, ids(0, 100))).toEqual(Array(100).fill('accepted'));
    expect(await consume(broker.port, 40)).toEqual(ids(0, 40));
    // A clean stop writes a checkpoint: these keys come back from it.
    await broker.stop();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await send(broker.port, ids(100, 150))).toEqual(Array(50).fill('accepted'));
    expect(await consume(broker.port, 20)).toEqual(ids(40, 60));
    await journalBarrier(broker.port);
    // These come back from the journal after the checkpoint.
    await broker.kill();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await send(broker.port, ids(0, 150))).toEqual(Array(150).fill('accepted'));
    const after = await show(broker.port);
    expect(after).toMatchObject({ depth: 90, 'dedup-duplicates': 150, 'dedup-keys': 150 });
    // And once more, straight after the restart's own replay.
    await broker.kill();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await send(broker.port, [...ids(0, 150), 'm-new'])).toEqual(Array(151).fill('accepted'));
    expect(await consume(broker.port, 91)).toEqual([...ids(60, 150), 'm-new']);
    expect((await show(broker.port)).depth).toBe(0);
    await broker.stop();
  });

  it('dedup - without a window the same resend makes duplicates (the test shows the feature)', async () => {
    let broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'orders', { durable: true });
    await send(broker.port, ids(0, 20));
    await broker.kill();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    await send(broker.port, ids(0, 20));
    expect((await show(broker.port)).depth).toBe(40);
    await broker.stop();
  });

  it('dedup - transactions: a rolled-back send leaves no key, a resend commits once, a repeat inside one transaction is taken once', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'orders', { durable: true, 'qpid.dedup-window': 1000 });
    const url = `127.0.0.1:${broker.port}`;
    expect(await runPython('tx_send.py', [url, 'orders', 'rollback', 'ids=t1,t2'])).toMatchObject({ aborted: true });
    expect((await show(broker.port)).depth).toBe(0);
    expect(await runPython('tx_send.py', [url, 'orders', 'commit', 'ids=t1,t1,t2'])).toMatchObject({ committed: true });
    expect(await runPython('tx_send.py', [url, 'orders', 'commit', 'ids=t2,t1'])).toMatchObject({ committed: true });
    expect(await send(broker.port, ['t1'])).toEqual(['accepted']);
    await broker.kill();
    const again = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await runPython('tx_send.py', [`127.0.0.1:${again.port}`, 'orders', 'commit', 'ids=t1,t2,t3'])).toMatchObject({ committed: true });
    expect(await consume(again.port, 3)).toEqual(['t1', 't2', 't3']);
    expect(await show(again.port)).toMatchObject({ depth: 0, 'dedup-duplicates': 2 });
    await again.stop();
  });

  it('dedup - a window set on an existing queue (tandem queue set) takes keys from then on, and holds across kill -9', async () => {
    let broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'orders', { durable: true });
    await send(broker.port, ids(0, 10));
    const r = await tandem(['queue', 'set', 'orders', '--dedup-window', '1000', '--dedup-ttl', '1h', '-b', broker.url]);
    expect(r.code, r.stderr).toBe(0);
    // Sent before the window: not in it, so a resend of those is a new message.
    await send(broker.port, [...ids(5, 10), 'k-1', 'k-1']);
    expect(await show(broker.port)).toMatchObject({ depth: 16, 'qpid.dedup-window': 1000, 'qpid.dedup-ttl': 3_600_000, 'dedup-duplicates': 1 });
    await broker.kill();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await show(broker.port)).toMatchObject({ 'qpid.dedup-window': 1000, 'qpid.dedup-ttl': 3_600_000 });
    await send(broker.port, [...ids(5, 10), 'k-1']);
    expect((await show(broker.port)).depth).toBe(16);
    // Only the dedup settings may change, and a window can be turned off.
    await expect(manage(broker.port, 'UPDATE', 'queue', 'orders', { 'max-count': 5 })).rejects.toThrow(/only a queue's dedup/);
    await manage(broker.port, 'UPDATE', 'queue', 'orders', { 'qpid.dedup-window': 0 });
    await send(broker.port, ['k-1']);
    expect(await show(broker.port)).toMatchObject({ depth: 17, 'qpid.dedup-window': 0 });
    await broker.stop();
  });

  it('dedup - a message whose sections are described by symbols (spec 3.2) is read, keyed and delivered as the coded one', async () => {
    // Refused as malformed before: the broker read only coded descriptors.
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'orders', { durable: true, 'qpid.dedup-window': 1000 });
    const section = (symbol: string, value: Parameters<typeof encode>[0]) => encode(amqp.described(amqp.symbol(symbol), value));
    const symbolic = Buffer.concat([
      section('amqp:header:list', amqp.list([amqp.boolean(true), amqp.ubyte(6)])),
      section('amqp:properties:list', amqp.list([amqp.string('sym-1'), amqp.null(), amqp.null(), amqp.string('invoices')])),
      section('amqp:data:binary', amqp.binary(Buffer.from('by symbols'))),
    ]);
    const c = await TestClient.connect({ port: broker.port });
    const sender = await c.openSender('orders');
    expect(await sendRaw(sender, symbolic)).toEqual({ state: 'accepted', condition: undefined });
    // The same message-id again, this time from rhea (coded descriptors): a duplicate.
    expect((await c.send(sender, [{ message_id: 'sym-1', body: 'again' }]))[0]!.state).toBe('accepted');
    await c.close();
    expect(await show(broker.port)).toMatchObject({ depth: 1, 'dedup-duplicates': 1 });
    // Durable: it is still there after kill -9.
    await broker.kill();
    const again = await TestBroker.start({ dataDir: broker.dataDir });
    const r = await TestClient.connect({ port: again.port });
    const [m] = await r.receiveAndAccept('orders', 1, 20_000);
    expect(m).toMatchObject({ message_id: 'sym-1', subject: 'invoices', durable: true, priority: 6 });
    expect(String(bodyOf(m!))).toBe('by symbols');
    await r.close();
    await again.stop();
  });

  it('dedup - bad window arguments are refused at declare, saying what is accepted', async () => {
    const broker = await TestBroker.start();
    await expect(manage(broker.port, 'CREATE', 'queue', 'bad', { 'qpid.dedup-window': '-5' })).rejects.toThrow(/dedup-window must be a whole number/);
    await expect(manage(broker.port, 'CREATE', 'queue', 'bad', { 'qpid.dedup-window': 10, 'qpid.dedup-ttl': 'soon' })).rejects.toThrow(/dedup-ttl must be a duration/);
    await expect(manage(broker.port, 'CREATE', 'queue', 'bad', { 'qpid.dedup-ttl': '1m' })).rejects.toThrow(/need a dedup-window/);
    await broker.stop();
  });
});

// Drain (spec 2.6.7): a receiver that sets drain=true gets what the queue holds and then
// a flow with its credit used up, so it knows nothing more is coming. qpid-jms drains on
// every receive(timeout) that found nothing and before a rollback; without the answer
// such a receiver waits until its own timeout, or for ever.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Receiver } from 'rhea';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf, type TestReceiver } from '../helpers/rhea-client.js';

let broker: TestBroker;
let client: TestClient;

beforeAll(async () => {
  broker = await TestBroker.start();
  client = await TestClient.connect({ port: broker.port });
});

afterAll(async () => {
  await client?.close();
  await killAllBrokers();
});

interface ReceiverCounters {
  credit: number;
  delivery_count: number;
  drain: boolean;
}

/**
 * Ask to drain `credit` more and wait until it is used up: by the broker's drained flow,
 * or by deliveries (then no flow is owed: the receiver's credit is at zero).
 */
function drain(r: TestReceiver, credit: number, timeoutMs = 5000): Promise<void> {
  const receiver = r.receiver as Receiver & ReceiverCounters;
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no drained flow within ${timeoutMs} ms (got ${r.received.length})`)), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      receiver.removeListener('receiver_drained', done);
      receiver.removeListener('message', onMessage);
      receiver.drain = false;
      resolve();
    };
    // After the test receiver's own listener, which records the message first.
    const onMessage = () => {
      if (receiver.credit === 0) done();
    };
    receiver.on('receiver_drained', done);
    receiver.on('message', onMessage);
    receiver.drain = true;
    if (credit > 0) receiver.add_credit(credit);
    else receiver.drain_credit();
  });
}

describe('drain', () => {
  it('an empty queue answers a drain at once, and credit given later still works', async () => {
    const r = await client.openReceiver('drain.empty');
    const receiver = r.receiver as Receiver & ReceiverCounters;
    await drain(r, 5);
    expect(receiver.credit).toBe(0);
    expect(receiver.delivery_count).toBe(5);
    expect(r.received).toHaveLength(0);

    // delivery-count moved by the drained credit on both sides: new credit is honoured exactly.
    receiver.add_credit(2);
    await client.send('drain.empty', ['a', 'b', 'c']);
    const got = await r.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['a', 'b']);
    for (const g of got) g.delivery.accept();
    expect(await r.drainFor(300)).toHaveLength(0);
    await drain(r, 3);
    const rest = r.received.splice(0);
    expect(rest.map((g) => bodyOf(g.message))).toEqual(['c']);
    for (const g of rest) g.delivery.accept();
    expect(receiver.delivery_count).toBe(10);
    await r.close();
  });

  it('a drain delivers what the queue holds, then reports the rest of its credit used', async () => {
    await client.send('drain.some', ['x1', 'x2', 'x3']);
    const r = await client.openReceiver('drain.some');
    await drain(r, 10);
    const got = r.received.splice(0);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['x1', 'x2', 'x3']);
    for (const g of got) g.delivery.accept();
    expect((r.receiver as Receiver & ReceiverCounters).delivery_count).toBe(10);
    await r.close();
  });

  it('a browser drains too, without taking anything', async () => {
    await client.send('drain.browse', ['b1', 'b2']);
    const r = await client.openReceiver({ address: 'drain.browse', distribution_mode: 'copy' });
    await drain(r, 4);
    expect(r.received.map((g) => bodyOf(g.message))).toEqual(['b1', 'b2']);
    await r.close();
    const taken = await client.receiveAndAccept('drain.browse', 2);
    expect(taken.map(bodyOf)).toEqual(['b1', 'b2']);
  });

  it('repeated drains while a publisher sends lose and duplicate nothing', async () => {
    const total = 600;
    const r = await client.openReceiver('drain.busy');
    const sender = await client.openSender('drain.busy');
    const publishing = client.send(sender, Array.from({ length: total }, (_, i) => `p${i}`), { timeoutMs: 30_000 });
    const seen: string[] = [];
    // Bounded: each round drains 25; the publisher finishes long before 400 rounds.
    for (let round = 0; round < 400 && seen.length < total; round++) {
      await drain(r, 25);
      for (const g of r.received.splice(0)) {
        seen.push(String(bodyOf(g.message)));
        g.delivery.accept();
      }
    }
    await publishing;
    expect(seen).toEqual(Array.from({ length: total }, (_, i) => `p${i}`));
    await r.close();
  });
});

// Messaging behaviour of a standalone tandemd seen by a rhea client: delivery,
// credit, settlement outcomes, redelivery, priorities, browsing, expiry and
// queue limits. One broker for the file; each test uses its own queue names.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

let broker: TestBroker;
let client: TestClient;
const opened: TestClient[] = [];

async function connect(): Promise<TestClient> {
  const c = await TestClient.connect({ port: broker.port });
  opened.push(c);
  return c;
}

async function queueInfo(name: string): Promise<Record<string, unknown>> {
  return (await manage(broker.port, 'READ', 'queue', name)) as Record<string, unknown>;
}

async function addQueue(name: string, args: Record<string, unknown> = {}): Promise<void> {
  await manage(broker.port, 'CREATE', 'queue', name, args);
}

beforeAll(async () => {
  broker = await TestBroker.start();
  client = await connect();
});

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
});

describe('messaging', () => {
  it('send/receive - messages arrive in order and are accepted', async () => {
    const outcomes = await client.send('sr.q', 10);
    expect(outcomes.map((o) => o.state)).toEqual(Array(10).fill('accepted'));
    const got = await client.receiveAndAccept('sr.q', 10);
    expect(got.map(bodyOf)).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    await waitFor(async () => (await queueInfo('sr.q')).depth === 0, { name: 'queue drained' });
  });

  it('round-robin - two consumers share a queue evenly', async () => {
    await addQueue('rr.q');
    const a = await client.openReceiver('rr.q');
    const b = await (await connect()).openReceiver('rr.q');
    a.receiver.add_credit(20);
    b.receiver.add_credit(20);
    await waitFor(async () => (await queueInfo('rr.q')).consumers === 2, { name: 'two consumers' });
    await client.send('rr.q', 10);
    await waitFor(() => a.received.length + b.received.length === 10, { name: '10 delivered' });
    expect(a.received.length).toBe(5);
    expect(b.received.length).toBe(5);
    for (const r of [...a.received, ...b.received]) r.delivery.accept();
    await a.close();
    await b.close();
  });

  it('credit - a receiver with credit 1 gets one message at a time', async () => {
    await client.send('credit.q', 3);
    const r = await client.openReceiver('credit.q');
    r.receiver.add_credit(1);
    const [first] = await r.next(1);
    expect(bodyOf(first.message)).toBe('m0');
    expect(await r.drainFor(300)).toHaveLength(0);
    first.delivery.accept();
    r.receiver.add_credit(1);
    const [second] = await r.next(1);
    expect(bodyOf(second.message)).toBe('m1');
    second.delivery.accept();
    await r.close();
    const info = await queueInfo('credit.q');
    expect(info.depth).toBe(1);
  });

  it('credit - one grant larger than the session window (2048 deliveries) is used up as the client settles', async () => {
    // Regression: the broker stopped at 2047 deliveries and never woke up again.
    const n = 3000;
    const c = await connect();
    await c.send('credit.big', n, { timeoutMs: 30_000 });
    const r = await c.openReceiver('credit.big');
    r.receiver.add_credit(n);
    let got = 0;
    while (got < n) {
      const batch = await r.next(Math.min(250, n - got));
      for (const m of batch) m.delivery.accept();
      got += batch.length;
    }
    expect(got).toBe(n);
    await waitFor(async () => (await queueInfo('credit.big')).depth === 0, { name: 'credit.big drained' });
  });

  it('redelivery - unsettled deliveries come back with delivery-count raised when the link closes', async () => {
    await client.send('redeliver-link.q', 3);
    const r = await client.openReceiver('redeliver-link.q');
    r.receiver.add_credit(3);
    const first = await r.next(3);
    expect(first.map((g) => g.message.delivery_count ?? 0)).toEqual([0, 0, 0]);
    await r.close();
    const r2 = await client.openReceiver('redeliver-link.q');
    r2.receiver.add_credit(3);
    const again = await r2.next(3);
    expect(again.map((g) => bodyOf(g.message))).toEqual(['m0', 'm1', 'm2']);
    expect(again.map((g) => g.message.delivery_count)).toEqual([1, 1, 1]);
    for (const g of again) g.delivery.accept();
    await r2.close();
  });

  it('redelivery - unsettled deliveries come back when the consumer connection drops', async () => {
    await client.send('redeliver-conn.q', 2);
    const other = await connect();
    const r = await other.openReceiver('redeliver-conn.q');
    r.receiver.add_credit(2);
    await r.next(2);
    other.destroy();
    await waitFor(async () => (await queueInfo('redeliver-conn.q')).consumers === 0, { name: 'consumer gone' });
    const r2 = await client.openReceiver('redeliver-conn.q');
    r2.receiver.add_credit(2);
    const again = await r2.next(2);
    expect(again.map((g) => bodyOf(g.message))).toEqual(['m0', 'm1']);
    expect(again.map((g) => g.message.delivery_count)).toEqual([1, 1]);
    for (const g of again) g.delivery.accept();
    await r2.close();
  });

  it('released - messages go back in the same order with delivery-count unchanged', async () => {
    await client.send('release.q', 3);
    const r = await client.openReceiver('release.q');
    r.receiver.add_credit(3);
    const got = await r.next(3);
    for (const g of got.reverse()) g.delivery.release();
    r.receiver.add_credit(3);
    const again = await r.next(3);
    expect(again.map((g) => bodyOf(g.message))).toEqual(['m0', 'm1', 'm2']);
    expect(again.map((g) => g.message.delivery_count ?? 0)).toEqual([0, 0, 0]);
    for (const g of again) g.delivery.accept();
    await r.close();
  });

  it('rejected - the message is gone, or goes to the alternate exchange', async () => {
    await client.send('reject.q', 1);
    const [m] = await (async () => {
      const r = await client.openReceiver('reject.q');
      r.receiver.add_credit(1);
      const got = await r.next(1);
      got[0].delivery.reject({ condition: 'app:bad', description: 'no' });
      await r.close();
      return got;
    })();
    expect(bodyOf(m.message)).toBe('m0');
    await waitFor(async () => (await queueInfo('reject.q')).depth === 0, { name: 'rejected message gone' });

    await manage(broker.port, 'CREATE', 'exchange', 'dlx.fanout', { 'exchange-type': 'fanout' });
    await addQueue('dlq');
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'dlx.fanout', queue: 'dlq', key: '' });
    await addQueue('reject-alt.q', { 'alternate-exchange': 'dlx.fanout' });
    await client.send('reject-alt.q', ['poison']);
    const r = await client.openReceiver('reject-alt.q');
    r.receiver.add_credit(1);
    const [p] = await r.next(1);
    p.delivery.reject();
    await r.close();
    const dead = await client.receiveAndAccept('dlq', 1);
    expect(bodyOf(dead[0])).toBe('poison');
    expect((await queueInfo('reject-alt.q')).depth).toBe(0);
  });

  it('modified - delivery-failed raises delivery-count and redelivers', async () => {
    await client.send('modified.q', 1);
    const r = await client.openReceiver('modified.q');
    r.receiver.add_credit(2);
    const [g] = await r.next(1);
    g.delivery.modified({ delivery_failed: true });
    const [again] = await r.next(1);
    expect(bodyOf(again.message)).toBe('m0');
    expect(again.message.delivery_count).toBe(1);
    again.delivery.accept();
    await r.close();
  });

  it('modified - undeliverable-here is not redelivered to that link but goes to another', async () => {
    await client.send('undeliverable.q', 1);
    const r = await client.openReceiver('undeliverable.q');
    r.receiver.add_credit(5);
    const [g] = await r.next(1);
    g.delivery.modified({ undeliverable_here: true });
    expect(await r.drainFor(300)).toHaveLength(0);
    const other = await client.openReceiver('undeliverable.q');
    other.receiver.add_credit(1);
    const [o] = await other.next(1);
    expect(bodyOf(o.message)).toBe('m0');
    o.delivery.accept();
    await other.close();
    await r.close();
  });

  it('pre-settled - sends with snd-settle-mode settled are enqueued', async () => {
    const outcomes = await client.send('presettled-send.q', 5, { sender: { snd_settle_mode: 1 } });
    expect(outcomes).toHaveLength(5);
    await waitFor(async () => (await queueInfo('presettled-send.q')).depth === 5, { name: 'five enqueued' });
    const got = await client.receiveAndAccept('presettled-send.q', 5);
    expect(got.map(bodyOf)).toEqual(['m0', 'm1', 'm2', 'm3', 'm4']);
  });

  it('pre-settled - a receiver asking for settled deliveries gets them settled and dequeued', async () => {
    await client.send('presettled-recv.q', 3);
    const r = await client.openReceiver('presettled-recv.q', { snd_settle_mode: 1 });
    expect((r.receiver as unknown as { remote: { attach: { snd_settle_mode?: number } } }).remote.attach.snd_settle_mode).toBe(1);
    r.receiver.add_credit(3);
    const got = await r.next(3);
    expect(got.every((g) => (g.delivery as unknown as { remote_settled: boolean }).remote_settled)).toBe(true);
    await waitFor(async () => (await queueInfo('presettled-recv.q')).depth === 0, { name: 'dequeued without outcomes' });
    await r.close();
  });

  it('priorities - higher priority messages are delivered first', async () => {
    await addQueue('prio.q', { priorities: 10 });
    const prios = [1, 5, 9, 0, 7, 5];
    await client.send('prio.q', prios.map((p, i) => ({ body: `p${p}-${i}`, priority: p })));
    const got = await client.receiveAndAccept('prio.q', prios.length);
    expect(got.map(bodyOf)).toEqual(['p9-2', 'p7-4', 'p5-1', 'p5-5', 'p1-0', 'p0-3']);
  });

  it('browse - distribution-mode copy sees messages and leaves them', async () => {
    await client.send('browse.q', 3);
    const seen = await client.browse('browse.q', 3);
    expect(seen.map(bodyOf)).toEqual(['m0', 'm1', 'm2']);
    expect((await queueInfo('browse.q')).depth).toBe(3);
    const seenAgain = await client.browse('browse.q', 3);
    expect(seenAgain).toHaveLength(3);
    const got = await client.receiveAndAccept('browse.q', 3);
    expect(got.map(bodyOf)).toEqual(['m0', 'm1', 'm2']);
  });

  it('ttl - a message with a ttl expires and is dropped', async () => {
    await client.send('ttl.q', [{ body: 'short', ttl: 200 }, { body: 'keep' }]);
    await waitFor(async () => (await queueInfo('ttl.q')).depth === 1, { name: 'expired dropped', timeout: 5000 });
    const got = await client.receiveAndAccept('ttl.q', 1);
    expect(bodyOf(got[0])).toBe('keep');
  });

  it('ttl - properties.absolute-expiry-time is honoured, with and without message annotations', async () => {
    // The annotated one is read by the generic decode, the plain one by the fast read (src/amqp/message-head.ts).
    const soon = Date.now() + 300;
    await client.send('abs-expiry.q', [
      { body: 'plain', absolute_expiry_time: soon },
      { body: 'annotated', absolute_expiry_time: soon, message_annotations: { 'x-opt-k': 1 } },
      { body: 'keep' },
    ]);
    await waitFor(async () => (await queueInfo('abs-expiry.q')).depth === 1, { name: 'both expired', timeout: 5000 });
    const got = await client.receiveAndAccept('abs-expiry.q', 1);
    expect(bodyOf(got[0])).toBe('keep');
  });

  it('ttl - an absolute-expiry-time before 1970 is a message that has expired, not an internal error', async () => {
    // A timestamp is signed: a negative one went into the record as it was, which cannot hold it.
    await addQueue('abs-expiry-past.q', { durable: true });
    const outcomes = await client.send('abs-expiry-past.q', [{ body: 'past', durable: true, absolute_expiry_time: -1000 }, { body: 'keep', durable: true }]);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted']);
    await waitFor(async () => (await queueInfo('abs-expiry-past.q')).depth === 1, { name: 'the past one expired', timeout: 5000 });
    const got = await client.receiveAndAccept('abs-expiry-past.q', 1);
    expect(bodyOf(got[0])).toBe('keep');
  });

  it('ttl - with both a header ttl and an absolute-expiry-time the earlier one holds', async () => {
    // The absolute time is the earlier: the message expires by it, long before its ttl.
    await client.send('both-expiry.q', [{ body: 'abs-soon', ttl: 600_000, absolute_expiry_time: new Date(Date.now() + 300) }, { body: 'keep' }]);
    await waitFor(async () => (await queueInfo('both-expiry.q')).depth === 1, { name: 'expired by its absolute-expiry-time', timeout: 5000 });
    expect(bodyOf((await client.receiveAndAccept('both-expiry.q', 1))[0])).toBe('keep');
    // And the ttl a consumer is handed is what is left until then, not the header's own.
    await client.send('both-expiry-left.q', [{ body: 'x', ttl: 600_000, absolute_expiry_time: new Date(Date.now() + 60_000) }]);
    const [m] = await client.receiveAndAccept('both-expiry-left.q', 1);
    expect(m.ttl).toBeGreaterThan(0);
    expect(m.ttl).toBeLessThanOrEqual(60_000);
  });

  it('ttl - a queue default ttl expires messages, to the alternate exchange if set', async () => {
    await manage(broker.port, 'CREATE', 'exchange', 'expired.fanout', { 'exchange-type': 'fanout' });
    await addQueue('expired.dlq');
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'expired.fanout', queue: 'expired.dlq' });
    await addQueue('ttl-default.q', { 'default-ttl': 200, 'alternate-exchange': 'expired.fanout' });
    await client.send('ttl-default.q', ['old']);
    await waitFor(async () => (await queueInfo('ttl-default.q')).depth === 0, { name: 'default ttl expiry', timeout: 5000 });
    const got = await client.receiveAndAccept('expired.dlq', 1);
    expect(bodyOf(got[0])).toBe('old');
  });

  it('ttl - a received message carries the remaining ttl', async () => {
    await client.send('ttl-left.q', [{ body: 'x', ttl: 60_000 }]);
    const [m] = await client.receiveAndAccept('ttl-left.q', 1);
    expect(m.ttl).toBeGreaterThan(50_000);
    expect(m.ttl).toBeLessThanOrEqual(60_000);
  });

  it('ttl - the header fields the broker does not change arrive as sent (first-acquirer, priority, durable)', async () => {
    await client.send('ttl-header.q', [{ body: 'x', ttl: 60_000, first_acquirer: true, priority: 7, durable: true }]);
    const [m] = await client.receiveAndAccept('ttl-header.q', 1);
    expect(m.ttl).toBeGreaterThan(50_000);
    expect(m.first_acquirer).toBe(true);
    expect(m.priority).toBe(7);
    expect(m.durable).toBe(true);
  });

  it('limits - max-count with policy reject refuses the sender with a clear description', async () => {
    await addQueue('full.q', { 'max-count': 2 });
    const outcomes = await client.send('full.q', 3);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted', 'rejected']);
    expect(outcomes[2].error?.condition).toBe('amqp:resource-limit-exceeded');
    expect(outcomes[2].error?.description).toMatch(/full.q.*full.*max-count 2/);
  });

  it('limits - max-size with policy reject refuses the sender', async () => {
    await addQueue('fullsize.q', { 'max-size': 300 });
    const outcomes = await client.send('fullsize.q', [{ body: 'a'.repeat(200) }, { body: 'b'.repeat(200) }]);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'rejected']);
    expect(outcomes[1].error?.description).toMatch(/max-size 300/);
  });

  it('limits - policy ring drops the oldest', async () => {
    await addQueue('ring.q', { 'max-count': 2, policy: 'ring' });
    const outcomes = await client.send('ring.q', 4);
    expect(outcomes.map((o) => o.state)).toEqual(Array(4).fill('accepted'));
    const got = await client.receiveAndAccept('ring.q', 2);
    expect(got.map(bodyOf)).toEqual(['m2', 'm3']);
  });

  it('limits - policy ring holds its limit while every message is out with a consumer: the new one is the one it loses', async () => {
    await addQueue('ring-acquired.q', { 'max-count': 2, policy: 'ring' });
    const r = await client.openReceiver('ring-acquired.q');
    r.receiver.add_credit(10);
    await client.send('ring-acquired.q', ['a', 'b']);
    const held = await r.next(2);
    expect(held.map((g) => bodyOf(g.message))).toEqual(['a', 'b']);
    // Nothing available can make way: the sender is settled as on any ring, the queue stays at its limit.
    expect((await client.send('ring-acquired.q', ['lost'])).map((o) => o.state)).toEqual(['accepted']);
    expect(await queueInfo('ring-acquired.q')).toMatchObject({ depth: 2, acquired: 2, 'ring-overflow': 1 });
    for (const g of held) g.delivery.accept();
    await waitFor(async () => (await queueInfo('ring-acquired.q')).depth === 0, { name: 'settled' });
    await r.close();
    await client.send('ring-acquired.q', ['after']);
    expect((await client.receiveAndAccept('ring-acquired.q', 1)).map(bodyOf)).toEqual(['after']);
  });

  it('anonymous relay - a sender with no target address routes by each message\'s to', async () => {
    await addQueue('relay.a');
    await addQueue('relay.b');
    const outcomes = await client.send(undefined, [{ to: 'relay.a', body: 'A' }, { to: 'relay.b', body: 'B' }]);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted']);
    expect(bodyOf((await client.receiveAndAccept('relay.a', 1))[0])).toBe('A');
    expect(bodyOf((await client.receiveAndAccept('relay.b', 1))[0])).toBe('B');
  });

  it('large messages - a message bigger than the frame size goes through in pieces', async () => {
    const big = 'x'.repeat(300_000);
    const outcomes = await client.send('large.q', [{ body: big }]);
    expect(outcomes[0].state).toBe('accepted');
    const [m] = await client.receiveAndAccept('large.q', 1);
    expect(bodyOf(m)).toBe(big);
  });
});

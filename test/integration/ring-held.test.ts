// A ring queue holding messages until their delivery time (x-opt-delivery-time), on a
// real tandemd: held messages count in the limit but never make way for new ones
// (docs/jms.md), after a kill -9 and a restart too, when the rows recovery made (bodies
// in the journal) have not been read for their delivery time yet; and a ring with a
// max-size never goes over it to keep a held message.
import { afterAll, describe, expect, it } from 'vitest';
import type { Message } from 'rhea';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

async function queueShow(port: number, name: string): Promise<Record<string, number>> {
  return (await manage(port, 'READ', 'queue', name)) as Record<string, number>;
}

function held(body: string, due: number): Message {
  return { body, durable: true, message_annotations: { 'x-opt-delivery-time': due } };
}

describe('ring queues with held messages', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('ring held - after kill -9 and a restart, a full ring drops its oldest available message, not a held one before its time', async () => {
    let broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'ring.held', { durable: true, 'max-count': 4, policy: 'ring' });
    const client = await TestClient.connect({ port: broker.port });
    // Far enough ahead to be still held after the restart, near enough to be delivered in the test.
    const due = Date.now() + 10_000;
    const sent = await client.send('ring.held', [held('h1', due), held('h2', due), { body: 'a1', durable: true }, { body: 'a2', durable: true }]);
    expect(sent.every((o) => o.state === 'accepted')).toBe(true);
    expect(await queueShow(broker.port, 'ring.held')).toMatchObject({ depth: 4, scheduled: 2 });
    client.connection.close();
    await broker.kill();

    broker = await TestBroker.start({ dataDir: broker.dataDir });
    const after = await TestClient.connect({ port: broker.port });
    expect((await after.send('ring.held', [{ body: 'a3', durable: true }]))[0]!.state).toBe('accepted');
    const r = await after.openReceiver('ring.held');
    r.receiver.add_credit(10);
    // Old code: the ring took the oldest row, h1 (not read for its delivery time since the restart), and a1 stayed.
    const available = await r.next(2, 10_000);
    for (const m of available) m.delivery.accept();
    expect(available.map((m) => bodyOf(m.message))).toEqual(['a2', 'a3']);
    const later = await r.next(2, Math.max(0, due - Date.now()) + 10_000);
    for (const m of later) m.delivery.accept();
    expect(later.map((m) => bodyOf(m.message))).toEqual(['h1', 'h2']);
    expect(await r.drainFor(200)).toHaveLength(0);
    after.connection.close();
    await broker.stop();
  }, 60_000);

  it('ring held - a ring with max-size full of held messages loses the new message instead of going over its max-size', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'ring.size', { 'max-size': 1000, policy: 'ring' });
    const client = await TestClient.connect({ port: broker.port });
    const due = Date.now() + 60_000;
    await client.send('ring.size', [held('h'.repeat(700), due)]);
    // Old code: the held message's bytes counted as ones that could make way, none did, and the queue went over max-size.
    expect((await client.send('ring.size', [{ body: 'n'.repeat(500) }]))[0]!.state).toBe('accepted');
    const shown = await queueShow(broker.port, 'ring.size');
    expect(shown).toMatchObject({ depth: 1, scheduled: 1, 'ring-overflow': 1 });
    expect(shown['byte-depth']).toBeLessThanOrEqual(1000);
    client.connection.close();
    await broker.stop();
  }, 30_000);
});

// republish (src/admin/republish.ts, what `tandem ha diverged republish` runs) against a
// real tandemd, with stored messages the diverged-set test cannot make: one without a
// header (it gets one holding only the delivery-count), and one whose stored header does
// not parse (the run stops there with a clear error, once the ones before it are
// settled and counted), and messages whose stored expiry leaves less than their sender's
// ttl, or none (they go with the ttl left). The full path, from a diverged journal to a consumer, is in
// ha-divergence.test.ts.
import rhea from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { republish, type StoredMessage } from '../../src/admin/republish.js';
import { parseIncoming } from '../../src/amqp/message-codec.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { tandem } from '../helpers/cluster.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

afterEach(async () => {
  await killAllBrokers();
});

/** A message as the broker stores it: the sender's bytes, read as the broker reads them. */
const stored = (queue: string, bytes: Buffer, expiresAt = 0): StoredMessage => {
  const head = parseIncoming(bytes);
  return { queue, message: { bytes, headerLength: head.headerLength, deliveryCount: head.deliveryCount, expiresAt } };
};

/** rhea writes a header first, even an empty one: the message without it starts at its properties. */
const withoutHeader = (bytes: Buffer): Buffer => bytes.subarray(parseIncoming(bytes).headerLength);

describe('republish', () => {
  it('republish - a headerless message gets a header of delivery-count 1 alone; a stored header that does not parse stops the run after the ones before it are accepted', async () => {
    const broker = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'rp', '-b', `127.0.0.1:${broker.port}`])).code).toBe(0);
    const headerless = withoutHeader(rhea.message.encode({ message_id: 'h-0', body: 'headerless' }));
    const counted = rhea.message.encode({ durable: true, priority: 6, delivery_count: 4, message_id: 'h-1', body: 'counted' });
    // A header list holding a field of type 0xff: no AMQP type.
    const brokenHeader = Buffer.from([0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0xff]);
    const brokenBytes = Buffer.concat([brokenHeader, withoutHeader(rhea.message.encode({ message_id: 'h-2', body: 'broken' }))]);
    const broken: StoredMessage = { queue: 'rp', message: { bytes: brokenBytes, headerLength: brokenHeader.length, deliveryCount: 0, expiresAt: 0 } };
    const messages = [stored('rp', headerless), stored('rp', counted), broken, stored('rp', rhea.message.encode({ message_id: 'h-3', body: 'after' }))];
    expect(messages[0]!.message.headerLength).toBe(0);

    const accepted: number[] = [];
    await expect(republish({ host: '127.0.0.1', port: broker.port }, messages, (n) => accepted.push(n), 10_000)).rejects.toThrow(
      /message 3 \(queue 'rp'\) cannot be sent: its stored header does not parse/,
    );
    expect(accepted.at(-1), 'the two before it were accepted and counted').toBe(2);

    const client = await TestClient.connect({ port: broker.port });
    try {
      const r = await client.openReceiver('rp');
      r.receiver.add_credit(10);
      const got = await r.next(2);
      expect(await r.drainFor(300), 'nothing from the unreadable one on').toEqual([]);
      expect(got.map((g) => [g.message.message_id, bodyOf(g.message), g.message.delivery_count])).toEqual([
        ['h-0', 'headerless', 1],
        ['h-1', 'counted', 5],
      ]);
      expect(got[0]!.message.durable, 'the header added says nothing but the count').toBeFalsy();
      expect(got[1]!.message).toMatchObject({ durable: true, priority: 6 });
      for (const g of got) g.delivery.accept();
    } finally {
      await client.close();
    }
  });

  it('republish - a message goes with the ttl its stored expiry leaves, not its sender\'s again; one already expired expires on arrival', async () => {
    const broker = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'rt', '-b', `127.0.0.1:${broker.port}`])).code).toBe(0);
    const now = Date.now();
    // Sent with an hour's ttl; stored with a minute left (the rest went by before the set-aside).
    const left = stored('rt', rhea.message.encode({ ttl: 3_600_000, message_id: 't-0', body: 'a minute left' }), now + 60_000);
    // An expiry from its queue's default ttl: none in the header at all.
    const byDefault = stored('rt', rhea.message.encode({ message_id: 't-1', body: 'default ttl' }), now + 30_000);
    const past = stored('rt', rhea.message.encode({ ttl: 3_600_000, message_id: 't-2', body: 'expired' }), now - 1000);
    const never = stored('rt', rhea.message.encode({ message_id: 't-3', body: 'no expiry' }));
    expect(await republish({ host: '127.0.0.1', port: broker.port }, [left, byDefault, past, never], () => undefined, 10_000)).toBe(4);
    const client = await TestClient.connect({ port: broker.port });
    try {
      const r = await client.openReceiver('rt');
      r.receiver.add_credit(10);
      const got = await r.next(3);
      expect(await r.drainFor(300), 'the expired one expired on arrival').toEqual([]);
      expect(got.map((g) => bodyOf(g.message))).toEqual(['a minute left', 'default ttl', 'no expiry']);
      const [minute, def, none] = got.map((g) => g.message.ttl as number | undefined);
      expect(minute).toBeGreaterThan(0);
      expect(minute).toBeLessThanOrEqual(60_000);
      expect(def).toBeGreaterThan(0);
      expect(def).toBeLessThanOrEqual(30_000);
      expect(none).toBeUndefined();
      for (const g of got) g.delivery.accept();
    } finally {
      await client.close();
    }
  });
});

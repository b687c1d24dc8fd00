// A topic subscription with a selector on a queue's alternate exchange judges each dead
// letter as its consumer gets it. JMSExpiration is the dead letter's expiry: none for an
// expired message's dead letter, nor for one whose expiry came from its queue's
// default-ttl (the header goes out without a ttl: qpid-jms shows 0). On the old code the
// selector was asked with the expiry the message had on the queue it left, so
// `JMSExpiration = 0` passed over dead letters whose consumers see 0.
import rhea from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

let broker: TestBroker;

beforeAll(async () => {
  broker = await TestBroker.start();
});

afterAll(async () => {
  await killAllBrokers();
});

describe('dead letters through a selecting subscription', () => {
  it('dead letter selectors - JMSExpiration is the expiry the dead letter goes out with', async () => {
    await manage(broker.port, 'CREATE', 'exchange', 'dls.x', { 'exchange-type': 'fanout' });
    await manage(broker.port, 'CREATE', 'queue', 'dls.expiring', { 'alternate-exchange': 'dls.x' });
    await manage(broker.port, 'CREATE', 'queue', 'dls.defaulted', { 'alternate-exchange': 'dls.x', 'default-ttl': '1h' });
    await manage(broker.port, 'CREATE', 'queue', 'dls.rejected', { 'alternate-exchange': 'dls.x' });
    const client = await TestClient.connect({ port: broker.port });
    try {
      const none = await client.openReceiver({ address: 'dls.x', filter: rhea.filter.selector('JMSExpiration = 0') });
      const some = await client.openReceiver({ address: 'dls.x', filter: rhea.filter.selector('JMSExpiration > 0') });
      none.receiver.add_credit(10);
      some.receiver.add_credit(10);
      // Expired on its queue: its dead letter has no ttl.
      await client.send('dls.expiring', [{ body: 'expired', ttl: 300 }]);
      // Rejected, its expiry its queue's default-ttl: that stays with the queue.
      await client.send('dls.defaulted', [{ body: 'defaulted' }]);
      const r = await client.openReceiver('dls.defaulted');
      r.receiver.add_credit(1);
      (await r.next(1))[0]!.delivery.reject();
      // Rejected with a ttl of its own: its dead letter keeps what is left of it.
      await client.send('dls.rejected', [{ body: 'own-ttl', ttl: 3_600_000 }]);
      const e = await client.openReceiver('dls.rejected');
      e.receiver.add_credit(1);
      const own = (await e.next(1))[0]!;
      expect(bodyOf(own.message)).toBe('own-ttl');
      own.delivery.reject();

      const got = await none.next(2, 15_000);
      expect(got.map((g) => bodyOf(g.message)).sort()).toEqual(['defaulted', 'expired']);
      // As their consumer is told: no ttl.
      for (const g of got) expect(g.message.ttl ?? 0).toBe(0);
      const kept = await some.next(1);
      expect(bodyOf(kept[0]!.message)).toBe('own-ttl');
      expect(kept[0]!.message.ttl).toBeGreaterThan(0);
      for (const g of [...got, ...kept]) g.delivery.accept();
      expect([...(await none.drainFor(200)), ...(await some.drainFor(0))]).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

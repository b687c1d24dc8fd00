// A DR copy keeps every message durable (its journal must keep what the source's stream
// brought), but a consumer of the activated copy is sent each message as its sender sent
// it: a non-durable one goes out with header durable false (JMSDeliveryMode
// NON_PERSISTENT). A selector naming JMSDeliveryMode must choose by that same header: on
// the old code it read the copy's record, so 'NON_PERSISTENT' selected nothing and
// 'PERSISTENT' took the non-durable message too.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import type { TestBroker } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, twoSites } from './helpers.js';

describe('DR copy: JMSDeliveryMode as the consumer gets it', () => {
  let a: TestBroker;
  let b: TestBroker;
  twoSites((siteA, siteB) => {
    a = siteA;
    b = siteB;
  });

  it('DR delivery mode - a selector on the activated copy chooses by the durable its messages go out with', async () => {
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    const added = await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url]);
    expect(added.code, added.stderr).toBe(0);
    const sender = await TestClient.connect({ port: a.port });
    const sent = await sender.send('orders', [
      { body: 'transient', durable: false },
      { body: 'persistent', durable: true },
    ]);
    expect(sent.map((o) => o.state)).toEqual(['accepted', 'accepted']);
    await sender.close();
    await drFlush(a.port, b.port);
    await a.kill();
    const activated = await tandem(['dr', 'activate', 'orders', '-b', b.url]);
    expect(activated.code, activated.stderr).toBe(0);

    const client = await TestClient.connect({ port: b.port });
    try {
      for (const [mode, body, durable] of [['NON_PERSISTENT', 'transient', false], ['PERSISTENT', 'persistent', true]] as const) {
        const r = await client.openReceiver({ address: 'orders', filter: rhea.filter.selector(`JMSDeliveryMode = '${mode}'`) });
        r.receiver.add_credit(5);
        const got = await r.next(1, 5000);
        expect(bodyOf(got[0]!.message)).toBe(body);
        // rhea leaves durable unset for a header that says false.
        expect(got[0]!.message.durable === true).toBe(durable);
        got[0]!.delivery.accept();
        expect(await r.drainFor(300)).toEqual([]);
        await r.close();
      }
    } finally {
      await client.close();
    }
  });
});

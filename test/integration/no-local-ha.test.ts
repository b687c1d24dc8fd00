// A durable subscription's noLocal is one of its queue's settings, replicated with it:
// after kill -9 of the primary and the promotion of a backup, the new primary goes on
// leaving out what the subscriber's clientID (container-id) publishes.
import rhea from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

let cluster: TestCluster | undefined;

afterAll(async () => {
  await cluster?.stopAll();
});

const NO_LOCAL = { 'no-local': rhea.types.wrap_described('NoLocalFilter{}', 0x468c00000003) };
const source = { address: 'amq.topic/nl.ha', durable: 2, expiry_policy: 'never', filter: NO_LOCAL };
const durable = (...names: string[]) => names.map((body) => ({ body, durable: true }));

describe('noLocal across a failover', () => {
  it('ha - a durable noLocal subscription keeps leaving out its clientID on the promoted backup', async () => {
    // Settling alone once the other is gone (the publishes after the failover).
    cluster = await TestCluster.ready(2, ['--ha-min-ready-backups', '0']);
    const c = cluster;
    const subscriber = await TestClient.connect({ port: c.ports[0]!, container_id: 'nl-ha-app' });
    await subscriber.openReceiver(source, { name: 'd1' });
    subscriber.destroy();
    const own = await TestClient.connect({ port: c.ports[0]!, container_id: 'nl-ha-app' });
    const other = await TestClient.connect({ port: c.ports[0]!, container_id: 'nl-ha-other' });
    await own.send('amq.topic/nl.ha', durable('own-1'));
    await other.send('amq.topic/nl.ha', durable('other-1'));
    await c.backupsCaughtUp(0);
    own.destroy();
    other.destroy();

    await c.kill(0);
    expect((await c.promote(1)).code).toBe(0);
    const own2 = await TestClient.connect({ port: c.ports[1]!, container_id: 'nl-ha-app' });
    const other2 = await TestClient.connect({ port: c.ports[1]!, container_id: 'nl-ha-other' });
    await own2.send('amq.topic/nl.ha', durable('own-2'));
    await other2.send('amq.topic/nl.ha', durable('other-2'));
    const r = await own2.openReceiver(source, { name: 'd1' });
    r.receiver.add_credit(10);
    const got = await r.next(2);
    expect(got.map((g) => bodyOf(g.message))).toEqual(['other-1', 'other-2']);
    for (const g of got) g.delivery.accept();
    expect(await r.drainFor(300)).toEqual([]);
    await own2.close();
    await other2.close();
  });
});

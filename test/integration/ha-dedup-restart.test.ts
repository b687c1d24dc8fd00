// Exactly-once publishing (issue 16) across a restart of the whole HA cluster: a
// duplicate-detection window keeps a key as long as its message may outlive a
// restart. A backup that learned its keys from a snapshot must forget the keys of
// non-durable messages with them, or a resend of a lost message is taken for a
// duplicate and lost a second time.
import { afterEach, describe, expect, it } from 'vitest';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { manage } from '../helpers/tandem-cli.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.stopAll();
  cluster = undefined;
});

const ids = (prefix: string, n: number): string[] => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

async function send(port: number, list: string[], durable: boolean): Promise<string[]> {
  const c = await TestClient.connect({ port });
  try {
    return (await c.send('orders', list.map((id) => ({ message_id: id, body: id, durable })), { timeoutMs: 30_000 })).map((o) => o.state);
  } finally {
    await c.close();
  }
}

describe('ha dedup restart', () => {
  it('ha dedup restart - a backup fed by a snapshot forgets the keys of non-durable messages in a restart of the whole cluster: resent after a failover to it, they are kept, and durable ones are still duplicates', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    expect((await tandem(['queue', 'add', 'orders', '--durable', '--dedup-window', '1000', '--replicate', 'all', '-b', c.address(0)])).code).toBe(0);
    const durable = ids('d', 10);
    const transient = ids('n', 10);
    expect(await send(c.ports[0]!, durable, true)).toEqual(Array(10).fill('accepted'));
    expect(await send(c.ports[0]!, transient, false)).toEqual(Array(10).fill('accepted'));
    await c.backupsCaughtUp(0);
    // Restarted, the backup holds non-durable messages its journal lacks: it is sent a
    // snapshot, and its window's keys come with that snapshot.
    await c.kill(1);
    await c.startBroker(1);
    await c.waitState(1, 'ready', 30_000);
    await c.backupsCaughtUp(0);
    expect(await c.browse(1, 'orders', 20)).toEqual([...durable, ...transient]);
    // The whole cluster goes down: the non-durable messages are gone everywhere.
    await c.kill(0);
    await c.kill(1);
    await c.startBroker(0);
    await c.startBroker(1);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await c.waitState(0, 'ready', 30_000);
    // Every publisher resends what it has no proof of (all of it, here).
    expect(await send(c.ports[1]!, [...durable, ...transient], false)).toEqual(Array(20).fill('accepted'));
    const shown = (await manage(c.ports[1]!, 'READ', 'queue', 'orders')) as Record<string, number>;
    expect(shown).toMatchObject({ depth: 20, 'dedup-duplicates': 10 });
    const client = await TestClient.connect({ port: c.ports[1]! });
    try {
      expect((await client.receiveAndAccept('orders', 20, 30_000)).map(bodyOf)).toEqual([...durable, ...transient]);
    } finally {
      client.connection.close();
    }
  });
});

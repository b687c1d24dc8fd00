// HA where replication levels and durabilities mix in one change: what a backup
// keeps, what it journals, and what a failover to it hands out.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.stopAll();
  cluster = undefined;
});

const committed = ['commit-0', 'commit-1', 'commit-2', 'commit-3', 'commit-4'];

describe('ha levels', () => {
  it('ha levels - a backup restarted after a committed transaction of durable and non-durable messages is not resumed from its journal alone; a failover to it loses none of them', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    const marker = join(c.dataDirs[1]!, 'ha-journal-complete');
    expect((await tandem(['queue', 'add', 'txmix', '--durable', '--replicate', 'all', '-b', c.address(0)])).code).toBe(0);
    await c.backupsCaughtUp(0);
    // The backup holds nothing non-durable: its journal is marked complete.
    await waitFor(() => existsSync(marker), { timeout: 20_000, interval: 100, name: 'journal marked complete' });
    // One durable transaction: commit-1 and commit-3 are not durable, so the backup's
    // journal keeps only the other three of it, and the backup holds those two in memory.
    const tx = await runPython<{ committed?: boolean }>('tx_send.py', [`amqp://${c.address(0)}`, 'txmix', 'commit', 'mixed']);
    expect(tx.committed).toBe(true);
    await c.backupsCaughtUp(0);
    expect(await c.browse(1, 'txmix', 5)).toEqual(committed);
    // kill -9 and restart: the journal alone is not what it held, so it must be sent a snapshot.
    await c.kill(1);
    await c.startBroker(1);
    await c.waitState(1, 'ready', 30_000);
    await c.backupsCaughtUp(0);
    expect(await c.browse(1, 'txmix', 5)).toEqual(committed);
    // The failover hands out the whole transaction, one message at a time.
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      const got = await after.receiveAndAccept('txmix', 5, 30_000);
      expect(got.map(bodyOf)).toEqual(committed);
      const r = await after.openReceiver('txmix');
      r.receiver.add_credit(10);
      expect(await r.drainFor(300)).toEqual([]);
    } finally {
      after.connection.close();
    }
  });

  it('ha levels - an admin browsing a replicated auto-delete queue on a backup does not make the backup delete it; a failover to it keeps its messages', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    const P = c.address(0);
    // Auto-delete after 0 ms without consumers; nobody consumes it on the primary.
    expect((await tandem(['queue', 'add', 'ad', '--durable', '--auto-delete', '--replicate', 'all', '-b', P])).code).toBe(0);
    const client = await TestClient.connect({ port: c.ports[0] });
    try {
      await client.send('ad', [{ body: 'ad-0', durable: true }, { body: 'ad-1', durable: true }]);
    } finally {
      client.connection.close();
    }
    await c.backupsCaughtUp(0);
    // The browser is the queue's first and last consumer on the backup: it leaves it unused there.
    expect(await c.browse(1, 'ad', 2)).toEqual(['ad-0', 'ad-1']);
    // A change after the browse, acknowledged by the backup: its timer (0 ms) has had its turn.
    const more = await TestClient.connect({ port: c.ports[0] });
    try {
      await more.send('after-browse', [{ body: 'x', durable: true }]);
    } finally {
      more.connection.close();
    }
    await c.backupsCaughtUp(0);
    expect(await c.browse(1, 'ad', 2)).toEqual(['ad-0', 'ad-1']);
    expect(await c.browse(0, 'ad', 2)).toEqual(['ad-0', 'ad-1']);
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      const r = await after.openReceiver('ad');
      r.receiver.add_credit(10);
      const got = await r.next(2).catch(() => []);
      const extra = await r.drainFor(300);
      expect([...got, ...extra].map((m) => bodyOf(m.message))).toEqual(['ad-0', 'ad-1']);
    } finally {
      after.connection.close();
    }
  });
});

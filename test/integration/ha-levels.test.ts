// HA where replication levels and durabilities mix in one change: what a backup
// keeps, what it journals, and what a failover to it hands out.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import { TandemError } from '../../src/broker/errors.js';
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

  it('ha levels - an auto-delete queue that never had a consumer on the primary (an admin browsing it on a backup does not count) survives a kill -9 and a failover with every message; one whose consumer left before the kill is deleted by the new primary after its delay', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    const P = c.address(0);
    const ok = async (args: string[]) => {
      const r = await tandem([...args, '-b', P]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    };
    // 'ad' is declared first, and deleted after 0 ms without consumers once it has had one: a new
    // primary that scheduled it would delete it before 'ad-left' (8 s, so the old primary does not
    // delete that one before the kill).
    await ok(['queue', 'add', 'ad', '--durable', '--auto-delete', '--replicate', 'all']);
    await ok(['queue', 'add', 'ad-left', '--durable', '--auto-delete', '--auto-delete-delay', '8s', '--replicate', 'all']);
    await ok(['exchange', 'add', 'fanout', 'ad-fill', '--durable', '--replicate', 'all']);
    await ok(['bind', 'ad-fill', 'ad']);
    const client = await TestClient.connect({ port: c.ports[0] });
    try {
      // Filled through the exchange, waiting for its first consumer.
      await client.send('ad-fill', [{ body: 'ad-0', durable: true }, { body: 'ad-1', durable: true }]);
      await client.send('ad-left', [{ body: 'left-0', durable: true }]);
      // A consumer of ad-left comes and goes on the primary (no credit: its message stays).
      const r = await client.openReceiver('ad-left');
      await r.close();
    } finally {
      client.connection.close();
    }
    await c.backupsCaughtUp(0);
    // The browser is the queue's first and last consumer on the backup: the backup neither deletes it nor logs it as consumed.
    expect(await c.browse(1, 'ad', 2)).toEqual(['ad-0', 'ad-1']);
    // A change after the browse, acknowledged by the backup: its timer (0 ms), had it one, has had its turn.
    const more = await TestClient.connect({ port: c.ports[0] });
    try {
      await more.send('after-browse', [{ body: 'x', durable: true }]);
    } finally {
      more.connection.close();
    }
    await c.backupsCaughtUp(0);
    expect(await c.browse(1, 'ad', 2)).toEqual(['ad-0', 'ad-1']);
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const P1 = c.address(1);
    const exists = async (queue: string) => {
      const r = await tandem(['queue', 'show', queue, '-b', P1]);
      if (r.code !== 0 && r.code !== 4) throw new Error(`queue show ${queue}: ${r.code} ${r.stderr}`);
      return r.code === 0;
    };
    // Promoted, it deletes what had a consumer and has none (the log says which: README)...
    await waitFor(async () => !(await exists('ad-left')), { timeout: 60_000, interval: 200, name: 'ad-left deleted by the new primary' });
    // ...and keeps, well past its delay, the queue still waiting for its first consumer, with its messages.
    expect(await exists('ad')).toBe(true);
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      expect((await after.receiveAndAccept('ad', 2, 30_000)).map(bodyOf)).toEqual(['ad-0', 'ad-1']);
    } finally {
      after.connection.close();
    }
    // Its first consumer (on the new primary) gone, it goes, as its delay (0) says.
    await waitFor(async () => !(await exists('ad')), { timeout: 30_000, interval: 200, name: 'ad deleted once its first consumer left' });
  });

  it('ha levels - a new primary deletes each auto-delete queue that had a consumer and has none once its delay has passed (its consumers were on the old primary); one a consumer attaches to within its delay stays until that consumer leaves; one that never had a consumer stays', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const P = c.address(0);
    // Declared in this order, and a backup holds its queues in the order it was sent them: at
    // promotion ad-kept is scheduled first and with the shorter delay, so once ad-gone is
    // deleted, ad-kept's delay has passed too.
    const queues: Array<[string, string]> = [
      // Long enough for the consumer below to attach on a loaded machine.
      ['ad-kept', '12s'],
      ['ad-gone', '13s'],
      ['ad-unused', '13s'],
    ];
    for (const [name, delay] of queues) {
      const added = await tandem(['queue', 'add', name, '--durable', '--auto-delete', '--auto-delete-delay', delay, '--replicate', 'all', '-b', P]);
      expect(added.code, added.stderr).toBe(0);
    }
    const old = await TestClient.connect({ port: c.ports[0] });
    for (const [name] of queues) await old.send(name, [{ body: `${name}-0`, durable: true }, { body: `${name}-1`, durable: true }]);
    // Consumers of ad-kept and ad-gone on the primary (no credit: the messages stay); ad-unused never has one.
    await old.openReceiver('ad-kept');
    await old.openReceiver('ad-gone');
    await c.backupsCaughtUp(0);
    await c.kill(0);
    old.connection.close();
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const P1 = c.address(1);
    const exists = async (queue: string, broker: string) => {
      const r = await tandem(['queue', 'show', queue, '-b', broker]);
      if (r.code !== 0 && r.code !== 4) throw new Error(`queue show ${queue} on ${broker}: ${r.code} ${r.stderr}`);
      return r.code === 0;
    };
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      // In time: a consumer of ad-kept on the new primary gets what the old one held.
      const r = await after.openReceiver('ad-kept');
      r.receiver.add_credit(10);
      expect((await r.next(2)).map((m) => bodyOf(m.message))).toEqual(['ad-kept-0', 'ad-kept-1']);
      await waitFor(async () => !(await exists('ad-gone', P1)), { timeout: 60_000, interval: 200, name: 'ad-gone deleted by the new primary' });
      expect(await exists('ad-kept', P1)).toBe(true);
      // The deletes are the primary's changes: the backup that follows it has them too.
      await c.backupsCaughtUp(1);
      expect(await exists('ad-gone', c.address(2))).toBe(false);
      expect(await exists('ad-kept', c.address(2))).toBe(true);
    } finally {
      after.connection.close();
    }
    // Its consumer gone, ad-kept goes too, after its delay.
    await waitFor(async () => !(await exists('ad-kept', P1)), { timeout: 60_000, interval: 200, name: 'ad-kept deleted once its consumer left' });
    // Past its delay since the promotion (ad-kept's came later): ad-unused, which never had a
    // consumer, still waits for its first, messages and all, here and on the backup.
    expect(await exists('ad-unused', P1)).toBe(true);
    await c.backupsCaughtUp(1);
    expect(await exists('ad-unused', c.address(2))).toBe(true);
    expect(await c.browse(1, 'ad-unused', 2)).toEqual(['ad-unused-0', 'ad-unused-1']);
  });

  it('ha levels - a replicated queue or exchange that names an alternate exchange of level none is refused at declare (amqp:invalid-field); the others are taken, and a failover keeps their dead letters', async () => {
    cluster = await TestCluster.ready(2);
    const c = cluster;
    const P = c.address(0);
    const ok = async (args: string[]) => {
      const r = await tandem([...args, '-b', P]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    };
    await ok(['exchange', 'add', 'fanout', 'dlx-none', '--replicate', 'none']);
    await ok(['exchange', 'add', 'fanout', 'dlx-conf', '--replicate', 'configuration']);
    // Refused, whatever the level that makes the queue replicated (the default is ha-replicate=all).
    for (const level of [['--replicate', 'all'], ['--replicate', 'configuration'], []]) {
      const r = await tandem(['queue', 'add', 'q-refused', '--alternate-exchange', 'dlx-none', ...level, '-b', P]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/queue 'q-refused' is replicated .* its alternate exchange 'dlx-none' is not \(replicate none\)/);
    }
    const refusedExchange = await tandem(['exchange', 'add', 'fanout', 'x-refused', '--alternate-exchange', 'dlx-none', '--replicate', 'configuration', '-b', P]);
    expect(refusedExchange.code, refusedExchange.stderr).toBe(2);
    expect(refusedExchange.stderr).toMatch(/exchange 'x-refused' is replicated .* its alternate exchange 'dlx-none' is not/);
    // An AMQP management client is told the error and its condition.
    const admin = await ManagementClient.connect({ host: '127.0.0.1', port: c.ports[0] }, { timeoutMs: 10_000 });
    try {
      for (const [type, attrs] of [
        ['queue', { 'alternate-exchange': 'dlx-none', 'qpid.replicate': 'all' }],
        ['exchange', { 'exchange-type': 'topic', 'alternate-exchange': 'dlx-none' }],
      ] as const) {
        const err: unknown = await admin.request('CREATE', type, `${type}-mgmt-refused`, attrs).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(TandemError);
        expect((err as TandemError).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
        expect((err as TandemError).condition).toBe('amqp:invalid-field');
      }
    } finally {
      admin.close();
    }
    // Taken: a queue or exchange that is not replicated, or whose alternate is (or is built in).
    await ok(['queue', 'add', 'q-none', '--alternate-exchange', 'dlx-none', '--replicate', 'none']);
    await ok(['exchange', 'add', 'fanout', 'x-none', '--alternate-exchange', 'dlx-none', '--replicate', 'none']);
    await ok(['exchange', 'add', 'fanout', 'x-conf', '--alternate-exchange', 'dlx-conf', '--replicate', 'all']);
    await ok(['queue', 'add', 'q-builtin', '--alternate-exchange', 'amq.fanout', '--replicate', 'all']);
    await ok(['queue', 'add', 'dead', '--durable', '--replicate', 'all']);
    await ok(['bind', 'dlx-conf', 'dead']);
    await ok(['queue', 'add', 'q-all', '--durable', '--alternate-exchange', 'dlx-conf', '--replicate', 'all']);
    for (const name of ['q-refused', 'queue-mgmt-refused']) expect((await tandem(['queue', 'show', name, '-b', P])).code).toBe(4);
    const exchanges = await tandem(['exchange', 'list', '--json', '-b', P]);
    const names = (JSON.parse(exchanges.stdout) as Array<{ name: string }>).map((x) => x.name);
    expect(names).not.toContain('x-refused');
    expect(names).not.toContain('exchange-mgmt-refused');
    const client = await TestClient.connect({ port: c.ports[0] });
    try {
      await client.send('q-all', [{ body: 'dl-0', durable: true }, { body: 'dl-1', durable: true }]);
    } finally {
      client.connection.close();
    }
    await c.backupsCaughtUp(0);
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    // On the new primary, what q-all holds at its delete goes through its alternate exchange.
    const deleted = await tandem(['queue', 'del', 'q-all', '-b', c.address(1)]);
    expect(deleted.code, deleted.stderr).toBe(0);
    const after = await TestClient.connect({ port: c.ports[1] });
    try {
      const got = await after.receiveAndAccept('dead', 2, 30_000);
      expect(got.map(bodyOf)).toEqual(['dl-0', 'dl-1']);
    } finally {
      after.connection.close();
    }
  });
});

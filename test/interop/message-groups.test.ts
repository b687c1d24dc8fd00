// Message groups (qpid.message-groups) with Debian's python3-qpid-proton: two receivers
// on two connections take interleaved groups, each holding what it gets unsettled for a
// while; no group is ever at both at once and every group arrives in order. The queue
// keeps its groups across kill -9 and a restart (its rows are recovered without their
// groups, which are read back at their first look), and what a receiver held unsettled
// at the kill is available again, owned by nobody; the same on the backup an HA
// failover promotes.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

interface GroupRun {
  received: number;
  violations: string[];
  out_of_order: string[];
  per_receiver: Record<string, number>;
  shared_groups: number;
}

afterAll(async () => {
  await killAllBrokers();
});

async function addGroupQueue(broker: TestBroker, name: string): Promise<void> {
  const r = await tandem(['queue', 'add', name, '--durable', '--message-groups', '-b', broker.url]);
  expect(r.code, r.stderr).toBe(0);
}

async function showQueue(broker: TestBroker, name: string): Promise<Record<string, unknown>> {
  const r = await tandem(['queue', 'show', name, '--json', '-b', broker.url]);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe('message groups - proton receivers', () => {
  it('message groups - two proton receivers, interleaved groups: a group is never at both, each in order', async () => {
    const broker = await TestBroker.start();
    await addGroupQueue(broker, 'grouped');
    const shown = await showQueue(broker, 'grouped');
    expect(shown['qpid.message-groups']).toBe(true);
    expect(shown.groups).toBe(0);
    const run = await runPython<GroupRun>('group_receivers.py', [broker.url, 'grouped', '140', '7', '20'], 90_000);
    expect(run.violations).toEqual([]);
    expect(run.out_of_order).toEqual([]);
    expect(run.received).toBe(140);
    // Both took part: the groups were shared out, not all sent to one receiver.
    expect(run.per_receiver.r1).toBeGreaterThan(0);
    expect(run.per_receiver.r2).toBeGreaterThan(0);
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'grouped')) as { depth: number }).depth === 0, { name: 'grouped drained' });
    expect((await showQueue(broker, 'grouped')).groups).toBe(0);
  }, 120_000);

  it('message groups - after kill -9 and a restart the queue keeps its groups and what was held is free again', async () => {
    let broker = await TestBroker.start();
    await addGroupQueue(broker, 'kept');
    await runPython<GroupRun>('group_receivers.py', [broker.url, 'kept', '0', '7', '20'], 60_000);
    // A receiver holds a few unsettled at the kill: they belong to nobody after the restart.
    const client = await TestClient.connect({ port: broker.port });
    const held = await client.openReceiver('kept');
    held.receiver.add_credit(3);
    await held.next(3);
    expect(((await showQueue(broker, 'kept')) as { 'groups-owned': number })['groups-owned']).toBe(3);
    await broker.kill();
    client.destroy();
    broker = await TestBroker.start({ dataDir: broker.dataDir });
    const shown = await showQueue(broker, 'kept');
    expect(shown['qpid.message-groups']).toBe(true);
    expect(shown.depth).toBe(140);
    expect(shown['groups-owned']).toBe(0);
    const run = await runPython<GroupRun>('group_receivers.py', [broker.url, 'kept', '140'], 90_000);
    expect(run.violations).toEqual([]);
    expect(run.out_of_order).toEqual([]);
    expect(run.received).toBe(140);
  }, 150_000);

  it('message groups - on the backup promoted after kill -9 of the primary: the queue has its groups, nothing is owned, the rule holds', async () => {
    const cluster = await TestCluster.ready(2);
    const primary = cluster.brokers[0]!;
    await addGroupQueue(primary, 'failover');
    await runPython<GroupRun>('group_receivers.py', [primary.url, 'failover', '0', '7', '20'], 60_000);
    const client = await TestClient.connect({ port: primary.port });
    const held = await client.openReceiver('failover');
    held.receiver.add_credit(3);
    await held.next(3);
    expect(((await showQueue(primary, 'failover')) as { 'groups-owned': number })['groups-owned']).toBe(3);
    await cluster.backupsCaughtUp(0);
    await primary.kill();
    client.destroy();
    expect((await cluster.promote(1)).code).toBe(0);
    await cluster.waitState(1, 'active');
    const promoted = cluster.brokers[1]!;
    const shown = await showQueue(promoted, 'failover');
    expect(shown['qpid.message-groups']).toBe(true);
    expect(shown.depth).toBe(140);
    expect(shown['groups-owned']).toBe(0);
    const run = await runPython<GroupRun>('group_receivers.py', [promoted.url, 'failover', '140'], 90_000);
    expect(run.violations).toEqual([]);
    expect(run.out_of_order).toEqual([]);
    expect(run.received).toBe(140);
  }, 180_000);
});

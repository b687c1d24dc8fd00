// Issue 21: promoting a stale joining broker, and what becomes of the changes the
// brokers ahead of it hold when they rejoin. Real tandemd processes on 127.0.0.1,
// rhea as the client, kill -9 for every fault.
import rhea from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.stopAll();
  cluster = undefined;
});

const COUNT = 1000;
const logOf = (c: TestCluster, i: number) => `${c.brokers[i]?.stdout ?? ''}${c.brokers[i]?.stderr ?? ''}`;
/** The broker's output is read as it comes: wait for the line rather than look once. */
const logSays = (c: TestCluster, i: number, line: RegExp) => waitFor(() => line.test(logOf(c, i)), { timeout: 10_000, interval: 50, name: `broker ${i} logs ${line}` });

interface DivergedRow {
  name: string;
  epoch: number;
  from: number;
  through: number;
}

async function divergedOf(c: TestCluster, i: number): Promise<DivergedRow[]> {
  const r = await tandem(['ha', 'diverged', 'list', '-b', c.address(i), '--json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as DivergedRow[];
}

describe('ha - promotion guard and diverged changes (issue 21)', () => {
  it('ha - a stale joining broker is not promoted without --accept-data-loss; with it, the loss is reported, and the brokers ahead keep their changes for tandem ha diverged to re-publish, each message once, marked redelivered', async () => {
    cluster = await TestCluster.start(3);
    const c = cluster;
    const first = await c.promote(0);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout, 'the guard says what it checked').toMatch(/the cluster is new/);
    for (const i of [1, 2]) await c.waitState(i, 'ready');
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', c.address(0)])).code).toBe(0);
    await waitFor(async () => (await c.status(0))?.backups.every((b) => b.state === 'ready' && b.lag === 0) ?? false, { timeout: 20_000, interval: 100, name: 'backups caught up' });

    // Broker 1 falls behind for good: killed before the 1,000 messages.
    await c.kill(1);
    const client = await TestClient.connect({ port: c.ports[0] });
    // Some were redelivered before (a delivery-count in their header), the last as often as a header can say.
    const messages = Array.from({ length: COUNT }, (_, i) => ({ message_id: `order-${i}`, body: `m-${i}`, durable: true, application_properties: { n: i }, delivery_count: i === COUNT - 1 ? 0xffff_ffff : i % 3 }));
    const outcomes = await client.send('orders', messages, { timeoutMs: 120_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await client.close();
    // Accepted means broker 2 (ready) has them too. Then the two brokers that have them go.
    await c.kill(0);
    await c.kill(2);

    await c.startBroker(1);
    await c.waitState(1, 'joining');
    const refused = await c.promote(1);
    expect(refused.code, `refused with the README's "no/refused" code: ${refused.stdout}`).toBe(1);
    expect(refused.stderr).toMatch(/promotion refused/);
    expect(refused.stderr, 'it says what it saw').toMatch(/1 of 3 brokers of ha-brokers-url answered/);
    expect(refused.stderr).toMatch(/--accept-data-loss/);
    expect((await c.status(1))?.state).toBe('joining');

    const forced = await tandem(['ha', 'promote', '-b', c.address(1), '--cluster-manager', '--accept-data-loss']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toMatch(/^(recovering|active)\n/);
    expect(forced.stderr, 'the possible loss is reported').toMatch(/WARNING: promoted with --accept-data-loss.*may be lost/);
    await logSays(c, 1, /PROMOTED WITH --accept-data-loss/);
    await c.waitState(1, 'active');

    // The brokers that were ahead rejoin: they are sent snapshots, and keep what the primary lacks.
    await c.startBroker(0);
    await c.startBroker(2);
    for (const i of [0, 2]) await c.waitState(i, 'ready', 60_000);
    await logSays(c, 1, /holds changes this primary lacks/);
    expect(logOf(c, 1)).not.toMatch(/never confirmed/);
    for (const i of [0, 2]) {
      const sets = await divergedOf(c, i);
      expect(sets, `broker ${i} keeps its diverged changes`).toHaveLength(1);
      expect(sets[0]!.epoch).toBe(1);
      expect(sets[0]!.through).toBeGreaterThan(sets[0]!.from + COUNT - 1);
      await logSays(c, i, new RegExp(`kept the changes the primary lacks \\(epoch 1, LSN ${sets[0]!.from} to ${sets[0]!.through}\\)`));
      const text = await tandem(['ha', 'status', '-b', c.address(i)]);
      expect(text.stdout).toMatch(new RegExp(`^ready\\ndiverged: ${sets[0]!.name} \\(epoch 1, LSN ${sets[0]!.from} to ${sets[0]!.through}`));
    }
    // Nothing of the 1,000 is on the new primary.
    const depth = await tandem(['queue', 'list', '--json', '-b', c.address(1)]);
    expect((JSON.parse(depth.stdout) as Array<{ name: string; depth: number }>).find((q) => q.name === 'orders')?.depth ?? 0).toBe(0);

    const set = (await divergedOf(c, 2))[0]!;
    const exported = await tandem(['ha', 'diverged', 'export', set.name, '--data-dir', c.dataDirs[2]!]);
    expect(exported.code, exported.stderr).toBe(0);
    const lines = exported.stdout.trim().split('\n').map((l) => JSON.parse(l) as { queue: string; properties: { message_id: string }; uncertain: boolean; encoded: string });
    expect(lines).toHaveLength(COUNT);
    expect(lines.map((l) => l.properties.message_id)).toEqual(messages.map((m) => m.message_id));
    // The exact bytes stored: the sender's header, its delivery-count included.
    expect(lines.map((l) => (rhea.message.decode(Buffer.from(l.encoded, 'base64')) as { delivery_count?: number }).delivery_count ?? 0)).toEqual(messages.map((m) => m.delivery_count));
    expect(lines.every((l) => l.queue === 'orders' && !l.uncertain)).toBe(true);

    // Re-published from one of them, through the primary it follows; a second run sends nothing again.
    const republished = await tandem(['ha', 'diverged', 'republish', set.name, '--data-dir', c.dataDirs[2]!, '-b', c.address(2)], 120_000);
    expect(republished.code, republished.stderr).toBe(0);
    expect(republished.stdout).toMatch(new RegExp(`^${COUNT} of ${COUNT} messages of ${set.name} re-published to 127\\.0\\.0\\.1:${c.ports[1]}`));
    const again = await tandem(['ha', 'diverged', 'republish', set.name, '--data-dir', c.dataDirs[2]!, '-b', c.address(2)]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(new RegExp(`${COUNT} of ${COUNT} .*\\(${COUNT} already before\\)`));

    // A consumer on the primary gets every one of the 1,000, once, with its id and properties,
    // marked redelivered: the old primary may have delivered it (delivery-count one more, at most a uint's largest).
    const consumer = await TestClient.connect({ port: c.ports[1] });
    const r = await consumer.openReceiver('orders');
    r.receiver.add_credit(COUNT + 10);
    const got = await r.next(COUNT, 60_000);
    const extra = await r.drainFor(1000);
    for (const g of got) g.delivery.accept();
    await consumer.close();
    expect(extra, 'no duplicates').toHaveLength(0);
    expect(got.map((g) => g.message.message_id)).toEqual(messages.map((m) => m.message_id));
    expect(got.map((g) => bodyOf(g.message))).toEqual(messages.map((m) => m.body));
    expect(got.map((g) => (g.message.application_properties as { n: number }).n)).toEqual(messages.map((m) => m.application_properties.n));
    expect(got.map((g) => g.message.delivery_count ?? 0)).toEqual(messages.map((m) => Math.min(0xffff_ffff, m.delivery_count + 1)));
    expect(got.every((g) => g.message.durable === true)).toBe(true);

    // Dealt with: the re-published set can go; the other broker's copy only by force.
    const other = (await divergedOf(c, 0))[0]!;
    const keep = await tandem(['ha', 'diverged', 'drop', other.name, '--data-dir', c.dataDirs[0]!]);
    expect(keep.code).toBe(1);
    expect(keep.stderr).toMatch(/holds 1000 messages and 0 were re-published/);
    expect((await tandem(['ha', 'diverged', 'drop', set.name, '--data-dir', c.dataDirs[2]!])).code).toBe(0);
    expect(await divergedOf(c, 2)).toEqual([]);
    expect((await tandem(['ha', 'diverged', 'drop', other.name, '--data-dir', c.dataDirs[0]!, '--force'])).code).toBe(0);
    expect(await divergedOf(c, 0)).toEqual([]);
  }, 300_000);

  it('ha - a running ready backup (its store from a snapshot of this process) that rejoins a primary lacking its changes keeps them too', async () => {
    cluster = await TestCluster.start(3);
    const c = cluster;
    expect((await c.promote(0)).code).toBe(0);
    for (const i of [1, 2]) await c.waitState(i, 'ready');
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', c.address(0)])).code).toBe(0);
    await waitFor(async () => (await c.status(0))?.backups.every((b) => b.state === 'ready' && b.lag === 0) ?? false, { timeout: 20_000, interval: 100, name: 'backups caught up' });
    await c.kill(1);
    const client = await TestClient.connect({ port: c.ports[0] });
    const outcomes = await client.send('orders', Array.from({ length: 100 }, (_, i) => ({ message_id: `o-${i}`, body: `m-${i}`, durable: true })), { timeoutMs: 60_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await client.close();
    await c.kill(0);
    await c.startBroker(1);
    await c.waitState(1, 'joining');
    // Broker 2 is alive and ready: the guard sends the operator there ...
    const refused = await c.promote(1);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/is ready: promote a ready backup instead/);
    // ... who insists.
    expect((await tandem(['ha', 'promote', '-b', c.address(1), '--cluster-manager', '--accept-data-loss'])).code).toBe(0);
    await c.waitState(2, 'ready', 60_000);
    const sets = await divergedOf(c, 2);
    expect(sets).toHaveLength(1);
    const exported = await tandem(['ha', 'diverged', 'export', sets[0]!.name, '--data-dir', c.dataDirs[2]!]);
    expect(exported.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { properties: { message_id: string } }).properties.message_id)).toEqual(Array.from({ length: 100 }, (_, i) => `o-${i}`));
  }, 200_000);
});

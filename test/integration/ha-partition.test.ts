// A primary cut off from its backups (issue #21, item 5). Its backups are
// SIGSTOPped, which is a partition as the primary sees it: silence, then the
// drop of both after two heartbeat intervals. Meanwhile a publisher keeps
// sending to it. Then the old primary is frozen (SIGSTOP: alive but isolated),
// the backups resume and one of them is promoted, as the side with quorum
// would do. Every message any client was told was accepted must be on the new
// primary: the cut-off primary must not have settled alone
// (ha-min-ready-backups, src/ha/settle-quorum.ts).
import rhea, { type Delivery, type EventContext } from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { TestCluster, freePorts, tandem } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { runPython } from '../helpers/python.js';
import { TestClient } from '../helpers/rhea-client.js';
import type { SettlementReport } from '../../src/ha/ha-manager.js';

let cluster: TestCluster | undefined;
const connections: rhea.Connection[] = [];

afterEach(async () => {
  for (const c of connections.splice(0)) c.close();
  for (const b of cluster?.brokers ?? []) b?.signal('SIGCONT');
  await cluster?.stopAll();
  cluster = undefined;
});


async function settlement(c: TestCluster, i: number): Promise<SettlementReport | undefined> {
  const r = await tandem(['ha', 'query', '-b', c.address(i), '--timeout', '3']);
  if (r.code !== 0) return undefined;
  return (JSON.parse(r.stdout) as { settlement: SettlementReport | null }).settlement ?? undefined;
}

async function readyCluster(args: string[] = []): Promise<TestCluster> {
  const c = await TestCluster.start(3, args);
  const promoted = await c.promote(0);
  expect(promoted.code, promoted.stderr).toBe(0);
  await c.waitState(1, 'ready');
  await c.waitState(2, 'ready');
  return c;
}

/** A publisher of durable messages to one broker, up to 100 in flight; remembers what was accepted. */
function publisher(port: number, queue: string): { accepted: Set<string>; stop: () => void } {
  const accepted = new Set<string>();
  let seq = 0;
  let stopped = false;
  const conn = rhea.create_container({ id: `partition-pub-${process.pid}` }).connect({ host: '127.0.0.1', port, reconnect: false } as never);
  connections.push(conn);
  conn.on('error', () => undefined);
  conn.on('disconnected', () => undefined);
  const sender = conn.open_sender({ target: { address: queue } });
  const inflight = new Map<Delivery, string>();
  const pump = () => {
    while (!stopped && sender.sendable() && inflight.size < 100) {
      const body = `m-${seq++}`;
      inflight.set(sender.send({ body, durable: true }), body);
    }
  };
  sender.on('sendable', pump);
  sender.on('accepted', (ctx: EventContext) => {
    const body = inflight.get(ctx.delivery as Delivery);
    inflight.delete(ctx.delivery as Delivery);
    if (body !== undefined) accepted.add(body);
    pump();
  });
  return { accepted, stop: () => (stopped = true) };
}

describe('ha - partition of the primary', () => {
  it('ha partition - a primary cut off from both backups settles nothing alone; the promoted backup has every accepted message', async () => {
    cluster = await readyCluster();
    const c = cluster;
    const pub = publisher(c.ports[0], 'cut');
    await waitFor(() => pub.accepted.size > 500, { timeout: 30_000, name: 'traffic flowing' });

    // The partition, as the primary sees it: both backups fall silent and are dropped.
    c.brokers[1]!.signal('SIGSTOP');
    c.brokers[2]!.signal('SIGSTOP');
    await waitFor(() => (c.brokers[0]!.stderr.match(/"msg":"backup dropped"/g)?.length ?? 0) >= 2, { timeout: 30_000, name: 'both backups dropped' });
    // The primary says why publishers wait, and they do.
    const held = await waitFor(async () => {
      const s = await settlement(c, 0);
      return s?.held && s.waiting > 0 ? s : undefined;
    }, { timeout: 15_000, name: 'settlements held' });
    expect(held!['ready-backups']).toBe(0);
    expect(held!['min-ready-backups']).toBe(1);
    expect(held!.reason).toMatch(/ha-min-ready-backups/);
    expect(c.brokers[0]!.stderr).toMatch(/settlements held: 0 of the 1 ready backup/);
    const acceptedWhenHeld = pub.accepted.size;
    // It keeps holding while publishers keep sending (several status round trips later).
    for (let k = 0; k < 3; k++) expect((await settlement(c, 0))?.held).toBe(true);
    expect(pub.accepted.size).toBe(acceptedWhenHeld);

    // The other side: the old primary alive but unreachable, a backup promoted.
    c.brokers[0]!.signal('SIGSTOP');
    c.brokers[1]!.signal('SIGCONT');
    c.brokers[2]!.signal('SIGCONT');
    // Each backup reads, once resumed, that the primary dropped it: until both have, the
    // one still saying `ready` is the only one the guard lets a cluster manager promote.
    await c.waitState(1, 'joining');
    await c.waitState(2, 'joining');
    // The two were not stopped at one instant, and each then read what its socket held:
    // either may be ahead. A cluster manager promotes the newer one, so the test does too.
    const next = await promoteFurtherAhead(c);
    pub.stop();
    await c.kill(0);

    const drained = new Set(await runPython<string[]>('drain.py', [`amqp://${c.address(next)}`, 'cut'], 120_000));
    const lost = [...pub.accepted].filter((body) => !drained.has(body));
    expect(lost.length, `accepted by the cut-off primary, missing on the new one: ${lost.slice(0, 5).join(', ')}`).toBe(0);
    expect(pub.accepted.size).toBeGreaterThan(500);
  }, 180_000);

  it('ha partition - with one backup lost a 3-broker cluster keeps serving; with both lost it holds until settle-alone, which ends once a backup is ready again', async () => {
    cluster = await readyCluster();
    const c = cluster;
    await c.kill(2);
    const client = await TestClient.connect({ port: c.ports[0] });
    try {
      expect((await client.send('q', [{ body: 'one-backup', durable: true }], { timeoutMs: 20_000 })).map((o) => o.state)).toEqual(['accepted']);
      await c.kill(1);
      await waitFor(async () => (await settlement(c, 0))?.held, { timeout: 15_000, name: 'held with no backup' });
      const sending = client.send('q', [{ body: 'alone', durable: true }], { timeoutMs: 60_000 });
      await waitFor(async () => ((await settlement(c, 0))?.waiting ?? 0) > 0, { timeout: 15_000, name: 'a publisher waiting' });

      const refused = await tandem(['ha', 'settle-alone', '-b', c.address(0)]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/--cluster-manager/);
      const lifted = await tandem(['ha', 'settle-alone', '--cluster-manager', '-b', c.address(0)]);
      expect(lifted.code, lifted.stderr).toBe(0);
      expect((await sending).map((o) => o.state)).toEqual(['accepted']);
      expect(c.brokers[0]!.stderr).toMatch(/"level":40[^\n]*settling alone on request/);
      expect((await settlement(c, 0))?.['settle-alone']).toBe(true);

      // A backup back and ready: the override ends by itself, the rule is in force again.
      await c.startBroker(1);
      await c.waitState(1, 'ready', 30_000);
      await waitFor(async () => (await settlement(c, 0))?.['settle-alone'] === false, { timeout: 15_000, name: 'settle-alone ended' });
      expect(c.brokers[0]!.stderr).toMatch(/settle-alone ended/);
      await c.kill(1);
      await waitFor(async () => (await settlement(c, 0))?.held, { timeout: 15_000, name: 'held again' });
      const again = client.send('q', [{ body: 'held-again', durable: true }], { timeoutMs: 60_000 });
      await waitFor(async () => ((await settlement(c, 0))?.waiting ?? 0) > 0, { timeout: 15_000, name: 'waiting again' });
      await c.startBroker(1);
      expect((await again).map((o) => o.state)).toEqual(['accepted']);
    } finally {
      client.connection.close();
    }
    // A backup refuses: only a primary settles.
    const onBackup = await tandem(['ha', 'settle-alone', '--cluster-manager', '-b', c.address(1)]);
    expect(onBackup.code).toBe(1);
    expect(onBackup.stderr).toMatch(/not the primary/);
  }, 180_000);

  it('ha partition - ha-min-ready-backups beyond the backups a cluster has stops the start; 0 starts with a warning', async () => {
    const [a, b] = await freePorts(2);
    const url = `127.0.0.1:${a},127.0.0.1:${b}`;
    await expect(TestBroker.start({ port: a, args: ['--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-min-ready-backups', '2'] })).rejects.toThrow(/ha-min-ready-backups = 2 can never be met/);
    await expect(TestBroker.start({ port: a, args: ['--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-min-ready-backups', 'some'] })).rejects.toThrow(/majority or a whole number/);
    const alone = await TestBroker.start({ port: a, args: ['--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-min-ready-backups', '0'] });
    await waitFor(() => /ha-min-ready-backups = 0: the primary settles alone/.test(alone.stderr), { timeout: 10_000, name: 'start-up warning' });
    await alone.kill();
  });
});

// Exactly-once publishing across a partition: the primary of a cluster whose
// queue has a duplicate-detection window is cut off from both backups (SIGSTOP)
// while a publisher sends keyed messages, so it holds their settlements; some of
// them reached a backup before the cut. The old primary is frozen, a backup
// promoted, the old one killed. The publisher resends, with the same ids, every
// message it had no outcome for, and some it had been told were accepted. The
// new primary's window must hold: every id once, in order, none lost.
import rhea, { type Delivery, type EventContext } from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { replaceCutOffPrimary } from '../helpers/partition.js';
import { TestClient } from '../helpers/rhea-client.js';
import { depthOf, receive } from '../dr/helpers.js';

let cluster: TestCluster | undefined;
const connections: rhea.Connection[] = [];

afterEach(async () => {
  for (const c of connections.splice(0)) c.close();
  for (const b of cluster?.brokers ?? []) b?.signal('SIGCONT');
  await cluster?.stopAll();
  cluster = undefined;
});

const idOf = (n: number) => `k-${n}`;

/** Keyed durable messages k-0, k-1, ... to one broker, up to 100 unsettled; what was accepted, and how many were sent. */
function keyedPublisher(port: number, queue: string): { accepted: Set<number>; sent: () => number; stop: () => void } {
  const accepted = new Set<number>();
  let seq = 0;
  let stopped = false;
  const conn = rhea.create_container({ id: `dedup-partition-${process.pid}` }).connect({ host: '127.0.0.1', port, reconnect: false } as never);
  connections.push(conn);
  conn.on('error', () => undefined);
  conn.on('disconnected', () => undefined);
  const sender = conn.open_sender({ target: { address: queue } });
  const inflight = new Map<Delivery, number>();
  const pump = () => {
    while (!stopped && sender.sendable() && inflight.size < 100) {
      const n = seq++;
      inflight.set(sender.send({ message_id: idOf(n), body: idOf(n), durable: true }), n);
    }
  };
  sender.on('sendable', pump);
  sender.on('accepted', (ctx: EventContext) => {
    const n = inflight.get(ctx.delivery as Delivery);
    inflight.delete(ctx.delivery as Delivery);
    if (n !== undefined) accepted.add(n);
    pump();
  });
  return { accepted, sent: () => seq, stop: () => (stopped = true) };
}

describe('ha - duplicate detection across a partition of the primary', () => {
  it('ha dedup partition - resends after the cut-off primary is replaced: every id once, in order, none lost', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const added = await tandem(['queue', 'add', 'dd', '--durable', '--dedup-window', '100000', '--replicate', 'all', '-b', c.address(0)]);
    expect(added.code, added.stderr).toBe(0);
    await c.backupsCaughtUp(0);
    const pub = keyedPublisher(c.ports[0]!, 'dd');
    await waitFor(() => pub.accepted.size > 500, { timeout: 30_000, name: 'traffic flowing' });

    const next = await replaceCutOffPrimary(c, async () => {
      // The publisher's window is full of messages the cut-off primary holds.
      await new Promise((r) => setTimeout(r, 300));
      pub.stop();
    });

    const sent = pub.sent();
    const unanswered = Array.from({ length: sent }, (_, n) => n).filter((n) => !pub.accepted.has(n));
    expect(unanswered.length).toBeGreaterThan(0);
    // Resent: what had no outcome, and the last 200 the old primary confirmed (a client that lost its outcomes).
    const confirmedTail = [...pub.accepted].sort((a, b) => a - b).slice(-200);
    const resend = [...new Set([...confirmedTail, ...unanswered])].sort((a, b) => a - b);
    const fresh = Array.from({ length: 100 }, (_, i) => sent + i);
    const client = await TestClient.connect({ port: c.ports[next]! });
    try {
      const outcomes = await client.send('dd', [...resend, ...fresh].map((n) => ({ message_id: idOf(n), body: idOf(n), durable: true })), { timeoutMs: 60_000 });
      expect(outcomes.filter((o) => o.state !== 'accepted').map((o) => o.state)).toEqual([]);
    } finally {
      await client.close();
    }

    const total = sent + fresh.length;
    const drained = (await receive(c.ports[next]!, 'dd', total, { timeoutMs: 60_000 })) as string[];
    expect(drained).toEqual(Array.from({ length: total }, (_, n) => idOf(n)));
    // Nothing twice: no copy left behind what was drained.
    expect(await depthOf(c.ports[next]!, 'dd')).toBe(0);
  }, 180_000);
});

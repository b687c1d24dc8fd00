// A switchover run abandoned at its timeout, whose unfence is held up on the way to
// the old source, races the next run (docs/dr.md, "Planned switchover"): site B reaches
// A through one relay, A reaches B through another. Run 1: B's DR link is stalled, so
// the drain cannot finish; its DR-UNFENCE is kept back at the relay, so A stays fenced,
// and A cannot ask B how it ended. Run 2 takes A's fence over, drains, activates B, and
// its DR-FOLLOW is kept back too. Then run 1's unfence arrives, late: A must ignore it
// (it would serve the queue beside the activated B), then follow B. A publisher keeps
// sending, each message to whichever site takes it; in the end one site serves, the
// other is its passive copy, and the serving site holds every acknowledged message
// once, in publishing order (plus, at most once, those whose outcome it never learnt).
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import type { Sender } from 'rhea';
import { ManagementClient } from '../../src/admin/client.js';
import { TandemError } from '../../src/broker/errors.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { contents, depthOf, drFlush, drRowOf, mgmt, range, receive, send } from './helpers.js';
import { relay } from './relay.js';

interface Sent {
  id: string;
  /** acked: accepted; refused: never taken (link refused, rejected, released); unknown: sent, outcome never learnt. */
  fate: 'acked' | 'refused' | 'unknown';
}

/** Publish one message at a time to the first of `sites` that takes it, until `stop()` (at most `max` tries). */
async function publisher(sites: TestBroker[], stop: () => boolean, log: Sent[], max = 4000): Promise<void> {
  const clients = new Map<TestBroker, TestClient>();
  for (let n = 0; n < max && !stop(); ) {
    let placed = false;
    for (const site of sites) {
      const id = `p${n++}`;
      let fate: Sent['fate'] = 'refused';
      let sender: Sender | undefined;
      try {
        let c = clients.get(site);
        if (!c || c.closed) {
          c = await TestClient.connect({ port: site.port, timeoutMs: 5000 });
          clients.set(site, c);
        }
        sender = await c.openSender('orders');
        fate = 'unknown';
        const [o] = await c.send(sender, [{ message_id: id, body: id, durable: true }], { timeoutMs: 5000 });
        fate = o?.state === 'accepted' ? 'acked' : o?.state === 'rejected' || o?.state === 'released' ? 'refused' : 'unknown';
        sender.close();
      } catch {
        if (fate === 'unknown') {
          // The link or the connection went with the message on it: start afresh.
          clients.get(site)?.destroy();
          clients.delete(site);
        }
      }
      log.push({ id, fate });
      if (fate === 'acked') {
        placed = true;
        break;
      }
    }
    await new Promise((r) => setTimeout(r, placed ? 20 : 100));
  }
  await Promise.all([...clients.values()].map((c) => c.close()));
}

afterAll(async () => {
  await killAllBrokers();
});

describe('DR switchover race', () => {
  it('DR switchover race - an abandoned run whose unfence arrives during the next run: A ignores it, one site serves, nothing lost or doubled', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const toA = await relay(a.port);
    const toB = await relay(b.port);
    const mb = await ManagementClient.connect({ host: '127.0.0.1', port: b.port }, { timeoutMs: 60_000, properties: { 'qpid.ha-admin': true } });
    const switchover = (timeoutMs: number) =>
      mb.request('DR-SWITCHOVER', 'broker', 'broker', { queues: 'orders', timeout: timeoutMs, 'reverse-source': toB.url }).then(
        (r) => r as Record<string, unknown>,
        (err: Error) => {
          if (err instanceof TandemError) return { refused: err.message };
          throw err;
        },
      );
    const log: Sent[] = [];
    let stopping = false;
    let publishing: Promise<void> | undefined;
    try {
      await send(a.port, 'orders', range('s', 0, 50));
      await mb.request('DR-ADD', 'broker', 'broker', { queue: 'orders', source: toA.url, mode: 'enqueue-and-dequeue' });
      await drFlush(a.port, b.port);
      const consumed = await receive(a.port, 'orders', 10);
      publishing = publisher([a, b], () => stopping, log);
      await waitFor(() => log.filter((s) => s.fate === 'acked').length >= 20, { timeout: 30_000, name: 'first publishes' });

      // Run 1: the DR link stalls (the drain cannot end), its unfence is kept back on the way to A.
      toA.hold();
      toA.holdMatching('DR-UNFENCE');
      const run1 = switchover(2000);
      await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'fenced', { timeout: 20_000, name: 'A fenced by run 1' });
      // A cannot ask B how the run ended, so it stays fenced for run 2 to take over.
      toB.refuseNew();
      const r1 = await run1;
      expect(String(r1.refused)).toMatch(/abandoned.*could not be told to unfence/);
      expect(toA.heldFor('DR-UNFENCE')).toBe(1);
      expect((await drRowOf(a.port, 'orders')).role).toBe('fenced');

      // Run 2: the DR link goes on; its DR-FOLLOW is kept back, so A stays fenced after B activated.
      toA.release();
      toA.holdMatching('DR-FOLLOW');
      const run2 = switchover(30_000);
      await waitFor(async () => (await drRowOf(b.port, 'orders')).role === 'activated', { timeout: 30_000, name: 'B activated by run 2' });
      await waitFor(() => toA.heldFor('DR-FOLLOW') === 1, { timeout: 10_000, name: "run 2's follow held" });
      expect((await drRowOf(a.port, 'orders')).role).toBe('fenced');

      // Run 1's unfence arrives now, late: A must not serve beside the activated B.
      toA.releaseMatching('DR-UNFENCE');
      const answered = await waitFor(
        () => (a.stderr.includes('ignored an unfence from an earlier switchover run') ? 'ignored' : a.stderr.includes('switchover abandoned by the other site') ? 'taken' : undefined),
        { timeout: 20_000, name: "A's answer to run 1's late unfence" },
      );
      expect(answered).toBe('ignored');
      expect((await drRowOf(a.port, 'orders')).role).toBe('fenced');

      // Run 2's follow arrives, and A can reach B again.
      toA.releaseMatching('DR-FOLLOW');
      toB.admitNew();
      const r2 = await run2;
      expect(r2.switched, JSON.stringify(r2)).toEqual(['orders']);
      await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'passive copy', { timeout: 30_000, name: 'A follows B' });
      const served = log.filter((s) => s.fate === 'acked').length;
      await waitFor(() => log.filter((s) => s.fate === 'acked').length >= served + 20, { timeout: 30_000, name: 'publishes to B' });
      stopping = true;
      await publishing;
      publishing = undefined;

      // One site serves: B; A is its passive copy, at the same epoch, and refuses publishers.
      const [ra, rb] = [await drRowOf(a.port, 'orders'), await drRowOf(b.port, 'orders')];
      expect([ra.role, rb.role]).toEqual(['passive copy', 'source']);
      expect(ra.epoch).toBe(rb.epoch);
      await expect(send(a.port, 'orders', ['stray'])).rejects.toThrow(/redirect|served by the DR site/);
      await drFlush(b.port, a.port);

      // Every acknowledged message once, in publishing order; an unknown one at most once; nothing else.
      const acked = log.filter((s) => s.fate === 'acked').map((s) => s.id);
      const unknown = new Set(log.filter((s) => s.fate === 'unknown').map((s) => s.id));
      const copy = await contents(a.port, 'orders');
      const all = (await receive(b.port, 'orders', await depthOf(b.port, 'orders'))) as string[];
      expect(copy).toEqual(all);
      const held = [...consumed, ...all] as string[];
      const count = new Map<string, number>();
      for (const id of held) count.set(id, (count.get(id) ?? 0) + 1);
      expect([...count].filter(([, n]) => n > 1)).toEqual([]);
      const seeds = range('s', 0, 50);
      expect(held.filter((id) => id.startsWith('s'))).toEqual(seeds);
      const published = held.filter((id) => id.startsWith('p'));
      expect(published.filter((id) => !unknown.has(id))).toEqual(acked);
      console.log(`switchover race: ${acked.length} acknowledged, ${unknown.size} unknown (${published.length - acked.length} of them held), ${log.filter((s) => s.fate === 'refused').length} refused`);
      expect(a.errorLogLines.slice(0, 3)).toEqual([]);
      expect(b.errorLogLines.slice(0, 3)).toEqual([]);
    } finally {
      stopping = true;
      await publishing?.catch(() => undefined);
      mb.close();
      toA.close();
      toB.close();
    }
  }, 180_000);

  it('DR switchover race - after a restart of the fenced source, an unfence naming a run is not taken; A asks B and serves again once B answers', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const toB = await relay(b.port);
    try {
      await send(a.port, 'orders', range('m', 0, 10));
      await mgmt(b.port, 'DR-ADD', { queue: 'orders', source: a.url, mode: 'enqueue-and-dequeue' });
      await drFlush(a.port, b.port);
      // Fenced by a run whose site A then cannot reach: A cannot ask how it ended.
      const run = randomUUID();
      await mgmt(a.port, 'DR-FENCE', { queues: JSON.stringify([{ queue: 'orders', mode: 'enqueue-and-dequeue', epoch: 1 }]), peer: toB.url, run });
      toB.refuseNew();
      await a.kill();
      const a2 = await TestBroker.start({ dataDir: a.dataDir, port: a.port });
      expect((await drRowOf(a2.port, 'orders')).role).toBe('fenced');
      // An unfence naming a run (this one's, late; or one a newer run has replaced): the restarted A cannot tell whose.
      expect(((await mgmt(a2.port, 'DR-UNFENCE', { queues: JSON.stringify([{ queue: 'orders', epoch: 2 }]), run })) as { unfenced: string[] }).unfenced).toEqual([]);
      expect((await drRowOf(a2.port, 'orders')).role).toBe('fenced');
      await expect(send(a2.port, 'orders', ['refused'])).rejects.toThrow(/moving to the DR site/);
      // Once B answers that no switchover runs there, A serves again, and B copies it.
      toB.admitNew();
      await waitFor(async () => (await drRowOf(a2.port, 'orders')).role === 'source', { timeout: 30_000, name: 'A unfenced after asking B' });
      await send(a2.port, 'orders', ['after']);
      await drFlush(a2.port, b.port);
      expect(await contents(b.port, 'orders')).toEqual([...range('m', 0, 10), 'after']);
      expect(a2.errorLogLines.slice(0, 3)).toEqual([]);
    } finally {
      toB.close();
    }
  }, 120_000);
});

// Large messages (1-5 MiB, many frames each) in flight when the primary is killed -9:
// the sender resends what it had no outcome for to the promoted backup. Every message
// the sender was told was accepted is there, whole (same bytes), and so is every resend;
// with a duplicate-detection window each is there once, without one only a resend may
// be there twice.
import { createHash } from 'node:crypto';
import type { Delivery, EventContext, Sender } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';
import { prng } from '../../src/util/prng.js';

const MIB = 1024 * 1024;

/** Message i's body: its size from the seed, its bytes from i (so a torn or mixed-up body shows). */
function bodyOf(i: number, random: () => number): Buffer {
  const size = MIB + Math.floor(random() * 4 * MIB);
  const b = Buffer.alloc(size, i % 251);
  b.writeUInt32BE(i, 0);
  b.writeUInt32BE(size, size - 4);
  return b;
}

const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Send on `sender` and record each outcome; what never gets one stays out of both sets. */
function sendAll(sender: Sender, bodies: Buffer[], ids: number[], accepted: Set<number>, refused: Set<number>): void {
  const byDelivery = new Map<Delivery, number>();
  const settle = (into: Set<number>) => (ctx: EventContext) => {
    const i = byDelivery.get(ctx.delivery as Delivery);
    if (i !== undefined) into.add(i);
  };
  sender.on('accepted', settle(accepted));
  sender.on('rejected', settle(refused));
  sender.on('released', settle(refused));
  sender.on('modified', settle(refused));
  let next = 0;
  const pump = () => {
    while (next < ids.length && sender.sendable()) {
      const i = ids[next++]!;
      // A Buffer body goes as an AMQP data section.
      byDelivery.set(sender.send({ message_id: `big-${i}`, durable: true, body: bodies[i]! }), i);
    }
  };
  sender.on('sendable', pump);
  pump();
}

describe('ha - large messages across kill -9 of the primary', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it.each([
    ['without a dedup window', 'big', {}],
    ['with a dedup window', 'bigd', { 'qpid.dedup-window': '1000' }],
  ] as const)('ha large messages - %s: what was accepted is whole on the new primary, resends of what had no outcome too', async (_name, queue, args) => {
    const random = prng(queue.length * 31);
    const COUNT = 8;
    const bodies = Array.from({ length: COUNT }, (_, i) => bodyOf(i, random));
    const c = await TestCluster.ready(3);
    await manage(c.ports[0]!, 'CREATE', 'queue', queue, { durable: true, ...args });
    await c.backupsCaughtUp(0);

    const accepted = new Set<number>();
    const refused = new Set<number>();
    const first = await TestClient.connect({ port: c.ports[0]! });
    // Credit permitting, all are in flight at once; the kill comes once two are accepted.
    const sender = await first.openSender(queue);
    sendAll(sender, bodies, [...bodies.keys()], accepted, refused);
    await waitFor(() => accepted.size >= 2, { timeout: 60_000, name: 'two accepted' });
    await c.kill(0);
    first.destroy();
    const next = await promoteFurtherAhead(c);

    // Resend what got no outcome (or was refused), as a client that reconnects does.
    const unanswered = [...bodies.keys()].filter((i) => !accepted.has(i));
    const told = new Set(accepted);
    const again = await TestClient.connect({ port: c.ports[next]! });
    try {
      const resent = new Set<number>();
      sendAll(await again.openSender(queue), bodies, unanswered, resent, refused);
      await waitFor(() => resent.size === unanswered.length, { timeout: 60_000, name: `resends accepted (${resent.size} of ${unanswered.length})` });

      const depth = await queueDepth(c.ports[next]!, queue);
      const r = await again.openReceiver(queue);
      r.receiver.add_credit(depth + 5);
      const got = (await r.next(depth, 60_000)).map((g) => {
        g.delivery.accept();
        const raw = g.message.body as { content?: Buffer } | Buffer;
        return Buffer.isBuffer(raw) ? raw : raw.content!;
      });
      const seen = new Map<number, number>();
      for (const b of got) {
        const i = b.readUInt32BE(0);
        expect(i).toBeLessThan(COUNT);
        // Whole: the same bytes as sent.
        expect(digest(b), `message ${i}`).toBe(digest(bodies[i]!));
        seen.set(i, (seen.get(i) ?? 0) + 1);
      }
      expect([...told].filter((i) => !seen.has(i))).toEqual([]);
      expect(unanswered.filter((i) => !seen.has(i))).toEqual([]);
      const twice = [...seen].filter(([, n]) => n > 1).map(([i]) => i);
      if (queue === 'bigd') expect(twice).toEqual([]);
      else expect(twice.filter((i) => !unanswered.includes(i))).toEqual([]);
    } finally {
      await again.close();
      await c.stopAll();
    }
  }, 180_000);
});

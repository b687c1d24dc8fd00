// A queue holding far more message data than max-memory, on a real tandemd:
// bodies beyond the budget leave memory once synced, a kill -9 and restart
// bring every accepted message back (paged, so the restart reads no bodies), and
// a consumer then gets every message exactly once, intact and in order.
import { afterAll, describe, expect, it } from 'vitest';
import type { Message } from 'rhea';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const MiB = 1024 * 1024;
const COUNT = 6000;
const SIZE = 4096; // 24 MiB of bodies against a 2 MiB budget

function body(i: number): string {
  return `m${i}:`.padEnd(SIZE, String.fromCharCode(97 + (i % 26)));
}

async function status(port: number): Promise<Record<string, number>> {
  return (await manage(port, 'READ', 'broker', undefined)) as Record<string, number>;
}

describe('very large queues - bodies beyond max-memory wait in the journal', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('large queue - stays under max-memory, survives kill -9, delivers every message once and in order', async () => {
    let broker = await TestBroker.start({ args: ['--max-memory', '2MiB'] });
    const producer = await TestClient.connect({ port: broker.port });
    const sender = await producer.openSender('big');
    for (let start = 0; start < COUNT; start += 500) {
      const batch: Message[] = Array.from({ length: 500 }, (_, k) => ({ body: body(start + k), durable: true }));
      const outcomes = await producer.send(sender, batch, { timeoutMs: 60_000 });
      expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    }
    producer.connection.close();
    // The pager runs every 250 ms and after each max-memory/16 of new bodies.
    const paged = await waitFor(async () => {
      const s = await status(broker.port);
      return s['resident-bytes']! <= 2 * MiB ? s : undefined;
    }, { timeout: 10_000, name: 'resident bytes under max-memory' });
    expect(paged['paged-messages']).toBeGreaterThan(COUNT - 2 * MiB / SIZE - 1);

    // A consumer takes the first 1000 (they are in memory or read ahead), then the broker dies.
    const first = await TestClient.connect({ port: broker.port });
    const r1 = await first.openReceiver('big');
    r1.receiver.add_credit(1000);
    const got1 = await r1.next(1000, 30_000);
    for (const m of got1) m.delivery.accept();
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'big')) as Record<string, number>).depth === COUNT - 1000, { timeout: 10_000, name: 'first 1000 dequeued' });
    first.connection.close();
    await broker.kill();

    broker = await TestBroker.start({ dataDir: broker.dataDir, args: ['--max-memory', '2MiB'] });
    const after = await status(broker.port);
    // Recovery read no bodies: every queued message is paged until a consumer reaches it.
    expect(after['paged-messages']).toBe(COUNT - 1000);
    expect(after['resident-bytes']).toBe(0);

    const second = await TestClient.connect({ port: broker.port });
    const r2 = await second.openReceiver('big');
    r2.receiver.add_credit(COUNT);
    const got2: typeof got1 = [];
    // Accept as they come: a session holds at most ~2048 unsettled deliveries.
    while (got2.length < COUNT - 1000) {
      const batch = await r2.next(Math.min(500, COUNT - 1000 - got2.length), 60_000);
      for (const m of batch) m.delivery.accept();
      got2.push(...batch);
    }
    const bodies = [...got1, ...got2].map((m) => String(bodyOf(m.message)));
    expect(bodies.length).toBe(COUNT);
    for (let i = 0; i < COUNT; i++) {
      if (bodies[i] !== body(i)) throw new Error(`message ${i}: expected ${body(i).slice(0, 12)}..., got ${bodies[i]?.slice(0, 12)}...`);
    }
    expect(await r2.drainFor(300)).toHaveLength(0);
    const end = await status(broker.port);
    expect(end['read-back-total']).toBeGreaterThanOrEqual(COUNT - 1000);
    second.connection.close();
    await broker.stop();
  }, 180_000);
});

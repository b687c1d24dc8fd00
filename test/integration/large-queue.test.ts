// A queue holding far more message data than max-memory, on a real tandemd:
// bodies beyond the budget leave memory once synced, a kill -9 and restart
// bring every accepted message back (paged, so the restart reads no bodies), and
// a consumer then gets every message exactly once, intact and in order.
import { afterAll, describe, expect, it } from 'vitest';
import type { Message } from 'rhea';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';
import { scrape } from '../helpers/scrape.js';

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
    // Those acceptances were settled first (at-least-once): their dequeues are journaled after
    // the broker forgot the deliveries. A durable send accepted after them is a barrier: the
    // journal writes in order and settles a send only once all before it is written.
    expect((await first.send('barrier', [{ body: 'barrier', durable: true }]))[0]!.state).toBe('accepted');
    first.connection.close();
    await broker.kill();

    broker = await TestBroker.start({ dataDir: broker.dataDir, args: ['--max-memory', '2MiB'] });
    const after = await status(broker.port);
    // Recovery read no bodies: every queued message is paged until a consumer reaches it (the barrier too).
    expect(after['paged-messages']).toBe(COUNT - 1000 + 1);
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

  it('memory alarm - a broker past its memory-limit (live memory outside the heap counts) refuses new messages, and accepts again once drained', async () => {
    // Message bodies are buffers, outside the V8 heap: only memory-limit can stop them.
    const broker = await TestBroker.start({ args: ['--dr-retain-changes', '0', '--memory-limit', '96MiB', '--max-memory', '16MiB', '--metrics-port', '0'] });
    expect(broker.stderr).not.toMatch(/max-memory is not below memory-limit/);
    const body = 'm'.repeat(4096);
    // Bounded: at most 100k messages of 4 KiB (400 MiB; the alarm comes near 96 MiB).
    const fill = await fillUntilRefused(broker.port, 'live', 50, () => Array.from({ length: 2000 }, () => ({ body })));
    expect(fill.refusal.description).toMatch(/memory-limit 96 MiB.*raise memory-limit/);
    expect(((await status(broker.port)) as unknown as { 'memory-limit-bytes': number })['memory-limit-bytes']).toBe(96 * 1024 * 1024);
    expect((await scrape(broker.metricsPort!)).samples.get('tandem_memory_alarm')).toBe(1);
    await drainAndAcceptAgain(broker, fill);
    expect((await scrape(broker.metricsPort!)).samples.get('tandem_memory_alarm')).toBe(0);
    expect(broker.stderr).toMatch(/MEMORY ALARM.*memory-limit/);
    await broker.stop();
  }, 240_000);

  it('memory alarm - a broker near its heap limit refuses new messages with a clear error, and accepts again once drained', async () => {
    // A small heap so the alarm comes after tens of thousands of messages, not millions.
    // Not a DR source: its window of recent changes would keep drained messages in memory.
    const broker = await TestBroker.start({ args: ['--dr-retain-changes', '0'], env: { NODE_OPTIONS: '--max-old-space-size=96' } });
    // Bounded: at most 400k messages (the alarm comes far earlier).
    const fill = await fillUntilRefused(broker.port, 'heap', 80, (batch) => Array.from({ length: 5000 }, (_, i) => ({ body: `h-${batch * 5000 + i}` })));
    expect(fill.refusal.description).toMatch(/memory is nearly full.*max-old-space-size/);
    await drainAndAcceptAgain(broker, fill);
    expect(broker.stderr).toMatch(/MEMORY ALARM/);
    await broker.stop();
  }, 240_000);
});

interface Filled {
  client: TestClient;
  sender: Awaited<ReturnType<TestClient['openSender']>>;
  queue: string;
  accepted: number;
  refusal: { condition?: string; description?: string };
}

/** Send batches until the broker refuses one message (the memory alarm); checks the refusal's condition and the status flag. */
async function fillUntilRefused(port: number, queue: string, maxBatches: number, batchOf: (batch: number) => Array<{ body: string }>): Promise<Filled> {
  const client = await TestClient.connect({ port });
  const sender = await client.openSender(queue);
  let accepted = 0;
  let refusal: Filled['refusal'] | undefined;
  for (let batch = 0; batch < maxBatches && !refusal; batch++) {
    for (const o of await client.send(sender, batchOf(batch), { timeoutMs: 60_000 })) {
      if (o.state === 'accepted') accepted++;
      else refusal ??= o.error;
    }
  }
  expect(refusal, 'the alarm never came').toBeDefined();
  expect(refusal!.condition).toBe('amqp:resource-limit-exceeded');
  expect(((await status(port)) as unknown as { 'memory-alarm': boolean })['memory-alarm']).toBe(true);
  return { client, sender, queue, accepted, refusal: refusal! };
}

/** Consumers still work while the alarm is up; nothing accepted is lost; the alarm clears as the queue drains. */
async function drainAndAcceptAgain(broker: TestBroker, fill: Filled): Promise<void> {
  const r = await fill.client.openReceiver(fill.queue);
  r.receiver.add_credit(fill.accepted);
  let got = 0;
  while (got < fill.accepted) {
    const batch = await r.next(Math.min(1000, fill.accepted - got), 60_000);
    for (const m of batch) m.delivery.accept();
    got += batch.length;
  }
  await r.close();
  await waitFor(async () => ((await status(broker.port)) as unknown as { 'memory-alarm': boolean })['memory-alarm'] === false, { timeout: 30_000, name: 'alarm cleared' });
  expect((await fill.client.send(fill.sender, ['after the alarm']))[0]!.state).toBe('accepted');
  fill.client.connection.close();
}

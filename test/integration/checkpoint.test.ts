// The journal checkpoint on a real tandemd: checkpoints are written while
// producers and a consumer run, the broker is killed with kill -9, and a restart
// from the checkpoint (plus the records after it) must hold every accepted,
// unconsumed message exactly once and in order. Then the checkpoint is damaged,
// the broker killed again: the restart says so, replays the whole journal, and
// still holds exactly the same messages. And a priority queue whose messages carry
// subjects, TTLs and delivery counts, paged out and checkpointed: after kill -9 it
// delivers every field back, in priority order, from the checkpoint and from a
// full replay alike.
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Message } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const COUNT = 8000;
const CONSUMED = 2500;
const ARGS = ['--checkpoint-bytes', '256KiB', '--max-memory', '2MiB'];

const body = (i: number): string => `m${i}:`.padEnd(1024, String.fromCharCode(97 + (i % 26)));

async function depth(port: number): Promise<number> {
  return ((await manage(port, 'READ', 'queue', 'ckpt')) as Record<string, number>).depth!;
}

/** Receive everything left on the queue, accepting each; bodies in arrival order. */
async function drainAll(port: number, expected: number): Promise<string[]> {
  const client = await TestClient.connect({ port });
  const r = await client.openReceiver('ckpt');
  r.receiver.add_credit(expected + 10);
  const got: string[] = [];
  while (got.length < expected) {
    const batch = await r.next(Math.min(500, expected - got.length), 60_000);
    for (const m of batch) m.delivery.accept();
    got.push(...batch.map((m) => String(bodyOf(m.message))));
  }
  expect(await r.drainFor(300)).toHaveLength(0);
  client.connection.close();
  return got;
}

describe('journal checkpoint - kill -9 with a checkpoint present', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('checkpoint - a restart from the checkpoint holds every accepted message once, in order; a damaged one falls back to a full replay', async () => {
    let broker = await TestBroker.start({ args: ARGS });
    const checkpoint = path.join(broker.dataDir, 'journal', 'checkpoint');
    const producer = await TestClient.connect({ port: broker.port });
    const sender = await producer.openSender('ckpt');
    const consumer = await TestClient.connect({ port: broker.port });
    const r = await consumer.openReceiver('ckpt');
    let consumed = 0;
    for (let start = 0; start < COUNT; start += 500) {
      const batch: Message[] = Array.from({ length: 500 }, (_, k) => ({ body: body(start + k), durable: true }));
      const outcomes = await producer.send(sender, batch, { timeoutMs: 60_000 });
      expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
      // Consume as it goes, so the records after a checkpoint hold dequeues too.
      if (consumed < CONSUMED) {
        const n = Math.min(250, CONSUMED - consumed);
        r.receiver.add_credit(n);
        const got = await r.next(n, 30_000);
        got.forEach((m, k) => expect(String(bodyOf(m.message))).toBe(body(consumed + k)));
        for (const m of got) m.delivery.accept();
        consumed += n;
      }
    }
    await waitFor(async () => (await depth(broker.port)) === COUNT - CONSUMED, { timeout: 10_000, name: 'acceptances applied' });
    expect(existsSync(checkpoint)).toBe(true);
    producer.connection.close();
    consumer.connection.close();
    await broker.kill();

    // The crash left a checkpoint and records after it.
    broker = await TestBroker.start({ dataDir: broker.dataDir, args: ARGS });
    await waitFor(() => broker.stderr.includes('from its checkpoint'), { timeout: 10_000, name: 'recovered from the checkpoint' });
    expect(await depth(broker.port)).toBe(COUNT - CONSUMED);
    // Take a few, not accepted (they come back), then die again; damage the checkpoint.
    const peek = await TestClient.connect({ port: broker.port });
    const pr = await peek.openReceiver('ckpt');
    pr.receiver.add_credit(10);
    expect((await pr.next(10, 30_000)).map((m) => String(bodyOf(m.message)))).toEqual(Array.from({ length: 10 }, (_, k) => body(CONSUMED + k)));
    await broker.kill();
    const ckpt = readFileSync(checkpoint);
    ckpt[Math.floor(ckpt.length / 2)]! ^= 0x10;
    writeFileSync(checkpoint, ckpt);

    broker = await TestBroker.start({ dataDir: broker.dataDir, args: ARGS });
    await waitFor(() => broker.stderr.includes('cannot be used'), { timeout: 10_000, name: 'damaged checkpoint reported' });
    const bodies = await drainAll(broker.port, COUNT - CONSUMED);
    expect(bodies.length).toBe(COUNT - CONSUMED);
    for (let i = 0; i < bodies.length; i++) {
      if (bodies[i] !== body(CONSUMED + i)) throw new Error(`message ${CONSUMED + i}: expected ${body(CONSUMED + i).slice(0, 12)}..., got ${bodies[i]?.slice(0, 12)}...`);
    }
    // A clean stop writes a checkpoint of everything; the next start replays nothing and is empty.
    await broker.stop();
    broker = await TestBroker.start({ dataDir: broker.dataDir, args: ARGS });
    await waitFor(() => broker.stderr.includes('from its checkpoint'), { timeout: 10_000, name: 'clean restart from the checkpoint' });
    expect(await depth(broker.port)).toBe(0);
    await broker.stop();
    broker.cleanup();
  });
});

describe('journal checkpoint - a priority queue of paged messages with subjects, TTLs and delivery counts', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('checkpoint - after kill -9, every field of every message comes back in priority order, from the checkpoint and from a full replay', async () => {
    const N = 2400;
    const args = ['--checkpoint-bytes', '256KiB', '--max-memory', '1MiB'];
    const broker = await TestBroker.start({ args });
    await manage(broker.port, 'CREATE', 'queue', 'prio', { durable: true, priorities: 10 });
    const shortTtl = (i: number) => i % 7 === 3;
    const sent = (i: number): Message => ({
      body: `p${i}:`.padEnd(1000, 'x'),
      durable: true,
      priority: i % 10,
      subject: `s.${i}`,
      ...(shortTtl(i) ? { ttl: 1500 } : i % 7 === 5 ? { ttl: 3_600_000 } : {}),
      ...(i % 5 === 0 ? { delivery_count: 2 } : {}),
      application_properties: { i },
    });
    const client = await TestClient.connect({ port: broker.port });
    const sender = await client.openSender('prio');
    const r = await client.openReceiver('prio');
    const consumed = new Set<number>();
    for (let start = 0; start < N; start += 300) {
      const outcomes = await client.send(sender, Array.from({ length: 300 }, (_, k) => sent(start + k)), { timeoutMs: 60_000 });
      expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
      // Take some as it goes (the highest priorities), so the log holds dequeues after checkpoints too.
      r.receiver.add_credit(40);
      for (const m of await r.next(40, 30_000)) {
        consumed.add(m.message.application_properties!.i as number);
        m.delivery.accept();
      }
    }
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'prio')) as { depth: number }).depth <= N - consumed.size, { timeout: 10_000, name: 'acceptances applied' });
    expect(existsSync(path.join(broker.dataDir, 'journal', 'checkpoint'))).toBe(true);
    // The dequeues of what was taken must be on disk before the kill, or a consumed message
    // could rightly come back: a durable send settles after the sync that covers every
    // record before it.
    expect((await client.send('sync-barrier', [{ body: 'barrier', durable: true }]))[0]!.state).toBe('accepted');
    client.connection.close();
    await broker.kill();

    // The same crash image twice: with its checkpoint, and without it (every record replayed).
    const copyDir = path.join(mkdtempSync(path.join(tmpdir(), 'tandem-ckpt-')), 'data');
    cpSync(broker.dataDir, copyDir, { recursive: true });
    rmSync(path.join(copyDir, 'journal', 'checkpoint'));
    const left = Array.from({ length: N }, (_, i) => i).filter((i) => !consumed.has(i) && !shortTtl(i));
    // Delivery order: highest priority first, then in the order sent. Each was held at the
    // restart, so in doubt: delivered with the count it was sent with, plus one.
    const expected = [...left].sort((a, b) => b % 10 - (a % 10) || a - b).map((i) => ({ i, priority: i % 10, subject: `s.${i}`, deliveryCount: (i % 5 === 0 ? 2 : 0) + 1, body: `p${i}:`.padEnd(1000, 'x'), ttl: i % 7 === 5 }));
    for (const [dataDir, how] of [[broker.dataDir, 'from its checkpoint'], [copyDir, 'journal recovered']] as const) {
      const again = await TestBroker.start({ dataDir, args });
      await waitFor(() => again.stderr.includes(how), { timeout: 10_000, name: how });
      if (how === 'journal recovered') expect(again.stderr).not.toContain('from its checkpoint');
      // The short-lived ones expire (the broker's own timer), the rest stay.
      await waitFor(async () => ((await manage(again.port, 'READ', 'queue', 'prio')) as { depth: number }).depth === left.length, { timeout: 20_000, name: `${left.length} left after expiry` });
      const c = await TestClient.connect({ port: again.port });
      const rr = await c.openReceiver('prio');
      rr.receiver.add_credit(left.length + 10);
      const got = await rr.next(left.length, 60_000);
      for (const m of got) m.delivery.accept();
      expect(await rr.drainFor(200)).toHaveLength(0);
      const seen = got.map((m) => ({
        i: m.message.application_properties!.i as number,
        priority: m.message.priority ?? 4,
        subject: m.message.subject,
        deliveryCount: m.message.delivery_count ?? 0,
        body: String(bodyOf(m.message)),
        ttl: (m.message.ttl ?? 0) > 0,
      }));
      expect(seen, `restart ${how}`).toEqual(expected);
      c.connection.close();
      await again.stop();
    }
    broker.cleanup();
    rmSync(path.dirname(copyDir), { recursive: true, force: true });
  });
});

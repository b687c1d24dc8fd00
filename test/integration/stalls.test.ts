// Work that grows with a queue is done in slices (src/admin/operations.ts, docs/stalls.md):
// while a big purge, a delete that sends every message on to an alternate exchange, the
// expiry of many messages at once (by the timer, or met by a consumer), or the give-back
// of a detached consumer's unsettled messages runs, the broker still answers other clients (and so sends HA heartbeats and pets
// the systemd watchdog). Asserted by what the event loop did meanwhile, not by time:
// READ requests, each sent after the answer to the one before, are answered before
// the long operation's own answer. In one synchronous run, at most the first of them
// could be (it may arrive with the operation's request), never the second.
import { createRequire } from 'node:module';
import { afterAll, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';

const require = createRequire(import.meta.url);
const rhea = require('rhea') as typeof import('rhea');

/** Send `n` small messages to `address`, a window of 2000 unsettled; resolves when all are accepted. `expiresAt`: each message's absolute-expiry-time. */
function fill(port: number, address: string, n: number, durable: boolean, expiresAt?: Date): Promise<void> {
  return new Promise((resolve, reject) => {
    const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false });
    const sender = conn.open_sender({ target: { address } });
    let sent = 0;
    let settled = 0;
    const pump = (): void => {
      // Bounded: at most n sends in all.
      while (sent < n && sender.sendable() && sent - settled < 2000) sender.send({ body: `m${sent++}`, durable, ...(expiresAt ? { absolute_expiry_time: expiresAt } : {}) });
    };
    const timer = setTimeout(() => reject(new Error(`fill: ${settled} of ${n} accepted after 120 s`)), 120_000);
    sender.on('sendable', pump);
    sender.on('accepted', () => {
      if (++settled === n) {
        clearTimeout(timer);
        conn.close();
        resolve();
      } else pump();
    });
    sender.on('rejected', () => reject(new Error('fill: a message was rejected')));
  });
}

/**
 * Run `operation` on one management connection and, on another, READ broker again
 * and again (each after the answer before) until it is answered; resolves with its
 * answer and how many READs were answered before it.
 */
async function whileAnswering(port: number, operation: (c: ManagementClient) => Promise<unknown>): Promise<{ result: unknown; answeredMeanwhile: number }> {
  const worker = await ManagementClient.connect({ host: '127.0.0.1', port }, { timeoutMs: 120_000 });
  const prober = await ManagementClient.connect({ host: '127.0.0.1', port }, { timeoutMs: 120_000 });
  try {
    let done = false;
    const op = operation(worker).finally(() => (done = true));
    let answeredMeanwhile = 0;
    // Bounded: stops with the operation, or after 100,000 READs.
    for (let i = 0; !done && i < 100_000; i++) {
      await prober.request('READ', 'broker', 'broker');
      if (!done) answeredMeanwhile++;
    }
    return { result: await op, answeredMeanwhile };
  } finally {
    worker.close();
    prober.close();
  }
}

async function depth(port: number, queue: string): Promise<number> {
  const c = await ManagementClient.connect({ host: '127.0.0.1', port });
  try {
    return ((await c.request('READ', 'queue', queue)) as { depth: number }).depth;
  } finally {
    c.close();
  }
}

async function manage(port: number, op: string, type: string, name: string | undefined, body: Record<string, unknown> = {}): Promise<unknown> {
  const c = await ManagementClient.connect({ host: '127.0.0.1', port });
  try {
    return await c.request(op, type, name, body);
  } finally {
    c.close();
  }
}

/** A consumer that takes `n` messages of `address` and holds them unsettled (a session window of n). */
async function holdAll(port: number, address: string, n: number): Promise<{ conn: import('rhea').Connection; receiver: import('rhea').Receiver }> {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false, session_buffer_size: n + 10 });
  const receiver = conn.open_receiver({ source: { address }, credit_window: n, autoaccept: false });
  let taken = 0;
  receiver.on('message', () => taken++);
  await waitFor(() => taken === n, { timeout: 60_000, name: 'the consumer holds every message' });
  return { conn, receiver };
}

/**
 * Detach `receiver` and READ the queue, each READ after the answer before, until none is
 * acquired or `enough(acquired)`; the acquired counts seen. Every message stays in the depth.
 */
async function detachWatching(port: number, queue: string, n: number, receiver: import('rhea').Receiver, enough: (acquired: number) => boolean): Promise<Set<number>> {
  const c = await ManagementClient.connect({ host: '127.0.0.1', port });
  const seen = new Set<number>();
  try {
    // In one synchronous give-back no READ could see the queue between none available and all.
    receiver.close();
    // Bounded in time and count.
    const deadline = Date.now() + 60_000;
    for (let i = 0; i < 10_000_000 && Date.now() < deadline; i++) {
      const q = (await c.request('READ', 'queue', queue)) as { acquired: number; depth: number };
      expect(q.depth).toBe(n);
      seen.add(q.acquired);
      if (q.acquired === 0 || enough(q.acquired)) break;
    }
  } finally {
    c.close();
  }
  return seen;
}

/** Receive (and accept) `n` messages of `address`: their bodies and delivery-counts, in arrival order; the caller closes `conn`. */
async function receiveAll(port: number, address: string, n: number): Promise<{ bodies: string[]; counts: number[]; conn: import('rhea').Connection }> {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false });
  const receiver = conn.open_receiver({ source: { address }, credit_window: 2000 });
  const bodies: string[] = [];
  const counts: number[] = [];
  receiver.on('message', (ctx) => {
    bodies.push(String(ctx.message.body));
    counts.push(ctx.message.delivery_count ?? 0);
  });
  await waitFor(() => bodies.length >= n, { timeout: 60_000, name: `${n} messages received` });
  return { bodies, counts, conn };
}

describe('stalls - long queue operations leave the event loop free', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('stalls - a purge of 200,000 durable messages answers other clients while it runs, and removes them all', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'big', { durable: true });
    await fill(broker.port, 'big', 200_000, true);
    const { result, answeredMeanwhile } = await whileAnswering(broker.port, (c) => c.request('PURGE', 'queue', 'big', {}));
    expect(result).toMatchObject({ purged: 200_000 });
    expect(answeredMeanwhile).toBeGreaterThanOrEqual(2);
    expect(await depth(broker.port, 'big')).toBe(0);
    // A purge with a count still takes just that many.
    await fill(broker.port, 'big', 1000, true);
    expect(await manage(broker.port, 'PURGE', 'queue', 'big', { count: 600 })).toMatchObject({ purged: 600 });
    expect(await depth(broker.port, 'big')).toBe(400);
    // What the journal holds: the 400 left, after kill -9.
    await broker.kill();
    const again = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await depth(again.port, 'big')).toBe(400);
  }, 240_000);

  it('stalls - deleting a queue of 50,000 durable messages with an alternate exchange answers other clients meanwhile, and moves each message once', async () => {
    const broker = await TestBroker.start({ args: ['--max-memory', '1MiB'] });
    await manage(broker.port, 'CREATE', 'exchange', 'dlx', { type: 'fanout', durable: true });
    await manage(broker.port, 'CREATE', 'queue', 'dlq', { durable: true });
    await manage(broker.port, 'CREATE', 'binding', 'dlx/dlq/');
    await manage(broker.port, 'CREATE', 'queue', 'orders', { durable: true, 'alternate-exchange': 'dlx' });
    await fill(broker.port, 'orders', 50_000, true);
    // Many bodies wait in the journal (paged), so those are read back to be sent on.
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'orders')) as Record<string, number>)['paged-depth']! > 10_000, { timeout: 30_000, name: 'bodies paged out' });
    const { result, answeredMeanwhile } = await whileAnswering(broker.port, (c) => c.request('DELETE', 'queue', 'orders', {}));
    expect(result).toMatchObject({ removed: 50_000 });
    expect(answeredMeanwhile).toBeGreaterThanOrEqual(2);
    expect(await depth(broker.port, 'dlq')).toBe(50_000);
    await expect(manage(broker.port, 'READ', 'queue', 'orders')).rejects.toThrow(/does not exist|not found/i);
    // The journal agrees: the queue is gone and each message is on the dead-letter queue once.
    await broker.kill();
    const again = await TestBroker.start({ dataDir: broker.dataDir, args: ['--max-memory', '1MiB'] });
    expect(await depth(again.port, 'dlq')).toBe(50_000);
    await expect(manage(again.port, 'READ', 'queue', 'orders')).rejects.toThrow(/does not exist|not found/i);
    // Every body came through intact, in order.
    const c = rhea.create_container().connect({ host: '127.0.0.1', port: again.port, reconnect: false });
    const bodies: string[] = [];
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`got ${bodies.length} of 50000`)), 60_000);
      const r = c.open_receiver({ source: { address: 'dlq' }, credit_window: 500 });
      r.on('message', (ctx) => {
        bodies.push(String(ctx.message.body));
        if (bodies.length === 50_000) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    c.close();
    expect(bodies.every((b, i) => b === `m${i}`)).toBe(true);
  }, 240_000);

  it('stalls - 30,000 messages expiring at the same instant are dropped in slices: a client sees the queue part-way', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'fleeting', { durable: false });
    const n = 30_000;
    // All at one absolute-expiry-time, far enough ahead for the fill to end first.
    const at = new Date(Date.now() + 20_000);
    await fill(broker.port, 'fleeting', n, false, at);
    expect(await depth(broker.port, 'fleeting')).toBe(n);
    // READ again and again (each after the answer before) until the queue is empty: in one
    // synchronous run no answer could fall between full and empty.
    const seen = new Set<number>();
    const c = await ManagementClient.connect({ host: '127.0.0.1', port: broker.port });
    try {
      // Bounded in time (a minute past the expiry instant) and in count, not in count alone:
      // READs answered in a fraction of a millisecond spent a count bound before the instant came.
      const deadline = at.getTime() + 60_000;
      for (let i = 0; i < 10_000_000 && Date.now() < deadline; i++) {
        const d = ((await c.request('READ', 'queue', 'fleeting')) as { depth: number }).depth;
        seen.add(d);
        if (d === 0) break;
      }
    } finally {
      c.close();
    }
    expect(seen.has(0)).toBe(true);
    expect([...seen].some((d) => d > 0 && d < n), `depths seen: ${[...seen].slice(0, 10).join(', ')}`).toBe(true);
  }, 120_000);

  it('stalls - a consumer meeting 50,000 expired messages before the expiry timer drops them in slices, each dead-lettered once: a client sees the dead-letter queue part-way', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'exchange', 'dlx', { type: 'fanout' });
    await manage(broker.port, 'CREATE', 'queue', 'dlq', {});
    await manage(broker.port, 'CREATE', 'binding', 'dlx/dlq/');
    await manage(broker.port, 'CREATE', 'queue', 'fleeting', { 'alternate-exchange': 'dlx' });
    const n = 50_000;
    const at = Date.now() + 15_000;
    await fill(broker.port, 'fleeting', n, false, new Date(at));
    await fill(broker.port, 'fleeting', 1, false);
    // A takes them all and holds them past their expiry: the expiry timer looks only at
    // messages in the queue, so none is dropped before A lets go.
    const held = rhea.create_container().connect({ host: '127.0.0.1', port: broker.port, reconnect: false, session_buffer_size: n + 10 });
    const a = held.open_receiver({ source: { address: 'fleeting' }, credit_window: n + 1, autoaccept: false });
    let taken = 0;
    a.on('message', () => taken++);
    await waitFor(() => taken === n + 1, { timeout: 60_000, name: 'A holds every message' });
    expect(Date.now(), 'A took the messages before they expired').toBeLessThan(at);
    // B waits with credit, getting nothing: everything is out with A.
    const waiting = rhea.create_container().connect({ host: '127.0.0.1', port: broker.port, reconnect: false });
    const b = waiting.open_receiver({ source: { address: 'fleeting' }, credit_window: 10 });
    const gotByB: string[] = [];
    b.on('message', (ctx) => gotByB.push(`${String(ctx.message.body)}${ctx.message.absolute_expiry_time ? ' (expiring)' : ''}`));
    await new Promise((resolve) => b.once('receiver_open', resolve));
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now()) + 50));
    // A's detach puts them back, expired, and B's dispatch meets them all before the timer
    // can. In one synchronous run no READ could see the dead-letter queue between empty and full.
    a.close();
    const seen = new Set<number>();
    const c = await ManagementClient.connect({ host: '127.0.0.1', port: broker.port });
    try {
      // Bounded in time and count, or every dead letter there.
      const deadline = Date.now() + 60_000;
      for (let i = 0; i < 10_000_000 && Date.now() < deadline; i++) {
        const d = ((await c.request('READ', 'queue', 'dlq')) as { depth: number }).depth;
        seen.add(d);
        if (d === n) break;
      }
    } finally {
      c.close();
    }
    expect([...seen].some((d) => d > 0 && d < n), `dead-letter depths seen: ${[...seen].slice(0, 10).join(', ')}`).toBe(true);
    expect(seen.has(n)).toBe(true);
    await waitFor(() => gotByB.length > 0, { timeout: 30_000, name: 'B gets the live message' });
    // B got the live message alone (the other m0 had an expiry): nothing expired reached it.
    expect(gotByB).toEqual(['m0']);
    held.close();
    waiting.close();
    await waitFor(async () => (await depth(broker.port, 'fleeting')) === 0, { timeout: 10_000, name: 'B accepted it' });
    expect(await depth(broker.port, 'dlq')).toBe(n);
  }, 180_000);

  it('stalls - a consumer holding 100,000 unsettled messages detaches: they go back in slices (a client sees the queue part-way), each redelivered once, in order, count raised', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'held', { durable: true });
    const n = 100_000;
    await fill(broker.port, 'held', n, true);
    const a = await holdAll(broker.port, 'held', n);
    const seen = await detachWatching(broker.port, 'held', n, a.receiver, () => false);
    expect([...seen].some((x) => x > 0 && x < n), `acquired counts seen: ${[...seen].slice(0, 10).join(', ')}`).toBe(true);
    expect(seen.has(0)).toBe(true);
    // Every one comes again once, in order, as a delivery that failed once.
    const b = await receiveAll(broker.port, 'held', n);
    expect(b.bodies).toEqual(Array.from({ length: n }, (_, i) => `m${i}`));
    expect(b.counts.every((c) => c === 1)).toBe(true);
    await waitFor(async () => (await depth(broker.port, 'held')) === 0, { timeout: 20_000, name: 'B accepted them' });
    a.conn.close();
    b.conn.close();
  }, 240_000);

  it('stalls - killed (-9) while a detached consumer\'s 50,000 messages go back: after the restart each is there once, in order', async () => {
    const broker = await TestBroker.start();
    await manage(broker.port, 'CREATE', 'queue', 'held', { durable: true });
    const n = 50_000;
    await fill(broker.port, 'held', n, true);
    const a = await holdAll(broker.port, 'held', n);
    // Killed as soon as a READ sees the give-back part-way (acquired between none and all).
    const seen = await detachWatching(broker.port, 'held', n, a.receiver, (acquired) => acquired > 0 && acquired < n);
    expect([...seen].some((x) => x > 0 && x < n), `acquired counts seen: ${[...seen].slice(0, 10).join(', ')}`).toBe(true);
    await broker.kill();
    a.conn.close();
    const again = await TestBroker.start({ dataDir: broker.dataDir });
    expect(await depth(again.port, 'held')).toBe(n);
    const b = await receiveAll(again.port, 'held', n);
    expect(b.bodies).toEqual(Array.from({ length: n }, (_, i) => `m${i}`));
    await waitFor(async () => (await depth(again.port, 'held')) === 0, { timeout: 20_000, name: 'all accepted' });
    b.conn.close();
  }, 240_000);
});

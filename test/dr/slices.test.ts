// DR and the work a source does in slices (docs/stalls.md): a delete of a replicated
// queue whose messages go on to its alternate exchange, a purge, the expiry timer's
// slices of 5,000. The source is killed -9 in the middle of one (and restarted on its
// data), or its DR link is cut again and again while it runs; once the copy has caught
// up, it holds exactly what the source holds, message by message, in the source's order.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { contents, declareOrdersWithDeadLetters, depthOf, drFlush, range, send } from './helpers.js';
import { relay } from './relay.js';

const N = 12_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A queue's bodies in order ([] when the broker has no such queue). */
async function bodiesOf(port: number, queue: string): Promise<unknown[]> {
  let depth: number;
  try {
    depth = await depthOf(port, queue);
  } catch (err) {
    if (/does not exist|not found/i.test(String(err))) return [];
    throw err;
  }
  return contents(port, queue, depth);
}

/**
 * Site A: `orders`, its alternate exchange `orders.dlx` (a fanout to `orders.dead`), both
 * copied by site B (through `via`, A's address by default). Returns a restart of A on its data.
 */
async function sites(via?: (a: TestBroker) => Promise<string>): Promise<{ a: TestBroker; b: TestBroker }> {
  const a = await TestBroker.start();
  const b = await TestBroker.start();
  await declareOrdersWithDeadLetters(a.url);
  const source = via ? await via(a) : a.url;
  for (const q of ['orders', 'orders.dead']) {
    const add = await tandem(['dr', 'add', q, '--source', source, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
  }
  return { a, b };
}

/** The copy has caught up with A: both queues equal A's, message by message. */
async function expectEqual(a: TestBroker, b: TestBroker): Promise<{ orders: unknown[]; dead: unknown[] }> {
  await drFlush(a.port, b.port, 60_000);
  const orders = await bodiesOf(a.port, 'orders');
  const dead = await bodiesOf(a.port, 'orders.dead');
  expect(await bodiesOf(b.port, 'orders')).toEqual(orders);
  expect(await bodiesOf(b.port, 'orders.dead')).toEqual(dead);
  expect(b.errorLogLines).toEqual([]);
  return { orders, dead };
}

/** Until A's `orders.dead` holds a message (polled, at most 20 s). */
async function deadLettersBegun(a: TestBroker): Promise<void> {
  const deadline = Date.now() + 20_000;
  while ((await depthOf(a.port, 'orders.dead')) === 0 && Date.now() < deadline) await sleep(10);
}

const restart = (a: TestBroker) => TestBroker.start({ dataDir: a.dataDir, port: a.port });

describe('DR - source work done in slices', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR slices - a delete sending the queue on to its alternate exchange, the source killed -9 mid-way: the copy equals the restarted source', async () => {
    const { a, b } = await sites();
    await send(a.port, 'orders', range('s', 0, N));
    await drFlush(a.port, b.port);
    const del = tandem(['queue', 'del', 'orders', '-b', a.url]);
    // Killed once the delete has begun sending on (it has dead letters), at a random point after.
    await deadLettersBegun(a);
    await sleep(Math.floor(Math.random() * 150));
    await a.kill();
    await del;
    const a2 = await restart(a);
    const { orders, dead } = await expectEqual(a2, b);
    console.log(`delete killed -9 after ${dead.length} dead letters, ${orders.length} left in orders`);
    // Every message is still somewhere at the source (at least once: a crash between a dead letter and its dequeue).
    expect(new Set([...orders, ...dead]).size).toBe(N);
    // A delete finished after the restart leaves the copy empty and the dead letters equal too.
    const again = await tandem(['queue', 'del', 'orders', '-b', a2.url]);
    if (orders.length > 0) expect(again.code, again.stderr).toBe(0);
    expect((await expectEqual(a2, b)).orders).toEqual([]);
  });

  it('DR slices - a purge while the DR link is cut every 40 ms, then the expiry timer dropping 12,000 messages in slices while the source is killed -9: the copy equals the source', async () => {
    let cutter: Awaited<ReturnType<typeof relay>> | undefined;
    const { a, b } = await sites(async (x) => {
      cutter = await relay(x.port);
      return cutter.url;
    });
    await send(a.port, 'orders', range('p', 0, N));
    await drFlush(a.port, b.port);
    const purge = manage(a.port, 'PURGE', 'queue', 'orders', { count: 8000 });
    for (let i = 0; i < 10; i++) {
      await sleep(40);
      cutter!.cut();
    }
    expect((await purge) as Record<string, unknown>).toMatchObject({ purged: 8000 });
    expect(await expectEqual(a, b)).toEqual({ orders: range('p', 8000, N), dead: [] });
    // Messages with a ttl behind the 4,000 left: the timer expires them in slices, each a dead letter.
    const c = await TestClient.connect({ port: a.port });
    const ttl = range('t', 0, N).map((body) => ({ body, durable: true, ttl: 1500 }));
    for (let i = 0; i < N; i += 2000) expect((await c.send('orders', ttl.slice(i, i + 2000), { timeoutMs: 30_000 })).every((o) => o.state === 'accepted')).toBe(true);
    await c.close();
    await deadLettersBegun(a);
    await sleep(Math.floor(Math.random() * 200));
    await a.kill();
    cutter!.cut();
    const a2 = await restart(a);
    // The restarted source expires the rest itself; then both hold the 4,000 without a ttl.
    const until = Date.now() + 20_000;
    while ((await depthOf(a2.port, 'orders')) > N - 8000 && Date.now() < until) await sleep(200);
    const { orders, dead } = await expectEqual(a2, b);
    expect(orders).toEqual(range('p', 8000, N));
    expect(new Set(dead)).toEqual(new Set(range('t', 0, N)));
    cutter!.close();
  });
});

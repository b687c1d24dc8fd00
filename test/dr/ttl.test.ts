// DR and message expiry: a passive copy holds messages with a ttl whose expiry is the
// source's to decide. Their dequeues, and the dead letters the source's alternate
// exchange makes of them, come by the stream, each once; the copy expires nothing on its
// own while passive, even with its link held past the expiry (on the old code it did,
// and dead-lettered each message a second time under ids of its own). Activated, it
// expires what it holds itself, each dead letter once.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, declareOrdersWithDeadLetters, depthOf, drFlush, range } from './helpers.js';
import { relay, type Relay } from './relay.js';

const TTL_MS = 1500;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Site A: `orders` (alternate exchange `orders.dlx`, a fanout to `orders.dead`) holding
 * t0..t19 with a ttl and k0..k4 without; site B copies both queues through a relay.
 */
async function sites(): Promise<{ a: TestBroker; b: TestBroker; link: Relay }> {
  const a = await TestBroker.start();
  const b = await TestBroker.start();
  await declareOrdersWithDeadLetters(a.url);
  const link = await relay(a.port);
  for (const q of ['orders', 'orders.dead']) {
    const add = await tandem(['dr', 'add', q, '--source', link.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
  }
  const c = await TestClient.connect({ port: a.port });
  const ttl = range('t', 0, 20).map((body) => ({ body, durable: true, ttl: TTL_MS }));
  const kept = range('k', 0, 5).map((body) => ({ body, durable: true }));
  expect((await c.send('orders', [...ttl, ...kept])).every((o) => o.state === 'accepted')).toBe(true);
  await c.close();
  await drFlush(a.port, b.port);
  return { a, b, link };
}

describe('DR - messages with a ttl', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it("DR ttl - a passive copy expires nothing itself: the source's expiries and dead letters arrive once each, after a link held past the expiry", async () => {
    const { a, b, link } = await sites();
    // A consumer at the source holds t0..t2 past their expiry and accepts them: consumed, not dead letters.
    const c = await TestClient.connect({ port: a.port });
    const r = await c.openReceiver('orders');
    r.receiver.add_credit(3);
    const held = await r.next(3);
    expect(held.map((g) => bodyOf(g.message))).toEqual(['t0', 't1', 't2']);
    link.holdNew();
    // Past the expiry and two turns of both brokers' expiry timers (every second).
    await sleep(TTL_MS + 2500);
    for (const g of held) g.delivery.accept();
    await r.close();
    await c.close();
    // Nothing changed at B while it heard nothing (old code: 5 left, 20 dead letters of its own).
    expect(await depthOf(b.port, 'orders')).toBe(25);
    expect(await depthOf(b.port, 'orders.dead')).toBe(0);
    link.release();
    await drFlush(a.port, b.port);
    expect(await contents(a.port, 'orders')).toEqual(range('k', 0, 5));
    expect(await contents(a.port, 'orders.dead')).toEqual(range('t', 3, 20));
    expect(await depthOf(b.port, 'orders')).toBe(5);
    expect(await contents(b.port, 'orders')).toEqual(range('k', 0, 5));
    expect(await depthOf(b.port, 'orders.dead')).toBe(17);
    expect(await contents(b.port, 'orders.dead')).toEqual(range('t', 3, 20));
    expect(b.errorLogLines).toEqual([]);
    link.close();
  });

  it('DR ttl - activated after the source is lost, the copy expires what it holds itself: each dead letter once', async () => {
    const { a, b, link } = await sites();
    // The source's expiries never cross: its link is held until it dies.
    link.holdNew();
    await sleep(TTL_MS + 2500);
    await a.kill();
    link.close();
    expect(await depthOf(b.port, 'orders')).toBe(25);
    const act = await tandem(['dr', 'activate', '--all', '-b', b.url]);
    expect(act.code, act.stderr).toBe(0);
    const deadline = Date.now() + 10_000;
    while ((await depthOf(b.port, 'orders')) > 5 && Date.now() < deadline) await sleep(200);
    expect(await contents(b.port, 'orders')).toEqual(range('k', 0, 5));
    expect(await depthOf(b.port, 'orders.dead')).toBe(20);
    expect(await contents(b.port, 'orders.dead')).toEqual(range('t', 0, 20));
    expect(b.errorLogLines).toEqual([]);
  });
});

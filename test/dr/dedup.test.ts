// Exactly-once publishing through DR (issue 16). The source's queue has no
// window and its publisher sends some messages twice; the secondary's queue
// takes tandemd.conf's default window (dedup-window), so the copy applies each
// message-id once. After `tandem dr activate` the publisher resends to the
// secondary what it had sent the lost site, consumed there or not: the
// secondary's window, built from what it applied, refuses all of it, and only
// new ids get in. Then the same across a kill -9 of the secondary.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { drFlush, mgmt, receive } from './helpers.js';

const ids = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `m-${from + i}`);

async function publish(port: number, list: string[]): Promise<void> {
  const c = await TestClient.connect({ port });
  try {
    const outcomes = await c.send('orders', list.map((id) => ({ message_id: id, body: id, durable: true })), { timeoutMs: 30_000 });
    expect(outcomes.map((o) => o.state)).toEqual(list.map(() => 'accepted'));
  } finally {
    await c.close();
  }
}

const show = async (port: number) => (await manage(port, 'READ', 'queue', 'orders')) as Record<string, number>;
const depth = async (port: number): Promise<number> => (await show(port)).depth;

describe('DR - duplicate detection on the secondary', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR dedup - a double publish at the source is applied once, and a client resend after activation is refused', async () => {
    const source = await TestBroker.start();
    let secondary = await TestBroker.start({ args: ['--dedup-window', '100000', '--dedup-ttl', '10m'] });
    await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url]);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'orders', source: source.url, mode: 'enqueue-and-dequeue' });
    await publish(source.port, ids(0, 50));
    await publish(source.port, ids(0, 10)); // the source has no window: a second copy of each
    expect(await depth(source.port)).toBe(60);
    // Some consumed at the source before the disaster (their dequeues are copied too).
    expect(await receive(source.port, 'orders', 20)).toEqual(ids(0, 20));
    await drFlush(source.port, secondary.port);
    // The source's second copies of m-0..m-9 were never applied; the first 20 left by dequeue.
    expect(await depth(secondary.port)).toBe(30);
    // The source site is lost.
    await source.kill();
    const r = await tandem(['dr', 'activate', 'orders', '-b', secondary.url]);
    expect(r.code, r.stderr).toBe(0);
    // The publisher resends everything it sent the lost site, and new messages.
    await publish(secondary.port, [...ids(0, 50), ...ids(50, 60)]);
    expect(await depth(secondary.port)).toBe(40);
    expect((await show(secondary.port))['dedup-duplicates']).toBe(10 + 50);
    // The window holds across a kill -9 of the secondary.
    await secondary.kill();
    secondary = await TestBroker.start({ dataDir: secondary.dataDir, args: ['--dedup-window', '100000'] });
    await publish(secondary.port, ids(0, 60));
    expect(await receive(secondary.port, 'orders', 40)).toEqual(ids(20, 60));
    expect(await depth(secondary.port)).toBe(0);
    await secondary.stop();
  });
});

// Exactly-once publishing through DR (issue 16). The source's queue has no
// window and its publisher sends some messages twice; the secondary's queue
// takes tandemd.conf's default window (dedup-window), so the copy applies each
// message-id once. After `tandem dr activate` the publisher resends to the
// secondary what it had sent the lost site, consumed there or not: the
// secondary's window, built from what it applied, refuses all of it, and only
// new ids get in. Then the same across a kill -9 of the secondary. And a message the
// source refused after its enqueue went out (its disk full) leaves no key at the
// secondary, whether the source's queue keeps a window or not: resent there after
// activation, it is kept. Messages a commit the source could not journal had
// accepted are given back on the secondary too, not dropped as duplicates of
// themselves.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { runPython } from '../helpers/python.js';
import { fillFilesystem, mountTmpfs } from '../helpers/tmpfs.js';
import { contents, drFlush, mgmt, publishKeyed, receive } from './helpers.js';

const ids = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `m-${from + i}`);


const show = async (port: number) => (await manage(port, 'READ', 'queue', 'orders')) as Record<string, number>;
const depth = async (port: number): Promise<number> => (await show(port)).depth;

/**
 * A DR source whose data is on a full tmpfs (`dir`), and a secondary copying its `orders`
 * (queue arguments `queueArgs`, secondary options `secondaryArgs`): 'kept' went through,
 * then the 64 KiB 'refused' was refused for the full disk after its enqueue went out,
 * and the copy has applied all of it. The source is then killed and the copy activated.
 */
async function refusedAtFullSource(dir: string, queueArgs: string[], secondaryArgs: string[]): Promise<TestBroker> {
  const source = await TestBroker.start({ dataDir: join(dir, 'data'), args: ['--checkpoint-bytes', '0'] });
  const secondary = await TestBroker.start({ args: secondaryArgs });
  expect((await tandem(['queue', 'add', 'orders', '--durable', ...queueArgs, '-b', source.url])).code).toBe(0);
  await mgmt(secondary.port, 'DR-ADD', { queue: 'orders', source: source.url, mode: 'enqueue-and-dequeue' });
  await publishKeyed(source.port, ['kept']);
  await drFlush(source.port, secondary.port);
  fillFilesystem(join(dir, 'ballast'));
  const c = await TestClient.connect({ port: source.port });
  const [refused] = await c.send('orders', [{ message_id: 'refused', body: 'x'.repeat(64 * 1024), durable: true }], { timeoutMs: 30_000 });
  await c.close();
  expect(refused!.state).toBe('rejected');
  expect(refused!.error?.description).toMatch(/no space left for the journal/);
  await drFlush(source.port, secondary.port);
  expect(await depth(secondary.port)).toBe(1);
  await source.kill();
  const r = await tandem(['dr', 'activate', 'orders', '-b', secondary.url]);
  expect(r.code, r.stderr).toBe(0);
  return secondary;
}

describe('DR - duplicate detection on the secondary', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR dedup - a double publish at the source is applied once, and a client resend after activation is refused', async () => {
    const source = await TestBroker.start();
    let secondary = await TestBroker.start({ args: ['--dedup-window', '100000', '--dedup-ttl', '10m'] });
    await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url]);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'orders', source: source.url, mode: 'enqueue-and-dequeue' });
    await publishKeyed(source.port, ids(0, 50));
    await publishKeyed(source.port, ids(0, 10)); // the source has no window: a second copy of each
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
    await publishKeyed(secondary.port, [...ids(0, 50), ...ids(50, 60)]);
    expect(await depth(secondary.port)).toBe(40);
    expect((await show(secondary.port))['dedup-duplicates']).toBe(10 + 50);
    // The window holds across a kill -9 of the secondary.
    await secondary.kill();
    secondary = await TestBroker.start({ dataDir: secondary.dataDir, args: ['--dedup-window', '100000'] });
    await publishKeyed(secondary.port, ids(0, 60));
    expect(await receive(secondary.port, 'orders', 40)).toEqual(ids(20, 60));
    expect(await depth(secondary.port)).toBe(0);
    await secondary.stop();
  });

  it('DR dedup - a message the source refused (its disk full) after its enqueue went out leaves no key at the secondary: resent after activation, it is kept', async (ctx) => {
    const fs = mountTmpfs('tandem-drfull-', '6m');
    if ('refused' in fs) {
      console.warn(`DR dedup disk full - SKIPPED: ${fs.refused}`);
      return ctx.skip();
    }
    const { dir } = fs;
    try {
      const secondary = await refusedAtFullSource(dir, ['--dedup-window', '1000'], []);
      await publishKeyed(secondary.port, ['kept', 'refused']);
      expect(await receive(secondary.port, 'orders', 2)).toEqual(['kept', 'refused']);
      expect(await depth(secondary.port)).toBe(0);
    } finally {
      await killAllBrokers();
      fs.unmount();
    }
  });

  it("DR dedup - a message the source refused (its disk full) on a queue without a window leaves no key at the secondary, whose window read one from it: resent after activation, it is kept", async (ctx) => {
    const fs = mountTmpfs('tandem-drfull-nowin-', '6m');
    if ('refused' in fs) {
      console.warn(`DR dedup disk full - SKIPPED: ${fs.refused}`);
      return ctx.skip();
    }
    const { dir } = fs;
    try {
      // The copy takes the secondary's default window: the source's queue has none.
      const secondary = await refusedAtFullSource(dir, [], ['--dedup-window', '1000']);
      await publishKeyed(secondary.port, ['kept', 'refused']);
      // 'kept' is a duplicate of the copy it holds; 'refused' was never kept, so it is new.
      expect(await depth(secondary.port)).toBe(2);
      expect((await show(secondary.port))['dedup-duplicates']).toBe(1);
      expect(await receive(secondary.port, 'orders', 2)).toEqual(['kept', 'refused']);
      expect(await depth(secondary.port)).toBe(0);
    } finally {
      await killAllBrokers();
      fs.unmount();
    }
  });

  it('DR dedup - messages a commit the source could not journal (its disk full) had accepted are given back on the secondary too: after activation each is there once, in order', async (ctx) => {
    const fs = mountTmpfs('tandem-drtx-', '6m');
    if ('refused' in fs) {
      console.warn(`DR dedup disk full - SKIPPED: ${fs.refused}`);
      return ctx.skip();
    }
    const { dir } = fs;
    try {
      const source = await TestBroker.start({ dataDir: join(dir, 'data'), args: ['--checkpoint-bytes', '0'] });
      const secondary = await TestBroker.start();
      // The copy takes the source queue's window, which holds each message's key from its first copy.
      expect((await tandem(['queue', 'add', 'orders', '--durable', '--dedup-window', '1000', '-b', source.url])).code).toBe(0);
      await mgmt(secondary.port, 'DR-ADD', { queue: 'orders', source: source.url, mode: 'enqueue-and-dequeue' });
      const sent = ids(0, 3);
      await publishKeyed(source.port, sent);
      await drFlush(source.port, secondary.port);
      fillFilesystem(join(dir, 'ballast'));
      // The commit's record holds a 256 KiB send beside the acceptances: it cannot reach the disk.
      const tx = await runPython<{ got: string[]; commit_failed?: boolean }>('tx_receive.py', [`amqp://${source.url}`, 'orders', '3', `commit+send=${256 * 1024}`]);
      expect(tx).toEqual({ got: sent, commit_failed: true });
      expect(await depth(source.port)).toBe(3);
      await drFlush(source.port, secondary.port);
      expect(await contents(secondary.port, 'orders')).toEqual(sent);
      await source.kill();
      const r = await tandem(['dr', 'activate', 'orders', '-b', secondary.url]);
      expect(r.code, r.stderr).toBe(0);
      // The publisher's resend of each finds its key: held once, not twice.
      await publishKeyed(secondary.port, sent);
      expect(await depth(secondary.port)).toBe(3);
      expect(await receive(secondary.port, 'orders', 3)).toEqual(sent);
      expect(await depth(secondary.port)).toBe(0);
    } finally {
      await killAllBrokers();
      fs.unmount();
    }
  });
});

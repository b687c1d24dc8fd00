// DR of the queue kinds with an order or contents of their own: a priority queue, a ring
// (max-count with policy ring: the source's evictions are its dequeues), a queue with
// message groups, and one with a duplicate-detection window whose publisher sends every
// id twice. The DR link is cut at random points while they are published and consumed;
// the copy then holds what the source holds, and once activated (a drill: the source
// goes on serving) a consumer at each site is handed the same messages in the same order,
// and a resend of every id is refused as a duplicate at both.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, depthOf, drFlush, drRowOf, publishKeyed, range, receive } from './helpers.js';
import { relay } from './relay.js';

const N = 3000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const kinds: Record<string, { args: string[]; message: (i: number) => Record<string, unknown> }> = {
  prio: { args: ['--priorities', '10'], message: (i) => ({ body: `p${i}`, priority: (i * 7) % 10 }) },
  ring: { args: ['--max-count', '500', '--policy', 'ring'], message: (i) => ({ body: `r${i}` }) },
  groups: { args: ['--message-groups'], message: (i) => ({ body: `g${i}`, group_id: `grp${i % 7}` }) },
  // Each id twice: the second copy is a duplicate at the source and never reaches the copy.
  dedup: { args: ['--dedup-window', '100000'], message: (i) => ({ body: `d${i % (N / 2)}`, message_id: `d${i % (N / 2)}` }) },
};

async function publish(port: number, queue: string, from: number, to: number): Promise<void> {
  const c = await TestClient.connect({ port });
  try {
    const list = Array.from({ length: to - from }, (_, k) => ({ durable: true, ...kinds[queue]!.message(from + k) }));
    expect((await c.send(queue, list, { timeoutMs: 60_000 })).every((o) => o.state === 'accepted')).toBe(true);
  } finally {
    await c.close();
  }
}

/** Take everything a queue holds with one consumer: the bodies in the order it was handed them. */
async function drain(port: number, queue: string): Promise<unknown[]> {
  return receive(port, queue, await depthOf(port, queue));
}

describe('DR - queue kinds', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR queue kinds - priority, ring, message-groups and dedup-window queues copied across link cuts equal the source, and after activation hand out the same order', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const link = await relay(a.port);
    for (const [q, k] of Object.entries(kinds)) {
      const r = await tandem(['queue', 'add', q, '--durable', ...k.args, '-b', a.url]);
      expect(r.code, r.stderr).toBe(0);
      const add = await tandem(['dr', 'add', q, '--source', link.url, '-b', b.url]);
      expect(add.code, add.stderr).toBe(0);
    }
    // Published in two halves with consumers between, the link cut at random points throughout.
    let cutting = true;
    const cuts = (async () => {
      while (cutting) {
        await sleep(100 + Math.floor(Math.random() * 400));
        link.cut();
      }
    })();
    try {
      await Promise.all(Object.keys(kinds).map((q) => publish(a.port, q, 0, N / 2)));
      expect(await receive(a.port, 'prio', 200)).toHaveLength(200);
      expect(await receive(a.port, 'ring', 100)).toEqual(Array.from({ length: 100 }, (_, i) => `r${N / 2 - 500 + i}`));
      expect(await receive(a.port, 'groups', 300)).toEqual(Array.from({ length: 300 }, (_, i) => `g${i}`));
      expect(await receive(a.port, 'dedup', 100)).toEqual(Array.from({ length: 100 }, (_, i) => `d${i}`));
      await Promise.all(Object.keys(kinds).map((q) => publish(a.port, q, N / 2, N)));
    } finally {
      cutting = false;
      await cuts;
    }
    await drFlush(a.port, b.port, 60_000);
    const expectedDepth = { prio: N - 200, ring: 500, groups: N - 300, dedup: N / 2 - 100 };
    for (const q of Object.keys(kinds)) {
      expect(await depthOf(a.port, q), q).toBe(expectedDepth[q as keyof typeof expectedDepth]);
      expect(await depthOf(b.port, q), q).toBe(expectedDepth[q as keyof typeof expectedDepth]);
      expect(await contents(b.port, q), q).toEqual(await contents(a.port, q));
    }
    // A drill: B serves too, A goes on serving; every id sent again is a duplicate at both.
    const act = await tandem(['dr', 'activate', '--all', '--keep-source-serving', '-b', b.url]);
    expect(act.code, act.stderr).toBe(0);
    for (const port of [a.port, b.port]) {
      await publish(port, 'dedup', 0, N / 2);
      expect(await depthOf(port, 'dedup')).toBe(N / 2 - 100);
    }
    for (const q of Object.keys(kinds)) {
      const fromA = await drain(a.port, q);
      expect(await drain(b.port, q), q).toEqual(fromA);
      if (q === 'prio') {
        // Highest priority first, oldest first within one.
        const prio = (body: unknown) => (Number(String(body).slice(1)) * 7) % 10;
        for (let i = 1; i < fromA.length; i++) expect(prio(fromA[i - 1]) >= prio(fromA[i]), `${fromA[i - 1]} before ${fromA[i]}`).toBe(true);
      }
    }
    expect(b.errorLogLines).toEqual([]);
    link.close();
  });

  // A copy of the contents carries the source's window (dedup-keys rows, docs/dr.md): the
  // keys of messages the source took and consumed while the copy was away reach the copy,
  // in its journal (a kill -9 of the secondary keeps them). Before, a resend after
  // activation had all 300 delivered again.
  it('DR queue kinds - a copy that got a snapshot keeps the keys of what the source consumed meanwhile, across a kill -9 of the secondary: resent after activation, refused', async () => {
    const a = await TestBroker.start({ args: ['--dr-retain-changes', '100'] });
    let b = await TestBroker.start({ args: ['--checkpoint-bytes', '0'] });
    const link = await relay(a.port);
    expect((await tandem(['queue', 'add', 'orders', '--durable', '--dedup-window', '100000', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'orders', '--source', link.url, '-b', b.url])).code).toBe(0);
    await publishKeyed(a.port, range('m', 0, 10));
    await drFlush(a.port, b.port);
    // The link may come up after those 10 were published, and then they came by a first copy.
    const copiedBefore = (await drRowOf(b.port, 'orders'))['received-copies'];
    link.refuseNew();
    link.cut();
    // Past the source's window of 100 changes: the copy comes back to a snapshot.
    await publishKeyed(a.port, range('m', 10, 510));
    expect(await receive(a.port, 'orders', 310)).toEqual(range('m', 0, 310));
    link.admitNew();
    await drFlush(a.port, b.port);
    // The 200 left came by a copy of the contents, not by the log.
    expect((await drRowOf(b.port, 'orders'))['received-copies']).toBe(copiedBefore + 200);
    await a.kill();
    // The keys are in the secondary's journal (no checkpoint: its records replayed).
    await b.kill();
    b = await TestBroker.start({ port: b.port, dataDir: b.dataDir, args: ['--checkpoint-bytes', '0'] });
    expect((await tandem(['dr', 'activate', 'orders', '-b', b.url])).code).toBe(0);
    await publishKeyed(b.port, range('m', 0, 510));
    expect(await depthOf(b.port, 'orders')).toBe(200);
    expect(await contents(b.port, 'orders')).toEqual(range('m', 310, 510));
    link.close();
  });
});

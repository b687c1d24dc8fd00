// DR of large messages: 1 to 8 MiB each (many frames of the DR link's transfers; 60 MiB
// in all), the link cut every 150-400 ms while they cross, the first ones by a copy of
// the queue's contents (sent before the copy was added) and the rest by the log, some
// consumed at the source meanwhile. The copy ends with the source's messages, byte for
// byte, in order, each once.
import { createHash } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { depthOf, drFlush, receive } from './helpers.js';
import { relay } from './relay.js';

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Message i: a body of 1 to 8 MiB that says which it is all through. */
const body = (i: number): string => `L${i}:`.padEnd((1 + (i * 5) % 8) * MiB - 17, String.fromCharCode(97 + (i % 26)));
const digest = (b: unknown): string => `${String(b).slice(0, String(b).indexOf(':'))}/${String(b).length}/${createHash('sha256').update(String(b)).digest('hex').slice(0, 16)}`;

async function publish(port: number, from: number, to: number): Promise<void> {
  const c = await TestClient.connect({ port });
  try {
    for (let i = from; i < to; i++) expect((await c.send('big', [{ body: body(i), durable: true }], { timeoutMs: 60_000 }))[0]!.state).toBe('accepted');
  } finally {
    await c.close();
  }
}

/** Every message of `big`, browsed one at a time (as an admin: the passive copy too), as digests. */
async function digests(port: number): Promise<string[]> {
  const n = await depthOf(port, 'big');
  const c = await TestClient.connect({ port, properties: { 'qpid.ha-admin': true } });
  try {
    const r = await c.openReceiver({ address: 'big', distribution_mode: 'copy' });
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      r.receiver.add_credit(1);
      const [got] = await r.next(1, 30_000);
      got!.delivery.accept();
      out.push(digest(bodyOf(got!.message)));
    }
    return out;
  } finally {
    await c.close();
  }
}

describe('DR - large messages', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR large messages - 1 to 8 MiB messages cross a link cut again and again: the copy equals the source byte for byte', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start();
    const link = await relay(a.port);
    expect((await tandem(['queue', 'add', 'big', '--durable', '-b', a.url])).code).toBe(0);
    await publish(a.port, 0, 6);
    const add = await tandem(['dr', 'add', 'big', '--source', link.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    let cutting = true;
    let cuts = 0;
    const cutter = (async () => {
      while (cutting) {
        await sleep(150 + Math.floor(Math.random() * 250));
        link.cut();
        cuts++;
      }
    })();
    try {
      await publish(a.port, 6, 12);
      expect((await receive(a.port, 'big', 3)).map(digest)).toEqual([0, 1, 2].map((i) => digest(body(i))));
      await publish(a.port, 12, 16);
      await sleep(2000);
    } finally {
      cutting = false;
      await cutter;
    }
    console.log(`DR large messages: the link was cut ${cuts} times`);
    await drFlush(a.port, b.port, 90_000);
    const want = Array.from({ length: 13 }, (_, k) => digest(body(k + 3)));
    expect(await digests(a.port)).toEqual(want);
    expect(await digests(b.port)).toEqual(want);
    expect(b.errorLogLines).toEqual([]);
    link.close();
  });
});

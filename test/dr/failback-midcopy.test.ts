// a copy activated in the middle of a copy of the source's contents (the link lost
// while the source re-sent its queue: the copy had fallen behind the source's retained
// log). The activated site serves part of that copy: messages the old site took after the
// divergence point, which did cross. At reattach the old site must keep those as its copy
// of the activated site and quarantine only what never crossed (docs/dr.md: the quarantine
// holds what never crossed, for the operator to replay): quarantined as well, a replay
// would deliver them twice.
import { createServer, Socket } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, range, send } from './helpers.js';

/** A relay to 127.0.0.1:`port`; connections opened after limitNew(n) pass at most n bytes towards the caller, then nothing. */
async function relay(port: number): Promise<{ url: string; limitNew(bytes: number): void; close(): void }> {
  const socks: Socket[] = [];
  let limit = Infinity;
  const server = createServer((inbound) => {
    const cap = limit;
    let passed = 0;
    const upstream = new Socket();
    upstream.connect(port, '127.0.0.1');
    inbound.on('data', (d) => upstream.write(d));
    upstream.on('data', (d) => {
      if (passed >= cap) return;
      passed += d.length;
      inbound.write(d);
    });
    const end = () => {
      inbound.destroy();
      upstream.destroy();
    };
    inbound.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    socks.push(inbound, upstream);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `127.0.0.1:${(server.address() as { port: number }).port}`,
    limitNew(bytes: number) {
      limit = bytes;
    },
    close() {
      for (const s of socks) s.destroy();
      server.close();
    },
  };
}

describe('DR round trip - activation in the middle of a copy', () => {
  afterAll(async () => {
    await killAllBrokers();
  });
  it('DR round trip - activated half way through a copy of the contents: reattach quarantines only what never crossed', async () => {
    let a = await TestBroker.start({ args: ['--dr-retain-changes', '10'] });
    let b = await TestBroker.start();
    const toA = await relay(a.port);
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'orders', '--source', toA.url, '-b', b.url])).code).toBe(0);
    await send(a.port, 'orders', range('m', 0, 100));
    await drFlush(a.port, b.port);
    await b.kill();
    const body = 'x'.repeat(1000);
    await send(a.port, 'orders', range('n', 0, 3000).map((n) => `${n}:${body}`));
    toA.limitNew(600_000);
    b = await TestBroker.start({ port: b.port, dataDir: b.dataDir });
    await waitFor(async () => (await drRowOf(b.port, 'orders'))['received-copies'] > 0, { timeout: 30_000, name: 'part of a copy' });
    await a.kill();
    toA.close();
    await waitFor(async () => (await drRowOf(b.port, 'orders')).link !== 'connected' && (await drRowOf(b.port, 'orders')).link !== 'copying', { timeout: 30_000, name: 'lost' });
    expect((await tandem(['dr', 'activate', 'orders', '-b', b.url])).code).toBe(0);
    const atB = (await contents(b.port, 'orders')) as string[];
    a = await TestBroker.start({ port: a.port, dataDir: a.dataDir, args: ['--dr-retain-changes', '10'] });
    // The activated site names the old one by the relay, gone: demoted by hand.
    expect((await tandem(['dr', 'demote', 'orders', '--source', b.url, '-b', a.url])).code).toBe(0);
    const r = await tandem(['dr', 'reattach', 'orders', '--source', b.url, '-b', a.url, '--json']);
    expect(r.code, r.stderr).toBe(0);
    await drFlush(b.port, a.port, 30_000, ['orders']);
    // Part of the copy had crossed: the activated site serves it.
    const crossed = atB.filter((m) => m.startsWith('n'));
    expect(crossed.length).toBeGreaterThan(0);
    expect(crossed.length).toBeLessThan(3000);
    const quarantined = (await contents(a.port, 'orders.dr-diverged')) as string[];
    expect(quarantined.filter((m) => atB.includes(m))).toEqual([]);
    expect(quarantined.length).toBe(3000 - crossed.length);
    expect(await contents(a.port, 'orders')).toEqual(atB);
  }, 120_000);
});

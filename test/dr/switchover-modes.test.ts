// a planned switchover of an enqueue-only DR queue. The copy keeps every message
// ever sent, consumed at the source or not; a switchover that activated it would serve
// the consumed ones again (the switchover "loses and duplicates nothing"). And a copy's
// exchange filter (--exchanges) stays the pair's across switchovers.
import { describe, expect, it } from 'vitest';
import { TestBroker } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { waitFor } from '../helpers/broker.js';
import { contents, drFlush, drRowOf, mgmt, range, receive, send, twoSites } from './helpers.js';

describe('DR round trip - switchover modes', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites((x, y) => {
    [a, b] = [x, y];
  });

  it('DR round trip - an enqueue-only copy is not switched over (it would serve again what the source consumed); nothing changes', async () => {
    expect((await tandem(['queue', 'add', 'audit', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'audit', '--source', a.url, '--mode', 'enqueue-only', '-b', b.url])).code).toBe(0);
    await send(a.port, 'audit', range('m', 0, 20));
    expect(await receive(a.port, 'audit', 5)).toEqual(range('m', 0, 5));
    await drFlush(a.port, b.port);
    const r = await tandem(['dr', 'switchover', 'audit', '-b', b.url, '--timeout', '10']);
    // Switched, the site that serves now would have to serve what the old one held, once.
    if (r.code === 0) expect(await contents(b.port, 'audit'), 'served after the switchover').toEqual(range('m', 5, 20));
    expect(r.code, r.stdout).toBe(8);
    expect(r.stderr).toMatch(/enqueue-only/);
    expect((await drRowOf(a.port, 'audit')).role).toBe('source');
    expect((await drRowOf(b.port, 'audit')).role).toBe('passive copy');
    await send(a.port, 'audit', ['after']);
    expect(await receive(a.port, 'audit', 16)).toEqual([...range('m', 5, 20), 'after']);
  }, 120_000);

  it("DR round trip - a copy's exchange filter goes with the pair through a switchover and back", async () => {
    expect((await tandem(['queue', 'add', 'routed', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'routed', '--source', a.url, '--exchanges', 'routed.*', '-b', b.url])).code).toBe(0);
    await drFlush(a.port, b.port, 30_000, ['routed']);
    const filterOf = async (port: number) => ((await mgmt(port, 'DR-LIST')).queues as Array<{ queue: string; exchanges: string }>).find((q) => q.queue === 'routed')?.exchanges;
    expect((await tandem(['dr', 'switchover', 'routed', '-b', b.url])).code).toBe(0);
    await waitFor(async () => (await drRowOf(a.port, 'routed')).role === 'passive copy', { timeout: 30_000, name: 'the old source follows' });
    expect(await filterOf(a.port)).toBe('routed.*');
    expect((await tandem(['dr', 'switchover', 'routed', '-b', a.url])).code).toBe(0);
    await waitFor(async () => (await drRowOf(b.port, 'routed')).role === 'passive copy', { timeout: 30_000, name: 'switched back' });
    expect(await filterOf(b.port)).toBe('routed.*');
  }, 120_000);
});

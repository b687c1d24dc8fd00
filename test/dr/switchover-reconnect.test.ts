// A switchover whose drain is interrupted: the source is fenced (moving to the next
// DR epoch) and its DR link to the secondary, stalled, is lost because the source
// is killed -9 and restarted. The secondary's bridge comes back at the pair's epoch
// to drain the fenced queue; it is the same pair, so the source must serve it, and
// the switchover completes within its timeout instead of being abandoned. Every
// message once, in order, on both sites.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, range, send } from './helpers.js';
import { relay, type Relay } from './relay.js';

let toA: Relay | undefined;

afterAll(async () => {
  toA?.close();
  await killAllBrokers();
});

describe('DR switchover - the drain resumes after the DR link is lost', () => {
  it('DR switchover reconnect - the fenced source restarted during the drain: the bridge is served at the pair epoch and the switchover completes', async () => {
    let a = await TestBroker.start();
    const b = await TestBroker.start();
    toA = await relay(a.port);
    expect((await tandem(['queue', 'add', 'rc', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'rc', '--source', toA.url, '-b', b.url])).code).toBe(0);
    await send(a.port, 'rc', range('r', 0, 200));
    await drFlush(a.port, b.port);
    // The DR link stalls with the last messages on their way: the drain cannot finish on it.
    toA.hold();
    await send(a.port, 'rc', range('r', 200, 300));
    const switchover = tandem(['dr', 'switchover', 'rc', '-b', b.url, '--timeout', '40', '--json'], { timeoutMs: 90_000 });
    // Fenced, and its answer (sent as it logs this) on its way: the secondary drains now.
    await waitFor(() => a.stderr.includes('DR: switchover: queues fenced'), { timeout: 30_000, name: 'the source fenced' });
    await new Promise((r) => setTimeout(r, 500)); // the answer crossing loopback, not a condition to wait for
    expect((await drRowOf(a.port, 'rc')).role).toBe('fenced');
    // The source goes and comes back on its port: the stalled link is gone, the bridge dials again.
    await a.kill();
    a = await TestBroker.start({ port: a.port, dataDir: a.dataDir });
    const moved = await switchover;
    expect(moved.code, `${moved.stderr}\nB: ${JSON.stringify(await drRowOf(b.port, 'rc'))}`).toBe(0);
    expect((JSON.parse(moved.stdout) as { switched: string[] }).switched).toEqual(['rc']);
    await waitFor(async () => (await drRowOf(a.port, 'rc')).role === 'passive copy' && (await drRowOf(a.port, 'rc')).link === 'connected', { timeout: 30_000, name: 'A follows B' });
    await drFlush(b.port, a.port);
    expect(await contents(b.port, 'rc')).toEqual(range('r', 0, 300));
    expect(await contents(a.port, 'rc', 300)).toEqual(range('r', 0, 300));
  }, 180_000);
});

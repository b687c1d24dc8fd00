// a planned switchover where only the secondary keeps a duplicate-detection window
// (tandemd.conf dedup-window; the source queue has none). The source took a message twice,
// the copy applied it once (README: "a source that published a message twice is applied
// once"). After the switchover the old source is the passive copy of the site that serves
// now: it must hold what that site holds, or the switch back serves a message again.
import { describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, depthOf, drFlush, drRowOf, publishKeyed, receive, twoSites } from './helpers.js';
import { relay } from './relay.js';



describe('DR round trip - switchover with a window on the secondary only', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites(
    (x, y) => {
      [a, b] = [x, y];
    },
    { b: { args: ['--dedup-window', '1000'] } },
  );

  it('DR round trip - after the switchover the old source holds what the new one serves; the switch back serves nothing twice', async () => {
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url])).code).toBe(0);
    await publishKeyed(a.port, ['m-0', 'm-1', 'm-2', 'm-0']);
    await drFlush(a.port, b.port);
    expect(await depthOf(b.port, 'orders')).toBe(3);
    const r = await tandem(['dr', 'switchover', 'orders', '-b', b.url, '--json']);
    expect(r.code, r.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'passive copy' && (await drRowOf(a.port, 'orders')).link === 'connected', { timeout: 30_000, name: 'old source follows' });
    expect(await receive(b.port, 'orders', 3)).toEqual(['m-0', 'm-1', 'm-2']);
    await drFlush(b.port, a.port);
    expect(await contents(a.port, 'orders')).toEqual(await contents(b.port, 'orders'));
  }, 120_000);

  it('DR round trip - the same when the old source learns how the switchover ended by asking (its DR-FOLLOW lost)', async () => {
    const toA = await relay(a.port);
    try {
      expect((await tandem(['queue', 'add', 'asked', '--durable', '-b', a.url])).code).toBe(0);
      expect((await tandem(['dr', 'add', 'asked', '--source', toA.url, '-b', b.url])).code).toBe(0);
      await publishKeyed(a.port, ['m-0', 'm-1', 'm-2', 'm-0'], 'asked');
      await drFlush(a.port, b.port, 30_000, ['asked']);
      expect(await depthOf(b.port, 'asked')).toBe(3);
      // The DR link stalls until the source is fenced; from then on nothing new reaches it from this site.
      toA.hold();
      const moving = tandem(['dr', 'switchover', 'asked', '-b', b.url, '--reverse-source', b.url, '--timeout', '10', '--json'], { timeoutMs: 60_000 });
      await waitFor(async () => (await drRowOf(a.port, 'asked')).role === 'fenced', { timeout: 30_000, name: 'the source fenced' });
      toA.refuseNew();
      toA.release();
      const r = await moving;
      expect(r.code, r.stderr).toBe(0);
      expect((JSON.parse(r.stdout) as Record<string, unknown>)['old-source-following']).toBe(false);
      await waitFor(async () => (await drRowOf(a.port, 'asked')).role === 'passive copy', { timeout: 30_000, name: 'old source follows after asking' });
      expect(await receive(b.port, 'asked', 3)).toEqual(['m-0', 'm-1', 'm-2']);
      // The old source follows the new one directly (the reverse source), not through the relay.
      await drFlush(b.port, a.port, 30_000, ['asked']);
      expect(await contents(a.port, 'asked')).toEqual(await contents(b.port, 'asked'));
    } finally {
      toA.close();
    }
  }, 120_000);
});

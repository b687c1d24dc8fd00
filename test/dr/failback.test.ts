// DR failback after a disaster (docs/dr.md, "The round trip"): the source site
// is killed -9 while its DR link lags (the secondary SIGSTOPped), the copy is
// activated and used, the old site comes back and refuses clients on the queue
// (the activated site tells it so), `tandem dr reattach` quarantines exactly what
// never crossed and catches up from the divergence point only (the changes the
// new site made since activation, counted, plus the messages the old site had
// consumed that the new one still holds), and a switchover moves the queue back:
// both sites hold the same messages, one by one.
import { describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, range, receive, send, twoSites } from './helpers.js';


describe('DR failback', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites((x, y) => {
    [a, b] = [x, y];
  });

  it('DR failback - kill the lagging source, activate, use, restart it (refused), reattach from the divergence point, switch back: equal message by message', async () => {
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url])).code).toBe(0);
    await send(a.port, 'orders', range('m', 0, 1000));
    await drFlush(a.port, b.port);
    // The link lags: the secondary (and its bridge) stopped while the source goes on.
    b.signal('SIGSTOP');
    // More than the bridge's credit (32 batches of at most 256 changes) lets across: some never cross.
    await send(a.port, 'orders', range('n', 0, 10_000));
    // Consumed after those: these dequeues never cross either (the new site will still hold them).
    expect(await receive(a.port, 'orders', 50)).toEqual(range('m', 0, 50));
    // Accepted after the dequeues, so those are on disk too when the site dies.
    await send(a.port, 'orders', ['n-last']);
    const heldByOldSite = [...range('m', 50, 1000), ...range('n', 0, 10_000), 'n-last'];
    await a.kill();
    b.signal('SIGCONT');
    await waitFor(async () => (await drRowOf(b.port, 'orders')).link !== 'connected', { timeout: 30_000, name: 'the secondary sees the source gone' });

    expect((await tandem(['dr', 'activate', 'orders', '-b', b.url])).code).toBe(0);
    const activated = await drRowOf(b.port, 'orders');
    expect(activated).toMatchObject({ role: 'activated', epoch: 2 });
    expect(activated['divergence-point']).toBeGreaterThan(0);
    const atActivation = (await contents(b.port, 'orders')) as string[];
    // What crossed is a prefix of the old site's history: the rest never did.
    const crossed = new Set(atActivation);
    const notCrossed = [...range('n', 0, 10_000), 'n-last'].filter((m) => !crossed.has(m));
    expect(notCrossed.length).toBeGreaterThan(0);
    // The new site is used: 100 publishes and 30 consumptions since activation.
    await send(b.port, 'orders', range('b', 0, 100));
    expect(await receive(b.port, 'orders', 30)).toEqual(atActivation.slice(0, 30));

    // The old site comes back: it is told the queue was activated elsewhere and refuses clients.
    a = await TestBroker.start({ port: a.port, dataDir: a.dataDir });
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'diverged', { timeout: 30_000, name: 'old site demoted by the activated one' });
    await expect(send(a.port, 'orders', ['late'])).rejects.toThrow(/was activated at the DR site .*tandem dr reattach orders/);
    await expect(receive(a.port, 'orders', 1)).rejects.toThrow(/was activated at the DR site/);
    expect(await contents(a.port, 'orders')).toEqual(heldByOldSite);

    // Bad input changes nothing: the wrong broker (the activated site), an unknown queue, an unreachable source.
    const wrong = await tandem(['dr', 'reattach', 'orders', '--source', a.url, '-b', b.url]);
    expect(wrong.code).toBe(8);
    expect(wrong.stderr).toMatch(/queue 'orders' is diverged there, not activated.*nothing to reattach to; nothing was changed/);
    const unknown = await tandem(['dr', 'reattach', 'nosuch', '--source', b.url, '-b', a.url]);
    expect(unknown.code).toBe(4);
    const unreachable = await tandem(['dr', 'reattach', 'orders', '--source', '127.0.0.1:1', '-b', a.url]);
    expect(unreachable.code).toBe(8);
    expect(unreachable.stderr).toMatch(/cannot be reached/);
    expect(await drRowOf(a.port, 'orders')).toMatchObject({ role: 'diverged', quarantined: 0 });
    expect((await drRowOf(b.port, 'orders')).role).toBe('activated');

    const r = await tandem(['dr', 'reattach', 'orders', '--source', b.url, '-b', a.url, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { reattached: string[]; quarantined: Record<string, number>; 'divergence-point': Record<string, number> };
    expect(out.reattached).toEqual(['orders']);
    expect(out['divergence-point'].orders).toBe(activated['divergence-point']);
    expect(out.quarantined.orders).toBe(notCrossed.length);
    await drFlush(b.port, a.port, 30_000, ['orders']);
    const reattached = await drRowOf(a.port, 'orders');
    expect(reattached).toMatchObject({ role: 'passive copy', epoch: 2, quarantined: notCrossed.length, 'divergence-point': activated['divergence-point'] });
    // The quarantine holds exactly the changes that never crossed, in order.
    expect(await contents(a.port, 'orders.dr-diverged')).toEqual(notCrossed);
    // Caught up from the divergence point only: the new site's 130 changes, and the messages the
    // old site had consumed after the divergence point that the new site still holds.
    expect(reattached['received-changes']).toBe(130);
    const consumedOnlyThere = atActivation.slice(30).filter((m) => range('m', 0, 50).includes(m));
    expect(consumedOnlyThere).toEqual(range('m', 30, 50));
    expect(reattached['received-copies']).toBe(consumedOnlyThere.length);
    const expected = [...atActivation.slice(30), ...range('b', 0, 100)];
    expect(await contents(b.port, 'orders')).toEqual(expected);
    expect(await contents(a.port, 'orders')).toEqual(expected);

    // And back: the old site serves again, the new one is its passive copy.
    const back = await tandem(['dr', 'switchover', 'orders', '-b', a.url, '--json']);
    expect(back.code, back.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(b.port, 'orders')).role === 'passive copy' && (await drRowOf(a.port, 'orders')).role === 'source', { timeout: 30_000, name: 'switched back' });
    expect((await drRowOf(a.port, 'orders')).epoch).toBe(3);
    await send(a.port, 'orders', ['after-failback']);
    await drFlush(a.port, b.port, 30_000, ['orders']);
    const final = await contents(a.port, 'orders');
    expect(final).toEqual([...expected, 'after-failback']);
    expect(await contents(b.port, 'orders')).toEqual(final);
    expect(await receive(a.port, 'orders', final.length)).toEqual(final);
  }, 180_000);

  it('DR failback - the old site killed -9 during reattach: reattach run again completes it; nothing lost, nothing twice', async () => {
    const outcomes: string[] = [];
    for (let round = 0; round < 3; round++) {
      const q = `kills${round}`;
      const x = await TestBroker.start();
      const y = await TestBroker.start();
      expect((await tandem(['queue', 'add', q, '--durable', '-b', x.url])).code).toBe(0);
      expect((await tandem(['dr', 'add', q, '--source', x.url, '-b', y.url])).code).toBe(0);
      await send(x.port, q, range('m', 0, 500));
      await drFlush(x.port, y.port, 30_000, [q]);
      y.signal('SIGSTOP');
      await send(x.port, q, range('n', 0, 10_000));
      expect(await receive(x.port, q, 50)).toEqual(range('m', 0, 50));
      await send(x.port, q, ['n-last']);
      await x.kill();
      y.signal('SIGCONT');
      await waitFor(async () => (await drRowOf(y.port, q)).link !== 'connected', { timeout: 30_000, name: 'the secondary sees the source gone' });
      expect((await tandem(['dr', 'activate', q, '-b', y.url])).code).toBe(0);
      const crossed = new Set((await contents(y.port, q)) as string[]);
      const notCrossed = [...range('n', 0, 10_000), 'n-last'].filter((m) => !crossed.has(m));
      await send(y.port, q, range('b', 0, 100));
      await receive(y.port, q, 30);
      let old = await TestBroker.start({ port: x.port, dataDir: x.dataDir });
      await waitFor(async () => (await drRowOf(old.port, q)).role === 'diverged', { timeout: 30_000, name: 'old site demoted' });
      const killAfterMs = Math.floor(Math.random() * 1200);
      const cli = tandem(['dr', 'reattach', q, '--source', y.url, '-b', old.url], { timeoutMs: 60_000 });
      await new Promise((r) => setTimeout(r, killAfterMs)); // a random kill point, not a wait for a condition
      await old.kill();
      const first = await cli;
      old = await TestBroker.start({ port: old.port, dataDir: old.dataDir });
      const again = await tandem(['dr', 'reattach', q, '--source', y.url, '-b', old.url, '--json']);
      expect(again.code, again.stderr).toBe(0);
      outcomes.push(`killed at ${killAfterMs} ms: first run ${first.code === 0 ? 'answered' : 'cut'}, then ${(JSON.parse(again.stdout) as { already: string[] }).already.length ? 'already reattached' : 'reattached'}`);
      await drFlush(y.port, old.port, 30_000, [q]);
      expect(await drRowOf(old.port, q)).toMatchObject({ role: 'passive copy', quarantined: notCrossed.length });
      expect(await contents(old.port, `${q}.dr-diverged`)).toEqual(notCrossed);
      const expected = await contents(y.port, q);
      expect(await contents(old.port, q)).toEqual(expected);
      await old.kill();
      await y.kill();
    }
    console.log(`DR reattach kills: ${outcomes.join('; ')}`);
  }, 300_000);
});

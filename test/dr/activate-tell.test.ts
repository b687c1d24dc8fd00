// `tandem dr activate` while the secondary's link to the source still shows
// `connected` (docs/dr.md, "Failback after a disaster"): a source that has just
// hung (SIGSTOP here; a crash or a cut link look the same) shows it until the
// bridge's heartbeats notice, and the operator cannot tell it from a live one. So
// activation tells the old source by default: when it comes back it turns
// `diverged` and refuses clients, instead of serving the queue beside the activated
// site. Only `--keep-source-serving` (a drill, or a split chosen) leaves it serving.
import { describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, mgmt, range, receive, send, twoSites } from './helpers.js';

describe('DR activation tells the old source', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites((x, y) => {
    [a, b] = [x, y];
  });

  /** Queues on A copied to B, caught up. */
  async function paired(queues: string[]): Promise<void> {
    for (const q of queues) {
      expect((await tandem(['queue', 'add', q, '--durable', '-b', a.url])).code).toBe(0);
      expect((await tandem(['dr', 'add', q, '--source', a.url, '-b', b.url])).code).toBe(0);
      await send(a.port, q, range(`${q}-`, 0, 20));
    }
    await drFlush(a.port, b.port, 30_000, queues);
  }

  /** B's link to A for `queue`, as the operator would see it right before activating (not asserted: it is a race with the heartbeats). */
  async function linkSeen(queue: string): Promise<string> {
    const link = (await drRowOf(b.port, queue)).link;
    console.log(`activate-tell: B's link for ${queue} with A SIGSTOPped, right before activation: ${link}`);
    return link;
  }

  it('DR activate - a hung source (link still connected) is told by default: back, it is diverged and refuses clients', async () => {
    await paired(['orders']);
    a.signal('SIGSTOP');
    let act;
    try {
      await linkSeen('orders');
      act = await tandem(['dr', 'activate', 'orders', '-b', b.url]);
      expect(act.code, act.stderr).toBe(0);
      // The activated site serves at once, the old one still hung; its status says A has not answered.
      await send(b.port, 'orders', ['at-b']);
      expect((await drRowOf(b.port, 'orders'))['last-error']).toMatch(/old source .* has not yet answered that it stops serving this queue/);
    } finally {
      a.signal('SIGCONT');
    }
    // Back, A learns it was replaced (bounded wait, polled): no second site serving the queue.
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'diverged', { timeout: 60_000, name: 'old source demoted after SIGCONT' });
    await expect(send(a.port, 'orders', ['late-at-a'])).rejects.toThrow(/was activated at the DR site .*tandem dr reattach orders/);
    await expect(receive(a.port, 'orders', 1)).rejects.toThrow(/was activated at the DR site/);
    expect((await drRowOf(b.port, 'orders')).role).toBe('activated');
    await waitFor(async () => (await drRowOf(b.port, 'orders'))['last-error'] === null, { timeout: 30_000, name: 'B recorded that A answered' });
    expect(await contents(b.port, 'orders')).toEqual([...range('orders-', 0, 20), 'at-b']);
    // The command said which it did.
    console.log(`activate-tell: tandem dr activate said:\n${act.stdout}`);
    expect(act.stdout).toContain('activated: orders');
    expect(act.stdout).toMatch(new RegExp(`old source ${a.url.replace(/\./g, '\\.')} is told to stop serving orders`));
    expect(act.stdout).not.toMatch(/NOT told/);
  }, 120_000);

  it('DR activate --keep-source-serving - the drill: the hung source, back, still serves (the queue activated without it beside is told)', async () => {
    await paired(['drill', 'control']);
    a.signal('SIGSTOP');
    let drill;
    try {
      await linkSeen('drill');
      drill = await tandem(['dr', 'activate', 'drill', '--keep-source-serving', '-b', b.url]);
      expect(drill.code, drill.stderr).toBe(0);
      const control = await tandem(['dr', 'activate', 'control', '-b', b.url]);
      expect(control.code, control.stderr).toBe(0);
    } finally {
      a.signal('SIGCONT');
    }
    // B tells A in one pass over what it has to tell: once `control` is demoted, `drill` would have been too.
    await waitFor(async () => (await drRowOf(a.port, 'control')).role === 'diverged', { timeout: 60_000, name: 'the control queue demoted after SIGCONT' });
    expect((await drRowOf(a.port, 'drill').catch(() => undefined))?.role ?? 'source').toBe('source');
    // A still serves `drill` (both sites do: the documented drill), B serves its copy.
    await send(a.port, 'drill', ['still-at-a']);
    expect(await receive(a.port, 'drill', 21)).toEqual([...range('drill-', 0, 20), 'still-at-a']);
    expect((await drRowOf(b.port, 'drill')).role).toBe('activated');
    expect(await receive(b.port, 'drill', 20)).toEqual(range('drill-', 0, 20));
    console.log(`activate-tell: tandem dr activate --keep-source-serving said:\n${drill.stdout}`);
    expect(drill.stdout).toContain('activated: drill');
    expect(drill.stdout).toMatch(/is NOT told \(--keep-source-serving: a drill, or a split you chose\): it may still serve drill/);
    // A management argument that is not a boolean is refused.
    await expect(mgmt(b.port, 'DR-ACTIVATE', { queues: 'drill', 'keep-source-serving': 'maybe' })).rejects.toThrow(/keep-source-serving must be true or false/);
  }, 120_000);
});

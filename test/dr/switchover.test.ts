// DR planned switchover (docs/dr.md, "The round trip"): a python qpid-proton
// publisher keeps publishing while the queue moves between the two sites six
// times, both directions, each move run against the site holding the passive
// copy; consumers take messages on whichever site serves. In the end every
// message is there exactly once, in the order it was published, and the
// publisher only ever saw retryable refusals (amqp:link:redirect). Then both
// ends killed -9 at random points of switchovers: each either completes after
// the restart or leaves both sites as they were, and nothing is lost. And a
// stale copy of an older epoch can never follow either site again.
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { debianPython } from '../helpers/python.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { contents, depthOf, drFlush, drRowOf, range, receive, send, twoSites } from './helpers.js';

interface PublisherResult {
  accepted: number;
  refusals: Array<{ condition: string | null; description: string | null }>;
}

function publisher(urls: string[], queue: string, count: number, rate: number): Promise<PublisherResult> {
  return new Promise((resolve, reject) => {
    execFile(debianPython, [join(import.meta.dirname, 'py', 'switch_publisher.py'), urls.join(','), queue, String(count), String(rate)], { timeout: 240_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`switch_publisher.py failed: ${err.message}\n${stderr}`));
      resolve(JSON.parse(stdout.trim().split('\n').pop()!) as PublisherResult);
    });
  });
}

/** One site serves the queue, the other is its passive copy, nobody is fenced: the pair is settled. */
async function settled(a: TestBroker, b: TestBroker, queue: string, timeout = 60_000): Promise<{ source: TestBroker; copy: TestBroker; epoch: number }> {
  let seen = '';
  return waitFor(
    async () => {
      const [ra, rb] = await Promise.all([drRowOf(a.port, queue).catch(() => undefined), drRowOf(b.port, queue).catch(() => undefined)]);
      seen = JSON.stringify([ra, rb]);
      if (!ra || !rb || ra.epoch !== rb.epoch) return undefined;
      if (ra.role === 'passive copy' && rb.role === 'source' && ra.link === 'connected') return { source: b, copy: a, epoch: rb.epoch };
      if (rb.role === 'passive copy' && ra.role === 'source' && rb.link === 'connected') return { source: a, copy: b, epoch: ra.epoch };
      return undefined;
    },
    { timeout, interval: 200, name: `settled DR pair for ${queue}` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; last: ${seen}`);
  });
}

describe('DR switchover', () => {
  let a: TestBroker;
  let b: TestBroker;

  twoSites((x, y) => {
    [a, b] = [x, y];
  });

  it('DR switchover - six moves under load, both directions: every message once, in order; the publisher sees only redirects', async () => {
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url])).code).toBe(0);
    await drFlush(a.port, b.port);
    const total = 12_000;
    const publishing = publisher([a.url, b.url], 'orders', total, 800);
    const consumed: unknown[] = [];
    let source = a;
    let copy = b;
    for (let move = 1; move <= 6; move++) {
      // Some load first, some of it consumed on the site that serves now.
      await waitFor(async () => (await depthOf(source.port, 'orders')) >= 300, { timeout: 60_000, name: 'messages to move' });
      consumed.push(...(await receive(source.port, 'orders', 100)));
      const r = await tandem(['dr', 'switchover', 'orders', '-b', copy.url, '--timeout', '20', '--json']);
      expect(r.code, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout) as { switched: string[]; epoch: number; 'old-source-following': boolean };
      expect(out.switched).toEqual(['orders']);
      expect(out.epoch).toBe(move + 1);
      const pair = await settled(a, b, 'orders');
      expect(pair.source).toBe(copy);
      expect(pair.epoch).toBe(move + 1);
      [source, copy] = [copy, source];
      // The new source's clients are served at once.
      consumed.push(...(await receive(source.port, 'orders', 50)));
    }
    const result = await publishing;
    expect(result.accepted).toBe(total);
    // Refused only with a redirect that names the other site; and it was refused at each move.
    expect(result.refusals.length).toBeGreaterThanOrEqual(6);
    for (const f of result.refusals) {
      expect(f.condition, JSON.stringify(f)).toBe('amqp:link:redirect');
      expect(f.description).toMatch(new RegExp(`${a.port}|${b.port}`));
    }
    await drFlush(source.port, copy.port);
    const copyHeld = await contents(copy.port, 'orders');
    const rest = await receive(source.port, 'orders', total - consumed.length);
    // The passive copy held the same, message by message.
    expect(copyHeld).toEqual(rest);
    const all = [...consumed, ...rest];
    expect(all.length).toBe(total);
    expect(all).toEqual(range('m', 0, total));
    expect(await depthOf(source.port, 'orders')).toBe(0);
  }, 300_000);

  it('DR switchover - either end killed -9 at a random point: it completes after the restart or leaves both as they were; nothing lost', async () => {
    expect((await tandem(['queue', 'add', 'kills', '--durable', '-b', a.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'kills', '--source', a.url, '-b', b.url])).code).toBe(0);
    const expected: string[] = [];
    const outcomes: string[] = [];
    let sent = 0;
    for (let round = 0; round < 6; round++) {
      const before = await settled(a, b, 'kills');
      const batch = range('k', sent, sent + 200);
      sent += 200;
      await send(before.source.port, 'kills', batch);
      expected.push(...batch);
      expect(await receive(before.source.port, 'kills', 50)).toEqual(expected.splice(0, 50));
      await drFlush(before.source.port, before.copy.port);
      // Alternately the coordinating secondary and the source, at a random point of the switchover.
      const victim = round % 2 === 0 ? before.copy : before.source;
      const killAfterMs = Math.floor(Math.random() * 1500);
      const cli = tandem(['dr', 'switchover', 'kills', '-b', before.copy.url, '--timeout', '8'], { timeoutMs: 60_000 });
      await new Promise((r) => setTimeout(r, killAfterMs)); // a random kill point, not a wait for a condition
      await victim.kill();
      const restarted = await TestBroker.start({ port: victim.port, dataDir: victim.dataDir });
      if (victim === a) a = restarted;
      else b = restarted;
      await cli;
      const after = await settled(a, b, 'kills');
      const completed = after.epoch === before.epoch + 1 && after.source.port === before.copy.port;
      const undone = after.epoch === before.epoch && after.source.port === before.source.port;
      outcomes.push(`${victim.port === before.copy.port ? 'secondary' : 'source'} killed at ${killAfterMs} ms: ${completed ? 'completed' : undone ? 'undone' : 'NEITHER'}`);
      expect(completed || undone, outcomes.join('; ')).toBe(true);
      await drFlush(after.source.port, after.copy.port);
      expect(await contents(after.source.port, 'kills')).toEqual(expected);
      expect(await contents(after.copy.port, 'kills')).toEqual(expected);
    }
    console.log(`DR switchover kills: ${outcomes.join('; ')}`);
  }, 400_000);

  it('DR switchover - bad input: the wrong broker, a queue not replicated, the wrong role, an unreachable source; a clear error and nothing changed', async () => {
    const pair = await settled(a, b, 'orders');
    const rowsBefore = [await drRowOf(pair.source.port, 'orders'), await drRowOf(pair.copy.port, 'orders')].map((r) => ({ role: r.role, epoch: r.epoch }));
    // Against the site that serves the queue, not the one holding the copy.
    const wrong = await tandem(['dr', 'switchover', 'orders', '-b', pair.source.url]);
    expect(wrong.code).toBe(8);
    expect(wrong.stderr).toMatch(/is activated here, not a passive copy: run the switchover against the site that holds the passive copy|is source here/);
    const unknown = await tandem(['dr', 'switchover', 'nosuch', '-b', pair.copy.url]);
    expect(unknown.code).toBe(4);
    expect(unknown.stderr).toMatch(/DR queue 'nosuch' does not exist/);
    const none = await tandem(['dr', 'switchover', '-b', pair.copy.url]);
    expect(none.code).toBe(2);
    const badTimeout = await tandem(['dr', 'switchover', 'orders', '-b', pair.copy.url, '--timeout', '0.2']);
    expect(badTimeout.code).toBe(2);
    expect(badTimeout.stderr).toMatch(/timeout must be between/);
    // A request's timeout is digits (or a number): '0x7530' was read as 30 s.
    await expect(manage(pair.copy.port, 'DR-SWITCHOVER', 'broker', 'broker', { queues: 'orders', timeout: '0x7530', 'reverse-source': pair.copy.url })).rejects.toThrow(/timeout must be a whole number .*digits only/);
    // An activated copy is not a passive copy any more.
    expect((await tandem(['queue', 'add', 'opened', '--durable', '-b', pair.source.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'opened', '--source', pair.source.url, '-b', pair.copy.url])).code).toBe(0);
    expect((await tandem(['dr', 'activate', 'opened', '-b', pair.copy.url])).code).toBe(0);
    const activated = await tandem(['dr', 'switchover', 'opened', '-b', pair.copy.url]);
    expect(activated.code).toBe(8);
    expect(activated.stderr).toMatch(/'opened' is activated here, not a passive copy/);
    // A source nobody answers at: nothing is activated, the copy stays passive.
    expect((await tandem(['dr', 'add', 'lost', '--source', '127.0.0.1:1', '-b', pair.copy.url])).code).toBe(0);
    const lost = await tandem(['dr', 'switchover', 'lost', '-b', pair.copy.url, '--timeout', '3']);
    expect(lost.code).toBe(8);
    expect(lost.stderr).toMatch(/abandoned: the source did not fence the queues: the other DR site 127.0.0.1:1 cannot be reached.*nothing was activated here/);
    expect((await drRowOf(pair.copy.port, 'lost')).role).toBe('passive copy');
    const rowsAfter = [await drRowOf(pair.source.port, 'orders'), await drRowOf(pair.copy.port, 'orders')].map((r) => ({ role: r.role, epoch: r.epoch }));
    expect(rowsAfter).toEqual(rowsBefore);
    // The source still serves.
    await send(pair.source.port, 'orders', ['after-bad-input']);
    expect(await receive(pair.source.port, 'orders', 1)).toEqual(['after-bad-input']);
  }, 120_000);

  it('DR epoch - a copy of an older epoch never follows either site again', async () => {
    const { source: src, copy: cpy } = await settled(a, b, 'orders');
    expect((await tandem(['queue', 'add', 'epochs', '--durable', '-b', src.url])).code).toBe(0);
    expect((await tandem(['dr', 'add', 'epochs', '--source', src.url, '-b', cpy.url])).code).toBe(0);
    await send(src.port, 'epochs', range('e', 0, 100));
    await drFlush(src.port, cpy.port, 30_000, ['epochs']);
    // Keep the copy as it is at epoch 1 (killed, so its journal is still), then go on.
    await cpy.kill();
    const old = join(mkdtempSync(join(tmpdir(), 'tandem-stale-')), 'data');
    cpSync(cpy.dataDir, old, { recursive: true });
    const back = await TestBroker.start({ port: cpy.port, dataDir: cpy.dataDir });
    if (cpy === a) a = back;
    else b = back;
    await settled(a, b, 'epochs');
    expect((await tandem(['dr', 'switchover', 'epochs', '-b', back.url])).code).toBe(0);
    await send(back.port, 'epochs', range('e', 100, 120));
    const stale = await TestBroker.start({ dataDir: old });
    // The old source is a passive copy now: it refuses to be followed.
    await waitFor(async () => /is not served by this site: it is passive copy/.test(String((await drRowOf(stale.port, 'epochs'))['last-error'])), { timeout: 30_000, name: 'stale copy refused by the passive site' });
    // Back to the first site (epoch 3): the stale copy (epoch 1) is refused as stale.
    expect((await tandem(['dr', 'switchover', 'epochs', '-b', src.url])).code).toBe(0);
    await waitFor(async () => /at DR epoch 3 on this source and 1 on the secondary: the secondary is stale/.test(String((await drRowOf(stale.port, 'epochs'))['last-error'])), {
      timeout: 30_000,
      name: 'stale copy refused for its epoch',
    });
    expect(await contents(stale.port, 'epochs')).toEqual(range('e', 0, 100));
    await stale.kill();
  }, 120_000);
});

// A backup frozen (SIGSTOP) in the middle of loading a snapshot of a large queue,
// while the primary goes on taking and giving messages, then woken (SIGCONT).
// Briefly (it stays followed) or long enough for the primary to drop it (it must
// start over: its store holds part of a snapshot). Either way it must end with
// exactly the primary's queue, message by message, and a failover to it must
// serve exactly what the primary held.
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { contents, depthOf, receive, send } from '../dr/helpers.js';

let cluster: TestCluster | undefined;

afterEach(async () => {
  for (const b of cluster?.brokers ?? []) b?.signal('SIGCONT');
  await cluster?.stopAll();
  cluster = undefined;
});

/** Enough messages that a snapshot is still loading when the test sees it begin. */
const FILL = 40_000;
/** The window of recent changes at its minimum, so a backup that missed FILL changes gets a snapshot. */
const RETAIN = ['--ha-retain-changes', '10000'];
const PAD = 'x'.repeat(900);

const bodies = (prefix: string, from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => `${prefix}${from + i}:${PAD}`);
const ids = (list: unknown[]): string[] => list.map((b) => String(b).split(':')[0]!);

const snapshotBegun = (log: string, before: number) => log.split('receiving a snapshot from the primary').length - 1 > before;

async function stallDuringSnapshot(pauseMs: number): Promise<{ dropped: boolean; loads: number }> {
  cluster = await TestCluster.ready(3, RETAIN);
  const c = cluster;
  const [p0] = c.ports;
  await c.kill(2);
  await send(p0!, 'big', bodies('a', 0, FILL), { window: 500 });
  // Dequeues too, so the snapshot is not the queue's whole history.
  await receive(p0!, 'big', 5000);

  const b2 = await c.startBroker(2);
  await waitFor(() => snapshotBegun(b2.stderr, 0), { timeout: 30_000, interval: 2, name: 'snapshot begins' });
  const drops = () => c.brokers[0]!.stderr.split('"msg":"backup dropped"').length - 1;
  const dropsBefore = drops();
  b2.signal('SIGSTOP');
  // What it logged before the freeze reaches us within moments: the load was not over.
  await new Promise((r) => setTimeout(r, 200));
  expect(b2.stderr, 'the snapshot was loaded before the freeze: FILL too small to test anything').not.toMatch(/"msg":"snapshot loaded"/);
  // The primary goes on: new messages, and dequeues of messages the frozen backup may or may not have yet.
  await send(p0!, 'big', bodies('b', 0, 2000), { window: 200 });
  await receive(p0!, 'big', 3000);
  const frozenFor = Date.now();
  if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
  const dropped = drops() > dropsBefore;
  b2.signal('SIGCONT');
  await send(p0!, 'big', bodies('c', 0, 1000), { window: 200 });
  await c.waitState(2, 'ready', 90_000);
  await c.backupsCaughtUp(0, 60_000);

  const expected = ids(bodies('a', 8000, FILL)).concat(ids(bodies('b', 0, 2000)), ids(bodies('c', 0, 1000)));
  const onPrimary = ids(await contents(p0!, 'big'));
  expect(onPrimary).toEqual(expected);
  const onBackup = ids(await contents(c.ports[2]!, 'big', expected.length));
  expect(onBackup.length, `dropped while frozen: ${dropped}, frozen ${Date.now() - frozenFor} ms`).toBe(expected.length);
  expect(onBackup).toEqual(expected);

  // A failover to it serves exactly that, in order.
  await c.kill(0);
  await c.kill(1);
  const promoted = await c.promote(2);
  expect(promoted.code, promoted.stderr).toBe(0);
  await c.waitState(2, 'active', 30_000);
  // Nothing extra beyond what the primary held (a second copy of a message, a dequeued one back).
  const drained = ids(await receive(c.ports[2]!, 'big', expected.length, { timeoutMs: 60_000 }));
  expect(drained).toEqual(expected);
  expect(await depthOf(c.ports[2]!, 'big')).toBe(0);
  return { dropped, loads: b2.stderr.split('receiving a snapshot from the primary').length - 1 };
}

describe('ha - a backup frozen while it loads a snapshot', () => {
  it('ha snapshot stall - frozen briefly (not dropped): it ends with exactly the primary queue, message by message', async () => {
    const r = await stallDuringSnapshot(0);
    expect(r.dropped).toBe(false);
  }, 240_000);

  it('ha snapshot stall - frozen until the primary drops it: it starts over and ends with exactly the primary queue, message by message', async () => {
    const r = await stallDuringSnapshot(3500);
    // It was dropped mid-load, and loaded a snapshot again.
    expect(r.dropped).toBe(true);
    expect(r.loads).toBeGreaterThanOrEqual(2);
  }, 240_000);
});

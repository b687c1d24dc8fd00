// A ready backup that goes silent (SIGSTOP) is dropped within two heartbeat
// intervals, as the README states, and so holds a publisher no longer than that.
// The publisher sends one durable message at a time and times each one from send
// to acceptance; the longest is the hold. Checked once per interval, the drop
// came up to three intervals late (issue #21: 4.9-5.6 s with 2 s).
import { afterEach, describe, expect, it } from 'vitest';
import { TestCluster, type HaStatusJson } from '../helpers/cluster.js';
import { TestClient } from '../helpers/rhea-client.js';
import { waitFor } from '../helpers/broker.js';

const HEARTBEAT_MS = 2000;
/** The README's bound: two heartbeat intervals. */
const BOUND_MS = 2 * HEARTBEAT_MS;
/**
 * What the measurement may add to the bound: the publisher's own round trip and
 * the scheduling of three brokers and the test on a shared 2-core machine.
 */
const MARGIN_MS = 400;
/**
 * Several stops, each at a random point of the heartbeat cycle, so that a late drop
 * cannot pass by lucky timing (checked once per interval, 4 stops all came in time
 * about once in 600 runs).
 */
const ROUNDS = 4;

let cluster: TestCluster | undefined;

afterEach(async () => {
  for (const b of cluster?.brokers ?? []) b?.signal('SIGCONT');
  await cluster?.stopAll();
  cluster = undefined;
});

describe('ha - a silent backup', () => {
  it('ha drop - a SIGSTOPped ready backup holds a publisher at most two heartbeat intervals', async () => {
    cluster = await TestCluster.start(3, ['--ha-heartbeat-interval', `${HEARTBEAT_MS}ms`]);
    const c = cluster;
    expect((await c.promote(0)).code).toBe(0);
    await c.waitState(1, 'ready');
    await c.waitState(2, 'ready');
    const client = await TestClient.connect({ port: c.ports[0]! });
    const sender = await client.openSender('drop');
    const holds: number[] = [];
    let n = 0;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const victim = c.brokers[1 + (round % 2)]!;
        let longest = 0;
        // Publishing before the stop, for a random part of an interval: the backup is
        // ready and answering, and the stop falls anywhere in the primary's timers' cycle.
        const until = Date.now() + Math.random() * HEARTBEAT_MS;
        do longest = Math.max(longest, await timedSend(client, sender, n++));
        while (Date.now() < until);
        victim.signal('SIGSTOP');
        const stoppedAt = Date.now();
        // Publish until the primary has dropped the silent backup and one more went through.
        let dropped = false;
        while (!dropped && Date.now() - stoppedAt < 4 * BOUND_MS) {
          longest = Math.max(longest, await timedSend(client, sender, n++));
          const s = (await c.status(0)) as HaStatusJson;
          dropped = s.backups.filter((b) => b.state === 'ready').length === 1;
        }
        longest = Math.max(longest, await timedSend(client, sender, n++));
        holds.push(longest);
        victim.signal('SIGCONT');
        await waitFor(async () => ((await c.status(0)) as HaStatusJson).backups.filter((b) => b.state === 'ready').length === 2, { timeout: 30_000, interval: 200, name: 'backup ready again' });
      }
    } finally {
      await client.close();
    }
    process.stderr.write(`publisher's longest hold per SIGSTOP (heartbeat ${HEARTBEAT_MS} ms): ${holds.join(', ')} ms\n`);
    expect(Math.max(...holds)).toBeLessThanOrEqual(BOUND_MS + MARGIN_MS);
    // The stop did hold the publisher: the silent backup was waited for, then dropped.
    expect(Math.min(...holds)).toBeGreaterThan(HEARTBEAT_MS);
  }, 150_000);
});

/** Send one durable message and wait for its acceptance: ms from send to settlement. */
async function timedSend(client: TestClient, sender: Parameters<TestClient['send']>[0], i: number): Promise<number> {
  const t = performance.now();
  const [outcome] = await client.send(sender, [{ body: `d-${i}`, durable: true }], { timeoutMs: 30_000 });
  expect(outcome!.state).toBe('accepted');
  return performance.now() - t;
}

// Pre-settled (at-most-once) publishing against real brokers. The sender forgets
// such a transfer as it writes it, so the broker must settle its own side at once,
// whatever becomes of the message: a receiving session frees its deliveries in
// order and only once settled locally, and advertises what is free as its incoming
// window. One pre-settled transfer left unsettled pinned the head, and 2,047
// transfers later the window was 0 for ever (issue #21: publishers froze after
// every failover, because proton re-sends as settled what it gave up on).
import { afterEach, describe, expect, it } from 'vitest';
import rhea from 'rhea';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import { browseBodies } from '../helpers/rhea-client.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';

/** More than a session's ring of 2,048 deliveries, several times over. */
const COUNT = 10_000;
const FIRST_ROUND = 1000;

interface PresettledRun {
  rounds: Array<{ prefix: string; sent: number; marker: boolean; after: number }>;
  done: boolean;
}

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.stopAll();
  cluster = undefined;
  await killAllBrokers();
});

/**
 * Write `count` pre-settled messages with rhea on one sender link (one session), as
 * fast as credit and the broker's session window let it; close() ends the connection.
 */
function rheaPresettled(port: number, queue: string, count: number): { close(): void } {
  const conn = rhea.create_container({ id: `presettled-${process.pid}` }).connect({ host: '127.0.0.1', port, reconnect: false } as never);
  conn.on('connection_error', () => undefined);
  conn.on('disconnected', () => undefined);
  const sender = conn.open_sender({ target: { address: queue }, snd_settle_mode: 1 } as never);
  let sent = 0;
  sender.on('sendable', () => {
    while (sent < count && sender.sendable()) sender.send({ body: `r-${sent++}`, durable: true });
  });
  return { close: () => conn.close() };
}

describe('pre-settled publishing', () => {
  it('presettled - 10,000 pre-settled messages from rhea on one session are all enqueued', async () => {
    const b = await TestBroker.start();
    await manage(b.port, 'CREATE', 'queue', 'ps.rhea', { durable: true });
    const writer = rheaPresettled(b.port, 'ps.rhea', COUNT);
    try {
      // rhea stops writing once the broker's session window is 0: wait for the queue, not the writer.
      await waitFor(async () => (await queueDepth(b.port, 'ps.rhea')) === COUNT, { timeout: 60_000, interval: 200, name: `${COUNT} enqueued` }).catch(async (err) => {
        throw new Error(`${(err as Error).message}: depth ${await queueDepth(b.port, 'ps.rhea')}`);
      });
    } finally {
      writer.close();
    }
  });

  it('presettled - 10,000 pre-settled messages from python-proton on one session are all enqueued', async () => {
    const b = await TestBroker.start();
    await manage(b.port, 'CREATE', 'queue', 'ps.py', { durable: true });
    const run = await runPython<PresettledRun>('presettled_send.py', [b.url, 'ps.py', 'p', String(COUNT), '0', '60'], 90_000);
    expect(run.done, `${JSON.stringify(run.rounds)}; depth ${await queueDepth(b.port, 'ps.py')}`).toBe(true);
    expect(await queueDepth(b.port, 'ps.py')).toBe(COUNT + 1);
  });

  it('presettled - across kill -9 of the primary and a promotion, a proton client sending pre-settled keeps getting everything through', async () => {
    cluster = await TestCluster.start(3);
    const c = cluster;
    expect((await c.promote(0)).code).toBe(0);
    await c.waitState(1, 'ready');
    await c.waitState(2, 'ready');
    // A round on the first primary (fewer than a session's ring: that one goes through
    // even without the fix), then one of COUNT on each connection after failover, each
    // ending with a marker the broker must answer; it ends with the first answered
    // marker after a failover.
    const sending = runPython<PresettledRun>('presettled_send.py', [c.url, 'ps.ha', 'p', `${FIRST_ROUND},${COUNT}`, '1', '75'], 100_000);
    await waitFor(async () => (await queueDepth(c.ports[0]!, 'ps.ha').catch(() => 0)) >= FIRST_ROUND + 1, { timeout: 60_000, interval: 200, name: 'first round enqueued' }).catch(async (err) => {
      throw new Error(`${(err as Error).message}: depth ${await queueDepth(c.ports[0]!, 'ps.ha')}`);
    });
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const run = await sending;
    const after = run.rounds.find((r) => r.marker && r.after >= 1);
    expect(run.done, `${JSON.stringify(run.rounds)}; depth on the new primary ${await queueDepth(c.ports[1]!, 'ps.ha')}`).toBe(true);
    // Everything the last round wrote, on the new primary: count it message by message.
    const held = await browseBodies(c.ports[1]!, 'ps.ha', await queueDepth(c.ports[1]!, 'ps.ha'));
    const ofLast = held.filter((body) => body.startsWith(`${after!.prefix}-`));
    expect(new Set(ofLast).size).toBe(ofLast.length);
    expect(ofLast.length).toBe(COUNT + 1);
  }, 180_000);
});

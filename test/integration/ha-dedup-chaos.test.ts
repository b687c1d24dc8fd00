// Exactly-once publishing across failover (issue 16): three python-proton
// senders set message-id and resend, with the same id, everything that had no
// outcome when their connection dropped, while the primary of a 3-broker
// cluster is killed with SIGKILL and a ready backup promoted, round after
// round. The queue's duplicate-detection window is replicated with the
// enqueues, so a new primary refuses what the old one took. Then one receiver
// drains the queue and records every delivery: each accepted message is there,
// and no message-id comes twice. The same run without a window shows the
// duplicates the resends make, so the check sees the feature, not luck.
//
// The receiver drains once the cluster is quiet: a delivery whose acceptance a
// kill lost comes again from the new primary (at-least-once delivery, not a
// second copy in the queue), which would blur a message-by-message check.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import { prng } from '../../src/util/prng.js';
import { manage } from '../helpers/tandem-cli.js';
import { haStatusOf } from '../../src/cli/ha-commands.js';

const QUEUE = 'orders';
const SENDERS = ['A', 'B', 'C'];

interface SenderResult {
  accepted: number[];
  resent: number;
  reconnects: number;
  unanswered: number[];
}

async function chaosRun(rounds: number, queueArgs: Record<string, unknown>, seed: number): Promise<{ senders: Record<string, SenderResult>; delivered: string[]; primaryPort: number }> {
  const random = prng(seed);
  const cluster = await TestCluster.start(3);
  const stopDir = mkdtempSync(join(tmpdir(), 'tandem-dedup-chaos-'));
  const stopFile = join(stopDir, 'stop');
  try {
    expect((await cluster.promote(0)).code).toBe(0);
    await cluster.waitState(1, 'ready');
    await cluster.waitState(2, 'ready');
    let primary = 0;
    await manage(cluster.ports[0]!, 'CREATE', 'queue', QUEUE, { durable: true, ...queueArgs });
    const running = SENDERS.map((name) => runPython<SenderResult>('dedup_failover_send.py', [cluster.url, QUEUE, name, stopFile, '60'], 300_000).then((r) => [name, r] as const));
    const depth = async (): Promise<number> => {
      try {
        return ((await manage(cluster.ports[primary]!, 'READ', 'queue', QUEUE)) as { depth: number }).depth;
      } catch {
        return -1;
      }
    };
    const t0 = performance.now();
    for (let round = 0; round < rounds; round++) {
      const before = await depth();
      await waitFor(async () => (await depth()) > before + 100, { timeout: 60_000, interval: 100, name: `traffic in round ${round}` });
      await new Promise((r) => setTimeout(r, random() * 300));
      const ready: number[] = [];
      await waitFor(
        async () => {
          ready.length = 0;
          // In process, not the CLI: a node start per poll was most of a round on a loaded machine.
          for (let i = 0; i < 3; i++) if (i !== primary && (await stateOf(cluster.ports[i]!)) === 'ready') ready.push(i);
          return ready.length > 0;
        },
        { timeout: 60_000, interval: 100, name: 'a ready backup' },
      );
      await cluster.kill(primary);
      const next = ready[Math.floor(random() * ready.length)]!;
      const promoted = await cluster.promote(next);
      expect(promoted.code, promoted.stderr).toBe(0);
      await cluster.startBroker(primary);
      primary = next;
      process.stderr.write(`dedup chaos: round ${round} done at ${Math.round(performance.now() - t0)} ms, primary ${primary}, depth ${await depth()}\n`);
    }
    writeFileSync(stopFile, '');
    const senders = Object.fromEntries(await Promise.all(running));
    const delivered = await runPython<string[]>('drain.py', [`amqp://${cluster.address(primary)}`, QUEUE], 120_000);
    return { senders, delivered, primaryPort: cluster.ports[primary]! };
  } finally {
    await cluster.stopAll();
    rmSync(stopDir, { recursive: true, force: true });
  }
}

async function stateOf(port: number): Promise<string | undefined> {
  try {
    return (await haStatusOf({ host: '127.0.0.1', port }, 2000)).state;
  } catch {
    return undefined;
  }
}

function tally(delivered: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const body of delivered) counts.set(body, (counts.get(body) ?? 0) + 1);
  return counts;
}

describe('ha - exactly-once publishing across kill -9 and promotion', () => {
  it('ha dedup chaos - without a window, resends after failover make duplicates', async () => {
    const { senders, delivered } = await chaosRun(3, {}, 16);
    const resent = Object.values(senders).reduce((n, s) => n + s.resent, 0);
    const duplicates = [...tally(delivered).values()].filter((n) => n > 1).length;
    process.stderr.write(`dedup chaos (no window): resent ${resent}, duplicated ids ${duplicates}\n`);
    expect(resent).toBeGreaterThan(0);
    expect(duplicates).toBeGreaterThan(0);
  }, 240_000);

  it('ha dedup chaos - with a window: 10 kill -9 + promote rounds, 0 lost and 0 duplicates, message by message', async () => {
    const { senders, delivered } = await chaosRun(10, { 'qpid.dedup-window': 1_000_000, 'qpid.dedup-ttl': '10m' }, 1616);
    const counts = tally(delivered);
    const twice = [...counts].filter(([, n]) => n > 1).map(([b]) => b);
    expect(twice, 'message-ids delivered more than once').toEqual([]);
    let accepted = 0;
    let resent = 0;
    for (const [name, s] of Object.entries(senders)) {
      const missing = s.accepted.filter((n) => !counts.has(`${name}-${n}`));
      expect(missing, `sender ${name}: accepted but never delivered`).toEqual([]);
      // Only ids a sender sent can arrive.
      accepted += s.accepted.length;
      resent += s.resent;
    }
    for (const body of counts.keys()) expect(SENDERS).toContain(body.split('-')[0]);
    process.stderr.write(`dedup chaos (window): accepted ${accepted}, resent ${resent}, delivered ${delivered.length}\n`);
    expect(resent).toBeGreaterThan(0);
    expect(accepted).toBeGreaterThan(10 * 100);
  }, 420_000);
});

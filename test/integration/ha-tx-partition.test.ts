// Transactions committed on a primary that is cut off from both backups (SIGSTOP,
// a partition as it sees it) in the middle of a run of commits: it holds the
// commits' answers, is frozen and replaced by a backup, then killed -9. Each
// transaction sends to two queues. On the new primary every transaction confirmed
// committed is there whole, in order, on both queues; the one whose commit had no
// answer is there whole or not at all; nothing else.
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { replaceCutOffPrimary } from '../helpers/partition.js';
import { runPython } from '../helpers/python.js';
import { depthOf, receive } from '../dr/helpers.js';

let cluster: TestCluster | undefined;

afterEach(async () => {
  for (const b of cluster?.brokers ?? []) b?.signal('SIGCONT');
  await cluster?.stopAll();
  cluster = undefined;
});

interface TxRun {
  committed: Record<string, string[]>;
  in_doubt: Record<string, string[]> | null;
  failed: string[];
  count: number;
}

function txUntilLost(url: string, a: string, b: string, stop: number): Promise<TxRun> {
  return runPython<TxRun>('tx_until_lost.py', [url, a, b, String(stop)], 120_000);
}

describe('ha - transactions across a partition of the primary', () => {
  it('ha tx partition - commits held by a cut-off primary, which is replaced: each transaction whole or absent, every confirmed one there, in order', async () => {
    cluster = await TestCluster.ready(3);
    const c = cluster;
    const running = txUntilLost(`amqp://${c.address(0)}`, 'txa', 'txb', 100_000);
    await waitFor(async () => (await depthOf(c.ports[0]!, 'txa').catch(() => 0)) >= 300, { timeout: 60_000, name: 'transactions committed' });
    const next = await replaceCutOffPrimary(c);
    const run = await running;
    expect(run.failed).toEqual([]);
    // The cut-off primary held a commit's answer: that transaction is in doubt.
    expect(run.in_doubt).not.toBeNull();
    expect(run.committed.txa!.length).toBeGreaterThan(200);

    for (const q of ['txa', 'txb']) {
      const depth = await depthOf(c.ports[next]!, q);
      const held = (await receive(c.ports[next]!, q, depth, { timeoutMs: 60_000 })) as string[];
      const confirmed = run.committed[q]!;
      const doubt = run.in_doubt?.[q] ?? [];
      // Every confirmed transaction, in order, then the one in doubt whole or not at all.
      expect(held.slice(0, confirmed.length), q).toEqual(confirmed);
      const rest = held.slice(confirmed.length);
      expect([[], doubt], `${q}: after the confirmed ones: ${JSON.stringify(rest.slice(0, 10))}`).toContainEqual(rest);
    }
  }, 180_000);
});

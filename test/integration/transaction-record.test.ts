// A transaction is one journal record (coordinator.ts), and the journal reads back
// no record over MAX_RECORD_BYTES (1 GiB, src/store/segment.ts). A transaction
// within max-transaction-size can still make a larger one when its messages fan out
// to many durable queues; written, it kept the broker from starting after a crash
// (TANDEM_ERR_JOURNAL_CORRUPT, "impossible record length"). Its commit is refused
// (rolled back, with the reason) instead. On a real tandemd with python qpid-proton.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';
import { manage } from '../helpers/tandem-cli.js';

interface TxLimitsResult {
  accepted: number;
  refused: Record<string, [number, string]>;
  commit: 'committed' | 'failed';
  commitError?: [string, string];
  again?: 'committed' | 'failed';
}

const QUEUES = Array.from({ length: 10 }, (_, i) => `fan-${i}`);

describe('transactions - what one transaction record may be', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('transactions - a commit whose record would pass the journal\'s 1 GiB (120 MiB fanned out to 10 durable queues) is rolled back with the reason, and the broker restarts after a crash with what it committed', async () => {
    let broker = await TestBroker.start();
    for (const q of QUEUES) {
      await manage(broker.port, 'CREATE', 'queue', q, { durable: true });
      await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.fanout', queue: q, key: '' });
    }
    // Two durable messages of 60 MiB under one transaction (within max-transaction-size, 256 MiB), to amq.fanout; then `after` in a second one.
    const r = await runPython<TxLimitsResult>('tx_limits.py', [broker.url, 'amq.fanout', '2', String(60 * 1024 * 1024), 'again'], 240_000);
    expect(r.accepted).toBe(2);
    expect(r.commit).toBe('failed');
    expect(r.commitError?.[0]).toBe('amqp:transaction:rollback');
    expect(r.commitError?.[1]).toMatch(/journal record .* 1 GiB/);
    expect(r.again).toBe('committed');
    expect(broker.alive).toBe(true);
    // Killed (a clean stop's checkpoint would spare the replay) and restarted on its journal:
    // it has the second transaction and nothing of the first.
    const dataDir = broker.dataDir;
    await broker.kill();
    broker = await TestBroker.start({ dataDir });
    const depths = await Promise.all(QUEUES.map(async (q) => ((await manage(broker.port, 'READ', 'queue', q)) as { depth: number }).depth));
    expect(depths).toEqual(QUEUES.map(() => 1));
    expect(await runPython<string[]>('drain.py', [broker.url, 'fan-0'])).toEqual(['after']);
    await broker.stop();
  }, 300_000);
});

// What a transaction may hold until it is discharged, on a real tandemd with python
// qpid-proton: sends past max-transaction-messages or max-transaction-size, or made
// while the memory alarm is on, are refused with amqp:resource-limit-exceeded and
// the reason; their transaction then rolls back at its commit, keeping nothing (as
// it does when any send under it is refused); and the connection and the broker go
// on taking transactions.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';
import { manage } from '../helpers/tandem-cli.js';

interface TxLimitsResult {
  accepted: number;
  /** Refused sends by condition: how many, and the first one's description. */
  refused: Record<string, [number, string]>;
  commit: 'committed' | 'failed';
  commitError?: [string, string];
  again?: 'committed' | 'failed';
}

/** COUNT messages of SIZE bytes under one transaction, committed; with `again`, then one more transaction of one message. */
const txLimits = (broker: TestBroker, queue: string, count: number, size: number, again = true) =>
  runPython<TxLimitsResult>('tx_limits.py', [broker.url, queue, String(count), String(size), ...(again ? ['again'] : [])], 120_000);

const memoryAlarm = async (port: number): Promise<boolean> => ((await manage(port, 'READ', 'broker', undefined)) as { 'memory-alarm': boolean })['memory-alarm'];

describe('transaction limits - what a transaction may hold', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('transaction limits - sends past max-transaction-messages or max-transaction-size are refused, the transaction rolls back, the connection goes on', async () => {
    const broker = await TestBroker.start({ args: ['--max-transaction-messages', '50', '--max-transaction-size', '64KiB'] });

    const byCount = await txLimits(broker, 'by-count', 60, 100);
    expect(byCount.accepted).toBe(50);
    const countLimit = 'a transaction may hold at most 50 messages until it is committed (max-transaction-messages): send fewer in each';
    // The first one past the limit says which; those after it, that the transaction can only roll back.
    expect(byCount.refused).toEqual({
      'amqp:resource-limit-exceeded': [1, `${countLimit}; the transaction will roll back`],
      'amqp:transaction:rollback': [9, `the transaction can only roll back: ${countLimit}`],
    });
    expect(byCount).toMatchObject({ commit: 'failed', commitError: ['amqp:transaction:rollback', `transaction rolled back: ${countLimit}`], again: 'committed' });

    // 8 KiB bodies: the eighth would take the transaction past 64 KiB.
    const bySize = await txLimits(broker, 'by-size', 20, 8192);
    expect(bySize.accepted).toBe(7);
    expect(bySize.refused['amqp:resource-limit-exceeded']).toEqual([1, expect.stringMatching(/^a message of \d+ bytes would take the transaction past 65536 bytes held until it is committed \(max-transaction-size\)/)]);
    expect(bySize.refused['amqp:transaction:rollback']?.[0]).toBe(12);
    expect(bySize).toMatchObject({ commit: 'failed', commitError: ['amqp:transaction:rollback', expect.stringMatching(/^transaction rolled back: .*max-transaction-size/)], again: 'committed' });

    // Nothing of the refused transactions was kept; the ones after them were.
    expect(await runPython<string[]>('drain.py', [broker.url, 'by-count'])).toEqual(['after']);
    expect(await runPython<string[]>('drain.py', [broker.url, 'by-size'])).toEqual(['after']);
    expect(broker.alive).toBe(true);
    await broker.stop();
  });

  it('transaction limits - a send refused before it reaches the transaction (an address that does not exist) fails it too: nothing of it is committed', async () => {
    const broker = await TestBroker.start({ args: ['--auto-create', 'no'] });
    await manage(broker.port, 'CREATE', 'queue', 'exists', { durable: true });
    // Through the anonymous relay: exists, missing, exists, missing.
    const mixed = await txLimits(broker, 'exists,missing', 4, 10);
    expect(mixed.accepted).toBe(1);
    const missing = mixed.refused['amqp:not-found']!;
    expect(missing[0]).toBe(2);
    expect(missing[1]).toMatch(/'missing'/);
    expect(mixed.refused['amqp:transaction:rollback']).toEqual([1, `the transaction can only roll back: ${missing[1]}`]);
    expect(mixed).toMatchObject({ commit: 'failed', commitError: ['amqp:transaction:rollback', `transaction rolled back: ${missing[1]}`], again: 'committed' });
    // Had the transaction committed without its refused sends, `exists` would hold a message of it.
    expect(await runPython<string[]>('drain.py', [broker.url, 'exists'])).toEqual(['after']);
    await broker.stop();
  });

  it('transaction limits - during the memory alarm a transactional send is refused as a plain publish is; the transaction rolls back and lets go of what it held', async () => {
    // Message bodies are buffers, outside the V8 heap: memory-limit is what watches them.
    // The transaction's own limit above what is sent, so the alarm is what stops it.
    const broker = await TestBroker.start({ args: ['--dr-retain-changes', '0', '--memory-limit', '96MiB', '--max-memory', '16MiB', '--max-transaction-size', '1GiB'] });
    // 64 KiB each, held by the open transaction until the alarm: it comes near 96 MiB. The
    // alarm is checked every 500 ms, and 3000 (188 MiB) once all got in before a check (a
    // CI run): 10,000 (625 MiB) leaves it several checks.
    const SENDS = 10_000;
    const filled = await txLimits(broker, 'held', SENDS, 64 * 1024, false);
    expect(filled.accepted).toBeGreaterThan(0);
    expect(filled.accepted).toBeLessThan(SENDS);
    // The words of a plain publish's refusal (test/integration/large-queue.test.ts).
    const [, alarm] = filled.refused['amqp:resource-limit-exceeded']!;
    expect(alarm).toMatch(/memory-limit 96 MiB.*raise memory-limit/);
    expect(filled).toMatchObject({ commit: 'failed', commitError: ['amqp:transaction:rollback', `transaction rolled back: ${alarm}`] });
    // The refused transaction held most of that memory: once it let go, the alarm clears.
    await waitFor(async () => !(await memoryAlarm(broker.port)), { timeout: 30_000, name: 'alarm cleared' });
    expect(await runPython('tx_send.py', [broker.url, 'held', 'commit'])).toMatchObject({ committed: true });
    expect(await runPython<string[]>('drain.py', [broker.url, 'held'])).toEqual(['commit-0', 'commit-1', 'commit-2', 'commit-3', 'commit-4']);
    expect(broker.stderr).toMatch(/MEMORY ALARM.*memory-limit/);
    await broker.stop();
  }, 240_000);

  it('transaction limits - a commit whose record would pass the journal\'s 1 GiB (120 MiB fanned out to 10 durable queues) is rolled back with the reason, and the broker restarts after a crash with what it committed', async () => {
    const QUEUES = Array.from({ length: 10 }, (_, i) => `fan-${i}`);
    let broker = await TestBroker.start();
    for (const q of QUEUES) {
      await manage(broker.port, 'CREATE', 'queue', q, { durable: true });
      await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.fanout', queue: q, key: '' });
    }
    // A transaction is one journal record (coordinator.ts), and the journal reads back no
    // record over 1 GiB (MAX_RECORD_BYTES, src/store/segment.ts): written, it kept the broker
    // from starting after a crash ("impossible record length").
    // Two durable messages of 60 MiB under one transaction (within max-transaction-size, 256 MiB), to amq.fanout; then `after` in a second one.
    const r = await txLimits(broker, 'amq.fanout', 2, 60 * 1024 * 1024);
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

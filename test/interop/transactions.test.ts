// Transactions through Debian's python qpid-proton: commit, rollback, and a
// connection dropped mid-transaction, for sends and for acceptances; and
// committed work surviving kill -9.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';

describe('transactions (python qpid-proton)', () => {
  let broker: TestBroker;
  const url = () => `amqp://${broker.url}`;

  beforeAll(async () => {
    broker = await TestBroker.start();
  });
  afterAll(async () => {
    await killAllBrokers();
  });

  it('transactions - committed sends appear, rolled-back and dropped ones never', async () => {
    await runPython('tx_send.py', [url(), 'tx-send', 'commit']);
    await runPython('tx_send.py', [url(), 'tx-send', 'rollback']);
    const dropped = await runPython<{ dropped?: boolean }>('tx_send.py', [url(), 'tx-send', 'drop']);
    expect(dropped.dropped).toBe(true);
    const bodies = await runPython<string[]>('drain.py', [url(), 'tx-send']);
    expect(bodies).toEqual(['commit-0', 'commit-1', 'commit-2', 'commit-3', 'commit-4']);
  });

  it('transactions - acceptances: rollback returns messages, commit removes them, a drop returns them', async () => {
    await runPython('send.py', [url(), 'tx-recv', 'm', '6']);
    const rolledBack = await runPython<{ got: string[] }>('tx_receive.py', [url(), 'tx-recv', '2', 'rollback']);
    expect(rolledBack.got).toEqual(['m-0', 'm-1']);
    const committed = await runPython<{ got: string[] }>('tx_receive.py', [url(), 'tx-recv', '2', 'commit']);
    expect(committed.got).toEqual(['m-0', 'm-1']);
    const dropped = await runPython<{ got: string[] }>('tx_receive.py', [url(), 'tx-recv', '2', 'drop']);
    expect(dropped.got).toEqual(['m-2', 'm-3']);
    const left = await runPython<string[]>('drain.py', [url(), 'tx-recv']);
    expect(left).toEqual(['m-2', 'm-3', 'm-4', 'm-5']);
  });

  it('transactions - a committed transaction survives kill -9', async () => {
    await runPython('tx_send.py', [url(), 'tx-durable', 'commit']);
    await runPython('send.py', [url(), 'tx-durable', 'later', '2']);
    const dataDir = broker.dataDir;
    await broker.kill();
    broker = await TestBroker.start({ dataDir });
    const bodies = await runPython<string[]>('drain.py', [url(), 'tx-durable']);
    expect(bodies).toEqual(['commit-0', 'commit-1', 'commit-2', 'commit-3', 'commit-4', 'later-0', 'later-1']);
  });

  it('transactions - after kill -9 a committed transaction brings back its durable messages only, never a consumed non-durable one', async () => {
    // commit-0, -2, -4 durable; commit-1, -3 not. The journal keeps the durable part of
    // the transaction only: a non-durable message's dequeue is never journaled, so had
    // its enqueue been, commit-1 would come back after the restart although consumed.
    await runPython('tx_send.py', [url(), 'tx-mixed', 'commit', 'mixed']);
    expect(await runPython<string[]>('receive.py', [url(), 'tx-mixed', '2'])).toEqual(['commit-0', 'commit-1']);
    // Settled only once its journal record is synced, after the dequeues before it.
    await runPython('send.py', [url(), 'tx-mixed', 'later', '1']);
    const dataDir = broker.dataDir;
    await broker.kill();
    broker = await TestBroker.start({ dataDir });
    const bodies = await runPython<string[]>('drain.py', [url(), 'tx-mixed']);
    // commit-3 was never durable: gone with the process, as non-durable messages are
    // (it came back too when the whole transaction was journaled).
    expect(bodies).toEqual(['commit-2', 'commit-4', 'later-0']);
  });
});

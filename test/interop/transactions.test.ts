// Transactions through Debian's python qpid-proton: commit, rollback, and a
// connection dropped mid-transaction, for sends and for acceptances; committed work
// surviving kill -9; a coordinator link closed with its transaction open (rolled back
// then, not when the connection goes); and an outcome given under a transaction
// taking effect at its discharge.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';

/** What tx_coordinator_detach.py saw. */
interface DetachResult {
  got: string;
  late?: { state: number; condition: string | null };
  redelivered: string[];
}

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

  it('transactions - closing the coordinator link rolls back its open transaction: its acceptance goes back to the queue, and a send under its id is refused', async () => {
    await runPython('send.py', [url(), 'tx-detach', 'm', '1']);
    const r = await runPython<DetachResult>('tx_coordinator_detach.py', [url(), 'tx-detach']);
    expect(r.got).toBe('m-0');
    // Rejected (0x25): the transaction is gone with its link.
    expect(r.late).toEqual({ state: 0x25, condition: 'amqp:transaction:unknown-id' });
    // The message accepted under it is another consumer's again while the first connection is still open.
    expect(r.redelivered).toEqual(['m-0']);
    expect(broker.alive).toBe(true);
  });

  it.each([
    ['rejected', '0x25'],
    ['released', '0x26'],
  ])('transactions - a delivery %s under a transaction that rolls back is on its queue again, not lost', async (_what, outcome) => {
    const queue = `tx-outcome-${outcome}`;
    await runPython('send.py', [url(), queue, 'm', '1']);
    const r = await runPython<{ got: string[] }>('tx_receive.py', [url(), queue, '1', 'rollback', outcome]);
    expect(r).toEqual({ got: ['m-0'] });
    expect(await runPython<string[]>('drain.py', [url(), queue])).toEqual(['m-0']);
  });

  it.each(['commit', 'rollback'])('transactions - a delivery modified under a transaction (%s) takes effect at once, as the outcome says (a rollback does not undo it): delivery-count raised, its annotation added', async (mode) => {
    const queue = `tx-modified-${mode}`;
    await runPython('send.py', [url(), queue, 'm', '1']);
    expect(await runPython<{ got: string[] }>('tx_receive.py', [url(), queue, '1', mode, 'modified'])).toEqual({ got: ['m-0'] });
    const again = await runPython<{ messages: Array<{ body: string; delivery_count: number; annotations: Record<string, unknown> }> }>('client.py', ['receive', url(), queue, '--count', '1']);
    expect(again.messages.map(({ body, delivery_count, annotations }) => ({ body, delivery_count, annotations }))).toEqual([{ body: 'm-0', delivery_count: 1, annotations: { 'x-opt-tx-note': 'retry' } }]);
  });
});

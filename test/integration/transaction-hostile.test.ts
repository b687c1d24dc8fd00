// Transactions as a client that breaks the rules drives them, on a real tandemd
// with python qpid-proton: what a transaction holds is let go of when the
// coordinator link it was declared on goes, not only when the connection does; and
// an outcome given under a transaction takes effect at its discharge.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { runPython } from '../helpers/python.js';

interface DetachResult {
  got: string;
  late?: { state: number; condition: string | null };
  redelivered: string[];
}

describe('transactions - a client that breaks the rules', () => {
  let broker: TestBroker;
  const url = () => `amqp://${broker.url}`;

  beforeAll(async () => {
    broker = await TestBroker.start();
  });
  afterAll(async () => {
    await killAllBrokers();
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
    const r = await runPython<{ got: string; aborted: boolean }>('tx_reject_rollback.py', [url(), queue, outcome]);
    expect(r).toEqual({ got: 'm-0', aborted: true });
    expect(await runPython<string[]>('drain.py', [url(), queue])).toEqual(['m-0']);
  });
});

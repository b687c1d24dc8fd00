// The transaction coordinator (coordinator.ts) on a broker in memory: what a
// transaction may hold until it is discharged (per transaction, and a
// connection's transactions together), transactional sends during the memory
// alarm, and a transaction whose send was refused rolling back at its discharge.
import { describe, expect, it } from 'vitest';
import { Coordinator, type TransactionLimits } from '../../../src/amqp/coordinator.js';
import { errorCondition } from '../../../src/amqp/conditions.js';
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { describedList } from '../../../src/amqp/engine/performative.js';
import type { AmqpValue } from '../../../src/amqp/engine/types.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import type { Logger } from '../../../src/ops/log.js';
import { msg, newBroker, qs } from '../broker/helpers.js';
import { Told } from './told.js';


/** A coordinator message: its body as an amqp-value section. */
const control = (body: AmqpValue): Buffer => encode({ type: 'described', descriptor: { type: 'ulong', value: 0x77n }, value: body });

function coordinatorOn(limits?: TransactionLimits) {
  const { broker } = newBroker();
  broker.declareQueue('q', qs());
  const gate: SettlementGate = { whenSafe: (_lsn, _durable, cb) => cb() };
  const log = { warn() {}, info() {}, error() {}, debug() {} } as unknown as Logger;
  const coordinator = new Coordinator(broker, gate, log, limits);
  const link = { flow() {}, credit: 0 } as unknown as Link;
  const declare = (): Buffer => {
    const t = new Told();
    coordinator.onControl(link, t.delivery, control(describedList('declare', {})));
    expect(t.outcome).toBe('declared');
    return t.txnId!;
  };
  const send = (txnId: Buffer, body = 'm'): Told => {
    const t = new Told();
    coordinator.send(t.delivery, txnId, 'q', msg(body));
    return t;
  };
  const discharge = (txnId: Buffer, fail = false): Told => {
    const t = new Told();
    coordinator.onControl(link, t.delivery, control(describedList('discharge', { 'txn-id': txnId, fail })));
    return t;
  };
  const depth = () => broker.queue('q').depth;
  return { broker, coordinator, declare, send, discharge, depth };
}

describe('transaction coordinator - memory alarm', () => {
  it('transactions - during the memory alarm a transactional send is refused as a plain publish is, and its transaction rolls back', () => {
    const { broker, declare, send, discharge, depth } = coordinatorOn();
    const txn = declare();
    expect(send(txn, 'before').outcome).toBe('transactional');
    broker.memoryAlarm = 'broker memory is nearly full (900 MiB in use, memory-limit 1000 MiB): new messages are refused until consumers drain the queues';
    let plain: unknown;
    try {
      broker.publish('q', msg('plain'));
    } catch (err) {
      plain = err;
    }
    const refused = send(txn, 'during');
    expect(refused.outcome).toBe('rejected');
    expect(refused.error).toEqual(errorCondition(plain));
    expect(refused.error).toEqual({ condition: 'amqp:resource-limit-exceeded', description: broker.memoryAlarm });
    // The alarm clears; the transaction still cannot commit without the send it lost.
    broker.memoryAlarm = undefined;
    expect(send(txn, 'after').error).toMatchObject({ condition: 'amqp:transaction:rollback', description: expect.stringMatching(/^the transaction can only roll back: broker memory is nearly full/) });
    const commit = discharge(txn);
    expect(commit.outcome).toBe('rejected');
    expect(commit.error).toMatchObject({ condition: 'amqp:transaction:rollback', description: expect.stringMatching(/^transaction rolled back: broker memory is nearly full/) });
    expect(depth()).toBe(0);
    // A new transaction on the same connection commits.
    const next = declare();
    expect(send(next, 'next').outcome).toBe('transactional');
    expect(discharge(next).outcome).toBe('accepted');
    expect(depth()).toBe(1);
  });
});

describe('transaction coordinator - what transactions may hold', () => {
  it('transactions - one transaction holds at most max-transaction-messages messages, and its commit then rolls back', () => {
    const { declare, send, discharge, depth } = coordinatorOn({ maxBytes: 1 << 20, maxMessages: 5 });
    const txn = declare();
    for (let i = 0; i < 5; i++) expect(send(txn).outcome).toBe('transactional');
    const sixth = send(txn);
    expect(sixth.error).toEqual({
      condition: 'amqp:resource-limit-exceeded',
      description: 'a transaction may hold at most 5 messages until it is committed (max-transaction-messages): send fewer in each; the transaction will roll back',
    });
    expect(discharge(txn).error).toEqual({
      condition: 'amqp:transaction:rollback',
      description: 'transaction rolled back: a transaction may hold at most 5 messages until it is committed (max-transaction-messages): send fewer in each',
    });
    expect(depth()).toBe(0);
  });

  it('transactions - one transaction holds at most max-transaction-size bytes; a rollback asked for is still a rollback', () => {
    const { declare, send, discharge, depth } = coordinatorOn({ maxBytes: 1000, maxMessages: 100 });
    const txn = declare();
    expect(send(txn, 'a'.repeat(400)).outcome).toBe('transactional');
    expect(send(txn, 'b'.repeat(600)).outcome).toBe('transactional');
    expect(send(txn, 'c').error).toEqual({
      condition: 'amqp:resource-limit-exceeded',
      description: 'a message of 1 bytes would take the transaction past 1000 bytes held until it is committed (max-transaction-size): send less in each; the transaction will roll back',
    });
    expect(discharge(txn, true).outcome).toBe('accepted');
    expect(depth()).toBe(0);
  });

  it("transactions - a connection's open transactions together hold at most 4 transactions' limits; what a discharge or a refusal frees is usable again", () => {
    const { declare, send, discharge, depth } = coordinatorOn({ maxBytes: 1 << 20, maxMessages: 3 });
    const full = Array.from({ length: 4 }, () => declare());
    for (const txn of full) for (let i = 0; i < 3; i++) expect(send(txn).outcome).toBe('transactional');
    const fifth = declare();
    expect(send(fifth).error).toEqual({
      condition: 'amqp:resource-limit-exceeded',
      description: "this connection's open transactions hold 12 messages, the most they may together (4 x max-transaction-messages): discharge them sooner; the transaction will roll back",
    });
    // Committing one frees its share.
    expect(discharge(full[0]!).outcome).toBe('accepted');
    expect(depth()).toBe(3);
    const sixth = declare();
    for (let i = 0; i < 3; i++) expect(send(sixth).outcome).toBe('transactional');
    // A transaction that fails lets go of what it held at once, not at its discharge.
    expect(send(sixth).error?.condition).toBe('amqp:resource-limit-exceeded');
    const seventh = declare();
    for (let i = 0; i < 3; i++) expect(send(seventh).outcome).toBe('transactional');
    expect(discharge(seventh).outcome).toBe('accepted');
    expect(depth()).toBe(6);
  });

  it("transactions - the connection's bytes are bounded too", () => {
    const { declare, send } = coordinatorOn({ maxBytes: 1000, maxMessages: 100 });
    for (let t = 0; t < 4; t++) expect(send(declare(), 'x'.repeat(1000)).outcome).toBe('transactional');
    expect(send(declare(), 'y').error).toEqual({
      condition: 'amqp:resource-limit-exceeded',
      description: "a message of 1 bytes would take this connection's open transactions past 4000 bytes held together (4 x max-transaction-size): discharge them sooner; the transaction will roll back",
    });
  });

  it('transactions - a send refused before it reaches the coordinator (refused) fails its transaction too', () => {
    const { coordinator, declare, send, discharge, depth } = coordinatorOn();
    const txn = declare();
    expect(send(txn).outcome).toBe('transactional');
    coordinator.refused(txn, "queue or exchange 'nope' not found");
    expect(discharge(txn).error).toEqual({ condition: 'amqp:transaction:rollback', description: "transaction rolled back: queue or exchange 'nope' not found" });
    expect(depth()).toBe(0);
  });
});

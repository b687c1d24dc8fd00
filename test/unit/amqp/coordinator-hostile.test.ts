// The transaction coordinator (coordinator.ts, transaction-types.ts) against
// control messages and ids no real client sends: malformed bodies, ids of lengths
// we never give out, declares of distributed transactions, and capabilities we
// lack. Each is answered with an AMQP condition; none costs what the client chose.
import { describe, expect, it } from 'vitest';
import { Coordinator, type TransactionLimits } from '../../../src/amqp/coordinator.js';
import { decodeComposite } from '../../../src/amqp/engine/composite.js';
import { Decoder } from '../../../src/amqp/engine/decoder.js';
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { describedList } from '../../../src/amqp/engine/performative.js';
import type { AmqpValue } from '../../../src/amqp/engine/types.js';
import { coordinatorTarget, readControlBody } from '../../../src/amqp/transaction-types.js';
import { Broker, MAX_TRANSACTION_RECORD_BYTES, transactionRecordBound } from '../../../src/broker/broker.js';
import type { Change } from '../../../src/broker/changes.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import type { Logger } from '../../../src/ops/log.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { MAX_RECORD_BYTES } from '../../../src/store/segment.js';
import { prng } from '../../../src/util/prng.js';
import { composite, v } from '../../helpers/amqp-frames.js';
import { FakeConsumer, bodies, brokerState, msg, newBroker, qs } from '../broker/helpers.js';
import { Told } from './told.js';


/** An amqp-value section holding `body` (encoded bytes). */
const amqpValue = (body: Buffer): Buffer => v.described(0x77, body);

function coordinatorOn(limits?: TransactionLimits) {
  const { broker, clock } = newBroker();
  broker.declareQueue('q', qs());
  const gate: SettlementGate = { whenSafe: (_lsn, _durable, cb) => cb() };
  const errors: unknown[] = [];
  const log = { warn() {}, info() {}, debug() {}, error: (o: unknown) => errors.push(o) } as unknown as Logger;
  const coordinator = new Coordinator(broker, gate, log, limits);
  const newLink = () => ({ flow() {}, accept() {}, credit: 0 }) as unknown as Link;
  const link = newLink();
  coordinator.attach(link, undefined);
  const control = (bytes: Buffer, on = link): Told => {
    const t = new Told();
    coordinator.onControl(on, t.delivery, bytes);
    return t;
  };
  const declare = (on = link): Buffer => {
    const t = control(amqpValue(composite(0x31, [])), on);
    expect(t.outcome).toBe('declared');
    return t.txnId!;
  };
  const discharge = (txnId: Buffer, fail = false, on = link): Told => control(amqpValue(composite(0x32, [v.binary(txnId), v.bool(fail)])), on);
  const send = (txnId: Buffer, body = 'x'): Told => {
    const t = new Told();
    coordinator.send(t.delivery, txnId, 'q', msg(body));
    return t;
  };
  return { broker, clock, coordinator, errors, link, newLink, control, declare, discharge, send };
}

describe('transaction coordinator - hostile control messages', () => {
  it('transactions - malformed coordinator messages are rejected with amqp:invalid-field and the reason, never an internal error', () => {
    const { control, errors } = coordinatorOn();
    const bodies: Record<string, Buffer> = {
      'a string': amqpValue(v.string('commit please')),
      'no amqp-value': v.described(0x75, v.binary(Buffer.from('declare'))),
      empty: Buffer.alloc(0),
      'discharge without txn-id': amqpValue(composite(0x32, [])),
      'discharge with a string txn-id': amqpValue(composite(0x32, [v.string('abc')])),
      'discharge with an int fail': amqpValue(composite(0x32, [v.binary(Buffer.alloc(8)), v.int(1)])),
      'discharge of five fields': amqpValue(composite(0x32, [v.binary(Buffer.alloc(8)), v.bool(true), v.null(), v.null(), v.null()])),
      'discharge as a map': amqpValue(v.described(0x32, v.map([]))),
      'declare of three fields': amqpValue(composite(0x31, [v.null(), v.null(), v.null()])),
      'a list that lies about its count': amqpValue(v.described(0x32, v.list([], 0xffffffff))),
      'cut short': amqpValue(composite(0x32, [v.binary(Buffer.alloc(8))])).subarray(0, 10),
    };
    for (const [what, bytes] of Object.entries(bodies)) {
      const t = control(bytes);
      expect(t.outcome, what).toBe('rejected');
      expect(t.error?.condition, what).toBe('amqp:invalid-field');
    }
    // A seeded flip of bytes in a discharge never throws out of the decoder.
    const rnd = prng(11);
    const base = amqpValue(composite(0x32, [v.binary(Buffer.alloc(8, 1)), v.bool(false)]));
    for (let i = 0; i < 20_000; i++) {
      const b = Buffer.from(base);
      for (let j = 0; j < 3; j++) b[Math.floor(rnd() * b.length)] = Math.floor(rnd() * 256);
      expect(() => readControlBody(b)).not.toThrow();
    }
    expect(errors).toEqual([]);
  });

  it('transactions - a discharge naming an id of a length we never give out is unknown, however long (no internal error, no string twice its size)', () => {
    const { control, errors, declare, discharge } = coordinatorOn();
    // 300 MB: past the longest string V8 makes of it in hex (max-message-size may be 1 GiB).
    const size = 300 * 1024 * 1024;
    const head = Buffer.concat([Buffer.from([0x00, 0x53, 0x77, 0x00, 0x53, 0x32, 0xd0]), Buffer.alloc(8), Buffer.from([0xb0]), Buffer.alloc(4)]);
    const bytes = Buffer.alloc(head.length + size);
    head.copy(bytes);
    bytes.writeUInt32BE(size + 5 + 4, 7); // list32 size: count, binary constructor, length, bytes
    bytes.writeUInt32BE(1, 11); // one field
    bytes.writeUInt32BE(size, head.length - 4);
    const t = control(bytes);
    expect(t.error).toEqual({ condition: 'amqp:transaction:unknown-id', description: 'unknown transaction id' });
    // An id one byte off a real one is unknown too; the real one still commits.
    const id = declare();
    expect(discharge(Buffer.concat([id, Buffer.from([0])])).error?.condition).toBe('amqp:transaction:unknown-id');
    expect(discharge(id.subarray(0, 7)).error?.condition).toBe('amqp:transaction:unknown-id');
    expect(discharge(id).outcome).toBe('accepted');
    expect(errors).toEqual([]);
  });

  it('transactions - a discharge twice: the second is unknown-id, and nothing of the first is undone', () => {
    const { broker, declare, discharge, send } = coordinatorOn();
    const id = declare();
    expect(send(id, 'one').outcome).toBe('transactional');
    expect(discharge(id).outcome).toBe('accepted');
    expect(discharge(id).error?.condition).toBe('amqp:transaction:unknown-id');
    expect(discharge(id, true).error?.condition).toBe('amqp:transaction:unknown-id');
    expect(broker.queue('q').depth).toBe(1);
  });

  it('transactions - a declare of a distributed transaction (global-id) is refused with amqp:not-implemented, and no transaction is opened', () => {
    const { control, declare } = coordinatorOn();
    const t = control(amqpValue(composite(0x31, [v.binary(Buffer.from('xid-1'))])));
    expect(t.error).toEqual({ condition: 'amqp:not-implemented', description: expect.stringMatching(/no distributed transactions/) });
    // A global-id of a type the spec gives none (any value) is refused the same way.
    expect(control(amqpValue(composite(0x31, [v.int(5)]))).error?.condition).toBe('amqp:not-implemented');
    expect(declare()).toHaveLength(8);
  });

  it('transactions - the coordinator attaches with the capabilities it has, never one a client asked for that it lacks', () => {
    const asked = describedList('coordinator', { capabilities: ['amqp:local-transactions', 'amqp:distributed-transactions', 'amqp:promotable-transactions', 'amqp:multi-txns-per-ssn'] });
    const decoded = decodeComposite(new Decoder(encode(asked)).value(), { name: 'coordinator' }, 'target');
    const answered = decodeComposite(new Decoder(encode(coordinatorTarget(decoded.fields.capabilities))).value(), { name: 'coordinator' }, 'target');
    expect(answered.fields.capabilities).toEqual(['amqp:local-transactions', 'amqp:multi-txns-per-ssn']);
    const none = decodeComposite(new Decoder(encode(coordinatorTarget(undefined))).value(), { name: 'coordinator' }, 'target');
    expect(none.fields.capabilities).toBeUndefined();
  });
});

describe('transaction coordinator - a coordinator link that goes', () => {
  it('transactions - detaching a coordinator link rolls back the transactions declared on it (acceptances go back, held sends are let go); those of another link stay', () => {
    const { broker, clock, coordinator, link, newLink, declare, discharge, send } = coordinatorOn();
    const other = newLink();
    coordinator.attach(other, undefined);
    broker.publish('q', msg('m1'));
    broker.publish('q', msg('m2'));
    const q = broker.queue('q');
    const consumer = new FakeConsumer('c');
    q.addConsumer(consumer);
    q.dispatch(clock.now());
    const [e1, e2] = consumer.deliveries;
    const onLink = declare(link);
    const onOther = declare(other);
    expect(coordinator.accept(onLink, q, e1!)).toBe(true);
    expect(coordinator.accept(onOther, q, e2!)).toBe(true);
    expect(send(onLink, 'held').outcome).toBe('transactional');

    coordinator.detach(link);
    // m1 is available again (with its delivery-count raised, as a rollback does); m2 is still the other transaction's.
    expect(q.acquired).toBe(1);
    expect(q.depth).toBe(2);
    expect(e1!.acquiredBy).toBeUndefined();
    expect(e1!.deliveryCount).toBe(1);
    // The rolled-back transaction is gone: a send, an acceptance or a discharge under its id is refused.
    expect(send(onLink, 'late').error?.condition).toBe('amqp:transaction:unknown-id');
    expect(coordinator.accept(onLink, q, e1!)).toBe(false);
    expect(discharge(onLink, false, other).error?.condition).toBe('amqp:transaction:unknown-id');
    // The other link's transaction commits its acceptance; the held send never arrives.
    expect(discharge(onOther, false, other).outcome).toBe('accepted');
    expect(q.depth).toBe(1);
    expect(q.acquired).toBe(0);
  });

  it("transactions - what a detached link's transactions held no longer counts against the connection's share", () => {
    const { coordinator, link, newLink, declare, send } = coordinatorOn({ maxBytes: 1 << 20, maxMessages: 2 });
    // Four transactions of two messages fill the connection's share (4 x 2).
    for (let i = 0; i < 4; i++) {
      const id = declare(link);
      expect(send(id).outcome).toBe('transactional');
      expect(send(id).outcome).toBe('transactional');
    }
    const other = newLink();
    coordinator.attach(other, undefined);
    expect(send(declare(other)).error?.condition).toBe('amqp:resource-limit-exceeded');
    coordinator.detach(link);
    const fresh = declare(other);
    expect(send(fresh).outcome).toBe('transactional');
    expect(send(fresh).outcome).toBe('transactional');
  });
});

describe('transaction coordinator - outcomes other than accepted', () => {
  it('transactions - a delivery rejected under a transaction is rejected at commit, and back on its queue after a rollback (not lost)', () => {
    const { broker, clock, coordinator, declare, discharge } = coordinatorOn();
    broker.publish('q', msg('m1'));
    const q = broker.queue('q');
    const consumer = new FakeConsumer('c');
    q.addConsumer(consumer);
    q.dispatch(clock.now());
    const [e1] = consumer.deliveries;
    const rolledBack = declare();
    expect(coordinator.reject(rolledBack, q, e1!)).toBe(true);
    // Held until the discharge: still the consumer's, and a detach does not let it go.
    expect(q.acquired).toBe(1);
    q.removeConsumer(consumer);
    expect(q.acquired).toBe(1);
    expect(discharge(rolledBack, true).outcome).toBe('accepted');
    expect(q.depth).toBe(1);
    expect(q.acquired).toBe(0);
    expect(e1!.deliveryCount).toBe(1);
    // Delivered again and rejected under a transaction that commits: gone.
    const again = new FakeConsumer('again');
    q.addConsumer(again);
    q.dispatch(clock.now());
    const committed = declare();
    expect(coordinator.reject(committed, q, again.deliveries[0]!)).toBe(true);
    expect(discharge(committed).outcome).toBe('accepted');
    expect(q.depth).toBe(0);
    expect(coordinator.reject(committed, q, again.deliveries[0]!)).toBe(false);
  });
});

describe('transaction coordinator - a commit that cannot be made durable', () => {
  it('transactions - a commit whose journal write fails (disk full) is answered rollback and undone whole: its sends go, its acceptances and rejections are back where they were, and a replica of the log agrees', () => {
    const { broker, clock, logged } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    for (const body of ['m1', 'm2', 'm3']) broker.publish('q', msg(body));
    const consumer = new FakeConsumer('c');
    q.addConsumer(consumer);
    q.dispatch(clock.now());
    const [e1, e2] = consumer.deliveries;
    const gate: SettlementGate = { whenSafe: (_lsn, _durable, cb) => cb(new Error('disk full')) };
    const log = { warn() {}, info() {}, debug() {}, error() {} } as unknown as Logger;
    const coordinator = new Coordinator(broker, gate, log);
    const link = { flow() {}, accept() {}, credit: 0 } as unknown as Link;
    coordinator.attach(link, undefined);
    const declared = new Told();
    coordinator.onControl(link, declared.delivery, amqpValue(composite(0x31, [])));
    const txnId = declared.txnId!;
    for (const body of ['a', 'b']) coordinator.send(new Told().delivery, txnId, 'q', msg(body));
    expect(coordinator.accept(txnId, q, e1!)).toBe(true);
    expect(coordinator.reject(txnId, q, e2!)).toBe(true);
    q.removeConsumer(consumer); // m3 goes back; m1 and m2 stay held by the transaction
    const discharged = new Told();
    coordinator.onControl(link, discharged.delivery, amqpValue(composite(0x32, [v.binary(txnId), v.bool(false)])));
    expect(discharged.error?.condition).toBe('amqp:transaction:rollback');
    expect(discharged.error?.description).toMatch(/commit failed: disk full/);
    // As a rollback leaves them: the three in their order, none acquired, the two the
    // transaction held with their delivery-count raised; none of its sends.
    expect(bodies(q)).toEqual(['m1', 'm2', 'm3']);
    expect(q.acquired).toBe(0);
    expect(q.entries().map((e) => e.deliveryCount)).toEqual([1, 1, 1]);
    // The commit's record went to the log (and so to backups and DR) before the journal
    // failed: the log says what undid it, so a broker applying it ends the same.
    const replica = new Broker({ now: clock.now });
    for (const e of logged) replica.apply(e);
    expect(brokerState(replica)).toEqual(brokerState(broker));
  });
});

describe('transaction coordinator - what one commit record may be', () => {
  it("transactions - the broker's bound on a transaction record is the journal's, and never under what the record encodes to", () => {
    expect(MAX_TRANSACTION_RECORD_BYTES).toBe(MAX_RECORD_BYTES);
    const message = (bytes: number, subject?: string) => ({ id: 2 ** 40, bytes: Buffer.alloc(bytes), headerLength: 0, durable: true, priority: 9, expiresAt: 2 ** 41, deliveryCount: 7, subject });
    const ops: Array<Extract<Change, { kind: 'enqueue' | 'dequeue' }>> = [
      { kind: 'enqueue', queue: 'q', message: message(0) },
      { kind: 'enqueue', queue: 'é'.repeat(255), message: message(1000, 'ü'.repeat(300)), dedup: { key: { w0: 1, w1: 2, w2: 3, w3: 4 }, at: 2 ** 42 } },
      { kind: 'dequeue', queue: 'ß'.repeat(255), id: 2 ** 50 },
    ];
    for (let i = 1; i <= ops.length; i++) {
      const some = ops.slice(0, i);
      const encoded = encodeChange({ lsn: 2 ** 45, change: { kind: 'transaction', changes: some }, durable: true });
      expect(transactionRecordBound(some)).toBeGreaterThanOrEqual(encoded.length);
    }
  });

  it('transactions - a commit whose messages fan out past one record is rolled back with the reason; nothing of it stays', () => {
    const { broker, declare, discharge, coordinator } = coordinatorOn({ maxBytes: 1 << 30, maxMessages: 100 });
    for (let i = 0; i < 9; i++) {
      broker.declareQueue(`fan-${i}`, qs({ durable: true }));
      broker.bind('amq.fanout', `fan-${i}`, '');
    }
    const id = declare();
    // One body of 120 MiB (shared, not copied per queue) to 9 queues: about 1.05 GiB as one record.
    const big = new Told();
    coordinator.send(big.delivery, id, 'amq.fanout', msg('x', { bytes: Buffer.alloc(120 * 1024 * 1024), durable: true }));
    expect(big.outcome).toBe('transactional');
    const t = discharge(id);
    expect(t.error).toEqual({ condition: 'amqp:transaction:rollback', description: expect.stringMatching(/^transaction rolled back: the transaction's sends and acceptances .* more than the 1 GiB one record may be/) });
    for (let i = 0; i < 9; i++) expect(broker.queue(`fan-${i}`).depth).toBe(0);
  });
});

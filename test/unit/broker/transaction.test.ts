import { describe, expect, it } from 'vitest';
import { Broker, MAX_TRANSACTION_RECORD_BYTES, transactionRecordBound } from '../../../src/broker/broker.js';
import { FakeConsumer, bodies, brokerState, kinds, messageRecords, msg, newBroker, qs } from './helpers.js';

describe('Broker.commit', () => {
  it('logs ONE transaction change with every enqueue and dequeue', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('q1', qs({ durable: true }));
    broker.declareQueue('q2', qs());
    broker.bind('amq.fanout', 'q1', '');
    broker.bind('amq.fanout', 'q2', '');
    broker.publish('q1', msg('old1', { durable: true }));
    broker.publish('q1', msg('old2'));
    const c = new FakeConsumer('c');
    const q1 = broker.queue('q1');
    q1.addConsumer(c);
    q1.dispatch(clock.now());
    logged.length = 0;
    const r = broker.commit(
      [
        { address: 'q2', msg: msg('s1') },
        { address: 'amq.fanout', msg: msg('s2', { durable: true }) },
      ],
      [
        { queue: q1, entry: c.deliveries[0] },
        { queue: q1, entry: c.deliveries[1] },
      ],
    );
    expect(kinds(logged)).toEqual(['transaction']);
    const tx = logged[0].change;
    if (tx.kind !== 'transaction') throw new Error('not a transaction');
    expect(tx.changes.map((op) => `${op.kind}:${op.queue}`)).toEqual([
      'enqueue:q2',
      'enqueue:q1',
      'enqueue:q2',
      'dequeue:q1',
      'dequeue:q1',
    ]);
    expect(logged[0].durable).toBe(true);
    expect(r.durable).toBe(true);
    expect(r.lsn).toBe(logged[0].lsn);
    expect(r.queues.sort()).toEqual(['q1', 'q2']);
    // Accepted entries left; new ones arrived.
    expect(bodies(q1)).toEqual(['s2']);
    expect(bodies(broker.queue('q2'))).toEqual(['s1', 's2']);
    expect(q1.acquired).toBe(0);
  });

  it('a transaction of transient work is not durable', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('d', qs({ durable: true }));
    broker.declareQueue('t', qs());
    logged.length = 0;
    broker.commit([{ address: 'd', msg: msg('x') }, { address: 't', msg: msg('y', { durable: true }) }], []);
    expect(logged).toHaveLength(1);
    expect(logged[0].durable).toBe(false);
  });

  it('an empty commit logs nothing', () => {
    const { broker, logged } = newBroker();
    const n = logged.length;
    expect(broker.commit([], [])).toMatchObject({ queues: [], lsn: 0 });
    expect(logged.length).toBe(n);
  });

  it('a commit that would overflow a reject-policy queue throws and changes nothing', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('full', qs({ maxCount: 1 }));
    broker.declareQueue('other', qs());
    broker.publish('other', msg('o'));
    broker.publish('full', msg('f'));
    const c = new FakeConsumer('c');
    const other = broker.queue('other');
    other.addConsumer(c);
    other.dispatch(clock.now());
    const before = brokerState(broker);
    const n = logged.length;
    expect(() =>
      broker.commit(
        [
          { address: 'other', msg: msg('x') },
          { address: 'full', msg: msg('y') },
        ],
        [{ queue: other, entry: c.deliveries[0] }],
      ),
    ).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_QUEUE_FULL' }));
    expect(logged.length).toBe(n);
    expect(brokerState(broker)).toEqual(before);
    expect(other.acquired).toBe(1);
  });

  it('two sends that together overflow a queue are refused as a whole', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('q', qs({ maxCount: 2 }));
    broker.publish('q', msg('a'));
    const n = logged.length;
    expect(() =>
      broker.commit(
        [
          { address: 'q', msg: msg('b') },
          { address: 'q', msg: msg('c') },
        ],
        [],
      ),
    ).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_QUEUE_FULL' }));
    expect(logged.length).toBe(n);
    expect(bodies(broker.queue('q'))).toEqual(['a']);
  });

  it('two sends that together exceed max-size are refused as a whole', () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs({ maxSize: 10 }));
    broker.bind('amq.fanout', 'q', '');
    expect(() =>
      broker.commit(
        [
          { address: 'q', msg: msg('123456') },
          { address: 'amq.fanout', msg: msg('123456') },
        ],
        [],
      ),
    ).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_QUEUE_FULL' }));
    expect(broker.queue('q').depth).toBe(0);
  });

  it('sends to a missing address roll the whole commit back', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('q', qs());
    const n = logged.length;
    expect(() => broker.commit([{ address: 'q', msg: msg('a') }, { address: 'nope', msg: msg('b') }], [])).toThrow(
      expect.objectContaining({ code: 'TANDEM_ERR_NOT_FOUND', message: expect.stringContaining('nope') }),
    );
    expect(logged.length).toBe(n);
    expect(broker.queue('q').depth).toBe(0);
  });

  it('ring evictions caused by a commit are in its one record, so a backup with that record holds the ring at its max-count', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('r', qs({ durable: true, maxCount: 2, limitPolicy: 'ring' }));
    broker.publish('r', msg('a'));
    broker.publish('r', msg('b', { durable: true }));
    const before = logged.length;
    const r = broker.commit(
      [
        { address: 'r', msg: msg('c', { durable: true }) },
        { address: 'r', msg: msg('d', { durable: true }) },
      ],
      [],
    );
    expect(bodies(broker.queue('r'))).toEqual(['c', 'd']);
    const commit = logged.slice(before);
    expect(commit.map((e) => [e.change.kind, e.durable])).toEqual([['transaction', true]]);
    expect(messageRecords(commit, true)).toEqual(['enqueue r c + enqueue r d + dequeue r + dequeue r']);
    expect(r.lsn).toBe(commit[0]!.lsn);
    // A failover right after the commit's record: the promoted backup's ring is not over its limit.
    const backup = new Broker({ now: clock.now });
    for (const e of logged) backup.apply(e);
    expect(bodies(backup.queue('r'))).toEqual(['c', 'd']);
  });

  it('a commit whose ring evictions could make its record too large for the journal is refused whole', () => {
    const { broker, logged } = newBroker();
    // A byte-limited ring: one large send may push out every message it holds, each a dequeue in the record.
    broker.declareQueue('r', qs({ maxSize: 2 * 1024 ** 3, limitPolicy: 'ring' }));
    const big = msg('x'.repeat(64));
    for (let i = 0; i < 1000; i++) broker.publish('r', big);
    // Sized so the sends alone fit (just) and the evictions they may cause do not.
    const send = { address: 'r', msg: { ...big, bytes: Buffer.alloc(MAX_TRANSACTION_RECORD_BYTES - 100_000) } };
    expect(transactionRecordBound([{ queue: 'r', message: send.msg }])).toBeLessThanOrEqual(MAX_TRANSACTION_RECORD_BYTES);
    const before = logged.length;
    expect(() => broker.commit([send], [])).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_TRANSACTION' }));
    expect(logged.length).toBe(before);
    expect(broker.queue('r').depth).toBe(1000);
  });

  it('the replica of a committed transaction holds the same state', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('q', qs({ maxCount: 3, limitPolicy: 'ring' }));
    broker.declareQueue('p', qs());
    broker.publish('p', msg('p1'));
    const c = new FakeConsumer('c');
    broker.queue('p').addConsumer(c);
    broker.queue('p').dispatch(clock.now());
    broker.commit(
      ['1', '2', '3', '4', '5'].map((b) => ({ address: 'q', msg: msg(b) })),
      [{ queue: broker.queue('p'), entry: c.deliveries[0] }],
    );
    const replica = new Broker({ now: clock.now });
    for (const e of logged) replica.apply(e);
    expect(brokerState(replica)).toEqual(brokerState(broker));
    expect(bodies(replica.queue('q'))).toEqual(['3', '4', '5']);
  });

  it('a transactional acceptance survives its consumer leaving: commit dequeues, nobody else gets it', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    broker.publish('q', msg('a'));
    broker.publish('q', msg('b'));
    const c1 = new FakeConsumer('c1', 2);
    q.addConsumer(c1);
    q.dispatch(clock.now());
    c1.deliveries[0].txAccepted = true; // what the coordinator does on a transactional accept
    q.removeConsumer(c1);
    const c2 = new FakeConsumer('c2');
    q.addConsumer(c2);
    q.dispatch(clock.now());
    expect(c2.bodies).toEqual(['b']);
    broker.commit([], [{ queue: q, entry: c1.deliveries[0] }]);
    expect(bodies(q)).toEqual(['b']);
  });

  it('a rolled-back transactional acceptance can still be released after its consumer left', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    broker.publish('q', msg('a'));
    const c1 = new FakeConsumer('c1');
    q.addConsumer(c1);
    q.dispatch(clock.now());
    c1.deliveries[0].txAccepted = true;
    q.removeConsumer(c1);
    expect(q.available).toBe(0);
    q.release(c1.deliveries[0], { deliveryFailed: false, undeliverableHere: false });
    const c2 = new FakeConsumer('c2');
    q.addConsumer(c2);
    q.dispatch(clock.now());
    expect(c2.bodies).toEqual(['a']);
  });

  it('accepting an entry already gone is skipped', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('q', qs());
    broker.publish('q', msg('a'));
    const c = new FakeConsumer('c');
    const q = broker.queue('q');
    q.addConsumer(c);
    q.dispatch(clock.now());
    broker.accept(q, c.deliveries[0]);
    const n = logged.length;
    expect(broker.commit([], [{ queue: q, entry: c.deliveries[0] }]).lsn).toBe(0);
    expect(logged.length).toBe(n);
  });
});

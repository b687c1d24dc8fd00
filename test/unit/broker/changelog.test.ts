import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { ChangeLog } from '../../../src/broker/change-log.js';
import { FakeConsumer, bodies, brokerState, kinds, msg, newBroker, qs, xs } from './helpers.js';

function lsnsIncrease(entries: LoggedChange[]): void {
  for (let i = 1; i < entries.length; i++) expect(entries[i].lsn).toBe(entries[i - 1].lsn + 1);
}

describe('ChangeLog', () => {
  it('hands out increasing LSNs and feeds every sink in order', () => {
    const log = new ChangeLog();
    const a: number[] = [];
    const b: number[] = [];
    const sinkB = { append: (e: LoggedChange) => b.push(e.lsn) };
    log.attach({ append: (e) => a.push(e.lsn) });
    log.attach(sinkB);
    log.record({ kind: 'epoch', epoch: 1 }, true);
    log.record({ kind: 'epoch', epoch: 2 }, true);
    log.detach(sinkB);
    log.record({ kind: 'epoch', epoch: 3 }, true);
    expect(a).toEqual([1, 2, 3]);
    expect(b).toEqual([1, 2]);
    expect(log.lsn).toBe(3);
  });

  it('asOneChange: the enqueues and dequeues made inside go out as one transaction record under the LSN each was told; one alone as itself; another kind in between goes after what came before it', () => {
    const log = new ChangeLog();
    const out: LoggedChange[] = [];
    log.attach({ append: (e) => out.push(e) });
    const message = { id: 7, bytes: Buffer.from('m'), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined };
    const told: number[] = [];
    log.asOneChange(() => {
      told.push(log.record({ kind: 'enqueue', queue: 'dlq', message }, true).lsn);
      // Nested: part of the outer one.
      log.asOneChange(() => told.push(log.record({ kind: 'dequeue', queue: 'q', id: 7 }, false).lsn));
    });
    expect(told).toEqual([1, 1]);
    expect(out).toEqual([{ lsn: 1, durable: true, change: { kind: 'transaction', changes: [{ kind: 'enqueue', queue: 'dlq', message }, { kind: 'dequeue', queue: 'q', id: 7 }] } }]);
    log.asOneChange(() => void log.record({ kind: 'dequeue', queue: 'q', id: 8 }, false));
    expect(out[1]).toEqual({ lsn: 2, durable: false, change: { kind: 'dequeue', queue: 'q', id: 8 } });
    log.asOneChange(() => {
      log.record({ kind: 'dequeue', queue: 'q', id: 9 }, false);
      log.record({ kind: 'epoch', epoch: 3 }, true);
      log.record({ kind: 'dequeue', queue: 'q', id: 10 }, false);
    });
    expect(out.slice(2).map((e) => [e.lsn, e.change.kind])).toEqual([
      [3, 'dequeue'],
      [4, 'epoch'],
      [5, 'dequeue'],
    ]);
    // A throwing fn: what it recorded before is still logged, and the next record is not held.
    expect(() =>
      log.asOneChange(() => {
        log.record({ kind: 'dequeue', queue: 'q', id: 11 }, false);
        throw new Error('boom');
      }),
    ).toThrow('boom');
    log.record({ kind: 'epoch', epoch: 4 }, true);
    expect(out.slice(5).map((e) => [e.lsn, e.change.kind])).toEqual([
      [6, 'dequeue'],
      [7, 'epoch'],
    ]);
  });

  it('adopt keeps the given LSN and refuses going backwards', () => {
    const log = new ChangeLog();
    log.adopt({ lsn: 10, change: { kind: 'epoch', epoch: 1 }, durable: true });
    expect(log.lsn).toBe(10);
    expect(() => log.adopt({ lsn: 10, change: { kind: 'epoch', epoch: 1 }, durable: true })).toThrow(/out of order/);
    expect(log.record({ kind: 'epoch', epoch: 2 }, true).lsn).toBe(11);
    log.resumeAfter(5);
    expect(log.lsn).toBe(11);
    log.resumeAfter(20);
    expect(log.lsn).toBe(20);
  });
});

describe('Broker change log', () => {
  it('logs each mutation with the right kind and durable flag', () => {
    const { broker, clock, logged } = newBroker();
    const expectLast = (kind: string, durable: boolean): void => {
      const e = logged[logged.length - 1];
      expect(e.change.kind).toBe(kind);
      expect(e.durable).toBe(durable);
    };
    broker.declareQueue('dq', qs({ durable: true }));
    expectLast('queue-declare', true);
    broker.declareQueue('tq', qs());
    expectLast('queue-declare', false);
    const n = logged.length;
    broker.declareQueue('dq', qs({ durable: true }));
    expect(logged.length).toBe(n); // re-declare changes nothing
    broker.declareExchange('dx', 'topic', xs({ durable: true }));
    expectLast('exchange-declare', true);
    broker.declareExchange('tx', 'direct', xs());
    expectLast('exchange-declare', false);
    broker.bind('dx', 'dq', '#');
    expectLast('bind', true);
    broker.bind('amq.direct', 'dq', 'k');
    expectLast('bind', true); // built-in exchanges are durable
    broker.bind('dx', 'tq', '#');
    expectLast('bind', false);
    broker.bind('tx', 'dq', 'k');
    expectLast('bind', false);

    const r1 = broker.publish('dq', msg('durable', { durable: true }));
    expectLast('enqueue', true);
    expect(r1.durable).toBe(true);
    expect(r1.lsn).toBe(logged[logged.length - 1].lsn);
    const r2 = broker.publish('dq', msg('transient'));
    expectLast('enqueue', false);
    expect(r2.durable).toBe(false);
    const r3 = broker.publish('tq', msg('durable msg, transient queue', { durable: true }));
    expectLast('enqueue', false);
    expect(r3.durable).toBe(false);

    const c = new FakeConsumer('c');
    const dq = broker.queue('dq');
    dq.addConsumer(c);
    dq.dispatch(clock.now());
    broker.accept(dq, c.deliveries[0]);
    expectLast('dequeue', true);
    broker.accept(dq, c.deliveries[1]);
    expectLast('dequeue', false);

    broker.unbind('dx', 'tq', '#');
    expectLast('unbind', false);
    broker.unbind('dx', 'dq', '#');
    expectLast('unbind', true);
    broker.deleteExchange('dx');
    expectLast('exchange-delete', true);
    broker.deleteExchange('tx');
    expectLast('exchange-delete', false);
    broker.deleteQueue('tq');
    expectLast('queue-delete', false);
    broker.deleteQueue('dq');
    expectLast('queue-delete', true);
    broker.raiseEpoch(3);
    expectLast('epoch', true);

    lsnsIncrease(logged);
    expect(logged[0].lsn).toBe(1);
    expect(broker.log.lsn).toBe(logged[logged.length - 1].lsn);
  });

  it('a fanout publish logs one enqueue per queue, each with its own durable flag', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('d', qs({ durable: true }));
    broker.declareQueue('t', qs());
    broker.bind('amq.fanout', 'd', '');
    broker.bind('amq.fanout', 't', '');
    logged.length = 0;
    const r = broker.publish('amq.fanout', msg('x', { durable: true }));
    expect(kinds(logged)).toEqual(['enqueue', 'enqueue']);
    const byQueue = Object.fromEntries(logged.map((e) => [(e.change as { queue: string }).queue, e.durable]));
    expect(byQueue).toEqual({ d: true, t: false });
    expect(r.durable).toBe(true);
    expect(r.lsn).toBe(logged[1].lsn);
  });

  it('logs removals by expiry, purge and ring with the message durability', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('d', qs({ durable: true, maxCount: 2, limitPolicy: 'ring' }));
    broker.publish('d', msg('a', { durable: true, ttlMs: 10 }));
    broker.publish('d', msg('b'));
    logged.length = 0;
    broker.publish('d', msg('c', { durable: true })); // ring drops 'a'
    expect(logged.map((e) => [e.change.kind, e.durable])).toEqual([
      ['dequeue', true],
      ['enqueue', true],
    ]);
    logged.length = 0;
    broker.queue('d').purge(1); // 'b', transient
    expect(logged.map((e) => [e.change.kind, e.durable])).toEqual([['dequeue', false]]);
    broker.publish('d', msg('e', { durable: true, ttlMs: 5 }));
    clock.advance(5);
    logged.length = 0;
    broker.expire();
    expect(logged.map((e) => [e.change.kind, e.durable])).toEqual([['dequeue', true]]);
  });

  it('nothing is logged for a refused operation', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('q', qs({ maxCount: 1 }));
    broker.publish('q', msg('a'));
    const n = logged.length;
    expect(() => broker.publish('q', msg('b'))).toThrow();
    expect(() => broker.publish('nowhere', msg('b'))).toThrow();
    expect(() => broker.bind('amq.direct', 'nope', 'k')).toThrow();
    expect(() => broker.deleteExchange('amq.direct')).toThrow();
    expect(() => broker.declareExchange('q', 'direct', xs())).toThrow();
    expect(() => broker.declareQueue('x', qs({ alternateExchange: 'missing' }))).toThrow();
    expect(() => broker.raiseEpoch(0)).toThrow();
    expect(logged.length).toBe(n);
  });
});

describe('Broker.apply', () => {
  it('rebuilds the same state, message ids and LSN on a second broker', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareExchange('ex', 'topic', xs({ durable: true }));
    broker.declareQueue('q1', qs({ durable: true, priorities: 3 }));
    broker.declareQueue('q2', qs({ alternateExchange: 'amq.fanout' }));
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    broker.bind('ex', 'q1', 'a.#');
    broker.bind('ex', 'q2', '#');
    for (let i = 0; i < 10; i++) broker.publish('ex', msg(`m${i}`, { subject: 'a.b', priority: i }));
    const c = new FakeConsumer('c', 3);
    broker.queue('q2').addConsumer(c);
    broker.queue('q2').dispatch(clock.now());
    broker.reject(broker.queue('q2'), c.deliveries[0]);
    broker.accept(broker.queue('q2'), c.deliveries[1]);
    broker.raiseEpoch(2);

    const replica = new Broker({ now: clock.now });
    for (const e of logged) replica.apply(e);
    expect(brokerState(replica)).toEqual(brokerState(broker));
    expect(replica.log.lsn).toBe(broker.log.lsn);
    expect(replica.epoch).toBe(2);
    // The replica hands out ids after the ones it has seen.
    const mine = replica.publish('dlq', msg('new'));
    const theirs = broker.publish('dlq', msg('new'));
    expect(mine.id).toBe(theirs.id);
  });

  it('apply without adopt resumes the LSN without feeding sinks again', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('q', qs({ durable: true }));
    broker.publish('q', msg('a', { durable: true }));
    const replica = new Broker();
    const seen: LoggedChange[] = [];
    replica.log.attach({ append: (e) => seen.push(e) });
    for (const e of logged) replica.apply(e, { adopt: false });
    expect(seen).toEqual([]);
    expect(replica.log.lsn).toBe(broker.log.lsn);
    expect(bodies(replica.queue('q'))).toEqual(['a']);
  });
});

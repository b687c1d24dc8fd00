// Broker.moveToAlternate: one slice of deleting a queue with an alternate exchange
// (src/broker/queue-slices.ts deleteQueueInSlices). Each message is sent on and dequeued
// in one record, so a crash or failover at any instant leaves it in one place, never in
// both (as two records, a replication batch could end between them), never in neither;
// never back into the queue being deleted.
import { describe, expect, it } from 'vitest';
import { messageRecords, msg, newBroker, qs, xs } from './helpers.js';

describe('broker - moveToAlternate', () => {
  it('broker - moveToAlternate sends at most max messages on, each logged as one record: enqueue there, dequeue here', () => {
    const { broker, logged } = newBroker();
    broker.declareExchange('dlx', 'fanout', xs());
    broker.declareQueue('dlq', qs());
    broker.declareQueue('q', qs({ alternateExchange: 'dlx' }));
    broker.bind('dlx', 'dlq', '');
    broker.bind('dlx', 'q', ''); // never back into the queue being deleted
    for (let i = 0; i < 10; i++) broker.publish('q', msg(`m${i}`));
    const q = broker.queue('q');
    const before = logged.length;
    expect(broker.moveToAlternate(q, 4)).toBe(4);
    expect(logged.slice(before).every((e) => e.change.kind === 'transaction')).toBe(true);
    expect(messageRecords(logged.slice(before), true)).toEqual(['enqueue dlq m0 + dequeue q', 'enqueue dlq m1 + dequeue q', 'enqueue dlq m2 + dequeue q', 'enqueue dlq m3 + dequeue q']);
    expect(q.depth).toBe(6);
    expect(broker.moveToAlternate(q, 100)).toBe(6);
    expect(q.depth).toBe(0);
    expect(broker.queue('dlq').depth).toBe(10);
    expect(broker.moveToAlternate(q, 100)).toBe(0);
  });

  it('broker - moveToAlternate moves nothing from a queue without an alternate exchange, or one deleted', () => {
    const { broker } = newBroker();
    broker.declareQueue('plain', qs());
    broker.publish('plain', msg('a'));
    expect(broker.moveToAlternate(broker.queue('plain'), 10)).toBe(0);
    expect(broker.queue('plain').depth).toBe(1);
    broker.declareExchange('dlx', 'fanout', xs());
    broker.declareQueue('q', qs({ alternateExchange: 'dlx' }));
    const q = broker.queue('q');
    broker.publish('q', msg('b'));
    broker.deleteQueue('q');
    expect(broker.moveToAlternate(q, 10)).toBe(0);
  });
});

// Broker.moveToAlternate: one slice of deleting a queue with an alternate exchange
// (src/admin/operations.ts deleteQueueInSlices). Each message is sent on before it is
// dequeued, in the log too, so a crash or failover between the two duplicates it
// rather than losing it; never back into the queue being deleted.
import { describe, expect, it } from 'vitest';
import { msg, newBroker, qs, xs } from './helpers.js';

describe('broker - moveToAlternate', () => {
  it('broker - moveToAlternate sends at most max messages on, each logged as enqueue there then dequeue here', () => {
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
    const slice = logged.slice(before).map((e) => (e.change.kind === 'enqueue' ? `enqueue ${e.change.queue} ${e.change.message.bytes.toString()}` : e.change.kind === 'dequeue' ? `dequeue ${e.change.queue}` : e.change.kind));
    expect(slice).toEqual(['enqueue dlq m0', 'dequeue q', 'enqueue dlq m1', 'dequeue q', 'enqueue dlq m2', 'dequeue q', 'enqueue dlq m3', 'dequeue q']);
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

// Consumers that act inside deliver(): settle at once, release, leave, or ask
// for another dispatch. The queue must stay consistent and terminate.
import { describe, expect, it } from 'vitest';
import type { Broker } from '../../../src/broker/broker.js';
import type { Queue, QueueEntry } from '../../../src/broker/queue.js';
import { FakeConsumer, bodies, msg, newBroker, qs } from './helpers.js';

class ActingConsumer extends FakeConsumer {
  constructor(
    id: string,
    credit: number,
    private readonly act: (entry: QueueEntry, queue: Queue, self: ActingConsumer) => void,
  ) {
    super(id, credit);
  }
  override deliver(entry: QueueEntry, queue: Queue): void {
    super.deliver(entry, queue);
    this.act(entry, queue, this);
  }
}

function fill(broker: Broker, queue: string, n: number): void {
  for (let i = 0; i < n; i++) broker.publish(queue, msg(`m${i}`));
}

describe('consumers acting inside deliver()', () => {
  it('settling at once (auto-settle) drains the queue in order', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    fill(broker, 'q', 5);
    const c = new ActingConsumer('c', 100, (e, queue) => broker.accept(queue, e));
    q.addConsumer(c);
    expect(q.dispatch(clock.now())).toBe(5);
    expect(c.bodies).toEqual(['m0', 'm1', 'm2', 'm3', 'm4']);
    expect(q.depth).toBe(0);
  });

  it('refusing everything (undeliverable-here) hands the messages to the next consumer', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    fill(broker, 'q', 3);
    const picky = new ActingConsumer('picky', 100, (e, queue) =>
      queue.release(e, { deliveryFailed: false, undeliverableHere: true }),
    );
    const other = new FakeConsumer('other', 100);
    q.addConsumer(picky);
    q.addConsumer(other);
    q.dispatch(clock.now());
    expect(other.bodies.sort()).toEqual(['m0', 'm1', 'm2']);
    expect(picky.deliveries.length).toBe(3);
    expect(q.available).toBe(0);
  });

  it('releasing at once is bounded by credit', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    fill(broker, 'q', 1);
    const c = new ActingConsumer('c', 4, (e, queue) => queue.release(e, { deliveryFailed: true, undeliverableHere: false }));
    q.addConsumer(c);
    expect(q.dispatch(clock.now())).toBe(4);
    expect(q.entries()[0].deliveryCount).toBe(4);
    expect(q.available).toBe(1);
  });

  it('a consumer leaving inside deliver gives its message back; the others continue', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    fill(broker, 'q', 4);
    const leaver = new ActingConsumer('leaver', 100, (_e, queue, self) => queue.removeConsumer(self));
    const stayer = new FakeConsumer('stayer', 100);
    q.addConsumer(leaver);
    q.addConsumer(stayer);
    q.dispatch(clock.now());
    expect(leaver.bodies).toEqual(['m0']);
    expect(stayer.bodies).toEqual(['m0', 'm1', 'm2', 'm3']);
    expect(stayer.deliveries[0].deliveryCount).toBe(1);
    expect(q.consumerCount).toBe(1);
  });

  it('a nested dispatch from deliver is ignored and the outer one carries on', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    fill(broker, 'q', 3);
    const nested: number[] = [];
    const c = new ActingConsumer('c', 100, (_e, queue) => nested.push(queue.dispatch(clock.now())));
    q.addConsumer(c);
    expect(q.dispatch(clock.now())).toBe(3);
    expect(nested).toEqual([0, 0, 0]);
  });

  it('rejecting into an alternate exchange that leads back to the same queue terminates with credit', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' })).queue;
    broker.bind('amq.fanout', 'q', '');
    fill(broker, 'q', 2);
    const c = new ActingConsumer('c', 6, (e, queue) => broker.reject(queue, e));
    q.addConsumer(c);
    expect(q.dispatch(clock.now())).toBe(6);
    expect(q.depth).toBe(2);
    expect(bodies(q)).toEqual(['m0', 'm1']);
    expect(q.entries().every((e) => e.msg.id > 6)).toBe(true);
  });

  it('expiry at dispatch with an alternate exchange leading back to a ring queue keeps order', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout', maxCount: 4, limitPolicy: 'ring' })).queue;
    broker.bind('amq.fanout', 'q', '');
    broker.publish('q', msg('live0'));
    broker.publish('q', msg('dead', { ttlMs: 1 }));
    broker.publish('q', msg('live1'));
    broker.publish('q', msg('live2'));
    clock.advance(1);
    const c = new FakeConsumer('c', 100);
    q.addConsumer(c);
    q.dispatch(clock.now());
    // 'dead' expired: dead-lettered, but not back into the queue it expired from (its
    // consumers would get an expired message); the others keep their order.
    expect(c.bodies).toEqual(['live0', 'live1', 'live2']);
    expect(q.depth).toBe(3);
  });
});

// Auto-delete queues (src/broker/auto-delete.ts) driven by vitest's fake timers:
// a consumer back within the delay keeps the queue; what is left in a deleted
// queue goes to its alternate exchange.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AutoDeleteTimers } from '../../../src/broker/auto-delete.js';
import { FakeConsumer, bodies, msg, newBroker, qs } from './helpers.js';

function setup() {
  const env = newBroker();
  const timers = new AutoDeleteTimers(env.broker, { debug: () => undefined, warn: () => undefined });
  env.broker.events = { queueUnused: (q) => timers.schedule(q), queueDeleted: (q) => timers.cancel(q) };
  return { ...env, timers };
}

describe('auto-delete timers', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('auto-delete - a consumer back within the delay keeps the queue; its leaving starts the delay again', () => {
    const { broker, timers } = setup();
    const q = broker.declareQueue('q', qs({ autoDelete: true, autoDeleteDelayMs: 1000 })).queue;
    const c1 = new FakeConsumer('c1');
    q.addConsumer(c1);
    q.removeConsumer(c1);
    vi.advanceTimersByTime(500);
    const c2 = new FakeConsumer('c2');
    q.addConsumer(c2);
    // The first delay ends with a consumer attached: nothing happens.
    vi.advanceTimersByTime(1000);
    expect(broker.queues.get('q')).toBe(q);
    q.removeConsumer(c2);
    vi.advanceTimersByTime(999);
    expect(broker.queues.get('q')).toBe(q);
    vi.advanceTimersByTime(1);
    expect(broker.queues.has('q')).toBe(false);
    timers.stop();
  });

  it('auto-delete - what the deleted queue held, acquired or not, goes to its alternate exchange once', () => {
    const { broker, clock, timers } = setup();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const q = broker.declareQueue('q', qs({ autoDelete: true, alternateExchange: 'amq.fanout' })).queue;
    for (const b of ['a', 'b', 'c']) broker.publish('q', msg(b));
    const c = new FakeConsumer('c', 1);
    q.addConsumer(c);
    q.dispatch(clock.now());
    q.removeConsumer(c);
    vi.runAllTimers();
    expect(broker.queues.has('q')).toBe(false);
    expect(bodies(broker.queue('dlq'))).toEqual(['a', 'b', 'c']);
    // The one given back on detach carries its delivery count.
    expect(broker.queue('dlq').entries().map((e) => e.deliveryCount)).toEqual([1, 0, 0]);
    timers.stop();
  });

  it('auto-delete - a queue deleted and declared again under the name is not deleted by the old timer', () => {
    const { broker, timers } = setup();
    const q = broker.declareQueue('q', qs({ autoDelete: true, autoDeleteDelayMs: 1000 })).queue;
    const c = new FakeConsumer('c');
    q.addConsumer(c);
    q.removeConsumer(c);
    broker.deleteQueue('q');
    const again = broker.declareQueue('q', qs({ autoDelete: true, autoDeleteDelayMs: 1000 })).queue;
    vi.runAllTimers();
    expect(broker.queues.get('q')).toBe(again);
    timers.stop();
  });
});

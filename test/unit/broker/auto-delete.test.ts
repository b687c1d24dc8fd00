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

describe('auto-delete of a long queue', () => {
  it('auto-delete - a queue of 200,000 messages goes to its alternate exchange in slices, the event loop served between them, each message once, in order', async () => {
    const { broker } = newBroker();
    const timers = new AutoDeleteTimers(broker, { debug: () => undefined, warn: () => undefined });
    broker.events = { queueUnused: (q) => timers.schedule(q), queueDeleted: (q) => timers.cancel(q) };
    const total = 200_000;
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const q = broker.declareQueue('q', qs({ autoDelete: true, alternateExchange: 'amq.fanout' })).queue;
    for (let i = 0; i < total; i++) broker.publish('q', msg(`m${i}`));
    const c = new FakeConsumer('c');
    q.addConsumer(c);
    q.removeConsumer(c);
    // What another turn of the event loop (a client, a heartbeat) sees while the delete runs.
    const seen: number[] = [];
    await new Promise<void>((resolve, reject) => {
      const deadline = Date.now() + 60_000;
      const look = (): void => {
        if (!broker.queues.has('q')) return resolve();
        if (Date.now() > deadline) return reject(new Error(`still ${q.depth} messages after 60 s`));
        if (q.depth < total) seen.push(q.depth);
        setImmediate(look);
      };
      setImmediate(look);
    });
    // In one go (the old way), no turn ran between the first message moved and the last.
    expect(seen.some((depth) => depth > 0 && depth < total)).toBe(true);
    const moved = bodies(broker.queue('dlq'));
    expect(moved.length).toBe(total);
    expect(moved.every((b, i) => b === `m${i}`)).toBe(true);
    timers.stop();
  });
});

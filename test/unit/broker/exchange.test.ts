import { describe, expect, it } from 'vitest';
import { Exchange, topicMatches } from '../../../src/broker/exchange.js';
import { bodies, msg, newBroker, qs, xs } from './helpers.js';

describe('topicMatches', () => {
  const cases: Array<[string, string, boolean]> = [
    ['a.b.c', 'a.b.c', true],
    ['a.b.c', 'a.b', false],
    ['a.b', 'a.b.c', false],
    ['a.*.c', 'a.b.c', true],
    ['a.*.c', 'a.c', false],
    ['a.*.c', 'a.b.b.c', false],
    ['*', 'a', true],
    ['*', 'a.b', false],
    ['*.*', 'a.b', true],
    ['#', 'a', true],
    ['#', 'a.b.c', true],
    ['#', '', true],
    ['a.#', 'a', true],
    ['a.#', 'a.b', true],
    ['a.#', 'a.b.c', true],
    ['a.#', 'b.a', false],
    ['#.c', 'c', true],
    ['#.c', 'a.b.c', true],
    ['#.c', 'a.b.c.d', false],
    ['a.#.b', 'a.b', true],
    ['a.#.b', 'a.x.b', true],
    ['a.#.b', 'a.x.y.b', true],
    ['a.#.b', 'a.x.y', false],
    ['a.#.b', 'a.b.b', true],
    ['a.#.b', 'b.a.b', false],
    ['#.a.#', 'a', true],
    ['#.a.#', 'x.a.y', true],
    ['#.a.#', 'x.b.y', false],
    ['#.#', '', true],
    ['#.#', 'a.b', true],
    ['*.#', 'a', true],
    ['#.*', 'a.b.c', true],
    ['*.#.*', 'a', false],
    ['*.#.*', 'a.b', true],
    // empty words are words
    ['a..c', 'a..c', true],
    ['a.*.c', 'a..c', true],
    ['a.#.c', 'a..c', true],
    ['a.*', 'a.', true],
    ['a', 'a.', false],
    ['', '', true],
    ['', 'a', false],
    ['a', '', false],
    // '#' and '*' only as whole words
    ['a#', 'ab', false],
    ['a*', 'ab', false],
    ['a*', 'a*', true],
  ];
  for (const [pattern, key, expected] of cases) {
    it(`'${pattern}' ${expected ? 'matches' : 'does not match'} '${key}'`, () => {
      expect(topicMatches(pattern, key)).toBe(expected);
    });
  }

  it('stays fast for many #s against a long non-matching key', () => {
    const pattern = Array(12).fill('#').join('.') + '.z';
    const key = Array(30).fill('a').join('.');
    expect(topicMatches(pattern, key)).toBe(false);
  });
});

describe('Exchange', () => {
  it('direct routes by exact key, each queue once', () => {
    const e = new Exchange('d', 'direct', xs());
    expect(e.bind('q1', 'k')).toBe(true);
    expect(e.bind('q1', 'k')).toBe(false);
    e.bind('q2', 'k');
    e.bind('q3', 'other');
    e.bind('q4', '');
    expect(e.route('k').sort()).toEqual(['q1', 'q2']);
    expect(e.route('other')).toEqual(['q3']);
    expect(e.route('none')).toEqual([]);
    expect(e.route(undefined)).toEqual(['q4']);
    expect(e.unbind('q1', 'k')).toBe(true);
    expect(e.unbind('q1', 'k')).toBe(false);
    expect(e.route('k')).toEqual(['q2']);
    e.unbind('q2', 'k');
    expect(e.route('k')).toEqual([]);
  });

  it('fanout routes to every bound queue once, whatever the key', () => {
    const e = new Exchange('f', 'fanout', xs());
    e.bind('q1', '');
    e.bind('q1', 'x');
    e.bind('q2', 'y');
    expect(e.route('anything').sort()).toEqual(['q1', 'q2']);
    expect(e.route(undefined).sort()).toEqual(['q1', 'q2']);
    e.unbind('q1', '');
    expect(e.route('z').sort()).toEqual(['q1', 'q2']);
    e.unbind('q1', 'x');
    expect(e.route('z')).toEqual(['q2']);
  });

  it('topic routes by pattern, each queue once even if several patterns match', () => {
    const e = new Exchange('t', 'topic', xs());
    e.bind('q1', 'stock.#');
    e.bind('q1', 'stock.*.nyse');
    e.bind('q2', '*.ibm.*');
    e.bind('q3', '#');
    expect(e.route('stock.ibm.nyse').sort()).toEqual(['q1', 'q2', 'q3']);
    expect(e.route('bond.ibm.x').sort()).toEqual(['q2', 'q3']);
    expect(e.route(undefined)).toEqual(['q3']);
  });

  it('unbindQueue drops every binding of that queue and returns the keys', () => {
    for (const type of ['direct', 'topic', 'fanout'] as const) {
      const e = new Exchange('x', type, xs());
      e.bind('q1', 'a');
      e.bind('q1', 'b');
      e.bind('q2', 'a');
      expect(e.unbindQueue('q1').sort()).toEqual(['a', 'b']);
      expect(e.bindings).toEqual([{ queue: 'q2', key: 'a' }]);
      expect(e.route('a')).toEqual(['q2']);
      expect(e.route('b')).toEqual(type === 'fanout' ? ['q2'] : []);
      expect(e.unbindQueue('q1')).toEqual([]);
    }
  });
});

describe('Broker routing', () => {
  it('publishes through direct, fanout and topic exchanges', () => {
    const { broker } = newBroker();
    for (const n of ['q1', 'q2', 'q3']) broker.declareQueue(n, qs());
    broker.bind('amq.direct', 'q1', 'k1');
    broker.bind('amq.fanout', 'q1', '');
    broker.bind('amq.fanout', 'q2', '');
    broker.bind('amq.topic', 'q3', 'a.#');
    expect(broker.publish('amq.direct', msg('d1', { subject: 'k1' })).queues).toEqual(['q1']);
    expect(broker.publish('amq.direct', msg('d2', { subject: 'k2' })).queues).toEqual([]);
    expect(broker.publish('amq.fanout', msg('f1')).queues.sort()).toEqual(['q1', 'q2']);
    expect(broker.publish('amq.topic', msg('t1', { subject: 'a.b' })).queues).toEqual(['q3']);
    expect(broker.publish('amq.topic', msg('t2', { subject: 'b.a' })).queues).toEqual([]);
    expect(bodies(broker.queue('q1'))).toEqual(['d1', 'f1']);
    expect(bodies(broker.queue('q2'))).toEqual(['f1']);
    expect(bodies(broker.queue('q3'))).toEqual(['t1']);
  });

  it('a fanout publish gives every queue the same message id', () => {
    const { broker } = newBroker();
    broker.declareQueue('q1', qs());
    broker.declareQueue('q2', qs());
    broker.bind('amq.fanout', 'q1', '');
    broker.bind('amq.fanout', 'q2', '');
    const r = broker.publish('amq.fanout', msg('x'));
    expect(r.id).toBeGreaterThan(0);
    expect(broker.queue('q1').has(r.id)).toBe(true);
    expect(broker.queue('q2').has(r.id)).toBe(true);
  });

  it('a message nobody takes goes to the exchange\'s alternate exchange', () => {
    const { broker } = newBroker();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    broker.declareExchange('ex', 'direct', xs({ alternateExchange: 'amq.fanout' }));
    broker.declareQueue('q', qs());
    broker.bind('ex', 'q', 'k');
    expect(broker.publish('ex', msg('a', { subject: 'k' })).queues).toEqual(['q']);
    expect(broker.publish('ex', msg('b', { subject: 'nope' })).queues).toEqual(['dlq']);
  });

  it('unbind stops routing; unbinding a missing binding is not-found', () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs());
    expect(broker.bind('amq.direct', 'q', 'k')).toBe(true);
    expect(broker.bind('amq.direct', 'q', 'k')).toBe(false);
    expect(broker.unbind('amq.direct', 'q', 'k')).toBe(true);
    expect(broker.publish('amq.direct', msg('x', { subject: 'k' })).queues).toEqual([]);
    expect(() => broker.unbind('amq.direct', 'q', 'k')).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_NOT_FOUND' }));
  });

  it('deleting a queue removes its bindings everywhere', () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs());
    broker.declareExchange('ex', 'topic', xs());
    broker.bind('ex', 'q', '#');
    broker.bind('amq.direct', 'q', 'k');
    broker.bind('amq.fanout', 'q', '');
    broker.deleteQueue('q');
    for (const e of broker.exchanges.values()) expect(e.bindings).toEqual([]);
    // A new queue of the same name is not bound by the old bindings.
    broker.declareQueue('q', qs());
    expect(broker.publish('amq.fanout', msg('x')).queues).toEqual([]);
  });
});

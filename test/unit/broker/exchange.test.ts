import { describe, expect, it } from 'vitest';
import {
  Exchange,
  MAX_TOPIC_KEY_WORDS,
  MAX_TOPIC_SUBJECT_BYTES,
  MAX_TOPIC_SUBJECT_WORDS,
  compileTopicPattern,
  matchTopic,
  topicMatches,
  topicSubject,
} from '../../../src/broker/exchange.js';
import { bodies, msg, newBroker, prng, qs, xs } from './helpers.js';

/** The plain definition, exponential in '#'s: only for small inputs. */
function modelMatches(p: string[], k: string[]): boolean {
  if (p.length === 0) return k.length === 0;
  const [w, ...rest] = p;
  if (w === '#') return Array.from({ length: k.length + 1 }, (_, i) => i).some((i) => modelMatches(rest, k.slice(i)));
  return k.length > 0 && (w === '*' || w === k[0]) && modelMatches(rest, k.slice(1));
}

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

describe('topicMatches - bounded work (issue: a 16k-word #.#.# key against a 512 KB subject held the loop 11 s)', () => {
  const hashes = (n: number) => Array(n).fill('#').join('.');
  const words = (n: number, w = 'a') => Array(n).fill(w).join('.');

  it('agrees with the plain definition on random small patterns and subjects, runs of # included', () => {
    const rand = prng(7);
    const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
    for (let n = 0; n < 3000; n++) {
      const p = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => pick(['#', '#', '*', 'a', 'b', '']));
      const k = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => pick(['a', 'b', '']));
      expect(topicMatches(p.join('.'), k.join('.')), `'${p.join('.')}' vs '${k.join('.')}'`).toBe(modelMatches(p, k));
    }
  });

  it('a run of # is parsed as one #', () => {
    expect(compileTopicPattern('a.#.#.#.b.#.#').words).toEqual(['a', '#', 'b', '#']);
    expect(compileTopicPattern(hashes(16_000) + '.b').words).toEqual(['#', 'b']);
  });

  it("the audit's 16k-word # key (as an old journal could hold) against a 512 KB subject costs a few steps", () => {
    const meter = { steps: 0 };
    expect(matchTopic(compileTopicPattern(hashes(16_000) + '.b'), topicSubject(words(256 * 1024)), meter)).toBe(false);
    expect(meter.steps).toBeLessThanOrEqual(2);
  });

  it('two runs of # against a subject at the limit stay within 256 x 16,385 steps', () => {
    const pattern = '#.' + words(MAX_TOPIC_KEY_WORDS - 3, '*') + '.b.#';
    const meter = { steps: 0 };
    expect(matchTopic(compileTopicPattern(pattern), topicSubject(words(MAX_TOPIC_SUBJECT_WORDS)), meter)).toBe(false);
    expect(meter.steps).toBeGreaterThan(0);
    expect(meter.steps).toBeLessThanOrEqual(256 * (MAX_TOPIC_SUBJECT_WORDS + 1));
  });

  it('a subject over the limit is matched by patterns decided at its ends, not by two runs of #', () => {
    const long = words(MAX_TOPIC_SUBJECT_WORDS) + '.z';
    expect(topicSubject(long).long).toBe(true);
    expect(topicSubject('x'.repeat(MAX_TOPIC_SUBJECT_BYTES + 1)).long).toBe(true);
    expect(topicSubject('é'.repeat(MAX_TOPIC_SUBJECT_BYTES / 2 + 1)).long).toBe(true);
    expect(topicSubject(words(MAX_TOPIC_SUBJECT_WORDS)).long).toBe(false);
    const meter = { steps: 0 };
    for (const [pattern, expected] of [['#', true], ['a.#', true], ['#.z', true], ['a.*.#.a.z', true], ['#.b', false], ['a.#.a.#', false], ['#.z.#', false], ['a', false]] as const) {
      expect(matchTopic(compileTopicPattern(pattern), topicSubject(long), meter), pattern).toBe(expected);
    }
    expect(meter.steps).toBeLessThanOrEqual(20);
    // Within the limit, the same two-run patterns match as always.
    expect(topicMatches('a.#.a.#', words(100))).toBe(true);
    expect(topicMatches('#.z.#', words(100) + '.z')).toBe(true);
  });

  it('a topic exchange refuses a binding key over 255 words or 1024 bytes, with invalid-argument', () => {
    const { broker } = newBroker();
    broker.declareQueue('q', qs());
    const invalid = expect.objectContaining({ code: 'TANDEM_ERR_INVALID_ARGUMENT', message: expect.stringMatching(/at most 255 words and 1024 bytes/) });
    expect(() => broker.bind('amq.topic', 'q', hashes(16_000) + '.b')).toThrow(invalid);
    expect(() => broker.bind('amq.topic', 'q', hashes(256))).toThrow(invalid);
    expect(() => broker.bind('amq.topic', 'q', 'x'.repeat(1025))).toThrow(invalid);
    expect(() => broker.bind('amq.topic', 'q', 'é'.repeat(513))).toThrow(invalid);
    expect(broker.exchange('amq.topic').bindings).toEqual([]);
    expect(broker.bind('amq.topic', 'q', hashes(255))).toBe(true);
    expect(broker.bind('amq.topic', 'q', 'x'.repeat(1024))).toBe(true);
    // Direct and fanout keys are only looked up: no limit there.
    expect(broker.bind('amq.direct', 'q', 'x'.repeat(5000))).toBe(true);
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

describe('Exchange - bindings indexed (issue: 60k subscriptions took 101 s to make, 43 s to drop)', () => {
  it('agrees with a list of bindings through random binds, unbinds and unbindQueues, in bind order', () => {
    const rand = prng(11);
    for (const type of ['direct', 'topic', 'fanout'] as const) {
      const e = new Exchange('x', type, xs());
      let model: Array<{ queue: string; key: string }> = [];
      const queues = ['q0', 'q1', 'q2', 'q3', 'q4', 'q5'];
      const keys = ['a', 'b', 'a.b', '#', '*.b', 'a.#', ''];
      const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
      for (let n = 0; n < 4000; n++) {
        const queue = pick(queues);
        const key = pick(keys);
        const r = rand();
        if (r < 0.5) {
          const fresh = !model.some((b) => b.queue === queue && b.key === key);
          if (fresh) model.push({ queue, key });
          expect(e.bind(queue, key)).toBe(fresh);
        } else if (r < 0.85) {
          const had = model.some((b) => b.queue === queue && b.key === key);
          model = model.filter((b) => !(b.queue === queue && b.key === key));
          expect(e.unbind(queue, key)).toBe(had);
        } else {
          const removed = model.filter((b) => b.queue === queue).map((b) => b.key);
          model = model.filter((b) => b.queue !== queue);
          expect(e.unbindQueue(queue)).toEqual(removed);
        }
        expect(e.bindings).toEqual(model);
        expect(e.bindingCount).toBe(model.length);
        expect(e.hasBinding(queue, key)).toBe(model.some((b) => b.queue === queue && b.key === key));
        expect(e.keysOf(queue)).toEqual(model.filter((b) => b.queue === queue).map((b) => b.key));
        const subject = pick(['a', 'b', 'a.b', 'c.b', '', 'a.b.c']);
        const matches = (k: string) => (type === 'fanout' ? true : type === 'direct' ? k === subject : topicMatches(k, subject));
        expect(e.route(subject).sort()).toEqual([...new Set(model.filter((b) => matches(b.key)).map((b) => b.queue))].sort());
      }
    }
  });

  it('50k subscriptions to one topic exchange are made, routed and dropped', () => {
    // Each was an O(n) scan to make and to drop (O(n^2) in all); measured in the fix's report.
    const e = new Exchange('t', 'topic', xs());
    const n = 50_000;
    for (let i = 0; i < n; i++) expect(e.bind(`q${i}`, `k${i % 100}.#`)).toBe(true);
    expect(e.route('k7.x')).toHaveLength(n / 100);
    for (let i = 0; i < n; i++) expect(e.unbindQueue(`q${i}`)).toEqual([`k${i % 100}.#`]);
    expect(e.bindingCount).toBe(0);
    expect(e.route('k7.x')).toEqual([]);
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

// Operator patterns tested on client-chosen names: what is accepted, what is refused
// and why, and that a pattern which backtracks catastrophically on V8's usual engine
// still answers (the broker-level proof is test/integration/acl.test.ts).
import { describe, expect, it } from 'vitest';
import { globPattern, wholeNamePattern } from '../../../src/util/name-pattern.js';

describe('wholeNamePattern', () => {
  it('matches whole names with the patterns operators write', () => {
    const bob = wholeNamePattern('bob\\..*');
    expect(bob.test('bob.orders')).toBe(true);
    expect(bob.test('xbob.orders')).toBe(false);
    expect(bob.test('bob.orders\nx')).toBe(false);
    const either = wholeNamePattern('orders|billing');
    expect(either.test('orders')).toBe(true);
    expect(either.test('ordersbilling')).toBe(false);
    expect(wholeNamePattern('[a-z]{3,16}\\.q').test('abc.q')).toBe(true);
    expect(wholeNamePattern('é.*').test('été')).toBe(true);
  });

  it.each([
    ['(?!secret).*', /linear time/],
    ['(?<=x)y', /linear time/],
    ['(a)\\1', /linear time/],
    ['[a-z]{1,64}', /linear time/],
    ['\\p{L}+', /Unicode property/],
    ['\\u{1F600}', /code-point escapes/],
    ['😀.*', /beyond U\+FFFF/],
    ['a\\-b', /Invalid escape/],
    ['(', /Invalid regular expression/],
  ])('refuses %s with the reason', (source, reason) => {
    expect(() => wholeNamePattern(source)).toThrow(reason);
  });

  it.each([
    ['(a+)+x', `${'a'.repeat(60)}!`],
    ['(a|a)*x', `${'a'.repeat(60)}!`],
    ['(.*a){12}', `${'a'.repeat(254)}b`],
    ['.*a.*a.*a.*a.*a.*b', 'a'.repeat(255)],
  ])('answers for %s on a name that makes the backtracking engine run for hours', (source, name) => {
    expect(wholeNamePattern(source).test(name)).toBe(false);
  });
});

describe('globPattern', () => {
  it('reads * as any run and everything else literally', () => {
    const g = globPattern('amq.*.x(1)');
    expect(g.test('amq.topic.x(1)')).toBe(true);
    expect(g.test('amq.x(1)')).toBe(false);
    expect(g.test('amqxtopic.x(1)')).toBe(false);
    expect(globPattern('[a]+').test('[a]+')).toBe(true);
  });

  it('answers for a glob of many stars on a long name', () => {
    expect(globPattern('*a'.repeat(100)).test(`${'a'.repeat(99)}b`)).toBe(false);
    expect(globPattern('*a'.repeat(100)).test('a'.repeat(255))).toBe(true);
  });
});

// The selector language held to JMS 2.0 3.8.1 and to what JMS users get from the
// ActiveMQ-family brokers (Apache ActiveMQ Artemis, Qpid), case by case: numeric
// literals and Java's numeric promotion, the operators on values of the wrong type,
// identifiers, LIKE on text outside the BMP, and the per-message bound on LIKE work.
import { describe, expect, it } from 'vitest';
import { LIKE_SCAN_FACTOR, LIKE_STEP_LIMIT, Selector, SelectorError, type SelectorValue } from '../../../src/selector/selector.js';

/** The selector's value for a message with these properties (absent ones are null). */
function evaluate(text: string, props: Record<string, SelectorValue> = {}): boolean | null {
  const s = new Selector(text);
  return s.evaluate(s.identifiers.map((name) => props[name] ?? null));
}

type Case = [selector: string, props: Record<string, SelectorValue>, want: boolean | null];

function table(cases: Case[]): void {
  for (const [text, props, want] of cases) {
    it(`${text} with ${JSON.stringify(props, (_, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))} is ${want}`, () => expect(evaluate(text, props)).toBe(want));
  }
}

const LONG_MIN = -(1n << 63n);
const TWO_53_PLUS_1 = (1n << 53n) + 1n;

describe('numeric literals', () => {
  table([
    // Long.MIN_VALUE is in the range of long, so it may be written (as Java allows -9223372036854775808L).
    ['n = -9223372036854775808', { n: LONG_MIN }, true],
    ['n = -9223372036854775808L', { n: LONG_MIN }, true],
    ['n < -9223372036854775807', { n: LONG_MIN }, true],
    // Negating Long.MIN_VALUE gives Long.MIN_VALUE again, as in Java.
    ['- -9223372036854775808 = n', { n: LONG_MIN }, true],
    ['-n = n', { n: LONG_MIN }, true],
    ['n = 0x7FFFFFFFFFFFFFFF', { n: (1n << 63n) - 1n }, true],
    ['n = 0777L', { n: 511n }, true],
    ['n = 00', { n: 0n }, true],
    ['n = 1D', { n: 1 }, true],
    ['n = 1e0f', { n: 1n }, true],
    ['n = 08.5', { n: 8.5 }, true],
    ['n = 09e1', { n: 90n }, true],
  ]);

  it('refuses a positive literal past Long.MAX_VALUE, with its place', () => {
    for (const text of ['n = 9223372036854775808', 'n = +9223372036854775808', 'n = 9223372036854775809 * -1', 'n = - 9223372036854775809']) {
      let err: unknown;
      try {
        new Selector(text);
      } catch (e) {
        err = e;
      }
      expect(err, text).toBeInstanceOf(SelectorError);
      expect((err as SelectorError).problem).toMatch(/larger than a long/);
      expect((err as SelectorError).position).toBeGreaterThanOrEqual(4);
    }
  });
});

describe("exact and approximate numbers compare by Java's numeric promotion (the long made a double)", () => {
  table([
    ['n = 9007199254740992.0', { n: TWO_53_PLUS_1 }, true],
    ['n > 9007199254740992.0', { n: TWO_53_PLUS_1 }, false],
    ['n <> 9007199254740992.0', { n: TWO_53_PLUS_1 }, false],
    ['9007199254740993 = 9007199254740992.0', {}, true],
    ['n BETWEEN 9007199254740992.0 AND 9007199254740992.0', { n: TWO_53_PLUS_1 }, true],
    ['n = d', { n: TWO_53_PLUS_1, d: 9007199254740992 }, true],
    // Between two longs the comparison stays exact.
    ['n = 9007199254740992', { n: TWO_53_PLUS_1 }, false],
    ['n > 9007199254740992', { n: TWO_53_PLUS_1 }, true],
    // A float property (0.1f) is not the double 0.1, as in Java.
    ['f = 0.1', { f: Math.fround(0.1) }, false],
    ['f < 0.1', { f: Math.fround(0.1) }, false],
    ['d <> d', { d: Number.NaN }, true],
    ['d = d', { d: Number.NaN }, false],
  ]);
});

describe('operators on values of another type than they take', () => {
  table([
    // NOT BETWEEN is "v < low OR v > high" (JMS 3.8.1.2): false for a string or a boolean, not true.
    ['s NOT BETWEEN 1 AND 3', { s: 'x' }, false],
    ['b NOT BETWEEN 1 AND 3', { b: true }, false],
    ['s BETWEEN 1 AND 3', { s: 'x' }, false],
    ['NOT (s BETWEEN 1 AND 3)', { s: 'x' }, true],
    ['n NOT BETWEEN 1 AND 3', { n: 5n }, true],
    ['n NOT BETWEEN 1 AND 3', { n: 2.5 }, false],
    ['n NOT BETWEEN lo AND 3', { n: 5n }, true],
    ['n NOT BETWEEN lo AND 3', { n: 2n }, null],
    // IN takes a string: any other value is unknown (Artemis, Qpid), so NOT IN and NOT (... IN ...) do not select it either.
    ["c IN ('1', '2')", { c: 1n }, null],
    ["c NOT IN ('1', '2')", { c: 1n }, null],
    ["NOT (c IN ('1', '2'))", { c: 1n }, null],
    ["c NOT IN ('true')", { c: true }, null],
    ["c NOT IN ('1', '2')", { c: '3' }, true],
    // LIKE on a value that is not a string is false, so NOT LIKE (NOT of LIKE) is true, as on Artemis and Qpid.
    ["v LIKE '1%'", { v: 1n }, false],
    ["v NOT LIKE '1%'", { v: 1n }, true],
    ["v NOT LIKE 't%'", { v: true }, true],
    ["v NOT LIKE 't%'", {}, null],
    // Arithmetic on a string or a boolean is unknown; comparing one with a number is false.
    ['s + 1 = 2', { s: '1' }, null],
    ['-s = -1', { s: '1' }, null],
    ['s = 1', { s: '1' }, false],
    ['b = 1', { b: true }, false],
    ['b <> 1', { b: true }, false],
    ['b < 1', { b: true }, false],
    ['b = TRUE', { b: true }, true],
    ['b <> FALSE', { b: true }, true],
    ['n / 0 = 1', { n: 1n }, null],
    ['n / 0 > 1', { n: 1.0 }, true], // double: +Infinity
    ['n / 0.0 <> n / 0.0', { n: 0n }, true], // NaN
  ]);
});

describe('identifiers are Java identifiers', () => {
  table([
    // Currency symbols and connector punctuation start and continue a Java identifier.
    ['€price = 1', { '€price': 1n }, true],
    ['price€ = 1', { 'price€': 1n }, true],
    ['‿x = 1', { '‿x': 1n }, true],
    ['x‿y = 1', { 'x‿y': 1n }, true],
    ['_ = 1', { _: 1n }, true],
    ['$ = 1', { $: 1n }, true],
    ['JMSX_custom = 1', { JMSX_custom: 1n }, true],
    ['JMS_vendor = 1', { JMS_vendor: 1n }, true],
    ['a1b2 = 1', { a1b2: 1n }, true],
  ]);

  it('refuses reserved words as identifiers, digits to start one, and shows unprintable characters by code', () => {
    const cases: Array<[string, RegExp, number]> = [
      ['NULL = 1', /IS NULL/, 0],
      ['true = 1', /compares a boolean with a number/, 5],
      ['escape = 1', /expected a value/, 0],
      ['a = 1 AND between = 2', /expected a value/, 10],
      ['is IS NULL', /expected a value/, 0],
      ['Like = 1', /expected a value/, 0],
      ['1a = 1', /malformed number/, 0],
      ['a = 1\u0000', /unexpected character U\+0000/, 5],
      ['a = 1 \uD800', /unexpected character U\+D800/, 6],
      ['a\u0007 = 1', /unexpected character U\+0007/, 1],
      ['a = 1 \u00A0', /unexpected character U\+00A0/, 6],
    ];
    for (const [text, problem, position] of cases) {
      let err: unknown;
      try {
        new Selector(text);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(text)).toBeInstanceOf(SelectorError);
      expect((err as SelectorError).problem, JSON.stringify(text)).toMatch(problem);
      expect((err as SelectorError).position, JSON.stringify(text)).toBe(position);
      expect((err as SelectorError).message).not.toMatch(/[\u0000-\u001f\ud800-\udfff]/);
    }
  });
});

describe('LIKE', () => {
  const like = (pattern: string, value: SelectorValue, escape?: string) => evaluate(`v LIKE '${pattern.replace(/'/g, "''")}'${escape ? ` ESCAPE '${escape.replace(/'/g, "''")}'` : ''}`, { v: value });
  const cases: Array<[pattern: string, value: string, want: boolean, escape?: string]> = [
    // A _ is one character wherever it stands, also on text outside the BMP.
    ['%a_c', 'xa😀c', true],
    ['%a_c', 'xa😀😀c', false],
    ['_%_', '😀', false],
    ['_%_', '😀😀', true],
    ['%_😀', '😀😀', true],
    ['%_😀', '😀', false],
    ['a_%_b', 'a😀😀b', true],
    ['a_%_b', 'a😀b', false],
    ['%x_y%', 'ab😀x😀yc', true],
    ['%x_y%', 'x😀😀y', false],
    ['_', '😀', true],
    ['__', '😀', false],
    ['😀_', '😀😀', true],
    ['%😀', 'a😀', true],
    ['_b%', '😀b', true],
    // ESCAPE: one character; it makes %, _ and itself literal.
    ['a!%b', 'a%b', true, '!'],
    ['a!%b', 'axb', false, '!'],
    ['a!_b', 'a_b', true, '!'],
    ['a!_b', 'axb', false, '!'],
    ['a!!b', 'a!b', true, '!'],
    ['%!%%', 'x%y', true, '!'],
    ['%!%%', 'xy', false, '!'],
    ['a%%b', 'a%b', true, '%'],
    ['a%%b', 'axb', false, '%'],
    ["it''s%", "it's here", true, "'"],
    ['😀%%', '%x', true, '😀'],
    ['😀%%', 'x%', false, '😀'],
    ['😀%%', '😀x', true],
    ['%\\_%', 'a_b', true, '\\'],
    ['%\\_%', 'ab', false, '\\'],
    // LIKE is case-sensitive and _ matches a line break.
    ['A%', 'abc', false],
    ['a_c', 'a\nc', true],
  ];
  for (const [pattern, value, want, escape] of cases) {
    it(`'${value}' LIKE '${pattern}'${escape ? ` ESCAPE '${escape}'` : ''} is ${want}`, () => expect(like(pattern, value, escape)).toBe(want));
  }

  it("the LIKE work allowed is per message, shared by all the selector's LIKEs", () => {
    // One LIKE of a `_` run over this value takes about 3 comparisons a place: within the limit alone...
    const value = 'a'.repeat(Math.floor(LIKE_STEP_LIMIT / 5));
    expect(evaluate("v LIKE '%a_b%'", { v: value })).toBe(false);
    // ...but not three of them on one message: the third is unknown, so the message is not selected.
    expect(evaluate("v LIKE '%a_b%' OR v LIKE '%a_c%' OR v LIKE '%a_d%'", { v: value })).toBe(null);
    // Another message starts afresh.
    const s = new Selector("v LIKE '%a_b%'");
    for (let i = 0; i < 5; i++) expect(s.evaluate([value])).toBe(false);
  });

  it('plain searches may pass over the values LIKE_SCAN_FACTOR times per message, not once per LIKE', () => {
    const value = 'a'.repeat(100_000);
    const likes = (n: number) => Array.from({ length: n }, (_, i) => `v LIKE '%x${i}%'`).join(' OR ');
    expect(evaluate(likes(LIKE_SCAN_FACTOR - 1), { v: value })).toBe(false);
    expect(evaluate(likes(LIKE_SCAN_FACTOR + 2), { v: value })).toBe(null);
    // A LIKE anchored at the start or end searches nothing.
    expect(evaluate(Array.from({ length: 100 }, () => "v LIKE 'b%'").join(' OR '), { v: value })).toBe(false);
  });

  it('a LIKE on a string literal is answered', () => {
    expect(evaluate("'abc' LIKE '%b%'")).toBe(true);
    expect(evaluate(`'${'a'.repeat(4000)}' LIKE '%b%'`)).toBe(false);
  });

  it('a run without _ is still found on a long value', () => {
    const value = `${'a'.repeat(1_000_000)}b`;
    expect(like('%ab', value)).toBe(true);
    expect(like('%ab%', value)).toBe(true);
    expect(like('%ba%', value)).toBe(false);
  });
});

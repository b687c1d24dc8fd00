// The JMS message selector language (src/selector/): its grammar, SQL's three-valued
// logic, the type rules, LIKE, and the bounds on hostile selectors.
import { describe, expect, it } from 'vitest';
import { LIKE_STEP_LIMIT, MAX_SELECTOR_DEPTH, MAX_SELECTOR_LENGTH, MAX_SELECTOR_TOKENS, Selector, SelectorError, type SelectorValue } from '../../../src/selector/selector.js';

/** The selector's value for a message with these properties (absent ones are null). */
function evaluate(text: string, props: Record<string, SelectorValue> = {}): boolean | null {
  const s = new Selector(text);
  return s.evaluate(s.identifiers.map((name) => props[name] ?? null));
}

function refusal(text: string): SelectorError {
  try {
    new Selector(text);
  } catch (err) {
    expect(err).toBeInstanceOf(SelectorError);
    return err as SelectorError;
  }
  throw new Error(`'${text}' was taken`);
}

describe('selector literals and identifiers', () => {
  it('reads strings with doubled quotes, and every numeric form JMS allows', () => {
    expect(evaluate("s = 'it''s'", { s: "it's" })).toBe(true);
    expect(evaluate("s = ''", { s: '' })).toBe(true);
    expect(evaluate('n = 57', { n: 57n })).toBe(true);
    expect(evaluate('n = -957', { n: -957n })).toBe(true);
    expect(evaluate('n = +62', { n: 62n })).toBe(true);
    expect(evaluate('n = 0x1F', { n: 31n })).toBe(true);
    expect(evaluate('n = 017', { n: 15n })).toBe(true);
    expect(evaluate('n = 10L', { n: 10n })).toBe(true);
    expect(evaluate('n = 7E3', { n: 7000 })).toBe(true);
    expect(evaluate('n = -57.9E2', { n: -5790 })).toBe(true);
    expect(evaluate('n = 7.', { n: 7 })).toBe(true);
    expect(evaluate('n = .5', { n: 0.5 })).toBe(true);
    expect(evaluate('n = 1.5F', { n: 1.5 })).toBe(true);
    expect(evaluate('n = 9223372036854775807', { n: 9223372036854775807n })).toBe(true);
    expect(evaluate('b = TRUE', { b: true })).toBe(true);
    expect(evaluate('b = false', { b: false })).toBe(true);
  });

  it('takes keywords in any case, and identifiers by exact case', () => {
    expect(evaluate("colour = 'blue' and weight > 2", { colour: 'blue', weight: 3n })).toBe(true);
    expect(evaluate("Colour = 'blue'", { colour: 'blue' })).toBe(null);
    expect(new Selector('a = 1 OR A = 2 or a = 3').identifiers).toEqual(['a', 'A']);
    expect(evaluate('$x_1 = 1 AND été = 2', { $x_1: 1n, été: 2n })).toBe(true);
  });

  it('an identifier alone is a condition when it holds a boolean', () => {
    expect(evaluate('flag', { flag: true })).toBe(true);
    expect(evaluate('flag', { flag: false })).toBe(false);
    expect(evaluate('flag', { flag: 'yes' })).toBe(null);
    expect(evaluate('NOT flag', {})).toBe(null);
  });
});

describe('three-valued logic', () => {
  const T = 'x = 1';
  const F = 'x = 2';
  const U = 'missing = 1';
  const values = { x: 1n };
  const cases: Array<[string, boolean | null]> = [
    [`${T} AND ${T}`, true],
    [`${T} AND ${F}`, false],
    [`${T} AND ${U}`, null],
    [`${F} AND ${U}`, false],
    [`${U} AND ${F}`, false],
    [`${U} AND ${U}`, null],
    [`${T} OR ${U}`, true],
    [`${U} OR ${T}`, true],
    [`${F} OR ${U}`, null],
    [`${F} OR ${F}`, false],
    [`NOT (${U})`, null],
    [`NOT (${T})`, false],
    [`NOT (${F})`, true],
  ];
  for (const [text, want] of cases) it(`${text} is ${want}`, () => expect(evaluate(text, values)).toBe(want));

  it('a message is selected only when the selector is true', () => {
    const s = new Selector('missing = 1 OR x = 2');
    expect(s.matches([null, 1n])).toBe(false);
    expect(s.matches([null, 2n])).toBe(true);
  });
});

describe('comparison and arithmetic', () => {
  it('compares numbers of either kind by value', () => {
    expect(evaluate('n = 1.0', { n: 1n })).toBe(true);
    expect(evaluate('n < 2.5', { n: 2n })).toBe(true);
    expect(evaluate('n >= 3', { n: 3.0 })).toBe(true);
    expect(evaluate('n <> 3', { n: 4n })).toBe(true);
    expect(evaluate('n <= -1', { n: 0n })).toBe(false);
  });

  it('unlike types compare false, and a null compares unknown', () => {
    expect(evaluate("n = '1'", { n: 1n })).toBe(false);
    expect(evaluate('s = 1', { s: '1' })).toBe(false);
    expect(evaluate('s > 1', { s: 'b' })).toBe(false);
    expect(evaluate('a = b', { a: true, b: 'true' })).toBe(false);
    expect(evaluate('n = 1', {})).toBe(null);
    expect(evaluate('n <> 1', {})).toBe(null);
  });

  it('does Java long arithmetic on exact numbers and double arithmetic otherwise', () => {
    expect(evaluate('n / 2 = 3', { n: 7n })).toBe(true);
    expect(evaluate('n / 2 = 3.5', { n: 7.0 })).toBe(true);
    expect(evaluate('n * 2 + 1 = 15', { n: 7n })).toBe(true);
    expect(evaluate('-n - 1 = -8', { n: 7n })).toBe(true);
    expect(evaluate('n + 1 < n', { n: 9223372036854775807n })).toBe(true); // wraps, as Java's long does
    expect(evaluate('n / 0 = 1', { n: 7n })).toBe(null);
    expect(evaluate('n + 1 = 2', {})).toBe(null);
    expect(evaluate('n + 1 = 2', { n: 'one' })).toBe(null);
    expect(evaluate('2 + 3 * 4 = 14')).toBe(true);
    expect(evaluate('(2 + 3) * 4 = 20')).toBe(true);
  });

  it('BETWEEN and NOT BETWEEN, inclusive, unknown on null', () => {
    expect(evaluate('n BETWEEN 1 AND 3', { n: 1n })).toBe(true);
    expect(evaluate('n BETWEEN 1 AND 3', { n: 3.0 })).toBe(true);
    expect(evaluate('n BETWEEN 1 AND 3', { n: 4n })).toBe(false);
    expect(evaluate('n NOT BETWEEN 1 AND 3', { n: 4n })).toBe(true);
    expect(evaluate('n NOT BETWEEN 1 AND 3', { n: 2n })).toBe(false);
    expect(evaluate('n BETWEEN 1 AND 3', {})).toBe(null);
    expect(evaluate('n NOT BETWEEN 1 AND 3', {})).toBe(null);
    expect(evaluate('n BETWEEN lo AND 3', { n: 5n })).toBe(false); // false AND unknown
  });

  it('IN and NOT IN over strings', () => {
    expect(evaluate("c IN ('UK', 'US')", { c: 'UK' })).toBe(true);
    expect(evaluate("c IN ('UK', 'US')", { c: 'FR' })).toBe(false);
    expect(evaluate("c NOT IN ('UK', 'US')", { c: 'FR' })).toBe(true);
    expect(evaluate("c NOT IN ('UK', 'US')", { c: 'UK' })).toBe(false);
    expect(evaluate("c IN ('UK')", {})).toBe(null);
    expect(evaluate("c NOT IN ('UK')", {})).toBe(null);
    expect(evaluate("c IN ('1')", { c: 1n })).toBe(null); // not a string: unknown, as on Artemis and Qpid
  });

  it('IS NULL and IS NOT NULL', () => {
    expect(evaluate('c IS NULL', {})).toBe(true);
    expect(evaluate('c IS NULL', { c: 'x' })).toBe(false);
    expect(evaluate('c IS NOT NULL', { c: 'x' })).toBe(true);
    expect(evaluate('c IS NOT NULL', {})).toBe(false);
  });
});

describe('LIKE', () => {
  const like = (pattern: string, value: string | null, escape?: string) => evaluate(`v LIKE '${pattern.replace(/'/g, "''")}'${escape ? ` ESCAPE '${escape}'` : ''}`, { v: value });
  it('matches _ and % as JMS says', () => {
    expect(like('12%3', '123')).toBe(true);
    expect(like('12%3', '12993')).toBe(true);
    expect(like('12%3', '1234')).toBe(false);
    expect(like('l_se', 'lose')).toBe(true);
    expect(like('l_se', 'loose')).toBe(false);
    expect(like('%', '')).toBe(true);
    expect(like('%%', 'x')).toBe(true);
    expect(like('_', '')).toBe(false);
    expect(like('a%b%c', 'abc')).toBe(true);
    expect(like('a%b%c', 'axxbyyc')).toBe(true);
    expect(like('a%b%c', 'acb')).toBe(false);
    expect(like('%ab%ab%', 'xabab')).toBe(true);
    expect(like('%ab%ab%', 'xab')).toBe(false);
    expect(like('%a_c%', 'zzabcz')).toBe(true);
    expect(like('%a_c%', 'zzacz')).toBe(false);
    expect(like('abc', 'abc')).toBe(true);
    expect(like('abc', 'abcd')).toBe(false);
    expect(like('.*', 'anything')).toBe(false); // no regular expression in sight
  });

  it('honours ESCAPE, and NOT LIKE', () => {
    expect(like('\\_%', '_foo', '\\')).toBe(true);
    expect(like('\\_%', 'xfoo', '\\')).toBe(false);
    expect(like('100!%', '100%', '!')).toBe(true);
    expect(like('100!%', '1000', '!')).toBe(false);
    expect(evaluate("v NOT LIKE 'a%'", { v: 'abc' })).toBe(false);
    expect(evaluate("v NOT LIKE 'a%'", { v: 'xbc' })).toBe(true);
    expect(evaluate("v NOT LIKE 'a%'", {})).toBe(null);
    expect(evaluate("v LIKE 'a%'", { v: 1n })).toBe(false);
  });

  it('a _ is one character, also outside the BMP', () => {
    expect(like('a_b', 'a😀b')).toBe(true);
    expect(like('a__b', 'a😀b')).toBe(false);
    expect(like('%😀%', 'xx😀yy')).toBe(true);
  });

  it('a pattern whose _ matching would take more than LIKE_STEP_LIMIT steps is unknown (not 10^8 steps)', () => {
    const pattern = `%${'a_'.repeat(1000)}b%`;
    expect(2000 * 200_000).toBeGreaterThan(LIKE_STEP_LIMIT);
    expect(like(pattern, 'a'.repeat(200_000))).toBe(null);
    // Within the limit the same kind of pattern is answered.
    expect(like(`%${'a_'.repeat(3)}b%`, `${'a'.repeat(50)}c`)).toBe(false);
    expect(like(`%${'a_'.repeat(3)}b%`, `${'a'.repeat(50)}axaxaxb`)).toBe(true);
  });
});

describe('refused selectors name the problem and its place', () => {
  const cases: Array<[string, RegExp, number | undefined]> = [
    ['', /empty/, 0],
    ["colour = 'blue", /not closed/, 9],
    ['colour = ', /expected a value/, 9],
    ['a = 1 b = 2', /unexpected identifier 'b'/, 6],
    ["'a' > 'b'", /takes numbers, not a string/, 0],
    ["a = 1 AND 'x'", /must be a condition/, 10],
    ['5', /must be a condition/, 0],
    ["a + 'x' = 1", /takes numbers/, 4],
    ["1 = 'x'", /compares a number with a string/, 2],
    ['a IN (1, 2)', /string literal in an IN list/, 6],
    ["a LIKE 'x' ESCAPE 'ab'", /one character/, 18],
    ["a LIKE 'x!' ESCAPE '!'", /ends with its escape/, 7],
    ['a = 09', /octal/, 4],
    ['a = 0x', /hexadecimal/, 4],
    ['a = 12abc', /malformed number/, 4],
    ['a = 99999999999999999999', /larger than a long/, 4],
    ['a # 1', /unexpected character '#'/, 2],
    ['a IS 1', /expected NULL/, 5],
    ['a = NULL', /IS NULL/, 4],
    ['(a = 1', /to close the parenthesis/, 6],
    ['a BETWEEN 1 OR 2', /expected AND/, 12],
  ];
  for (const [text, problem, position] of cases) {
    it(JSON.stringify(text), () => {
      const err = refusal(text);
      expect(err.problem).toMatch(problem);
      expect(err.position).toBe(position);
      if (position !== undefined) expect(err.message).toContain(`at character ${position + 1}`);
    });
  }
});

describe('bounds', () => {
  it('refuses a selector longer than MAX_SELECTOR_LENGTH', () => {
    const text = `a = '${'x'.repeat(MAX_SELECTOR_LENGTH)}'`;
    expect(refusal(text).problem).toMatch(`at most ${MAX_SELECTOR_LENGTH}`);
    expect(() => new Selector(`a = '${'x'.repeat(MAX_SELECTOR_LENGTH - 10)}'`)).not.toThrow();
  });

  it('refuses more than MAX_SELECTOR_TOKENS tokens', () => {
    const list = Array.from({ length: MAX_SELECTOR_TOKENS / 2 + 10 }, () => "''").join(',');
    expect(list.length).toBeLessThan(MAX_SELECTOR_LENGTH);
    expect(refusal(`a IN (${list})`).problem).toMatch(`more than ${MAX_SELECTOR_TOKENS} tokens`);
  });

  it('refuses nesting deeper than MAX_SELECTOR_DEPTH, without exhausting the stack', () => {
    const deep = (n: number) => `${'('.repeat(n)}a = 1${')'.repeat(n)}`;
    expect(() => new Selector(deep(MAX_SELECTOR_DEPTH - 2))).not.toThrow();
    expect(refusal(deep(1000)).problem).toMatch('nests deeper');
    expect(refusal(`${'NOT '.repeat(1000)}a`).problem).toMatch('nests deeper');
    expect(refusal(`a = ${'-'.repeat(1000)}1`).problem).toMatch('nests deeper');
    expect(refusal(`a = 1${' + 1'.repeat(200)}`).problem).toMatch('nests deeper');
  });

  it('a long OR chain is one flat node, not a deep tree', () => {
    const text = Array.from({ length: 300 }, (_, i) => `a = ${i}`).join(' OR ');
    expect(evaluate(text, { a: 299n })).toBe(true);
    expect(evaluate(text, { a: 300n })).toBe(false);
  });
});

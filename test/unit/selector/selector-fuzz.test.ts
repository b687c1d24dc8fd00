// Hostile selectors: random token soups and mutations of good selectors either parse
// or are refused with a SelectorError (never another throw, never a hang), and a
// selector that parses evaluates on any values without throwing.
import { describe, expect, it } from 'vitest';
import { MAX_SELECTOR_DEPTH, MAX_SELECTOR_LENGTH, Selector, SelectorError, type SelectorValue } from '../../../src/selector/selector.js';
import { prng as random } from '../../../src/util/prng.js';

const GOOD = [
  "colour = 'blue' AND weight > 2",
  "JMSCorrelationID = 'abc'",
  'a BETWEEN 1 AND 10 OR NOT (b IS NULL)',
  "name LIKE 'a\\_%' ESCAPE '\\' AND c IN ('x', 'y''z')",
  '(n * 2 + 1) / 3 >= -0x1F AND f < 1.5E3',
  "JMSPriority > 4 AND JMSDeliveryMode = 'PERSISTENT' AND flag",
];

const PIECES = ['a', 'b', 'JMSType', "'s'", "''", '1', '-2', '0x10', '07', '1.5', '.5e3', 'TRUE', 'FALSE', 'NULL', 'AND', 'OR', 'NOT', 'BETWEEN', 'IN', 'LIKE', 'ESCAPE', 'IS', '=', '<>', '<', '>', '<=', '>=', '+', '-', '*', '/', '(', ')', ',', "'", '😀', '\u0000', '#', '.', 'e'];

const VALUES: SelectorValue[] = [null, true, false, 0n, 1n, -1n, 9223372036854775807n, -(1n << 63n), (1n << 64n) - 1n, 0, 1.5, -0, Number.NaN, Infinity, -Infinity, '', 's', 'x', 'a😀b', "y'z", '\uD800', 'a\u0000b', '\uDC00\uD800'];

/** Selectors that parsed (so the fuzz is seen to reach evaluation, not only refusals). */
let parsed = 0;

function attempt(text: string, pick: () => number): void {
  let selector: Selector;
  try {
    selector = new Selector(text);
  } catch (err) {
    if (!(err instanceof SelectorError)) throw new Error(`${JSON.stringify(text)} threw ${String(err)}`);
    return;
  }
  parsed++;
  for (let k = 0; k < 4; k++) {
    const values = selector.identifiers.map(() => VALUES[Math.floor(pick() * VALUES.length)]!);
    const v = selector.evaluate(values);
    expect([true, false, null]).toContain(v);
  }
}

describe('selector fuzz', () => {
  it('random token sequences parse or are refused with a SelectorError', () => {
    const pick = random(1);
    for (let i = 0; i < 5000; i++) {
      const n = 1 + Math.floor(pick() * 20);
      const parts = Array.from({ length: n }, () => PIECES[Math.floor(pick() * PIECES.length)]!);
      attempt(parts.join(pick() < 0.8 ? ' ' : ''), pick);
    }
  });

  it('mutated good selectors parse or are refused with a SelectorError', () => {
    const pick = random(2);
    for (let i = 0; i < 5000; i++) {
      const chars = [...GOOD[i % GOOD.length]!];
      const edits = 1 + Math.floor(pick() * 4);
      for (let e = 0; e < edits; e++) {
        const at = Math.floor(pick() * (chars.length + 1));
        const r = pick();
        if (r < 0.33) chars.splice(at, 1);
        else if (r < 0.66) chars.splice(at, 0, String.fromCharCode(32 + Math.floor(pick() * 95)));
        else chars.splice(at, 0, ...PIECES[Math.floor(pick() * PIECES.length)]!);
      }
      attempt(chars.join(''), pick);
    }
    expect(parsed).toBeGreaterThan(500);
  });

  it('every construct nested to the limit is taken, and one level more is refused, never a stack overflow', () => {
    const pick = random(4);
    const d = MAX_SELECTOR_DEPTH;
    // Each makes a selector of about n levels around a condition or a number.
    const shapes: Array<(n: number) => string> = [
      (n) => `${'('.repeat(n)}a = 1${')'.repeat(n)}`,
      (n) => `${'NOT '.repeat(n)}a`,
      (n) => `a = ${'-'.repeat(n)}b`,
      (n) => `a = 1${' * b'.repeat(n)}`,
      (n) => `a BETWEEN ${'('.repeat(n)}1${')'.repeat(n)} AND 2`,
      (n) => `${'('.repeat(n)}a${')'.repeat(n)} IN ('x')`,
      (n) => `${'('.repeat(n)}a${')'.repeat(n)} LIKE 'x%'`,
      (n) => `${'('.repeat(n)}a${')'.repeat(n)} IS NOT NULL`,
      (n) => `${'(a IS NULL) = ('.repeat(n)}TRUE${')'.repeat(n)}`,
      (n) => `${'(a = 1 OR '.repeat(n)}b${')'.repeat(n)}`,
    ];
    for (const shape of shapes) {
      let deepestTaken = 0;
      for (const n of [1, d / 2, d - 3, d - 2, d - 1, d, d + 1, 10 * d, 2000]) {
        const text = shape(n);
        if (text.length > MAX_SELECTOR_LENGTH) continue;
        try {
          const s = new Selector(text);
          deepestTaken = n;
          attempt(text, pick);
          expect(s.identifiers.length).toBeGreaterThan(0);
        } catch (err) {
          if (!(err instanceof SelectorError)) throw err;
          expect(err.problem).toMatch(/nests deeper|tokens/);
        }
      }
      expect(deepestTaken, shape(2)).toBeGreaterThanOrEqual(d / 2);
      expect(deepestTaken, shape(2)).toBeLessThanOrEqual(d + 1);
    }
  });

  it('huge numeric literals, NUL and lone surrogates anywhere are refused or taken, with a SelectorError only', () => {
    const pick = random(5);
    const texts = [
      `a = ${'9'.repeat(4000)}`,
      `a = -${'9'.repeat(4000)}`,
      `a = 0x${'f'.repeat(4000)}`,
      `a = 0${'7'.repeat(4000)}`,
      `a = 1e${'9'.repeat(4000)}`,
      `a = .${'0'.repeat(4000)}1`,
      `a = 1${'0'.repeat(400)}.5`,
      `a = ${'1'.repeat(19)}L`,
      "a = 'x\u0000y'",
      'a\u0000 = 1',
      "a = '\uD800'",
      '\uDC00 = 1',
      `a LIKE '\uD800%' ESCAPE '\uDC00'`,
      `a LIKE 'x' ESCAPE '\uD83D\uDE00'`,
    ];
    for (const text of texts) attempt(text, pick);
    // Random UTF-16 units (any of the 65,536, surrogates and controls included) spliced into good selectors.
    for (let i = 0; i < 3000; i++) {
      const chars = [...GOOD[i % GOOD.length]!];
      for (let e = 0; e < 3; e++) chars.splice(Math.floor(pick() * (chars.length + 1)), 0, String.fromCharCode(Math.floor(pick() * 0x10000)));
      attempt(chars.join(''), pick);
    }
  });

  it('long LIKE patterns against long values, and long IN lists, answer (within the per-message budget)', () => {
    const pick = random(6);
    const alphabet = ['a', 'b', '_', '%', '😀', '\uD800'];
    const value = Array.from({ length: 200_000 }, () => alphabet[Math.floor(pick() * 2)]).join('');
    for (let i = 0; i < 20; i++) {
      const pattern = Array.from({ length: 1000 + Math.floor(pick() * 1500) }, () => alphabet[Math.floor(pick() * alphabet.length)]).join('');
      const s = new Selector(`v LIKE '${pattern}' OR v NOT LIKE '%${pattern.slice(0, 500)}%'`);
      expect([true, false, null]).toContain(s.evaluate([value]));
    }
    const list = Array.from({ length: 600 }, (_, i) => `'${i}'`).join(',');
    const inList = new Selector(`v IN (${list})`);
    expect(inList.evaluate(['599'])).toBe(true);
    expect(inList.evaluate(['600'])).toBe(false);
    expect(inList.evaluate([599n])).toBe(null);
  });

  it('long and deep hostile selectors are refused, not a stack overflow', () => {
    const pick = random(3);
    for (const text of ['('.repeat(4000), 'NOT '.repeat(1000), `a${' OR a'.repeat(800)}`, `a = ${'+'.repeat(4000)}1`, `a IN (${"'x',".repeat(1000)}'x')`, "'".repeat(4001), `a LIKE '${'%_'.repeat(1000)}'`]) {
      attempt(text, pick);
    }
  });
});

// Hostile selectors: random token soups and mutations of good selectors either parse
// or are refused with a SelectorError (never another throw, never a hang), and a
// selector that parses evaluates on any values without throwing.
import { describe, expect, it } from 'vitest';
import { Selector, SelectorError, type SelectorValue } from '../../../src/selector/selector.js';
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

const VALUES: SelectorValue[] = [null, true, false, 0n, 1n, -1n, 9223372036854775807n, 0, 1.5, -0, Number.NaN, Infinity, '', 's', 'x', 'a😀b', "y'z"];

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

  it('long and deep hostile selectors are refused, not a stack overflow', () => {
    const pick = random(3);
    for (const text of ['('.repeat(4000), 'NOT '.repeat(1000), `a${' OR a'.repeat(800)}`, `a = ${'+'.repeat(4000)}1`, `a IN (${"'x',".repeat(1000)}'x')`, "'".repeat(4001), `a LIKE '${'%_'.repeat(1000)}'`]) {
      attempt(text, pick);
    }
  });
});

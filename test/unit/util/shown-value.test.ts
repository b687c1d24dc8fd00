// shownValue (src/util/safe-string.ts): the one way a refusal shows a value a user or a
// peer sent, for queue settings (broker/settings.ts) and DR requests and answers alike.
import { describe, expect, it } from 'vitest';
import { parseBoolean, parseCount, parseQueueSettings } from '../../../src/broker/settings.js';
import { listOf } from '../../../src/dr/config.js';
import { SHOWN_VALUE_CHARS, shownValue } from '../../../src/util/safe-string.js';

describe('shownValue', () => {
  it('shows strings quoted, numbers, booleans and bigints as themselves, lists and maps as JSON', () => {
    expect(shownValue('abc')).toBe('"abc"');
    expect(shownValue(5)).toBe('5');
    expect(shownValue(12345678901234567890n)).toBe('12345678901234567890');
    expect(shownValue(true)).toBe('true');
    expect(shownValue(null)).toBe('null');
    // Not JSON's null: a peer that sent NaN is told it sent NaN.
    expect(shownValue(Number.NaN)).toBe('NaN');
    expect(shownValue(undefined)).toBe('undefined');
    expect(shownValue(['a', 1, [2n]])).toBe('["a",1,[2]]');
    expect(shownValue({ a: 'x', b: [1] })).toBe('{"a":"x","b":[1]}');
    expect(shownValue(new Map<unknown, unknown>([['k', 1], [2, 'v']]))).toBe('{"k":1,2:"v"}');
    expect(shownValue(Buffer.alloc(3_000_000))).toBe('<3000000 bytes>');
    expect(shownValue(Symbol('s'))).toBe('symbol');
  });

  it('escapes control characters and quotes, so a value cannot forge a line or end the quote', () => {
    expect(shownValue('a\nb"c\u0000\u001b[31m')).toBe('"a\\nb\\"c\\u0000\\u001b[31m"');
    expect(shownValue({ 'k\r\n': '\u0007' })).toBe('{"k\\r\\n":"\\u0007"}');
    expect(shownValue('x\n'.repeat(1000))).not.toMatch(/\n/);
  });

  it('cuts a long string, list, map or deep nesting at the budget, marked with ...', () => {
    const n = SHOWN_VALUE_CHARS;
    expect(shownValue('x'.repeat(10_000_000))).toBe(`"${'x'.repeat(n - 2)}"...`);
    expect(shownValue('x'.repeat(n - 2))).toBe(`"${'x'.repeat(n - 2)}"`);
    expect(shownValue('x'.repeat(n - 1))).toBe(`"${'x'.repeat(n - 2)}"...`);
    const list = shownValue(Array.from({ length: 1_000_000 }, (_, i) => i));
    expect(list.length).toBeLessThanOrEqual(n + 3);
    expect(list).toMatch(/^\[0,1,2,.*\.\.\.$/);
    const map = shownValue(Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i])));
    expect(map.length).toBeLessThanOrEqual(n + 3);
    expect(map).toMatch(/^\{"k0":0,"k1":1,.*\.\.\.$/);
    let deep: unknown = 'bottom';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(shownValue(deep)).toBe(`${'['.repeat(n)}...`);
    // Escapes are never cut in half: the cut is made before quoting.
    expect(shownValue('\u0001'.repeat(1000))).toBe(`"${'\\u0001'.repeat(n - 2)}"...`);
  });

  it('does not call a toString a peer sent as a map key', () => {
    expect(shownValue({ toString: 'x', valueOf: 1 })).toBe('{"toString":"x","valueOf":1}');
  });

  it('queue settings refusals and DR request refusals show values the same way', () => {
    const long = `a\n${'x'.repeat(200_000)}`;
    const cut = `"a\\n${'x'.repeat(SHOWN_VALUE_CHARS - 4)}"...`;
    expect(() => parseQueueSettings({ 'max-count': long })).toThrow(`max-count must be a whole number from 0 to ${Number.MAX_SAFE_INTEGER} (digits only), not ${cut}`);
    expect(() => listOf({ toString: long })).toThrow(/^queues: expected up to 10000 names, as a list of names or a comma-separated string, not \{"toString":"a\\nx+"\.\.\.$/);
    expect(() => parseBoolean('durable', 'yes\r\nno')).toThrow('durable must be true or false, not "yes\\r\\nno"');
    expect(() => parseCount('count', { toString: 'boom' })).toThrow('count must be a whole number from 0 to 9007199254740991 (digits only), not {"toString":"boom"}');
    expect(() => parseBoolean('durable', 2n)).toThrow('durable must be true or false, not 2');
  });
});

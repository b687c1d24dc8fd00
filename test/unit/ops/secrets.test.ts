// The redaction every output goes through: URL credentials cut structurally, known
// passwords cut wherever they appear, JSON-escaped spellings too.
import { describe, expect, it } from 'vitest';
import { redact, redactValue, registerSecret } from '../../../src/ops/secrets.js';

describe('secrets', () => {
  it('redact - the password of a broker URL, in every spelling tandem reads', () => {
    for (const [text, want] of [
      ['ha/pw1@127.0.0.1:5672,127.0.0.1:5673', 'ha/***@127.0.0.1:5672,127.0.0.1:5673'],
      ['amqp://u/p@h:5672', 'amqp://u/***@h:5672'],
      ['source dr:x@y@host', 'source dr/***@host'],
      ['"brokers-url":"u/p@[::1]:5672"', '"brokers-url":"u/***@[::1]:5672"'],
      ['no primary found in dr/s@a:1: a:1: refused', 'no primary found in dr/***@a:1: a:1: refused'],
    ]) {
      expect(redact(text!)).toBe(want);
    }
    // No credentials: unchanged.
    for (const text of ['127.0.0.1:5672', 'dr@a:1,b:2', 'queue a/b has 3 messages']) expect(redact(text)).toBe(text);
  });

  it('redact - a registered password anywhere, also as JSON spells it; short ones only in URLs', () => {
    registerSecret('Quoted"Pass\\word');
    registerSecret('abc');
    expect(redact('got Quoted"Pass\\word here')).toBe('got *** here');
    expect(redact(JSON.stringify({ err: 'bad Quoted"Pass\\word' }))).toBe('{"err":"bad ***"}');
    expect(redact('abc abc')).toBe('abc abc');
  });

  it('redactValue - plain objects and arrays deeply; buffers and class instances as they are', () => {
    const buf = Buffer.from('u/p@h');
    const date = new Date(0);
    expect(redactValue({ a: ['u/p@h'], b: { c: 'u/p@h' }, buf, date, n: 1 })).toEqual({ a: ['u/***@h'], b: { c: 'u/***@h' }, buf, date, n: 1 });
  });
});

// What `tandem queue browse` shows of one message's bytes (src/admin/browsed-message.ts):
// every field a sender chose escaped for a terminal, everything bounded, a body as
// text, hex or JSON and cut at --body-bytes on a character boundary, bytes that do not
// decode shown as unreadable.
import { describe, expect, it } from 'vitest';
import { SHOWN, browsedJson, browsedText, cutText, describeBrowsed, plainOf } from '../../../src/admin/browsed-message.js';
import { Encoder } from '../../../src/amqp/engine/encoder.js';
import { encodeMessage } from '../../../src/amqp/engine/message.js';
import { type AmqpValue, amqp } from '../../../src/amqp/engine/types.js';
import { printable, printableJson } from '../../../src/ops/printable.js';

/** Anything a terminal would act on: C0, DEL, C1, line/paragraph separators, bidi marks and overrides. */
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/;
const EVIL = 'x\u001b]0;pwned\u0007\u001b[2J\u009b1m\u2028\u2029\u202e\u2066\u200f\u061c\u007f\r\ny';

const section = (code: number, value: AmqpValue): AmqpValue => amqp.described(amqp.ulong(code), value);

function encode(...sections: AmqpValue[]): Buffer {
  const e = new Encoder(256);
  for (const s of sections) e.write(s);
  return e.bytes();
}

describe('printable', () => {
  it('printable - escapes C0, DEL, C1, U+2028/2029 and bidi controls, and nothing else', () => {
    const out = printable(EVIL);
    expect(out).not.toMatch(RAW_CONTROL);
    expect(out).not.toContain('\n');
    expect(out).toBe('x\\x1b]0;pwned\\x07\\x1b[2J\\x9b1m\\u2028\\u2029\\u202e\\u2066\\u200f\\u061c\\x7f\\x0d\\x0ay');
    expect(printable('plain é 中文 😀 \\x1b')).toBe('plain é 中文 😀 \\x1b');
  });

  it('printableJson - the same JSON to a parser, with none of those raw', () => {
    const json = printableJson(JSON.stringify({ [EVIL]: [EVIL] }, null, 2));
    expect(json.replace(/\n/g, '')).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(json)).toEqual({ [EVIL]: [EVIL] });
  });
});

describe('describeBrowsed', () => {
  it('browsed message - header defaults, properties, annotations and application properties by their AMQP names', () => {
    const bytes = encode(
      section(0x70, amqp.list([amqp.boolean(true), amqp.ubyte(9), amqp.uint(5000), amqp.null(), amqp.uint(2)])),
      section(0x72, amqp.map([[amqp.symbol('x-opt-tandem-dead-letter-reason'), amqp.string('expired')], [amqp.symbol('x-opt-delivery-time'), amqp.timestamp(0)]])),
      section(0x73, amqp.list([amqp.uuid(Buffer.alloc(16, 0xab)), amqp.binary(Buffer.from('bob')), amqp.string('dest'), amqp.string('subj')])),
      section(0x74, amqp.map([[amqp.string('big'), amqp.ulong(2n ** 63n)], [amqp.string('nan'), amqp.double(Number.NaN)]])),
      section(0x77, amqp.string('hi')),
    );
    const m = describeBrowsed(bytes, 3, 200);
    expect(m).toEqual({
      position: 3,
      size: bytes.length,
      'delivery-count': 2,
      redelivered: true,
      durable: true,
      priority: 9,
      ttl: 5000,
      'message-id': 'abababab-abab-abab-abab-abababababab',
      'user-id': { binary: '626f62' },
      to: 'dest',
      subject: 'subj',
      'message-annotations': { 'x-opt-tandem-dead-letter-reason': 'expired', 'x-opt-delivery-time': '1970-01-01T00:00:00.000Z' },
      'application-properties': { big: '9223372036854775808', nan: 'NaN' },
      body: { section: 'amqp-value', type: 'string', encoding: 'utf8', text: 'hi', bytes: 2, cut: 0 },
    });
    const plain = describeBrowsed(encodeMessage({ body: null }), 1, 200);
    expect(plain).toMatchObject({ 'delivery-count': 0, redelivered: false, durable: false, priority: 4 });
    expect(plain).not.toHaveProperty('ttl');
  });

  it('browsed message - a body: binary as text when UTF-8 (cut between characters), else hex; other values as JSON; how much was cut', () => {
    const data = (b: Buffer) => encode(section(0x75, amqp.binary(b)));
    expect(describeBrowsed(data(Buffer.from('héllo')), 1, 2).body).toEqual({ section: 'data', type: 'binary', encoding: 'utf8', text: 'h', bytes: 6, cut: 5 });
    expect(describeBrowsed(data(Buffer.from([1, 2, 0xff, 4])), 1, 3).body).toEqual({ section: 'data', type: 'binary', encoding: 'hex', text: '0102ff', bytes: 4, cut: 1 });
    // Several data sections are one body.
    expect(describeBrowsed(encode(section(0x75, amqp.binary(Buffer.from('ab'))), section(0x75, amqp.binary(Buffer.from('cd')))), 1, 10).body).toMatchObject({ text: 'abcd', bytes: 4 });
    const map = encode(section(0x77, amqp.map([[amqp.string('k'), amqp.list([amqp.int(1), amqp.boolean(false)])]])));
    expect(describeBrowsed(map, 1, 200).body).toEqual({ section: 'amqp-value', type: 'map', encoding: 'json', text: '{"k":[1,false]}', bytes: 15, cut: 0 });
    expect(describeBrowsed(encode(section(0x76, amqp.list([amqp.int(1)])), section(0x76, amqp.list([amqp.int(2)]))), 1, 200).body).toMatchObject({ section: 'amqp-sequence', text: '[[1],[2]]' });
    expect(describeBrowsed(encode(section(0x70, amqp.list([]))), 1, 200).body).toMatchObject({ section: 'none' });
    expect(describeBrowsed(data(Buffer.from('abc')), 1, 0).body).toMatchObject({ text: '', cut: 3 });
    expect(cutText('a😀b', 4)).toEqual({ text: 'a', bytes: 6, cut: 5 });
    expect(cutText('a😀b', 5)).toEqual({ text: 'a😀', bytes: 6, cut: 1 });
  });

  it('browsed message - bytes that do not decode are unreadable, with their size', () => {
    for (const bytes of [Buffer.from([0x00, 0x53, 0x77, 0xa1, 0xff, 0x41]), Buffer.from([0xa1, 0x01, 0x41]), Buffer.from([0xff])]) {
      const m = describeBrowsed(bytes, 7, 200);
      expect(m).toMatchObject({ position: 7, size: bytes.length });
      expect(String(m.unreadable)).toMatch(/^cannot decode the message: /);
      expect(browsedText(m)).toMatch(/^message 7 \(\d+ bytes\)\n  unreadable: cannot decode/);
    }
  });

  it('browsed message - hostile strings everywhere: the text and the JSON hold no raw control character', () => {
    const bytes = encode(
      section(0x72, amqp.map([[amqp.symbol('x-\u001b[31m\u0007\u007f\r\n'), amqp.string(EVIL)]])),
      section(0x73, amqp.list([amqp.string(EVIL), amqp.null(), amqp.string(EVIL), amqp.string(EVIL)])),
      section(0x74, amqp.map([[amqp.string(EVIL), amqp.list([amqp.string(EVIL)])], [amqp.int(1), amqp.char(0x1b)]])),
      section(0x75, amqp.binary(Buffer.from(EVIL))),
    );
    const m = describeBrowsed(bytes, 1, 1000);
    const text = browsedText(m);
    expect(text).not.toMatch(RAW_CONTROL);
    // One line per field: a sender's newline forges none.
    expect(text.split('\n')).toHaveLength(14);
    const json = browsedJson(m);
    expect(json.replace(/\n/g, '')).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(json)).toMatchObject({ subject: EVIL, body: { text: EVIL } });
  });

  it('browsed message - maps, lists, strings and binary in sections are bounded, and say what was left out', () => {
    const many = amqp.map(Array.from({ length: 500 }, (_, i) => [amqp.string(`k${i}`), amqp.string('v'.repeat(5000))] as [AmqpValue, AmqpValue]));
    const m = describeBrowsed(encode(section(0x74, many), section(0x77, amqp.list([]))), 1, 200);
    const props = m['application-properties'] as Record<string, string>;
    expect(Object.keys(props)).toHaveLength(SHOWN.items + 1);
    expect(props.k0).toBe(`${'v'.repeat(SHOWN.chars)}... ${5000 - SHOWN.chars} more characters`);
    expect(props['...']).toBe(`... ${500 - SHOWN.items} more entries`);
    expect(plainOf(amqp.binary(Buffer.alloc(1000)), { values: 10 })).toEqual({ binary: `${'00'.repeat(SHOWN.binaryBytes)}... ${1000 - SHOWN.binaryBytes} more bytes` });
    // Deeply nested lists: at most SHOWN.values values are looked at in all.
    let deep: AmqpValue = amqp.list(Array.from({ length: 50 }, () => amqp.int(1)));
    for (let i = 0; i < 20; i++) deep = amqp.list(Array.from({ length: 50 }, () => deep));
    const budget = { values: SHOWN.values };
    expect(JSON.stringify(plainOf(deep, budget)).length).toBeLessThan(SHOWN.values * 20);
    expect(budget.values).toBeLessThanOrEqual(0);
  });
});

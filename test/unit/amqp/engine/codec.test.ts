// The codec against the spec's encodings (AMQP 1.0 part 1): every type, every
// width, every boundary, round trips, and hostile sizes, counts and nesting.
import { describe, expect, it } from 'vitest';
import { Decoder, decodeOne } from '../../../../src/amqp/engine/decoder.js';
import { encode } from '../../../../src/amqp/engine/encoder.js';
import { AmqpError } from '../../../../src/amqp/engine/errors.js';
import { ENCODINGS, type AmqpValue, amqp } from '../../../../src/amqp/engine/types.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const bytes = (n: number, fill = 0x61): Buffer => Buffer.alloc(n, fill);

/** Strip the `code` the decoder adds, to compare with a value built by hand. */
function bare(v: AmqpValue): unknown {
  if (v.type === 'described') return { type: 'described', descriptor: bare(v.descriptor), value: bare(v.value) };
  const { code: _code, ...rest } = v as AmqpValue & { code?: number };
  if (v.type === 'list') return { ...rest, value: v.value.map(bare) };
  if (v.type === 'array') {
    const element = v.element.descriptor ? { code: v.element.code, descriptor: bare(v.element.descriptor) } : { code: v.element.code };
    return { ...rest, element, value: v.value.map(bare) };
  }
  if (v.type === 'map') return { ...rest, value: v.value.map(([k, x]) => [bare(k), bare(x)]) };
  return rest;
}

function decodeFails(b: Buffer, pattern?: RegExp): AmqpError {
  let err: unknown;
  try {
    decodeOne(b);
  } catch (e) {
    err = e;
  }
  expect(err, `0x${b.toString('hex').slice(0, 80)} should not decode`).toBeInstanceOf(AmqpError);
  expect((err as AmqpError).condition).toBe('amqp:decode-error');
  if (pattern) expect((err as AmqpError).description).toMatch(pattern);
  return err as AmqpError;
}

/** [what, value, its compact encoding as the spec gives it] */
const CASES: [string, AmqpValue, string][] = [
  ['null', amqp.null(), '40'],
  ['true', amqp.boolean(true), '41'],
  ['false', amqp.boolean(false), '42'],
  ['ubyte 0', amqp.ubyte(0), '50 00'],
  ['ubyte 255', amqp.ubyte(255), '50 ff'],
  ['ushort 0', amqp.ushort(0), '60 0000'],
  ['ushort 65535', amqp.ushort(65535), '60 ffff'],
  ['uint0', amqp.uint(0), '43'],
  ['smalluint 1', amqp.uint(1), '52 01'],
  ['smalluint 255', amqp.uint(255), '52 ff'],
  ['uint 256', amqp.uint(256), '70 00000100'],
  ['uint max', amqp.uint(0xffffffff), '70 ffffffff'],
  ['ulong0', amqp.ulong(0), '44'],
  ['smallulong 255', amqp.ulong(255), '53 ff'],
  ['ulong 256', amqp.ulong(256), '80 0000000000000100'],
  ['ulong max', amqp.ulong((1n << 64n) - 1n), '80 ffffffffffffffff'],
  ['byte -128', amqp.byte(-128), '51 80'],
  ['byte 127', amqp.byte(127), '51 7f'],
  ['short -32768', amqp.short(-32768), '61 8000'],
  ['short 32767', amqp.short(32767), '61 7fff'],
  ['smallint -128', amqp.int(-128), '54 80'],
  ['smallint 127', amqp.int(127), '54 7f'],
  ['int 128', amqp.int(128), '71 00000080'],
  ['int -129', amqp.int(-129), '71 ffffff7f'],
  ['int min', amqp.int(-0x80000000), '71 80000000'],
  ['int max', amqp.int(0x7fffffff), '71 7fffffff'],
  ['smalllong -128', amqp.long(-128), '55 80'],
  ['smalllong 127', amqp.long(127), '55 7f'],
  ['long 128', amqp.long(128), '81 0000000000000080'],
  ['long min', amqp.long(-(1n << 63n)), '81 8000000000000000'],
  ['long max', amqp.long((1n << 63n) - 1n), '81 7fffffffffffffff'],
  ['float 1.5', amqp.float(1.5), '72 3fc00000'],
  ['double 1.5', amqp.double(1.5), '82 3ff8000000000000'],
  ['decimal32', { type: 'decimal32', value: hex('22500001') }, '74 22500001'],
  ['decimal64', { type: 'decimal64', value: hex('2238000000000001') }, '84 2238000000000001'],
  ['decimal128', { type: 'decimal128', value: hex('22080000000000000000000000000001') }, '94 22080000000000000000000000000001'],
  ['char a', amqp.char(0x61), '73 00000061'],
  ['char U+10FFFF', amqp.char(0x10ffff), '73 0010ffff'],
  ['timestamp', amqp.timestamp(1311704463521n), '83 0000013167adb8a1'],
  ['timestamp before 1970', amqp.timestamp(-1n), '83 ffffffffffffffff'],
  ['uuid', amqp.uuid(hex('f81d4fae7dec11d0a76500a0c91e6bf6')), '98 f81d4fae7dec11d0a76500a0c91e6bf6'],
  ['vbin8 empty', amqp.binary(Buffer.alloc(0)), 'a0 00'],
  ['vbin8 255', amqp.binary(bytes(255)), 'a0 ff' + '61'.repeat(255)],
  ['vbin32 256', amqp.binary(bytes(256)), 'b0 00000100' + '61'.repeat(256)],
  ['str8 empty', amqp.string(''), 'a1 00'],
  ['str8 utf8', amqp.string('é'), 'a1 02 c3a9'],
  ['str8 255', amqp.string('a'.repeat(255)), 'a1 ff' + '61'.repeat(255)],
  ['str32 256', amqp.string('a'.repeat(256)), 'b1 00000100' + '61'.repeat(256)],
  ['sym8', amqp.symbol('amqp:open:list'), 'a3 0e' + Buffer.from('amqp:open:list').toString('hex')],
  ['sym32 256', amqp.symbol('a'.repeat(256)), 'b3 00000100' + '61'.repeat(256)],
  ['list0', amqp.list([]), '45'],
  ['list8', amqp.list([amqp.uint(1), amqp.null()]), 'c0 04 02 5201 40'],
  ['list32 (too big for list8)', amqp.list([amqp.binary(bytes(300))]), 'd0 00000135 00000001 b0 0000012c' + '61'.repeat(300)],
  ['map8 empty', amqp.map([]), 'c1 01 00'],
  ['map8', amqp.map([[amqp.symbol('a'), amqp.uint(1)]]), 'c1 06 02 a301 61 5201'],
  ['map32', amqp.map([[amqp.symbol('k'), amqp.string('v'.repeat(300))]]), 'd1 00000138 00000002 a301 6b b1 0000012c' + '76'.repeat(300)],
  ['array8 of uint', amqp.array('uint', [amqp.uint(1), amqp.uint(2)]), 'e0 0a 02 70 00000001 00000002'],
  ['array8 of smalluint', amqp.array('smalluint', [amqp.uint(1), amqp.uint(2)]), 'e0 04 02 52 01 02'],
  ['array8 of sym8', amqp.array('sym8', [amqp.symbol('a'), amqp.symbol('bc')]), 'e0 07 02 a3 01 61 02 6263'],
  ['array8 of null', amqp.array('null', [amqp.null(), amqp.null(), amqp.null()]), 'e0 02 03 40'],
  ['array8 empty', amqp.array('sym8', []), 'e0 02 00 a3'],
  ['array32 (too big for array8)', amqp.array('uint', Array.from({ length: 70 }, (_, i) => amqp.uint(i))), 'f0 0000011d 00000046 70' + Array.from({ length: 70 }, (_, i) => i.toString(16).padStart(8, '0')).join('')],
  ['array of described', amqp.array({ code: 0x45, descriptor: amqp.ulong(0x24) }, [amqp.described(amqp.ulong(0x24), amqp.list([]))]), 'e0 05 01 00 53 24 45'],
  ['array of lists', amqp.array('list8', [amqp.list([amqp.uint(7)])]), 'e0 06 01 c0 03 01 52 07'],
  ['described ulong', amqp.described(amqp.ulong(0x10), amqp.list([])), '00 53 10 45'],
  ['described symbol', amqp.described(amqp.symbol('x:y'), amqp.null()), '00 a3 03 783a79 40'],
];

describe('codec - the spec encodings', () => {
  for (const [what, value, encoding] of CASES) {
    it(`codec - ${what} encodes as ${encoding.slice(0, 40)} and decodes back`, () => {
      expect(encode(value).toString('hex')).toBe(hex(encoding).toString('hex'));
      const back = decodeOne(hex(encoding));
      expect(bare(back)).toEqual(bare(value));
      // Re-encoding a decoded value keeps its encoding, byte for byte.
      expect(encode(back).toString('hex')).toBe(hex(encoding).toString('hex'));
    });
  }

  it('codec - every registered encoding is covered by a spec case', () => {
    const covered = new Set<number>();
    for (const [, , encoding] of CASES) {
      const b = hex(encoding);
      const walk = (v: AmqpValue) => {
        if (v.type === 'described') return (walk(v.descriptor), walk(v.value));
        if (v.code !== undefined) covered.add(v.code);
        if (v.type === 'list') v.value.forEach(walk);
        if (v.type === 'map') v.value.forEach(([k, x]) => (walk(k), walk(x)));
        if (v.type === 'array') (covered.add(v.element.code), v.value.forEach(walk));
      };
      walk(decodeOne(b));
    }
    // The wide forms of boolean, and the explicit widths no compact encoder picks, by hand:
    for (const [code, sample] of [[0x56, '56 01'], [0x50, '50 00']] as const) {
      decodeOne(hex(sample));
      covered.add(code);
    }
    expect(ENCODINGS.filter((e) => !covered.has(e.code)).map((e) => e.name)).toEqual([]);
  });

  it('codec - the explicit widths decode to the same values as the compact ones', () => {
    expect(bare(decodeOne(hex('56 01')))).toEqual(bare(amqp.boolean(true)));
    expect(bare(decodeOne(hex('56 00')))).toEqual(bare(amqp.boolean(false)));
    expect(bare(decodeOne(hex('70 00000000')))).toEqual(bare(amqp.uint(0)));
    expect(bare(decodeOne(hex('80 0000000000000000')))).toEqual(bare(amqp.ulong(0)));
    expect(bare(decodeOne(hex('71 ffffffff')))).toEqual(bare(amqp.int(-1)));
    expect(bare(decodeOne(hex('c0 01 00')))).toEqual(bare(amqp.list([])));
    expect(bare(decodeOne(hex('d0 00000004 00000000')))).toEqual(bare(amqp.list([])));
    expect(bare(decodeOne(hex('a1 00')))).toEqual(bare(amqp.string('')));
    expect(bare(decodeOne(hex('b1 00000000')))).toEqual(bare(amqp.string('')));
    expect(bare(decodeOne(hex('b3 00000001 61')))).toEqual(bare(amqp.symbol('a')));
    expect(bare(decodeOne(hex('b0 00000000')))).toEqual(bare(amqp.binary(Buffer.alloc(0))));
  });

  it('codec - a value keeps the width it was given when it fits, and takes a fitting one when not', () => {
    expect(encode({ type: 'uint', value: 1, code: 0x70 }).toString('hex')).toBe('7000000001');
    expect(encode({ type: 'uint', value: 300, code: 0x52 }).toString('hex')).toBe('700000012c');
    expect(encode({ type: 'list', value: [], code: 0xd0 }).toString('hex')).toBe('d00000000400000000');
  });

  it('codec - the encoder refuses values outside their type', () => {
    for (const v of [amqp.ubyte(256), amqp.ubyte(-1), amqp.ushort(65536), amqp.uint(2 ** 32), amqp.uint(1.5), amqp.byte(128), amqp.int(2 ** 31), amqp.char(0xd800), amqp.symbol('é'), amqp.ulong(-1n), amqp.long(1n << 63n)]) {
      expect(() => encode(v), JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? String(x) : x))).toThrow(AmqpError);
    }
    expect(() => encode({ type: 'uuid', value: Buffer.alloc(15) })).toThrow(AmqpError);
    expect(() => encode(amqp.array('uint', [amqp.string('x')]))).toThrow(AmqpError);
    expect(() => encode(amqp.array('list8', [amqp.list([amqp.binary(bytes(300))])]))).toThrow(/does not fit list8/);
  });

  it('codec - values in a row decode one after another from one buffer', () => {
    const b = Buffer.concat([encode(amqp.uint(7)), encode(amqp.string('x')), encode(amqp.null())]);
    const d = new Decoder(b);
    expect(bare(d.value())).toEqual(bare(amqp.uint(7)));
    expect(bare(d.value())).toEqual(bare(amqp.string('x')));
    expect(bare(d.value())).toEqual(bare(amqp.null()));
    expect(d.remaining).toBe(0);
    decodeFails(Buffer.concat([encode(amqp.uint(7)), hex('40')]), /left after/);
  });
});

describe('codec - values that are not valid', () => {
  it('codec - an unknown constructor is a decode-error', () => {
    for (const code of [0x01, 0x3f, 0x57, 0x99, 0xa2, 0xff]) decodeFails(Buffer.from([code, 0, 0, 0, 0]), /unknown constructor/);
  });

  it('codec - a boolean byte other than 0 or 1, a char outside Unicode, bad UTF-8 and non-ASCII symbols are decode-errors', () => {
    decodeFails(hex('56 02'), /neither 0 nor 1/);
    decodeFails(hex('73 00110000'), /not a Unicode scalar/);
    decodeFails(hex('73 0000d800'), /not a Unicode scalar/);
    decodeFails(hex('a1 01 ff'), /not valid UTF-8/);
    decodeFails(hex('a1 02 c328'), /not valid UTF-8/);
    decodeFails(hex('a3 01 80'), /not ASCII/);
  });

  it('codec - every truncation of every spec encoding is a decode-error', () => {
    for (const [what, , encoding] of CASES) {
      const b = hex(encoding);
      for (let n = 0; n < b.length; n++) {
        let err: unknown;
        try {
          decodeOne(b.subarray(0, n));
        } catch (e) {
          err = e;
        }
        expect(err, `${what} cut to ${n} bytes`).toBeInstanceOf(AmqpError);
      }
    }
  });

  it('codec - a map with an odd count, and compound sizes that disagree with their items, are decode-errors', () => {
    decodeFails(hex('c1 02 01 40'), /odd count/);
    decodeFails(hex('c0 04 01 5201 40'), /declares 4 bytes but its 1 items take 3/); // one item, a byte left over
    decodeFails(hex('c0 02 02 40'), /declares 2 items/);
    decodeFails(hex('e0 04 01 70 000000'), /more than its 4 bytes/);
    decodeFails(hex('e0 00 00'), /less than its count field/);
    decodeFails(hex('c0 00 00'), /less than its count field/);
  });
});

describe('codec - hostile sizes, counts and nesting', () => {
  it('codec - issue-20 case 1: array32 of 2^32-1 uuids in 5 bytes is refused before any element is read', () => {
    decodeFails(hex('f0 00000005 ffffffff 98'), /declares 4294967295 elements of uuid/);
  });

  it('codec - arrays of 2^32-1 zero-width elements (null, true, false, uint0, ulong0, list0) are refused', () => {
    for (const ctor of ['40', '41', '42', '43', '44', '45']) decodeFails(hex(`f0 00000005 ffffffff ${ctor}`), /more than its 5 bytes can hold/);
  });

  it('codec - zero-width elements up to the hard limit decode; one more is refused', () => {
    const ok = decodeOne(hex('f0 00000005 00000400 40'));
    expect(ok.type === 'array' && ok.value.length).toBe(1024);
    decodeFails(hex('f0 00000005 00000401 40'));
  });

  it('codec - fixed-width elements are bounded by the bytes the array declares', () => {
    for (const [ctor, width] of [['74', 4], ['84', 8], ['94', 16], ['98', 16], ['70', 4], ['83', 8]] as const) {
      const body = Buffer.alloc(width * 3);
      const good = Buffer.concat([hex(`e0 ${(2 + body.length).toString(16).padStart(2, '0')} 03 ${ctor}`), body]);
      expect(decodeOne(good).type).toBe('array');
      decodeFails(Buffer.concat([hex(`e0 ${(2 + body.length).toString(16).padStart(2, '0')} 04 ${ctor}`), body]));
    }
  });

  it('codec - sizes beyond the bytes that remain are refused before anything is read', () => {
    for (const b of ['b0 ffffffff', 'b1 7fffffff 61', 'b3 00001000', 'd0 ffffffff ffffffff', 'd1 00000100 00000002', 'f0 ffffffff 00000001 70', 'a0 05 6161']) {
      decodeFails(hex(b), /needs \d+ bytes/);
    }
    decodeFails(hex('d0 0000000c ffffffff 40 40 40 40 40 40 40 40'), /declares 4294967295 items/);
  });

  it('codec - nesting deeper than the limit is refused; at the limit it decodes', () => {
    const build = (depth: number): Buffer => {
      let inner = hex('40');
      for (let i = 0; i < depth; i++) inner = Buffer.concat([Buffer.from([0xc0, inner.length + 1, 1]), inner]);
      return inner;
    };
    expect(decodeOne(build(32)).type).toBe('list');
    decodeFails(build(33), /nested deeper than 32/);
    // Described values nest too: a descriptor that is itself described, over and over.
    decodeFails(Buffer.concat([Buffer.alloc(40, 0x00), hex('40 40')]), /nested deeper/);
  });

  it('codec - arrays of arrays cannot multiply zero-width elements past a budget bound by the input size', () => {
    // 2,000 inner array32s, each declaring 1,024 nulls in 9 bytes: 2 million values from 18 KB.
    const n = 2000;
    const items = Buffer.concat(Array.from({ length: n }, () => hex('00000005 00000400 40')));
    const head = Buffer.alloc(9);
    head[0] = 0xf0;
    head.writeUInt32BE(4 + 1 + items.length, 1);
    head.writeUInt32BE(n, 5);
    decodeFails(Buffer.concat([head, hex('f0'), items]), /more values than the bytes given can hold/);
  });
});

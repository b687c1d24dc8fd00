// The header a consumer gets when the broker must tell a new ttl or delivery count:
// only those two fields change; the rest is the sender's, as encoded.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { encodedValueSize, parseIncoming, rewriteHeader } from '../../../src/amqp/message-codec.js';

/** The encoded sections of a message, in order. */
const sections = (buf: Buffer): Buffer[] => {
  const out: Buffer[] = [];
  for (let offset = 0; offset < buf.length; offset += out[out.length - 1].length) out.push(buf.subarray(offset, offset + encodedValueSize(buf, offset)));
  return out;
};
// rhea writes a header section first, even an empty one.
const header = (fields: Record<string, unknown>): Buffer => sections(rhea.message.encode({ ...fields, body: 'x' }))[0];
const bodySection = sections(rhea.message.encode({ body: 'x' })).pop()!;
const decoded = (h: Buffer) => rhea.message.decode(Buffer.concat([h, bodySection])) as unknown as Record<string, unknown>;

describe('rewriteHeader', () => {
  it('keeps first-acquirer, priority and durable, and sets ttl and delivery-count', () => {
    const out = decoded(rewriteHeader(header({ durable: true, priority: 9, ttl: 5000, first_acquirer: true }), 1234, 3));
    expect(out).toMatchObject({ durable: true, priority: 9, ttl: 1234, first_acquirer: true, delivery_count: 3 });
  });

  it('works on a message without a header, and drops the ttl when there is none left to tell', () => {
    const out = decoded(rewriteHeader(Buffer.alloc(0), 0, 2));
    expect(out.delivery_count).toBe(2);
    expect(out.ttl).toBeUndefined();
    expect(out.first_acquirer).toBeFalsy();
  });

  it('writes a header of its own over one that is not a list (a message journaled before parse refused those)', () => {
    // A map where the header's list should be: no field of it can be kept, and a
    // refusal here would fail every consumer the message went to.
    const mapHeader = Buffer.from([0x00, 0x53, 0x70, 0xc1, 0x01, 0x00]);
    const out = decoded(rewriteHeader(mapHeader, 500, 2));
    expect(out).toMatchObject({ ttl: 500, delivery_count: 2 });
    expect(out.durable).toBeFalsy();
  });

  it('switches to list32 when the fields the sender wrote do not fit a list8', () => {
    // A header whose first field is a long (wrongly typed) string: carried verbatim, and the
    // new ttl and delivery-count make the list too long for list8's one-byte size.
    const long = Buffer.concat([Buffer.from([0xa1, 250]), Buffer.alloc(250, 0x61)]);
    const fields = Buffer.concat([long, Buffer.from([0x50, 7])]);
    const h = Buffer.concat([Buffer.from([0x00, 0x53, 0x70, 0xc0, fields.length + 1, 2]), fields]);
    const out = rewriteHeader(h, 100, 1);
    expect(out[3]).toBe(0xd0);
    expect(sections(Buffer.concat([out, bodySection]))).toHaveLength(2);
    expect(out.includes(long)).toBe(true);
    expect(out.subarray(-5)).toEqual(Buffer.from([0x70, 0, 0, 0, 1]));
  });
});

describe('parseIncoming - section descriptors', () => {
  // A section whose descriptor is a full ulong, domain (high word) then code (low
  // word), and whose list holds one-byte fields (`fields`: their encodings).
  const described = (domain: number, code: number, fields: number[]) =>
    Buffer.from([0x00, 0x80, ...[24, 16, 8, 0].map((s) => (domain >>> s) & 0xff), 0, 0, 0, code, 0xc0, fields.length + 1, fields.length, ...fields]);
  const body = sections(rhea.message.encode({ body: 'x' })).pop()!;

  it('reads a header and properties whose descriptors are 8-byte ulongs of the AMQP domain', () => {
    const m = parseIncoming(Buffer.concat([described(0, 0x70, [0x41, 0x40]), described(0, 0x73, [0x40, 0x40]), body]));
    expect(m.durable).toBe(true);
    expect(m.headerLength).toBe(15);
    expect(m.propertiesAt).toBe(15);
  });

  it('refuses a header or properties section that is not a list', () => {
    const asMap = (code: number) => Buffer.from([0x00, 0x53, code, 0xc1, 0x01, 0x00]);
    expect(() => parseIncoming(Buffer.concat([asMap(0x70), body]))).toThrow(/the header section is not a list \(type code 0xc1\)/);
    expect(() => parseIncoming(Buffer.concat([asMap(0x73), body]))).toThrow(/the properties section is not a list/);
    expect(() => parseIncoming(Buffer.concat([Buffer.from([0x00, 0x53, 0x70, 0xa1, 0x01, 0x78]), body]))).toThrow(/header section is not a list/);
    // An empty list (list0) is a list.
    expect(parseIncoming(Buffer.concat([Buffer.from([0x00, 0x53, 0x70, 0x45]), body])).headerLength).toBe(4);
  });

  it('does not take a section of another domain for the AMQP section its low word names', () => {
    // 0x00000001:00000070 is not amqp:header:list: not the message's durable flag, and
    // not a header the broker would replace on the way out.
    const m = parseIncoming(Buffer.concat([described(1, 0x70, [0x41, 0x40]), body]));
    expect(m.durable).toBe(false);
    expect(m.headerLength).toBe(0);
  });
});

describe('encodedValueSize - nesting a sender chooses', () => {
  // A described value's descriptor and value may each be described again. 300,000 levels
  // took the recursive reader past the stack: a RangeError, which the broker answered as
  // an internal error (with an error line in its log) instead of a malformed message.
  const depth = 300_000;
  const amqpValue = Buffer.from([0x00, 0x53, 0x77]);

  it('sizes a value nested as deep as its bytes allow without recursing', () => {
    // Descriptor within descriptor: 0x00 x depth, then the innermost descriptor and the depth + 1 values.
    const nested = Buffer.concat([Buffer.alloc(depth, 0x00), Buffer.alloc(depth + 1, 0x40)]);
    expect(encodedValueSize(nested, 0)).toBe(nested.length);
    const message = Buffer.concat([amqpValue, nested]);
    expect(parseIncoming(message).bytes.length).toBe(message.length);
    // Value within value, as a sender would more usually nest: 0x00 descriptor 0x00 descriptor ...
    const chain = Buffer.from('\x00\x40'.repeat(depth) + '\x41', 'latin1');
    expect(encodedValueSize(chain, 0)).toBe(chain.length);
  });

  it('refuses such a value cut short as a malformed message', () => {
    const cut = Buffer.concat([amqpValue, Buffer.alloc(depth, 0x00), Buffer.from([0x40])]);
    expect(() => parseIncoming(cut)).toThrow(/malformed message: truncated value/);
    expect(() => encodedValueSize(Buffer.alloc(depth, 0x00), 0)).toThrow(/truncated value/);
  });
});

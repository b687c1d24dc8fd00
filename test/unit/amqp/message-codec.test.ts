// The header a consumer gets when the broker must tell a new ttl or delivery count:
// only those two fields change; the rest is the sender's, as encoded.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { decodeMessage } from '../../../src/amqp/engine/message.js';
import { MESSAGE_SECTIONS } from '../../../src/amqp/engine/message-sections.js';
import { amqp, type AmqpValue } from '../../../src/amqp/engine/types.js';
import { encodedValueSize, outgoingBytes, parseIncoming, rewriteHeader, sectionCode, withDeliveryCount } from '../../../src/amqp/message-codec.js';
import type { MessageRecord } from '../../../src/broker/changes.js';

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

  it('tells a time left beyond a uint (an absolute expiry 100 days away) as the longest ttl, not wrapped', () => {
    expect(decoded(rewriteHeader(header({ durable: true }), 100 * 86_400_000, 1))).toMatchObject({ durable: true, ttl: 0xffff_ffff, delivery_count: 1 });
    expect(decoded(rewriteHeader(header({}), 0xffff_ffff, 0)).ttl).toBe(0xffff_ffff);
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

describe('outgoingBytes - the delivery-count a delivery carries', () => {
  it('is written even where it is the record\'s own: a copy (a move, a give-back) keeps its count beside the sender\'s bytes', () => {
    const bytes = rhea.message.encode({ durable: true, message_id: 'm-3', body: 'b' });
    const parsed = parseIncoming(bytes);
    // As copyMessage makes it: the count the message reached, the bytes as the sender sent them (count 0).
    const copy = { ...parsed, id: 1, deliveryCount: 2, expiresAt: 0 } as unknown as MessageRecord;
    expect(decodeMessage(outgoingBytes(copy, 2, Date.now())).header).toMatchObject({ durable: true, 'delivery-count': 2 });
    // A first delivery of a message never redelivered goes out as sent, not re-encoded.
    const plain = { ...parsed, id: 2, expiresAt: 0 } as unknown as MessageRecord;
    expect(outgoingBytes(plain, 0, Date.now())).toBe(bytes);
  });
});

describe('withDeliveryCount (tandem ha diverged republish)', () => {
  const stored = (bytes: Buffer) => ({ bytes, headerLength: parseIncoming(bytes).headerLength });

  it('changes only the delivery-count: the ttl and the other header fields as encoded, the bare message byte for byte', () => {
    const bytes = rhea.message.encode({ durable: true, priority: 7, ttl: 60_000, first_acquirer: true, delivery_count: 2, message_id: 'm-1', application_properties: { n: 1 }, body: 'b' });
    const msg = stored(bytes);
    const out = withDeliveryCount(msg, 3);
    expect(decoded(out.subarray(0, parseIncoming(out).headerLength))).toMatchObject({ durable: true, priority: 7, ttl: 60_000, first_acquirer: true, delivery_count: 3 });
    expect(out.subarray(parseIncoming(out).headerLength)).toEqual(bytes.subarray(msg.headerLength));
    expect(parseIncoming(out)).toMatchObject({ durable: true, priority: 7, ttlMs: 60_000, deliveryCount: 3 });
  });

  it('gives a message without a header one holding only the delivery-count', () => {
    // A properties section first: no header at all.
    const bytes = rhea.message.encode({ message_id: 'm-2', body: 'b' }).subarray(header({}).length);
    const msg = stored(bytes);
    expect(msg.headerLength).toBe(0);
    const out = withDeliveryCount(msg, 1);
    const head = out.subarray(0, out.length - bytes.length);
    expect(out.subarray(head.length)).toEqual(bytes);
    // durable, priority, ttl and first-acquirer null (their defaults), delivery-count 1.
    expect(head).toEqual(Buffer.from([0x00, 0x53, 0x70, 0xc0, 10, 5, 0x40, 0x40, 0x40, 0x40, 0x70, 0, 0, 0, 1]));
    expect(decodeMessage(out)).toMatchObject({ header: { 'delivery-count': 1 }, properties: { 'message-id': 'm-2' }, body: 'b' });
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

  it('refuses a header, annotations or properties section out of place or repeated (spec 3.2), and takes them in order', () => {
    const all = sections(rhea.message.encode({ durable: true, delivery_count: 2, message_annotations: { 'x-opt-k': 1 }, message_id: 'm', body: 'x' }));
    const [head, annotations, properties, x] = all;
    const da = Buffer.from([0x00, 0x53, 0x71, 0xc1, 0x01, 0x00]);
    expect(parseIncoming(Buffer.concat([head!, da, annotations!, properties!, x!]))).toMatchObject({ durable: true, deliveryCount: 2, headerLength: head!.length });
    // A consumer reading the last header would see this sender's count, not the one the broker writes in front.
    expect(() => parseIncoming(Buffer.concat([annotations!, head!, properties!, x!]))).toThrow(/a header section out of place at byte \d+/);
    expect(() => parseIncoming(Buffer.concat([head!, head!, x!]))).toThrow(/a header section out of place/);
    expect(() => parseIncoming(Buffer.concat([head!, annotations!, da, x!]))).toThrow(/a delivery-annotations section out of place/);
    expect(() => parseIncoming(Buffer.concat([annotations!, annotations!, x!]))).toThrow(/a message-annotations section out of place/);
  });

  it('refuses any section the broker reads behind the body or the application-properties (spec 3.2), since a consumer would read the last one', () => {
    const [head, , properties, x] = sections(rhea.message.encode({ durable: true, message_annotations: { 'x-opt-k': 1 }, message_id: 'm', body: 'x' }));
    const [, , appProperties] = sections(rhea.message.encode({ message_id: 'n', application_properties: { k: 1 } }));
    const data = Buffer.from([0x00, 0x53, 0x75, 0xa0, 0x01, 0x78]);
    const footer = Buffer.from([0x00, 0x53, 0x78, 0xc1, 0x01, 0x00]);
    // In order, the body's sections repeated and a footer last: taken.
    expect(parseIncoming(Buffer.concat([head!, properties!, appProperties!, data, data, footer])).propertiesAt).toBe(head!.length);
    // A second properties behind the body or the application-properties: a consumer would take its message-id and user-id.
    expect(() => parseIncoming(Buffer.concat([properties!, x!, properties!]))).toThrow(/a properties section out of place at byte \d+/);
    expect(() => parseIncoming(Buffer.concat([properties!, appProperties!, properties!, x!]))).toThrow(/a properties section out of place/);
    expect(() => parseIncoming(Buffer.concat([head!, x!, head!]))).toThrow(/a header section out of place/);
    expect(() => parseIncoming(Buffer.concat([appProperties!, appProperties!, x!]))).toThrow(/an? application-properties section out of place/);
    expect(() => parseIncoming(Buffer.concat([x!, appProperties!]))).toThrow(/application-properties section out of place/);
    expect(() => parseIncoming(Buffer.concat([x!, footer, data]))).toThrow(/a data section out of place/);
    expect(() => parseIncoming(Buffer.concat([x!, footer, footer]))).toThrow(/a footer section out of place/);
    // Bytes behind the body that are no section (rhea warns and reads on): refused.
    expect(() => parseIncoming(Buffer.concat([properties!, x!, Buffer.from([0xa1, 0x01, 0x61])]))).toThrow(/expected a described section at byte/);
    expect(() => parseIncoming(Buffer.concat([properties!, x!, Buffer.from([0x00, 0x53])]))).toThrow(/malformed message/);
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

describe('parseIncoming - symbolic section descriptors (spec 3.2: a section is described by its code or its symbol)', () => {
  const symbolOf = (name: string) => MESSAGE_SECTIONS.find((x) => x.name === name)!.symbol;
  const codeOf = (name: string) => MESSAGE_SECTIONS.find((x) => x.name === name)!.code;
  const fields: Array<[string, AmqpValue]> = [
    ['header', amqp.list([amqp.boolean(true), amqp.ubyte(7)])],
    ['properties', amqp.list([amqp.string('order-1'), amqp.null(), amqp.null(), amqp.string('invoices')])],
    ['application-properties', amqp.map([[amqp.string('_AMQ_DUPL_ID'), amqp.ulong(42)]])],
    ['data', amqp.binary(Buffer.from('payload'))],
  ];
  const message = (describe: (name: string) => AmqpValue) => Buffer.concat(fields.map(([name, value]) => encode(amqp.described(describe(name), value))));
  const numeric = message((name) => amqp.ulong(codeOf(name)));
  const symbolic = message((name) => amqp.symbol(symbolOf(name)));
  /** A section whose descriptor is a sym32 (0xb3), which no encoder here writes for so short a symbol. */
  const sym32Section = (symbol: string, value: AmqpValue) => {
    const name = Buffer.from(symbol, 'latin1');
    const length = Buffer.alloc(4);
    length.writeUInt32BE(name.length);
    return Buffer.concat([Buffer.from([0x00, 0xb3]), length, name, encode(value)]);
  };

  it('reads the head of a message described by symbols as it reads the same message described by codes', () => {
    const a = parseIncoming(numeric);
    const b = parseIncoming(symbolic);
    expect(b).toMatchObject({ durable: true, priority: 7, subject: 'invoices' });
    for (const k of ['durable', 'priority', 'subject', 'ttlMs', 'deliveryCount'] as const) expect(b[k]).toEqual(a[k]);
    expect(sectionCode(symbolic, 0)).toBe(0x70);
    expect(b.headerLength).toBe(encodedValueSize(symbolic, 0));
    expect(sectionCode(symbolic, b.propertiesAt!)).toBe(0x73);
    const sym32 = Buffer.concat([sym32Section(symbolOf('header'), amqp.list([amqp.boolean(true)])), sym32Section(symbolOf('properties'), amqp.list([amqp.string('order-1')]))]);
    expect(parseIncoming(sym32)).toMatchObject({ durable: true, propertiesAt: encodedValueSize(sym32, 0) });
  });

  it('decodes, keys and re-heads such a message as the coded one', () => {
    expect(decodeMessage(symbolic)).toEqual(decodeMessage(numeric));
    expect(readDedupKey(symbolic, undefined, parseIncoming(symbolic).propertiesAt)).toEqual(readDedupKey(numeric, undefined, parseIncoming(numeric).propertiesAt));
    expect(readDedupKey(symbolic, '_AMQ_DUPL_ID', undefined)).toEqual(readDedupKey(numeric, '_AMQ_DUPL_ID', undefined));
    expect(readDedupKey(symbolic, undefined, undefined)).toMatchObject({ status: 'key' });
    // A redelivery's new header (described by a code) keeps the sender's fields; the rest goes out as sent.
    const parsed = parseIncoming(symbolic);
    const record = { bytes: symbolic, headerLength: parsed.headerLength, deliveryCount: 0, expiresAt: 0 } as unknown as MessageRecord;
    const out = outgoingBytes(record, 2, Date.now());
    expect(decodeMessage(out).header).toMatchObject({ durable: true, priority: 7, 'delivery-count': 2 });
    expect(out.subarray(out.length - (symbolic.length - parsed.headerLength)).equals(symbolic.subarray(parsed.headerLength))).toBe(true);
  });

  it('takes a symbol that names no section as a section it does not read, and does not make a string of a long one', () => {
    const vendor = encode(amqp.described(amqp.symbol('com.example:header:list'), amqp.list([amqp.boolean(true)])));
    expect(parseIncoming(vendor)).toMatchObject({ durable: false, headerLength: 0, propertiesAt: -1 });
    // Behind the head it is let through; in front of a header or properties the broker's
    // reading would stop at it, and a consumer would read what the broker never did.
    expect(parseIncoming(Buffer.concat([numeric, vendor]))).toMatchObject({ durable: true, priority: 7 });
    expect(() => parseIncoming(Buffer.concat([vendor, numeric]))).toThrow(new RegExp(`a header section out of place at byte ${vendor.length} `));
    const [head, properties] = [0, 1].map((i) => encode(amqp.described(amqp.ulong(codeOf(fields[i]![0])), fields[i]![1])));
    expect(() => parseIncoming(Buffer.concat([head!, vendor, properties!]))).toThrow(/a properties section out of place/);
    const long = sym32Section('x'.repeat(1 << 20), amqp.list([amqp.boolean(true)]));
    expect(sectionCode(long, 0)).toBe(Number.POSITIVE_INFINITY);
    expect(parseIncoming(long).durable).toBe(false);
    // A symbol longer than the bytes that remain is no descriptor at all.
    expect(sectionCode(long.subarray(0, 100), 0)).toBeUndefined();
    expect(() => parseIncoming(long.subarray(0, 100))).toThrow(/malformed message/);
  });
});

// The header a consumer gets when the broker must tell a new ttl or delivery count:
// only those two fields change; the rest is the sender's, as encoded.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { encodedValueSize, rewriteHeader } from '../../../src/amqp/message-codec.js';

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

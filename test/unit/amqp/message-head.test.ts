// The fast read of a message's header and properties (message-head.ts) against the
// generic decode of the same sections: seeded messages whose fields take every
// encoding (regular ones, ones the fast read must leave to the generic decode, and
// malformed ones), plus byte mutations. Both readings must give the same fields,
// or the same refusal; and the fast read must actually take the plain messages
// clients send, or it would be a slower way to the same answer.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { encodeMessage } from '../../../src/amqp/engine/message.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { amqp } from '../../../src/amqp/engine/types.js';
import { encodedValueSize, parseIncoming, parseIncomingGenerically } from '../../../src/amqp/message-codec.js';
import { readMessageHead } from '../../../src/amqp/message-head.js';
import { prng } from '../../../src/util/prng.js';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');

/** One field's encoding, chosen at random from every shape a peer could send. */
function randomField(rnd: () => number): Buffer {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const shapes: Array<() => Buffer> = [
    () => hex('40'),
    () => hex('41'),
    () => hex('42'),
    () => hex(pick(['5600', '5601', '5602'])), // one-byte boolean, 02 malformed
    () => Buffer.from([0x50, Math.floor(rnd() * 256)]),
    () => hex('43'),
    () => Buffer.from([0x52, Math.floor(rnd() * 256)]),
    () => encode(amqp.uint(Math.floor(rnd() * 0xffffffff))),
    () => hex('7000000007'),
    () => encode(amqp.ulong(pick([0, 1, 300, 2 ** 40]))),
    () => encode(amqp.int(-5)),
    () => encode(amqp.long(-(2 ** 40))),
    () => encode(amqp.double(1.5)),
    () => hex(pick(['7300000041', '730000d800'])), // a char, and a surrogate (malformed)
    () => encode(amqp.timestamp(pick([0, 1, 1_700_000_000_000, -1_700_000_000_000, 8.64e15, 8.64e15 + 1, 2n ** 62n, -(2n ** 63n)]))),
    () => encode(amqp.uuid(Buffer.alloc(16, 7))),
    () => encode(amqp.binary(Buffer.alloc(pick([0, 3, 300]), 1))),
    () => encode(amqp.string(pick(['', 'orders', 'é-ü', 'x'.repeat(300)]))),
    () => hex('a102c328'), // not UTF-8
    () => encode(amqp.symbol(pick(['', 'amqp:x', 's'.repeat(260)]))),
    () => hex('a302e9e9'), // not ASCII
    () => encode(amqp.list([amqp.uint(1)])),
    () => encode(amqp.map([[amqp.string('k'), amqp.uint(1)]])),
    () => encode(amqp.described(amqp.symbol('d'), amqp.string('v'))),
    () => hex('45'),
  ];
  return pick(shapes)();
}

/** A section: described by a small ulong (or now and then the long form), its fields in a list8 or list32. */
function section(code: number, fields: Buffer[], rnd: () => number): Buffer {
  const descriptor = rnd() < 0.05 ? Buffer.concat([hex('0080'), Buffer.from([0, 0, 0, 0, 0, 0, 0, code])]) : Buffer.from([0x00, 0x53, code]);
  if (fields.length === 0 && rnd() < 0.5) return Buffer.concat([descriptor, hex('45')]);
  return compound(descriptor, fields, 0xc0, () => rnd() < 0.8);
}

/**
 * A described list or map (`code8`: its 8-bit code, the 32-bit one 0x10 above) of
 * `items`: the 8-bit form when they fit and `small()` says so (asked only then).
 */
function compound(descriptor: Buffer, items: Buffer[], code8: number, small: () => boolean): Buffer {
  const body = Buffer.concat(items);
  if (body.length + 1 <= 255 && small()) return Buffer.concat([descriptor, Buffer.from([code8, body.length + 1, items.length]), body]);
  const head = Buffer.alloc(9);
  head[0] = code8 + 0x10;
  head.writeUInt32BE(body.length + 4, 1);
  head.writeUInt32BE(items.length, 5);
  return Buffer.concat([descriptor, head, body]);
}

/** Fields of the types the spec gives them, in the encodings clients use (what the fast read is for). */
function plainFields(types: string, rnd: () => number): Buffer[] {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const of: Record<string, () => Buffer> = {
    b: () => hex(pick(['40', '41', '42'])),
    y: () => hex(pick(['40', '5000', '5009'])),
    u: () => hex(pick(['40', '43', '5207', '7000000bb8'])),
    s: () => (rnd() < 0.3 ? hex('40') : encode(amqp.string(pick(['q', 'orders/eu', 'é'])))),
    m: () => encode(pick([amqp.string('id-1'), amqp.ulong(42), amqp.uuid(Buffer.alloc(16, 3)), amqp.binary(Buffer.alloc(5, 1)), amqp.null()])),
    y2: () => encode(pick([amqp.symbol('text/plain'), amqp.null()])),
    t: () => encode(pick([amqp.timestamp(1_800_000_000_000), amqp.null()])),
  };
  const names = types.split(',');
  return names.slice(0, Math.floor(rnd() * (names.length + 1))).map((n) => of[n]!());
}

/** An annotations section: a map8 or map32 of random keys and values (now and then an odd count: malformed). */
function annotations(code: number, rnd: () => number): Buffer {
  const pairs = Math.floor(rnd() * 5);
  const items: Buffer[] = [];
  for (let i = 0; i < pairs; i++) items.push(rnd() < 0.7 ? encode(amqp.symbol(`x-opt-${i}`)) : randomField(rnd), randomField(rnd));
  if (rnd() < 0.05) items.push(randomField(rnd));
  return compound(Buffer.from([0x00, 0x53, code]), items, 0xc1, () => rnd() < 0.7);
}

function randomMessage(rnd: () => number): Buffer {
  const parts: Buffer[] = [];
  const plain = rnd() < 0.5;
  const header = () => (plain ? plainFields('b,y,u,b,u', rnd) : Array.from({ length: Math.floor(rnd() * 7) }, () => randomField(rnd)));
  const properties = () => (plain ? plainFields('m,m,s,s,s,m,y2,y2,t,t,s,u,s', rnd) : Array.from({ length: Math.floor(rnd() * 15) }, () => randomField(rnd)));
  if (rnd() < 0.05) parts.push(section(0x71, [], rnd));
  if (rnd() < 0.8) parts.push(section(0x70, header(), rnd));
  if (rnd() < 0.05) parts.push(section(0x70, header(), rnd));
  if (rnd() < 0.15) parts.push(annotations(0x71, rnd));
  if (rnd() < 0.1) parts.push(Buffer.concat([hex('005372'), encode(amqp.map([[amqp.symbol('x-opt-a'), amqp.uint(1)]]))]));
  if (rnd() < 0.3) parts.push(annotations(0x72, rnd));
  if (rnd() < 0.8) parts.push(section(0x73, properties(), rnd));
  parts.push(Buffer.concat([hex('005375'), encode(amqp.binary(Buffer.alloc(20, 9)))]));
  const message = Buffer.concat(parts);
  // Now and then a byte changed, to meet sizes and counts that lie.
  if (rnd() < 0.3) message[Math.floor(rnd() * message.length)] = Math.floor(rnd() * 256);
  return message;
}

/** What the broker takes from a message by one reading, or the refusal. */
function reading(read: (b: Buffer) => ReturnType<typeof parseIncoming>, bytes: Buffer): unknown {
  try {
    const m = read(bytes);
    return { ...m, bytes: undefined };
  } catch (err) {
    return { refused: (err as Error).message };
  }
}

/** Offsets of the header, annotations and properties sections of a plain message, and where they end. */
function layout(bytes: Buffer): { headerAt: number; propertiesAt: number; end: number; daAt: number; maAt: number } {
  let headerAt = -1;
  let propertiesAt = -1;
  let daAt = -1;
  let maAt = -1;
  let at = 0;
  while (at < bytes.length && bytes[at + 2]! <= 0x73) {
    if (bytes[at + 2] === 0x70) headerAt = at;
    if (bytes[at + 2] === 0x71) daAt = at;
    if (bytes[at + 2] === 0x72) maAt = at;
    if (bytes[at + 2] === 0x73) propertiesAt = at;
    at += encodedValueSize(bytes, at);
  }
  return { headerAt, propertiesAt, end: at, daAt, maAt };
}

describe('the fast read of the header and properties', () => {
  it('reads what the generic decode reads, or refuses what it refuses, over 20,000 seeded messages', () => {
    const rnd = prng(20261202);
    let fast = 0;
    let fastAnnotated = 0;
    for (let i = 0; i < 20_000; i++) {
      const bytes = randomMessage(rnd);
      const generic = reading(parseIncomingGenerically, bytes);
      const actual = reading(parseIncoming, bytes);
      if (JSON.stringify(actual) !== JSON.stringify(generic)) {
        throw new Error(`message ${i} (${bytes.toString('hex')}): fast ${JSON.stringify(actual)}, generic ${JSON.stringify(generic)}`);
      }
      try {
        const { headerAt, propertiesAt, end, daAt, maAt } = layout(bytes);
        if (end > 0 && readMessageHead(bytes, headerAt, propertiesAt, end, daAt, maAt)) {
          fast++;
          if (daAt >= 0 || maAt >= 0) fastAnnotated++;
        }
      } catch {
        // a message whose sections cannot even be measured: refused above by both
      }
    }
    // The generator makes plain sections often enough that the fast read must be taken.
    expect(fast).toBeGreaterThan(4000);
    // And messages with annotations (qpid-jms sends message-annotations on every message).
    expect(fastAnnotated).toBeGreaterThan(1000);
  });

  it('takes the messages clients send: the project encoder and rhea', () => {
    const ours = encodeMessage({ durable: true, priority: 7, ttl: 3000, messageId: 'id-1', to: 'orders', subject: 's', body: 'x' });
    const theirs = rhea.message.encode({ durable: true, ttl: 10, message_id: 42, to: 'q', subject: 'hi', absolute_expiry_time: 1_900_000_000_000, body: 'x' });
    for (const bytes of [ours, theirs]) {
      const { headerAt, propertiesAt, end } = layout(bytes);
      expect(readMessageHead(bytes, headerAt, propertiesAt, end)).toBeDefined();
      expect(reading(parseIncoming, bytes)).toEqual(reading(parseIncomingGenerically, bytes));
    }
    expect(parseIncoming(ours)).toMatchObject({ durable: true, priority: 7, ttlMs: 3000, to: 'orders', subject: 's' });
    expect(parseIncoming(theirs)).toMatchObject({ durable: true, ttlMs: 10, to: 'q', subject: 'hi', absoluteExpiry: 1_900_000_000_000 });
  });

  it("honours properties.absolute-expiry-time by either reading (the generic one used to drop it: it decodes as a Date)", () => {
    const plain = rhea.message.encode({ absolute_expiry_time: 1_800_000_000_000, body: 'x' });
    // A message annotation sends the same properties down the generic path.
    const annotated = rhea.message.encode({ absolute_expiry_time: 1_800_000_000_000, message_annotations: { 'x-opt-k': 1 }, body: 'x' });
    expect(parseIncoming(plain).absoluteExpiry).toBe(1_800_000_000_000);
    expect(parseIncoming(annotated).absoluteExpiry).toBe(1_800_000_000_000);
    expect(parseIncomingGenerically(plain).absoluteExpiry).toBe(1_800_000_000_000);
  });
});

// A small AMQP 1.0 encoder of the tests' own, for raw-socket clients that say what
// no real client would: any type in any field, counts and sizes that lie, arrays of
// four billion nothings. Values are encoded bytes (Buffer), built bottom up, so a test
// or the fuzzer can put anything anywhere. Not a codec for the broker: tandem's is in
// src/amqp; this one is independent of it on purpose, so a bug is not shared.

/** Descriptor codes (spec 2.7, 5.3, 3.2, 3.4, 3.5). */
export const CODE = {
  open: 0x10, begin: 0x11, attach: 0x12, flow: 0x13, transfer: 0x14, disposition: 0x15, detach: 0x16, end: 0x17, close: 0x18,
  saslMechanisms: 0x40, saslInit: 0x41, saslChallenge: 0x42, saslResponse: 0x43, saslOutcome: 0x44,
  error: 0x1d, received: 0x23, accepted: 0x24, rejected: 0x25, released: 0x26, modified: 0x27, source: 0x28, target: 0x29,
  header: 0x70, deliveryAnnotations: 0x71, messageAnnotations: 0x72, properties: 0x73, applicationProperties: 0x74,
  data: 0x75, amqpSequence: 0x76, amqpValue: 0x77, footer: 0x78,
} as const;

export const AMQP_HEADER = Buffer.from('AMQP\x00\x01\x00\x00', 'binary');
export const SASL_HEADER = Buffer.from('AMQP\x03\x01\x00\x00', 'binary');
export const FRAME_AMQP = 0;
export const FRAME_SASL = 1;

const b = (...bytes: number[]): Buffer => Buffer.from(bytes);
const u32 = (n: number): Buffer => {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(n >>> 0);
  return out;
};

/** Primitive and compound encodings (spec 1.6), each returning the encoded value. */
export const v = {
  null: (): Buffer => b(0x40),
  bool: (x: boolean): Buffer => b(x ? 0x41 : 0x42),
  ubyte: (n: number): Buffer => b(0x50, n & 0xff),
  ushort: (n: number): Buffer => b(0x60, (n >> 8) & 0xff, n & 0xff),
  uint: (n: number): Buffer => (n === 0 ? b(0x43) : n < 256 ? b(0x52, n) : Buffer.concat([b(0x70), u32(n)])),
  ulong: (n: number | bigint): Buffer => {
    const x = BigInt(n);
    if (x === 0n) return b(0x44);
    if (x < 256n) return b(0x53, Number(x));
    const out = Buffer.alloc(9);
    out[0] = 0x80;
    out.writeBigUInt64BE(BigInt.asUintN(64, x), 1);
    return out;
  },
  int: (n: number): Buffer => {
    const out = Buffer.alloc(5);
    out[0] = 0x71;
    out.writeInt32BE(n | 0, 1);
    return out;
  },
  long: (n: number | bigint): Buffer => {
    const out = Buffer.alloc(9);
    out[0] = 0x81;
    out.writeBigInt64BE(BigInt.asIntN(64, BigInt(n)), 1);
    return out;
  },
  timestamp: (ms: number): Buffer => {
    const out = Buffer.alloc(9);
    out[0] = 0x83;
    out.writeBigInt64BE(BigInt(Math.trunc(ms)), 1);
    return out;
  },
  uuid: (bytes: Buffer): Buffer => Buffer.concat([b(0x98), bytes.subarray(0, 16), Buffer.alloc(Math.max(0, 16 - bytes.length))]),
  binary: (x: Buffer): Buffer => (x.length < 256 ? Buffer.concat([b(0xa0, x.length), x]) : Buffer.concat([b(0xb0), u32(x.length), x])),
  string: (s: string): Buffer => sized(0xa1, 0xb1, Buffer.from(s, 'utf8')),
  symbol: (s: string): Buffer => sized(0xa3, 0xb3, Buffer.from(s, 'latin1')),
  /** A list; `count` may lie about the number of items. */
  list: (items: Buffer[], count = items.length): Buffer => {
    if (items.length === 0 && count === 0) return b(0x45);
    const body = Buffer.concat(items);
    if (body.length + 1 < 256 && count < 256) return Buffer.concat([b(0xc0, body.length + 1, count), body]);
    return Buffer.concat([b(0xd0), u32(body.length + 4), u32(count), body]);
  },
  /** A map from flat key, value, key, value... */
  map: (kv: Buffer[], count = kv.length): Buffer => {
    const body = Buffer.concat(kv);
    if (body.length + 1 < 256 && count < 256) return Buffer.concat([b(0xc1, body.length + 1, count), body]);
    return Buffer.concat([b(0xd1), u32(body.length + 4), u32(count), body]);
  },
  /** array32 of `count` elements of type `code`, the elements' bytes (without constructor) as given. */
  array32: (code: number, count: number, elements: Buffer = Buffer.alloc(0)): Buffer =>
    Buffer.concat([b(0xf0), u32(elements.length + 5), u32(count), b(code), elements]),
  described: (descriptor: number | Buffer, value: Buffer): Buffer =>
    Buffer.concat([b(0x00), typeof descriptor === 'number' ? v.ulong(descriptor) : descriptor, value]),
};

function sized(small: number, large: number, x: Buffer): Buffer {
  return x.length < 256 ? Buffer.concat([b(small, x.length), x]) : Buffer.concat([b(large), u32(x.length), x]);
}

/** A field left out (null), as trailing nulls are dropped from a performative's list. */
export type Field = Buffer | undefined;

/** A described list: a performative, a terminus, an outcome or a message section. */
export function composite(code: number, fields: Field[]): Buffer {
  let n = fields.length;
  while (n > 0 && fields[n - 1] === undefined) n--;
  return v.described(code, v.list(Array.from(fields.slice(0, n), (f) => f ?? v.null())));
}

/** One frame: size, doff 2, type, channel, body (a performative) and payload. */
export function frame(body: Buffer | undefined, options: { channel?: number; type?: number; payload?: Buffer } = {}): Buffer {
  const payload = options.payload ?? Buffer.alloc(0);
  const size = 8 + (body?.length ?? 0) + payload.length;
  const head = Buffer.alloc(8);
  head.writeUInt32BE(size, 0);
  head[4] = 2;
  head[5] = options.type ?? FRAME_AMQP;
  head.writeUInt16BE(options.channel ?? 0, 6);
  return Buffer.concat([head, body ?? Buffer.alloc(0), payload]);
}

// ---- the frames of an ordinary conversation, with the fields tests vary ------------

export const perf = {
  saslInit: (mechanism: string, response?: Buffer): Buffer =>
    frame(composite(CODE.saslInit, [v.symbol(mechanism), response ? v.binary(response) : undefined]), { type: FRAME_SASL }),
  open: (o: { containerId?: string; maxFrameSize?: number; channelMax?: number; idleTimeOut?: number } = {}): Buffer =>
    frame(
      composite(CODE.open, [
        v.string(o.containerId ?? 'raw-client'),
        undefined,
        o.maxFrameSize !== undefined ? v.uint(o.maxFrameSize) : undefined,
        o.channelMax !== undefined ? v.ushort(o.channelMax) : undefined,
        o.idleTimeOut !== undefined ? v.uint(o.idleTimeOut) : undefined,
      ]),
    ),
  begin: (o: { channel?: number; nextOutgoingId?: number; incomingWindow?: number; outgoingWindow?: number } = {}): Buffer =>
    frame(composite(CODE.begin, [undefined, v.uint(o.nextOutgoingId ?? 0), v.uint(o.incomingWindow ?? 2048), v.uint(o.outgoingWindow ?? 2048)]), {
      channel: o.channel,
    }),
  /** Attach; role receiver means the client receives (the broker sends). */
  attach: (o: { name: string; handle: number; role: 'sender' | 'receiver'; address: string; presettled?: boolean; channel?: number; maxMessageSize?: number }): Buffer =>
    frame(
      composite(CODE.attach, [
        v.string(o.name),
        v.uint(o.handle),
        v.bool(o.role === 'receiver'),
        o.presettled ? v.ubyte(1) : undefined,
        undefined,
        composite(CODE.source, o.role === 'receiver' ? [v.string(o.address)] : []),
        composite(CODE.target, o.role === 'sender' ? [v.string(o.address)] : []),
        undefined,
        undefined,
        o.role === 'sender' ? v.uint(0) : undefined,
        o.maxMessageSize !== undefined ? v.ulong(o.maxMessageSize) : undefined,
      ]),
      { channel: o.channel },
    ),
  /** Flow granting `credit` on a link (the client as receiver). */
  flow: (o: { handle: number; credit: number; deliveryCount?: number; nextIncomingId?: number; incomingWindow?: number; channel?: number }): Buffer =>
    frame(
      composite(CODE.flow, [
        v.uint(o.nextIncomingId ?? 0),
        v.uint(o.incomingWindow ?? 0x7fffffff),
        v.uint(0),
        v.uint(2048),
        v.uint(o.handle),
        v.uint(o.deliveryCount ?? 0),
        v.uint(o.credit),
      ]),
      { channel: o.channel },
    ),
  /** Transfer; `format` is the message-format (0 with a tag unless given). */
  transfer: (
    o: { handle: number; deliveryId?: number; tag?: string; format?: number; settled?: boolean; more?: boolean; resume?: boolean; aborted?: boolean; channel?: number },
    payload: Buffer,
  ): Buffer =>
    frame(
      composite(CODE.transfer, [
        v.uint(o.handle),
        o.deliveryId !== undefined ? v.uint(o.deliveryId) : undefined,
        o.tag !== undefined ? v.binary(Buffer.from(o.tag)) : undefined,
        o.format !== undefined ? v.uint(o.format) : o.tag !== undefined ? v.uint(0) : undefined,
        o.settled !== undefined ? v.bool(o.settled) : undefined,
        o.more !== undefined ? v.bool(o.more) : undefined,
        undefined,
        undefined,
        o.resume !== undefined ? v.bool(o.resume) : undefined,
        o.aborted !== undefined ? v.bool(o.aborted) : undefined,
      ]),
      { channel: o.channel, payload },
    ),
  disposition: (o: { role: 'sender' | 'receiver'; first: number; last?: number; settled?: boolean; channel?: number }): Buffer =>
    frame(
      composite(CODE.disposition, [
        v.bool(o.role === 'receiver'),
        v.uint(o.first),
        o.last !== undefined ? v.uint(o.last) : undefined,
        v.bool(o.settled ?? true),
        composite(CODE.accepted, []),
      ]),
      { channel: o.channel },
    ),
  detach: (handle: number, channel?: number): Buffer => frame(composite(CODE.detach, [v.uint(handle), v.bool(true)]), { channel }),
  end: (channel?: number): Buffer => frame(composite(CODE.end, []), { channel }),
  close: (): Buffer => frame(composite(CODE.close, [])),
};

/** A message: optional properties, then an amqp-value string body. */
export function message(body: string, o: { durable?: boolean; messageId?: Buffer; to?: string } = {}): Buffer {
  const sections: Buffer[] = [];
  if (o.durable) sections.push(composite(CODE.header, [v.bool(true)]));
  if (o.messageId || o.to) sections.push(composite(CODE.properties, [o.messageId, undefined, o.to ? v.string(o.to) : undefined]));
  sections.push(v.described(CODE.amqpValue, v.string(body)));
  return Buffer.concat(sections);
}

/** "\0user\0password" for SASL PLAIN. */
export const plainResponse = (user: string, password: string): Buffer => Buffer.from(`\0${user}\0${password}`, 'utf8');

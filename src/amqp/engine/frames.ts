// Frames (spec 2.3) and protocol headers (2.2, 5.2.1): reading and checking the
// 8-byte frame header, decoding a frame's body against the performative tables,
// and writing frames. Every refusal is an AmqpError: framing errors carry
// amqp:connection:framing-error, bodies that do not decode amqp:decode-error.
import { type Composite, decodeComposite } from './composite.js';
import { Decoder } from './decoder.js';
import { Encoder } from './encoder.js';
import { readPerformative } from './performative-reader.js';
import { decodeError, framingError } from './errors.js';
import type { AmqpValue } from './types.js';

export const FrameType = { amqp: 0x00, sasl: 0x01 } as const;
export type FrameTypeCode = (typeof FrameType)[keyof typeof FrameType];

/** Protocol ids of the header "AMQP" id 1 0 0 (2.2): plain AMQP, TLS, SASL. */
export const ProtocolId = { amqp: 0, tls: 2, sasl: 3 } as const;

export const FRAME_HEADER_SIZE = 8;
/** The largest frame every peer must accept (2.7.1 open, max-frame-size). */
export const MIN_MAX_FRAME_SIZE = 512;

export interface ProtocolHeader {
  id: number;
  major: number;
  minor: number;
  revision: number;
}

export function protocolHeader(id: number): Buffer {
  return Buffer.from([0x41, 0x4d, 0x51, 0x50, id, 1, 0, 0]);
}

/** Whether 4 bytes at `at` spell "AMQP" (a protocol header, not a frame, starts here). */
export function startsProtocolHeader(buf: Buffer, at: number): boolean {
  return buf.length - at >= 4 && buf[at] === 0x41 && buf[at + 1] === 0x4d && buf[at + 2] === 0x51 && buf[at + 3] === 0x50;
}

/** The 8 bytes at `at` as a protocol header of AMQP 1.0.0 with protocol id 0 or 3. */
export function readProtocolHeader(buf: Buffer, at: number): ProtocolHeader {
  if (!startsProtocolHeader(buf, at)) throw framingError(`not an AMQP protocol header (bytes 0x${buf.subarray(at, at + 4).toString('hex')})`);
  const h = { id: buf[at + 4]!, major: buf[at + 5]!, minor: buf[at + 6]!, revision: buf[at + 7]! };
  if (h.major !== 1 || h.minor !== 0 || h.revision !== 0) throw framingError(`AMQP version ${h.major}.${h.minor}.${h.revision} is not supported (1.0.0 only)`);
  if (h.id !== ProtocolId.amqp && h.id !== ProtocolId.sasl) throw framingError(`protocol id ${h.id} is not supported (0: AMQP, 3: SASL)`);
  return h;
}

export interface FrameHeader {
  size: number;
  /** Data offset, in 4-byte words (2: no extended header). */
  doff: number;
  type: number;
  channel: number;
}

/** The frame header at `at` (8 bytes must be there), checked against `maxFrameSize` and the frame type expected. */
export function readFrameHeader(buf: Buffer, at: number, maxFrameSize: number, type: FrameTypeCode): FrameHeader {
  const size = buf.readUInt32BE(at);
  const doff = buf[at + 4]!;
  const t = buf[at + 5]!;
  if (size < FRAME_HEADER_SIZE) throw framingError(`frame size ${size} is below the minimum of 8 bytes`);
  if (size > maxFrameSize) throw framingError(`frame of ${size} bytes is over max-frame-size ${maxFrameSize}`);
  if (doff < 2) throw framingError(`frame data offset ${doff} is below the minimum of 2`);
  if (doff * 4 > size) throw framingError(`frame data offset ${doff * 4} bytes is beyond the frame's ${size} bytes`);
  if (t !== type) throw framingError(`frame type ${t} where a${type === FrameType.sasl ? ' SASL' : 'n AMQP'} frame (type ${type}) belongs`);
  return { size, doff, type: t, channel: buf.readUInt16BE(at + 6) };
}

export interface Frame {
  header: FrameHeader;
  /** The performative; undefined for an empty (heartbeat) frame. */
  body: Composite | undefined;
  /** Where the body, the payload (bytes after the performative: a transfer's) and the frame end, as offsets in the buffer read. */
  bodyStart: number;
  payloadStart: number;
  end: number;
}

/** Decode the frame at `at` whose header was read: the performative only, never the payload. */
export function readFrame(buf: Buffer, at: number, header: FrameHeader): Frame {
  const bodyStart = at + header.doff * 4;
  const end = at + header.size;
  if (bodyStart === end) {
    if (header.type === FrameType.sasl) throw framingError('an empty SASL frame');
    return { header, body: undefined, bodyStart, payloadStart: end, end };
  }
  const archetype = header.type === FrameType.sasl ? 'sasl-frame' : 'frame';
  const fast = readPerformative(buf, bodyStart, end, archetype);
  let body: Composite;
  let payloadStart: number;
  if (fast) {
    body = fast.body;
    payloadStart = fast.end;
  } else {
    const d = new Decoder(buf, bodyStart, end);
    body = decodeComposite(d.value(), { archetype }, '');
    payloadStart = d.pos;
  }
  if (payloadStart !== end && body.def.name !== 'transfer') throw decodeError(`${body.def.name} frame has ${end - payloadStart} bytes after its performative`);
  return { header, body, bodyStart, payloadStart, end };
}

/**
 * A frame's header and performative, its size counting `payloadLength` bytes
 * more: the payload is written after it as its own buffer (gathered writes), so
 * a message's bytes are never copied into a frame.
 */
export function frameHead(type: FrameTypeCode, channel: number, performative: AmqpValue | undefined, payloadLength = 0): Buffer {
  const e = new Encoder(64);
  e.raw(Buffer.from([0, 0, 0, 0, 2, type, channel >> 8, channel & 0xff]));
  if (performative) e.write(performative);
  const out = e.bytes();
  out.writeUInt32BE(out.length + payloadLength, 0);
  return out;
}

/** One frame: header (no extended header), performative, payload, in one buffer. */
export function encodeFrame(type: FrameTypeCode, channel: number, performative: AmqpValue | undefined, payload?: Buffer): Buffer {
  const head = frameHead(type, channel, performative, payload?.length ?? 0);
  return payload ? Buffer.concat([head, payload]) : head;
}

// Messages (spec 3.2) as the engine's clients build and read them: encode a
// message from plain values into its sections, and read the sections of an
// encoded one back (the broker itself reads only what it needs, through
// lazy-message and message-sections; this is for tandem's own clients).
import { safeString } from '../../util/safe-string.js';
import { Decoder } from './decoder.js';
import { Encoder } from './encoder.js';
import { decodeError } from './errors.js';
import { MESSAGE_SECTIONS, sectionCodeOf } from './message-sections.js';
import type { AmqpValue } from './types.js';

/** Plain JavaScript values that map onto AMQP values one to one. */
export type Plain = string | number | boolean | bigint | null | undefined | Buffer | Plain[] | { [key: string]: Plain } | AmqpValue;

export interface MessageFields {
  durable?: boolean;
  priority?: number;
  ttl?: number;
  /** A number is a ulong; an AmqpValue goes as typed (a reply echoing a request's uuid or binary id). */
  messageId?: string | number | AmqpValue;
  to?: string;
  subject?: string;
  replyTo?: string;
  correlationId?: string | number | AmqpValue;
  contentType?: string;
  applicationProperties?: Record<string, Plain>;
  /** Encoded as one amqp-value section. */
  body?: Plain;
}

/** The fields of the properties section (3.2.4), in order. */
export const PROPERTY_NAMES = ['message-id', 'user-id', 'to', 'subject', 'reply-to', 'correlation-id', 'content-type', 'content-encoding', 'absolute-expiry-time', 'creation-time', 'group-id', 'group-sequence', 'reply-to-group-id'] as const;
/** The fields of the header section (3.2.1), in order. */
export const HEADER_NAMES = ['durable', 'priority', 'ttl', 'first-acquirer', 'delivery-count'] as const;

const code = (name: string): number => MESSAGE_SECTIONS.find((s) => s.name === name)!.code;

function isAmqpValue(v: unknown): v is AmqpValue {
  return typeof v === 'object' && v !== null && !Buffer.isBuffer(v) && !Array.isArray(v) && typeof (v as { type?: unknown }).type === 'string' && ('value' in v || (v as { type: string }).type === 'null');
}

/** A plain value as AMQP: whole numbers as long, others as double; objects as maps keyed by strings. */
export function toAmqp(v: Plain): AmqpValue {
  if (v === null || v === undefined) return { type: 'null' };
  if (isAmqpValue(v)) return v;
  if (typeof v === 'string') return { type: 'string', value: v };
  if (typeof v === 'boolean') return { type: 'boolean', value: v };
  if (typeof v === 'bigint') return { type: 'long', value: v };
  if (typeof v === 'number') return Number.isSafeInteger(v) ? { type: 'long', value: BigInt(v) } : { type: 'double', value: v };
  if (Buffer.isBuffer(v)) return { type: 'binary', value: v };
  if (Array.isArray(v)) return { type: 'list', value: v.map(toAmqp) };
  // An undefined property is absent, as if it were not there (not a null).
  return { type: 'map', value: Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => [{ type: 'string', value: k }, toAmqp(x)]) };
}

/** A record as the spec's `fields` (a map keyed by symbols: open, attach and error properties, error info). */
export function fieldsValue(record: Record<string, Plain>): AmqpValue {
  return { type: 'map', value: Object.entries(record).map(([k, v]) => [{ type: 'symbol', value: k }, toAmqp(v)]) };
}

/** An AMQP value as plain JavaScript: 64-bit integers as numbers when they fit, maps as objects keyed by their keys' text. */
export function fromAmqp(v: AmqpValue): unknown {
  switch (v.type) {
    case 'null':
      return null;
    case 'timestamp':
      return new Date(Number(v.value));
    case 'ulong':
    case 'long':
      return v.value >= BigInt(Number.MIN_SAFE_INTEGER) && v.value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v.value) : v.value;
    case 'list':
    case 'array':
      return v.value.map(fromAmqp);
    case 'map': {
      const out: Record<string, unknown> = {};
      for (const [k, x] of v.value) {
        const key = safeString(fromAmqp(k));
        // Assigned, a peer's "__proto__" key set the object's prototype (every key of
        // its map then read as this one's); an own property like any other instead.
        if (key === '__proto__') Object.defineProperty(out, key, { value: fromAmqp(x), enumerable: true, writable: true, configurable: true });
        else out[key] = fromAmqp(x);
      }
      return out;
    }
    case 'described':
      return { descriptor: fromAmqp(v.descriptor), value: fromAmqp(v.value) };
    default:
      return v.value;
  }
}

const section = (name: string, value: AmqpValue): AmqpValue => ({ type: 'described', descriptor: { type: 'ulong', value: BigInt(code(name)) }, value });

function listOf(names: readonly string[], values: Record<string, AmqpValue | undefined>): AmqpValue | undefined {
  const items = names.map((n) => values[n] ?? ({ type: 'null' } as AmqpValue));
  let last = items.length - 1;
  while (last >= 0 && items[last]!.type === 'null') last--;
  return last < 0 ? undefined : { type: 'list', value: items.slice(0, last + 1) };
}

const id = (v: string | number | AmqpValue | undefined): AmqpValue | undefined =>
  v === undefined ? undefined : typeof v === 'number' ? { type: 'ulong', value: BigInt(v) } : typeof v === 'string' ? { type: 'string', value: v } : v;

export function encodeMessage(m: MessageFields): Buffer {
  const e = new Encoder(256);
  const header = listOf(HEADER_NAMES, {
    durable: m.durable === undefined ? undefined : { type: 'boolean', value: m.durable },
    priority: m.priority === undefined ? undefined : { type: 'ubyte', value: m.priority },
    ttl: m.ttl === undefined ? undefined : { type: 'uint', value: m.ttl },
  });
  if (header) e.write(section('header', header));
  const str = (s: string | undefined): AmqpValue | undefined => (s === undefined ? undefined : { type: 'string', value: s });
  const properties = listOf(PROPERTY_NAMES, {
    'message-id': id(m.messageId),
    to: str(m.to),
    subject: str(m.subject),
    'reply-to': str(m.replyTo),
    'correlation-id': id(m.correlationId),
    'content-type': m.contentType === undefined ? undefined : { type: 'symbol', value: m.contentType },
  });
  if (properties) e.write(section('properties', properties));
  if (m.applicationProperties) e.write(section('application-properties', { type: 'map', value: Object.entries(m.applicationProperties).map(([k, x]) => [{ type: 'string', value: k }, toAmqp(x)]) }));
  e.write(section('amqp-value', toAmqp(m.body ?? null)));
  return e.bytes();
}

export interface ReadMessage {
  header: Record<string, unknown>;
  properties: Record<string, unknown>;
  applicationProperties: Record<string, unknown>;
  /** amqp-value: its value; data: the Buffer (several: concatenated); amqp-sequence: the list. */
  body: unknown;
}

/** The body sections (3.2.6-3.2.8). */
export type BodySection = 'amqp-value' | 'data' | 'amqp-sequence';

/** A message's sections as the decoder read them: typed AMQP values, nothing converted. */
export interface MessageSections {
  header?: AmqpList;
  deliveryAnnotations?: AmqpMap;
  messageAnnotations?: AmqpMap;
  properties?: AmqpList;
  applicationProperties?: AmqpMap;
  /** In the order they came (several data sections make one body). */
  body: Array<{ section: BodySection; value: AmqpValue }>;
  footer?: AmqpMap;
}

type AmqpList = AmqpValue & { type: 'list' };
type AmqpMap = AmqpValue & { type: 'map' };

const BODY_SECTIONS: ReadonlyMap<number, BodySection> = new Map([
  [code('amqp-value'), 'amqp-value'],
  [code('data'), 'data'],
  [code('amqp-sequence'), 'amqp-sequence'],
]);

/**
 * The sections of an encoded message (bounded by the decoder's limits). A later section of
 * a kind replaces an earlier one, body sections aside (spec 3.2 allows one of each; a
 * broker refuses a second header or properties at publish: message-codec.ts).
 */
export function decodeSections(bytes: Buffer): MessageSections {
  const out: MessageSections = { body: [] };
  const d = new Decoder(bytes);
  while (d.remaining > 0) {
    const v = d.value();
    // A section is described by its code or by its symbol (spec 3.2): both are read.
    const c = v.type === 'described' ? sectionCodeOf(v.descriptor) : undefined;
    if (v.type !== 'described' || c === undefined) throw decodeError('a message section that is not described by a code or a symbol');
    const inner = v.value;
    const body = BODY_SECTIONS.get(c);
    if (body !== undefined) out.body.push({ section: body, value: inner });
    // A list section that is no list, or a map section that is no map, is passed over.
    else if (c === code('header') && inner.type === 'list') out.header = inner;
    else if (c === code('properties') && inner.type === 'list') out.properties = inner;
    else if (c === code('delivery-annotations') && inner.type === 'map') out.deliveryAnnotations = inner;
    else if (c === code('message-annotations') && inner.type === 'map') out.messageAnnotations = inner;
    else if (c === code('application-properties') && inner.type === 'map') out.applicationProperties = inner;
    else if (c === code('footer') && inner.type === 'map') out.footer = inner;
  }
  return out;
}

/** The sections of an encoded message, decoded (bounded by the decoder's limits). */
export function decodeMessage(bytes: Buffer): ReadMessage {
  const out: ReadMessage = { header: {}, properties: {}, applicationProperties: {}, body: undefined };
  const s = decodeSections(bytes);
  s.header?.value.forEach((x, i) => x.type !== 'null' && i < HEADER_NAMES.length && (out.header[HEADER_NAMES[i]!] = fromAmqp(x)));
  s.properties?.value.forEach((x, i) => x.type !== 'null' && i < PROPERTY_NAMES.length && (out.properties[PROPERTY_NAMES[i]!] = fromAmqp(x)));
  if (s.applicationProperties) out.applicationProperties = fromAmqp(s.applicationProperties) as Record<string, unknown>;
  const data: Buffer[] = [];
  for (const { section, value } of s.body) {
    if (section === 'data') {
      if (value.type === 'binary') data.push(value.value);
    } else out.body = fromAmqp(value);
  }
  if (data.length > 0) out.body = data.length === 1 ? data[0] : Buffer.concat(data);
  return out;
}

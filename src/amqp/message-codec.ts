// The broker keeps each message as the bytes its sender encoded and only reads
// the header and properties sections (what routing, priority and expiry need).
// On the way out the bytes go unchanged, except a header whose ttl and delivery
// count are told anew (the sender's other header fields kept as encoded) and the
// message-annotations, when consumers' modified outcomes added some. A dead letter
// has the same two sections written once, into the bytes it is stored as.
import type { IncomingMessage } from '../broker/broker.js';
import type { MessageRecord } from '../broker/changes.js';
import type { DeadLetterEdit, DeadLetterWriter } from '../broker/dead-letter.js';
import { encode } from './engine/encoder.js';
import { AmqpError } from './engine/errors.js';
import { type ReadMessage, decodeMessage } from './engine/message.js';
import { LONGEST_SECTION_SYMBOL, MESSAGE_SECTIONS, sectionCodeOfSymbol } from './engine/message-sections.js';
import type { AmqpValue } from './engine/types.js';
import { type MessageHead, readMessageHead, u32 } from './message-head.js';
import { encodedValueSize, MalformedMessage } from './encoded-value.js';
import { MapEntries } from './map-entries.js';

const HEADER = 0x70;
const PROPERTIES = 0x73;
const DELIVERY_ANNOTATIONS = 0x71;
const MESSAGE_ANNOTATIONS = 0x72;

// The size of an encoded value is read in its own module (encoded-value.ts), which the
// map walker (map-entries.ts) shares without this one; it is exported here as before.
export { encodedValueSize };

/**
 * The section code at `offset` if it starts a described section whose descriptor is
 * a code or a symbol (spec 3.2 allows either). A ulong descriptor is its whole 64-bit
 * value (as a number: exact enough to compare): one whose high word, the domain, is
 * not AMQP's zero is another section than its low word names, as the decoder reads
 * it. A symbol is its section's code ("amqp:properties:list": 0x73), and one that
 * names no section is NOT_A_SECTION: a section, but none the broker reads.
 */
export function sectionCode(buf: Buffer, offset: number): number | undefined {
  if (buf[offset] !== 0x00) return undefined;
  const type = buf[offset + 1];
  if (type === 0x53) return buf[offset + 2];
  if (type === 0x80 && offset + 10 <= buf.length) return buf.readUInt32BE(offset + 2) * 0x1_0000_0000 + buf.readUInt32BE(offset + 6);
  if (type === 0xa3 && offset + 3 <= buf.length) return symbolCode(buf, offset + 3, buf[offset + 2]!);
  if (type === 0xb3 && offset + 6 <= buf.length) return symbolCode(buf, offset + 6, buf.readUInt32BE(offset + 2));
  return undefined;
}

/** What sectionCode gives for a symbol that names no section (higher than every code: after them all). */
export const NOT_A_SECTION = Number.POSITIVE_INFINITY;

function symbolCode(buf: Buffer, at: number, length: number): number | undefined {
  if (at + length > buf.length) return undefined;
  // A longer symbol names no section: not made into a string (it may be megabytes).
  if (length > LONGEST_SECTION_SYMBOL) return NOT_A_SECTION;
  return sectionCodeOfSymbol(buf.toString('latin1', at, at + length)) ?? NOT_A_SECTION;
}

/**
 * The size of the section at `offset`: read directly when it is described by a small
 * ulong and its value's size is in its first bytes (what clients send), else as
 * encodedValueSize reads any value (which throws on one that does not fit).
 */
export function sectionSize(bytes: Buffer, offset: number): number {
  const at = offset + 3;
  if (bytes[offset] === 0x00 && bytes[offset + 1] === 0x53 && at + 5 <= bytes.length) {
    const width = bytes[at]! & 0xf0;
    const size = width === 0xa0 || width === 0xc0 || width === 0xe0 ? 5 + bytes[at + 1]! : width === 0xb0 || width === 0xd0 || width === 0xf0 ? 8 + u32(bytes, at + 1) : -1;
    if (size >= 0 && offset + size <= bytes.length) return size;
  }
  return encodedValueSize(bytes, offset);
}

/** Where the value of the section at `offset` starts, after the descriptor sectionCode read. */
export function describedValueAt(buf: Buffer, offset: number): number {
  const type = buf[offset + 1];
  if (type === 0x53) return offset + 3;
  if (type === 0x80) return offset + 10;
  return type === 0xa3 ? offset + 3 + buf[offset + 2]! : offset + 6 + buf.readUInt32BE(offset + 2);
}

/**
 * Where the value of section `wanted` (after its descriptor) starts; -1 when
 * absent. Sections come in the spec's order, so the search ends at the first
 * section that would follow `wanted`. A repeated section counts the first time, as
 * the broker's reading of the head takes it (parseIncoming), so a window keys
 * on the message-id (and a queue groups by the group-id) of the message the broker routed.
 */
export function sectionValueAt(bytes: Buffer, wanted: number): number {
  let offset = 0;
  // Bounded: at most the five sections before the body, each at least a few bytes.
  for (let i = 0; i < 5 && offset < bytes.length; i++) {
    const code = sectionCode(bytes, offset);
    if (code === undefined || code > wanted) break;
    if (code === wanted) return describedValueAt(bytes, offset);
    offset += encodedValueSize(bytes, offset);
  }
  return -1;
}

export interface ParsedMessage extends IncomingMessage {
  /** properties.to: where an anonymous-relay sender wants it to go. */
  to: string | undefined;
  /** Where its one properties section starts; -1: it has none. */
  propertiesAt: number;
}

/** The header and properties, decoded by the engine (safe on hostile bytes: every count bounded). */
function decodeSections(bytes: Buffer): ReadMessage {
  try {
    return decodeMessage(bytes);
  } catch (err) {
    if (err instanceof AmqpError) throw new MalformedMessage(err.description);
    throw err;
  }
}

/** Read what the broker needs from an encoded message. */
export function parseIncoming(bytes: Buffer): ParsedMessage {
  return parse(bytes, true);
}

/** parseIncoming by the generic decode alone: a test holds the two readings to each other. */
export function parseIncomingGenerically(bytes: Buffer): ParsedMessage {
  return parse(bytes, false);
}

function parse(bytes: Buffer, fast: boolean): ParsedMessage {
  let offset = 0;
  let headerLength = 0;
  let end = 0;
  let headerAt = -1;
  let propertiesAt = -1;
  let deliveryAnnotationsAt = -1;
  let messageAnnotationsAt = -1;
  let last = -1;
  // Header and properties come first when present; the head's reading stops after them.
  for (let i = 0; i < 4 && offset < bytes.length; i++) {
    const code = sectionCode(bytes, offset);
    if (code === undefined) throw new MalformedMessage(`expected a described section at byte ${offset}`);
    last = inSpecOrder(code, last, offset);
    const size = encodedValueSize(bytes, offset);
    if (code === HEADER || code === PROPERTIES) checkList(bytes, offset, code === HEADER ? 'header' : 'properties');
    if (code === HEADER) {
      headerLength = size;
      headerAt = offset;
    }
    if (code === PROPERTIES) propertiesAt = offset;
    if (code === DELIVERY_ANNOTATIONS) deliveryAnnotationsAt = offset;
    if (code === MESSAGE_ANNOTATIONS) messageAnnotationsAt = offset;
    offset += size;
    if (code === HEADER || code === PROPERTIES || code === DELIVERY_ANNOTATIONS || code === MESSAGE_ANNOTATIONS) end = offset;
    if (code >= PROPERTIES || code < HEADER) break;
  }
  // The rest is only walked: no section the head reads may come again behind it.
  for (let at = offset; at < bytes.length; at += sectionSize(bytes, at)) {
    const code = sectionCode(bytes, at);
    if (code === undefined) throw new MalformedMessage(`expected a described section at byte ${at}`);
    last = inSpecOrder(code, last, at);
  }
  let head = NO_HEAD;
  if (end > 0) {
    const quick = fast ? readMessageHead(bytes, headerAt, propertiesAt, end, deliveryAnnotationsAt, messageAnnotationsAt) : undefined;
    head = quick ?? headOf(decodeSections(bytes.subarray(0, end)));
  }
  return {
    bytes,
    headerLength,
    durable: head.durable,
    priority: head.priority,
    ttlMs: head.ttlMs,
    absoluteExpiry: head.absoluteExpiry,
    deliveryCount: head.deliveryCount,
    subject: head.subject,
    to: head.to,
    // Always known (-1: none): a fourth section before any properties would repeat one, which is refused.
    propertiesAt,
  };
}

const DATA = 0x75;
const AMQP_VALUE = 0x77;
const FOOTER = 0x78;

/**
 * The place of section `code` at `offset` in the spec's order (3.2), after the
 * place `last` of the sections before it: header (first), delivery-annotations,
 * message-annotations, properties, application-properties, the body (data,
 * amqp-sequence or amqp-value sections: they share one place and may repeat), footer;
 * each other one at most once. A section out of place is refused, because the broker
 * and its consumers would read different messages in it: the broker routes, keys and
 * checks by the first header or properties it meets, and a decoder lets a later one
 * win (rhea and ours do), so a consumer could be given a user-id, a message-id or a
 * header the broker never looked at. A section the spec does not name (a vendor's,
 * or a descriptor of another domain) is let through, as after the properties: the
 * broker's reading of the head stops at it, so no header, annotations or properties
 * may follow it.
 */
function inSpecOrder(code: number, last: number, offset: number): number {
  if (code < HEADER || code > FOOTER) return Math.max(last, PROPERTIES);
  const place = code >= DATA && code <= AMQP_VALUE ? DATA : code;
  if (place < last || (place === last && place !== DATA) || (code === HEADER && offset !== 0)) throw outOfPlace(code, offset);
  return place;
}

function outOfPlace(code: number, offset: number): MalformedMessage {
  const name = MESSAGE_SECTIONS.find((s) => s.code === code)!.name;
  return new MalformedMessage(`a ${name} section out of place at byte ${offset} (spec 3.2: header, delivery-annotations, message-annotations, properties, application-properties, the body, footer, in that order, each but the body's sections at most once)`);
}

/**
 * The header and properties sections are lists (spec 3.2.1, 3.2.4). Either as
 * anything else is refused: the generic decode would pass over it, and the message
 * would go out with it as its header, which the broker cannot rewrite (a new ttl,
 * a delivery count) when it must, so every consumer given it would fail.
 */
function checkList(bytes: Buffer, offset: number, name: string): void {
  const code = bytes[describedValueAt(bytes, offset)]!;
  if (code !== 0x45 && code !== 0xc0 && code !== 0xd0) throw new MalformedMessage(`the ${name} section is not a list (type code 0x${code.toString(16)})`);
}

const NO_HEAD: MessageHead = { durable: false, priority: 4, ttlMs: undefined, deliveryCount: 0, subject: undefined, to: undefined, absoluteExpiry: undefined };

/** The head of a message as the generic decode gave its sections. */
function headOf(m: ReadMessage): MessageHead {
  const h = m.header;
  const p = m.properties;
  // A timestamp decodes as a Date (an invalid one beyond a Date's range: no expiry).
  const expiry = p['absolute-expiry-time'];
  const expiryMs = expiry instanceof Date ? expiry.getTime() : typeof expiry === 'number' ? expiry : undefined;
  return {
    durable: h.durable === true,
    priority: typeof h.priority === 'number' ? h.priority : 4,
    ttlMs: typeof h.ttl === 'number' ? h.ttl : undefined,
    deliveryCount: typeof h['delivery-count'] === 'number' ? h['delivery-count'] : 0,
    subject: typeof p.subject === 'string' ? p.subject : undefined,
    to: typeof p.to === 'string' ? p.to : undefined,
    absoluteExpiry: expiryMs !== undefined && Number.isFinite(expiryMs) ? expiryMs : undefined,
  };
}

/**
 * Bytes to send for a stored message: the original, with a new header if needed and,
 * when consumers' modified outcomes added message-annotations (`annotations`, an
 * encoded map: mergeAddedAnnotations), the message's own annotations with those merged in.
 */
export function outgoingBytes(msg: MessageRecord, deliveryCount: number, now: number, annotations?: Buffer): Buffer {
  // Any count above 0 is written: a record's own count may be above its bytes' (a copy
  // with the count its message reached: a move, a failed commit's give-back, a snapshot),
  // never below, so one at 0 alone is surely what the bytes say.
  const newHeader = deliveryCount > 0 || !!msg.expiresAt;
  if (!newHeader && annotations === undefined) return msg.bytes;
  // Read once: a paged message's bytes are read back from the journal at each look.
  const bytes = msg.bytes;
  const header = newHeader
    ? rewriteHeader(bytes.subarray(0, msg.headerLength), msg.expiresAt ? Math.max(1, msg.expiresAt - now) : 0, deliveryCount)
    : bytes.subarray(0, msg.headerLength);
  const rest = bytes.subarray(msg.headerLength);
  return Buffer.concat(annotations === undefined ? [header, rest] : [header, ...withAnnotations(rest, annotations)]);
}

// ---- message-annotations added by a modified outcome (3.4.5, 3.5.7) -------------

/**
 * The most a message may hold of message-annotations added by consumers' modified
 * outcomes, as one encoded map: they come from a peer and are kept in memory with the
 * queued message, so what one consumer can make the broker hold per message is bounded.
 */
export const MAX_ADDED_ANNOTATIONS = 64 * 1024;

/** One entry of an annotations map: the key's identity (type and value) and the pair's encoded bytes. */
type Annotations = Map<string, Buffer>;

/** What mergeAddedAnnotations made of an outcome's annotations. */
export type AddedAnnotations =
  | { kind: 'none' }
  | { kind: 'merged'; map: Buffer }
  | { kind: 'too-large'; bytes: number };

/**
 * The annotations an entry holds after a modified outcome's `added` (a map keyed by
 * symbols: the outcome's field is of type fields, which the engine checks) is merged
 * over the ones it held (`held`, an encoded map, or undefined): same-named keys take
 * the outcome's value. All or nothing: a result over MAX_ADDED_ANNOTATIONS bytes is
 * 'too-large', and the entry keeps what it held. An empty map adds nothing ('none').
 */
export function mergeAddedAnnotations(held: Buffer | undefined, added: AmqpValue): AddedAnnotations {
  if (added.type !== 'map' || added.value.length === 0) return { kind: 'none' };
  const encoded = encode(added);
  if (encoded.length > MAX_ADDED_ANNOTATIONS) return { kind: 'too-large', bytes: encoded.length };
  if (held === undefined) return { kind: 'merged', map: encoded };
  const merged = mapPairs(held, 0)!;
  for (const [key, pair] of mapPairs(encoded, 0)!) merged.set(key, pair);
  const map = encodeMap(merged);
  return map.length > MAX_ADDED_ANNOTATIONS ? { kind: 'too-large', bytes: map.length } : { kind: 'merged', map };
}

/**
 * The sections after the header (`rest`) with `added` merged into the message-annotations
 * section, or a new such section where the spec orders it (after the header and any
 * delivery-annotations, before properties and the rest: 3.2). A section the broker cannot
 * read as a map (a sender's malformed one) is left as it was, without the keys added:
 * the broker does not rewrite what it cannot read.
 */
function withAnnotations(rest: Buffer, added: Buffer): Buffer[] {
  let at = 0;
  try {
    // Bounded: each pass steps over one section, and there are at most two before ours.
    for (;;) {
      const code = at < rest.length ? sectionCode(rest, at) : undefined;
      if (code === HEADER || code === DELIVERY_ANNOTATIONS) {
        at += encodedValueSize(rest, at);
        continue;
      }
      if (code !== MESSAGE_ANNOTATIONS) return [rest.subarray(0, at), ANNOTATIONS_DESCRIPTOR, added, rest.subarray(at)];
      const size = encodedValueSize(rest, at);
      const value = describedValueAt(rest, at);
      const own = mapPairs(rest, value);
      if (!own) return [rest];
      const theirs = mapPairs(added, 0)!;
      for (const [key, pair] of theirs) own.set(key, pair);
      return [rest.subarray(0, at), ANNOTATIONS_DESCRIPTOR, encodeMap(own), rest.subarray(at + size)];
    }
  } catch (err) {
    // A section that does not parse (only a message from before parse checked it can hold one).
    if (err instanceof MalformedMessage) return [rest];
    throw err;
  }
}

const ANNOTATIONS_DESCRIPTOR = Buffer.from([0x00, 0x53, MESSAGE_ANNOTATIONS]);

/**
 * The message with `key` set to `value` in its message-annotations (added to the
 * sender's, or over its own value of that key), every other byte as it was; as it was
 * altogether if its annotations are no well-formed map (parseIncoming refuses those).
 */
export function withMessageAnnotation(bytes: Buffer, key: string, value: AmqpValue): Buffer {
  const added = encode({ type: 'map', value: [[{ type: 'symbol', value: key }, value]] });
  const parts = withAnnotations(bytes, added);
  return parts.length === 1 ? bytes : Buffer.concat(parts);
}

/**
 * The pairs of the encoded map at `at`, in order, keyed by their key's identity;
 * undefined if it is not a well-formed map. A key named twice keeps its first place
 * and its last value.
 */
function mapPairs(buf: Buffer, at: number): Annotations | undefined {
  // A walker of its own per call: not on a publish's path, and it makes a Map anyway.
  const entries = new MapEntries();
  if (!entries.start(buf, at, 'message-annotations')) return undefined;
  const pairs: Annotations = new Map();
  while (entries.next()) pairs.set(keyIdentity(buf, entries.keyAt, entries.valueAt - entries.keyAt), buf.subarray(entries.keyAt, entries.valueEnd));
  return entries.problem === undefined ? pairs : undefined;
}

/**
 * A key as its type and value, so that the same key in another encoding (sym8 and sym32,
 * smallulong and ulong) is the same key: symbols and ulongs, the annotations' key types
 * (3.2.10), by value; anything else (only a malformed map holds one) by its bytes.
 */
function keyIdentity(buf: Buffer, at: number, size: number): string {
  switch (buf[at]) {
    case 0xa3: return `s${buf.toString('latin1', at + 2, at + size)}`;
    case 0xb3: return `s${buf.toString('latin1', at + 5, at + size)}`;
    case 0x44: return 'u0';
    case 0x53: return `u${buf[at + 1]}`;
    case 0x80: return `u${buf.readBigUInt64BE(at + 1)}`;
    default: return `r${buf.toString('latin1', at, at + size)}`;
  }
}

/** Pairs as one encoded map (map8 when it fits, else map32). */
function encodeMap(pairs: Annotations): Buffer {
  const items = [...pairs.values()];
  const body = Buffer.concat(items);
  const count = items.length * 2;
  if (body.length + 1 <= 0xff && count <= 0xff) return Buffer.concat([Buffer.from([0xc1, body.length + 1, count]), body]);
  const head = Buffer.alloc(9);
  head[0] = 0xd1;
  head.writeUInt32BE(body.length + 4, 1);
  head.writeUInt32BE(count, 5);
  return Buffer.concat([head, body]);
}

// ---- dead letters (src/broker/dead-letter.ts) ---------------------------------------

/** The message-annotation a dead letter names the queue it left by (a string, at most 255 characters as every queue name). */
export const DEAD_LETTER_QUEUE = 'x-opt-tandem-dead-letter-queue';
/** The message-annotation a dead letter says why by: rejected, expired or deleted (a string). */
export const DEAD_LETTER_REASON = 'x-opt-tandem-dead-letter-reason';

/**
 * Dead letters as the AMQP edge writes them: the header again (durable, priority,
 * first-acquirer as the sender encoded them; the ttl left and the delivery-count
 * reached, new) and the message-annotations with the consumers' added ones and the
 * queue and reason merged over the sender's (3.2: a broker may change these two
 * sections; the bare message, properties' absolute-expiry-time included, is the
 * sender's and goes on unchanged). A dead letter dead-lettered again names its last
 * queue. It grows by a header, a queue name and at most MAX_ADDED_ANNOTATIONS.
 */
export const deadLetterWriter: DeadLetterWriter = {
  setsOwnExpiry(bytes: Buffer): boolean {
    const head = parseIncoming(bytes);
    // As Broker.messageFor read them when the message arrived.
    return (head.ttlMs !== undefined && head.ttlMs > 0) || !!head.absoluteExpiry;
  },
  write(bytes: Buffer, headerLength: number, edit: DeadLetterEdit): { bytes: Buffer; headerLength: number } {
    const header = rewriteHeader(bytes.subarray(0, headerLength), edit.ttlMs, edit.deliveryCount);
    const rest = withAnnotations(bytes.subarray(headerLength), deadLetterAnnotations(edit));
    return { bytes: Buffer.concat([header, ...rest]), headerLength: header.length };
  },
};

/** The annotations a dead letter adds, as one encoded map: the consumers' (already bounded), then the queue and reason. */
function deadLetterAnnotations(edit: DeadLetterEdit): Buffer {
  const pairs: Annotations = (edit.annotations && mapPairs(edit.annotations, 0)) || new Map();
  const added: Array<[string, string]> = [[DEAD_LETTER_QUEUE, edit.queue], [DEAD_LETTER_REASON, edit.reason]];
  for (const [key, value] of added) {
    const encodedKey = encode({ type: 'symbol', value: key });
    pairs.set(keyIdentity(encodedKey, 0, encodedKey.length), Buffer.concat([encodedKey, encode({ type: 'string', value })]));
  }
  return encodeMap(pairs);
}

const NULL = Buffer.from([0x40]);
const MAX_UINT = 0xffff_ffff;
const HEADER_FIELDS = 5; // durable, priority, ttl, first-acquirer, delivery-count

/**
 * The header section again, with only what the broker changes (ttl, delivery-count) new:
 * the sender's durable, priority and first-acquirer go out as the sender encoded them.
 * `original` is the message's header section, or empty when it had none.
 */
export function rewriteHeader(original: Buffer, ttlMs: number, deliveryCount: number): Buffer {
  return headerWith(original, ttlMs > 0 ? ttlField(ttlMs) : NULL, deliveryCount);
}

/**
 * A header's ttl field of `ms` (above 0). The field is a uint: a longer time left (an
 * absolute expiry months away) is told as the longest it can say, not wrapped (100 days
 * went out as 14 hours).
 */
function ttlField(ms: number): Buffer {
  return uint(Math.min(ms, MAX_UINT));
}

/**
 * A stored message's bytes with only its header's delivery-count new, and its ttl when
 * `ttlLeftMs` is given (the time its stored expiry leaves): durable, priority,
 * first-acquirer (and otherwise the ttl) as the sender encoded them, and the sections
 * after the header byte for byte (3.2: the header is no part of the bare message, and an
 * intermediary may change it). A message without a header gets one holding only those
 * (the other fields null: their defaults). What `tandem ha diverged republish` sends.
 * Throws MalformedMessage on a header that does not parse.
 */
export function withDeliveryCount(msg: Pick<MessageRecord, 'bytes' | 'headerLength'>, deliveryCount: number, ttlLeftMs?: number): Buffer {
  const bytes = msg.bytes;
  // One already past goes with the least ttl there is: it expires on arrival.
  const ttl = ttlLeftMs === undefined ? undefined : ttlField(Math.max(1, ttlLeftMs));
  return Buffer.concat([headerWith(bytes.subarray(0, msg.headerLength), ttl, deliveryCount), bytes.subarray(msg.headerLength)]);
}

/** `original` (a header section, or empty) encoded again with `ttl` (an encoded field; undefined: the sender's) and `deliveryCount`. */
function headerWith(original: Buffer, ttl: Buffer | undefined, deliveryCount: number): Buffer {
  const fields = original.length > 0 ? headerFields(original) : [];
  while (fields.length < HEADER_FIELDS) fields.push(NULL);
  if (ttl) fields[2] = ttl;
  fields[4] = uint(deliveryCount);
  const body = Buffer.concat(fields.slice(0, HEADER_FIELDS));
  const list =
    body.length + 1 <= 0xff
      ? Buffer.from([0xc0, body.length + 1, HEADER_FIELDS])
      : Buffer.from([0xd0, 0, 0, 0, 0, 0, 0, 0, HEADER_FIELDS]);
  if (list[0] === 0xd0) list.writeUInt32BE(body.length + 4, 1);
  return Buffer.concat([Buffer.from([0x00, 0x53, HEADER]), list, body]);
}

/** The encoded fields of a header section (parseIncoming has already bounded its size). */
function headerFields(header: Buffer): Buffer[] {
  let offset = describedValueAt(header, 0);
  const list = header[offset];
  let count: number;
  // An empty list has no fields. Nor has a header that is not a list: none is taken in
  // now (parse refuses it), but a journal or a peer from before that may hold one, and
  // the broker read no field of it; a refusal here would fail every consumer given it.
  if (list !== 0xc0 && list !== 0xd0) return [];
  if (list === 0xc0) {
    count = header[offset + 2];
    offset += 3;
  } else {
    count = header.readUInt32BE(offset + 5);
    offset += 9;
  }
  const fields: Buffer[] = [];
  for (let i = 0; i < Math.min(count, HEADER_FIELDS) && offset < header.length; i++) {
    const size = encodedValueSize(header, offset);
    fields.push(header.subarray(offset, offset + size));
    offset += size;
  }
  return fields;
}

function uint(value: number): Buffer {
  const b = Buffer.alloc(5);
  b[0] = 0x70;
  b.writeUInt32BE(value >>> 0, 1);
  return b;
}

// One message as `tandem queue browse` shows it: its header, properties,
// annotations, application properties and body, read from the bytes the broker
// sent, for an operator's terminal (text) or a script (JSON). The bytes are a
// sender's, so hostile: every string shown is escaped (no control character, line
// separator or bidi override reaches the terminal), every map, list, string and
// body is cut to a bound, and a message that does not decode is shown as unreadable.
import { isUtf8 } from 'node:buffer';
import { type BodySection, HEADER_NAMES, type MessageSections, PROPERTY_NAMES, decodeSections } from '../amqp/engine/message.js';
import { type AmqpValue, uuidText } from '../amqp/engine/types.js';
import { printable, printableJson } from '../ops/printable.js';

/** How much of a message is shown: the body's bytes (--body-bytes), and fixed bounds on the rest. */
export const SHOWN = {
  /** Entries of one map or list (annotations, application properties, a map body...). */
  items: 100,
  /** Values looked at in one section or body, nested ones included. */
  values: 1000,
  /** Characters of one string inside a section (a property value, a key). */
  chars: 1024,
  /** Bytes of one binary inside a section, shown as hex. */
  binaryBytes: 256,
} as const;

/** The body as shown: what section held it, its type, and as much of it as --body-bytes allows. */
export interface ShownBody {
  section: BodySection | 'none';
  /** string, binary, or the AMQP type of an amqp-value (map, list, long...); list for amqp-sequence. */
  type: string;
  /** utf8: the text as it is (a string, or binary that is valid UTF-8); hex: binary as hex; json: other values, JSON-like. */
  encoding: 'utf8' | 'hex' | 'json';
  text: string;
  /** The whole body's size: bytes of the string or binary; of the JSON text for other values. */
  bytes: number;
  /** Bytes of that not shown (over --body-bytes). */
  cut: number;
}

/** A browsed message: AMQP's own field names, only those the message has (header fields with their defaults). */
export type BrowsedMessage = Record<string, unknown> & { position: number; size: number };

/** What a message's bytes show, with at most `bodyBytes` of its body. */
export function describeBrowsed(bytes: Buffer, position: number, bodyBytes: number): BrowsedMessage {
  let sections: MessageSections;
  try {
    sections = decodeSections(bytes);
  } catch (err) {
    return { position, size: bytes.length, unreadable: `cannot decode the message: ${(err as Error).message}` };
  }
  const out: BrowsedMessage = { position, size: bytes.length };
  const header = listFields(sections.header, HEADER_NAMES);
  // Absent header fields have the spec's defaults (3.2.1): shown, as a consumer would read them.
  const deliveryCount = header['delivery-count'] ?? 0;
  out['delivery-count'] = deliveryCount;
  out.redelivered = typeof deliveryCount === 'number' && deliveryCount > 0;
  out.durable = header.durable ?? false;
  out.priority = header.priority ?? 4;
  if (header.ttl !== undefined) out.ttl = header.ttl;
  if (header['first-acquirer'] !== undefined) out['first-acquirer'] = header['first-acquirer'];
  Object.assign(out, listFields(sections.properties, PROPERTY_NAMES));
  if (sections.messageAnnotations) out['message-annotations'] = plainOf(sections.messageAnnotations, budget());
  if (sections.applicationProperties) out['application-properties'] = plainOf(sections.applicationProperties, budget());
  out.body = bodyOf(sections.body, bodyBytes);
  return out;
}

// ---- text and JSON

/** A browsed message as lines for a terminal: one field a line, maps one entry a line, the body last. */
export function browsedText(m: BrowsedMessage): string {
  const lines = [`message ${m.position} (${m.size} bytes)`];
  for (const [key, value] of Object.entries(m)) {
    if (key === 'position' || key === 'size' || key === 'body') continue;
    if (key === 'unreadable') lines.push(`  unreadable: ${printable(String(value))}`);
    else if (MAP_FIELDS.has(key) && isMap(value)) {
      lines.push(`  ${key}:`);
      for (const [k, v] of Object.entries(value)) lines.push(`    ${printable(k)}: ${jsonText(v)}`);
    } else lines.push(`  ${key}: ${jsonText(value)}`);
  }
  const body = m.body as ShownBody | undefined;
  if (body) lines.push(`  body (${bodyLabel(body)}): ${printable(body.text)}`);
  return lines.join('\n');
}

function bodyLabel(b: ShownBody): string {
  if (b.section === 'none') return 'none';
  const as = b.encoding === 'hex' ? ', as hex' : '';
  const cut = b.cut > 0 ? `, first ${b.bytes - b.cut} shown, ${b.cut} cut` : '';
  return `${b.section}, ${b.type}, ${b.bytes} bytes${as}${cut}`;
}

/** JSON for a terminal: JSON.stringify escapes C0 controls; DEL, C1 and the rest are escaped too, still valid JSON. */
export function browsedJson(m: BrowsedMessage): string {
  return printableJson(JSON.stringify(m, null, 2));
}

const jsonText = (v: unknown): string => printableJson(JSON.stringify(v) ?? 'null');

/** Fields shown one entry a line. */
const MAP_FIELDS = new Set(['message-annotations', 'application-properties']);

const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

// ---- sections

interface Budget {
  values: number;
}

const budget = (): Budget => ({ values: SHOWN.values });

/** A list section's fields by name (header, properties), the nulls left out. */
function listFields(list: (AmqpValue & { type: 'list' }) | undefined, names: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (!list) return out;
  const b = budget();
  for (let i = 0; i < list.value.length && i < names.length; i++) {
    const v = list.value[i]!;
    if (v.type !== 'null') out[names[i]!] = plainOf(v, b);
  }
  return out;
}

/** More came than is shown: a marker in the value, so a reader sees that it was cut. */
const more = (n: number, what: string): string => `... ${n} more ${what}`;

/**
 * An AMQP value as plain JSON-able data, bounded: strings cut at SHOWN.chars, binary
 * shown as hex up to SHOWN.binaryBytes, maps and lists at SHOWN.items entries, and at
 * most `b.values` values in all (then '...'). 64-bit integers beyond 2^53 as digit
 * strings, timestamps as ISO-8601 text, uuids in their usual form.
 */
export function plainOf(v: AmqpValue, b: Budget): unknown {
  if (b.values <= 0) return '...';
  b.values--;
  switch (v.type) {
    case 'null':
      return null;
    case 'boolean':
      return v.value;
    case 'ubyte':
    case 'ushort':
    case 'uint':
    case 'byte':
    case 'short':
    case 'int':
      return v.value;
    case 'float':
    case 'double':
      // JSON has no NaN or infinities: as text, not as a null that means something else.
      return Number.isFinite(v.value) ? v.value : String(v.value);
    case 'char':
      return v.value <= 0x10ffff ? String.fromCodePoint(v.value) : `U+${v.value.toString(16)}`;
    case 'ulong':
    case 'long':
      return v.value >= BigInt(Number.MIN_SAFE_INTEGER) && v.value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v.value) : v.value.toString();
    case 'timestamp': {
      const ms = Number(v.value);
      return Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : v.value.toString();
    }
    case 'uuid':
      return uuidText(v.value);
    case 'binary':
    case 'decimal32':
    case 'decimal64':
    case 'decimal128':
      return { [v.type === 'binary' ? 'binary' : v.type]: hexOf(v.value, SHOWN.binaryBytes) };
    case 'string':
    case 'symbol':
      return v.value.length > SHOWN.chars ? `${v.value.slice(0, SHOWN.chars)}${more(v.value.length - SHOWN.chars, 'characters')}` : v.value;
    case 'list':
    case 'array': {
      const shown = v.value.slice(0, SHOWN.items).map((x) => plainOf(x, b));
      if (v.value.length > SHOWN.items) shown.push(more(v.value.length - SHOWN.items, 'items'));
      return shown;
    }
    case 'map': {
      // No prototype: a peer's "__proto__" key is a key like any other.
      const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
      const entries = v.value.slice(0, SHOWN.items);
      for (const [k, x] of entries) out[keyText(plainOf(k, b))] = plainOf(x, b);
      if (v.value.length > SHOWN.items) out['...'] = more(v.value.length - SHOWN.items, 'entries');
      return out;
    }
    case 'described':
      return { descriptor: plainOf(v.descriptor, b), value: plainOf(v.value, b) };
  }
}

/** A map key as text: a string as itself, anything else as its JSON. */
const keyText = (k: unknown): string => (typeof k === 'string' ? k : (JSON.stringify(k) ?? 'null'));

function hexOf(bytes: Buffer, max: number): string {
  return bytes.length > max ? `${bytes.subarray(0, max).toString('hex')}${more(bytes.length - max, 'bytes')}` : bytes.toString('hex');
}

// ---- the body

function bodyOf(body: MessageSections['body'], maxBytes: number): ShownBody {
  if (body.length === 0) return { section: 'none', type: 'none', encoding: 'json', text: '', bytes: 0, cut: 0 };
  const first = body[0]!;
  if (first.section === 'data') {
    // Several data sections are one body (3.2.6).
    const parts = body.flatMap((s) => (s.section === 'data' && s.value.type === 'binary' ? [s.value.value] : []));
    return binaryBody('data', parts.length === 1 ? parts[0]! : Buffer.concat(parts), maxBytes);
  }
  const v = first.value;
  if (first.section === 'amqp-value' && v.type === 'binary') return binaryBody('amqp-value', v.value, maxBytes);
  if (first.section === 'amqp-value' && (v.type === 'string' || v.type === 'symbol')) {
    return { section: 'amqp-value', type: v.type, encoding: 'utf8', ...cutText(v.value, maxBytes) };
  }
  // amqp-sequence: its lists, one after the other (3.2.7), as one list of lists.
  const value = first.section === 'amqp-sequence' ? plainOf({ type: 'list', value: body.map((s) => s.value) }, budget()) : plainOf(v, budget());
  const type = first.section === 'amqp-sequence' ? 'list' : v.type;
  return { section: first.section, type, encoding: 'json', ...cutText(JSON.stringify(value) ?? 'null', maxBytes) };
}

/** Binary as its text when it is valid UTF-8 (most bodies are text sent as bytes), else as hex. */
function binaryBody(section: BodySection, bytes: Buffer, maxBytes: number): ShownBody {
  const shown = Math.min(bytes.length, maxBytes);
  if (isUtf8(bytes)) {
    // Not cut inside a character: back to the start of the one at the cut.
    let end = shown;
    while (end > 0 && end < bytes.length && (bytes[end]! & 0xc0) === 0x80) end--;
    return { section, type: 'binary', encoding: 'utf8', text: bytes.subarray(0, end).toString('utf8'), bytes: bytes.length, cut: bytes.length - end };
  }
  return { section, type: 'binary', encoding: 'hex', text: bytes.subarray(0, shown).toString('hex'), bytes: bytes.length, cut: bytes.length - shown };
}

/** At most `maxBytes` of a text's UTF-8, whole characters only, and how many bytes that left out. */
export function cutText(text: string, maxBytes: number): { text: string; bytes: number; cut: number } {
  const total = Buffer.byteLength(text);
  if (total <= maxBytes) return { text, bytes: total, cut: 0 };
  let used = 0;
  let end = 0;
  // Code point by code point: at most maxBytes of them are looked at.
  for (const ch of text) {
    const size = Buffer.byteLength(ch);
    if (used + size > maxBytes) break;
    used += size;
    end += ch.length;
  }
  return { text: text.slice(0, end), bytes: total, cut: total - used };
}

// The values a JMS message selector (src/selector/) names, read from a message's
// encoded bytes. Identifiers are application properties, except the JMS header
// fields JMS lets a selector name, which are read where Apache Qpid JMS keeps them
// (its AmqpJmsMessageFacade) and as the application sees them:
//
//   JMSDeliveryMode   header.durable: 'PERSISTENT' or 'NON_PERSISTENT', read from the
//                     bytes, as the consumer gets it: a record kept durable that its
//                     sender sent non-durable (a DR copy, a move) goes out as sent
//   JMSPriority       header.priority (4 when absent; above 9 is 9, as qpid-jms shows it)
//   JMSMessageID      properties.message-id, as qpid-jms makes a JMSMessageID of it
//   JMSCorrelationID  properties.correlation-id, as qpid-jms makes a JMSCorrelationID
//   JMSTimestamp      properties.creation-time (ms)
//   JMSType           properties.subject
//   JMSXUserID, JMSXGroupID, JMSXGroupSeq   properties.user-id, group-id, group-sequence
//   JMSXDeliveryCount the delivery count + 1 (qpid-jms: AMQP delivery-count + 1), for a
//                     queue consumer the queue entry's, raised by each release
//   JMSRedelivered    whether the delivery count is above 0
//   JMSExpiration     properties.absolute-expiry-time, else the expiry the header ttl
//                     gives (qpid-jms: receipt + ttl, and the broker sends the ttl left),
//                     0 without either
//
// Only the sections a selector needs are read (header, properties, application-properties),
// by the engine's decoder, which is safe on any bytes, and the map walker (map-entries.ts).
// Bytes that do not read, an application-properties section that is no well-formed map
// among them, make the message one the selector does not select (the caller catches the throw).
import type { SelectableMessage } from '../broker/routing-selectors.js';
import type { SelectorValue } from '../selector/selector.js';
import { Decoder } from './engine/decoder.js';
import { type AmqpValue, uuidText } from './engine/types.js';
import { MalformedMessage } from './encoded-value.js';
import { MapEntries } from './map-entries.js';
import { sectionValueAt } from './message-codec.js';

const HEADER = 0x70;
const PROPERTIES = 0x73;
/** qpid-jms shows an AMQP priority above 9 (it may be up to 255) as 9. */
const MAX_JMS_PRIORITY = 9;
/**
 * Constructors of values no selector can compare (described, list, map, array): such a
 * property is NULL, told by its first byte, never decoded (it may be megabytes, or
 * nested deeper than the decoder goes).
 */
const NOT_SELECTABLE = new Set([0x00, 0x45, 0xc0, 0xc1, 0xd0, 0xd1, 0xe0, 0xf0]);
const APPLICATION_PROPERTIES = 0x74;

/** Reads a header field kept beside the bytes (the record's, or the delivery count the caller gives). */
type RecordRead = (msg: SelectableMessage, deliveryCount: number) => SelectorValue;

/**
 * Where a JMS header field comes from: the message record, or a field of the header or
 * properties list (`section`; `convert` giving undefined: not set there), with `otherwise`
 * the value when it is not set.
 */
type Source = { from: 'record'; read: RecordRead } | { from: 'section'; section: typeof HEADER | typeof PROPERTIES; field: number; convert: (v: AmqpValue) => SelectorValue | undefined; otherwise?: RecordRead };

const HEADER_FIELDS: Readonly<Record<string, Source>> = {
  // Not the record's durable: the broker keeps some messages more durably than their
  // sender asked (a DR copy, a DR quarantine's move: durable there), and sends them as sent.
  JMSDeliveryMode: { from: 'section', section: HEADER, field: 0, convert: (v) => (v.type === 'boolean' && v.value ? 'PERSISTENT' : undefined), otherwise: () => 'NON_PERSISTENT' },
  JMSPriority: { from: 'record', read: (m) => BigInt(Math.min(m.priority, MAX_JMS_PRIORITY)) },
  JMSXDeliveryCount: { from: 'record', read: (_m, count) => BigInt(count + 1) },
  JMSRedelivered: { from: 'record', read: (_m, count) => count > 0 },
  JMSExpiration: { from: 'section', section: PROPERTIES, field: 8, convert: (v) => (v.type === 'timestamp' ? v.value : undefined), otherwise: (m) => BigInt(m.expiresAt) },
  JMSMessageID: { from: 'section', section: PROPERTIES, field: 0, convert: (v) => jmsId(v, true) },
  JMSXUserID: { from: 'section', section: PROPERTIES, field: 1, convert: (v) => (v.type === 'binary' && v.value.length > 0 ? v.value.toString('utf8') : null) },
  JMSType: { from: 'section', section: PROPERTIES, field: 3, convert: plainValue },
  JMSCorrelationID: { from: 'section', section: PROPERTIES, field: 5, convert: (v) => jmsId(v, false) },
  JMSTimestamp: { from: 'section', section: PROPERTIES, field: 9, convert: plainValue },
  JMSXGroupID: { from: 'section', section: PROPERTIES, field: 10, convert: plainValue },
  JMSXGroupSeq: { from: 'section', section: PROPERTIES, field: 11, convert: plainValue },
};

/**
 * Reads, per message, the values of a selector's identifiers (in its slot order);
 * `deliveryCount` is the message's own unless a queue has raised it since.
 */
export type SelectorFieldReader = (msg: SelectableMessage, deliveryCount?: number) => SelectorValue[];

type ListField = { slot: number; field: number; convert: (v: AmqpValue) => SelectorValue | undefined };

export function selectorFieldReader(identifiers: readonly string[]): SelectorFieldReader {
  const fromRecord: Array<{ slot: number; read: RecordRead }> = [];
  const fromHeader: ListField[] = [];
  const fromProperties: ListField[] = [];
  const applicationProperties = new Map<string, number>();
  identifiers.forEach((name, slot) => {
    const header = Object.hasOwn(HEADER_FIELDS, name) ? HEADER_FIELDS[name]! : undefined;
    if (header?.from === 'record') fromRecord.push({ slot, read: header.read });
    else if (header?.from === 'section') {
      (header.section === HEADER ? fromHeader : fromProperties).push({ slot, field: header.field, convert: header.convert });
      // Its value when the section does not set it; read over by the section's when it does.
      if (header.otherwise) fromRecord.push({ slot, read: header.otherwise });
    } else applicationProperties.set(name, slot);
  });
  // Only keys of these UTF-8 lengths can be a property named: others are stepped over unread.
  const lengths = new Set([...applicationProperties.keys()].map((n) => Buffer.byteLength(n)));
  const readsBytes = fromHeader.length > 0 || fromProperties.length > 0 || applicationProperties.size > 0;
  return (msg, deliveryCount = msg.deliveryCount) => {
    const values: SelectorValue[] = new Array<SelectorValue>(identifiers.length).fill(null);
    for (const f of fromRecord) values[f.slot] = f.read(msg, deliveryCount);
    if (!readsBytes) return values;
    const bytes = msg.bytes;
    if (fromHeader.length > 0) readList(bytes, HEADER, fromHeader, values);
    if (fromProperties.length > 0) readList(bytes, PROPERTIES, fromProperties, values);
    if (applicationProperties.size > 0) readApplicationProperties(bytes, applicationProperties, lengths, values);
    return values;
  };
}

/** The `wanted` fields of the list section `section` (the header or the properties), where set. */
function readList(bytes: Buffer, section: number, wanted: ListField[], values: SelectorValue[]): void {
  const at = sectionValueAt(bytes, section);
  if (at < 0) return;
  const list = new Decoder(bytes, at).value();
  if (list.type !== 'list') return;
  for (const w of wanted) {
    const v = list.value[w.field];
    const value = v === undefined ? undefined : w.convert(v);
    if (value !== undefined) values[w.slot] = value;
  }
}

function readApplicationProperties(bytes: Buffer, wanted: Map<string, number>, lengths: Set<number>, values: SelectorValue[]): void {
  const at = sectionValueAt(bytes, APPLICATION_PROPERTIES);
  if (at < 0) return;
  const map = applicationProperties;
  if (!map.start(bytes, at, 'application-properties')) throw new MalformedMessage(map.problem!);
  const seen = new Set<number>();
  while (map.next()) {
    const name = keyName(bytes, map.keyAt, lengths);
    const slot = name === undefined ? undefined : wanted.get(name);
    // The first of a repeated key counts, as for the sections.
    if (slot !== undefined && !seen.has(slot)) {
      seen.add(slot);
      if (!NOT_SELECTABLE.has(bytes[map.valueAt]!)) values[slot] = plainValue(new Decoder(bytes, map.valueAt, map.valueEnd).value());
    }
  }
  // A map that does not read to its end is bytes that do not read: the message is not selected.
  if (map.problem !== undefined) throw new MalformedMessage(map.problem);
}

/** The walker of application-properties maps (one: a walk makes nothing per message). */
const applicationProperties = new MapEntries();

/** A string or symbol key's text, when its length is one a wanted name has; else undefined (not made into a string). */
function keyName(bytes: Buffer, at: number, lengths: Set<number>): string | undefined {
  const code = bytes[at];
  const wide = code === 0xb1 || code === 0xb3;
  if (!wide && code !== 0xa1 && code !== 0xa3) return undefined;
  const length = wide ? bytes.readUInt32BE(at + 1) : bytes[at + 1]!;
  if (!lengths.has(length)) return undefined;
  const from = at + (wide ? 5 : 2);
  return bytes.toString('utf8', from, from + length);
}

/**
 * A property's value as a selector sees it (JMS property types): booleans, strings,
 * integers as exact numbers, float and double as approximate ones. Anything else
 * (binary, uuid, lists, maps, null) cannot be selected on: null, unknown.
 */
function plainValue(v: AmqpValue): SelectorValue {
  switch (v.type) {
    case 'boolean':
      return v.value;
    case 'string':
    case 'symbol':
      return v.value;
    case 'byte':
    case 'short':
    case 'int':
    case 'ubyte':
    case 'ushort':
    case 'uint':
      return BigInt(v.value);
    case 'long':
    case 'ulong':
    case 'timestamp':
      return v.value;
    case 'float':
    case 'double':
      return v.value;
    case 'char':
      return String.fromCodePoint(v.value);
    default:
      return null;
  }
}

// qpid-jms' encoding of AMQP ids as JMS id strings (its AmqpMessageIdHelper).
const ID_PREFIX = 'ID:';
const TYPE_PREFIXES = ['AMQP_BINARY:', 'AMQP_UUID:', 'AMQP_ULONG:', 'AMQP_STRING:', 'AMQP_NO_PREFIX:'];

/**
 * A message-id or correlation-id as qpid-jms hands it to the application: a string
 * with "ID:" as it is (escaped with AMQP_STRING: when a type prefix follows); a string
 * without, as "ID:AMQP_NO_PREFIX:..." for a JMSMessageID and as it is for a
 * JMSCorrelationID; a uuid, ulong or binary as "ID:AMQP_UUID:...", "ID:AMQP_ULONG:...",
 * "ID:AMQP_BINARY:<upper-case hex>".
 */
function jmsId(v: AmqpValue, messageId: boolean): SelectorValue {
  switch (v.type) {
    case 'string': {
      const s = v.value;
      if (!s.startsWith(ID_PREFIX)) return messageId ? `${ID_PREFIX}AMQP_NO_PREFIX:${s}` : s;
      return TYPE_PREFIXES.some((p) => s.startsWith(p, ID_PREFIX.length)) ? `${ID_PREFIX}AMQP_STRING:${s}` : s;
    }
    case 'uuid':
      return `${ID_PREFIX}AMQP_UUID:${uuidText(v.value)}`;
    case 'ulong':
      return `${ID_PREFIX}AMQP_ULONG:${v.value}`;
    case 'binary':
      return `${ID_PREFIX}AMQP_BINARY:${v.value.toString('hex').toUpperCase()}`;
    default:
      return null;
  }
}

// Reads a message's duplicate-detection key (src/broker/dedup-key.ts) from its
// encoded bytes: the properties section's message-id, or one application
// property. Only the bytes of that one value are looked at, as encoded, so the
// key's AMQP type is known exactly (a decoder would turn a uuid and a binary
// into the same Buffer). Malformed bytes or an uncomparable type are an
// `invalid` answer, never a throw: the message then passes undeduplicated.
import { dedupDigest, DedupKeyType, type DedupKeyReader, type DedupLookup } from '../broker/dedup-key.js';
import { encodedValueSize, sectionCode } from './message-codec.js';

const PROPERTIES = 0x73;
const APPLICATION_PROPERTIES = 0x74;
const MISSING: DedupLookup = { status: 'missing' };

export function dedupKeyReader(bytes: Buffer): DedupKeyReader {
  let sections: { properties: number; applicationProperties: number } | undefined;
  return (property) => {
    try {
      sections ??= findSections(bytes);
      return property === undefined ? messageId(bytes, sections.properties) : applicationProperty(bytes, sections.applicationProperties, property);
    } catch (err) {
      return { status: 'invalid', reason: `the message cannot be read for its key: ${(err as Error).message}` };
    }
  };
}

/** Offsets of the two sections' values (after their descriptors), -1 when absent. */
function findSections(bytes: Buffer): { properties: number; applicationProperties: number } {
  const out = { properties: -1, applicationProperties: -1 };
  let offset = 0;
  // Bounded: at most the five sections before the body, each at least a few bytes.
  for (let i = 0; i < 5 && offset < bytes.length; i++) {
    const code = sectionCode(bytes, offset);
    if (code === undefined || code > APPLICATION_PROPERTIES) break;
    const descriptor = bytes[offset + 1] === 0x53 ? 3 : 10;
    if (code === PROPERTIES) out.properties = offset + descriptor;
    if (code === APPLICATION_PROPERTIES) out.applicationProperties = offset + descriptor;
    offset += encodedValueSize(bytes, offset);
  }
  return out;
}

/** The first element of the properties list. */
function messageId(bytes: Buffer, at: number): DedupLookup {
  if (at < 0) return MISSING;
  const list = compound(bytes, at, 'properties');
  if (list.count === 0) return MISSING;
  return keyOf(bytes, list.first, 'message-id');
}

function applicationProperty(bytes: Buffer, at: number, name: string): DedupLookup {
  if (at < 0) return MISSING;
  const map = compound(bytes, at, 'application-properties');
  if (map.count % 2 !== 0) return { status: 'invalid', reason: 'application-properties has an odd number of elements' };
  let offset = map.first;
  // Bounded by the map's count, each step consuming at least one byte (or throwing).
  for (let i = 0; i < map.count; i += 2) {
    const keySize = encodedValueSize(bytes, offset);
    const k = stringAt(bytes, offset);
    offset += keySize;
    if (k === name) return keyOf(bytes, offset, `application property '${name}'`);
    offset += encodedValueSize(bytes, offset);
  }
  return MISSING;
}

/** A list or map value: its element count and where the first element starts. */
function compound(bytes: Buffer, at: number, what: string): { count: number; first: number } {
  const code = bytes[at];
  encodedValueSize(bytes, at); // checks that it fits
  if (code === 0x45) return { count: 0, first: at + 1 };
  if (code === 0xc0 || code === 0xc1) return { count: bytes[at + 2]!, first: at + 3 };
  if (code === 0xd0 || code === 0xd1) return { count: bytes.readUInt32BE(at + 5), first: at + 9 };
  throw new Error(`${what} is not a list or map (type 0x${(code ?? 0).toString(16)})`);
}

function stringAt(bytes: Buffer, at: number): string | undefined {
  const code = bytes[at];
  if (code === 0xa1 || code === 0xa3) return bytes.toString('utf8', at + 2, at + 2 + bytes[at + 1]!);
  if (code === 0xb1 || code === 0xb3) return bytes.toString('utf8', at + 5, at + 5 + bytes.readUInt32BE(at + 1));
  return undefined;
}

const SIGNED: Record<number, number> = { 0x51: 1, 0x61: 2, 0x71: 4, 0x54: 1, 0x81: 8, 0x55: 1 };
const UNSIGNED: Record<number, number> = { 0x50: 1, 0x60: 2, 0x70: 4, 0x52: 1, 0x80: 8, 0x53: 1 };

/** The key a value makes: its type and canonical bytes, digested. */
function keyOf(bytes: Buffer, at: number, what: string): DedupLookup {
  const size = encodedValueSize(bytes, at);
  const code = bytes[at]!;
  const body = bytes.subarray(at + 1, at + size);
  if (code === 0x40) return MISSING;
  // Every integer type is one: the canonical value is its decimal text.
  if (code === 0x43 || code === 0x44) return key(DedupKeyType.integer, Buffer.from('0'));
  const width = UNSIGNED[code] ?? SIGNED[code];
  if (width !== undefined) {
    let v = 0n;
    for (const b of body) v = (v << 8n) | BigInt(b);
    if (SIGNED[code] !== undefined && body[0]! & 0x80) v -= 1n << BigInt(width * 8);
    return key(DedupKeyType.integer, Buffer.from(v.toString()));
  }
  switch (code) {
    case 0x98:
      return key(DedupKeyType.uuid, body);
    case 0xa0:
    case 0xa1:
    case 0xa3:
      return key(typeOfVariable(code), body.subarray(1));
    case 0xb0:
    case 0xb1:
    case 0xb3:
      return key(typeOfVariable(code), body.subarray(4));
    default:
      return { status: 'invalid', reason: `${what} is of AMQP type 0x${code.toString(16)}, which is not compared (use a ulong, uuid, binary or string)` };
  }
}

function typeOfVariable(code: number): DedupKeyType {
  const low = code & 0x0f;
  return low === 0 ? DedupKeyType.binary : low === 1 ? DedupKeyType.string : DedupKeyType.symbol;
}

function key(type: DedupKeyType, value: Uint8Array): DedupLookup {
  return { status: 'key', digest: dedupDigest(type, value) };
}

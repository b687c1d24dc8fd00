// Reads a message's duplicate-detection key (src/broker/dedup-key.ts) from its
// encoded bytes: the properties section's message-id, or one application
// property. Only the bytes of that one value are looked at, as encoded, so the
// key's AMQP type is known exactly (a decoder would turn a uuid and a binary
// into the same Buffer). Malformed bytes or an uncomparable type are an
// `invalid` answer, never a throw: the message then passes undeduplicated.
import { dedupDigest, dedupIntegerDigest, DedupKeyType, type DedupKeyReader, type DedupLookup } from '../broker/dedup-key.js';
import { describedValueAt, encodedValueSize, sectionCode, sectionValueAt } from './message-codec.js';

const PROPERTIES = 0x73;
const APPLICATION_PROPERTIES = 0x74;
const MISSING: DedupLookup = { status: 'missing' };

/**
 * A message's key (`property` undefined: its message-id). Called once per message
 * and window key, so it makes nothing it can avoid, and where the head's reader
 * found the properties section (`propertiesAt`) it does not look again.
 */
export const readDedupKey: DedupKeyReader = (bytes, property, propertiesAt) => {
  try {
    if (property === undefined) {
      const at = propertiesValueAt(bytes, propertiesAt);
      if (at < 0 || compound(bytes, at, 'properties', LIST) === 0) return MISSING;
      return keyOf(bytes, compoundFirst, 'message-id');
    }
    return applicationProperty(bytes, sectionValueAt(bytes, APPLICATION_PROPERTIES), property);
  } catch (err) {
    return { status: 'invalid', reason: `the message cannot be read for its key: ${(err as Error).message}` };
  }
};

/**
 * Where the properties section's value starts (-1: no such section): at the offset
 * the head's reader found, unless it gave none (undefined) or it is not where a
 * properties section starts, and then as sectionValueAt finds it.
 */
function propertiesValueAt(bytes: Buffer, propertiesAt: number | undefined): number {
  if (propertiesAt === undefined || (propertiesAt >= 0 && sectionCode(bytes, propertiesAt) !== PROPERTIES)) return sectionValueAt(bytes, PROPERTIES);
  return propertiesAt < 0 ? -1 : describedValueAt(bytes, propertiesAt);
}

function applicationProperty(bytes: Buffer, at: number, name: string): DedupLookup {
  if (at < 0) return MISSING;
  const count = compound(bytes, at, 'application-properties', MAP);
  if (count % 2 !== 0) return { status: 'invalid', reason: 'application-properties has an odd number of elements' };
  let offset = compoundFirst;
  const end = compoundEnd;
  // Bounded by the map's count, each step consuming at least one byte (or throwing).
  for (let i = 0; i < count; i += 2) {
    // A count beyond what the map's size holds would read the next section's bytes as entries.
    if (offset >= end) return SHORT_MAP;
    const keySize = encodedValueSize(bytes, offset);
    const k = stringAt(bytes, offset);
    offset += keySize;
    if (offset >= end) return SHORT_MAP;
    if (k === name) return offset + encodedValueSize(bytes, offset) > end ? SHORT_MAP : keyOf(bytes, offset, `application property '${name}'`);
    offset += encodedValueSize(bytes, offset);
  }
  return MISSING;
}

/** Where the first element of the compound compound() last read starts, and where it ends (one place, not an object per call: this runs per message). */
let compoundFirst = 0;
let compoundEnd = 0;
const SHORT_MAP: DedupLookup = { status: 'invalid', reason: 'application-properties holds fewer entries than its count says' };

/** The encodings of a list (list0, list8, list32) and of a map (map8, map32), by what a section must be. */
const LIST = { name: 'list', empty: 0x45, small: 0xc0, large: 0xd0 };
const MAP = { name: 'map', empty: -1, small: 0xc1, large: 0xd1 };

/**
 * The element count of the list or map (`kind`) at `at`; compoundFirst is set to
 * where its first element starts. Any other value throws: properties that are a
 * map, or application properties that are a list, are not read as the other.
 */
function compound(bytes: Buffer, at: number, what: string, kind: typeof LIST): number {
  const code = bytes[at];
  compoundEnd = at + encodedValueSize(bytes, at); // and checks that it fits
  if (code === kind.empty) {
    compoundFirst = at + 1;
    return 0;
  }
  if (code === kind.small) {
    compoundFirst = at + 3;
    return bytes[at + 2]!;
  }
  if (code === kind.large) {
    compoundFirst = at + 9;
    return bytes.readUInt32BE(at + 5);
  }
  throw new Error(`${what} is not a ${kind.name} (type 0x${(code ?? 0).toString(16)})`);
}

function stringAt(bytes: Buffer, at: number): string | undefined {
  const code = bytes[at];
  if (code === 0xa1 || code === 0xa3) return bytes.toString('utf8', at + 2, at + 2 + bytes[at + 1]!);
  if (code === 0xb1 || code === 0xb3) return bytes.toString('utf8', at + 5, at + 5 + bytes.readUInt32BE(at + 1));
  return undefined;
}

/** Integer type codes and their widths in bytes (uint0 and ulong0: none, the value 0); signed ones are two's complement. */
const SIGNED: Record<number, number> = { 0x51: 1, 0x61: 2, 0x71: 4, 0x54: 1, 0x81: 8, 0x55: 1 };
const UNSIGNED: Record<number, number> = { 0x50: 1, 0x60: 2, 0x70: 4, 0x52: 1, 0x80: 8, 0x53: 1, 0x43: 0, 0x44: 0 };
/** The two tables by type code, for the per-message read (an object's numeric keys are a slower lookup): width, or -1 for no integer. */
const INTEGER_WIDTH = new Int8Array(256).fill(-1);
const INTEGER_SIGNED = new Uint8Array(256);
for (const [table, signed] of [[UNSIGNED, 0], [SIGNED, 1]] as const) {
  for (const [code, width] of Object.entries(table)) {
    INTEGER_WIDTH[Number(code)] = width;
    INTEGER_SIGNED[Number(code)] = signed;
  }
}

/** The key a value makes: its type and canonical bytes, digested. */
function keyOf(bytes: Buffer, at: number, what: string): DedupLookup {
  const size = encodedValueSize(bytes, at);
  const code = bytes[at]!;
  if (code === 0x40) return MISSING;
  // Every integer type is one: the digest holds the value, not its width.
  const width = INTEGER_WIDTH[code]!;
  if (width >= 0) return { status: 'key', digest: dedupIntegerDigest(bytes, at + 1, width, INTEGER_SIGNED[code] === 1) };
  switch (code) {
    case 0x98:
      return key(DedupKeyType.uuid, bytes, at + 1, at + size);
    case 0xa0:
    case 0xa1:
    case 0xa3:
      return key(typeOfVariable(code), bytes, at + 2, at + size);
    case 0xb0:
    case 0xb1:
    case 0xb3:
      return key(typeOfVariable(code), bytes, at + 5, at + size);
    default:
      return { status: 'invalid', reason: `${what} is of AMQP type 0x${code.toString(16)}, which is not compared (use a ulong, uuid, binary or string)` };
  }
}

function typeOfVariable(code: number): DedupKeyType {
  const low = code & 0x0f;
  return low === 0 ? DedupKeyType.binary : low === 1 ? DedupKeyType.string : DedupKeyType.symbol;
}

function key(type: DedupKeyType, value: Buffer, start = 0, end = value.length): DedupLookup {
  return { status: 'key', digest: dedupDigest(type, value, start, end) };
}

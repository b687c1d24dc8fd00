// Reads a message's duplicate-detection key (src/broker/dedup-key.ts) from its
// encoded bytes: the properties section's message-id, or one application
// property. Only the bytes of that one value are looked at, as encoded, so the
// key's AMQP type is known exactly (a decoder would turn a uuid and a binary
// into the same Buffer). Malformed bytes or an uncomparable type are an
// `invalid` answer, never a throw: the message then passes undeduplicated.
import { dedupDigest, dedupIntegerDigest, DedupKeyType, type DedupKeyReader, type DedupLookup } from '../broker/dedup-key.js';
import { MapEntries } from './map-entries.js';
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
      if (at < 0 || list(bytes, at, 'properties') === 0) return MISSING;
      return keyOf(bytes, listFirst, 'message-id');
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

/** The walker of application-properties maps (one: a walk makes nothing per message). */
const applicationProperties = new MapEntries();

/**
 * The key application property `name` makes: the first entry of that name counts. The
 * map is checked to its end either way, so a malformed one is invalid however its
 * entries lie (a count that says more than it holds, the key in the entry it holds).
 */
function applicationProperty(bytes: Buffer, at: number, name: string): DedupLookup {
  if (at < 0) return MISSING;
  const map = applicationProperties;
  if (!map.start(bytes, at, 'application-properties')) return invalid(map);
  while (map.next()) {
    if (stringAt(bytes, map.keyAt) !== name) continue;
    const valueAt = map.valueAt;
    return map.finish() ? keyOf(bytes, valueAt, `application property '${name}'`) : invalid(map);
  }
  return map.problem === undefined ? MISSING : invalid(map);
}

function invalid(map: MapEntries): DedupLookup {
  return { status: 'invalid', reason: map.problem! };
}

/** Where the first element of the list list() last read starts (one place, not an object per call: this runs per message). */
let listFirst = 0;

/**
 * The element count of the list (list0, list8, list32) at `at`; listFirst is set to
 * where its first element starts. Any other value throws: properties that are a map
 * are not read as a list.
 */
function list(bytes: Buffer, at: number, what: string): number {
  const code = bytes[at];
  encodedValueSize(bytes, at); // checks that it fits
  if (code === 0x45) {
    listFirst = at + 1;
    return 0;
  }
  if (code === 0xc0) {
    listFirst = at + 3;
    return bytes[at + 2]!;
  }
  if (code === 0xd0) {
    listFirst = at + 9;
    return bytes.readUInt32BE(at + 5);
  }
  throw new Error(`${what} is not a list (type 0x${(code ?? 0).toString(16)})`);
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

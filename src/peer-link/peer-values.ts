// Plain values as the AMQP values a peer link puts on the wire (hello and open
// properties, stream message headers), in the types and widths the links have
// always sent: those rhea's writer chose. A backup, a bridge and the brokers
// they dial may run different versions, so the bytes stay what they were.
// Whole numbers: uint for 0 < n < 2^32 (smalluint up to 255), ulong above; int
// for -2^31 < n <= 0 (smallint from -128), long below; any other number a
// double, NaN a null. Strings and symbols: the 8-bit-size encoding up to 255
// bytes. Maps are always map32, lists list32 (list0 when empty).
import { safeString } from '../util/safe-string.js';
import type { AmqpValue } from '../amqp/engine/types.js';

const UINT_END = 2 ** 32;
const INT_LOW = -2147483647;

const sized = (bytes: number, small: number, large: number): number => (bytes > 255 ? large : small);

function numberValue(n: number): AmqpValue {
  if (Number.isNaN(n)) return { type: 'null' };
  if (!Number.isInteger(n)) return { type: 'double', value: n, code: 0x82 };
  if (n > 0) {
    if (n < UINT_END) return { type: 'uint', value: n, code: n > 255 ? 0x70 : 0x52 };
    return { type: 'ulong', value: BigInt(n), code: 0x80 };
  }
  if (n > INT_LOW) return { type: 'int', value: n, code: n < -128 ? 0x71 : 0x54 };
  return { type: 'long', value: BigInt(n), code: 0x81 };
}

/** One plain value (string, number, boolean, null, Buffer, Date, array, object) as the peer links encode it. */
export function peerValue(v: unknown): AmqpValue {
  if (v === undefined || v === null) return { type: 'null' };
  switch (typeof v) {
    case 'string':
      return { type: 'string', value: v, code: sized(Buffer.byteLength(v), 0xa1, 0xb1) };
    case 'boolean':
      return { type: 'boolean', value: v, code: v ? 0x41 : 0x42 };
    case 'number':
      return numberValue(v);
    case 'bigint':
      return { type: 'long', value: v, code: 0x81 };
    default:
      break;
  }
  if (Buffer.isBuffer(v)) return { type: 'binary', value: v, code: sized(v.length, 0xa0, 0xb0) };
  if (v instanceof Date) return { type: 'timestamp', value: BigInt(v.getTime()), code: 0x83 };
  if (Array.isArray(v)) return v.length === 0 ? { type: 'list', value: [], code: 0x45 } : { type: 'list', value: v.map(peerValue), code: 0xd0 };
  return peerMap(v as Record<string, unknown>, 'string');
}

/** A map of plain values; keys as strings (application properties) or symbols (open and attach properties). */
export function peerMap(o: Record<string, unknown>, keys: 'string' | 'symbol'): AmqpValue {
  const key = (k: string): AmqpValue =>
    keys === 'symbol' ? { type: 'symbol', value: k, code: sized(Buffer.byteLength(k), 0xa3, 0xb3) } : peerValue(k);
  return { type: 'map', value: Object.entries(o).map(([k, v]) => [key(k), peerValue(v)]), code: 0xd1 };
}

/**
 * A whole number a peer's message carries (an LSN, a time, an epoch), as the peer
 * links decode it (a number, or a bigint for a ulong), or `absent` when it has none.
 * Anything but a safe integer >= 0 throws, naming `what`: taken as it was, a NaN or
 * 1.5 became a copy's position in memory and reached the journal later, whose
 * record codec threw where nothing caught it (an exit of the broker).
 */
export function peerWholeNumber(value: unknown, what: string, absent = 0): number {
  if (value === undefined || value === null) return absent;
  const n = typeof value === 'bigint' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw new Error(`${what} must be a whole number, not ${JSON.stringify(safeString(value)).slice(0, 40)}`);
  return n;
}

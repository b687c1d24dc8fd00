// What a duplicate-detection window compares: a message's key, reduced to a
// 16-byte digest of its type and value. The key is the AMQP message-id (ulong,
// uuid, binary or string) or, when a queue names one, an application property
// (string, symbol, binary, uuid or any integer type). Two keys are the same when
// type and value are: the string "1" and the ulong 1 differ, and every integer
// type is one type (an int 7 and a long 7 are one key), as a client that
// resends re-encodes the same number in whichever width its library picks.
//
// A short key is its own digest, written out: `0x80 | type`, then for an
// integer its value as 9 bytes of big-endian two's complement (every AMQP
// integer, ulong and long alike, fits in 72 bits), for anything else the
// value's length in one byte and the value; zeros after. That form is one to
// one, so two short keys share a digest only when they are the same key, and
// it costs a few byte copies where SHA-256 cost most of a window's time per
// message (the bench's profile: ~0.55 of ~1.9 µs).
//
// A longer key's digest is SHA-256 over the type byte and the value, cut to 128
// bits: fixed-size rows off the heap whatever the key's length, and two keys
// share one only with a chance near 2^-128 per pair. For a long key to take a
// short key's digest a sender would need a SHA-256 preimage of 112 or more
// chosen bits. So no sender can steer a digest onto another's key, and keeping
// digests never takes a new message for a duplicate in practice.
import * as crypto from 'node:crypto';

/** Bytes of one key's digest. */
export const DEDUP_DIGEST_BYTES = 16;

/** The key's type, the first byte hashed. */
export const DedupKeyType = {
  integer: 1,
  uuid: 2,
  binary: 3,
  string: 4,
  symbol: 5,
} as const;
export type DedupKeyType = (typeof DedupKeyType)[keyof typeof DedupKeyType];

/**
 * A key's 16-byte digest as its four little-endian 32-bit words, the form a
 * window's index compares and its rows and the journal hold (as bytes). One is
 * made per keyed message: four numbers in an object cost about a tenth of a
 * 16-byte Buffer (a typed array, ~95 ns to make here), and reading them needs
 * no byte assembly.
 */
export interface DedupDigest {
  readonly w0: number;
  readonly w1: number;
  readonly w2: number;
  readonly w3: number;
}

/** The digest whose 16 bytes are at `at` in `bytes`. */
export function dedupDigestAt(bytes: Uint8Array, at = 0): DedupDigest {
  return { w0: wordAt(bytes, at), w1: wordAt(bytes, at + 4), w2: wordAt(bytes, at + 8), w3: wordAt(bytes, at + 12) };
}

/** The digest's 16 bytes into `to` at `at`. */
export function writeDedupDigest(d: DedupDigest, to: Uint8Array, at = 0): void {
  putWord(to, at, d.w0);
  putWord(to, at + 4, d.w1);
  putWord(to, at + 8, d.w2);
  putWord(to, at + 12, d.w3);
}

function putWord(to: Uint8Array, at: number, w: number): void {
  to[at] = w & 0xff;
  to[at + 1] = (w >>> 8) & 0xff;
  to[at + 2] = (w >>> 16) & 0xff;
  to[at + 3] = w >>> 24;
}

/** The digest's 16 bytes. */
export function dedupDigestBytes(d: DedupDigest): Buffer {
  const out = Buffer.allocUnsafe(DEDUP_DIGEST_BYTES);
  writeDedupDigest(d, out);
  return out;
}

/** The digest as hex (its bytes'), for a set of keys. */
export function dedupDigestHex(d: DedupDigest): string {
  return dedupDigestBytes(d).toString('hex');
}

/** The little-endian 32-bit word at `at`. */
export function wordAt(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}

/** A message's key for one queue's window, as the AMQP edge read it. */
export type DedupLookup =
  | { status: 'key'; digest: DedupDigest }
  /** The message has no such key (no message-id, or not that property): passed, counted. */
  | { status: 'missing' }
  /** A key of a type that cannot be compared (a float, a map...): passed, counted and logged. */
  | { status: 'invalid'; reason: string };

/**
 * Reads the key of the message `bytes` encode; `property` undefined means the
 * message-id. `propertiesAt`: where its properties section starts (-1: it has
 * none), if the caller knows; else the reader finds it. Given by the AMQP edge.
 */
export type DedupKeyReader = (bytes: Buffer, property: string | undefined, propertiesAt?: number) => DedupLookup;

// crypto.hash (Node 20.12 on) hashes in one call: per key about 40% less than a
// createHash object with two updates, which profiling showed as the largest
// single cost of a window (7% of a busy publisher). Node 20 before 20.12 has
// no such export, so it is looked up, not imported by name. Both give the same
// digest: SHA-256 over the type byte, then the value, as journals hold it.
const oneShotHash = typeof crypto.hash === 'function' ? crypto.hash : undefined;

// The digest is asked for as a 'binary' (latin1) string, a char per byte, and its first 16
// chars read as words: a 'buffer' answer is a fresh ArrayBuffer per key, whose
// allocation and later sweep cost about as much as the hash (measured 440 against
// 900 ns per key), and writing the string into a Buffer to read it back cost ~200 ns
// more than reading its chars (Node 20 here: ~500 against ~310 ns per 62-byte key,
// hash included). The hashed input goes through a scratch buffer for the same
// reason; keys longer than it get their own.
const SCRATCH_BYTES = 1024;
const scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
/** Views of the scratch buffer by length, made once each (keys mostly have a handful of lengths). */
const scratchViews: Buffer[] = [];

function hashInput(length: number): Buffer {
  if (length > SCRATCH_BYTES) return Buffer.allocUnsafe(length);
  return (scratchViews[length] ??= scratch.subarray(0, length));
}

function digestOf(input: Buffer): DedupDigest {
  const d = oneShotHash!('sha256', input, 'binary');
  return { w0: charWordAt(d, 0), w1: charWordAt(d, 4), w2: charWordAt(d, 8), w3: charWordAt(d, 12) };
}

/** The little-endian 32-bit word of the latin1 chars at `at` (bytes as chars). */
function charWordAt(s: string, at: number): number {
  return (s.charCodeAt(at) | (s.charCodeAt(at + 1) << 8) | (s.charCodeAt(at + 2) << 16) | (s.charCodeAt(at + 3) << 24)) >>> 0;
}

/** The scratch a short key's digest is written out in, then read as words. */
const digestBytes = Buffer.alloc(DEDUP_DIGEST_BYTES);

/** Bytes of value a short key's written-out digest holds (after its type and length bytes). */
export const DEDUP_SHORT_VALUE_BYTES = DEDUP_DIGEST_BYTES - 2;
const SHORT_FORM = 0x80;
/** Bytes of an integer's two's complement in its digest (one more than a ulong needs, for the sign). */
const INTEGER_BYTES = 9;

/**
 * The digest of a key of `type` (not an integer: see dedupIntegerDigest) whose
 * value is `value`'s bytes from `start` to `end` (a range, so a reader hands over
 * the bytes where they lie, with no view per key).
 */
export function dedupDigest(type: DedupKeyType, value: Buffer, start = 0, end = value.length): DedupDigest {
  const length = end - start;
  if (length <= DEDUP_SHORT_VALUE_BYTES) {
    const digest = zeroedDigest();
    digest[0] = SHORT_FORM | type;
    digest[1] = length;
    copyBytes(value, start, end, digest, 2);
    return dedupDigestAt(digest);
  }
  if (oneShotHash === undefined) return dedupDigestStreamed(type, value.subarray(start, end));
  const input = hashInput(1 + length);
  input[0] = type;
  copyBytes(value, start, end, input, 1);
  return digestOf(input);
}

/**
 * The digest of the integer whose `width` big-endian bytes (0 to 8; 0 is the
 * value 0) are at `at` in `bytes`, two's complement when `signed`. Only bytes are
 * copied: a ulong above 2^53 needs no BigInt, and no width makes a different key.
 */
export function dedupIntegerDigest(bytes: Uint8Array, at: number, width: number, signed: boolean): DedupDigest {
  const digest = zeroedDigest();
  digest[0] = SHORT_FORM | DedupKeyType.integer;
  const first = 1 + INTEGER_BYTES - width;
  if (signed && width > 0 && bytes[at]! & 0x80) for (let i = 1; i < first; i++) digest[i] = 0xff;
  copyBytes(bytes, at, at + width, digest, first);
  return dedupDigestAt(digest);
}

/** `from`'s bytes start..end into `to` at `at`: a loop for the usual key lengths, where Buffer.copy's call into C++ costs more than it moves (~90 against ~60 ns for 50 bytes). */
function copyBytes(from: Uint8Array, start: number, end: number, to: Buffer, at: number): void {
  if (end - start > 64) {
    to.set(from.subarray(start, end), at);
    return;
  }
  for (let i = start; i < end; i++) to[at + i - start] = from[i]!;
}

/** The scratch digest, zeroed. */
function zeroedDigest(): Buffer {
  for (let i = 0; i < DEDUP_DIGEST_BYTES; i++) digestBytes[i] = 0;
  return digestBytes;
}

/** A long key's digest through createHash (Node before 20.12); exported so a test holds it to the one-shot hash. */
export function dedupDigestStreamed(type: DedupKeyType, value: Uint8Array): DedupDigest {
  return dedupDigestAt(crypto.createHash('sha256').update(Uint8Array.of(type)).update(value).digest());
}

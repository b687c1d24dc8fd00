// What a duplicate-detection window compares: a message's key, reduced to a
// 16-byte digest of its type and value. The key is the AMQP message-id (ulong,
// uuid, binary or string) or, when a queue names one, an application property
// (string, symbol, binary, uuid or any integer type). Two keys are the same when
// type and value are: the string "1" and the ulong 1 differ, and every integer
// type is one type (an int 7 and a long 7 are one key), as a client that
// resends re-encodes the same number in whichever width its library picks.
//
// The digest is SHA-256 cut to 128 bits: fixed-size rows off the heap whatever
// the key's length, and two different keys share one only with a chance near
// 2^-128 per pair (about 10^-27 for a window of a million), which no sender can
// steer, so keeping digests never takes a new message for a duplicate in practice.
import * as crypto from 'node:crypto';
import { DEDUP_DIGEST_BYTES } from './dedup-window.js';

/** The key's type, the first byte hashed. */
export const DedupKeyType = {
  integer: 1,
  uuid: 2,
  binary: 3,
  string: 4,
  symbol: 5,
} as const;
export type DedupKeyType = (typeof DedupKeyType)[keyof typeof DedupKeyType];

/** A message's key for one queue's window, as the AMQP edge read it. */
export type DedupLookup =
  | { status: 'key'; digest: Buffer }
  /** The message has no such key (no message-id, or not that property): passed, counted. */
  | { status: 'missing' }
  /** A key of a type that cannot be compared (a float, a map...): passed, counted and logged. */
  | { status: 'invalid'; reason: string };

/** Reads the key of the message `bytes` encode; `property` undefined means the message-id. Given by the AMQP edge. */
export type DedupKeyReader = (bytes: Buffer, property: string | undefined) => DedupLookup;

// crypto.hash (Node 20.12 on) hashes in one call: per key about 40% less than a
// createHash object with two updates, which profiling showed as the largest
// single cost of a window (7% of a busy publisher). Node 20 before 20.12 has
// no such export, so it is looked up, not imported by name. Both give the same
// digest: SHA-256 over the type byte, then the value, as journals hold it.
const oneShotHash = typeof crypto.hash === 'function' ? crypto.hash : undefined;

// The digest is asked for as a 'binary' (latin1) string (one byte per char) and written
// into a slice of Node's buffer pool: a 'buffer' answer is a fresh ArrayBuffer
// per key, whose allocation and later sweep cost about as much as the hash
// (measured 440 against 900 ns per key). The hashed input goes through a
// scratch buffer for the same reason; keys longer than it get their own.
const SCRATCH_BYTES = 1024;
const scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
/** Views of the scratch buffer by length, made once each (keys mostly have a handful of lengths). */
const scratchViews: Buffer[] = [];

function hashInput(length: number): Buffer {
  if (length > SCRATCH_BYTES) return Buffer.allocUnsafe(length);
  return (scratchViews[length] ??= scratch.subarray(0, length));
}

function digestOf(input: Buffer): Buffer {
  const digest = Buffer.allocUnsafe(DEDUP_DIGEST_BYTES);
  digest.write(oneShotHash!('sha256', input, 'binary'), 0, DEDUP_DIGEST_BYTES, 'binary');
  return digest;
}

/**
 * The digest of a key of `type` whose value is `value`'s bytes from `start` to `end`
 * (a range, so a reader hands over the bytes where they lie, with no view per key).
 */
export function dedupDigest(type: DedupKeyType, value: Buffer, start = 0, end = value.length): Buffer {
  if (oneShotHash === undefined) return dedupDigestStreamed(type, value.subarray(start, end));
  const input = hashInput(1 + end - start);
  input[0] = type;
  value.copy(input, 1, start, end);
  return digestOf(input);
}

/** The digest of a key whose value is the ASCII text `text` (an integer key's decimal form), with no buffer made for the text. */
export function dedupDigestOfText(type: DedupKeyType, text: string): Buffer {
  if (oneShotHash === undefined) return dedupDigestStreamed(type, Buffer.from(text, 'latin1'));
  const input = hashInput(1 + text.length);
  input[0] = type;
  input.write(text, 1, 'latin1');
  return digestOf(input);
}

/** The same digest through createHash; exported so a test holds the two equal. */
export function dedupDigestStreamed(type: DedupKeyType, value: Uint8Array): Buffer {
  return crypto.createHash('sha256').update(Uint8Array.of(type)).update(value).digest().subarray(0, DEDUP_DIGEST_BYTES);
}

// The record codec shared by the journal (on disk) and the HA/DR stream (on the
// wire). As in rhea's lib/frames.js, every record kind is declared once, as data:
// a name, a one-byte code and ordered typed fields. One generic encoder and one
// generic decoder walk those tables, so adding a field is a table edit.
//
// Encoded form of one record (little endian):
//   u8 code | u64 lsn | u8 flags (bit 0: durable) | fields in table order
// It holds no file offsets and no framing: the journal adds length + CRC around
// it (segment.ts), the replication stream adds whatever its transport needs.
//
// Field encodings: u8/u32 plain; u64 as a 64-bit integer (JS numbers up to 2^53);
// bool one byte; string/bytes u32 length + data; optional values a presence byte
// first; enum one byte index into its value list; struct its fields in order;
// `changes` (transaction body) u32 count then, per nested record, u8 code + fields;
// `strings` u32 count then each string; `u64s` u32 count then each u64;
// `optStruct` a presence byte, then the struct.
//
// A kind that gains fields gets a new code; its old code stays in the table as
// `legacy` (decoded, with `upgrade` filling what it lacks, never encoded), so a
// journal written before the change still reads. A new optional field may instead
// keep its old code as `olderForm`, written whenever the field is absent: a broker
// of the version before (an HA backup or DR peer not yet upgraded, a downgrade)
// then reads everything that does not use the new field.

import { DEDUP_DIGEST_BYTES, type DedupDigest } from '../broker/dedup-key.js';
import { DR_MODES, DR_STATES, type Change, type DedupStamp, type LoggedChange, type MessageRecord, type NoLocal, type NoLocalScope, type QueueSettings, type ExchangeSettings, type SubscriptionKind } from '../broker/changes.js';

/** A journal-only record: LSNs up to `upTo` may have been handed out (see journal.ts). */
export interface LsnReservation {
  kind: 'lsn-reservation';
  upTo: number;
}

/** Everything the codec can carry: broker changes plus journal bookkeeping. */
export type RecordBody = Change | LsnReservation;
export interface CodecEntry {
  lsn: number;
  change: RecordBody;
  durable: boolean;
}

type FieldType =
  | 'u8'
  | 'u32'
  | 'u64'
  | 'bool'
  /** A boolean that is true or absent (undefined): one byte, as 'bool'. */
  | 'flag'
  | 'string'
  | 'optString'
  | 'bytes'
  /** A dedup key's digest: as 'bytes' of 16 on disk, four words in memory (DedupDigest). */
  | 'digest'
  | 'strings'
  | 'u64s'
  | 'changes'
  | { enum: readonly string[] }
  | { optEnum: readonly string[] }
  | { struct: readonly Field[] }
  | { optStruct: readonly Field[] };
type Field = readonly [name: string, type: FieldType];

const REPLICATION_LEVELS = ['none', 'configuration', 'all'] as const;
const SUBSCRIPTION_KINDS = ['shared', 'unshared'] as const satisfies readonly SubscriptionKind[];
const NO_LOCAL_SCOPES = ['connection', 'container'] as const satisfies readonly NoLocalScope[];
const NO_LOCAL: readonly Field[] = [
  ['by', { enum: NO_LOCAL_SCOPES }],
  ['id', 'string'],
] satisfies readonly (readonly [keyof NoLocal, FieldType])[];

const QUEUE_SETTINGS_BEFORE_DEDUP = [
  ['durable', 'bool'],
  ['autoDelete', 'bool'],
  ['autoDeleteDelayMs', 'u64'],
  ['exclusive', 'bool'],
  ['maxCount', 'u64'],
  ['maxSize', 'u64'],
  ['limitPolicy', { enum: ['reject', 'ring'] }],
  ['defaultTtlMs', 'u64'],
  ['alternateExchange', 'string'],
  ['priorities', 'u8'],
  ['replicate', { optEnum: REPLICATION_LEVELS }],
] as const satisfies readonly (readonly [keyof QueueSettings, FieldType])[];
const QUEUE_SETTINGS_BEFORE_SUBSCRIPTION = [
  ...QUEUE_SETTINGS_BEFORE_DEDUP,
  ['dedupWindow', 'u64'],
  ['dedupTtlMs', 'u64'],
  ['dedupKey', 'string'],
] as const satisfies readonly (readonly [keyof QueueSettings, FieldType])[];
const QUEUE_SETTINGS_BEFORE_GROUPS = [
  ...QUEUE_SETTINGS_BEFORE_SUBSCRIPTION,
  ['subscription', { optEnum: SUBSCRIPTION_KINDS }],
] as const satisfies readonly (readonly [keyof QueueSettings, FieldType])[];
const QUEUE_SETTINGS_BEFORE_SELECTOR = [
  ...QUEUE_SETTINGS_BEFORE_GROUPS,
  ['messageGroups', 'bool'],
] as const satisfies readonly (readonly [keyof QueueSettings, FieldType])[];
const QUEUE_SETTINGS_BEFORE_NO_LOCAL = [
  ...QUEUE_SETTINGS_BEFORE_GROUPS,
  // Absent on most queues with a selector (a subscription's): not written as false.
  ['messageGroups', 'flag'],
  ['selector', 'optString'],
] as const satisfies readonly (readonly [keyof QueueSettings, FieldType])[];
const QUEUE_SETTINGS: readonly Field[] = [
  ...QUEUE_SETTINGS_BEFORE_NO_LOCAL,
  ['noLocal', { optStruct: NO_LOCAL }],
] as const satisfies readonly (readonly [keyof QueueSettings, FieldType])[];

const EXCHANGE_SETTINGS_BEFORE_DR_MARK = [
  ['durable', 'bool'],
  ['alternateExchange', 'string'],
  ['replicate', { optEnum: REPLICATION_LEVELS }],
] as const satisfies readonly (readonly [keyof ExchangeSettings, FieldType])[];
const EXCHANGE_SETTINGS: readonly Field[] = [
  ...EXCHANGE_SETTINGS_BEFORE_DR_MARK,
  ['madeByDr', 'optString'],
] satisfies readonly (readonly [keyof ExchangeSettings, FieldType])[];

const MESSAGE: readonly Field[] = [
  ['id', 'u64'],
  ['bytes', 'bytes'],
  ['headerLength', 'u32'],
  ['durable', 'bool'],
  ['priority', 'u8'],
  ['expiresAt', 'u64'],
  ['deliveryCount', 'u32'],
  ['subject', 'optString'],
] satisfies readonly (readonly [keyof MessageRecord, FieldType])[];

const DEDUP_STAMP: readonly Field[] = [
  ['key', 'digest'],
  ['at', 'u64'],
] satisfies readonly (readonly [keyof DedupStamp, FieldType])[];

interface RecordKind {
  name: RecordBody['kind'];
  code: number;
  fields: readonly Field[];
  /** Decoded only: a newer code carries this kind now. */
  legacy?: true;
  /** Fills in what a legacy record lacks. */
  upgrade?: (body: Record<string, unknown>) => void;
  /** Encoded in place of the name's current kind when `fits` says the record needs nothing newer. */
  olderForm?: { fits: (body: Record<string, unknown>) => boolean };
}

/** A queue declared before duplicate detection existed has none. */
function withoutDedup(body: Record<string, unknown>): void {
  Object.assign(body['settings'] as object, { dedupWindow: 0, dedupTtlMs: 0, dedupKey: '' });
}

function withoutSubscriptionKind(body: Record<string, unknown>): boolean {
  return (body['settings'] as Partial<QueueSettings> | undefined)?.subscription === undefined && withoutMessageGroups(body);
}

/** Message groups are off on most queues: declared in a form a broker before them reads. */
function withoutMessageGroups(body: Record<string, unknown>): boolean {
  return (body['settings'] as Partial<QueueSettings> | undefined)?.messageGroups !== true && withoutSelector(body);
}

/** Only a topic subscription with a selector has one: every other queue is declared as before. */
function withoutSelector(body: Record<string, unknown>): boolean {
  return (body['settings'] as Partial<QueueSettings> | undefined)?.selector === undefined && withoutNoLocal(body);
}

/** Only a topic subscription with JMS noLocal has it: every other queue is declared as before. */
function withoutNoLocal(body: Record<string, unknown>): boolean {
  return (body['settings'] as Partial<QueueSettings> | undefined)?.noLocal === undefined;
}

/** Every enqueue but a message given back (broker.ts giveBack) or moved (moveOne) is a plain one. */
function notRestored(body: Record<string, unknown>): boolean {
  return body['restored'] === undefined;
}

/** A take-back names messages only where a DR copy may have read keys the source took none of (broker.ts forgetKeys). */
function withoutIds(body: Record<string, unknown>): boolean {
  return body['ids'] === undefined;
}

/** Only an exchange a DR bridge made is marked (bridge.ts): every other exchange is declared as before. */
function notMadeByDr(body: Record<string, unknown>): boolean {
  return (body['settings'] as Partial<ExchangeSettings> | undefined)?.madeByDr === undefined;
}

const EXCHANGE_DECLARE_FIELDS: readonly Field[] = [
  ['name', 'string'],
  ['type', { enum: ['direct', 'topic', 'fanout'] }],
];
const ENQUEUE_FIELDS: readonly Field[] = [['queue', 'string'], ['message', { struct: MESSAGE }], ['dedup', { optStruct: DEDUP_STAMP }]];
const DEDUP_FORGET_FIELDS: readonly Field[] = [['queue', 'string'], ['keys', 'bytes']];

/** The record table. Codes are on disk forever: never reuse or renumber one. */
export const RECORD_KINDS: readonly RecordKind[] = [
  { name: 'queue-declare', code: 1, fields: [['name', 'string'], ['settings', { struct: QUEUE_SETTINGS_BEFORE_DEDUP }]], legacy: true, upgrade: withoutDedup },
  { name: 'queue-delete', code: 2, fields: [['name', 'string']] },
  { name: 'exchange-declare', code: 3, fields: [...EXCHANGE_DECLARE_FIELDS, ['settings', { struct: EXCHANGE_SETTINGS_BEFORE_DR_MARK }]], olderForm: { fits: notMadeByDr } },
  { name: 'exchange-delete', code: 4, fields: [['name', 'string']] },
  { name: 'bind', code: 5, fields: [['exchange', 'string'], ['queue', 'string'], ['key', 'string']] },
  { name: 'unbind', code: 6, fields: [['exchange', 'string'], ['queue', 'string'], ['key', 'string']] },
  { name: 'enqueue', code: 7, fields: [['queue', 'string'], ['message', { struct: MESSAGE }]], legacy: true },
  { name: 'dequeue', code: 8, fields: [['queue', 'string'], ['id', 'u64']] },
  { name: 'transaction', code: 9, fields: [['changes', 'changes']] },
  { name: 'epoch', code: 10, fields: [['epoch', 'u64']] },
  {
    name: 'dr-transaction',
    code: 11,
    fields: [['queues', 'strings'], ['lsn', 'u64'], ['time', 'u64'], ['changes', 'changes']],
  },
  {
    name: 'dr-queue',
    code: 12,
    fields: [['queue', 'string'], ['source', 'string'], ['mode', { enum: DR_MODES }], ['state', { enum: ['passive', 'active', 'removed'] }]],
  },
  // A queue that is no subscription's, or a subscription's made before kinds were
  // recorded (subscriptions.ts: either kind is taken), has none.
  { name: 'queue-declare', code: 13, fields: [['name', 'string'], ['settings', { struct: QUEUE_SETTINGS_BEFORE_SUBSCRIPTION }]], olderForm: { fits: withoutSubscriptionKind } },
  { name: 'enqueue', code: 14, fields: ENQUEUE_FIELDS, olderForm: { fits: notRestored } },
  { name: 'dedup-keys', code: 15, fields: [['queue', 'string'], ['rows', 'bytes']] },
  {
    name: 'dr-role',
    code: 16,
    fields: [
      ['queue', 'string'],
      ['source', 'string'],
      ['mode', { enum: DR_MODES }],
      ['state', { enum: DR_STATES }],
      ['epoch', 'u64'],
      ['divergence', 'u64'],
      ['since', 'u64'],
      ['idFloor', 'u64'],
      ['fill', 'bool'],
      ['exchanges', 'string'],
      ['tell', 'bool'],
    ],
  },
  { name: 'dr-followed', code: 18, fields: [['since', 'u64']] },
  { name: 'queue-dedup', code: 17, fields: [['name', 'string'], ['dedupWindow', 'u64'], ['dedupTtlMs', 'u64'], ['dedupKey', 'string']] },
  { name: 'queue-declare', code: 19, fields: [['name', 'string'], ['settings', { struct: QUEUE_SETTINGS_BEFORE_GROUPS }]], olderForm: { fits: withoutMessageGroups } },
  { name: 'dedup-forget', code: 20, fields: DEDUP_FORGET_FIELDS, olderForm: { fits: withoutIds } },
  // A message given back to its queue after a failed commit, or moved from another (a DR copy must not take it for a duplicate).
  { name: 'enqueue', code: 21, fields: [...ENQUEUE_FIELDS, ['restored', 'bool']] },
  // A take-back that also names the refused messages (ids), for DR copies that keyed them.
  { name: 'dedup-forget', code: 22, fields: [...DEDUP_FORGET_FIELDS, ['ids', 'u64s']] },
  // An auto-delete queue's first consumer (changes.ts): a kind of its own, written only
  // then, so every other record is written as before and a reader without code 23
  // meets it only where an auto-delete queue was consumed.
  { name: 'queue-consumed', code: 23, fields: [['name', 'string']] },
  // A queue with message groups (only those: the others keep code 19 or 13).
  { name: 'queue-declare', code: 24, fields: [['name', 'string'], ['settings', { struct: QUEUE_SETTINGS_BEFORE_SELECTOR }]], olderForm: { fits: withoutSelector } },
  // A topic subscription's queue with a JMS message selector (only those: the others keep code 24, 19 or 13).
  { name: 'queue-declare', code: 25, fields: [['name', 'string'], ['settings', { struct: QUEUE_SETTINGS_BEFORE_NO_LOCAL }]], olderForm: { fits: withoutNoLocal } },
  // A topic subscription's queue with JMS noLocal (only those: the others keep code 25, 24, 19 or 13).
  { name: 'queue-declare', code: 26, fields: [['name', 'string'], ['settings', { struct: QUEUE_SETTINGS }]] },
  // An exchange a DR bridge made on its secondary, marked with its source (only those: the others keep code 3).
  { name: 'exchange-declare', code: 27, fields: [...EXCHANGE_DECLARE_FIELDS, ['settings', { struct: EXCHANGE_SETTINGS }]] },
  { name: 'lsn-reservation', code: 64, fields: [['upTo', 'u64']] },
];

const BY_NAME = new Map(
  RECORD_KINDS.filter((k) => !k.legacy && !k.olderForm).map((k) => [k.name, { kind: k, older: RECORD_KINDS.filter((o) => o.name === k.name && o.olderForm) }]),
);

/**
 * The kind a record is written as: its name's current one, or the oldest of that name's
 * older forms the record fits (one lookup and, for most kinds, one test: every enqueue comes here).
 */
function kindToWrite(body: Record<string, unknown> & { kind: string }, path: string): RecordKind {
  const named = BY_NAME.get(body.kind as RecordBody['kind']);
  if (!named) fail(path, `unknown record kind ${String(body.kind)}`);
  for (const older of named.older) if (older.olderForm!.fits(body)) return older;
  return named.kind;
}
const BY_CODE = new Map(RECORD_KINDS.map((k) => [k.code, k]));
/** Kinds allowed inside a transaction (atomic unit on replay). */
const NESTED_KINDS = new Set(['enqueue', 'dequeue']);

export const RECORD_HEADER_BYTES = 10; // code + lsn + flags
/** The only flag bit defined (bit 0: durable); a record with any other set is not one this codec wrote. */
const DEFINED_FLAGS = 0b1;
/** Highest upper word of a u64 field: values are JS numbers, so at most 2^53 - 1. */
const MAX_U64_HIGH_WORD = 0x1f_ffff;
/** The LSN of the encoded record at `at` in `buf` (the u64 after its code byte). */
export function recordLsn(buf: Buffer, at = 0): number {
  return buf.readUInt32LE(at + 1) + buf.readUInt32LE(at + 5) * 0x1_0000_0000;
}

// ---- encoding -------------------------------------------------------------

class ByteWriter {
  buf: Buffer;
  pos = 0;
  constructor(initial: number) {
    this.buf = Buffer.allocUnsafe(initial);
  }
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
  u8(v: number): void {
    this.ensure(1);
    this.buf[this.pos++] = v;
  }
  u32(v: number): void {
    this.ensure(4);
    this.buf.writeUInt32LE(v, this.pos);
    this.pos += 4;
  }
  u64(v: number): void {
    this.ensure(8);
    this.buf.writeUInt32LE(v % 0x1_0000_0000, this.pos);
    this.buf.writeUInt32LE(Math.floor(v / 0x1_0000_0000), this.pos + 4);
    this.pos += 8;
  }
  /** A string as raw(Buffer.from(s)) writes it, without the temporary buffer. */
  str(s: string): void {
    const n = Buffer.byteLength(s, 'utf8');
    this.u32(n);
    this.ensure(n);
    this.pos += this.buf.write(s, this.pos, n, 'utf8');
  }
  raw(b: Uint8Array): void {
    this.u32(b.length);
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
}

function fail(path: string, what: string): never {
  throw new TypeError(`cannot encode ${path}: ${what}`);
}

function checkInt(v: unknown, max: number, path: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) fail(path, `expected an integer in 0..${max}, got ${String(v)}`);
  return v;
}

function encodeValue(w: ByteWriter, type: FieldType, v: unknown, path: string): void {
  if (typeof type === 'string') {
    switch (type) {
      case 'u8':
        return w.u8(checkInt(v, 0xff, path));
      case 'u32':
        return w.u32(checkInt(v, 0xffff_ffff, path));
      case 'u64':
        return w.u64(checkInt(v, Number.MAX_SAFE_INTEGER, path));
      case 'bool':
        if (typeof v !== 'boolean') fail(path, 'expected a boolean');
        return w.u8(v ? 1 : 0);
      case 'flag':
        if (v !== undefined && typeof v !== 'boolean') fail(path, 'expected a boolean or undefined');
        return w.u8(v === true ? 1 : 0);
      case 'string':
        if (typeof v !== 'string') fail(path, 'expected a string');
        return w.str(v);
      case 'optString':
        if (v === undefined) return w.u8(0);
        if (typeof v !== 'string') fail(path, 'expected a string or undefined');
        w.u8(1);
        return w.str(v);
      case 'bytes':
        if (!(v instanceof Uint8Array)) fail(path, 'expected a Buffer');
        return w.raw(v);
      case 'digest': {
        if (typeof v !== 'object' || v === null) fail(path, 'expected a dedup digest');
        const d = v as DedupDigest;
        // Four words written out, not a list of them: every keyed enqueue is encoded.
        w.u32(DEDUP_DIGEST_BYTES);
        w.u32(checkInt(d.w0, 0xffff_ffff, path));
        w.u32(checkInt(d.w1, 0xffff_ffff, path));
        w.u32(checkInt(d.w2, 0xffff_ffff, path));
        w.u32(checkInt(d.w3, 0xffff_ffff, path));
        return;
      }
      case 'strings':
        if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) fail(path, 'expected an array of strings');
        w.u32(v.length);
        for (const x of v as string[]) w.str(x);
        return;
      case 'u64s':
        if (!Array.isArray(v)) fail(path, 'expected an array of integers');
        w.u32(v.length);
        v.forEach((x, i) => w.u64(checkInt(x, Number.MAX_SAFE_INTEGER, `${path}[${i}]`)));
        return;
      case 'changes': {
        if (!Array.isArray(v)) fail(path, 'expected an array of changes');
        w.u32(v.length);
        v.forEach((c: RecordBody, i) => {
          if (!NESTED_KINDS.has(c?.kind)) fail(`${path}[${i}]`, `kind ${String(c?.kind)} is not allowed in a transaction`);
          encodeBody(w, c, `${path}[${i}]`);
        });
        return;
      }
    }
  }
  if ('enum' in type) {
    const i = type.enum.indexOf(v as string);
    if (i < 0) fail(path, `expected one of ${type.enum.join('|')}`);
    return w.u8(i);
  }
  if ('optEnum' in type) {
    if (v === undefined) return w.u8(0);
    const i = type.optEnum.indexOf(v as string);
    if (i < 0) fail(path, `expected undefined or one of ${type.optEnum.join('|')}`);
    return w.u8(i + 1);
  }
  if ('optStruct' in type) {
    if (v === undefined) return w.u8(0);
    if (typeof v !== 'object' || v === null) fail(path, 'expected an object or undefined');
    w.u8(1);
    return encodeFields(w, type.optStruct, v as Record<string, unknown>, path);
  }
  if (typeof v !== 'object' || v === null) fail(path, 'expected an object');
  encodeFields(w, type.struct, v as Record<string, unknown>, path);
}

function encodeFields(w: ByteWriter, fields: readonly Field[], obj: Record<string, unknown>, path: string): void {
  for (const [name, type] of fields) encodeValue(w, type, obj[name], `${path}.${name}`);
}

function encodeBody(w: ByteWriter, body: RecordBody, path: string): void {
  const kind = kindToWrite(body as unknown as Record<string, unknown> & { kind: string }, path);
  w.u8(kind.code);
  encodeFields(w, kind.fields, body as unknown as Record<string, unknown>, `${path}<${body.kind}>`);
}

/** Encode one logged change (or journal record). Throws TypeError on a malformed value. */
export function encodeChange(entry: LoggedChange | CodecEntry): Buffer {
  if (entry.change === memo.change && entry.lsn === memo.lsn && entry.durable === memo.durable) return memo.bytes as Buffer;
  const bytes = encodeFresh(entry);
  rememberEncoding(entry, bytes);
  return bytes;
}

/**
 * The last change encoded and its bytes. One change goes in turn, in the same
 * tick, to the journal, the HA window and the DR window, each of which encodes
 * it (and copies the bytes): the memo makes that one encoding, not three, which
 * was a third of an HA backup's CPU while catching up. It keys on the change
 * object, LSN and durable flag, and is forgotten at the end of the tick, so a
 * change mutated later is never served stale bytes. Callers must not write
 * into the returned buffer.
 */
const memo: { change: unknown; lsn: number; durable: boolean; bytes: Buffer | undefined } = { change: undefined, lsn: -1, durable: false, bytes: undefined };
let memoClearScheduled = false;

function forgetEncoding(): void {
  memoClearScheduled = false;
  memo.change = undefined;
  memo.bytes = undefined;
}

/**
 * Say that `bytes` is this entry's encoding (what encodeChange would return),
 * for a producer that already holds it: an HA backup applying records exactly
 * as the primary encoded them. Valid until the end of the tick.
 */
export function rememberEncoding(entry: LoggedChange | CodecEntry, bytes: Buffer): void {
  memo.change = entry.change;
  memo.lsn = entry.lsn;
  memo.durable = entry.durable;
  memo.bytes = bytes;
  if (!memoClearScheduled) {
    memoClearScheduled = true;
    queueMicrotask(forgetEncoding);
  }
}

function encodeFresh(entry: LoggedChange | CodecEntry): Buffer {
  const hint = entry.change.kind === 'enqueue' ? entry.change.message.bytes.length : 0;
  const w = new ByteWriter(128 + hint);
  encodeInto(w, entry);
  return w.buf.subarray(0, w.pos);
}

/**
 * Several changes in one buffer, each after its length (u32, big-endian), behind
 * `reserve` bytes left for the caller to fill: the body of an HA or DR stream
 * message with one allocation, not one per change. `bodyBytes`: the message
 * bytes the changes hold, if known (sizes the buffer once).
 */
export function encodeChangeBatch(entries: readonly (LoggedChange | CodecEntry)[], reserve = 0, bodyBytes = 0): Buffer {
  const w = new ByteWriter(reserve + bodyBytes + entries.length * 160);
  w.pos = reserve;
  for (const entry of entries) {
    w.ensure(4);
    const at = w.pos;
    w.pos += 4;
    encodeInto(w, entry);
    w.buf.writeUInt32BE(w.pos - at - 4, at);
  }
  return w.buf.subarray(0, w.pos);
}

function encodeInto(w: ByteWriter, entry: LoggedChange | CodecEntry): void {
  const kind = kindToWrite(entry.change as unknown as Record<string, unknown> & { kind: string }, 'record');
  w.u8(kind.code);
  w.u64(checkInt(entry.lsn, Number.MAX_SAFE_INTEGER, 'record.lsn'));
  w.u8(entry.durable ? 1 : 0);
  encodeFields(w, kind.fields, entry.change as unknown as Record<string, unknown>, `record<${kind.name}>`);
}

// ---- decoding -------------------------------------------------------------

export type DecodeResult =
  | { status: 'ok'; entry: CodecEntry; size: number }
  /** The buffer ends before the record does: feed more bytes. */
  | { status: 'incomplete' }
  /** The bytes are not a record this codec knows (unknown code, bad enum, u64 too big). */
  | { status: 'invalid'; reason: string };

const INCOMPLETE = Symbol('incomplete');
class InvalidRecord extends Error {}

/**
 * The bytes in memory of their own. Buffer.from (and Buffer.copyBytesFrom) put a copy
 * under 4 KiB into a slab of Node's shared 8 KiB pool, which then lives as long as
 * anything in it: each small message a DR copy kept queued held 8 KiB.
 */
function ownCopy(view: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(view.length);
  view.copy(copy);
  return copy;
}

class ByteReader {
  constructor(
    readonly buf: Buffer,
    public pos: number,
    /** false: message bodies are views into `buf` (the caller drops them before keeping the record). */
    readonly copyBodies = true,
  ) {}
  need(n: number): void {
    if (this.pos + n > this.buf.length) throw INCOMPLETE;
  }
  u8(): number {
    this.need(1);
    return this.buf[this.pos++]!;
  }
  u32(): number {
    this.need(4);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }
  u64(): number {
    this.need(8);
    const lo = this.buf.readUInt32LE(this.pos);
    const hi = this.buf.readUInt32LE(this.pos + 4);
    this.pos += 8;
    if (hi > MAX_U64_HIGH_WORD) throw new InvalidRecord(`u64 value above 2^53 at byte ${this.pos - 8}`);
    return hi * 0x1_0000_0000 + lo;
  }
  raw(): Buffer {
    const n = this.u32();
    this.need(n);
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
}

function decodeValue(r: ByteReader, type: FieldType): unknown {
  if (typeof type === 'string') {
    switch (type) {
      case 'u8':
        return r.u8();
      case 'u32':
        return r.u32();
      case 'u64':
        return r.u64();
      case 'bool': {
        const b = r.u8();
        if (b > 1) throw new InvalidRecord(`bad boolean ${b}`);
        return b === 1;
      }
      case 'flag': {
        const b = r.u8();
        if (b > 1) throw new InvalidRecord(`bad boolean ${b}`);
        return b === 1 ? true : undefined;
      }
      case 'string':
        return r.raw().toString('utf8');
      case 'optString':
        return r.u8() ? r.raw().toString('utf8') : undefined;
      case 'bytes':
        // A copy, so a decoded message does not pin a whole segment read buffer.
        return r.copyBodies ? ownCopy(r.raw()) : r.raw();
      case 'digest': {
        const n = r.u32();
        if (n !== DEDUP_DIGEST_BYTES) throw new InvalidRecord(`a dedup key digest of ${n} bytes, not ${DEDUP_DIGEST_BYTES}`);
        return { w0: r.u32(), w1: r.u32(), w2: r.u32(), w3: r.u32() } satisfies DedupDigest;
      }
      case 'strings': {
        const n = r.u32();
        const out: string[] = [];
        for (let i = 0; i < n; i++) out.push(r.raw().toString('utf8'));
        return out;
      }
      case 'u64s': {
        const n = r.u32();
        // All of them there before any is read: a count from damaged bytes must not size an array.
        r.need(n * 8);
        const out: number[] = [];
        for (let i = 0; i < n; i++) out.push(r.u64());
        return out;
      }
      case 'changes': {
        const n = r.u32();
        const out: RecordBody[] = [];
        for (let i = 0; i < n; i++) {
          // Checked before its fields are read: a transaction inside a transaction
          // would otherwise be decoded first, and a few bytes per level nest it
          // deep enough to overflow the stack.
          const kind = kindOf(r.u8());
          if (!NESTED_KINDS.has(kind.name)) throw new InvalidRecord(`a ${kind.name} record inside a transaction (only ${[...NESTED_KINDS].join(' and ')} may be)`);
          out.push(decodeKind(r, kind));
        }
        return out;
      }
    }
  }
  if ('enum' in type) {
    const i = r.u8();
    if (i >= type.enum.length) throw new InvalidRecord(`enum index ${i} out of range`);
    return type.enum[i];
  }
  if ('optEnum' in type) {
    const i = r.u8();
    if (i > type.optEnum.length) throw new InvalidRecord(`enum index ${i} out of range`);
    return i === 0 ? undefined : type.optEnum[i - 1];
  }
  if ('optStruct' in type) {
    const present = r.u8();
    if (present > 1) throw new InvalidRecord(`bad presence byte ${present}`);
    return present ? decodeFields(r, type.optStruct, {}) : undefined;
  }
  return decodeFields(r, type.struct, {});
}

function decodeFields(r: ByteReader, fields: readonly Field[], into: Record<string, unknown>): Record<string, unknown> {
  for (const [name, type] of fields) into[name] = decodeValue(r, type);
  return into;
}

function kindOf(code: number): RecordKind {
  const kind = BY_CODE.get(code);
  if (!kind) throw new InvalidRecord(`unknown record code ${code}`);
  return kind;
}

function decodeKind(r: ByteReader, kind: RecordKind): RecordBody {
  const body = decodeFields(r, kind.fields, { kind: kind.name });
  kind.upgrade?.(body);
  return body as unknown as RecordBody;
}

export interface DecodeOptions {
  /** Default true. false: message bodies are views into `buf`, for a caller that drops them at once. */
  copyBodies?: boolean;
}

/**
 * Decode one record starting at `offset`. Never throws on bad input: a short
 * buffer is `incomplete`, garbage is `invalid`. `size` is the bytes consumed,
 * so a stream decoder can keep reading after it.
 */
export function decodeChange(buf: Buffer, offset = 0, options: DecodeOptions = {}): DecodeResult {
  const r = new ByteReader(buf, offset, options.copyBodies ?? true);
  try {
    const kind = kindOf(r.u8());
    const lsn = r.u64();
    const flags = r.u8();
    if ((flags & ~DEFINED_FLAGS) !== 0) throw new InvalidRecord(`unknown flags ${flags}`);
    const change = decodeKind(r, kind);
    return { status: 'ok', entry: { lsn, change, durable: flags === 1 }, size: r.pos - offset };
  } catch (err) {
    if (err === INCOMPLETE) return { status: 'incomplete' };
    if (err instanceof InvalidRecord) return { status: 'invalid', reason: err.message };
    if (err instanceof RangeError || err instanceof TypeError) return { status: 'invalid', reason: err.message };
    throw err;
  }
}

// ---- judging a record by its first bytes ------------------------------------

/**
 * Fewest and most bytes each kind's record can take, header included, indexed
 * by code (Infinity/0 for codes that are no kind). Derived from the table, so a
 * kind added there is covered.
 */
const KIND_MIN_BYTES = new Float64Array(256).fill(Infinity);
const KIND_MAX_BYTES = new Float64Array(256);
for (const kind of RECORD_KINDS) {
  const [min, max] = fieldsBytes(kind.fields);
  KIND_MIN_BYTES[kind.code] = RECORD_HEADER_BYTES + min;
  KIND_MAX_BYTES[kind.code] = RECORD_HEADER_BYTES + max;
}

/** [fewest, most] bytes the decoder reads for these fields (most: Infinity when one has a length). */
function fieldsBytes(fields: readonly Field[]): [number, number] {
  let min = 0;
  let max = 0;
  for (const [, type] of fields) {
    const [lo, hi] = fieldBytes(type);
    min += lo;
    max += hi;
  }
  return [min, max];
}

function fieldBytes(type: FieldType): [number, number] {
  if (typeof type === 'string') {
    switch (type) {
      case 'u8':
      case 'bool':
      case 'flag':
        return [1, 1];
      case 'u32':
        return [4, 4];
      case 'u64':
        return [8, 8];
      case 'digest':
        return [4 + DEDUP_DIGEST_BYTES, 4 + DEDUP_DIGEST_BYTES];
      case 'optString':
        return [1, Infinity];
      case 'string':
      case 'bytes':
      case 'strings':
      case 'u64s':
      case 'changes':
        return [4, Infinity];
    }
  }
  if ('enum' in type || 'optEnum' in type) return [1, 1];
  if ('optStruct' in type) return [1, 1 + fieldsBytes(type.optStruct)[1]];
  return fieldsBytes(type.struct);
}

/**
 * Whether a record could start at `at`, judged by its header alone: a known
 * code, defined flags, an LSN below 2^53 (what decodeChange checks first).
 * With recordLengthFits, false only where decodeChange could not decode a
 * record there, so a reader hunting for the next record (segment.ts) skips the
 * checksum of whatever fails them.
 */
export function couldStartRecord(buf: Buffer, at: number): boolean {
  if (at + RECORD_HEADER_BYTES > buf.length) return false;
  // Cheapest and most selective first: this runs for every byte of a damaged segment.
  if (KIND_MIN_BYTES[buf[at]!] === Infinity || (buf[at + 9]! & ~DEFINED_FLAGS) !== 0) return false;
  return buf.readUInt32LE(at + 5) <= MAX_U64_HIGH_WORD;
}

/** Whether a record of this code can take exactly `length` bytes: the kind's fields allow that many. */
export function recordLengthFits(code: number, length: number): boolean {
  return length >= KIND_MIN_BYTES[code]! && length <= KIND_MAX_BYTES[code]!;
}

// What the broker reads from a message it takes (routing, priority, expiry,
// redelivery): five fields of the header and properties sections. Nearly every
// message carries those two sections as flat lists of primitives, so they are
// read here straight from the bytes, with no AmqpValue tree, no bigint and no
// object per field (the generic decode of the two sections was a third of the
// bytes the broker allocated per message). Annotations between them (qpid-jms sends
// message-annotations on every message) are stepped over, checked as the generic
// decoder checks them. Anything irregular (another section among them, a long
// descriptor, a field of a type the generic reading would convert, a compound, a
// string that is not UTF-8) makes this give up and the
// caller decodes generically, so what a message means, and the refusal of a
// malformed one, is the generic decoder's. A logged-in sender's user-id is read
// here too (userIdClaim), in place: it is read on every message such a sender sends.
import { isUtf8 } from 'node:buffer';
import { encodingOf } from './engine/types.js';

export interface MessageHead {
  durable: boolean;
  priority: number;
  ttlMs: number | undefined;
  deliveryCount: number;
  subject: string | undefined;
  to: string | undefined;
  /** properties.absolute-expiry-time, ms since the epoch. */
  absoluteExpiry: number | undefined;
}

const NULL = 0x40;
const TRUE = 0x41;
const FALSE = 0x42;
const UINT0 = 0x43;
const SMALL_UINT = 0x52;
const UINT = 0x70;
const UBYTE = 0x50;
const TIMESTAMP = 0x83;
const HEADER_FIELDS = 5;
const DELIVERY_ANNOTATIONS = 0x71;
const MESSAGE_ANNOTATIONS = 0x72;
/** Keys and values of an annotations map read here at most: a longer one is decoded generically. */
const MAX_ANNOTATION_ITEMS = 128;
const PROPERTY_FIELDS = 13;
const TO = 2;
const SUBJECT = 3;
const ABSOLUTE_EXPIRY = 8;
/** The range of a JavaScript Date (ECMA-262 21.4.1.1), as the generic reading's Date keeps it. */
const MAX_DATE_MS = 8.64e15;

/** Given up: the caller decodes generically. */
class Irregular extends Error {}
const IRREGULAR = new Irregular();

/**
 * The head of a message whose header section starts at `headerAt`, its delivery- and
 * message-annotations at `deliveryAnnotationsAt` and `messageAnnotationsAt`, and its
 * properties section at `propertiesAt` (-1: absent), one after the other and all ending
 * by `end`; undefined when it is not plain enough to read here. The annotations are
 * only checked as the generic decoder would check them (the broker reads them
 * elsewhere, when it needs them): qpid-jms sends message-annotations on every message,
 * and their generic decode cost several times what the rest of the read does.
 */
export function readMessageHead(bytes: Buffer, headerAt: number, propertiesAt: number, end: number, deliveryAnnotationsAt = -1, messageAnnotationsAt = -1): MessageHead | undefined {
  const head: MessageHead = { durable: false, priority: 4, ttlMs: undefined, deliveryCount: 0, subject: undefined, to: undefined, absoluteExpiry: undefined };
  try {
    let pos = 0;
    if (headerAt >= 0) {
      if (headerAt !== pos) return undefined;
      pos = readHeader(bytes, headerAt, end, head);
    }
    if (deliveryAnnotationsAt >= 0) {
      if (deliveryAnnotationsAt !== pos) return undefined;
      pos = checkAnnotations(bytes, deliveryAnnotationsAt, end, DELIVERY_ANNOTATIONS);
    }
    if (messageAnnotationsAt >= 0) {
      if (messageAnnotationsAt !== pos) return undefined;
      pos = checkAnnotations(bytes, messageAnnotationsAt, end, MESSAGE_ANNOTATIONS);
    }
    if (propertiesAt >= 0) {
      if (propertiesAt !== pos) return undefined;
      pos = readProperties(bytes, propertiesAt, end, head);
    }
    return pos === end ? head : undefined;
  } catch (err) {
    if (err === IRREGULAR) return undefined;
    throw err;
  }
}

/** The list (or, `map`, the map) of a section described by a small ulong: its count, first element and end. */
class Fields {
  pos: number;
  readonly count: number;
  readonly stop: number;

  constructor(
    readonly bytes: Buffer,
    at: number,
    end: number,
    code: number,
    maxCount: number,
    map = false,
  ) {
    if (end - at < 4 || bytes[at] !== 0x00 || bytes[at + 1] !== 0x53 || bytes[at + 2] !== code) throw IRREGULAR;
    // A map is read as a list is, by its other two codes (there is no empty-map code).
    const list = map ? (bytes[at + 3] === 0xc1 ? 0xc0 : bytes[at + 3] === 0xd1 ? 0xd0 : -1) : bytes[at + 3];
    if (list === 0x45) {
      this.count = 0;
      this.pos = this.stop = at + 4;
    } else if (list === 0xc0) {
      if (end - at < 6) throw IRREGULAR;
      const size = bytes[at + 4]!;
      this.count = bytes[at + 5]!;
      this.stop = at + 5 + size;
      this.pos = at + 6;
    } else if (list === 0xd0) {
      // rhea writes every list as a list32.
      if (end - at < 12) throw IRREGULAR;
      const size = bytes.readUInt32BE(at + 4);
      this.count = bytes.readUInt32BE(at + 8);
      if (size < 4) throw IRREGULAR;
      this.stop = at + 8 + size;
      this.pos = at + 12;
    } else throw IRREGULAR;
    if (this.stop > end || this.pos > this.stop || this.count > maxCount) throw IRREGULAR;
  }

  /** The type code of field `i` (null past the count), without moving. */
  code(i: number): number {
    if (i >= this.count) return NULL;
    if (this.pos >= this.stop) throw IRREGULAR;
    return this.bytes[this.pos]!;
  }

  /** Step over field `i` when it is null or absent. */
  skipNull(i: number): void {
    if (i < this.count) this.pos++;
  }

  /** A fixed-width field's value bytes start here; step over them. */
  take(width: number): number {
    const at = this.pos + 1;
    if (at + width > this.stop) throw IRREGULAR;
    this.pos = at + width;
    return at;
  }

  /** Field `i` as a uint, or `absent` when null; any other type gives up. */
  uint(i: number, absent: number | undefined): number | undefined {
    const c = this.code(i);
    if (c === NULL) {
      this.skipNull(i);
      return absent;
    }
    if (c === UINT0) {
      this.take(0);
      return 0;
    }
    if (c === SMALL_UINT) return this.bytes[this.take(1)]!;
    if (c === UINT) return this.bytes.readUInt32BE(this.take(4));
    throw IRREGULAR;
  }

  /** A boolean field (null: false); the one-byte boolean encoding gives up. */
  boolean(i: number): boolean {
    const c = this.code(i);
    if (c === NULL) this.skipNull(i);
    else if (c === TRUE || c === FALSE) this.take(0);
    else throw IRREGULAR;
    return c === TRUE;
  }

  /** A string or symbol field (null: undefined); another type gives up. */
  text(i: number): string | undefined {
    const c = this.code(i);
    if (c === NULL) {
      this.skipNull(i);
      return undefined;
    }
    if (c !== 0xa1 && c !== 0xa3 && c !== 0xb1 && c !== 0xb3) throw IRREGULAR;
    const from = this.stepVariable(c);
    if (this.ascii(from)) return this.bytes.toString('latin1', from, this.pos);
    if (c === 0xa3 || c === 0xb3 || !isUtf8(this.bytes.subarray(from, this.pos))) throw IRREGULAR;
    return this.bytes.toString('utf8', from, this.pos);
  }

  /** A timestamp field as ms since the epoch (null: undefined). */
  timestamp(i: number): number | undefined {
    const c = this.code(i);
    if (c === NULL) {
      this.skipNull(i);
      return undefined;
    }
    if (c !== TIMESTAMP) throw IRREGULAR;
    const at = this.take(8);
    const ms = this.bytes.readInt32BE(at) * 0x1_0000_0000 + this.bytes.readUInt32BE(at + 4);
    // Beyond a Date's range the generic reading has an invalid Date: no expiry either way.
    return Math.abs(ms) <= MAX_DATE_MS ? ms : undefined;
  }

  /**
   * Step over field `i`, whatever primitive it is, checked as the generic decoder
   * checks it; a compound, a described value, a one-byte boolean or a char gives up.
   */
  skip(i: number): void {
    const c = this.code(i);
    if (c === NULL) {
      this.skipNull(i);
      return;
    }
    const e = encodingOf(c);
    if (!e) throw IRREGULAR;
    if (e.category === 'fixed') {
      // The two fixed encodings whose bytes the generic decoder checks.
      if ((e.type === 'boolean' && e.width > 0) || e.type === 'char') throw IRREGULAR;
      this.take(e.width);
      return;
    }
    if (e.category !== 'variable') throw IRREGULAR;
    // A binary's bytes are not looked at: stepped over without a view of them (a message-id
    // or user-id is often one, on every message).
    if (e.type === 'binary') {
      this.stepVariable(c);
      return;
    }
    const from = this.stepVariable(c);
    if (this.ascii(from)) return;
    if (e.type === 'symbol' || !isUtf8(this.bytes.subarray(from, this.pos))) throw IRREGULAR;
  }

  /**
   * Whether the bytes from `from` to the current position are all ASCII (so a string's
   * are UTF-8 too). Read in place: most strings and symbols a message carries are
   * ASCII, and a view of each for isUtf8 or isAscii was an allocation per field.
   */
  private ascii(from: number): boolean {
    const bytes = this.bytes;
    for (let i = from; i < this.pos; i++) if (bytes[i]! > 0x7f) return false;
    return true;
  }

  /** Steps over a binary, string or symbol; where its bytes start (they end at the new pos). */
  private stepVariable(c: number): number {
    const wide = c >= 0xb0;
    const at = this.pos + 1;
    if (at + (wide ? 4 : 1) > this.stop) throw IRREGULAR;
    const n = wide ? u32(this.bytes, at) : this.bytes[at]!;
    const from = at + (wide ? 4 : 1);
    if (n > this.stop - from) throw IRREGULAR;
    this.pos = from + n;
    return from;
  }

  /** All fields were read and they filled the list exactly: where the section ends. */
  done(): number {
    if (this.pos !== this.stop) throw IRREGULAR;
    return this.stop;
  }
}

/**
 * How a properties section's user-id stands to the connection's user: absent (null, or
 * a list too short to hold it), the same bytes, another value (other bytes, or a type
 * that is not a binary, string or symbol), or irregular (the section is not a list, or
 * its message-id is of a kind not stepped over here): the caller decodes that section
 * generically.
 */
export type UserIdClaim = 'absent' | 'same' | 'other' | 'irregular';

const USER_ID = 1;

/**
 * properties.user-id (spec 3.2.4) in the properties section whose list starts at `at`
 * (after the section's descriptor) and which ends by `end`, held to `user` (the UTF-8 of
 * the name the connection logged in as). It runs on every message a logged-in client
 * sends, so it reads the bytes where they are and makes nothing, whatever it finds.
 */
export function userIdClaim(bytes: Buffer, at: number, end: number, user: Buffer): UserIdClaim {
  const list = bytes[at];
  let count: number;
  let pos: number;
  let stop: number;
  if (list === 0x45) return 'absent';
  if (list === 0xc0) {
    if (end - at < 3) return 'irregular';
    stop = at + 2 + bytes[at + 1]!;
    count = bytes[at + 2]!;
    pos = at + 3;
  } else if (list === 0xd0) {
    if (end - at < 9) return 'irregular';
    stop = at + 5 + u32(bytes, at + 1);
    count = u32(bytes, at + 5);
    pos = at + 9;
  } else return 'irregular';
  if (stop > end) return 'irregular';
  if (count <= USER_ID) return 'absent';
  pos = stepOver(bytes, pos, stop); // the message-id
  if (pos < 0 || pos >= stop) return 'irregular';
  const c = bytes[pos]!;
  if (c === NULL) return 'absent';
  let from: number;
  let n: number;
  if (c === 0xa0 || c === 0xa1 || c === 0xa3) {
    if (pos + 2 > stop) return 'irregular';
    n = bytes[pos + 1]!;
    from = pos + 2;
  } else if (c === 0xb0 || c === 0xb1 || c === 0xb3) {
    if (pos + 5 > stop) return 'irregular';
    n = u32(bytes, pos + 1);
    from = pos + 5;
  } else return 'other';
  if (n > stop - from) return 'irregular';
  if (n !== user.length) return 'other';
  for (let i = 0; i < n; i++) if (bytes[from + i] !== user[i]) return 'other';
  return 'same';
}

/** Where the primitive at `pos` ends (by `stop`), or -1 for a described or compound value, or one that does not fit. */
function stepOver(bytes: Buffer, pos: number, stop: number): number {
  const c = bytes[pos]!;
  let next: number;
  // A binary, string or symbol (what message-ids mostly are), else by the type's width.
  if (c === 0xa0 || c === 0xa1 || c === 0xa3) next = pos + 2 > stop ? -1 : pos + 2 + bytes[pos + 1]!;
  else if (c === 0xb0 || c === 0xb1 || c === 0xb3) next = pos + 5 > stop ? -1 : pos + 5 + u32(bytes, pos + 1);
  else {
    const e = encodingOf(c);
    next = e?.category === 'fixed' ? pos + 1 + e.width : -1;
  }
  return next <= stop ? next : -1;
}

/** The big-endian uint32 at `at` (in bounds): readUInt32BE's checks cost more than these few reads. */
export function u32(bytes: Buffer, at: number): number {
  return bytes[at]! * 0x100_0000 + ((bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!);
}

function readHeader(bytes: Buffer, at: number, end: number, head: MessageHead): number {
  const f = new Fields(bytes, at, end, 0x70, HEADER_FIELDS);
  head.durable = f.boolean(0);
  const priority = f.code(1);
  if (priority === UBYTE) head.priority = bytes[f.take(1)]!;
  else if (priority === NULL) f.skipNull(1);
  else throw IRREGULAR;
  head.ttlMs = f.uint(2, undefined);
  f.boolean(3); // first-acquirer: not the broker's to read
  head.deliveryCount = f.uint(4, 0)!;
  return f.done();
}

/**
 * Step over an annotations section (a map; spec 3.2.2, 3.2.3) of primitive keys and
 * values, each checked as the generic decoder checks it; a compound or described value
 * among them gives up. Where the section ends.
 */
function checkAnnotations(bytes: Buffer, at: number, end: number, code: number): number {
  const f = new Fields(bytes, at, end, code, MAX_ANNOTATION_ITEMS, true);
  if (f.count % 2 !== 0) throw IRREGULAR;
  for (let i = 0; i < f.count; i++) f.skip(i);
  return f.done();
}

function readProperties(bytes: Buffer, at: number, end: number, head: MessageHead): number {
  const f = new Fields(bytes, at, end, 0x73, PROPERTY_FIELDS);
  for (let i = 0; i < PROPERTY_FIELDS; i++) {
    if (i === TO) head.to = f.text(i);
    else if (i === SUBJECT) head.subject = f.text(i);
    else if (i === ABSOLUTE_EXPIRY) head.absoluteExpiry = f.timestamp(i);
    else f.skip(i);
  }
  return f.done();
}

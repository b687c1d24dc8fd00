// A connection's output: frames written straight into a slab of bytes, from the
// spec's tables (definitions.ts), with no tree of AmqpValues, no bigints and no
// buffer per frame. A performative's primitive fields (handles, ids, windows,
// flags, tags) are written here; anything else (a terminus, a state, an error,
// a map) goes through the generic encoder, so the bytes are the same as
// encode(describedList(...)) would give (a unit test holds the two together).
//
// Small payloads are copied in after their frame's head, so that a tick's frames
// leave as a few contiguous buffers: the stream machinery costs more per buffer
// than copying a few KiB. A payload over COPY_LIMIT is handed on as it is, never
// copied.
//
// Bytes handed out by take() are never written again: the next frames go after
// them, or into a new slab. A connection keeps its slab only while it is busy,
// so an idle connection holds none.
import type { CompositeDef, FieldDef } from './definitions.js';
import { encode } from './encoder.js';
import { AmqpError, Condition } from './errors.js';
import { FRAME_HEADER_SIZE } from './frames.js';
import { fieldValue } from './performative.js';
import type { AmqpValue } from './types.js';

/** Payloads up to this size are copied after their head; larger ones go out as their own buffer. */
export const COPY_LIMIT = 8 * 1024;
/** A tick that wrote at least this much keeps its slab for the next one. */
const BUSY_TICK_BYTES = 4 * 1024;
/** Slab sizes: a light tick's comes from Node's shared pool (under 4 KiB), a busy connection's is its own. */
const SMALL_SLAB = 2 * 1024;
const BUSY_SLAB = 64 * 1024;

const U32 = 0xffffffff;
const DESCRIBED_SMALLULONG = [0x00, 0x53] as const;

// Values encoded once, by identity: the shared outcomes (accepted, released) of every disposition.
const preencoded = new WeakMap<object, Buffer>();

/** Mark a constant value (never changed afterwards) so that frames copy its encoding instead of encoding it again. */
export function constantValue<T extends AmqpValue>(v: T): T {
  preencoded.set(v, encode(v));
  return Object.freeze(v);
}

export class FrameOutput {
  private slab: Buffer | undefined;
  private pos = 0;
  /** Start of the bytes written since the last chunk was cut (not yet in `chunks`). */
  private runStart = 0;
  /** Start of the frame being written (pos when none is). */
  private frameStart = 0;
  private chunks: Buffer[] = [];
  private busy = false;
  /** A frame is begun and not ended. */
  inFrame = false;
  /** Bytes queued since the last take(). */
  length = 0;

  get isEmpty(): boolean {
    return this.length === 0;
  }

  /** Bytes as they are (protocol headers, a frame encoded elsewhere). */
  raw(bytes: Buffer): void {
    if (bytes.length > COPY_LIMIT) return this.chunk(bytes);
    this.ensure(bytes.length);
    bytes.copy(this.slab!, this.pos);
    this.pos += bytes.length;
    this.frameStart = this.pos;
    this.length += bytes.length;
  }

  /** Start a frame: its 8-byte header, the size filled in by endFrame(). */
  beginFrame(type: number, channel: number): void {
    this.ensure(FRAME_HEADER_SIZE);
    const b = this.slab!;
    const at = this.pos;
    this.frameStart = at;
    this.inFrame = true;
    b[at + 4] = 2; // data offset: no extended header
    b[at + 5] = type;
    b[at + 6] = channel >> 8;
    b[at + 7] = channel & 0xff;
    this.pos = at + FRAME_HEADER_SIZE;
  }

  /** Bytes of the frame being written so far (header and performative). */
  get headLength(): number {
    return this.pos - this.frameStart;
  }

  /** Forget the frame being written (it is written again differently). */
  discardFrame(): void {
    this.pos = this.frameStart;
    this.inFrame = false;
  }

  /** Finish the frame: its size counts the payload, which follows it. */
  endFrame(payload?: Buffer): void {
    const head = this.pos - this.frameStart;
    const n = payload ? payload.length : 0;
    this.slab!.writeUInt32BE(head + n, this.frameStart);
    this.length += head;
    this.frameStart = this.pos;
    this.inFrame = false;
    if (!payload || n === 0) return;
    if (n > COPY_LIMIT) return this.chunk(payload);
    this.ensure(n);
    payload.copy(this.slab!, this.pos);
    this.pos += n;
    this.frameStart = this.pos;
    this.length += n;
  }

  /**
   * The composite `def` (a performative, or anything described) with these
   * field values by name; undefined and null are absent. As describedList():
   * trailing absent fields are left out, an empty list is list0.
   */
  performative(def: CompositeDef, fields: Record<string, unknown>): void {
    this.ensure(3 + 3);
    // Offsets from the frame's start: a field that needs a new slab moves the frame (ensure()).
    const base = this.frameStart;
    const b = this.slab!;
    b[this.pos] = DESCRIBED_SMALLULONG[0];
    b[this.pos + 1] = DESCRIBED_SMALLULONG[1];
    b[this.pos + 2] = def.code;
    const list = this.pos + 3 - base;
    b[this.pos + 3] = 0xc0; // list8, widened below if its items do not fit
    this.pos += 6;
    let count = 0;
    let endOfLast = this.pos - base;
    const defs = def.fields;
    for (let i = 0; i < defs.length; i++) {
      const f = defs[i]!;
      const v = fields[f.name];
      if (v === undefined || v === null) {
        this.byte(0x40);
        continue;
      }
      this.field(f, v, def.name);
      count = i + 1;
      endOfLast = this.pos - this.frameStart;
    }
    const at = this.frameStart + list;
    const s = this.slab!;
    this.pos = this.frameStart + endOfLast;
    if (count === 0) {
      s[at] = 0x45; // list0
      this.pos = at + 1;
      return;
    }
    const body = this.pos - (at + 3);
    if (body + 1 <= 255) {
      s[at + 1] = body + 1;
      s[at + 2] = count;
      return;
    }
    // list32: six more bytes of size and count.
    if (body + 4 > U32) throw new AmqpError(Condition.internalError, `${def.name} of ${body} bytes is too big to encode`);
    this.ensure(6);
    const w = this.slab!;
    const listAt = this.frameStart + list;
    w.copyWithin(listAt + 9, listAt + 3, this.pos);
    w[listAt] = 0xd0;
    w.writeUInt32BE(body + 4, listAt + 1);
    w.writeUInt32BE(count, listAt + 5);
    this.pos += 6;
  }

  /** Everything queued, in order, as few buffers as the payloads allow; the output is empty after. */
  take(): Buffer[] {
    if (this.pos > this.runStart) this.chunks.push(this.slab!.subarray(this.runStart, this.pos));
    this.runStart = this.frameStart = this.pos;
    const out = this.chunks;
    this.chunks = [];
    // Keep a slab only for a connection that is busy and has half of it left.
    this.busy = this.length >= BUSY_TICK_BYTES;
    if (this.slab && (!this.busy || this.pos > this.slab.length / 2)) this.dropSlab();
    this.length = 0;
    return out;
  }

  // ---- fields

  /** One field's value: its primitive written here when it is the plain case, the rest through the generic encoder. */
  private field(f: FieldDef, v: unknown, where: string): void {
    if (!f.multiple) {
      switch (f.type) {
        case 'uint':
          if (typeof v === 'number' && v >= 0 && v <= U32 && Number.isInteger(v)) return this.uint(v);
          break;
        case 'boolean':
          if (typeof v === 'boolean') return this.byte(v ? 0x41 : 0x42);
          break;
        case 'binary':
          if (Buffer.isBuffer(v) && v.length <= 255) return this.binary8(v);
          break;
        case 'ulong':
          if (typeof v === 'number' && v >= 0 && v <= 255 && Number.isInteger(v)) return v === 0 ? this.byte(0x44) : this.byte2(0x53, v);
          break;
        default:
          break;
      }
    }
    const bytes = typeof v === 'object' && v !== null ? preencoded.get(v) : undefined;
    this.bytes(bytes ?? encode(fieldValue(f, v, `${where}.${f.name}`)));
  }

  private uint(v: number): void {
    if (v === 0) return this.byte(0x43);
    if (v <= 255) return this.byte2(0x52, v);
    this.ensure(5);
    this.slab![this.pos] = 0x70;
    this.slab!.writeUInt32BE(v, this.pos + 1);
    this.pos += 5;
  }

  private binary8(v: Buffer): void {
    this.ensure(2 + v.length);
    const s = this.slab!;
    s[this.pos] = 0xa0;
    s[this.pos + 1] = v.length;
    v.copy(s, this.pos + 2);
    this.pos += 2 + v.length;
  }

  private byte(b: number): void {
    this.ensure(1);
    this.slab![this.pos++] = b;
  }

  private byte2(b0: number, b1: number): void {
    this.ensure(2);
    this.slab![this.pos] = b0;
    this.slab![this.pos + 1] = b1;
    this.pos += 2;
  }

  private bytes(v: Buffer): void {
    this.ensure(v.length);
    v.copy(this.slab!, this.pos);
    this.pos += v.length;
  }

  // ---- slabs

  /** A payload too big to copy: cut the run before it and hand it on as it is. */
  private chunk(bytes: Buffer): void {
    if (this.pos > this.runStart) this.chunks.push(this.slab!.subarray(this.runStart, this.pos));
    this.chunks.push(bytes);
    this.runStart = this.frameStart = this.pos;
    this.length += bytes.length;
  }

  /** Room for `n` more bytes; a new slab takes the frame being written along. */
  private ensure(n: number): void {
    const slab = this.slab;
    if (slab && this.pos + n <= slab.length) return;
    const partial = this.pos - this.frameStart;
    const size = Math.max(this.busy || this.length >= BUSY_TICK_BYTES ? BUSY_SLAB : SMALL_SLAB, partial + n);
    const next = Buffer.allocUnsafe(size);
    if (slab) {
      if (this.frameStart > this.runStart) this.chunks.push(slab.subarray(this.runStart, this.frameStart));
      slab.copy(next, 0, this.frameStart, this.pos);
    }
    this.slab = next;
    this.runStart = this.frameStart = 0;
    this.pos = partial;
  }

  private dropSlab(): void {
    this.slab = undefined;
    this.pos = this.runStart = this.frameStart = 0;
  }
}

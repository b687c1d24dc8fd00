// The encoder of AMQP 1.0 values (spec part 1). A value that says which encoding
// it came in (`code`, as the decoder leaves it) is written in that encoding when
// its value fits; otherwise the most compact encoding of its type is chosen, as
// the spec recommends (uint0, smalluint, list0, list8 before list32...).
import { invalidField } from './errors.js';
import { DESCRIBED, type AmqpValue, type ElementConstructor, type Encoding, encodingOf } from './types.js';

const U32 = 0xffffffff;
const U64 = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

function wholeIn(v: number, lo: number, hi: number): boolean {
  return Number.isInteger(v) && v >= lo && v <= hi;
}

export class Encoder {
  private buf: Buffer;
  private pos = 0;

  constructor(initialSize = 256) {
    this.buf = Buffer.allocUnsafe(initialSize);
  }

  /** The bytes written so far (a copy the encoder no longer touches). */
  bytes(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.pos));
  }

  get length(): number {
    return this.pos;
  }

  write(v: AmqpValue): this {
    if (v.type === 'described') {
      this.byte(DESCRIBED);
      this.write(v.descriptor);
      return this.write(v.value);
    }
    const code = v.code !== undefined && this.fits(v.code, v) ? v.code : this.compactCode(v);
    this.byte(code);
    this.body(encodingOf(code)!, v, true);
    return this;
  }

  /** Raw bytes (frame headers, payloads). */
  raw(bytes: Buffer): this {
    this.room(bytes.length);
    bytes.copy(this.buf, this.pos);
    this.pos += bytes.length;
    return this;
  }

  uint32At(offset: number, value: number): void {
    this.buf.writeUInt32BE(value, offset);
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.pos);
    this.buf = grown;
  }

  private byte(b: number): void {
    this.room(1);
    this.buf[this.pos++] = b;
  }

  /** Whether a value can be written in the encoding `code` (same type, value in range). */
  private fits(code: number, v: AmqpValue): boolean {
    const e = encodingOf(code);
    if (!e || e.type !== v.type) return false;
    switch (e.name) {
      case 'true':
      case 'false':
        return (v as { value: boolean }).value === (e.name === 'true');
      case 'uint0':
        return (v as { value: number }).value === 0;
      case 'ulong0':
        return (v as { value: bigint }).value === 0n;
      case 'smalluint':
        return wholeIn((v as { value: number }).value, 0, 255);
      case 'smallulong':
        return (v as { value: bigint }).value >= 0n && (v as { value: bigint }).value <= 255n;
      case 'smallint':
        return wholeIn((v as { value: number }).value, -128, 127);
      case 'smalllong':
        return (v as { value: bigint }).value >= -128n && (v as { value: bigint }).value <= 127n;
      case 'list0':
        return (v as { value: unknown[] }).value.length === 0;
      default:
        return true; // widths of sizes are checked as the value is written
    }
  }

  private compactCode(v: Exclude<AmqpValue, { type: 'described' }>): number {
    switch (v.type) {
      case 'null':
        return 0x40;
      case 'boolean':
        return v.value ? 0x41 : 0x42;
      case 'ubyte':
        return 0x50;
      case 'ushort':
        return 0x60;
      case 'uint':
        return v.value === 0 ? 0x43 : wholeIn(v.value, 0, 255) ? 0x52 : 0x70;
      case 'ulong':
        return v.value === 0n ? 0x44 : v.value > 0n && v.value <= 255n ? 0x53 : 0x80;
      case 'byte':
        return 0x51;
      case 'short':
        return 0x61;
      case 'int':
        return wholeIn(v.value, -128, 127) ? 0x54 : 0x71;
      case 'long':
        return v.value >= -128n && v.value <= 127n ? 0x55 : 0x81;
      case 'float':
        return 0x72;
      case 'double':
        return 0x82;
      case 'decimal32':
        return 0x74;
      case 'decimal64':
        return 0x84;
      case 'decimal128':
        return 0x94;
      case 'char':
        return 0x73;
      case 'timestamp':
        return 0x83;
      case 'uuid':
        return 0x98;
      case 'binary':
        return v.value.length <= 255 ? 0xa0 : 0xb0;
      case 'string':
        return Buffer.byteLength(v.value, 'utf8') <= 255 ? 0xa1 : 0xb1;
      case 'symbol':
        return v.value.length <= 255 ? 0xa3 : 0xb3;
      case 'list':
        return v.value.length === 0 ? 0x45 : 0xc0; // list8 grows to list32 when needed
      case 'map':
        return 0xc1;
      case 'array':
        return 0xe0;
    }
  }

  private size(width: number, n: number, what: string): void {
    if (width === 1) {
      if (n > 255) throw invalidField(`${what} of ${n} bytes does not fit an 8-bit size`);
      this.byte(n);
    } else {
      if (n > U32) throw invalidField(`${what} of ${n} bytes does not fit a 32-bit size`);
      this.room(4);
      this.buf.writeUInt32BE(n, this.pos);
      this.pos += 4;
    }
  }

  /** A value in encoding `e`, its constructor already written (or shared, in an array). */
  private body(e: Encoding, v: AmqpValue, ownConstructor: boolean): void {
    if (v.type === 'described' || v.type !== e.type) throw invalidField(`a ${v.type} cannot be written as ${e.name}`);
    const range = (ok: boolean) => {
      if (!ok) throw invalidField(`${String((v as { value: unknown }).value)} does not fit ${e.name}`);
    };
    this.room(e.category === 'fixed' ? e.width : 0);
    const b = this.buf;
    const at = this.pos;
    switch (v.type) {
      case 'null':
        return;
      case 'boolean':
        if (e.width === 1) this.buf[this.pos++] = v.value ? 1 : 0;
        else range(this.fits(e.code, v));
        return;
      case 'ubyte':
        range(wholeIn(v.value, 0, 255));
        b[at] = v.value;
        break;
      case 'ushort':
        range(wholeIn(v.value, 0, 0xffff));
        b.writeUInt16BE(v.value, at);
        break;
      case 'uint':
        range(wholeIn(v.value, 0, e.width === 0 ? 0 : e.width === 1 ? 255 : U32));
        if (e.width === 1) b[at] = v.value;
        else if (e.width === 4) b.writeUInt32BE(v.value, at);
        break;
      case 'ulong':
        range(v.value >= 0n && v.value <= (e.width === 0 ? 0n : e.width === 1 ? 255n : U64));
        if (e.width === 1) b[at] = Number(v.value);
        else if (e.width === 8) b.writeBigUInt64BE(v.value, at);
        break;
      case 'byte':
        range(wholeIn(v.value, -128, 127));
        b.writeInt8(v.value, at);
        break;
      case 'short':
        range(wholeIn(v.value, -0x8000, 0x7fff));
        b.writeInt16BE(v.value, at);
        break;
      case 'int':
        range(e.width === 1 ? wholeIn(v.value, -128, 127) : wholeIn(v.value, -0x80000000, 0x7fffffff));
        if (e.width === 1) b.writeInt8(v.value, at);
        else b.writeInt32BE(v.value, at);
        break;
      case 'long':
        range(e.width === 1 ? v.value >= -128n && v.value <= 127n : v.value >= I64_MIN && v.value <= I64_MAX);
        if (e.width === 1) b.writeInt8(Number(v.value), at);
        else b.writeBigInt64BE(v.value, at);
        break;
      case 'timestamp':
        range(v.value >= I64_MIN && v.value <= I64_MAX);
        b.writeBigInt64BE(v.value, at);
        break;
      case 'float':
        b.writeFloatBE(v.value, at);
        break;
      case 'double':
        b.writeDoubleBE(v.value, at);
        break;
      case 'char':
        range(wholeIn(v.value, 0, 0x10ffff) && !(v.value >= 0xd800 && v.value <= 0xdfff));
        b.writeUInt32BE(v.value, at);
        break;
      case 'decimal32':
      case 'decimal64':
      case 'decimal128':
      case 'uuid':
        range(v.value.length === e.width);
        v.value.copy(b, at);
        break;
      case 'binary':
      case 'string':
      case 'symbol': {
        const bytes = v.type === 'binary' ? v.value : Buffer.from(v.value as string, v.type === 'string' ? 'utf8' : 'latin1');
        if (v.type === 'symbol' && /[^\x00-\x7f]/.test(v.value)) throw invalidField(`symbol ${JSON.stringify(v.value)} is not ASCII`);
        this.size(e.width, bytes.length, e.name);
        this.raw(bytes);
        return;
      }
      case 'list':
        if (e.category === 'fixed') return range(v.value.length === 0);
        return this.compound(e, v.value.length, ownConstructor, () => {
          for (const item of v.value) this.write(item);
        });
      case 'map':
        return this.compound(e, v.value.length * 2, ownConstructor, () => {
          for (const [k, val] of v.value) this.write(k).write(val);
        });
      case 'array':
        return this.compound(e, v.value.length, ownConstructor, () => this.elements(v.element, v.value));
    }
    this.pos += e.width;
  }

  private elements(ctor: ElementConstructor, values: AmqpValue[]): void {
    const e = encodingOf(ctor.code);
    if (!e) throw invalidField(`unknown array element constructor 0x${ctor.code.toString(16)}`);
    if (ctor.descriptor) {
      this.byte(DESCRIBED);
      this.write(ctor.descriptor);
    }
    this.byte(ctor.code);
    for (const v of values) {
      const inner = ctor.descriptor ? (v.type === 'described' ? v.value : invalidValue('described', v)) : v;
      this.body(e, inner, false);
    }
  }

  /**
   * Size, count, then the items. An 8-bit form (list8, map8, array8) whose items do
   * not fit becomes the 32-bit one when the value has its own constructor; the
   * elements of an array share theirs, so there it is an error.
   */
  private compound(e: Encoding, count: number, ownConstructor: boolean, items: () => void): void {
    const start = this.pos;
    this.room(8);
    this.pos += 8; // room for a 32-bit size and count
    items();
    const bodyEnd = this.pos;
    const bodyLength = bodyEnd - start - 8;
    if (e.width === 1 && bodyLength + 1 <= 255 && count <= 255) {
      this.buf.copyWithin(start + 2, start + 8, bodyEnd);
      this.buf[start] = bodyLength + 1;
      this.buf[start + 1] = count;
      this.pos = bodyEnd - 6;
      return;
    }
    if (bodyLength + 4 > U32 || count > U32) throw invalidField(`${e.name} of ${bodyLength} bytes is too big to encode`);
    if (e.width === 1 && !ownConstructor) throw invalidField(`an array element of ${bodyLength} bytes or ${count} items does not fit ${e.name}`);
    if (e.width === 1) this.buf[start - 1] = e.code + 0x10; // list8 -> list32, map8 -> map32, array8 -> array32
    this.buf.writeUInt32BE(bodyLength + 4, start);
    this.buf.writeUInt32BE(count, start + 4);
  }
}

function invalidValue(expected: string, v: AmqpValue): never {
  throw invalidField(`an array of described elements holds a ${v.type}, not a ${expected} value`);
}

/** One value's encoding. */
export function encode(v: AmqpValue): Buffer {
  return new Encoder().write(v).bytes();
}

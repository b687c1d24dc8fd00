// The decoder of AMQP 1.0 values (spec part 1), safe on hostile bytes by
// construction: every size and count is checked against the bytes that remain
// before anything is allocated or looped over, the total number of values one
// decode may produce is bounded by the bytes it was given (plus a small
// allowance for zero-width array elements), nesting depth is bounded, and every
// failure is an AmqpError carrying amqp:decode-error. Nothing else is thrown.
import { isAscii, isUtf8 } from 'node:buffer';
import { decodeError } from './errors.js';
import { DESCRIBED, type AmqpValue, type ElementConstructor, type Encoding, encodingOf } from './types.js';

export interface DecodeLimits {
  /** Deepest nesting of lists, maps, arrays and described values. */
  maxDepth: number;
  /** Most elements of one array whose elements take no bytes (null, true, uint0, list0...). */
  maxZeroWidthElements: number;
  /** Values one decode may produce beyond one per byte (zero-width array elements). */
  extraValues: number;
}

export const DEFAULT_DECODE_LIMITS: DecodeLimits = { maxDepth: 32, maxZeroWidthElements: 1024, extraValues: 4096 };

/** Fewest bytes one element of an array with this constructor can take. */
function minElementBytes(e: Encoding): number {
  switch (e.category) {
    case 'fixed':
      return e.width;
    case 'variable':
      return e.width;
    case 'compound':
      return 2 * e.width;
    case 'array':
      return 2 * e.width + 1;
  }
}

export class Decoder {
  /** Where the next value starts. */
  pos: number;
  /** Values this decode may still produce: the bound on all work it does. */
  private budget: number;

  constructor(
    readonly buffer: Buffer,
    start = 0,
    /** Where the bytes given end (narrowed while a list, map or array is read). */
    public end = buffer.length,
    private readonly limits: DecodeLimits = DEFAULT_DECODE_LIMITS,
  ) {
    if (start < 0 || end > buffer.length || start > end) throw decodeError(`bad decode bounds ${start}..${end} of ${buffer.length} bytes`);
    this.pos = start;
    this.budget = end - start + limits.extraValues;
  }

  get remaining(): number {
    return this.end - this.pos;
  }

  /** The next value. */
  value(): AmqpValue {
    return this.read(0);
  }

  private need(n: number, what: string): void {
    if (n > this.end - this.pos) throw decodeError(`${what} needs ${n} bytes at offset ${this.pos}, ${this.end - this.pos} remain`);
  }

  /** Fail unless `n` more values fit in the budget (checked before a loop allocates any). */
  private afford(n: number): void {
    if (n > this.budget) throw decodeError(`more values than the bytes given can hold (at offset ${this.pos})`);
  }

  private spend(n: number): void {
    this.afford(n);
    this.budget -= n;
  }

  private constructorAt(depth: number): ElementConstructor & { encoding: Encoding } {
    this.need(1, 'a constructor');
    const at = this.pos;
    const code = this.buffer[this.pos++]!;
    if (code === DESCRIBED) {
      const descriptor = this.read(depth + 1);
      this.need(1, 'the constructor of a described value');
      const inner = this.buffer[this.pos++]!;
      if (inner === DESCRIBED) throw decodeError(`a described type cannot describe an array element constructor again (offset ${at})`);
      const encoding = encodingOf(inner);
      if (!encoding) throw decodeError(`unknown constructor 0x${inner.toString(16)} at offset ${this.pos - 1}`);
      return { code: inner, descriptor, encoding };
    }
    const encoding = encodingOf(code);
    if (!encoding) throw decodeError(`unknown constructor 0x${code.toString(16)} at offset ${at}`);
    return { code, encoding };
  }

  private read(depth: number): AmqpValue {
    if (depth > this.limits.maxDepth) throw decodeError(`values nested deeper than ${this.limits.maxDepth} (offset ${this.pos})`);
    this.spend(1);
    this.need(1, 'a constructor');
    const code = this.buffer[this.pos++]!;
    if (code === DESCRIBED) {
      const descriptor = this.read(depth + 1);
      const value = this.read(depth + 1);
      return { type: 'described', descriptor, value };
    }
    const encoding = encodingOf(code);
    if (!encoding) throw decodeError(`unknown constructor 0x${code.toString(16)} at offset ${this.pos - 1}`);
    return this.body(encoding, depth);
  }

  private size(width: number): number {
    return width === 1 ? this.buffer[this.pos++]! : this.readU32();
  }

  private readU32(): number {
    const v = this.buffer.readUInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  /** The size and count fields of a list, map or array, the size checked against what remains. */
  private sizeAndCount(e: Encoding): { at: number; size: number; stop: number; count: number } {
    const at = this.pos;
    this.need(2 * e.width, `the size and count of ${e.name}`);
    const size = this.size(e.width);
    if (size < e.width) throw decodeError(`${e.name} at offset ${at} declares size ${size}, less than its count field`);
    this.need(size, `${e.name} of ${size} bytes`);
    const stop = this.pos + size;
    return { at, size, stop, count: this.size(e.width) };
  }

  /** A value of this encoding whose constructor has been read already. */
  private body(e: Encoding, depth: number): AmqpValue {
    const b = this.buffer;
    const code = e.code;
    switch (e.category) {
      case 'fixed': {
        this.need(e.width, e.name);
        const at = this.pos;
        this.pos += e.width;
        switch (e.type) {
          case 'null':
            return { type: 'null', code };
          case 'boolean': {
            if (code === 0x41) return { type: 'boolean', value: true, code };
            if (code === 0x42) return { type: 'boolean', value: false, code };
            const v = b[at]!;
            if (v > 1) throw decodeError(`boolean byte 0x${v.toString(16)} at offset ${at} is neither 0 nor 1`);
            return { type: 'boolean', value: v === 1, code };
          }
          case 'ubyte':
            return { type: 'ubyte', value: b[at]!, code };
          case 'ushort':
            return { type: 'ushort', value: b.readUInt16BE(at), code };
          case 'uint':
            return { type: 'uint', value: e.width === 0 ? 0 : e.width === 1 ? b[at]! : b.readUInt32BE(at), code };
          case 'ulong':
            return { type: 'ulong', value: e.width === 0 ? 0n : e.width === 1 ? BigInt(b[at]!) : b.readBigUInt64BE(at), code };
          case 'byte':
            return { type: 'byte', value: b.readInt8(at), code };
          case 'short':
            return { type: 'short', value: b.readInt16BE(at), code };
          case 'int':
            return { type: 'int', value: e.width === 1 ? b.readInt8(at) : b.readInt32BE(at), code };
          case 'long':
            return { type: 'long', value: e.width === 1 ? BigInt(b.readInt8(at)) : b.readBigInt64BE(at), code };
          case 'float':
            return { type: 'float', value: b.readFloatBE(at), code };
          case 'double':
            return { type: 'double', value: b.readDoubleBE(at), code };
          case 'char': {
            const v = b.readUInt32BE(at);
            if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) throw decodeError(`char 0x${v.toString(16)} at offset ${at} is not a Unicode scalar value`);
            return { type: 'char', value: v, code };
          }
          case 'timestamp':
            return { type: 'timestamp', value: b.readBigInt64BE(at), code };
          case 'decimal32':
          case 'decimal64':
          case 'decimal128':
          case 'uuid':
            return { type: e.type, value: b.subarray(at, at + e.width), code };
          case 'list': // list0
            return { type: 'list', value: [], code };
          default:
            throw decodeError(`no fixed-width decoding of ${e.name}`);
        }
      }
      case 'variable': {
        this.need(e.width, `the size of ${e.name}`);
        const n = this.size(e.width);
        this.need(n, `${e.name} of ${n} bytes`);
        const at = this.pos;
        this.pos += n;
        const bytes = b.subarray(at, at + n);
        if (e.type === 'binary') return { type: 'binary', value: bytes, code };
        if (e.type === 'string') {
          if (!isUtf8(bytes)) throw decodeError(`string at offset ${at} is not valid UTF-8`);
          return { type: 'string', value: bytes.toString('utf8'), code };
        }
        if (!isAscii(bytes)) throw decodeError(`symbol at offset ${at} is not ASCII`);
        return { type: 'symbol', value: bytes.toString('latin1'), code };
      }
      case 'compound': {
        const { at, size, stop, count } = this.sizeAndCount(e);
        // Every item takes at least its constructor byte.
        if (count > stop - this.pos) throw decodeError(`${e.name} at offset ${at} declares ${count} items in ${stop - this.pos} bytes`);
        if (e.type === 'map' && count % 2 !== 0) throw decodeError(`map at offset ${at} has an odd count ${count}`);
        this.afford(count);
        const items: AmqpValue[] = [];
        const outerEnd = this.end;
        this.end = stop;
        for (let i = 0; i < count; i++) items.push(this.read(depth + 1));
        this.end = outerEnd;
        if (this.pos !== stop) throw decodeError(`${e.name} at offset ${at} declares ${size} bytes but its ${count} items take ${this.pos - (stop - size)}`);
        if (e.type === 'list') return { type: 'list', value: items, code };
        const entries: [AmqpValue, AmqpValue][] = [];
        for (let i = 0; i < count; i += 2) entries.push([items[i]!, items[i + 1]!]);
        return { type: 'map', value: entries, code };
      }
      case 'array': {
        const { at, size, stop, count } = this.sizeAndCount(e);
        const outerEnd = this.end;
        this.end = stop;
        const element = this.constructorAt(depth + 1);
        const min = minElementBytes(element.encoding);
        if (min === 0 ? count > this.limits.maxZeroWidthElements : count * min > stop - this.pos) {
          throw decodeError(`${e.name} at offset ${at} declares ${count} elements of ${element.encoding.name}, more than its ${size} bytes can hold`);
        }
        this.afford(count);
        if (depth + 1 > this.limits.maxDepth) throw decodeError(`values nested deeper than ${this.limits.maxDepth} (offset ${this.pos})`);
        const elements: AmqpValue[] = [];
        for (let i = 0; i < count; i++) {
          this.spend(1);
          const v = this.body(element.encoding, depth + 1);
          elements.push(element.descriptor ? { type: 'described', descriptor: element.descriptor, value: v } : v);
        }
        this.end = outerEnd;
        if (this.pos !== stop) throw decodeError(`${e.name} at offset ${at} declares ${size} bytes but its ${count} elements take ${this.pos - (stop - size)}`);
        const ctor: ElementConstructor = element.descriptor ? { code: element.code, descriptor: element.descriptor } : { code: element.code };
        return { type: 'array', value: elements, element: ctor, code };
      }
    }
  }
}

/** Decode exactly one value filling `bytes` (decode-error if bytes are left over). */
export function decodeOne(bytes: Buffer, limits?: DecodeLimits): AmqpValue {
  const d = new Decoder(bytes, 0, bytes.length, limits);
  const v = d.value();
  if (d.remaining !== 0) throw decodeError(`${d.remaining} bytes left after the value`);
  return v;
}

/**
 * Check that `bytes[start, end)` is a sequence of well-formed values (a message's
 * sections, say) before a decoder that is not safe on hostile bytes reads them.
 * Throws the AmqpError of the first that is not.
 */
export function checkValues(bytes: Buffer, start = 0, end = bytes.length): void {
  const d = new Decoder(bytes, start, end);
  while (d.remaining > 0) d.value();
}

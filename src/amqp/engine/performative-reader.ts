// The frame body as most frames come: a described list with a small-ulong
// descriptor whose fields are plain primitives (handles, ids, windows, flags,
// a tag). Those are read here straight from the bytes, against the field's
// table entry, with no AmqpValue tree and no bigint; any other field (a state,
// a terminus, an error, a map, a string) is read by the generic decoder and
// checked as decodeComposite() checks it. Anything irregular (another
// descriptor, bad sizes, a wrong type, a missing mandatory field) makes this
// give up, and the caller decodes the frame generically, so the answer to a
// bad frame, and its wording, is the generic decoder's.
import { type Composite, absentField, fieldOf } from './composite.js';
import { type Archetype, type CompositeDef, compositeBySmallCode } from './definitions.js';
import { DEFAULT_DECODE_LIMITS, Decoder } from './decoder.js';
import { describedList } from './performative.js';
import type { AmqpValue } from './types.js';

// A field's value sits two levels down (described, list): its own decode may nest two less.
const FIELD_LIMITS = { ...DEFAULT_DECODE_LIMITS, maxDepth: DEFAULT_DECODE_LIMITS.maxDepth - 2 };

/** A composite read by the fast path: its value, for re-encoding, is built only if asked for. */
class ReadComposite implements Composite {
  constructor(
    readonly def: CompositeDef,
    readonly fields: Record<string, unknown>,
  ) {}

  get value(): AmqpValue & { type: 'described' } {
    return describedList(this.def.name, this.fields);
  }
}

/** The performative in buf[start, end) providing `archetype`, and where it ends; undefined: decode it generically. */
export function readPerformative(buf: Buffer, start: number, end: number, archetype: Archetype): { body: Composite; end: number } | undefined {
  try {
    return read(buf, start, end, archetype);
  } catch {
    return undefined;
  }
}

function read(buf: Buffer, start: number, end: number, archetype: Archetype): { body: Composite; end: number } | undefined {
  if (end - start < 4 || buf[start] !== 0x00 || buf[start + 1] !== 0x53) return undefined;
  const def = compositeBySmallCode(buf[start + 2]!);
  if (!def || !def.provides.includes(archetype)) return undefined;
  let pos = start + 4;
  let count: number;
  let stop: number;
  switch (buf[start + 3]) {
    case 0x45: // list0
      count = 0;
      stop = pos;
      break;
    case 0xc0: {
      if (end - pos < 2) return undefined;
      const size = buf[pos]!;
      count = buf[pos + 1]!;
      if (size < 1 || size > end - pos - 1) return undefined;
      stop = pos + 1 + size;
      pos += 2;
      break;
    }
    case 0xd0: {
      if (end - pos < 8) return undefined;
      const size = buf.readUInt32BE(pos);
      count = buf.readUInt32BE(pos + 4);
      if (size < 4 || size > end - pos - 4) return undefined;
      stop = pos + 4 + size;
      pos += 8;
      break;
    }
    default:
      return undefined;
  }
  const defs = def.fields;
  if (count > defs.length || count > stop - pos) return undefined;
  const fields: Record<string, unknown> = {};
  const here = def.name;
  for (let i = 0; i < defs.length; i++) {
    const f = defs[i]!;
    if (i < count && pos >= stop) return undefined;
    if (i >= count || buf[pos] === 0x40) {
      if (i < count) pos++;
      const absent = absentField(f, here);
      if (absent !== undefined) fields[f.name] = absent;
      continue;
    }
    const plain = f.multiple || f.choices ? undefined : f.type;
    const c = buf[pos]!;
    if (plain === 'uint' && c === 0x43) {
      fields[f.name] = 0;
      pos += 1;
    } else if (plain === 'uint' && c === 0x52 && stop - pos >= 2) {
      fields[f.name] = buf[pos + 1]!;
      pos += 2;
    } else if (plain === 'uint' && c === 0x70 && stop - pos >= 5) {
      fields[f.name] = buf.readUInt32BE(pos + 1);
      pos += 5;
    } else if (plain === 'boolean' && (c === 0x41 || c === 0x42)) {
      fields[f.name] = c === 0x41;
      pos += 1;
    } else if (plain === 'binary' && c === 0xa0 && stop - pos >= 2 && stop - pos - 2 >= buf[pos + 1]!) {
      const n = buf[pos + 1]!;
      if (f.maxBytes !== undefined && n > f.maxBytes) return undefined;
      fields[f.name] = buf.subarray(pos + 2, pos + 2 + n);
      pos += 2 + n;
    } else {
      const d = new Decoder(buf, pos, stop, FIELD_LIMITS);
      fields[f.name] = fieldOf(d.value(), f, here);
      pos = d.pos;
    }
  }
  if (pos !== stop) return undefined;
  return { body: new ReadComposite(def, fields), end: stop };
}

// Encoding side of the spec's tables (definitions.ts): a composite (performative,
// terminus, outcome, error, SASL frame) is written from its field values by name,
// in the table's order, each converted by the field's declared type. Trailing
// absent fields are left out, as the spec allows (1.4: a list may be shorter).
import type { Composite } from './composite.js';
import { type FieldDef, composite } from './definitions.js';
import { AmqpError, Condition } from './errors.js';
import type { AmqpValue, PrimitiveType } from './types.js';

/** An error (2.8.14) as the engine's callers give and receive it. */
export interface ErrorInfo {
  condition: string;
  description?: string;
  /** A map keyed by symbols (fields), encoded as given. */
  info?: AmqpValue;
}

const isAmqpValue = (v: unknown): v is AmqpValue =>
  typeof v === 'object' && v !== null && !Buffer.isBuffer(v) && !Array.isArray(v) && typeof (v as { type?: unknown }).type === 'string' && !('def' in v);

const isComposite = (v: unknown): v is Composite => typeof v === 'object' && v !== null && 'def' in v && 'value' in v;

function primitive(type: PrimitiveType, v: unknown, path: string): AmqpValue {
  if (isAmqpValue(v)) return v;
  switch (type) {
    case 'boolean':
      return { type, value: Boolean(v) };
    case 'ubyte':
    case 'ushort':
    case 'uint':
    case 'byte':
    case 'short':
    case 'int':
    case 'float':
    case 'double':
    case 'char':
      if (typeof v !== 'number') break;
      return { type, value: v };
    case 'ulong':
    case 'long':
    case 'timestamp':
      if (typeof v !== 'number' && typeof v !== 'bigint') break;
      return { type, value: BigInt(v) };
    case 'string':
    case 'symbol':
      if (typeof v !== 'string') break;
      return { type, value: v };
    case 'binary':
    case 'uuid':
      if (!Buffer.isBuffer(v)) break;
      return { type, value: v };
    default:
      break;
  }
  throw new AmqpError(Condition.internalError, `${path}: cannot encode ${typeof v} as ${type}`);
}

export function fieldValue(f: FieldDef, v: unknown, path: string): AmqpValue {
  if (isComposite(v)) return v.value;
  if (f.multiple && Array.isArray(v)) {
    const items = v.map((x) => single(f, x, path));
    const long = items.some((x) => x.type === 'symbol' && Buffer.byteLength(x.value) > 255);
    return { type: 'array', element: { code: long ? 0xb3 : 0xa3 }, value: items };
  }
  return single(f, v, path);
}

function single(f: FieldDef, v: unknown, path: string): AmqpValue {
  if (isComposite(v)) return v.value;
  const t = f.type;
  if (t === 'error') return errorValue(v as ErrorInfo);
  if (t === '*' || t === 'fields' || t === 'map') {
    if (!isAmqpValue(v)) throw new AmqpError(Condition.internalError, `${path}: give an AmqpValue`);
    return v;
  }
  if (t.startsWith('requires:')) {
    if (typeof v === 'string') return { type: 'string', value: v };
    if (Buffer.isBuffer(v)) return { type: 'binary', value: v };
    if (isAmqpValue(v)) return v;
    throw new AmqpError(Condition.internalError, `${path}: give a composite or an AmqpValue`);
  }
  return primitive(t as PrimitiveType, v, path);
}

export function errorValue(e: ErrorInfo): AmqpValue {
  return describedList('error', { condition: e.condition, description: e.description, info: e.info });
}

/** The described list of composite `name` with these fields (undefined: absent). */
export function describedList(name: string, fields: Record<string, unknown>): AmqpValue & { type: 'described' } {
  const def = composite(name);
  const items: AmqpValue[] = [];
  let last = -1;
  for (let i = 0; i < def.fields.length; i++) {
    const f = def.fields[i]!;
    const v = fields[f.name];
    if (v === undefined || v === null) {
      items.push({ type: 'null' });
      continue;
    }
    items.push(fieldValue(f, v, `${name}.${f.name}`));
    last = i;
  }
  items.length = last + 1;
  return { type: 'described', descriptor: { type: 'ulong', value: BigInt(def.code) }, value: { type: 'list', value: items } };
}

/** An error field of a decoded close/end/detach/rejected, as ErrorInfo. */
export function errorInfoOf(v: unknown): ErrorInfo | undefined {
  if (!isComposite(v)) return undefined;
  const f = v.fields;
  return { condition: f.condition as string, description: f.description as string | undefined, info: f.info as AmqpValue | undefined };
}

// Generic decoding of a described list against its table in definitions.ts:
// the descriptor names the type, and every field is type-checked (type,
// mandatory, multiple, allowed values), with errors that name the type and the
// field (`attach.source.durable`). What a caller gets back is plain: numbers,
// booleans, strings, Buffers, bigints for ulong, arrays for `multiple` fields,
// nested Composites, and AmqpValues for maps.
import { type AmqpError, decodeError, invalidField } from './errors.js';
import {
  type Archetype,
  type CompositeDef,
  type FieldDef,
  PRIMITIVE_PROVIDERS,
  composite,
  compositeByCode,
  compositeBySymbol,
} from './definitions.js';
import { type AmqpValue, encodingOf } from './types.js';

export interface Composite {
  readonly def: CompositeDef;
  /** Field values by spec name; absent fields have their default or are undefined. */
  readonly fields: Record<string, unknown>;
  /** The value as decoded, for re-encoding it (changed or not). */
  readonly value: AmqpValue & { type: 'described' };
}

/** The table a described value's descriptor names, if it is one of the spec's. */
export function describedDef(v: AmqpValue): CompositeDef | undefined {
  if (v.type !== 'described') return undefined;
  const d = v.descriptor;
  if (d.type === 'ulong') return compositeByCode(d.value);
  if (d.type === 'symbol') return compositeBySymbol(d.value);
  return undefined;
}

const wantedText = (expected: { name: string } | { archetype: Archetype }): string => ('name' in expected ? expected.name : `a ${expected.archetype}`);

function descriptorText(v: AmqpValue & { type: 'described' }): string {
  const d = v.descriptor;
  if (d.type === 'ulong') return `0x${d.value.toString(16)}`;
  if (d.type === 'symbol') return JSON.stringify(d.value);
  return `a ${d.type}`;
}

/**
 * Decode `v` as the composite `expected` (a type name), or any composite that
 * provides archetype `expected.archetype`. `path` names where it sits, for errors
 * ('' for a frame body: errors then start with the type's own name).
 */
export function decodeComposite(v: AmqpValue, expected: { name: string } | { archetype: Archetype }, path: string): Composite {
  const top = path === '';
  if (v.type !== 'described') throw (top ? decodeError : invalidField)(`${top ? 'the frame body' : path} must be ${wantedText(expected)}, not a ${v.type}`);
  const def = describedDef(v);
  if (!def) throw (top ? decodeError : invalidField)(`${top ? 'the frame body' : path}: descriptor ${descriptorText(v)} is not ${wantedText(expected)}`);
  const fits = 'name' in expected ? def.name === expected.name : def.provides.includes(expected.archetype);
  if (!fits) throw (top ? decodeError : invalidField)(`${top ? 'the frame body' : path} must be ${wantedText(expected)}, not ${def.name}`);
  const here = top ? def.name : path;
  const list = v.value;
  if (list.type !== 'list') throw decodeError(`${here} must be a described list, not a described ${list.type}`);
  if (list.value.length > def.fields.length) {
    throw decodeError(`${here} has ${list.value.length} fields; the spec defines ${def.fields.length}`);
  }
  const fields: Record<string, unknown> = {};
  for (let i = 0; i < def.fields.length; i++) {
    const f = def.fields[i]!;
    const item = list.value[i];
    if (item === undefined || item.type === 'null') {
      const absent = absentField(f, here);
      if (absent !== undefined) fields[f.name] = absent;
      continue;
    }
    fields[f.name] = fieldOf(item, f, here);
  }
  return { def, fields, value: v };
}

/** The value of field `f` (of the composite at `here`) decoded as `item`, which is not null: type-checked, as callers get it. */
export function fieldOf(item: AmqpValue, f: FieldDef, here: string): unknown {
  // The common case first, without building the field's path: a primitive of the right type.
  if (item.type === f.type && f.type !== 'map' && !f.multiple && !f.choices && f.maxBytes === undefined) return (item as { value: unknown }).value;
  const fieldPath = `${here}.${f.name}`;
  return f.multiple ? multiple(item, f, fieldPath) : single(item, f, fieldPath);
}

/** A field's value when the field is absent (null or past the end of the list): its default, or a refusal if it is mandatory. */
export function absentField(f: FieldDef, here: string): unknown {
  if (f.mandatory) throw invalidField(`${here}.${f.name} is mandatory`);
  return f.default;
}

function multiple(v: AmqpValue, f: FieldDef, path: string): unknown[] {
  if (v.type !== 'array') return [single(v, f, path)];
  return v.value.map((e, i) => single(e, f, `${path}[${i}]`));
}

function single(v: AmqpValue, f: FieldDef, path: string): unknown {
  const t = f.type;
  if (t === '*') return v;
  if (t === 'error') return decodeComposite(v, { name: 'error' }, path);
  if (t === 'fields') {
    if (v.type !== 'map') throw wrongType(path, 'a map', v);
    for (const [k] of v.value) if (k.type !== 'symbol') throw invalidField(`${path} has a ${k.type} key; its keys must be symbols`);
    return v;
  }
  if (t.startsWith('requires:')) {
    const archetype = t.slice('requires:'.length) as Archetype;
    const primitive = PRIMITIVE_PROVIDERS[archetype];
    if (primitive === '*') return v;
    if (primitive && v.type !== 'described') {
      if (!primitive.includes(v.type as never)) throw wrongType(path, primitive.join(' or '), v);
      return plain(v);
    }
    return decodeComposite(v, { archetype }, path);
  }
  if (v.type !== t) throw wrongType(path, t, v);
  const value = plain(v);
  if (f.choices && !f.choices.includes(value as never)) throw invalidField(`${path} ${String(value)} is not one of ${f.choices.join(', ')}`);
  if (f.maxBytes !== undefined && (value as Buffer).length > f.maxBytes) throw invalidField(`${path} of ${(value as Buffer).length} bytes is longer than ${f.maxBytes}`);
  return value;
}

function plain(v: AmqpValue): unknown {
  return v.type === 'null' || v.type === 'described' ? v : 'value' in v && v.type !== 'list' && v.type !== 'map' && v.type !== 'array' ? v.value : v;
}

function wrongType(path: string, expected: string, v: AmqpValue): AmqpError {
  const got = v.type === 'described' ? `a described ${describedDef(v)?.name ?? 'value'}` : v.type === 'array' ? `an array of ${encodingOf(v.element.code)?.type ?? '?'}` : `a ${v.type}`;
  return invalidField(`${path} must be of type ${expected}, not ${got}`);
}

/** Decode a value as a composite named `name` (tests and callers that know what to expect). */
export function decodeAs(name: string, v: AmqpValue): Composite {
  composite(name);
  return decodeComposite(v, { name }, '');
}

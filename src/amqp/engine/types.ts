// The AMQP 1.0 type system (spec part 1.6): every primitive encoding registered
// once, by constructor code, with the type it encodes, how its size is written
// and how many bytes a value of it takes at least. The decoder and the encoder
// both work from this one table.

/** The primitive types of spec 1.6 (widths are encodings of these, not types). */
export type PrimitiveType =
  | 'null' | 'boolean'
  | 'ubyte' | 'ushort' | 'uint' | 'ulong'
  | 'byte' | 'short' | 'int' | 'long'
  | 'float' | 'double'
  | 'decimal32' | 'decimal64' | 'decimal128'
  | 'char' | 'timestamp' | 'uuid'
  | 'binary' | 'string' | 'symbol'
  | 'list' | 'map' | 'array';

/**
 * How an encoding lays out its value (spec 1.2): `fixed` takes `width` bytes;
 * `variable` a size of `width` bytes then that many; `compound` a size and a
 * count of `width` bytes each, then the items; `array` the same, then one
 * element constructor and the elements.
 */
export type Category = 'fixed' | 'variable' | 'compound' | 'array';

export interface Encoding {
  readonly code: number;
  readonly name: string;
  readonly type: PrimitiveType;
  readonly category: Category;
  /** Bytes of the value (fixed) or of its size and count fields (the others). */
  readonly width: 0 | 1 | 2 | 4 | 8 | 16;
}

/** Spec 1.6, in the order of its sections. */
export const ENCODINGS: readonly Encoding[] = [
  { code: 0x40, name: 'null', type: 'null', category: 'fixed', width: 0 },
  { code: 0x56, name: 'boolean', type: 'boolean', category: 'fixed', width: 1 },
  { code: 0x41, name: 'true', type: 'boolean', category: 'fixed', width: 0 },
  { code: 0x42, name: 'false', type: 'boolean', category: 'fixed', width: 0 },
  { code: 0x50, name: 'ubyte', type: 'ubyte', category: 'fixed', width: 1 },
  { code: 0x60, name: 'ushort', type: 'ushort', category: 'fixed', width: 2 },
  { code: 0x70, name: 'uint', type: 'uint', category: 'fixed', width: 4 },
  { code: 0x52, name: 'smalluint', type: 'uint', category: 'fixed', width: 1 },
  { code: 0x43, name: 'uint0', type: 'uint', category: 'fixed', width: 0 },
  { code: 0x80, name: 'ulong', type: 'ulong', category: 'fixed', width: 8 },
  { code: 0x53, name: 'smallulong', type: 'ulong', category: 'fixed', width: 1 },
  { code: 0x44, name: 'ulong0', type: 'ulong', category: 'fixed', width: 0 },
  { code: 0x51, name: 'byte', type: 'byte', category: 'fixed', width: 1 },
  { code: 0x61, name: 'short', type: 'short', category: 'fixed', width: 2 },
  { code: 0x71, name: 'int', type: 'int', category: 'fixed', width: 4 },
  { code: 0x54, name: 'smallint', type: 'int', category: 'fixed', width: 1 },
  { code: 0x81, name: 'long', type: 'long', category: 'fixed', width: 8 },
  { code: 0x55, name: 'smalllong', type: 'long', category: 'fixed', width: 1 },
  { code: 0x72, name: 'float', type: 'float', category: 'fixed', width: 4 },
  { code: 0x82, name: 'double', type: 'double', category: 'fixed', width: 8 },
  { code: 0x74, name: 'decimal32', type: 'decimal32', category: 'fixed', width: 4 },
  { code: 0x84, name: 'decimal64', type: 'decimal64', category: 'fixed', width: 8 },
  { code: 0x94, name: 'decimal128', type: 'decimal128', category: 'fixed', width: 16 },
  { code: 0x73, name: 'char', type: 'char', category: 'fixed', width: 4 },
  { code: 0x83, name: 'timestamp', type: 'timestamp', category: 'fixed', width: 8 },
  { code: 0x98, name: 'uuid', type: 'uuid', category: 'fixed', width: 16 },
  { code: 0xa0, name: 'vbin8', type: 'binary', category: 'variable', width: 1 },
  { code: 0xb0, name: 'vbin32', type: 'binary', category: 'variable', width: 4 },
  { code: 0xa1, name: 'str8-utf8', type: 'string', category: 'variable', width: 1 },
  { code: 0xb1, name: 'str32-utf8', type: 'string', category: 'variable', width: 4 },
  { code: 0xa3, name: 'sym8', type: 'symbol', category: 'variable', width: 1 },
  { code: 0xb3, name: 'sym32', type: 'symbol', category: 'variable', width: 4 },
  { code: 0x45, name: 'list0', type: 'list', category: 'fixed', width: 0 },
  { code: 0xc0, name: 'list8', type: 'list', category: 'compound', width: 1 },
  { code: 0xd0, name: 'list32', type: 'list', category: 'compound', width: 4 },
  { code: 0xc1, name: 'map8', type: 'map', category: 'compound', width: 1 },
  { code: 0xd1, name: 'map32', type: 'map', category: 'compound', width: 4 },
  { code: 0xe0, name: 'array8', type: 'array', category: 'array', width: 1 },
  { code: 0xf0, name: 'array32', type: 'array', category: 'array', width: 4 },
];

/** The constructor byte that starts a described type (spec 1.5). */
export const DESCRIBED = 0x00;

const byCode: (Encoding | undefined)[] = new Array(256);
for (const e of ENCODINGS) byCode[e.code] = e;
const byName = new Map(ENCODINGS.map((e) => [e.name, e]));

export function encodingOf(code: number): Encoding | undefined {
  return byCode[code];
}

export function encodingNamed(name: string): Encoding {
  const e = byName.get(name);
  if (!e) throw new Error(`no AMQP encoding named ${name}`);
  return e;
}

/**
 * A decoded AMQP value, tagged with its type and the encoding it came in (`code`),
 * so re-encoding writes the same bytes. 64-bit integers are bigints; the fixed
 * types without a JavaScript counterpart (decimals, uuid) keep their bytes.
 */
export type AmqpValue =
  | { type: 'null'; code?: number }
  | { type: 'boolean'; value: boolean; code?: number }
  | { type: 'ubyte' | 'ushort' | 'uint' | 'byte' | 'short' | 'int' | 'float' | 'double' | 'char'; value: number; code?: number }
  | { type: 'ulong' | 'long' | 'timestamp'; value: bigint; code?: number }
  | { type: 'decimal32' | 'decimal64' | 'decimal128' | 'uuid' | 'binary'; value: Buffer; code?: number }
  | { type: 'string' | 'symbol'; value: string; code?: number }
  | { type: 'list'; value: AmqpValue[]; code?: number }
  | { type: 'map'; value: [AmqpValue, AmqpValue][]; code?: number }
  | { type: 'array'; value: AmqpValue[]; element: ElementConstructor; code?: number }
  | { type: 'described'; descriptor: AmqpValue; value: AmqpValue };

/** An array's one constructor for all its elements: an encoding, perhaps described. */
export interface ElementConstructor {
  code: number;
  descriptor?: AmqpValue;
}

/** Short builders, for tables, tests and the encoder's callers. */
export const amqp = {
  null: (): AmqpValue => ({ type: 'null' }),
  boolean: (value: boolean): AmqpValue => ({ type: 'boolean', value }),
  ubyte: (value: number): AmqpValue => ({ type: 'ubyte', value }),
  ushort: (value: number): AmqpValue => ({ type: 'ushort', value }),
  uint: (value: number): AmqpValue => ({ type: 'uint', value }),
  ulong: (value: bigint | number): AmqpValue => ({ type: 'ulong', value: BigInt(value) }),
  byte: (value: number): AmqpValue => ({ type: 'byte', value }),
  short: (value: number): AmqpValue => ({ type: 'short', value }),
  int: (value: number): AmqpValue => ({ type: 'int', value }),
  long: (value: bigint | number): AmqpValue => ({ type: 'long', value: BigInt(value) }),
  float: (value: number): AmqpValue => ({ type: 'float', value }),
  double: (value: number): AmqpValue => ({ type: 'double', value }),
  char: (value: number): AmqpValue => ({ type: 'char', value }),
  timestamp: (value: bigint | number): AmqpValue => ({ type: 'timestamp', value: BigInt(value) }),
  uuid: (value: Buffer): AmqpValue => ({ type: 'uuid', value }),
  binary: (value: Buffer): AmqpValue => ({ type: 'binary', value }),
  string: (value: string): AmqpValue => ({ type: 'string', value }),
  symbol: (value: string): AmqpValue => ({ type: 'symbol', value }),
  list: (value: AmqpValue[]): AmqpValue => ({ type: 'list', value }),
  map: (value: [AmqpValue, AmqpValue][]): AmqpValue => ({ type: 'map', value }),
  array: (element: ElementConstructor | string, value: AmqpValue[]): AmqpValue => ({
    type: 'array',
    element: typeof element === 'string' ? { code: encodingNamed(element).code } : element,
    value,
  }),
  described: (descriptor: AmqpValue, value: AmqpValue): AmqpValue => ({ type: 'described', descriptor, value }),
};

/** A uuid's usual text form (RFC 4122): its 16 bytes as 8-4-4-4-12 hex digits. */
export function uuidText(bytes: Buffer): string {
  const h = bytes.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// The spec's tables (definitions.ts) and the generic decode of a described list
// against them: every field of every composite type, given a value of a wrong
// type, is refused with amqp:invalid-field naming the type and the field; every
// mandatory field, left out, is refused; allowed values are enforced; and what
// rhea (a foreign encoder) writes decodes as the same fields.
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { decodeAs } from '../../../../src/amqp/engine/composite.js';
import { decodeOne } from '../../../../src/amqp/engine/decoder.js';
import { COMPOSITES, type CompositeDef, type FieldDef, PRIMITIVE_PROVIDERS, composite } from '../../../../src/amqp/engine/definitions.js';
import { encode } from '../../../../src/amqp/engine/encoder.js';
import { AmqpError } from '../../../../src/amqp/engine/errors.js';
import { type AmqpValue, amqp } from '../../../../src/amqp/engine/types.js';

/** A minimal valid instance of a composite type: its mandatory fields set. */
function valid(def: CompositeDef): AmqpValue {
  const items: AmqpValue[] = def.fields.map((f) => (f.mandatory ? validFor(f) : amqp.null()));
  while (items.length > 0 && items[items.length - 1]!.type === 'null') items.pop();
  return amqp.described(amqp.ulong(def.code), amqp.list(items));
}

function validFor(f: FieldDef): AmqpValue {
  const t = f.type;
  if (f.choices) return typeof f.choices[0] === 'string' ? amqp.symbol(f.choices[0] as string) : valueOf(t, f.choices[0] as number);
  if (t === 'error') return amqp.described(amqp.ulong(0x1d), amqp.list([amqp.symbol('amqp:internal-error')]));
  if (t === 'fields') return amqp.map([[amqp.symbol('k'), amqp.uint(1)]]);
  if (t === '*') return amqp.uint(1);
  if (t.startsWith('requires:')) {
    const archetype = t.slice('requires:'.length) as keyof typeof PRIMITIVE_PROVIDERS;
    const primitive = PRIMITIVE_PROVIDERS[archetype];
    if (primitive === '*') return amqp.uint(1);
    if (primitive) return primitive[0] === 'binary' ? amqp.binary(Buffer.from('tx')) : amqp.string('q');
    return valid(COMPOSITES.find((c) => c.provides.includes(archetype as never))!);
  }
  return valueOf(t, 1);
}

function valueOf(t: string, n: number): AmqpValue {
  switch (t) {
    case 'string':
      return amqp.string('x');
    case 'symbol':
      return amqp.symbol('x');
    case 'binary':
      return amqp.binary(Buffer.from([n]));
    case 'boolean':
      return amqp.boolean(true);
    case 'ulong':
      return amqp.ulong(n);
    case 'map':
      return amqp.map([]);
    default:
      return { type: t, value: n } as AmqpValue;
  }
}

/** Values of the wrong type for a field, each a different kind of mistake. */
function wrongFor(f: FieldDef): AmqpValue[] {
  const t = f.type;
  if (t === '*' || PRIMITIVE_PROVIDERS[t.slice('requires:'.length) as never] === '*') return [];
  const out: AmqpValue[] = [];
  out.push(t === 'string' || t === 'requires:address' ? amqp.uint(7) : amqp.string('wrong'));
  if (t === 'uint') out.push(amqp.ulong(7), amqp.int(7), amqp.ushort(7));
  if (t === 'boolean') out.push(amqp.ubyte(1));
  if (t === 'symbol') out.push(amqp.string('x'));
  if (t === 'fields') out.push(amqp.map([[amqp.uint(1), amqp.uint(1)]]), amqp.list([]));
  if (t === 'error' || t.startsWith('requires:source') || t.startsWith('requires:delivery-state')) {
    out.push(amqp.described(amqp.ulong(0x10), amqp.list([amqp.string('c')]))); // an open where something else belongs
    out.push(amqp.described(amqp.ulong(0xdead), amqp.list([]))); // an unknown descriptor
  }
  if (f.multiple) out.push(amqp.array('uint', [amqp.uint(1)]));
  return out;
}

function refused(v: AmqpValue, def: CompositeDef, path: RegExp): void {
  let err: unknown;
  try {
    decodeAs(def.name, v);
  } catch (e) {
    err = e;
  }
  expect(err, `${def.name} with ${JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? String(x) : x)).slice(0, 200)}`).toBeInstanceOf(AmqpError);
  expect((err as AmqpError).condition).toMatch(/^amqp:(invalid-field|decode-error)$/);
  expect((err as AmqpError).description).toMatch(path);
}

const withField = (def: CompositeDef, index: number, value: AmqpValue): AmqpValue => {
  const base = valid(def) as AmqpValue & { type: 'described' };
  const items = [...(base.value as { value: AmqpValue[] }).value];
  while (items.length <= index) items.push(amqp.null());
  items[index] = value;
  return amqp.described(base.descriptor, amqp.list(items));
};

describe('tables - every composite type of the spec', () => {
  it('tables - the performatives, SASL frames, error, terminus, delivery states and transaction types are all declared', () => {
    const names = COMPOSITES.map((c) => c.name).sort();
    expect(names).toEqual(
      [
        'open', 'begin', 'attach', 'flow', 'transfer', 'disposition', 'detach', 'end', 'close',
        'sasl-mechanisms', 'sasl-init', 'sasl-challenge', 'sasl-response', 'sasl-outcome',
        'error', 'source', 'target', 'received', 'accepted', 'rejected', 'released', 'modified',
        'coordinator', 'declare', 'discharge', 'declared', 'transactional-state',
      ].sort(),
    );
    expect(new Set(COMPOSITES.map((c) => c.code)).size).toBe(COMPOSITES.length);
  });

  for (const def of COMPOSITES) {
    it(`tables - ${def.name}: a minimal instance decodes, by code and by symbol, and round-trips`, () => {
      const v = valid(def);
      const c = decodeAs(def.name, decodeOne(encode(v)));
      expect(c.def.name).toBe(def.name);
      for (const f of def.fields) if (!f.mandatory && f.default !== undefined) expect(c.fields[f.name]).toEqual(f.default);
      const bySymbol = amqp.described(amqp.symbol(def.symbol), (v as { value: AmqpValue }).value);
      expect(decodeAs(def.name, decodeOne(encode(bySymbol))).def.name).toBe(def.name);
      expect(encode(c.value).toString('hex')).toBe(encode(v).toString('hex'));
    });

    def.fields.forEach((f, i) => {
      const wrong = wrongFor(f);
      if (wrong.length > 0) {
        it(`tables - ${def.name}.${f.name}: a wrongly typed value is refused naming the field`, () => {
          for (const w of wrong) refused(withField(def, i, w), def, new RegExp(`${def.name}\\.${f.name}`));
        });
      }
      if (f.mandatory) {
        it(`tables - ${def.name}.${f.name}: left out, it is refused as mandatory`, () => {
          refused(withField(def, i, amqp.null()), def, new RegExp(`${def.name}\\.${f.name} is mandatory`));
        });
      }
      if (f.choices) {
        it(`tables - ${def.name}.${f.name}: a value outside ${f.choices.join('/')} is refused`, () => {
          const bad = typeof f.choices![0] === 'string' ? amqp.symbol('no-such-policy') : valueOf(f.type, 9);
          refused(withField(def, i, bad), def, new RegExp(`${def.name}\\.${f.name} .* is not one of`));
        });
      }
    });
  }

  it('tables - a delivery-tag longer than 32 bytes, more fields than the spec defines, and a body that is not a list are refused', () => {
    const transfer = composite('transfer');
    refused(withField(transfer, 2, amqp.binary(Buffer.alloc(33))), transfer, /transfer\.delivery-tag of 33 bytes/);
    const close = composite('close');
    refused(amqp.described(amqp.ulong(0x18), amqp.list([amqp.null(), amqp.null()])), close, /close has 2 fields; the spec defines 1/);
    refused(amqp.described(amqp.ulong(0x18), amqp.map([])), close, /described list/);
    refused(amqp.uint(1), close, /must be close/);
  });

  it('tables - nested composites are checked too, and errors name the whole path', () => {
    const attach = composite('attach');
    const source = amqp.described(amqp.ulong(0x28), amqp.list([amqp.string('q'), amqp.string('durable?')]));
    refused(withField(attach, 5, source), attach, /attach\.source\.durable must be of type uint/);
    const disposition = composite('disposition');
    const rejected = amqp.described(amqp.ulong(0x25), amqp.list([amqp.described(amqp.ulong(0x1d), amqp.list([amqp.string('not a symbol')]))]));
    refused(withField(disposition, 4, rejected), disposition, /disposition\.state\.error\.condition must be of type symbol/);
    // An outcome that is not a delivery state (a declare where a state belongs).
    refused(withField(disposition, 4, amqp.described(amqp.ulong(0x31), amqp.list([]))), disposition, /disposition\.state must be a delivery-state, not declare/);
  });
});

describe('tables - what a foreign encoder writes', () => {
  const require = createRequire(import.meta.url);
  interface Described {
    described(): unknown;
  }
  const frames = require('rhea/lib/frames.js') as Record<string, (f: Record<string, unknown>) => Described> & {
    write_frame(f: unknown): Buffer;
    amqp_frame(channel: number, performative: unknown, payload?: Buffer): unknown;
  };
  const rhea = require('rhea') as { message: { rejected(o: unknown): Described } };
  const terminus = require('rhea/lib/terminus.js') as { source(f: Record<string, unknown>): Described; target(f: Record<string, unknown>): Described };

  const samples: [string, Record<string, unknown>][] = [
    ['open', { container_id: 'c', hostname: 'h', max_frame_size: 65536, channel_max: 9, idle_time_out: 1000, properties: { product: 'x' }, offered_capabilities: 'ANONYMOUS-RELAY' }],
    ['begin', { next_outgoing_id: 0, incoming_window: 2048, outgoing_window: 2048, handle_max: 10 }],
    ['attach', { name: 'l', handle: 3, role: true, snd_settle_mode: 1, rcv_settle_mode: 0, source: terminus.source({ address: 'q', durable: 2, filter: {} }).described(), target: terminus.target({ address: 't' }).described(), initial_delivery_count: 0, max_message_size: 1024 }],
    ['flow', { next_incoming_id: 1, incoming_window: 2, next_outgoing_id: 3, outgoing_window: 4, handle: 5, delivery_count: 6, link_credit: 7, drain: true }],
    ['transfer', { handle: 0, delivery_id: 5, delivery_tag: Buffer.from('t'), message_format: 0, settled: true, more: false }],
    ['disposition', { role: true, first: 1, last: 9, settled: true, state: rhea.message.rejected({ error: { condition: 'amqp:not-found', description: 'x' } }).described() }],
    ['detach', { handle: 1, closed: true, error: { condition: 'amqp:not-found', description: 'gone' } }],
    ['end', {}],
    ['close', { error: { condition: 'amqp:connection:forced', description: 'bye' } }],
    ['sasl_init', { mechanism: 'PLAIN', initial_response: Buffer.from('\0u\0p'), hostname: 'h' }],
  ];
  for (const [maker, fields] of samples) {
    it(`tables - rhea's ${maker} decodes against the table`, () => {
      const frame = frames.write_frame(frames.amqp_frame(0, frames[maker]!(fields).described()));
      const c = decodeAs(maker.replace('_', '-'), decodeOne(frame.subarray(8)));
      for (const [k, v] of Object.entries(fields)) {
        const got = c.fields[k.replace(/_/g, '-')];
        if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'string') expect(got, k).toEqual(k === 'max_message_size' ? BigInt(v) : k === 'offered_capabilities' ? [v] : v);
      }
    });
  }
});

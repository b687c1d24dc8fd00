// Seeded random field values for the spec's composite types, for tests that hold
// two encoders or two decoders to each other: every field type, widths at their
// boundaries, absent and null fields, strings long enough to need list32.
import type { CompositeDef, FieldDef } from '../../../../src/amqp/engine/definitions.js';
import { Outcome } from '../../../../src/amqp/engine/delivery.js';
import { amqp } from '../../../../src/amqp/engine/types.js';
import { prng } from '../../../../src/util/prng.js';

/** The project's seeded generator, so a failure can be replayed. */
export const seeded = prng;

function valueFor(f: FieldDef, rnd: () => number): unknown {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(rnd() * 256)));
  if (f.choices) return typeof f.choices[0] === 'string' ? { type: 'symbol', value: pick(f.choices) } : pick(f.choices);
  if (f.multiple) return Array.from({ length: Math.floor(rnd() * 4) }, (_, i) => `cap-${i}-${'x'.repeat(Math.floor(rnd() * 3) * 100)}`);
  switch (f.type) {
    case 'uint':
      return pick([0, 1, 255, 256, 65535, 0xffffffff, Math.floor(rnd() * 0xffffffff)]);
    case 'ulong':
      return pick([0, 1, 255, 256, 2n ** 40n, 2n ** 64n - 1n, 0n, 7n]);
    case 'ushort':
      return { type: 'ushort', value: pick([0, 1, 65535]) };
    case 'ubyte':
      return { type: 'ubyte', value: pick([0, 1, 255]) };
    case 'boolean':
      return rnd() < 0.5;
    case 'binary':
      return bytes(pick([0, 1, 32, 255, 256, 300]));
    case 'string':
      return pick(['', 'q', 'é-ü', 'long-'.repeat(60)]);
    case 'symbol':
      return { type: 'symbol', value: pick(['', 'amqp:x', 's'.repeat(300)]) };
    case 'timestamp':
      return pick([0, 1_700_000_000_000]);
    case 'error':
      return { condition: 'amqp:internal-error', description: rnd() < 0.5 ? undefined : 'd'.repeat(Math.floor(rnd() * 400)) };
    case 'fields':
      return amqp.map([[amqp.symbol('k'), amqp.uint(Math.floor(rnd() * 1000))]]);
    case 'requires:delivery-state':
    case 'requires:outcome':
      return pick([Outcome.accepted(), Outcome.released(), Outcome.rejected({ condition: 'amqp:not-found' }), Outcome.modified({ deliveryFailed: true })]);
    case 'requires:address':
      return pick(['q1', 'queue/with/a/longer/name']);
    case 'requires:txn-id':
      return bytes(4);
    case '*':
      return amqp.uint(Math.floor(rnd() * 1000));
    default:
      return undefined; // termini and the rest: absent here (their encoding is the generic one either way)
  }
}

export function randomFields(def: CompositeDef, rnd: () => number): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const f of def.fields) {
    if (f.mandatory || rnd() < 0.5) {
      const v = valueFor(f, rnd);
      if (v !== undefined) fields[f.name] = v;
    } else if (rnd() < 0.2) {
      fields[f.name] = null;
    }
  }
  return fields;
}


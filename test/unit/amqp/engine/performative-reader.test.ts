// The fast read of a frame body (performative-reader.ts) against the generic
// decode (decodeComposite): for seeded random performatives of every type, and
// for the same bytes mutated (a byte changed, the list cut short, sizes and
// counts wrong), the fast path either gives up (the caller then decodes
// generically) or gives exactly the fields the generic decode gives, and never
// accepts what the generic decode refuses.
import { describe, expect, it } from 'vitest';
import { decodeComposite } from '../../../../src/amqp/engine/composite.js';
import { Decoder } from '../../../../src/amqp/engine/decoder.js';
import { COMPOSITES } from '../../../../src/amqp/engine/definitions.js';
import { encode } from '../../../../src/amqp/engine/encoder.js';
import { describedList } from '../../../../src/amqp/engine/performative.js';
import { readPerformative } from '../../../../src/amqp/engine/performative-reader.js';
import { randomFields, seeded } from './random-composites.js';

function generic(bytes: Buffer): { fields: Record<string, unknown>; end: number } | Error {
  try {
    const d = new Decoder(bytes, 0, bytes.length);
    const body = decodeComposite(d.value(), { archetype: 'frame' }, '');
    return { fields: body.fields, end: d.pos };
  } catch (err) {
    return err as Error;
  }
}

describe('engine performative reader', () => {
  it('reads what the generic decode reads, field for field, and gives up on the rest', () => {
    const rnd = seeded(7);
    const frames = COMPOSITES.filter((c) => c.provides.includes('frame'));
    let fast = 0;
    let mutated = 0;
    for (let i = 0; i < 3000; i++) {
      const def = frames[Math.floor(rnd() * frames.length)]!;
      let bytes: Buffer;
      try {
        bytes = encode(describedList(def.name, randomFields(def, rnd)));
      } catch {
        continue; // a random value the encoder refuses (a symbol list too long...): not a frame
      }
      const variants = [bytes];
      for (let m = 0; m < 4; m++) {
        const b = Buffer.from(bytes);
        const at = Math.floor(rnd() * b.length);
        if (m === 0) b[at] = Math.floor(rnd() * 256);
        if (m === 1) b[at] = [0x40, 0x43, 0x52, 0x70, 0x41, 0x42, 0xa0, 0xc0, 0xd0, 0x45][Math.floor(rnd() * 10)]!;
        variants.push(m === 2 ? b.subarray(0, at) : m === 3 ? Buffer.concat([b, Buffer.from([0x40])]) : b);
      }
      for (const v of variants) {
        const want = generic(v);
        const got = readPerformative(v, 0, v.length, 'frame');
        if (v !== bytes) mutated++;
        if (!got) continue;
        fast++;
        expect(want).not.toBeInstanceOf(Error);
        const w = want as { fields: Record<string, unknown>; end: number };
        expect(got.end).toBe(w.end);
        expect(got.body.fields).toEqual(w.fields);
      }
    }
    // The fast path must actually be taken for most valid frames.
    expect(fast).toBeGreaterThan(1500);
    expect(mutated).toBeGreaterThan(10000);
  });

  it('re-encodes a fast-read performative as the same fields', () => {
    const bytes = encode(describedList('transfer', { handle: 3, 'delivery-id': 70000, 'delivery-tag': Buffer.from('t1'), 'message-format': 0, settled: false, more: false }));
    const got = readPerformative(bytes, 0, bytes.length, 'frame')!;
    expect(got.body.fields).toMatchObject({ handle: 3, 'delivery-id': 70000, settled: false, more: false });
    const again = encode(got.body.value);
    const back = readPerformative(again, 0, again.length, 'frame')!;
    expect(back.body.fields).toEqual(got.body.fields);
  });
});

// The broker reads a message's head by the first header and properties it meets; a
// consumer's decoder (rhea here) lets a later one win. parseIncoming refuses a message
// whose sections could make the two disagree (message-codec.ts inSpecOrder), so for
// every message it takes, the header and properties a consumer decodes are the ones the
// broker routed, keyed and checked by. Seeded random section sequences, mostly out of
// order: each is refused as malformed, or taken and decoded by rhea to the values the
// broker read; one in the spec's order is always taken.
import rhea from 'rhea';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MalformedMessage } from '../../../src/amqp/encoded-value.js';
import { parseIncoming } from '../../../src/amqp/message-codec.js';
import { prng } from '../../../src/util/prng.js';
import { CODE, composite, v } from '../../helpers/amqp-frames.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x5ec7);
const CASES = 4000;

/** A section and, for a header or properties, the values it holds. */
interface Section {
  kind: 'header' | 'da' | 'ma' | 'properties' | 'app' | 'data' | 'value' | 'sequence' | 'footer' | 'vendor';
  bytes: Buffer;
  durable?: boolean;
  priority?: number;
  id?: string;
  subject?: string;
}

const SPEC_ORDER: Section['kind'][] = ['header', 'da', 'ma', 'properties', 'app', 'data', 'footer'];
const KINDS: Section['kind'][] = ['header', 'da', 'ma', 'properties', 'app', 'data', 'value', 'sequence', 'footer', 'vendor'];

function section(kind: Section['kind'], rnd: () => number, n: number): Section {
  switch (kind) {
    case 'header': {
      const durable = rnd() < 0.5;
      const priority = Math.floor(rnd() * 10);
      return { kind, bytes: composite(CODE.header, [v.bool(durable), v.ubyte(priority)]), durable, priority };
    }
    case 'da':
      return { kind, bytes: v.described(CODE.deliveryAnnotations, v.map([v.symbol('x-da'), v.int(n)])) };
    case 'ma':
      return { kind, bytes: v.described(CODE.messageAnnotations, v.map([v.symbol('x-opt-k'), v.int(n)])) };
    case 'properties': {
      const id = `id-${n}`;
      const subject = `subject-${n}`;
      return { kind, bytes: composite(CODE.properties, [v.string(id), undefined, undefined, v.string(subject)]), id, subject };
    }
    case 'app':
      return { kind, bytes: v.described(CODE.applicationProperties, v.map([v.string('k'), v.int(n)])) };
    case 'data':
      return { kind, bytes: v.described(CODE.data, v.binary(Buffer.from(`body-${n}`))) };
    case 'value':
      return { kind, bytes: v.described(CODE.amqpValue, v.string(`value-${n}`)) };
    case 'sequence':
      return { kind, bytes: v.described(CODE.amqpSequence, v.list([v.int(n)])) };
    case 'footer':
      return { kind, bytes: v.described(CODE.footer, v.map([v.symbol('x-f'), v.int(n)])) };
    case 'vendor':
      return { kind, bytes: v.described(v.symbol('com.example:extra'), v.int(n)) };
  }
}

/** Half in the spec's order (a random subset, a body always), half any sequence of 1 to 6. */
function sections(rnd: () => number): { list: Section[]; ordered: boolean } {
  if (rnd() < 0.5) {
    const kinds = SPEC_ORDER.filter((k) => k === 'data' || rnd() < 0.5);
    return { list: kinds.map((k, i) => section(k, rnd, i)), ordered: true };
  }
  const count = 1 + Math.floor(rnd() * 6);
  return { list: Array.from({ length: count }, (_, i) => section(KINDS[Math.floor(rnd() * KINDS.length)]!, rnd, i)), ordered: false };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('message sections - what the broker takes, a consumer reads as the broker did', () => {
  it(`${CASES} seeded section sequences (seed ${SEED}): refused, or decoded by rhea to the header and properties the broker read`, () => {
    // rhea warns of a section it does not know (the vendor's) and reads on.
    vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const rnd = prng(SEED);
    let taken = 0;
    let refused = 0;
    for (let i = 0; i < CASES; i++) {
      const { list, ordered } = sections(rnd);
      const bytes = Buffer.concat(list.map((s) => s.bytes));
      const where = `case ${i} (seed ${SEED}): ${list.map((s) => s.kind).join(', ')}`;
      let parsed: ReturnType<typeof parseIncoming>;
      try {
        parsed = parseIncoming(bytes);
      } catch (err) {
        expect(err, where).toBeInstanceOf(MalformedMessage);
        expect(ordered, `${where}: in the spec's order, yet refused: ${(err as Error).message}`).toBe(false);
        refused++;
        continue;
      }
      taken++;
      // The broker's reading: the first header and properties.
      const header = list.find((s) => s.kind === 'header');
      const properties = list.find((s) => s.kind === 'properties');
      expect(parsed.durable, where).toBe(header?.durable ?? false);
      expect(parsed.priority, where).toBe(header?.priority ?? 4);
      expect(parsed.subject, where).toBe(properties?.subject);
      // A consumer's: rhea lets a later section win; it must come to the same.
      const m = rhea.message.decode(bytes) as { durable?: boolean; priority?: number; message_id?: string; subject?: string };
      expect(m.durable ?? false, where).toBe(parsed.durable);
      expect(m.priority ?? 4, where).toBe(parsed.priority);
      expect(m.subject, where).toBe(parsed.subject);
      expect(m.message_id, where).toBe(properties?.id);
    }
    // Both kinds of outcome were met, many times.
    expect(taken).toBeGreaterThan(CASES / 3);
    expect(refused).toBeGreaterThan(CASES / 5);
  });
});

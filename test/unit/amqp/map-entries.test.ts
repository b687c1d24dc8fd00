// The one bounded walk over an encoded AMQP map (map-entries.ts): hand-made hostile maps
// (not a map, a size or count beyond the bytes, an odd count, a key or value past the
// map's end, bytes after the last entry, huge nested sizes) are refused with a reason and
// never a throw; a seeded fuzz holds it to the engine's decoder (every map the decoder
// reads, the walker walks to the same entries) and to its bound. Then the four readers
// that walk a sender's maps with it refuse the same hostile maps alike: the dedup key
// (invalid), the selector fields (a throw: not selected), the delivery time (none), and
// the merge of added annotations (the section left as it was).
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { readDeliveryTime } from '../../../src/amqp/delivery-time-reader.js';
import { Decoder } from '../../../src/amqp/engine/decoder.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { amqp, type AmqpValue } from '../../../src/amqp/engine/types.js';
import { MapEntries } from '../../../src/amqp/map-entries.js';
import { outgoingBytes } from '../../../src/amqp/message-codec.js';
import { selectorFieldReader } from '../../../src/amqp/selector-fields.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { prng } from '../../../src/util/prng.js';

const NOW = 1_700_000_000_000;

/** A map8 of these items (encoded keys and values), its count and size as given (default: what they are). */
function map8(items: Buffer[], count = items.length, extra = Buffer.alloc(0)): Buffer {
  const body = Buffer.concat([...items, extra]);
  return Buffer.concat([Buffer.from([0xc1, body.length + 1, count]), body]);
}

function map32(items: Buffer[], count = items.length): Buffer {
  const body = Buffer.concat(items);
  const head = Buffer.alloc(9);
  head[0] = 0xd1;
  head.writeUInt32BE(body.length + 4, 1);
  head.writeUInt32BE(count, 5);
  return Buffer.concat([head, body]);
}

const str = (s: string) => encode(amqp.string(s));
const sym = (s: string) => encode(amqp.symbol(s));
const long = (v: number) => encode(amqp.long(BigInt(v)));

type Walk = { ok: boolean; entries: Array<[number, number, number]>; problem: string | undefined };

/** Every entry the walker steps to in the map at `at`, and how the walk ended. */
function walk(bytes: Buffer, at = 0, walker = new MapEntries()): Walk {
  const entries: Array<[number, number, number]> = [];
  if (!walker.start(bytes, at, 'the map')) return { ok: false, entries, problem: walker.problem };
  // More steps than the map has bytes would be a walk the map's size does not bound.
  while (walker.next()) {
    entries.push([walker.keyAt, walker.valueAt, walker.valueEnd]);
    if (entries.length > bytes.length) throw new Error('unbounded walk');
  }
  return { ok: walker.problem === undefined, entries, problem: walker.problem };
}

describe('MapEntries - the bounded walk over a map', () => {
  it('steps to each entry of a map8 and of a map32 where it lies, and to none of an empty map', () => {
    const items = [sym('a'), long(1), str('bee'), str('x')];
    const small = walk(map8(items));
    expect(small).toEqual({ ok: true, problem: undefined, entries: [[3, 6, 8], [8, 13, 16]] });
    const wide = walk(Buffer.concat([Buffer.from([0x40]), map32(items)]), 1);
    expect(wide).toEqual({ ok: true, problem: undefined, entries: [[10, 13, 15], [15, 20, 23]] });
    expect(walk(map8([]))).toEqual({ ok: true, problem: undefined, entries: [] });
  });

  it('walks null as an empty map (a section a sender wrote as null)', () => {
    expect(walk(Buffer.from([0x40]))).toEqual({ ok: true, problem: undefined, entries: [] });
    expect(walk(Buffer.from([0xc1, 0x40]), 1)).toEqual({ ok: true, problem: undefined, entries: [] });
  });

  it('refuses what is not a map, or a head that does not fit: a list, a described value, no byte at all', () => {
    for (const bytes of [encode(amqp.list([amqp.uint(1)])), Buffer.from([0x45]), Buffer.from([0x00, 0x53, 0x74, 0xc1, 0x01, 0x00]), Buffer.alloc(0)]) {
      const w = walk(bytes);
      expect(w.ok, bytes.toString('hex')).toBe(false);
      expect(w.problem).toMatch(/^the map is not a map/);
    }
    // A map8 whose size leaves no room for its count, a map32 with a 2-byte size, a size past the bytes.
    expect(walk(Buffer.from([0xc1, 0x00, 0x00])).problem).toBe('the map is too short for its count');
    expect(walk(Buffer.from([0xd1, 0, 0, 0, 2, 0, 0])).problem).toBe('the map is too short for its count');
    expect(walk(Buffer.from([0xc1, 0x05, 0x02, 0x40])).problem).toMatch(/^the map does not read: .*past the end/);
    expect(walk(Buffer.from([0xd1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2])).problem).toMatch(/^the map does not read/);
  });

  it('refuses an odd count, and a count beyond its bytes before a step, however large', () => {
    expect(walk(map8([sym('a'), long(1), sym('b')]))).toMatchObject({ ok: false, entries: [], problem: 'the map has an odd number of elements' });
    expect(walk(map8([sym('a'), long(1)], 200))).toMatchObject({ ok: false, entries: [], problem: 'the map holds fewer entries than its count says' });
    expect(walk(map32([sym('a'), long(1)], 0xffff_fffe))).toMatchObject({ ok: false, entries: [], problem: 'the map holds fewer entries than its count says' });
    // A count the bytes could hold, were every element one byte: the walk finds them short.
    const short = walk(map8([sym('a'), long(1)], 4));
    expect(short).toMatchObject({ ok: false, problem: 'the map holds fewer entries than its count says' });
    expect(short.entries).toHaveLength(1);
  });

  it('refuses a key or value that runs past the map into what follows it, and a key without a value', () => {
    // The map says 6 bytes; its value, a string of 3, ends 2 bytes into the next section.
    const pastEnd = Buffer.concat([Buffer.from([0xc1, 0x06, 0x02]), sym('a'), Buffer.from([0xa1, 0x03, 0x78, 0x79, 0x7a])]);
    expect(walk(pastEnd)).toMatchObject({ ok: false, entries: [], problem: 'the map holds fewer entries than its count says' });
    const keyPastEnd = Buffer.concat([Buffer.from([0xc1, 0x03, 0x02, 0xa3, 0x05, 0x61]), Buffer.from('bcdefgh')]);
    expect(walk(keyPastEnd).problem).toBe('the map holds fewer entries than its count says');
    const noValue = Buffer.concat([Buffer.from([0xc1, 0x04, 0x02]), sym('a'), long(1)]);
    expect(walk(noValue).problem).toBe('the map holds fewer entries than its count says');
    // A value of no known type, and one whose size says 4 GiB: refused, never read.
    expect(walk(map8([sym('a'), Buffer.from([0x20])])).problem).toMatch(/^the map does not read: .*unknown type code 0x20/);
    expect(walk(map8([sym('a'), Buffer.from([0xb0, 0xff, 0xff, 0xff, 0xff, 0x00])])).problem).toMatch(/^the map does not read/);
    // A value nested in 10,000 described values: counted, not recursed into, and inside the map.
    const deep = Buffer.concat([Buffer.alloc(10_000, 0x00), Buffer.alloc(10_001, 0x40)]);
    expect(walk(map32([sym('a'), deep]))).toMatchObject({ ok: true, entries: [[9, 12, 12 + deep.length]] });
  });

  it('refuses bytes after the last entry its count says, once the walk reaches them', () => {
    const w = walk(map8([sym('a'), long(1)], 2, Buffer.from([0x40])));
    expect(w).toMatchObject({ ok: false, problem: 'the map holds more than its count says' });
    expect(w.entries).toHaveLength(1);
  });

  it('finishes a walk a reader ended early, checking the rest; is one walker for many maps, each walk afresh', () => {
    const walker = new MapEntries();
    expect(walk(Buffer.from([0x45]), 0, walker).ok).toBe(false);
    expect(walk(map8([sym('a'), long(1)]), 0, walker)).toMatchObject({ ok: true, problem: undefined });
    expect(walker.start(map8([sym('a'), long(1), sym('b'), long(2)]), 0, 'm')).toBe(true);
    expect(walker.next()).toBe(true);
    expect(walker.finish()).toBe(true);
    expect(walker.next()).toBe(false);
    // The entry a reader wanted came first; the rest of the map is short of its count.
    expect(walker.start(map8([sym('a'), long(1)], 4), 0, 'm') && walker.next()).toBe(true);
    expect(walker.finish()).toBe(false);
    expect(walker.problem).toBe('m holds fewer entries than its count says');
    expect(walk(map8([sym('c'), long(3)]), 0, walker).entries).toEqual([[3, 6, 8]]);
  });

  it('walks every map the engine decoder reads, to the same entries, over 20,000 seeded mutated maps; never throws, bounded', () => {
    const random = prng(Number(process.env.TANDEM_FUZZ_SEED ?? 0x3a9e));
    const pick = (n: number) => Math.floor(random() * n);
    const VALUES: AmqpValue[] = [amqp.symbol('x-opt-delivery-time'), amqp.string('k'), amqp.long(5n), amqp.uint(7), amqp.null(), amqp.binary(Buffer.from('bin')), amqp.list([amqp.uint(1), amqp.string('s')]), amqp.map([[amqp.string('in'), amqp.int(1)]])];
    let agreed = 0;
    for (let i = 0; i < 20_000; i++) {
      const pairs: Array<[AmqpValue, AmqpValue]> = [];
      for (let n = pick(5); n > 0; n--) pairs.push([VALUES[pick(VALUES.length)]!, VALUES[pick(VALUES.length)]!]);
      const map = amqp.map(pairs);
      const bytes = Buffer.from(encode(random() < 0.5 ? map : ({ ...map, code: 0xd1 } as AmqpValue)));
      // Mostly a byte set to a size, a count or a type code, or the map cut short; some left whole.
      const at = pick(bytes.length);
      const how = random();
      let mutated = bytes;
      if (how < 0.15) mutated = bytes.subarray(0, at);
      else if (how < 0.8) bytes[at] = [0, 1, 2, 3, 0x7f, 0xff, 0x40, 0xa1, 0xc1, 0xd1][pick(10)]!;
      const w = walk(mutated);
      let decoded: AmqpValue | undefined;
      try {
        decoded = new Decoder(mutated).value();
      } catch {
        decoded = undefined;
      }
      if (decoded?.type !== 'map') continue;
      agreed++;
      expect(w.ok, mutated.toString('hex')).toBe(true);
      expect(w.entries.map(([k, v, end]) => [new Decoder(mutated, k, v).value(), new Decoder(mutated, v, end).value()])).toEqual(decoded.value);
    }
    console.log(`map walker fuzz: 20000 maps, ${agreed} read by the decoder and walked alike`);
    expect(agreed).toBeGreaterThan(5000);
  });
});

// ---- the readers that walk a sender's maps -------------------------------------

const section = (code: number, value: Buffer) => Buffer.concat([Buffer.from([0x00, 0x53, code]), value]);
const BODY = section(0x77, str('body'));

/** A message whose message-annotations and application-properties are both `map` (each with the key its reader looks for). */
function message(annotations: Buffer, properties: Buffer): MessageRecord {
  const header = section(0x70, encode(amqp.list([amqp.boolean(true)])));
  const bytes = Buffer.concat([header, section(0x72, annotations), section(0x74, properties), BODY]);
  return { id: 1, bytes, headerLength: header.length, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined };
}

/** What each reader makes of the message: the dedup key's status, the selector's values (or 'throws'), the delivery time's status, and whether added annotations were merged. */
function readings(msg: MessageRecord) {
  let selector: unknown;
  try {
    selector = selectorFieldReader(['k'])(msg);
  } catch {
    selector = 'throws';
  }
  return {
    dedup: readDedupKey(msg.bytes, 'k').status,
    selector,
    delivery: readDeliveryTime(msg.bytes, NOW).status,
    // A section the merge cannot read as a map goes out as it came, without the added keys.
    merged: !outgoingBytes(msg, 0, NOW, map8([sym('x-added'), long(1)])).equals(msg.bytes),
  };
}

describe('the readers of a sender\'s maps refuse the same hostile maps alike', () => {
  const time = [sym('x-opt-delivery-time'), long(NOW + 5000)];
  const key = [str('k'), str('v')];

  it('null sections: no key, no values (a selector sees NULL), no time, and the merge writes the added keys', () => {
    expect(readings(message(Buffer.from([0x40]), Buffer.from([0x40])))).toEqual({ dedup: 'missing', selector: [null], delivery: 'none', merged: true });
  });

  it('well-formed maps: each reader reads its key', () => {
    expect(readings(message(map8(time), map8(key)))).toEqual({ dedup: 'key', selector: ['v'], delivery: 'at', merged: true });
    expect(readings(message(map32(time), map32(key)))).toEqual({ dedup: 'key', selector: ['v'], delivery: 'at', merged: true });
  });

  it('a count that says more than the map holds, its key the entry it does hold: refused by every reader, not read by some', () => {
    // Before the one walker, the dedup key, the selector and the delivery time each read the
    // entry they found before running out, and only the merge refused the map.
    expect(readings(message(map8(time, 4), map8(key, 4)))).toEqual({ dedup: 'invalid', selector: 'throws', delivery: 'none', merged: false });
  });

  it('an odd count, a value past the map\'s end, a list for a map: refused by every reader', () => {
    expect(readings(message(map8([...time, sym('lone')]), map8([...key, str('lone')])))).toEqual({ dedup: 'invalid', selector: 'throws', delivery: 'none', merged: false });
    // The last value runs past the map into the next section (the map's size short by a
    // byte): the sections after it no longer read, so each map is cut in a message of its own.
    const cut = (m: Buffer) => Buffer.concat([Buffer.from([m[0]!, m[1]! - 1]), m.subarray(2)]);
    expect(readings(message(cut(map8(time)), map8(key)))).toMatchObject({ delivery: 'none', merged: false });
    expect(readings(message(map8(time), cut(map8(key))))).toMatchObject({ dedup: 'invalid', selector: 'throws' });
    expect(readings(message(encode(amqp.list([])), encode(amqp.list([]))))).toEqual({ dedup: 'invalid', selector: 'throws', delivery: 'none', merged: false });
  });
});

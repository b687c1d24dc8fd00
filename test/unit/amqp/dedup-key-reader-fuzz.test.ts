// A seeded fuzz of the dedup key reader (src/amqp/dedup-key-reader.ts), which reads
// a publisher's bytes on every message to a queue with a window. Messages with
// message-ids and application properties of every type, encoded compactly, in
// the widest forms (list32 sections, ulong descriptors, as rhea writes them) and
// with sections described by their symbols, are
// mutated: bytes flipped or set to type codes, sizes and counts changed, cut short,
// spliced. For every one the reader must answer (never throw), and where the
// broker takes the message (its head reads) and the codec's own decoder reads the
// whole of it, the reader's answer must be the one that decoded message gives: the
// same key, or no key, or an uncomparable one.
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { Decoder } from '../../../src/amqp/engine/decoder.js';
import { MESSAGE_SECTIONS } from '../../../src/amqp/engine/message-sections.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { type AmqpValue, amqp } from '../../../src/amqp/engine/types.js';
import { parseIncoming } from '../../../src/amqp/message-codec.js';
import { dedupDigest, dedupDigestHex, DedupKeyType, type DedupLookup } from '../../../src/broker/dedup-key.js';
import { prng } from '../../../src/util/prng.js';
import { integerKey } from '../broker/helpers.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0xdeddec);
const CASES = 30_000;
const PROPERTY = 'k';
const PROPERTIES = 0x73;
const APPLICATION_PROPERTIES = 0x74;

/** How a section's descriptor is written: a small ulong, a full 8-byte ulong, or the section's symbol. */
type Descriptor = 'small' | 'wide' | 'symbol';
const DESCRIPTORS: Descriptor[] = ['small', 'wide', 'symbol'];
const symbolOf = (code: number) => MESSAGE_SECTIONS.find((x) => x.code === code)!.symbol;
const codeOfSymbol = (symbol: string) => MESSAGE_SECTIONS.find((x) => x.symbol === symbol)?.code ?? Number.POSITIVE_INFINITY;
const section = (code: number, value: AmqpValue, how: Descriptor): AmqpValue =>
  amqp.described(how === 'symbol' ? amqp.symbol(symbolOf(code)) : how === 'wide' ? { type: 'ulong', value: BigInt(code), code: 0x80 } : amqp.ulong(code), value);
/** A list or map in its widest form (list32, map32), as rhea writes them. */
const widest = (v: AmqpValue): AmqpValue => ({ ...v, code: v.type === 'list' ? 0xd0 : 0xd1 }) as AmqpValue;

const KEYS: AmqpValue[] = [
  amqp.ulong(0),
  amqp.ulong(7),
  amqp.ulong(18446744073709551615n),
  { type: 'ulong', value: 9n, code: 0x80 },
  amqp.uint(300),
  amqp.ubyte(9),
  amqp.ushort(9),
  amqp.long(-2),
  { type: 'int', value: -70000 },
  { type: 'short', value: -3 },
  { type: 'byte', value: 5 },
  amqp.uuid(Buffer.alloc(16, 0xab)),
  amqp.binary(Buffer.from('bin')),
  amqp.string('m-1'),
  amqp.string('ID:3f1e6a9c-8a1b-4d7e-9c52-0123456789ab:1:1:1-1'),
  amqp.symbol('sym-id'),
  amqp.timestamp(5),
  amqp.double(1.5),
  amqp.boolean(true),
  amqp.null(),
  amqp.list([amqp.uint(1)]),
];

/** A message whose properties carry `id` and whose application properties carry `value` under PROPERTY. */
function message(id: AmqpValue, value: AmqpValue, how: Descriptor): Buffer {
  const wide = how !== 'small';
  const list = (v: AmqpValue[]) => (wide ? widest(amqp.list(v)) : amqp.list(v));
  const map = (v: [AmqpValue, AmqpValue][]) => (wide ? widest(amqp.map(v)) : amqp.map(v));
  return Buffer.concat([
    encode(section(0x70, list([amqp.boolean(true)]), how)),
    encode(section(PROPERTIES, list([id, amqp.null(), amqp.string('q'), amqp.string('s')]), how)),
    encode(section(APPLICATION_PROPERTIES, map([[amqp.string('a'), amqp.uint(1)], [amqp.symbol(PROPERTY), value]]), how)),
    encode(section(0x77, amqp.string('body'), how)),
  ]);
}

type Answer = 'missing' | 'invalid' | string;

/** Every integer type: one key type, whatever the width (dedup-key.ts). */
const INTEGER_TYPES = new Set<AmqpValue['type']>(['ubyte', 'ushort', 'uint', 'ulong', 'byte', 'short', 'int', 'long']);

/** What a decoded value as a key should give: its digest as hex, or why there is none. */
function answerFor(v: AmqpValue): Answer {
  if (INTEGER_TYPES.has(v.type)) return dedupDigestHex(integerKey(BigInt((v as { value: number | bigint }).value)));
  switch (v.type) {
    case 'null':
      return 'missing';
    case 'uuid':
      return dedupDigestHex(dedupDigest(DedupKeyType.uuid, v.value));
    case 'binary':
      return dedupDigestHex(dedupDigest(DedupKeyType.binary, v.value));
    case 'string':
      return dedupDigestHex(dedupDigest(DedupKeyType.string, Buffer.from(v.value, 'utf8')));
    case 'symbol':
      return dedupDigestHex(dedupDigest(DedupKeyType.symbol, Buffer.from(v.value, 'latin1')));
    default:
      return 'invalid';
  }
}

/**
 * The answer the decoded message gives, by the reader's documented rule: the first
 * section of the wanted code, looked for until a section of a later code; the
 * properties a list whose first element is the message-id, the application
 * properties a map whose first entry named PROPERTY (a string or symbol) holds
 * the key. Undefined: the decoder does not read the whole message.
 */
function decodedAnswer(bytes: Buffer, property: string | undefined): Answer | undefined {
  const wanted = property === undefined ? PROPERTIES : APPLICATION_PROPERTIES;
  const sections: Array<{ code: number; value: AmqpValue }> = [];
  try {
    const d = new Decoder(bytes);
    while (d.remaining > 0) {
      const v = d.value();
      if (v.type !== 'described') return undefined;
      // A symbol names its section's code (spec 3.2); one naming none comes after them all.
      if (v.descriptor.type === 'ulong') sections.push({ code: Number(v.descriptor.value), value: v.value });
      else if (v.descriptor.type === 'symbol') sections.push({ code: codeOfSymbol(v.descriptor.value), value: v.value });
      else return undefined;
    }
  } catch {
    return undefined;
  }
  for (const { code, value } of sections) {
    if (code > wanted) break;
    if (code !== wanted) continue;
    if (property === undefined) {
      if (value.type !== 'list') return 'invalid';
      return value.value.length === 0 ? 'missing' : answerFor(value.value[0]!);
    }
    if (value.type !== 'map') return 'invalid';
    const entry = value.value.find(([k]) => (k.type === 'string' || k.type === 'symbol') && k.value === property);
    return entry ? answerFor(entry[1]) : 'missing';
  }
  return 'missing';
}

function shown(l: DedupLookup): Answer {
  return l.status === 'key' ? dedupDigestHex(l.digest) : l.status;
}

/** Mutate `b` by one of the ways a hostile or broken publisher would. */
function mutate(b: Buffer, random: () => number): Buffer {
  const pick = (n: number) => Math.floor(random() * n);
  const CODES = [0x00, 0x40, 0x43, 0x44, 0x45, 0x53, 0x70, 0x73, 0x74, 0x80, 0x98, 0xa0, 0xa1, 0xa3, 0xb1, 0xc0, 0xc1, 0xd0, 0xd1, 0xe0, 0xff];
  const out = Buffer.from(b);
  switch (pick(6)) {
    case 0:
      out[pick(out.length)] = pick(256);
      return out;
    case 1:
      out[pick(out.length)] = CODES[pick(CODES.length)]!;
      return out;
    case 2: {
      // A size or count: small, zero, or huge.
      const at = pick(out.length);
      out[at] = [0, 1, 2, 0x7f, 0xff][pick(5)]!;
      return out;
    }
    case 3:
      return out.subarray(0, pick(out.length));
    case 4: {
      const at = pick(out.length);
      const from = pick(out.length);
      return Buffer.concat([out.subarray(0, at), out.subarray(from, from + 1 + pick(12)), out.subarray(at)]);
    }
    default: {
      const at = pick(out.length);
      return Buffer.concat([out.subarray(0, at), out.subarray(at + 1 + pick(8))]);
    }
  }
}

describe('dedup key reader - seeded fuzz', () => {
  it(`reads ${CASES} mutated messages without throwing, and as the codec's decoder reads each one it can`, () => {
    const random = prng(SEED);
    const pick = (n: number) => Math.floor(random() * n);
    let compared = 0;
    let keys = 0;
    for (let i = 0; i < CASES; i++) {
      let bytes = message(KEYS[pick(KEYS.length)]!, KEYS[pick(KEYS.length)]!, DESCRIPTORS[pick(DESCRIPTORS.length)]!);
      // Mostly one change (a message that is still nearly whole reaches the deep paths), sometimes more.
      for (let m = random() < 0.7 ? 1 : 2 + pick(3); m > 0 && bytes.length > 0; m--) bytes = mutate(bytes, random);
      // The broker reads a message's head first, and refuses what that cannot read; the
      // reader then has the head's hint of where the properties are, or looks itself.
      let accepted = true;
      let propertiesAt: number | undefined;
      try {
        propertiesAt = parseIncoming(bytes).propertiesAt;
      } catch {
        accepted = false;
      }
      for (const property of [undefined, PROPERTY]) {
        const plain = shown(readDedupKey(bytes, property));
        const hinted = shown(readDedupKey(bytes, property, propertiesAt));
        const expected = accepted ? decodedAnswer(bytes, property) : undefined;
        if (expected === undefined) continue;
        compared++;
        if (expected !== 'missing' && expected !== 'invalid') keys++;
        const where = `case ${i}, ${property ?? 'message-id'}: 0x${bytes.toString('hex')}`;
        expect(plain, where).toBe(expected);
        expect(hinted, where).toBe(expected);
      }
    }
    console.log(`dedup key reader fuzz: ${CASES} messages, ${compared} readings compared with the decoder's, ${keys} of them keys`);
    // The mutations leave enough messages whole for the comparison to mean something.
    expect(compared).toBeGreaterThan(CASES / 10);
    expect(keys).toBeGreaterThan(CASES / 30);
  });
});

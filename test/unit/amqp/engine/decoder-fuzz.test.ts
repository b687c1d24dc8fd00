// A seeded fuzz of the decoder and of the frame reader: random bytes, and valid
// encodings with bytes flipped, sizes and counts changed, cut short or spliced.
// Whatever comes in, the only thing thrown is the codec's AmqpError, and every
// decode ends (its work is bounded by the bytes it is given).
import { describe, expect, it } from 'vitest';
import { decodeComposite } from '../../../../src/amqp/engine/composite.js';
import { Decoder } from '../../../../src/amqp/engine/decoder.js';
import { encode } from '../../../../src/amqp/engine/encoder.js';
import { AmqpError } from '../../../../src/amqp/engine/errors.js';
import { FrameType, readFrame, readFrameHeader } from '../../../../src/amqp/engine/frames.js';
import { type AmqpValue, amqp } from '../../../../src/amqp/engine/types.js';
import { prng } from '../../../../src/util/prng.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x20c0dec);

/** Valid encodings to mutate: performatives and values of every kind. */
const SEEDS: Buffer[] = [
  amqp.described(amqp.ulong(0x41), amqp.list([amqp.symbol('PLAIN'), amqp.binary(Buffer.from('\0u\0p')), amqp.string('h')])),
  amqp.described(amqp.ulong(0x10), amqp.list([amqp.string('c'), amqp.null(), amqp.uint(65536), amqp.ushort(9), amqp.uint(1000), amqp.null(), amqp.null(), amqp.array('sym8', [amqp.symbol('ANONYMOUS-RELAY')]), amqp.null(), amqp.map([[amqp.symbol('p'), amqp.string('v')]])])),
  amqp.described(amqp.ulong(0x12), amqp.list([amqp.string('l'), amqp.uint(0), amqp.boolean(false), amqp.ubyte(1), amqp.ubyte(0), amqp.described(amqp.ulong(0x28), amqp.list([amqp.string('q')])), amqp.described(amqp.ulong(0x29), amqp.list([amqp.string('q')]))])),
  amqp.described(amqp.ulong(0x14), amqp.list([amqp.uint(0), amqp.uint(7), amqp.binary(Buffer.from('tag')), amqp.uint(0), amqp.boolean(true)])),
  amqp.described(amqp.ulong(0x15), amqp.list([amqp.boolean(true), amqp.uint(0), amqp.uint(100), amqp.boolean(true), amqp.described(amqp.ulong(0x24), amqp.list([]))])),
  amqp.list([amqp.double(1.5), amqp.long(-5), amqp.timestamp(1), amqp.char(0x263a), amqp.uuid(Buffer.alloc(16, 7)), { type: 'decimal64', value: Buffer.alloc(8) }]),
  amqp.array('list8', [amqp.list([amqp.uint(1)]), amqp.list([])]),
  amqp.map([[amqp.string('k'), amqp.array('uint', [amqp.uint(1), amqp.uint(300)])]]),
].map((v: AmqpValue) => encode(v));

function expectOnlyAmqpErrors(bytes: Buffer): void {
  try {
    const d = new Decoder(bytes);
    while (d.remaining > 0) {
      const v = d.value();
      if (v.type === 'described') {
        try {
          decodeComposite(v, { archetype: 'frame' }, '');
        } catch (e) {
          if (!(e instanceof AmqpError)) throw e;
        }
      }
    }
  } catch (e) {
    if (!(e instanceof AmqpError)) throw new Error(`0x${bytes.toString('hex').slice(0, 200)} threw ${String(e)}`);
  }
}

describe('decoder - seeded fuzz', () => {
  it('decoder - 20,000 random byte strings throw nothing but AmqpError', () => {
    const random = prng(SEED);
    for (let i = 0; i < 20_000; i++) {
      const n = Math.floor(random() * 64);
      const b = Buffer.alloc(n);
      for (let k = 0; k < n; k++) b[k] = Math.floor(random() * 256);
      expectOnlyAmqpErrors(b);
    }
  });

  it('decoder - 20,000 mutated valid encodings throw nothing but AmqpError', () => {
    const random = prng(SEED + 1);
    const pick = (n: number) => Math.floor(random() * n);
    for (let i = 0; i < 20_000; i++) {
      const b = Buffer.from(SEEDS[pick(SEEDS.length)]!);
      let out = b;
      switch (pick(5)) {
        case 0: // flip bits
          for (let k = 0; k < 1 + pick(4); k++) b[pick(b.length)] ^= 1 << pick(8);
          break;
        case 1: // a size or count set to a boundary value
          for (let k = 0; k < 1 + pick(2); k++) {
            const at = pick(Math.max(1, b.length - 4));
            const value = [0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0xffffffff][pick(8)]!;
            if (pick(2) === 0) b[at] = value & 0xff;
            else b.writeUInt32BE(value >>> 0, at);
          }
          break;
        case 2: // cut short
          out = b.subarray(0, pick(b.length));
          break;
        case 3: // splice two encodings together at random points
          out = Buffer.concat([b.subarray(0, pick(b.length)), SEEDS[pick(SEEDS.length)]!.subarray(pick(8))]);
          break;
        case 4: // a random constructor byte anywhere
          b[pick(b.length)] = [0x00, 0x40, 0x45, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0, 0x98, 0x94][pick(11)]!;
          break;
      }
      expectOnlyAmqpErrors(out);
    }
  });

  it('frames - 20,000 mutated frames: the frame reader throws nothing but AmqpError', () => {
    const random = prng(SEED + 2);
    const pick = (n: number) => Math.floor(random() * n);
    for (let i = 0; i < 20_000; i++) {
      const body = SEEDS[pick(5)]!;
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 2, pick(3) === 0 ? 1 : 0, 0, 0]), body, Buffer.alloc(pick(3) === 0 ? pick(20) : 0)]);
      frame.writeUInt32BE(frame.length, 0);
      for (let k = 0; k < 1 + pick(3); k++) frame[pick(frame.length)] = pick(256);
      try {
        const header = readFrameHeader(frame, 0, 4096, frame[5] === 1 ? FrameType.sasl : FrameType.amqp);
        if (header.size <= frame.length) readFrame(frame, 0, header);
      } catch (e) {
        if (!(e instanceof AmqpError)) throw new Error(`0x${frame.toString('hex')} threw ${String(e)}`);
      }
    }
    expect(true).toBe(true);
  });
});

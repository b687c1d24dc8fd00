// A seeded fuzz of the engine's state machines (server role): valid
// conversations with frames mutated (bytes flipped, sizes and counts changed,
// frames dropped, repeated, swapped, replaced by garbage), fed in random pieces
// to a connection whose host accepts links, grants credit and sends on flow.
// Whatever comes in, feed() throws nothing, and everything the engine writes is
// well-formed frames that decode against the spec's tables.
import { describe, expect, it } from 'vitest';
import type { Link } from '../../../../src/amqp/engine/link.js';
import { prng } from '../../../../src/util/prng.js';
import { AMQP_HEADER, CODE, SASL_HEADER, composite, frame, message, perf, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer } from './scripted-peer.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0xe261e);
const ROUNDS = 3000;

function conversation(rand: () => number): Buffer[] {
  const big = message('x'.repeat(1500));
  const frames: Buffer[] = [];
  if (rand() < 0.3) frames.push(SASL_HEADER, perf.saslInit('ANONYMOUS'));
  frames.push(AMQP_HEADER, perf.open({ maxFrameSize: 512 + Math.floor(rand() * 4096), idleTimeOut: rand() < 0.5 ? undefined : Math.floor(rand() * 0xffffffff) }));
  frames.push(perf.begin({ incomingWindow: Math.floor(rand() * 3000) }));
  frames.push(perf.attach({ name: 'in', handle: 0, role: 'sender', address: 'q' }), perf.attach({ name: 'out', handle: 1, role: 'receiver', address: 'q' }));
  frames.push(perf.flow({ handle: 1, credit: Math.floor(rand() * 20), incomingWindow: Math.floor(rand() * 50) }));
  for (let i = 0; i < 4; i++) frames.push(perf.transfer({ handle: 0, deliveryId: i, tag: `t${i}`, settled: rand() < 0.5 }, message(`m${i}`)));
  frames.push(perf.transfer({ handle: 0, deliveryId: 4, tag: 'big', more: true }, big.subarray(0, 700)), perf.transfer({ handle: 0, more: false }, big.subarray(700)));
  frames.push(perf.disposition({ role: 'receiver', first: 0, last: Math.floor(rand() * 0xffffffff) }));
  frames.push(frame(composite(CODE.disposition, [v.bool(false), v.uint(0), v.uint(0xffffffff), v.bool(true)])));
  frames.push(frame(undefined));
  frames.push(perf.detach(0), perf.end(), perf.close());
  return frames;
}

function mutate(frames: Buffer[], rand: () => number): Buffer[] {
  const out = frames.map((f) => Buffer.from(f));
  const pick = () => Math.floor(rand() * out.length);
  const times = 1 + Math.floor(rand() * 3);
  for (let t = 0; t < times; t++) {
    const i = pick();
    const f = out[i]!;
    switch (Math.floor(rand() * 7)) {
      case 0: // flip bytes
        for (let k = 0; k < 1 + rand() * 4; k++) f[Math.floor(rand() * f.length)] = Math.floor(rand() * 256);
        break;
      case 1: // a 32-bit field (a size, a count) set to an extreme
        if (f.length >= 12) f.writeUInt32BE([0, 1, 0x7fffffff, 0xffffffff, f.length][Math.floor(rand() * 5)]!, Math.floor(rand() * (f.length - 4)));
        break;
      case 2:
        out.splice(i, 1);
        break;
      case 3:
        out.splice(i, 0, Buffer.from(f));
        break;
      case 4: {
        const j = pick();
        [out[i], out[j]] = [out[j]!, out[i]!];
        break;
      }
      case 5:
        out[i] = Buffer.from(Array.from({ length: Math.floor(rand() * 40) }, () => Math.floor(rand() * 256)));
        break;
      default: // cut short
        out[i] = f.subarray(0, Math.floor(rand() * f.length));
    }
  }
  return out;
}

describe('engine fuzz', () => {
  it(`engine fuzz - ${ROUNDS} mutated conversations: feed() throws nothing, nothing fails inside, and every frame written decodes`, () => {
    const rand = prng(SEED);
    let closed = 0;
    // feed() turns anything but an AmqpError into amqp:internal-error: none may happen, or a bug hides behind it.
    const internal: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const links: Link[] = [];
      const p = new ScriptedPeer(
        { sasl: { anonymous: true }, log: (level, message, fields) => level === 'error' && internal.push(`${message} ${JSON.stringify(fields)}`), maxMessageSize: 1000 + Math.floor(rand() * 2000), session: { incomingWindow: 1 + Math.floor(rand() * 8), handleMax: 3 } },
        {
          onLinkAttach: (l: Link) => {
            links.push(l);
            l.accept();
            if (!l.isSender) l.flow(Math.floor(rand() * 5));
          },
          onFlow: (l: Link) => {
            for (let k = 0; k < 10 && l.sendable; k++) l.send(message(`r${k}`.repeat(1 + Math.floor(rand() * 200))), { settled: rand() < 0.5 });
          },
          onTransfer: (_l, d) => (rand() < 0.5 ? d.accept() : d.release()),
        },
      );
      const bytes = Buffer.concat(mutate(conversation(rand), rand));
      let at = 0;
      // Pieces of 1..64 bytes, or the rest: bounded by the bytes there are.
      while (at < bytes.length) {
        const n = rand() < 0.2 ? bytes.length - at : 1 + Math.floor(rand() * 64);
        expect(() => p.feed(bytes.subarray(at, at + n))).not.toThrow();
        at += n;
        if (rand() < 0.1) p.time += Math.floor(rand() * 100_000);
        expect(() => p.conn.tick(p.time)).not.toThrow();
      }
      expect(() => p.written()).not.toThrow();
      if (p.conn.finished) closed++;
    }
    expect(internal).toEqual([]);
    // Most mutations are caught; a few are harmless (a flipped byte in a body string).
    expect(closed).toBeGreaterThan(ROUNDS / 4);
  });
});

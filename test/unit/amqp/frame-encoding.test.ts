// The broker encodes outgoing frames with its own exact-size writer (rhea-patches 8).
// Every frame must come out byte for byte as rhea's own encoder writes it.
import { createRequire } from 'node:module';
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { installRheaPatches } from '../../../src/amqp/rhea-patches.js';
import { prng } from '../../../src/util/prng.js';

const require = createRequire(import.meta.url);
interface Described {
  described(): unknown;
}
type Make = (f: Record<string, unknown>) => Described;
const frames = require('rhea/lib/frames.js') as Record<string, Make> & {
  write_frame(f: unknown): Buffer;
  amqp_frame(channel: number, performative: unknown, payload?: Buffer): unknown;
  sasl_frame(performative: unknown): unknown;
};
const rheaWriteFrame = frames.write_frame;

function sampleFrames(seed: number): unknown[] {
  const random = prng(seed);
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(random() * 256)));
  const out: unknown[] = [
    frames.amqp_frame(0, frames.open!({ container_id: 'c', max_frame_size: 65536, properties: { product: 'x', n: 7 } }).described()),
    frames.amqp_frame(3, frames.begin!({ next_outgoing_id: 0, incoming_window: 2048, outgoing_window: 2048 }).described()),
    frames.amqp_frame(1, frames.flow!({ handle: 2, link_credit: 500, delivery_count: 12, next_incoming_id: 9, incoming_window: 2048, next_outgoing_id: 4, outgoing_window: 2048 }).described()),
    frames.amqp_frame(0, frames.disposition!({ role: true, first: 1, last: 999, settled: true, state: rhea.message.accepted().described() }).described()),
    frames.amqp_frame(0, frames.close!({ error: { condition: 'amqp:connection:forced', description: 'going' } }).described()),
    frames.amqp_frame(0, undefined), // an empty (heartbeat) frame
    frames.sasl_frame(frames.sasl_mechanisms!({ sasl_server_mechanisms: ['PLAIN', 'ANONYMOUS'] }).described()),
  ];
  // Transfers around the scratch buffer's and rhea's buffer sizes, and one far past both.
  for (const size of [0, 1, 1000, 1023, 1024, 1025, 4096, 16 * 1024, 70_000, 2 * 1024 * 1024, Math.floor(random() * 5000)]) {
    out.push(
      frames.amqp_frame(
        Math.floor(random() * 4),
        frames.transfer!({ handle: Math.floor(random() * 10), delivery_id: Math.floor(random() * 1e6), delivery_tag: bytes(8), message_format: 0, settled: random() < 0.5 }).described(),
        bytes(size),
      ),
    );
  }
  return out;
}

describe('frame encoding', () => {
  it('frame encoding - the exact-size encoder writes every frame exactly as rhea does, before and after a huge frame', () => {
    const expected = [1, 2].flatMap((seed) => sampleFrames(seed).map((f) => rheaWriteFrame(f)));
    installRheaPatches();
    expect(frames.write_frame).not.toBe(rheaWriteFrame);
    const actual = [1, 2].flatMap((seed) => sampleFrames(seed).map((f) => frames.write_frame(f)));
    expect(actual.length).toBe(expected.length);
    for (let i = 0; i < expected.length; i++) expect(actual[i]!.equals(expected[i]!), `frame ${i}`).toBe(true);
  });

  it('frame encoding - a transport writes a big payload after its frame head, uncopied, and the bytes are the same as rhea writes', () => {
    installRheaPatches();
    const Transport = require('rhea/lib/transport.js') as new (id: string, protocol: number, type: number, handler: unknown) => {
      pending: unknown[];
      encode(frame: unknown): void;
      write(socket: { write(b: Buffer): void }): void;
    };
    const random = prng(3);
    const payloads = [100, 16 * 1024 - 1, 16 * 1024, 70_000, 5, 300_000].map((n) => Buffer.from(Array.from({ length: n }, () => Math.floor(random() * 256))));
    const sample = payloads.map((p, i) => frames.amqp_frame(1, frames.transfer!({ handle: 0, delivery_id: i, delivery_tag: Buffer.from([i]), message_format: 0 }).described(), p));
    sample.push(frames.amqp_frame(0, frames.flow!({ handle: 0, link_credit: 10, delivery_count: 6, next_incoming_id: 1, incoming_window: 2048, next_outgoing_id: 6, outgoing_window: 2048 }).described()));
    const t = new Transport('test', 0, 0, {});
    const written: Buffer[] = [];
    for (const f of sample) t.encode(f);
    t.write({ write: (b) => written.push(b) });
    // The protocol header, then every frame as rhea's own encoder writes it.
    const header = Buffer.from([0x41, 0x4d, 0x51, 0x50, 0, 1, 0, 0]);
    expect(Buffer.concat(written).equals(Buffer.concat([header, ...sample.map((f) => rheaWriteFrame(f))]))).toBe(true);
    // Payloads of 16 KiB or more went to the socket as they are; smaller ones were copied into their frame.
    expect(payloads.map((p) => written.includes(p))).toEqual([false, false, true, true, false, true]);
    expect(t.pending).toEqual([]);
  });
});

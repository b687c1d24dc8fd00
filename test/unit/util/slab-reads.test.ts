// Reads into slabs (src/util/slab-reads.ts) with rhea-patches 6: big frames that
// straddle socket reads reach rhea whole, byte for byte, without being copied once
// more. Real TCP on 127.0.0.1 between two rhea containers in this process.
import { connect as netConnect, createServer, type AddressInfo, type Server } from 'node:net';
import rhea, { type EventContext } from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installRheaPatches } from '../../../src/amqp/rhea-patches.js';
import { SLAB_BYTES, adjacent, connectReadingIntoSlabs, joined, slabReads } from '../../../src/util/slab-reads.js';
import { prng } from '../../helpers/prng.js';

describe('slab reads', () => {
  it('slab reads - each read is offered the room right after the last one, and a new slab when little is left', () => {
    const chunks: Buffer[] = [];
    const opts = slabReads((c) => chunks.push(c), 64 * 1024);
    const next = opts.buffer as () => Buffer;
    const read = (n: number) => {
      const buf = next();
      buf.fill(chunks.length + 1, 0, n);
      opts.callback(n, buf);
    };
    for (const n of [1000, 20_000, 30_000]) read(n); // 51,000 of 65,536 used: 14,536 left, under 16 KiB
    read(5000);
    expect(chunks.map((c) => c.length)).toEqual([1000, 20_000, 30_000, 5000]);
    expect([adjacent(chunks[0]!, chunks[1]!), adjacent(chunks[1]!, chunks[2]!), adjacent(chunks[2]!, chunks[3]!)]).toEqual([true, true, false]);
    const both = joined(chunks[0]!, chunks[1]!);
    expect(both.length).toBe(21_000);
    expect([both[999], both[1000], both[20_999]]).toEqual([1, 2, 2]);
    // Nothing already handed out is written again.
    expect(chunks.every((c, i) => c.every((b) => b === i + 1))).toBe(true);
  });

  describe('over TCP', () => {
    let server: ReturnType<rhea.Container['listen']>;
    let relay: Server;
    let port: number;
    const container = rhea.create_container({ id: 'slab-server' });
    const random = prng(11);
    // Batches like a replication stream's: mostly larger than one socket read. Encoded
    // here, before anything is counted, and sent as they are.
    const bodies = Array.from({ length: 120 }, (_, i) => {
      const b = Buffer.alloc(1000 + Math.floor(random() * 150_000), i & 0xff);
      for (let k = 0; k < b.length; k += 997) b[k] = (i + k) & 0xff;
      b.writeUInt32BE(i, 0);
      return b;
    });
    const encoded = bodies.map((b) => rhea.message.encode({ body: rhea.message.data_section(b) } as never) as unknown as Buffer);

    beforeAll(async () => {
      installRheaPatches();
      container.on('sender_open', (ctx: EventContext) => {
        for (const e of encoded) ctx.sender!.send(e as never, undefined, 0);
      });
      server = container.listen({ port: 0, host: '127.0.0.1' });
      await new Promise<void>((r) => server.once('listening', () => r()));
      // Between the two, a relay passes the server's bytes on in pieces of 1-40 KB, one
      // piece per turn of the event loop, as a busy primary's stream arrives: most
      // frames straddle reads.
      relay = createServer((downstream) => {
        const upstream = netConnect((server.address() as AddressInfo).port, '127.0.0.1');
        downstream.on('data', (d) => upstream.write(d));
        let queue = Buffer.alloc(0);
        let pumping = false;
        const pump = () => {
          if (queue.length === 0 || downstream.destroyed) return void (pumping = false);
          const n = Math.min(queue.length, 1024 + Math.floor(random() * 40_000));
          downstream.write(queue.subarray(0, n));
          queue = queue.subarray(n);
          setImmediate(pump);
        };
        upstream.on('data', (d: Buffer) => {
          queue = Buffer.concat([queue, d]);
          if (!pumping) {
            pumping = true;
            setImmediate(pump);
          }
        });
        upstream.on('error', () => downstream.destroy());
        downstream.on('error', () => upstream.destroy());
        downstream.on('close', () => upstream.destroy());
      });
      await new Promise<void>((r) => relay.listen(0, '127.0.0.1', () => r()));
      port = (relay.address() as AddressInfo).port;
    });
    afterAll(() => {
      relay.close();
      server.close();
    });

    it('slab reads - frames bigger than a read arrive whole and in order, and are not copied again on the way to rhea', async () => {
      const client = rhea.create_container({ id: 'slab-client' });
      const received: Buffer[] = [];
      let socketBytes = 0;
      let reads = 0;
      let copied = 0;
      const concat = Buffer.concat;
      try {
        await new Promise<void>((resolve, reject) => {
          const conn = client.connect({
            port,
            host: '127.0.0.1',
            reconnect: false,
            connect: (p: number, h: string, _o: unknown, cb: () => void) => {
              const s = connectReadingIntoSlabs(p, h, cb);
              s.on('data', (d: Buffer) => {
                socketBytes += d.length;
                reads++;
                // Count what rhea copies while it takes in what the client read (the relay's copies are its own).
                Buffer.concat = ((list: readonly Uint8Array[], total?: number) => {
                  const out = concat(list, total);
                  copied += out.length;
                  return out;
                }) as typeof Buffer.concat;
                setImmediate(() => (Buffer.concat = concat));
              });
              return s;
            },
          } as never);
          conn.on('connection_error', reject);
          conn.on('disconnected', (c: EventContext) => reject((c as unknown as { error?: Error }).error ?? new Error('disconnected')));
          const receiver = conn.open_receiver({ source: { address: 'x' }, credit_window: 40 } as never);
          receiver.on('message', (c: EventContext) => {
            const body = c.message!.body as { content?: Buffer } | Buffer;
            received.push(Buffer.isBuffer(body) ? body : body.content!);
            if (received.length === bodies.length) {
              conn.close();
              resolve();
            }
          });
        });
      } finally {
        Buffer.concat = concat;
      }
      expect(received.length).toBe(bodies.length);
      for (let i = 0; i < bodies.length; i++) expect(received[i]!.equals(bodies[i]!), `message ${i}`).toBe(true);
      // Bodies are views into slabs, and rhea was handed joined views: only a frame that
      // straddles two slabs is copied (with Node's own reads, or without the join, ~all).
      const total = bodies.reduce((n, b) => n + b.length, 0);
      expect(reads).toBeGreaterThan(bodies.length); // more reads than frames: frames straddle reads
      expect(received.filter((b) => b.buffer.byteLength === SLAB_BYTES).length).toBeGreaterThan(bodies.length / 2);
      expect(copied).toBeLessThan(total * 0.4);
    });
  });
});

// Bad input on the wire: garbage, truncated and oversize frames, wrong protocol
// headers, frames out of order, bad SASL, and a seeded fuzz run of mutated
// frames. Each gets a close (with an error where the protocol allows one), the
// broker stays up, and a well-behaved client on its own connection keeps working.
import { createConnection } from 'node:net';
import { createRequire } from 'node:module';
import rhea from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { ClientError, TestClient, bodyOf, sendRaw } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';
import { prng as mulberry32 } from '../../src/util/prng.js';

const require = createRequire(import.meta.url);
interface Described {
  described(): unknown;
}
const frames = require('rhea/lib/frames.js') as {
  write_frame(f: unknown): Buffer;
  amqp_frame(channel: number, performative: unknown, payload?: Buffer): unknown;
  sasl_frame(performative: unknown): unknown;
  open(f: Record<string, unknown>): Described;
  begin(f: Record<string, unknown>): Described;
  attach(f: Record<string, unknown>): Described;
  transfer(f: Record<string, unknown>): Described;
  detach(f: Record<string, unknown>): Described;
  end(f: Record<string, unknown>): Described;
  close(f: Record<string, unknown>): Described;
  sasl_init(f: Record<string, unknown>): Described;
};
const terminus = require('rhea/lib/terminus.js') as { target(f: Record<string, unknown>): Described; source(f: Record<string, unknown>): Described };

const AMQP_HEADER = Buffer.from('AMQP\x00\x01\x00\x00', 'binary');
const SASL_HEADER = Buffer.from('AMQP\x03\x01\x00\x00', 'binary');
const MAX_FRAME = 4096;

const frame = (channel: number, performative: Described, payload?: Buffer): Buffer =>
  frames.write_frame(frames.amqp_frame(channel, performative.described(), payload));

/** Attach of a pre-settled sender (handle 0) to a queue. */
const senderAttach = (address: string): Buffer =>
  frame(
    0,
    frames.attach({ name: 'raw-link', handle: 0, role: false, snd_settle_mode: 1, source: terminus.source({}).described(), target: terminus.target({ address }).described(), initial_delivery_count: 0 }),
  );

/** A valid client conversation: header, open, begin, attach (sender to fuzz.q), one pre-settled transfer, detach, end, close. */
function validConversation(): Buffer[] {
  return [
    AMQP_HEADER,
    frame(0, frames.open({ container_id: 'raw-client', max_frame_size: MAX_FRAME })),
    frame(0, frames.begin({ next_outgoing_id: 0, incoming_window: 2048, outgoing_window: 2048 })),
    senderAttach('fuzz.q'),
    frame(0, frames.transfer({ handle: 0, delivery_id: 0, delivery_tag: Buffer.from('0'), message_format: 0, settled: true }), rhea.message.encode({ body: 'raw' }) as Buffer),
    frame(0, frames.detach({ handle: 0, closed: true })),
    frame(0, frames.end({})),
    frame(0, frames.close({})),
  ];
}

interface RawResult {
  /** Bytes the broker sent back. */
  data: Buffer;
  /** The broker closed (or reset) the connection before the deadline. */
  closed: boolean;
}

/** The same bytes cut at random points into pieces of 1 to maxPiece bytes. */
function cutAtRandom(chunks: Buffer[], seed: number, maxPiece: number): Buffer[] {
  const random = mulberry32(seed);
  const all = Buffer.concat(chunks);
  const pieces: Buffer[] = [];
  for (let at = 0; at < all.length; ) {
    const n = 1 + Math.floor(random() * maxPiece);
    pieces.push(all.subarray(at, at + n));
    at += n;
  }
  return pieces;
}

/** Write bytes on a raw socket; resolve when the broker closes it or after waitMs. */
function raw(port: number, chunks: Buffer[], options: { waitMs?: number; endAfterWrite?: boolean; pauseBetweenWritesMs?: number } = {}): Promise<RawResult> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const received: Buffer[] = [];
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ data: Buffer.concat(received), closed });
    };
    const timer = setTimeout(() => finish(false), options.waitMs ?? 3000);
    socket.on('data', (d: Buffer) => received.push(d));
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    socket.on('connect', async () => {
      socket.setNoDelay(true);
      for (const c of chunks) {
        if (done) return;
        socket.write(c);
        // A pause lets each piece arrive as a read of its own.
        if (options.pauseBetweenWritesMs !== undefined) await new Promise((r) => setTimeout(r, options.pauseBetweenWritesMs));
      }
      if (options.endAfterWrite) socket.end();
    });
  });
}

/** A close performative's error condition in what the broker sent, if any. */
function closeCondition(data: Buffer): string | undefined {
  const text = data.toString('latin1');
  const m = /amqp:[a-z-]+(?::[a-z-]+)*/.exec(text);
  return m?.[0];
}

let broker: TestBroker;
let healthy: TestClient;
let healthSeq = 0;

/** A well-behaved client on its own connection still sends and receives, and a new one can connect. */
async function assertHealthy(): Promise<void> {
  expect(broker.alive, `broker exited: ${broker.stdout.slice(-3000)} ${broker.stderr.slice(-2000)}`).toBe(true);
  const body = `health-${++healthSeq}`;
  const outcomes = await healthy.send('health.q', [body]);
  expect(outcomes[0].state).toBe('accepted');
  const got = await healthy.receiveAndAccept('health.q', 1);
  expect(bodyOf(got[0])).toBe(body);
  const fresh = await TestClient.connect({ port: broker.port });
  await fresh.close();
  // Bad input gets a condition and at most a warning: an error line is the broker's own failure.
  expect(broker.errorLogLines.slice(0, 3), 'error lines in the broker log').toEqual([]);
}

beforeAll(async () => {
  broker = await TestBroker.start({ args: ['--max-frame-size', String(MAX_FRAME)] });
  healthy = await TestClient.connect({ port: broker.port });
});

afterAll(async () => {
  await healthy?.close();
  await killAllBrokers();
});

describe('bad input', () => {
  it('bad input - the valid raw conversation works (baseline for the others)', async () => {
    const r = await raw(broker.port, validConversation(), { waitMs: 3000 });
    expect(r.data.subarray(0, 8)).toEqual(AMQP_HEADER);
    expect(r.closed).toBe(true);
    const got = await healthy.receiveAndAccept('fuzz.q', 1);
    expect(bodyOf(got[0])).toBe('raw');
    await assertHealthy();
  });

  it('bad input - frames cut at random points across many reads are put together again, in order', async () => {
    // Several transfers larger than a piece, so reads end inside frames, inside frame
    // headers and exactly on frame boundaries.
    const bodies = Array.from({ length: 12 }, (_, i) => `split-${i}-${'x'.repeat(37 * i)}`);
    const [header, open, begin] = validConversation();
    const transfers = bodies.map((body, i) =>
      frame(0, frames.transfer({ handle: 0, delivery_id: i, delivery_tag: Buffer.from(String(i)), message_format: 0, settled: true }), rhea.message.encode({ body }) as Buffer),
    );
    const tail = [frame(0, frames.detach({ handle: 0, closed: true })), frame(0, frames.end({})), frame(0, frames.close({}))];
    for (const seed of [1, 2, 3]) {
      const q = `split.q${seed}`;
      const pieces = cutAtRandom([header!, open!, begin!, senderAttach(q), ...transfers, ...tail], seed, 90);
      const r = await raw(broker.port, pieces, { waitMs: 10_000, pauseBetweenWritesMs: 1 });
      expect(r.closed).toBe(true);
      expect(closeCondition(r.data)).toBeUndefined();
      const got = await healthy.receiveAndAccept(q, bodies.length);
      expect(got.map(bodyOf)).toEqual(bodies);
    }
    await assertHealthy();
  });

  it('bad input - garbage bytes get the connection closed', async () => {
    const r = await raw(broker.port, [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')]);
    expect(r.closed).toBe(true);
    await assertHealthy();
  });

  it('bad input - a wrong protocol id, version or revision in the header gets our header back, then the close', async () => {
    for (const header of ['AMQP\x02\x01\x00\x00', 'AMQP\x00\x02\x00\x00', 'AMQP\x00\x01\x00\x07', 'XMQP\x00\x01\x00\x00']) {
      const r = await raw(broker.port, [Buffer.from(header, 'binary')]);
      expect(r.closed, JSON.stringify(header)).toBe(true);
      // Spec 2.2: a server that does not support the requested version answers with one it supports.
      expect([AMQP_HEADER.toString('latin1'), SASL_HEADER.toString('latin1')], JSON.stringify(header)).toContain(r.data.subarray(0, 8).toString('latin1'));
    }
    await assertHealthy();
  });

  it('bad input - a frame that does not decode after open gets a close with amqp:decode-error', async () => {
    const [header, open] = validConversation();
    const garbage = Buffer.from([0, 0, 0, 12, 2, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
    const r = await raw(broker.port, [header, open, garbage]);
    expect(r.closed).toBe(true);
    expect(closeCondition(r.data)).toBe('amqp:decode-error');
    await assertHealthy();
  });

  it('bad input - a truncated frame followed by end of stream gets the connection closed', async () => {
    const [header, open] = validConversation();
    const r = await raw(broker.port, [header, open.subarray(0, 10)], { endAfterWrite: true });
    expect(r.closed).toBe(true);
    await assertHealthy();
  });

  it('bad input - a frame that declares fewer than 8 bytes gets the connection closed', async () => {
    for (const size of [0, 4, 7]) {
      const bad = Buffer.alloc(8);
      bad.writeUInt32BE(size, 0);
      const r = await raw(broker.port, [AMQP_HEADER, bad]);
      expect(r.closed, `size ${size}`).toBe(true);
    }
    await assertHealthy();
  });

  it('bad input - an oversize frame (over --max-frame-size) gets the connection closed without buffering it', async () => {
    const [header, open, begin, attach] = validConversation();
    const big = frame(0, frames.transfer({ handle: 0, delivery_id: 0, delivery_tag: Buffer.from('0'), message_format: 0, settled: true }), Buffer.alloc(MAX_FRAME * 4, 0x41));
    const r = await raw(broker.port, [header, open, begin, attach, big]);
    expect(r.closed).toBe(true);
    expect(closeCondition(r.data)).toBe('amqp:connection:framing-error');
    // A frame that only declares a huge size is refused at once, not awaited.
    const declared = Buffer.alloc(8);
    declared.writeUInt32BE(0x7fffffff, 0);
    declared.writeUInt8(2, 4);
    const r2 = await raw(broker.port, [header, open, declared], { waitMs: 2000 });
    expect(r2.closed).toBe(true);
    await assertHealthy();
  });

  it('bad input - frames before open get an error close', async () => {
    const [header, , begin, attach] = validConversation();
    const r = await raw(broker.port, [header, begin, attach]);
    expect(r.closed).toBe(true);
    await assertHealthy();
  });

  it('bad input - a transfer on an unattached handle gets an error close', async () => {
    const [header, open, begin, , transfer] = validConversation();
    const r = await raw(broker.port, [header, open, begin, transfer]);
    expect(r.closed).toBe(true);
    await assertHealthy();
  });

  it('bad input - a second open on a connection gets an error close', async () => {
    const [header, open] = validConversation();
    const r = await raw(broker.port, [header, open, open]);
    expect(r.closed).toBe(true);
    expect(closeCondition(r.data)).toBe('amqp:connection:framing-error');
    await assertHealthy();
  });

  it('bad input - wrong SASL: an unknown mechanism fails SASL and closes, garbage after the SASL header closes', async () => {
    const init = frames.write_frame(frames.sasl_frame(frames.sasl_init({ mechanism: 'NO-SUCH-MECH', initial_response: Buffer.from('x') }).described()));
    const r = await raw(broker.port, [SASL_HEADER, init]);
    expect(r.data.subarray(0, 8)).toEqual(SASL_HEADER);
    expect(r.closed).toBe(true);
    const g = await raw(broker.port, [SASL_HEADER, Buffer.from('\x00\x00\x00\x10garbage garbage!')]);
    expect(g.closed).toBe(true);
    // An AMQP frame where a SASL frame belongs.
    const [, open] = validConversation();
    const a = await raw(broker.port, [SASL_HEADER, open]);
    expect(a.closed).toBe(true);
    await assertHealthy();
  });

  it('bad input - unknown addresses and invalid queue arguments get clear errors', async () => {
    const bad = await manage(broker.port, 'CREATE', 'queue', 'bad.args', { 'max-count': -1 }).then(() => undefined, (e: Error) => e);
    expect(bad?.message).toMatch(/max-count must be a whole number/);
    const bad2 = await manage(broker.port, 'CREATE', 'queue', 'bad.args', { priorities: 11 }).then(() => undefined, (e: Error) => e);
    expect(bad2?.message).toMatch(/priorities must be between 1 and 10/);
    const bad3 = await manage(broker.port, 'CREATE', 'queue', 'bad.args', { 'default-ttl': 'forever' }).then(() => undefined, (e: Error) => e);
    expect(bad3?.message).toMatch(/default-ttl must be a duration/);
    const bad4 = await manage(broker.port, 'CREATE', 'queue', 'bad\u0001name').then(() => undefined, (e: Error) => e);
    expect(bad4?.message).toMatch(/control characters/);
    const noSource = await healthy.openReceiver({}).then(() => undefined, (e: ClientError) => e);
    expect(noSource?.condition).toBe('amqp:invalid-field');
    expect(noSource?.description).toMatch(/no address/);
    await assertHealthy();
  });

  it('bad input - a message that is not valid AMQP is rejected, the link and connection stay usable', async () => {
    const sender = await healthy.openSender('bad.msg.q');
    const outcomes = await healthy.send(sender, [{ body: 'ok' }]);
    expect(outcomes[0].state).toBe('accepted');
    // Raw transfer payload that is not an AMQP message.
    const junk = await sendRaw(sender, Buffer.from([0x00, 0x53, 0x77, 0xff, 0x01]));
    expect(junk.state).toBe('rejected');
    expect(junk.condition).toBe('amqp:invalid-field');
    expect((await healthy.send(sender, [{ body: 'still ok' }]))[0].state).toBe('accepted');
    sender.close();
    await assertHealthy();
  });

  it('bad input - a header section that is not a list is rejected at publish, not left for consumers to fail on', async () => {
    // Taken in, it would go out as its header, which the broker cannot rewrite when it
    // must (a queue's ttl, a redelivery): every consumer given it would be detached.
    const sender = await healthy.openSender('bad.header.q');
    const mapHeader = Buffer.from([0x00, 0x53, 0x70, 0xc1, 0x01, 0x00, 0x00, 0x53, 0x77, 0xa1, 0x01, 0x78]);
    expect(await sendRaw(sender, mapHeader)).toEqual({ state: 'rejected', condition: 'amqp:invalid-field' });
    expect((await healthy.send(sender, [{ body: 'fine' }]))[0].state).toBe('accepted');
    sender.close();
    await assertHealthy();
  });

  it('bad input - a section out of the spec\'s order is rejected at publish: a consumer would read another message than the one the broker routed and keyed', async () => {
    const sender = await healthy.openSender('bad.order.q');
    const props = (id: string) => Buffer.concat([Buffer.from([0x00, 0x53, 0x73, 0xc0, id.length + 3, 1, 0xa1, id.length]), Buffer.from(id)]);
    const body = Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x01, 0x78]);
    const durableHeader = Buffer.from([0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41]);
    const vendor = Buffer.from([0x00, 0xa3, 0x0b, ...Buffer.from('com.x:extra'), 0x40]);
    // A decoder lets the second properties' message-id win over the first, which a window keys by.
    expect(await sendRaw(sender, Buffer.concat([props('first'), body, props('second')]))).toEqual({ state: 'rejected', condition: 'amqp:invalid-field' });
    // A header behind a vendor section: the broker's reading stops at the vendor section.
    expect(await sendRaw(sender, Buffer.concat([vendor, durableHeader, props('first'), body]))).toEqual({ state: 'rejected', condition: 'amqp:invalid-field' });
    // A body section whose value says more bytes than the message holds (consumers would fail on it).
    const cutBody = Buffer.from([0x00, 0x53, 0x77, 0xa1, 0xff, 0x41, 0x42]);
    expect(await sendRaw(sender, Buffer.concat([props('first'), cutBody]))).toEqual({ state: 'rejected', condition: 'amqp:invalid-field' });
    // In order, a vendor section behind the body included: taken.
    expect(await sendRaw(sender, Buffer.concat([durableHeader, props('first'), body, vendor]))).toEqual({ state: 'accepted', condition: undefined });
    sender.close();
    await assertHealthy();
  });

  it('bad input - a value nested 300,000 deep is sized without recursing: a cut one is malformed, a whole one is taken', async () => {
    // The recursive reader ran out of stack on these: amqp:internal-error and an error in the log.
    const sender = await healthy.openSender('bad.deep.q');
    const amqpValue = Buffer.from([0x00, 0x53, 0x77]);
    const depth = 300_000;
    const cut = Buffer.concat([amqpValue, Buffer.alloc(depth, 0x00), Buffer.from([0x40])]);
    expect(await sendRaw(sender, cut)).toEqual({ state: 'rejected', condition: 'amqp:invalid-field' });
    const whole = Buffer.concat([amqpValue, Buffer.alloc(depth, 0x00), Buffer.alloc(depth + 1, 0x40)]);
    expect(await sendRaw(sender, whole)).toEqual({ state: 'accepted', condition: undefined });
    sender.close();
    await assertHealthy();
  });

  it('bad input - seeded fuzz: 200 mutated conversations never take the broker down', async () => {
    const base = validConversation();
    // TANDEM_FUZZ_SEED replays or explores other seeds.
    const rand = mulberry32(Number(process.env.TANDEM_FUZZ_SEED ?? 0x7a4d3e1));
    const pick = (n: number) => Math.floor(rand() * n);
    const mutate = (): Buffer[] => {
      const chunks = base.map((b) => Buffer.from(b));
      const kind = pick(6);
      const i = 1 + pick(chunks.length - 1); // keep the header mostly valid
      const c = chunks[i];
      switch (kind) {
        case 0: // flip random bytes
          for (let k = 0; k < 1 + pick(4); k++) c[pick(c.length)] ^= 1 << pick(8);
          break;
        case 1: // random byte values
          for (let k = 0; k < 1 + pick(4); k++) c[pick(c.length)] = pick(256);
          break;
        case 2: // truncate a frame
          chunks[i] = c.subarray(0, pick(c.length));
          break;
        case 3: // duplicate or reorder frames
          chunks.splice(pick(chunks.length), 0, chunks[i]);
          break;
        case 4: // random garbage in place of a frame
          chunks[i] = Buffer.from(Array.from({ length: 1 + pick(64) }, () => pick(256)));
          break;
        case 5: // corrupt the header
          chunks[0] = Buffer.from(chunks[0]);
          chunks[0][pick(8)] = pick(256);
          break;
      }
      return chunks;
    };
    const started = Date.now();
    const batches = 10;
    const perBatch = 20;
    for (let b = 0; b < batches; b++) {
      const cases = Array.from({ length: perBatch }, mutate);
      await Promise.all(cases.map((chunks) => raw(broker.port, chunks, { waitMs: 400, endAfterWrite: rand() < 0.5 })));
      await assertHealthy();
    }
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(broker.stderr).not.toMatch(/uncaught exception/);
  }, 30_000);
});


// A client that advertises the spec's smallest max-frame-size (512, 2.7.1) and attaches
// with a ~2 KB address: legal, since its frames to us are bounded by our max-frame-size,
// but the attach answering it would repeat the address and go over the client's limit.
// Against a real tandemd, with raw frames: every frame the broker sends stays within
// 512 bytes, the link is refused with amqp:frame-size-too-small, and the connection and
// the broker go on (a normal attach on the same connection works).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Composite } from '../../src/amqp/engine/composite.js';
import { encode } from '../../src/amqp/engine/encoder.js';
import { FrameType, encodeFrame, protocolHeader } from '../../src/amqp/engine/frames.js';
import { type AmqpValue, amqp } from '../../src/amqp/engine/types.js';
import { rowsOf } from '../../src/admin/client.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { RawPeer } from '../helpers/raw-amqp.js';
import { manage } from '../helpers/tandem-cli.js';

const PEER_MAX_FRAME = 512;
/** An address of about 2 KB that the broker serves: amq.topic with a long routing key. */
const LONG = `amq.topic/${'k'.repeat(2000)}`;

const { uint, ulong, string, boolean, list, described } = amqp;
const nul = amqp.null();
const performative = (code: number, fields: AmqpValue[]): AmqpValue => described(ulong(code), list(fields));
const frame = (p: AmqpValue, payload?: Buffer): Buffer => encodeFrame(FrameType.amqp, 0, p, payload);

const CONTAINER = 'frame-size-test';
const open = frame(performative(0x10, [string(CONTAINER), nul, uint(PEER_MAX_FRAME)]));
const begin = frame(performative(0x11, [nul, uint(0), uint(2048), uint(2048)]));
/** clientReceives false: the client sends to `address` (a target); true: it receives from it (a source). */
const attach = (name: string, handle: number, address: string, clientReceives: boolean): Buffer =>
  frame(
    performative(0x12, [
      string(name), uint(handle), boolean(clientReceives), nul, nul,
      clientReceives ? performative(0x28, [string(address)]) : performative(0x28, []),
      clientReceives ? performative(0x29, []) : performative(0x29, [string(address)]),
      nul, nul, clientReceives ? nul : uint(0),
    ]),
  );
const detach = (handle: number): Buffer => frame(performative(0x16, [uint(handle), boolean(true)]));
const flow = (handle: number, credit: number): Buffer => frame(performative(0x13, [uint(0), uint(2048), uint(1), uint(2048), uint(handle), uint(0), uint(credit)]));
const transfer = (handle: number, id: number, body: string): Buffer =>
  frame(performative(0x14, [uint(handle), uint(id), amqp.binary(Buffer.from(`t${id}`)), uint(0), boolean(false)]), encode(described(ulong(0x77), string(body))));
const close = frame(performative(0x18, []));

const named = (peer: RawPeer, name: string): Composite[] =>
  peer.frames()
    .map((f) => f.body)
    .filter((b): b is Composite => b?.def.name === name);
const until = (what: string, pred: () => boolean): Promise<boolean> => waitFor(pred, { timeout: 10_000, name: what });

function expectAllWithinPeerLimit(peer: RawPeer): void {
  const over = peer.frames().filter((f) => f.size > PEER_MAX_FRAME);
  expect(over.map((f) => `${f.body?.def.name ?? 'empty'} of ${f.size} bytes`)).toEqual([]);
}

function errorOf(body: Composite | undefined): { condition: string; description: string } | undefined {
  const e = body?.fields.error as Composite | undefined;
  return e ? { condition: e.fields.condition as string, description: (e.fields.description as string) ?? '' } : undefined;
}

let broker: TestBroker;

/** The links the broker holds for the raw client's connection (management's count). */
async function brokerLinks(): Promise<number | undefined> {
  const row = rowsOf(await manage(broker.port, 'QUERY', 'connection', undefined)).find((r) => r.container === CONTAINER);
  return row?.links as number | undefined;
}

/** How many queues the broker has (each count includes the asking management client's own reply queue). */
const queueCount = async (): Promise<number> => rowsOf(await manage(broker.port, 'QUERY', 'queue', undefined)).length;

beforeAll(async () => {
  broker = await TestBroker.start();
});

afterAll(async () => {
  await killAllBrokers();
});

describe('attach frame size', () => {
  it("attach frame size - a ~2 KB address from a client whose max-frame-size is 512 is refused with amqp:frame-size-too-small, within 512-byte frames; the connection goes on", async () => {
    const queuesBefore = await queueCount();
    const peer = await RawPeer.connect(broker.port);
    peer.write(protocolHeader(0), open, begin);
    await until('begin from the broker', () => named(peer, 'begin').length > 0);

    // Both directions: the client sends to the long address (handle 0), and receives from it (handle 1).
    for (const [handle, clientReceives] of [[0, false], [1, true]] as const) {
      const name = `long-${handle}`;
      peer.write(attach(name, handle, LONG, clientReceives));
      await until(`the attach answering ${name}`, () => named(peer, 'attach').some((a) => a.fields.name === name));
      expectAllWithinPeerLimit(peer);
      const refusal = () => named(peer, 'detach').find((d) => errorOf(d)?.condition === 'amqp:frame-size-too-small' && named(peer, 'attach').some((a) => a.fields.name === name && a.fields.handle === d.fields.handle));
      await until(`detach of ${name}`, () => refusal() !== undefined);
      const echo = named(peer, 'attach').find((a) => a.fields.name === name)!;
      expect(echo.fields.source).toBeUndefined();
      expect(echo.fields.target).toBeUndefined();
      const d = refusal()!;
      expect(d.fields.closed).toBe(true);
      expect(errorOf(d)!.description).toMatch(/^the attach's echo would be \d+ bytes, over the peer's max-frame-size 512: /);
      const size = Number(/would be (\d+) bytes/.exec(errorOf(d)!.description)![1]);
      expect(size).toBeGreaterThan(2000);
      // The client answers the detach, as clients do; the broker drops what it had set up for the link.
      peer.write(detach(handle));
    }
    // Nothing is left of them: no link held for the connection, no subscription queue
    // (the receiving one had one made, bound with the long key, before its attach was sent).
    await waitFor(async () => (await brokerLinks()) === 0, { timeout: 10_000, name: 'the refused links dropped' });
    expect(await queueCount()).toBe(queuesBefore);

    // A normal attach on the same connection and session: a sender, then a receiver, to one queue.
    peer.write(attach('ok-sender', 2, 'frame-size.q', false));
    await until('the sender attached', () => named(peer, 'attach').some((a) => a.fields.name === 'ok-sender' && a.fields.target !== undefined) && named(peer, 'flow').some((f) => f.fields.handle !== undefined));
    peer.write(transfer(2, 0, 'after the refusal'));
    await until('the message accepted', () => named(peer, 'disposition').some((d) => (d.fields.state as Composite | undefined)?.def.name === 'accepted'));
    peer.write(attach('ok-receiver', 3, 'frame-size.q', true));
    await until('the receiver attached', () => named(peer, 'attach').some((a) => a.fields.name === 'ok-receiver' && a.fields.source !== undefined));
    peer.write(flow(3, 10));
    await until('the message delivered', () => named(peer, 'transfer').length > 0);
    expect(await brokerLinks()).toBe(2);

    expect(named(peer, 'close')).toEqual([]);
    expect(named(peer, 'end')).toEqual([]);
    expectAllWithinPeerLimit(peer);
    expect(peer.closed).toBe(false);
    peer.write(close);
    await until('close from the broker', () => named(peer, 'close').length > 0);
    peer.destroy();
    expect(broker.alive).toBe(true);
  });
});

// The frame guard in front of rhea on every broker connection (issue 20): the
// crashes, stalls and unbounded buffering a hostile client could cause, each as a
// named regression test against a real tandemd, talking raw AMQP frames. Each
// case gets a clear answer (a close or detach with its condition, or the end of
// the socket before the AMQP layer), the broker stays up, and a well-behaved
// client on its own connection keeps working.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Composite } from '../../src/amqp/engine/composite.js';
import { encode } from '../../src/amqp/engine/encoder.js';
import { FrameType, encodeFrame, protocolHeader } from '../../src/amqp/engine/frames.js';
import { type AmqpValue, amqp } from '../../src/amqp/engine/types.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { RawPeer, type ReceivedFrame } from '../helpers/raw-amqp.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

const MAX_FRAME = 4096;
const MAX_MESSAGE = 65536;
const U32 = 0xffffffff;

const { uint, ulong, string, symbol, boolean, binary, list, described } = amqp;
const nul = amqp.null();
const performative = (code: number, fields: AmqpValue[]): AmqpValue => described(ulong(code), list(fields));
const frame = (p: AmqpValue, payload?: Buffer, channel = 0): Buffer => encodeFrame(FrameType.amqp, channel, p, payload);

const AMQP = protocolHeader(0);
const SASL = protocolHeader(3);
const open = (fields: AmqpValue[] = []): Buffer => frame(performative(0x10, [string('guard-test'), nul, uint(MAX_FRAME), ...fields]));
const begin = frame(performative(0x11, [nul, uint(0), uint(2048), uint(2048)]));
/** role false: the client sends (a sender link to `address`); true: it receives from it. */
const attach = (address: string, clientReceives: boolean, handle = 0): Buffer =>
  frame(
    performative(0x12, [
      string(`guard-${handle}`), uint(handle), boolean(clientReceives), nul, nul,
      performative(0x28, [string(address)]),
      performative(0x29, [string(address)]),
      nul, nul, clientReceives ? nul : uint(0),
    ]),
  );
const transfer = (fields: AmqpValue[], payload: Buffer): Buffer => frame(performative(0x14, fields), payload);
const flow = (credit: number): Buffer => frame(performative(0x13, [uint(0), uint(2048), uint(0), uint(2048), uint(0), uint(0), uint(credit)]));
const disposition = (first: number, last: number): Buffer => frame(performative(0x15, [boolean(true), uint(first), uint(last), boolean(true), performative(0x24, [])]));
const close = frame(performative(0x18, []));
const messageBody = (text: string): Buffer => encode(described(ulong(0x77), string(text)));
/** array32 declaring 2^32-1 uuids in 5 bytes: rhea's reader looped 2^32 times (OOM). */
const HOSTILE_ARRAY = Buffer.from('f000000005ffffffff98', 'hex');
/** A performative whose one list item is the hostile array, encoded by hand. */
const withHostileArray = (code: number, leading: Buffer[]): Buffer => {
  const items = Buffer.concat([...leading, HOSTILE_ARRAY]);
  const body = Buffer.concat([Buffer.from([0x00, 0x53, code, 0xc0, items.length + 1, leading.length + 1]), items]);
  const f = Buffer.concat([Buffer.from([0, 0, 0, 0, 2, 0, 0, 0]), body]);
  f.writeUInt32BE(f.length, 0);
  return f;
};

const named = (peer: RawPeer, name: string): ReceivedFrame[] => peer.frames().filter((f) => f.body?.def.name === name);

/** The condition and description of the broker's close (or detach), if one came. */
function errorOf(peer: RawPeer, name: 'close' | 'detach'): { condition: string; description: string } | undefined {
  const f = named(peer, name).find((x) => x.body?.fields.error);
  const e = f?.body?.fields.error as Composite | undefined;
  return e ? { condition: e.fields.condition as string, description: (e.fields.description as string) ?? '' } : undefined;
}

const until = (what: string, pred: () => boolean, timeout = 10_000): Promise<boolean> => waitFor(pred, { timeout, name: what });

let broker: TestBroker;
let healthy: TestClient;
let seq = 0;

async function assertHealthy(): Promise<void> {
  expect(broker.alive, `broker exited: ${broker.stderr.slice(-2000)}`).toBe(true);
  const body = `health-${++seq}`;
  // A stall of the event loop (case 5 stopped the broker for ~9 s) shows as a missed deadline here.
  const outcomes = await healthy.send('guard.health', [body], { timeoutMs: 5000 });
  expect(outcomes[0]!.state).toBe('accepted');
  const got = await healthy.receiveAndAccept('guard.health', 1, 5000);
  expect(bodyOf(got[0]!)).toBe(body);
}

/** Open a connection with header, open and begin, and wait for the broker's begin. */
async function session(port = broker.port): Promise<RawPeer> {
  const peer = await RawPeer.connect(port);
  peer.write(AMQP, open(), begin);
  await until('begin from the broker', () => named(peer, 'begin').length > 0);
  return peer;
}

async function expectClosedWith(peer: RawPeer, condition: RegExp, description?: RegExp): Promise<void> {
  await until(`close ${condition}`, () => errorOf(peer, 'close') !== undefined || peer.closed);
  const error = errorOf(peer, 'close');
  expect(error?.condition, `close frames: ${JSON.stringify(named(peer, 'close').map((f) => f.body?.fields), (_, v) => (typeof v === 'bigint' ? String(v) : v))}`).toMatch(condition);
  if (description) expect(error?.description).toMatch(description);
  await until('socket end', () => peer.closed);
  peer.destroy();
}

beforeAll(async () => {
  broker = await TestBroker.start({ args: ['--max-frame-size', String(MAX_FRAME), '--max-message-size', String(MAX_MESSAGE)] });
  healthy = await TestClient.connect({ port: broker.port });
});

afterAll(async () => {
  await healthy?.close();
  await killAllBrokers();
});

describe('frame guard', () => {
  it('issue-20 case 1 - the 32-byte sasl-init with a 2^32-1 element array, before authentication, closes the socket and nothing else', async () => {
    const exact = Buffer.from('414d5150030100000000001802010000005341c00b01f000000005ffffffff98', 'hex');
    const peer = await RawPeer.connect(broker.port);
    peer.write(exact);
    await until('socket end', () => peer.closed);
    peer.destroy();
    await assertHealthy();
  });

  it('issue-20 case 1 - the same array in an open, and in a performative after it, gets a close with amqp:decode-error', async () => {
    const inOpen = await RawPeer.connect(broker.port);
    inOpen.write(AMQP, withHostileArray(0x10, [encode(string('c'))]));
    await expectClosedWith(inOpen, /^amqp:decode-error$/, /array32 .* 4294967295 elements of uuid/);
    const afterOpen = await RawPeer.connect(broker.port);
    // After SASL ANONYMOUS, as an authenticated client would.
    const init = encodeFrame(FrameType.sasl, 0, performative(0x41, [symbol('ANONYMOUS')]));
    afterOpen.write(SASL, init);
    await until('sasl outcome', () => afterOpen.frames().some((f) => f.body?.def.name === 'sasl-outcome'));
    afterOpen.write(AMQP, open(), withHostileArray(0x11, [encode(nul), encode(uint(0)), encode(uint(2048)), encode(uint(2048)), encode(nul)]));
    await expectClosedWith(afterOpen, /^amqp:decode-error$/, /begin|array32/);
    await assertHealthy();
  });

  it('issue-20 case 1 - the same array in a message annotation, or in a management request, is refused before rhea decodes it', async () => {
    // message-annotations { x: <the array> }, then an amqp-value.
    const annotations = Buffer.concat([Buffer.from([0x00, 0x53, 0x72, 0xc1, 3 + HOSTILE_ARRAY.length + 1, 2, 0xa3, 1, 0x78]), HOSTILE_ARRAY]);
    const payload = Buffer.concat([annotations, messageBody('hostile')]);
    for (const address of ['guard.q1', '$management']) {
      const peer = await session();
      peer.write(attach(address, false));
      await until(`attach to ${address}`, () => named(peer, 'attach').length > 0 && named(peer, 'flow').length > 0);
      peer.write(transfer([uint(0), uint(0), binary(Buffer.from('h')), uint(0), boolean(false)], payload));
      if (address === 'guard.q1') {
        await until('disposition', () => named(peer, 'disposition').length > 0);
        const state = named(peer, 'disposition')[0]!.body!.fields.state as Composite;
        expect(state.def.name).toBe('rejected');
        expect(((state.fields.error as Composite).fields.description as string)).toMatch(/4294967295 elements/);
      }
      await assertHealthy();
      peer.write(close);
      peer.destroy();
    }
  });

  it("issue-20 case 2 - a session's first transfer without a delivery-id gets a close with amqp:invalid-field", async () => {
    const peer = await session();
    peer.write(attach('guard.q2', false));
    await until('attach from the broker', () => named(peer, 'attach').length > 0);
    peer.write(transfer([uint(0), nul, binary(Buffer.from('t')), uint(0), boolean(true)], messageBody('no id')));
    await expectClosedWith(peer, /^amqp:invalid-field$/, /transfer\.delivery-id is mandatory/);
    await assertHealthy();
  });

  it('issue-20 case 5 - a disposition of first=0, last=0xffffffff settles what is outstanding without stalling the broker', async () => {
    await healthy.send('guard.q5', ['one', 'two']);
    const peer = await session();
    peer.write(attach('guard.q5', true), flow(10));
    await until('two transfers', () => named(peer, 'transfer').length >= 2);
    peer.write(disposition(0, U32));
    // Repeated, as a hostile client would: each one was ~9 s of a stopped broker.
    for (let i = 0; i < 5; i++) peer.write(disposition(0, U32));
    await assertHealthy();
    peer.write(close);
    await until('close from the broker', () => named(peer, 'close').length > 0);
    peer.destroy();
    // Both were accepted by that one disposition: the next message is the only one left.
    await healthy.send('guard.q5', ['three']);
    const got = await healthy.receiveAndAccept('guard.q5', 1);
    expect(bodyOf(got[0]!)).toBe('three');
  });

  it('issue-20 case 6 - a multi-frame delivery growing past max-message-size gets its link detached with amqp:link:message-size-exceeded', async () => {
    const peer = await session();
    peer.write(attach('guard.q6', false));
    await until('credit from the broker', () => named(peer, 'flow').length > 0);
    const chunk = Buffer.alloc(4000, 0x41);
    const first = transfer([uint(0), uint(0), binary(Buffer.from('big')), uint(0), boolean(false), boolean(true)], chunk);
    const more = transfer([uint(0), nul, nul, nul, nul, boolean(true)], chunk);
    peer.write(first);
    // Twice max-message-size, never finished: rhea buffered all of it (1 GiB in the issue).
    for (let i = 0; i < (2 * MAX_MESSAGE) / chunk.length; i++) peer.write(more);
    await until('detach from the broker', () => errorOf(peer, 'detach') !== undefined);
    expect(errorOf(peer, 'detach')).toEqual({ condition: 'amqp:link:message-size-exceeded', description: expect.stringMatching(/over max-message-size 65536/) });
    // The rest of that delivery and the connection are still handled.
    peer.write(transfer([uint(0), nul, nul, nul, nul, boolean(false)], chunk));
    peer.write(frame(performative(0x16, [uint(0), boolean(true)])), close);
    await until('close from the broker', () => named(peer, 'close').length > 0);
    expect(errorOf(peer, 'close')).toBeUndefined();
    peer.destroy();
    await assertHealthy();
  });

  it('multi-frame deliveries left unfinished cannot fill memory: past the memory alarm each link still growing one beyond an allowance (1 MiB) is detached with amqp:resource-limit-exceeded', async () => {
    // A message is refused by the alarm only once whole: before, six links each holding
    // an unfinished delivery grew past memory-limit and on, as far as the client sent.
    const small = await TestBroker.start({ args: ['--memory-limit', '64MiB'] });
    // Made now: during the alarm no queue is auto-created.
    const early = await TestClient.connect({ port: small.port });
    expect((await early.send('guard.after', ['before'], { timeoutMs: 5000 }))[0]!.state).toBe('accepted');
    await early.close();
    const LINKS = 6;
    const peer = await session(small.port);
    for (let h = 0; h < LINKS; h++) peer.write(attach('guard.partial', false, h));
    await until('credit on every link', () => named(peer, 'flow').length >= LINKS);
    const chunk = Buffer.alloc(60_000, 0x41);
    for (let h = 0; h < LINKS; h++) peer.write(transfer([uint(h), uint(h), binary(Buffer.from(`t${h}`)), uint(0), boolean(false), boolean(true)], chunk));
    const detached = () => named(peer, 'detach').length;
    // Up to 6 x 60 MiB, a round of frames at a time, until every link is detached.
    for (let round = 0; round < 1000 && detached() < LINKS && !peer.closed; round++) {
      for (let h = 0; h < LINKS; h++) peer.write(transfer([uint(h), nul, nul, nul, nul, boolean(true)], chunk));
      if (round % 20 === 19) await new Promise((r) => setTimeout(r, 20));
    }
    await until('every link detached', () => detached() === LINKS, 30_000);
    const errors = named(peer, 'detach').map((f) => f.body?.fields.error as Composite | undefined);
    for (const e of errors) {
      expect(e?.fields.condition).toBe('amqp:resource-limit-exceeded');
      expect(e?.fields.description).toMatch(/is not taken further \(\d+ bytes so far\): .*memory-limit/);
    }
    expect(peer.closed).toBe(false);
    peer.destroy();
    // What they held is freed: the alarm clears and a whole message is taken again.
    const client = await TestClient.connect({ port: small.port });
    let state = '';
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && state !== 'accepted') {
      state = (await client.send('guard.after', ['after'], { timeoutMs: 5000 }))[0]!.state;
      if (state !== 'accepted') await new Promise((r) => setTimeout(r, 250));
    }
    expect(state).toBe('accepted');
    await client.close();
    expect(small.alive).toBe(true);
    await small.stop();
  });

  it("issue-20 case 6 - a peer's idle-time-out of 0xffffffff does not make the broker heartbeat every millisecond", async () => {
    const peer = await RawPeer.connect(broker.port);
    peer.write(AMQP, open([nul, uint(U32)]), begin);
    await until('begin from the broker', () => named(peer, 'begin').length > 0);
    // Wait for 50 heartbeats, or 2 s: before the guard they came every millisecond.
    await waitFor(() => peer.frames().filter((f) => f.body === undefined).length >= 50, { timeout: 2000 }).catch(() => undefined);
    expect(peer.frames().filter((f) => f.body === undefined).length).toBeLessThan(5);
    peer.write(close);
    peer.destroy();
    // One the broker cannot honour is refused with a reason.
    const tiny = await RawPeer.connect(broker.port);
    tiny.write(AMQP, open([nul, uint(1)]));
    await expectClosedWith(tiny, /^amqp:invalid-field$/, /idle-time-out 1 ms/);
    await assertHealthy();
  });

  it('a max-frame-size below the spec minimum of 512 is refused, not obeyed one tiny frame at a time', async () => {
    const small = await RawPeer.connect(broker.port);
    small.write(AMQP, frame(performative(0x10, [string('guard-test'), nul, uint(100)])));
    await expectClosedWith(small, /^amqp:invalid-field$/, /max-frame-size 100 is below the spec's minimum of 512/);
    // 512 itself is allowed.
    const least = await RawPeer.connect(broker.port);
    least.write(AMQP, frame(performative(0x10, [string('guard-test'), nul, uint(512)])), begin);
    await until('begin from the broker', () => named(least, 'begin').length > 0);
    least.write(close);
    least.destroy();
    await assertHealthy();
  });

  it('issue-20 case 7 - every wrongly typed field gets an error close naming the field, and no client text reaches the console', async () => {
    const forged = '\n{"level":60,"msg":"FORGED"}\n';
    const source = (fields: AmqpValue[]) => performative(0x28, fields);
    const linkWith = (at: number, value: AmqpValue) => {
      const f: AmqpValue[] = [string('l'), uint(0), boolean(false), nul, nul, source([string('q')]), performative(0x29, [string('q')])];
      f[at] = value;
      return frame(performative(0x12, f));
    };
    const cases: [string, Buffer[], RegExp][] = [
      ['open.container-id', [frame(performative(0x10, [uint(7)]))], /open\.container-id/],
      ['open.max-frame-size', [frame(performative(0x10, [string('c'), nul, string('big')]))], /open\.max-frame-size/],
      ['open.channel-max', [frame(performative(0x10, [string('c'), nul, nul, uint(9)]))], /open\.channel-max/],
      ['begin.next-outgoing-id', [open(), frame(performative(0x11, [nul, nul, uint(1), uint(1)]))], /begin\.next-outgoing-id is mandatory/],
      ['begin.incoming-window', [open(), frame(performative(0x11, [nul, uint(0), string('w'), uint(1)]))], /begin\.incoming-window/],
      ['attach.role', [open(), begin, linkWith(2, amqp.ubyte(0))], /attach\.role/],
      ['attach.handle', [open(), begin, linkWith(1, ulong(0))], /attach\.handle/],
      ['attach.snd-settle-mode', [open(), begin, linkWith(3, amqp.ubyte(7))], /attach\.snd-settle-mode/],
      ['attach.source.durable', [open(), begin, linkWith(5, source([string('q'), string('yes')]))], /attach\.source\.durable/],
      ['attach.target (forged descriptor)', [open(), begin, linkWith(6, described(symbol(forged), list([])))], /attach\.target/],
      ['flow.link-credit', [open(), begin, frame(performative(0x13, [uint(0), uint(1), uint(0), uint(1), nul, nul, amqp.int(5)]))], /flow\.link-credit/],
      ['transfer.delivery-tag', [open(), begin, linkWith(2, boolean(false)), transfer([uint(0), uint(0), binary(Buffer.alloc(40))], messageBody('x'))], /transfer\.delivery-tag/],
      ['transfer.settled', [open(), begin, linkWith(2, boolean(false)), transfer([uint(0), uint(0), binary(Buffer.from('t')), uint(0), uint(1)], messageBody('x'))], /transfer\.settled/],
      ['disposition.first', [open(), begin, frame(performative(0x15, [boolean(true), string('0')]))], /disposition\.first/],
      ['disposition.state (forged outcome)', [open(), begin, frame(performative(0x15, [boolean(true), uint(0), uint(0), boolean(true), described(symbol(forged), list([]))]))], /disposition\.state/],
      ['detach.error.condition', [open(), begin, linkWith(2, boolean(false)), frame(performative(0x16, [uint(0), boolean(true), performative(0x1d, [string('not a symbol')])]))], /detach\.error\.condition/],
      ['end.error', [open(), begin, frame(performative(0x17, [list([])]))], /end\.error/],
      ['close.error', [open(), frame(performative(0x18, [string('bye')]))], /close\.error/],
    ];
    for (const [field, frames, description] of cases) {
      const peer = await RawPeer.connect(broker.port);
      peer.write(AMQP, ...frames);
      await until(`${field}: an answer`, () => errorOf(peer, 'close') !== undefined || peer.closed);
      const error = errorOf(peer, 'close');
      expect(error?.condition, field).toMatch(/^amqp:(invalid-field|decode-error)$/);
      expect(error?.description, field).toMatch(description);
      peer.destroy();
    }
    // In a message too: a management request whose section has a made-up descriptor (rhea printed it).
    const peer = await session();
    peer.write(attach('$management', false));
    await until('attach to $management', () => named(peer, 'flow').length > 0);
    peer.write(transfer([uint(0), uint(0), binary(Buffer.from('f')), uint(0), boolean(true)], Buffer.concat([encode(described(symbol(forged), string(forged))), messageBody('x')])));
    await assertHealthy();
    peer.write(close);
    peer.destroy();
    await waitFor(() => broker.stderr.includes('unreadable management request'), { name: 'the refusal logged' });
    const lines = `${broker.stdout}\n${broker.stderr}`.split('\n');
    expect(lines.filter((l) => l.startsWith('{"level":60,"msg":"FORGED"'))).toEqual([]);
    // The log is JSON lines: client text appears only as an escaped field value, never as rhea's console text.
    expect(`${broker.stdout}\n${broker.stderr}`).not.toMatch(/Unknown terminus|unrecognised outcome|did not recognise message section/);
    for (const line of lines.filter((l) => l.includes('FORGED'))) expect(() => JSON.parse(line), line).not.toThrow();
  });
});

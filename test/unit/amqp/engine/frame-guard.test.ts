// The frame guard driven directly, with a host that records what it is told:
// what passes comes out byte for byte however the input is cut, and each rule
// (order of frames, handles, delivery-ids, disposition ranges, message size,
// idle-time-out) is enforced with the spec's condition.
import { describe, expect, it } from 'vitest';
import type { Composite } from '../../../../src/amqp/engine/composite.js';
import { encode } from '../../../../src/amqp/engine/encoder.js';
import { type AmqpError } from '../../../../src/amqp/engine/errors.js';
import { FrameGuard, type GuardViolation, type UnsettledRange } from '../../../../src/amqp/engine/frame-guard.js';
import { FrameType, encodeFrame, protocolHeader, readFrame, readFrameHeader } from '../../../../src/amqp/engine/frames.js';
import { type AmqpValue, amqp } from '../../../../src/amqp/engine/types.js';
import { prng } from '../../../../src/util/prng.js';

const { uint, ulong, string, symbol, boolean, binary, list, described } = amqp;
const nul = amqp.null();
const p = (code: number, fields: AmqpValue[]): AmqpValue => described(ulong(code), list(fields));
const f = (perf: AmqpValue, payload?: Buffer): Buffer => encodeFrame(FrameType.amqp, 0, perf, payload);
const OPEN = f(p(0x10, [string('c')]));
const BEGIN = f(p(0x11, [nul, uint(0), uint(100), uint(100)]));
const ATTACH_SENDER = f(p(0x12, [string('l'), uint(0), boolean(false), nul, nul, p(0x28, []), p(0x29, [string('q')])]));
const transfer = (id: number | undefined, more: boolean, payload: Buffer) => f(p(0x14, [uint(0), id === undefined ? nul : uint(id), binary(Buffer.from('t')), uint(0), boolean(false), boolean(more)]), payload);
const disposition = (first: number, last: number) => f(p(0x15, [boolean(true), uint(first), uint(last), boolean(true), p(0x24, [])]));

class Recorder {
  forwarded: Buffer[] = [];
  violations: GuardViolation[] = [];
  oversized: { channel: number; handle: number; error: AmqpError }[] = [];
  unsettledRange: UnsettledRange | undefined = { first: 0, last: 1000 };
  readonly guard: FrameGuard;

  constructor(maxMessageSize = 0) {
    this.guard = new FrameGuard(
      {
        forward: (b) => this.forwarded.push(Buffer.from(b)),
        refuse: (v) => this.violations.push(v),
        unsettled: () => this.unsettledRange,
        oversize: (channel, handle, error) => this.oversized.push({ channel, handle, error }),
      },
      { maxFrameSize: 4096, maxMessageSize, saslFrameLimit: 512, maxPeerIdleTimeoutMs: 3_600_000, minPeerIdleTimeoutMs: 100 },
    );
  }

  get output(): Buffer {
    return Buffer.concat(this.forwarded);
  }

  /** The performatives forwarded, decoded again. */
  get performatives(): Composite[] {
    const out: Composite[] = [];
    const b = this.output;
    let at = 0;
    while (at < b.length) {
      if (b.toString('latin1', at, at + 4) === 'AMQP') {
        at += 8;
        continue;
      }
      const h = readFrameHeader(b, at, 1 << 20, b[at + 5] as 0 | 1);
      const body = readFrame(b, at, h).body;
      if (body) out.push(body);
      at += h.size;
    }
    return out;
  }
}

const conversation = (): Buffer[] => [
  protocolHeader(3),
  encodeFrame(FrameType.sasl, 0, p(0x41, [symbol('PLAIN'), binary(Buffer.from('\0u\0p'))])),
  protocolHeader(0),
  OPEN,
  BEGIN,
  ATTACH_SENDER,
  transfer(0, true, Buffer.alloc(300, 1)),
  transfer(undefined, false, Buffer.alloc(300, 2)),
  transfer(1, false, encode(described(ulong(0x77), string('x')))),
  f(p(0x13, [uint(0), uint(100), uint(2), uint(100), uint(0), uint(2), uint(10)])),
  disposition(0, 1),
  encodeFrame(FrameType.amqp, 0, undefined), // a heartbeat
  f(p(0x16, [uint(0), boolean(true)])),
  f(p(0x17, [])),
  f(p(0x18, [])),
];

describe('frame guard - what passes', () => {
  it('frame guard - a valid conversation passes unchanged, in one piece', () => {
    const r = new Recorder();
    const input = Buffer.concat(conversation());
    r.guard.push(input);
    expect(r.violations).toEqual([]);
    expect(r.output.equals(input)).toBe(true);
    expect(r.forwarded.length).toBe(1);
  });

  it('frame guard - fed one byte at a time, or cut at random, the same bytes come out in order', () => {
    const input = Buffer.concat(conversation());
    const byByte = new Recorder();
    for (let i = 0; i < input.length; i++) byByte.guard.push(input.subarray(i, i + 1));
    expect(byByte.violations).toEqual([]);
    expect(byByte.output.equals(input)).toBe(true);
    for (const seed of [1, 2, 3, 4, 5]) {
      const random = prng(seed);
      const r = new Recorder();
      for (let at = 0; at < input.length; ) {
        const n = 1 + Math.floor(random() * 200);
        r.guard.push(input.subarray(at, at + n));
        at += n;
      }
      expect(r.violations).toEqual([]);
      expect(r.output.equals(input), `seed ${seed}`).toBe(true);
    }
  });

  it('frame guard - after a close nothing more is handed on', () => {
    const r = new Recorder();
    r.guard.push(Buffer.concat([protocolHeader(0), OPEN, f(p(0x18, [])), BEGIN]));
    expect(r.performatives.map((x) => x.def.name)).toEqual(['open', 'close']);
    expect(r.violations).toEqual([]);
  });
});

describe('frame guard - what is refused', () => {
  const refused = (frames: Buffer[], condition: string, description: RegExp, r = new Recorder()) => {
    r.guard.push(Buffer.concat(frames));
    expect(r.violations.map((v) => v.condition)).toEqual([condition]);
    expect(r.violations[0]!.description).toMatch(description);
    // Nothing after the violation: one more good frame is not handed on.
    const before = r.output.length;
    r.guard.push(BEGIN);
    expect(r.output.length).toBe(before);
    return r;
  };

  it('frame guard - bad protocol headers and frame headers are framing errors', () => {
    refused([Buffer.from('AMQP\x00\x01\x00\x07', 'latin1')], 'amqp:connection:framing-error', /version 1.0.7/);
    refused([Buffer.from('AMQP\x02\x01\x00\x00', 'latin1')], 'amqp:connection:framing-error', /protocol id 2/);
    refused([Buffer.from('GET / HTTP/1.1\r\n', 'latin1')], 'amqp:connection:framing-error', /not an AMQP protocol header/);
    refused([protocolHeader(0), Buffer.from([0, 0, 0, 4, 2, 0, 0, 0])], 'amqp:connection:framing-error', /below the minimum of 8/);
    refused([protocolHeader(0), Buffer.from([0, 0, 0x10, 0x01, 2, 0, 0, 0])], 'amqp:connection:framing-error', /over max-frame-size 4096/);
    refused([protocolHeader(0), Buffer.from([0, 0, 0, 8, 1, 0, 0, 0])], 'amqp:connection:framing-error', /data offset 1/);
    refused([protocolHeader(0), Buffer.from([0, 0, 0, 8, 3, 0, 0, 0])], 'amqp:connection:framing-error', /beyond the frame/);
    refused([protocolHeader(3), Buffer.from([0, 0, 2, 1, 2, 1, 0, 0])], 'amqp:connection:framing-error', /over max-frame-size 512/);
    refused([protocolHeader(3), OPEN], 'amqp:connection:framing-error', /frame type 0 where a SASL frame/);
    refused([protocolHeader(0), encodeFrame(FrameType.sasl, 0, p(0x41, [symbol('PLAIN')]))], 'amqp:connection:framing-error', /frame type 1/);
  });

  it('frame guard - issue-20 case 1: the 32-byte sasl-init is a decode-error before anything is read', () => {
    const r = refused([Buffer.from('414d5150030100000000001802010000005341c00b01f000000005ffffffff98', 'hex')], 'amqp:decode-error', /4294967295 elements of uuid/);
    expect(r.violations[0]!.stage).toBe('sasl');
    expect(r.output.equals(protocolHeader(3))).toBe(true);
  });

  it('frame guard - frames out of order: before open, open twice, sessions and handles that do not exist', () => {
    refused([protocolHeader(0), BEGIN], 'amqp:connection:framing-error', /begin before open/);
    refused([protocolHeader(0), OPEN, OPEN], 'amqp:connection:framing-error', /open received twice/);
    refused([protocolHeader(0), OPEN, ATTACH_SENDER], 'amqp:connection:framing-error', /attach on channel 0, where no session/);
    refused([protocolHeader(0), OPEN, BEGIN, BEGIN], 'amqp:illegal-state', /already begun/);
    refused([protocolHeader(0), OPEN, BEGIN, transfer(0, false, Buffer.alloc(1))], 'amqp:session:unattached-handle', /handle 0, which is not attached/);
    refused([protocolHeader(0), OPEN, BEGIN, ATTACH_SENDER, ATTACH_SENDER], 'amqp:session:handle-in-use', /handle 0/);
    refused([protocolHeader(3), encodeFrame(FrameType.sasl, 0, p(0x44, [amqp.ubyte(0)]))], 'amqp:not-allowed', /sasl-outcome is not a frame a client sends/);
    const init = encodeFrame(FrameType.sasl, 0, p(0x41, [symbol('PLAIN')]));
    refused([protocolHeader(3), init, init], 'amqp:not-allowed', /sasl-init received twice/);
    refused([protocolHeader(3), encodeFrame(FrameType.sasl, 0, p(0x43, [binary(Buffer.from('r'))]))], 'amqp:not-allowed', /sasl-response before sasl-init/);
  });

  it('frame guard - issue-20 case 2: delivery-ids are mandatory on a first transfer and follow each other', () => {
    const start = [protocolHeader(0), OPEN, BEGIN, ATTACH_SENDER];
    refused([...start, transfer(undefined, false, Buffer.alloc(1))], 'amqp:invalid-field', /delivery-id is mandatory/);
    refused([...start, transfer(0, false, Buffer.alloc(1)), transfer(5, false, Buffer.alloc(1))], 'amqp:invalid-field', /delivery-id 5 where the session's next delivery is 1/);
    refused([...start, transfer(0, true, Buffer.alloc(1)), transfer(1, false, Buffer.alloc(1))], 'amqp:invalid-field', /delivery 0 on this link is not complete/);
  });

  it('frame guard - issue-20 case 5: a disposition range is narrowed to the outstanding deliveries, or dropped', () => {
    const r = new Recorder();
    r.unsettledRange = { first: 5, last: 9 };
    r.guard.push(Buffer.concat([protocolHeader(0), OPEN, BEGIN, disposition(0, 0xffffffff), disposition(6, 7), disposition(20, 30)]));
    expect(r.violations).toEqual([]);
    const d = r.performatives.filter((x) => x.def.name === 'disposition').map((x) => [x.fields.first, x.fields.last, (x.fields.state as Composite).def.name]);
    expect(d).toEqual([
      [5, 9, 'accepted'],
      [6, 7, 'accepted'],
    ]);
    r.unsettledRange = undefined;
    const before = r.output.length;
    r.guard.push(disposition(0, 3));
    expect(r.output.length).toBe(before);
  });

  it('frame guard - issue-20 case 6: a delivery past max-message-size is reported once and the rest passes without payload', () => {
    const r = new Recorder(1000);
    r.guard.push(Buffer.concat([protocolHeader(0), OPEN, BEGIN, ATTACH_SENDER]));
    for (let i = 0; i < 10; i++) r.guard.push(transfer(i === 0 ? 0 : undefined, i < 9, Buffer.alloc(400, 7)));
    expect(r.violations).toEqual([]);
    expect(r.oversized.map((o) => [o.channel, o.handle, o.error.condition])).toEqual([[0, 0, 'amqp:link:message-size-exceeded']]);
    expect(r.oversized[0]!.error.description).toMatch(/delivery 0 reached 1200 bytes, over max-message-size 1000/);
    const transfers = r.performatives.filter((x) => x.def.name === 'transfer');
    expect(transfers.length).toBe(10);
    // Two frames (800 bytes) went on whole; from the one that crossed the limit, none of the payload.
    expect(r.output.length).toBeLessThan(Buffer.concat([protocolHeader(0), OPEN, BEGIN, ATTACH_SENDER]).length + 10 * 40 + 800);
    // The next delivery on the link is counted afresh.
    r.guard.push(transfer(1, false, Buffer.alloc(10)));
    expect(r.oversized.length).toBe(1);
  });

  it("frame guard - issue-20 case 6: a peer's idle-time-out over an hour is lowered to an hour; one under 100 ms is refused", () => {
    const r = new Recorder();
    r.guard.push(Buffer.concat([protocolHeader(0), f(p(0x10, [string('c'), nul, nul, nul, uint(0xffffffff)]))]));
    expect(r.performatives[0]!.fields['idle-time-out']).toBe(3_600_000);
    expect(r.performatives[0]!.fields['container-id']).toBe('c');
    const v = refused([protocolHeader(0), f(p(0x10, [string('c'), nul, nul, nul, uint(1)]))], 'amqp:invalid-field', /idle-time-out 1 ms/);
    expect(v.violations[0]!.openForwarded).toBe(false);
  });

  it('frame guard - issue-20 case 7: a wrongly typed field is refused before the library sees it', () => {
    const r = refused([protocolHeader(0), OPEN, BEGIN, f(p(0x12, [string('l'), uint(0), amqp.ubyte(0)]))], 'amqp:invalid-field', /attach\.role must be of type boolean, not a ubyte/);
    expect(r.performatives.map((x) => x.def.name)).toEqual(['open', 'begin']);
  });
});

// Frames of ours against the peer's max-frame-size (2.7.1), where their size depends on
// what the peer chose: an attach repeating its termini is refused instead of going over
// the limit, in either role, and a rejected outcome's description is cut to fit.
import { describe, expect, it } from 'vitest';
import type { Composite } from '../../../../src/amqp/engine/composite.js';
import { terminus } from '../../../../src/amqp/engine/link.js';
import { amqp } from '../../../../src/amqp/engine/types.js';
import { AMQP_HEADER, CODE, composite, frame, message, perf, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer, type Written } from './scripted-peer.js';

type FrameOut = Written & { kind: 'frame' };
const framesOf = (w: Written[]): FrameOut[] => w.filter((x): x is FrameOut => x.kind === 'frame');

/** An address of about 2 KB: legal in the peer's attach (bounded by our max-frame-size), too long to repeat within its own 512. */
const LONG = `amq.topic/${'k'.repeat(2000)}`;
const ECHO_OVER = /^the attach's echo would be (\d+) bytes, over the peer's max-frame-size 512: the link's source or target \(address, filter, capabilities\) is too long to repeat$/;

/** A server-role engine whose peer opened with max-frame-size 512, began a session and attached `name` to `address`. */
function attached(role: 'sender' | 'receiver', address: string, name = 'l'): ScriptedPeer {
  const p = new ScriptedPeer();
  p.feed(AMQP_HEADER, perf.open({ maxFrameSize: 512 }), perf.begin(), perf.attach({ name, handle: 0, role, address }));
  return p;
}

function expectAllWithin512(frames: FrameOut[]): void {
  for (const f of frames) expect(f.size, `${f.name} of ${f.size} bytes`).toBeLessThanOrEqual(512);
}

describe('engine frame size - attach', () => {
  for (const role of ['sender', 'receiver'] as const) {
    it(`engine frame size - a ${role}'s attach whose echo would pass the peer's max-frame-size is refused: the echo without termini, then a detach with amqp:frame-size-too-small`, () => {
      const p = attached(role, LONG);
      const link = p.events.find((e) => e.event === 'attach')!.link!;
      expect(link.target?.fields.address ?? link.source?.fields.address).toBe(LONG);
      const out = framesOf(p.written());
      expectAllWithin512(out);
      const [attach, detach] = out.filter((f) => f.name === 'attach' || f.name === 'detach');
      expect(attach!.name).toBe('attach');
      expect(attach!.fields).toMatchObject({ name: 'l', handle: 0, role: role === 'sender' });
      expect(attach!.fields.source).toBeUndefined();
      expect(attach!.fields.target).toBeUndefined();
      expect(detach!.name).toBe('detach');
      expect(detach!.fields.closed).toBe(true);
      const error = p.errorOf('detach', [detach!])!;
      expect(error.condition).toBe('amqp:frame-size-too-small');
      expect(Number(ECHO_OVER.exec(error.description ?? '')?.[1])).toBeGreaterThan(2000);
      // Nothing else for the link: the credit the host gave after accepting is not sent.
      expect(out.filter((f) => f.name === 'flow')).toHaveLength(0);
      // The host accepted in its handler; it hears of the refusal once the peer answers.
      expect(p.eventNames()).not.toContain('detach');
      p.feed(perf.detach(0));
      const told = p.events.find((e) => e.event === 'detach')!;
      expect(told.link).toBe(link);
      expect(told.error).toEqual(error);
      expect(framesOf(p.written())).toHaveLength(0);
      // The session and the connection go on: the handle is free, and a link that fits is attached as usual.
      p.feed(perf.attach({ name: 'ok', handle: 0, role, address: 'q' }));
      const [again] = framesOf(p.written()).filter((f) => f.name === 'attach');
      expect(again!.fields).toMatchObject({ name: 'ok', handle: 0 });
      const terminusOut = (role === 'sender' ? again!.fields.target : again!.fields.source) as Composite;
      expect(terminusOut.fields.address).toBe('q');
      expect(p.conn.isOpen).toBe(true);
      expect(p.eventNames().filter((e) => e === 'end' || e === 'close')).toEqual([]);
    });
  }

  it('engine frame size - an attach that fits exactly is sent whole; one byte more is refused', () => {
    // The echo of a target address of n bytes: find the n at which it is 512 bytes (from
    // 300 on, the address, the target and the attach all have their 32-bit size encodings).
    const sizeFor = (n: number): number => {
      const p = attached('sender', 'a'.repeat(n));
      const attach = framesOf(p.written()).find((f) => f.name === 'attach')!;
      return attach.fields.target ? attach.size : -1;
    };
    const n = 300 + (512 - sizeFor(300));
    expect(sizeFor(n)).toBe(512);
    expect(sizeFor(n + 1)).toBe(-1);
  });

  it("engine frame size - a host's refusal is unchanged: its own condition, not frame-size-too-small", () => {
    const p = new ScriptedPeer({}, { onLinkAttach: (l) => l.refuse({ condition: 'amqp:not-found', description: 'no such node' }) });
    p.feed(AMQP_HEADER, perf.open({ maxFrameSize: 512 }), perf.begin(), perf.attach({ name: 'l', handle: 0, role: 'sender', address: LONG }));
    const out = framesOf(p.written());
    expectAllWithin512(out);
    expect(p.errorOf('detach', out)).toEqual({ condition: 'amqp:not-found', description: 'no such node' });
  });

  it("engine frame size - a link name too long for any attach within the peer's max-frame-size ends the session with amqp:frame-size-too-small", () => {
    const p = attached('sender', 'q', 'n'.repeat(600));
    const out = framesOf(p.written());
    expectAllWithin512(out);
    expect(out.map((f) => f.name)).not.toContain('attach');
    const error = p.errorOf('end', out)!;
    expect(error.condition).toBe('amqp:frame-size-too-small');
    expect(error.description).toMatch(/^the attach's echo would be \d+ bytes even without its source and target, over the peer's max-frame-size 512: the link's name \(600 bytes\) is too long$/);
    expect(p.events.find((e) => e.event === 'end')!.error).toEqual(error);
    expect(p.conn.isOpen).toBe(true);
  });

  it("engine frame size - as a client, an attach of ours over the server's max-frame-size goes without termini and is detached; the host hears no open, then the refusal", () => {
    const p = new ScriptedPeer({ role: 'client' });
    p.feed(AMQP_HEADER, perf.open({ maxFrameSize: 512 }));
    const session = p.conn.beginSession();
    p.feed(frame(composite(CODE.begin, [v.ushort(session.channel), v.uint(0), v.uint(2048), v.uint(2048)])));
    p.written();
    const link = session.attach('mine', 'receiver', { source: terminus('source', { address: LONG }), target: terminus('target', {}) });
    const out = framesOf(p.written());
    expectAllWithin512(out);
    expect(out.map((f) => f.name)).toEqual(['attach', 'detach']);
    expect(out[0]!.fields.source).toBeUndefined();
    const error = p.errorOf('detach', out)!;
    expect(error.condition).toBe('amqp:frame-size-too-small');
    expect(error.description).toMatch(/^the attach would be \d+ bytes, over the peer's max-frame-size 512$/);
    // The server answers as to any attach (here with a terminus), then our detach.
    p.feed(perf.attach({ name: 'mine', handle: 0, role: 'sender', address: 'elsewhere' }), perf.detach(0));
    expect(p.eventNames()).not.toContain('link-open');
    const told = p.events.find((e) => e.event === 'detach')!;
    expect(told.link).toBe(link);
    expect(told.error).toEqual(error);
    expect(session.linkCount).toBe(0);
  });
});

describe('engine frame size - disposition', () => {
  it("engine frame size - a rejected outcome whose description would pass the peer's max-frame-size is cut to fit, its condition and info kept", () => {
    const p = attached('sender', 'q');
    p.written();
    p.feed(perf.transfer({ handle: 0, deliveryId: 0, tag: 't', settled: false }, message('m')));
    const delivery = p.events.find((e) => e.event === 'transfer')!.delivery!;
    const info = amqp.map([[amqp.symbol('queue'), amqp.string('q')]]);
    delivery.reject({ condition: 'amqp:not-found', description: `no queue '${'é'.repeat(400)}x'`, info });
    const [disposition] = framesOf(p.written()).filter((f) => f.name === 'disposition');
    expect(disposition!.size).toBeLessThanOrEqual(512);
    const state = disposition!.fields.state as Composite;
    expect(state.def.name).toBe('rejected');
    const error = (state.fields.error as Composite).fields;
    expect(error.condition).toBe('amqp:not-found');
    expect(error.description).toMatch(/^no queue 'éé+\.\.\. \(cut to fit the peer's max-frame-size\)$/);
    expect(error.info).toMatchObject({ type: 'map', value: [[{ type: 'symbol', value: 'queue' }, { type: 'string', value: 'q' }]] });
  });
});

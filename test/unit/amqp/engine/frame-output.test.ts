// The frame writer (frame-output.ts) against the generic encoder: for every
// composite type of the spec's tables, seeded random field values (every field
// type, widths at their boundaries, absent fields before and after present
// ones, lists that need list32), written one after another into one output so
// that frames cross slab boundaries, must give exactly the bytes of
// encodeFrame(describedList(...)). Payloads up to COPY_LIMIT are copied after
// their head; bigger ones are handed on as the same Buffer, never copied.
import { describe, expect, it } from 'vitest';
import { COMPOSITES } from '../../../../src/amqp/engine/definitions.js';
import { COPY_LIMIT, FrameOutput } from '../../../../src/amqp/engine/frame-output.js';
import { FrameType, encodeFrame } from '../../../../src/amqp/engine/frames.js';
import { describedList } from '../../../../src/amqp/engine/performative.js';
import { randomFields, seeded } from './random-composites.js';

describe('engine frame output', () => {
  it('writes every composite type byte for byte as the generic encoder, across slab boundaries', () => {
    const rnd = seeded(20);
    const out = new FrameOutput();
    const expected: Buffer[] = [];
    for (let i = 0; i < 2000; i++) {
      const def = COMPOSITES[Math.floor(rnd() * COMPOSITES.length)]!;
      const fields = randomFields(def, rnd);
      const channel = Math.floor(rnd() * 65536);
      const payload = rnd() < 0.3 ? Buffer.alloc(Math.floor(rnd() * 3000), i & 0xff) : undefined;
      expected.push(encodeFrame(FrameType.amqp, channel, describedList(def.name, fields), payload));
      out.beginFrame(FrameType.amqp, channel);
      out.performative(def, fields);
      out.endFrame(payload);
      // Take now and then, as the transport does once per tick.
      if (rnd() < 0.05) expect(Buffer.concat(out.take()).equals(Buffer.concat(expected.splice(0)))).toBe(true);
    }
    expect(Buffer.concat(out.take()).equals(Buffer.concat(expected))).toBe(true);
    expect(out.isEmpty).toBe(true);
  });

  it('copies a small payload after its head and hands a large one on as the same buffer', () => {
    const out = new FrameOutput();
    const small = Buffer.alloc(COPY_LIMIT, 1);
    const large = Buffer.alloc(COPY_LIMIT + 1, 2);
    for (const p of [small, large, small]) {
      out.beginFrame(FrameType.amqp, 0);
      out.performative(COMPOSITES.find((c) => c.name === 'transfer')!, { handle: 0, more: false });
      out.endFrame(p);
    }
    const chunks = out.take();
    expect(chunks.filter((c) => c === large)).toHaveLength(1);
    expect(chunks.some((c) => c === small)).toBe(false);
    const want = [small, large, small].map((p) => encodeFrame(FrameType.amqp, 0, describedList('transfer', { handle: 0, more: false }), p));
    expect(Buffer.concat(chunks).equals(Buffer.concat(want))).toBe(true);
  });

  it('leaves out a frame whose encoding threw, and nothing half written follows', () => {
    const out = new FrameOutput();
    const flow = COMPOSITES.find((c) => c.name === 'flow')!;
    out.beginFrame(FrameType.amqp, 1);
    expect(() => out.performative(flow, { 'incoming-window': 'not a number' })).toThrow(/cannot encode/);
    out.discardFrame();
    out.beginFrame(FrameType.amqp, 1);
    out.performative(flow, { 'incoming-window': 5, 'next-outgoing-id': 0, 'outgoing-window': 9 });
    out.endFrame();
    const want = encodeFrame(FrameType.amqp, 1, describedList('flow', { 'incoming-window': 5, 'next-outgoing-id': 0, 'outgoing-window': 9 }));
    expect(Buffer.concat(out.take())).toEqual(want);
  });

  it('an idle connection keeps no slab: output taken after a light tick leaves nothing pinned for the next', () => {
    const out = new FrameOutput();
    out.raw(Buffer.from('AMQP\x00\x01\x00\x00', 'latin1'));
    const [first] = out.take();
    out.raw(Buffer.from('AMQP\x00\x01\x00\x00', 'latin1'));
    const [second] = out.take();
    // A light tick's bytes come from a fresh small slab each time: the first view is never written again.
    expect(first!.toString('latin1')).toBe('AMQP\x00\x01\x00\x00');
    expect(second!.buffer === first!.buffer && second!.byteOffset === first!.byteOffset).toBe(false);
  });
});

// Message-annotations added by a modified outcome (AMQP 1.0 3.4.5): merged over what a
// message held (mergeAddedAnnotations), and into the message's own section on the way
// out (outgoingBytes), a new section where the spec orders it when it had none. The
// result is read back by rhea's decoder, which nobody here wrote.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { Decoder } from '../../../src/amqp/engine/decoder.js';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { amqp, type AmqpValue } from '../../../src/amqp/engine/types.js';
import { MAX_ADDED_ANNOTATIONS, mergeAddedAnnotations, outgoingBytes, parseIncoming } from '../../../src/amqp/message-codec.js';
import type { MessageRecord } from '../../../src/broker/changes.js';

const sym = (s: string): AmqpValue => ({ type: 'symbol', value: s });
const annotations = (pairs: Array<[string, AmqpValue]>): AmqpValue => ({ type: 'map', value: pairs.map(([k, v]) => [sym(k), v]) });

function merged(held: Buffer | undefined, added: AmqpValue): Buffer {
  const r = mergeAddedAnnotations(held, added);
  if (r.kind !== 'merged') throw new Error(`expected merged, got ${r.kind}`);
  return r.map;
}

function record(bytes: Buffer, deliveryCount = 0): MessageRecord {
  const p = parseIncoming(bytes);
  return { id: 1, bytes, headerLength: p.headerLength, durable: p.durable, priority: p.priority, expiresAt: 0, deliveryCount, subject: p.subject };
}

/** Section descriptor codes of an encoded message, in order (read with the engine's decoder). */
function sectionCodes(bytes: Buffer): number[] {
  const d = new Decoder(bytes);
  const out: number[] = [];
  while (d.remaining > 0) {
    const v = d.value();
    if (v.type !== 'described' || v.descriptor.type !== 'ulong') throw new Error('not a section');
    out.push(Number(v.descriptor.value));
  }
  return out;
}

const rheaDecode = (b: Buffer) => rhea.message.decode(b) as unknown as { message_annotations?: Record<string, unknown>; delivery_annotations?: Record<string, unknown>; body: unknown; subject?: string; delivery_count?: number };

describe('modified annotations - merge over what an entry holds', () => {
  it('modified annotations - an empty or absent map adds nothing', () => {
    expect(mergeAddedAnnotations(undefined, { type: 'map', value: [] }).kind).toBe('none');
  });

  it('modified annotations - a second outcome replaces same-named keys and adds the others, in order', () => {
    const first = merged(undefined, annotations([['x-opt-a', amqp.string('1')], ['x-opt-b', amqp.string('2')]]));
    const second = merged(first, annotations([['x-opt-b', amqp.string('two')], ['x-opt-c', amqp.int(3)]]));
    const v = new Decoder(second).value();
    expect(v.type).toBe('map');
    const entries = (v as { value: [AmqpValue, AmqpValue][] }).value.map(([k, x]) => [(k as { value: string }).value, (x as { value: unknown }).value]);
    expect(entries).toEqual([['x-opt-a', '1'], ['x-opt-b', 'two'], ['x-opt-c', 3]]);
  });

  it('modified annotations - one outcome over the bound is not kept; nor is one that would take the merged map over it, and what was held stays', () => {
    const big = 'x'.repeat(MAX_ADDED_ANNOTATIONS);
    const over = mergeAddedAnnotations(undefined, annotations([['x-opt-big', amqp.string(big)]]));
    expect(over).toMatchObject({ kind: 'too-large' });
    const half = 'y'.repeat(MAX_ADDED_ANNOTATIONS / 2);
    const held = merged(undefined, annotations([['x-opt-1', amqp.string(half)]]));
    expect(mergeAddedAnnotations(held, annotations([['x-opt-2', amqp.string(half)]]))).toMatchObject({ kind: 'too-large' });
    // Replacing the key instead stays within the bound.
    expect(mergeAddedAnnotations(held, annotations([['x-opt-1', amqp.string(half)]])).kind).toBe('merged');
  });
});

describe('modified annotations - on the way out', () => {
  it('modified annotations - a message never annotated by an outcome goes out as the very buffer stored (nothing copied)', () => {
    const bytes = rhea.message.encode({ body: 'x', message_annotations: { 'x-opt-own': 1 } });
    const msg = record(bytes);
    expect(outgoingBytes(msg, 0, 0)).toBe(bytes);
    expect(outgoingBytes(msg, 0, 0, undefined)).toBe(bytes);
  });

  it('modified annotations - a message without message-annotations gets the section after the header and delivery-annotations, before properties', () => {
    const bytes = rhea.message.encode({ durable: true, delivery_annotations: { 'x-opt-da': 'd' }, subject: 's', application_properties: { k: 'v' }, body: 'payload' });
    expect(sectionCodes(bytes)).toEqual([0x70, 0x71, 0x73, 0x74, 0x77]);
    const added = merged(undefined, annotations([['x-opt-added', amqp.string('yes')]]));
    const out = outgoingBytes(record(bytes), 1, 0, added);
    expect(sectionCodes(out)).toEqual([0x70, 0x71, 0x72, 0x73, 0x74, 0x77]);
    const m = rheaDecode(out);
    expect(m.message_annotations).toEqual({ 'x-opt-added': 'yes' });
    expect(m.delivery_annotations).toEqual({ 'x-opt-da': 'd' });
    expect(m).toMatchObject({ subject: 's', body: 'payload', delivery_count: 1 });
  });

  it('modified annotations - with no header at all the section comes first; the header is left alone when only annotations change', () => {
    const bytes = Buffer.concat([encode({ type: 'described', descriptor: amqp.ulong(0x73), value: { type: 'list', value: [amqp.null(), amqp.null(), amqp.null(), amqp.string('subj')] } }), encode({ type: 'described', descriptor: amqp.ulong(0x77), value: amqp.string('b') })]);
    const out = outgoingBytes(record(bytes), 0, 0, merged(undefined, annotations([['x-opt-a', amqp.boolean(true)]])));
    expect(sectionCodes(out)).toEqual([0x72, 0x73, 0x77]);
    expect(rheaDecode(out).message_annotations).toEqual({ 'x-opt-a': true });
    const withHeader = rhea.message.encode({ durable: true, priority: 7, body: 'b' });
    const rec = record(withHeader);
    const out2 = outgoingBytes(rec, 0, 0, merged(undefined, annotations([['x-opt-a', amqp.boolean(true)]])));
    expect(out2.subarray(0, rec.headerLength).equals(withHeader.subarray(0, rec.headerLength))).toBe(true);
  });

  it('modified annotations - the message\'s own keys stay in place, same-named ones (sym32 there, sym8 here) take the outcome\'s value, ulong keys are kept', () => {
    // The sender's section: a sym32 key, a ulong key and another symbol, in a map32.
    const own = Buffer.from([0xb3, 0, 0, 0, 7, ...Buffer.from('x-opt-a')]);
    const ownPairs = Buffer.concat([own, encode(amqp.string('old')), encode(amqp.ulong(42)), encode(amqp.string('reserved')), encode(sym('x-opt-keep')), encode(amqp.int(5))]);
    const map32 = Buffer.alloc(9);
    map32[0] = 0xd1;
    map32.writeUInt32BE(ownPairs.length + 4, 1);
    map32.writeUInt32BE(6, 5);
    const section = Buffer.concat([Buffer.from([0x00, 0x53, 0x72]), map32, ownPairs]);
    const header = rhea.message.encode({ durable: true, body: 'b' });
    const headerLength = parseIncoming(header).headerLength;
    const bytes = Buffer.concat([header.subarray(0, headerLength), section, header.subarray(headerLength)]);
    const added = merged(undefined, annotations([['x-opt-a', amqp.string('new')], ['x-opt-z', amqp.string('added')]]));
    const out = outgoingBytes(record(bytes), 0, 0, added);
    expect(sectionCodes(out)).toEqual(sectionCodes(bytes));
    expect(sectionCodes(out).slice(0, 2)).toEqual([0x70, 0x72]);
    const d = new Decoder(out);
    d.value();
    const ma = d.value() as { value: { value: [AmqpValue, AmqpValue][] } };
    const pairs = ma.value.value.map(([k, v]) => [k.type, String((k as { value: unknown }).value), (v as { value: unknown }).value]);
    expect(pairs).toEqual([
      ['symbol', 'x-opt-a', 'new'],
      ['ulong', '42', 'reserved'],
      ['symbol', 'x-opt-keep', 5],
      ['symbol', 'x-opt-z', 'added'],
    ]);
    expect(rheaDecode(out).body).toBe('b');
  });

  it('modified annotations - a message-annotations section that is no map is left as the sender wrote it', () => {
    const header = rhea.message.encode({ durable: true, body: 'b' });
    const headerLength = parseIncoming(header).headerLength;
    const notAMap = encode({ type: 'described', descriptor: amqp.ulong(0x72), value: { type: 'list', value: [amqp.int(1)] } });
    const bytes = Buffer.concat([header.subarray(0, headerLength), notAMap, header.subarray(headerLength)]);
    const out = outgoingBytes(record(bytes), 0, 0, merged(undefined, annotations([['x-opt-a', amqp.int(1)]])));
    expect(out.equals(bytes)).toBe(true);
  });
});

// deadLetterWriter: the bytes a dead letter is stored as (src/broker/dead-letter.ts).
// Messages are built and read back by rhea, whose codec nobody here wrote: the header
// says the ttl left and the delivery-count reached (the sender's other fields kept),
// the message-annotations merge the sender's, the consumers' and the queue and reason
// (in that order of precedence), and the bare message goes on as the sender encoded it.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { encodeMessage } from '../../../src/amqp/engine/message.js';
import { amqp, type AmqpValue } from '../../../src/amqp/engine/types.js';
import { DEAD_LETTER_QUEUE, DEAD_LETTER_REASON, deadLetterWriter, parseIncoming } from '../../../src/amqp/message-codec.js';
import type { DeadLetterEdit } from '../../../src/broker/dead-letter.js';

interface RheaMessage {
  durable?: boolean;
  priority?: number;
  ttl?: number;
  first_acquirer?: boolean;
  delivery_count?: number;
  message_annotations?: Record<string, unknown>;
  delivery_annotations?: Record<string, unknown>;
  subject?: string;
  absolute_expiry_time?: Date;
  application_properties?: Record<string, unknown>;
  body: unknown;
}

const rheaEncode = (m: Record<string, unknown>): Buffer => rhea.message.encode(m as never);
const rheaDecode = (b: Buffer): RheaMessage => rhea.message.decode(b) as unknown as RheaMessage;

const edit = (overrides: Partial<DeadLetterEdit> = {}): DeadLetterEdit => ({ queue: 'orders', reason: 'rejected', deliveryCount: 3, ttlMs: 0, annotations: undefined, ...overrides });

function write(bytes: Buffer, e: DeadLetterEdit): { bytes: Buffer; headerLength: number } {
  return deadLetterWriter.write(bytes, parseIncoming(bytes).headerLength, e);
}

/** An encoded annotations map, as a modified outcome's merge leaves on a queue entry. */
const held = (pairs: Array<[string, AmqpValue]>): Buffer => encode({ type: 'map', value: pairs.map(([k, v]) => [{ type: 'symbol', value: k }, v]) });

describe('dead letter writer - header and annotations', () => {
  it('dead letter writer - the header says the delivery-count reached and the ttl left; durable, priority and first-acquirer stay as sent', () => {
    const sent = rheaEncode({ durable: true, priority: 7, ttl: 60_000, first_acquirer: true, delivery_count: 0, body: 'b' });
    const out = write(sent, edit({ deliveryCount: 4, ttlMs: 12_345 }));
    const got = rheaDecode(out.bytes);
    expect(got).toMatchObject({ durable: true, priority: 7, ttl: 12_345, first_acquirer: true, delivery_count: 4, body: 'b' });
    // The header length given is the new header's: what the broker reads it by.
    expect(parseIncoming(out.bytes).headerLength).toBe(out.headerLength);
    expect(parseIncoming(out.bytes)).toMatchObject({ durable: true, priority: 7, ttlMs: 12_345, deliveryCount: 4 });
  });

  it('dead letter writer - ttl 0 leaves the header without one (an expired message\'s dead letter)', () => {
    const out = write(rheaEncode({ ttl: 200, body: 'b' }), edit({ reason: 'expired', ttlMs: 0 }));
    expect(rheaDecode(out.bytes).ttl).toBeUndefined();
    expect(parseIncoming(out.bytes).ttlMs).toBeUndefined();
  });

  it('dead letter writer - a message without a header gets one, first', () => {
    // rhea writes an empty header always: the engine's encoder writes none without a field for it.
    const sent = encodeMessage({ subject: 's', body: 'b' });
    expect(parseIncoming(sent).headerLength).toBe(0);
    const out = write(sent, edit({ deliveryCount: 2 }));
    expect(out.headerLength).toBeGreaterThan(0);
    expect(rheaDecode(out.bytes)).toMatchObject({ delivery_count: 2, subject: 's', body: 'b', message_annotations: { [DEAD_LETTER_QUEUE]: 'orders', [DEAD_LETTER_REASON]: 'rejected' } });
  });

  it('dead letter writer - annotations: the sender\'s, then the consumers\' over them, then the queue and reason over both', () => {
    const sent = rheaEncode({
      message_annotations: { 'x-opt-own': 'own', 'x-opt-both': 'sender', [DEAD_LETTER_REASON]: 'forged' },
      delivery_annotations: { 'x-opt-da': 'd' },
      subject: 'subj',
      application_properties: { app: 1 },
      body: 'b',
    });
    const added = held([['x-opt-both', amqp.string('consumer')], ['x-opt-added', amqp.int(9)]]);
    const got = rheaDecode(write(sent, edit({ annotations: added })).bytes);
    expect(got.message_annotations).toEqual({ 'x-opt-own': 'own', 'x-opt-both': 'consumer', [DEAD_LETTER_REASON]: 'rejected', 'x-opt-added': 9, [DEAD_LETTER_QUEUE]: 'orders' });
    expect(got).toMatchObject({ delivery_annotations: { 'x-opt-da': 'd' }, subject: 'subj', application_properties: { app: 1 }, body: 'b' });
  });

  it('dead letter writer - the bare message (properties on) is the sender\'s bytes, absolute-expiry-time included', () => {
    const expiry = new Date(1_800_000_000_000);
    const sent = rheaEncode({ ttl: 1000, message_annotations: { 'x-opt-own': 1 }, subject: 'subj', absolute_expiry_time: expiry, body: Buffer.from('payload') });
    const propertiesAt = parseIncoming(sent).propertiesAt!;
    const out = write(sent, edit({ reason: 'deleted', ttlMs: 500 }));
    const outAt = parseIncoming(out.bytes).propertiesAt!;
    expect(out.bytes.subarray(outAt).equals(sent.subarray(propertiesAt))).toBe(true);
    expect(rheaDecode(out.bytes).absolute_expiry_time).toEqual(expiry);
  });

  it('dead letter writer - dead-lettered twice, it names the last queue and reason', () => {
    const once = write(rheaEncode({ body: 'b' }), edit({ queue: 'orders', reason: 'rejected' })).bytes;
    const twice = write(once, edit({ queue: 'orders.dlq', reason: 'expired' })).bytes;
    expect(rheaDecode(twice).message_annotations).toEqual({ [DEAD_LETTER_QUEUE]: 'orders.dlq', [DEAD_LETTER_REASON]: 'expired' });
  });

  it('dead letter writer - a queue name of 255 characters (the longest there is) in several bytes each is written whole', () => {
    const name = 'é'.repeat(255);
    const got = rheaDecode(write(rheaEncode({ body: 'b' }), edit({ queue: name })).bytes);
    expect(got.message_annotations![DEAD_LETTER_QUEUE]).toBe(name);
  });
});

describe('dead letter writer - whether a message set its own expiry', () => {
  it('dead letter writer - a header ttl or an absolute-expiry-time is its own; a ttl of 0, or neither, is not', () => {
    expect(deadLetterWriter.setsOwnExpiry(rheaEncode({ ttl: 1000, body: 'b' }))).toBe(true);
    expect(deadLetterWriter.setsOwnExpiry(rheaEncode({ absolute_expiry_time: new Date(1_800_000_000_000), body: 'b' }))).toBe(true);
    expect(deadLetterWriter.setsOwnExpiry(rheaEncode({ ttl: 0, body: 'b' }))).toBe(false);
    expect(deadLetterWriter.setsOwnExpiry(rheaEncode({ durable: true, body: 'b' }))).toBe(false);
  });
});

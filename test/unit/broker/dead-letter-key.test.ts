// A dead letter is routed by the key its message was routed by: the key of the
// `exchange/key` address it was sent to, not its subject (routed-by.ts). The queues'
// records keep that key as their subject, so the journal's record (encoded and decoded
// here), an HA backup fed the log, and a transaction's commit all carry it; the
// message's bytes are the sender's, untouched.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { deadLetterWriter, parseIncoming } from '../../../src/amqp/message-codec.js';
import { Broker } from '../../../src/broker/broker.js';
import type { ExchangeType, LoggedChange, MessageRecord } from '../../../src/broker/changes.js';
import { MAX_KEPT_ROUTING_KEY_BYTES, keptRoutingKey } from '../../../src/broker/routed-by.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { FakeClock, FakeConsumer, feedBackup, qs, xs } from './helpers.js';

const rheaEncode = (m: Record<string, unknown>): Buffer => rhea.message.encode(m as never);

/**
 * Exchange `ex` (direct) binds `q` by both `k1` and `s`; `q`'s alternate exchange `dlx`
 * (of `dlxType`) binds `dl.k1` by `k1` and `dl.s` by `s`: where a dead letter lands
 * says which of the two it was routed by.
 */
function setup(options: { dlxType?: ExchangeType; backup?: Broker } = {}) {
  const clock = new FakeClock();
  const broker = new Broker({ now: clock.now, deadLetters: deadLetterWriter });
  const logged: LoggedChange[] = [];
  broker.log.attach({ append: (e) => logged.push(e) });
  if (options.backup) feedBackup(broker, options.backup);
  broker.declareExchange('dlx', options.dlxType ?? 'topic', xs());
  for (const key of ['k1', 's']) {
    broker.declareQueue(`dl.${key}`, qs());
    broker.bind('dlx', `dl.${key}`, key);
  }
  broker.declareExchange('ex', 'direct', xs());
  broker.declareQueue('q', qs({ alternateExchange: 'dlx' }));
  broker.bind('ex', 'q', 'k1');
  broker.bind('ex', 'q', 's');
  return { broker, clock, logged, q: broker.queue('q') };
}

/** Reject every message `broker`'s queue `q` holds. */
function rejectAll(broker: Broker): void {
  const q = broker.queue('q');
  const c = new FakeConsumer('c', q.depth);
  q.addConsumer(c);
  q.dispatch(0);
  for (const e of [...c.deliveries]) broker.reject(q, e);
}

const depths = (broker: Broker) => ({ k1: broker.queue('dl.k1').depth, s: broker.queue('dl.s').depth });

function enqueuedOn(logged: LoggedChange[], queue: string): MessageRecord[] {
  return logged.flatMap((e) => (e.change.kind === 'transaction' ? e.change.changes : [e.change])).flatMap((c) => (c.kind === 'enqueue' && c.queue === queue ? [c.message] : []));
}

describe('broker - a dead letter is routed by the key its message was routed by', () => {
  it.each(['topic', 'direct'] as const)('dead letter key - sent to ex/k1 with subject s, rejected or expired: the dead letter goes by k1 (%s alternate exchange)', (dlxType) => {
    const { broker, clock, logged } = setup({ dlxType });
    const bytes = rheaEncode({ subject: 's', body: 'b' });
    broker.publish('ex/k1', parseIncoming(bytes));
    broker.publish('ex/k1', parseIncoming(rheaEncode({ subject: 's', ttl: 1000, body: 'expires' })));
    // The record keeps the key; the bytes are the sender's, subject and all.
    const [record] = enqueuedOn(logged, 'q');
    expect(record!.subject).toBe('k1');
    expect(record!.bytes).toBe(bytes);
    clock.advance(2000);
    expect(broker.expire()).toBe(1);
    rejectAll(broker);
    // Old code: both on dl.s, routed by the subject.
    expect(depths(broker)).toEqual({ k1: 2, s: 0 });
    // Dead-lettered again, a dead letter goes by the same key.
    expect(enqueuedOn(logged, 'dl.k1').map((r) => r.subject)).toEqual(['k1', 'k1']);
  });

  it('dead letter key - sent with no key (to the exchange, or to the queue): routed by its subject, its record and message as they were', () => {
    const { broker, logged } = setup();
    broker.publish('ex', parseIncoming(rheaEncode({ subject: 's', body: 'b' })));
    broker.publish('q', parseIncoming(rheaEncode({ subject: 's', body: 'b' })));
    // Sent to ex/s: the key is the subject.
    broker.publish('ex/s', parseIncoming(rheaEncode({ subject: 's', body: 'b' })));
    expect(enqueuedOn(logged, 'q').map((r) => r.subject)).toEqual(['s', 's', 's']);
    rejectAll(broker);
    expect(depths(broker)).toEqual({ k1: 0, s: 3 });
  });

  it('dead letter key - a message without a subject sent to ex/k1 keeps k1; the record the journal writes reads back with it', () => {
    const { broker, logged } = setup();
    broker.publish('ex/k1', parseIncoming(rheaEncode({ body: 'b' })));
    const entry = logged.find((e) => e.change.kind === 'enqueue')!;
    const decoded = decodeChange(encodeChange(entry));
    expect(decoded).toMatchObject({ status: 'ok', entry: { change: { kind: 'enqueue', queue: 'q', message: { subject: 'k1' } } } });
    rejectAll(broker);
    expect(depths(broker)).toEqual({ k1: 1, s: 0 });
  });

  it('dead letter key - a transaction\'s send to ex/k1 keeps k1 too', () => {
    const { broker, logged } = setup();
    broker.commit([{ address: 'ex/k1', msg: parseIncoming(rheaEncode({ subject: 's', body: 'b' })) }], []);
    expect(enqueuedOn(logged, 'q').map((r) => r.subject)).toEqual(['k1']);
    rejectAll(broker);
    expect(depths(broker)).toEqual({ k1: 1, s: 0 });
  });

  it('dead letter key - an HA backup fed the log holds the key; promoted, its dead letters go by it', () => {
    const backup = new Broker({ deadLetters: deadLetterWriter });
    const { broker } = setup({ backup });
    broker.publish('ex/k1', parseIncoming(rheaEncode({ subject: 's', body: 'b' })));
    expect(backup.queue('q').entries()[0]!.msg.subject).toBe('k1');
    rejectAll(backup);
    expect(depths(backup)).toEqual({ k1: 1, s: 0 });
  });

  it('dead letter key - an exchange\'s own alternate exchange routes an unroutable message by the same key (as before), and its record keeps that key', () => {
    const { broker } = setup();
    broker.declareExchange('ax', 'direct', xs());
    broker.declareExchange('ex2', 'direct', xs({ alternateExchange: 'ax' }));
    broker.declareQueue('ax.k2', qs());
    broker.declareQueue('ax.s', qs());
    broker.bind('ax', 'ax.k2', 'k2');
    broker.bind('ax', 'ax.s', 's');
    expect(broker.publish('ex2/k2', parseIncoming(rheaEncode({ subject: 's', body: 'b' }))).queues).toEqual(['ax.k2']);
    expect(broker.queue('ax.k2').entries()[0]!.msg.subject).toBe('k2');
  });

  it('dead letter key - a key longer than MAX_KEPT_ROUTING_KEY_BYTES (UTF-8) is not kept: its dead letter goes by the subject', () => {
    const fits = 'k'.repeat(MAX_KEPT_ROUTING_KEY_BYTES);
    // 342 three-byte characters: within the bound counted in UTF-16 units, over it in bytes.
    const wide = '\u20ac'.repeat(Math.floor(MAX_KEPT_ROUTING_KEY_BYTES / 3) + 1);
    expect(keptRoutingKey('s', fits)).toBe(fits);
    expect(keptRoutingKey('s', fits + 'k')).toBe('s');
    expect(keptRoutingKey(undefined, fits + 'k')).toBeUndefined();
    expect(keptRoutingKey('s', wide)).toBe('s');
    expect(keptRoutingKey('s', '\u20ac'.repeat(Math.floor(MAX_KEPT_ROUTING_KEY_BYTES / 3)))).toHaveLength(341);
    // No key: the subject; the empty key is a key (`ex/` routes by '').
    expect(keptRoutingKey('s', undefined)).toBe('s');
    expect(keptRoutingKey('s', '')).toBe('');
    const { broker, logged } = setup();
    broker.bind('ex', 'q', fits + 'k');
    broker.publish(`ex/${fits}k`, parseIncoming(rheaEncode({ subject: 's', body: 'b' })));
    expect(enqueuedOn(logged, 'q')[0]!.subject).toBe('s');
    rejectAll(broker);
    expect(depths(broker)).toEqual({ k1: 0, s: 1 });
  });
});

// Broker.reroute with the AMQP edge's dead-letter writer: the enqueue record a dead
// letter makes (what the journal, HA backups and DR copies take) holds the bytes that
// say what happened (delivery-count reached, consumers' annotations, queue, reason),
// and the expiry the rules of src/broker/dead-letter.ts give, for each reason.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { DEAD_LETTER_QUEUE, DEAD_LETTER_REASON, deadLetterWriter, parseIncoming } from '../../../src/amqp/message-codec.js';
import { Broker } from '../../../src/broker/broker.js';
import type { LoggedChange, MessageRecord, QueueSettings } from '../../../src/broker/changes.js';
import type { DeadLetterWriter } from '../../../src/broker/dead-letter.js';
import { TandemError } from '../../../src/broker/errors.js';
import { FakeClock, FakeConsumer, feedBackup, messageRecords, qs, xs } from './helpers.js';

const rheaEncode = (m: Record<string, unknown>): Buffer => rhea.message.encode(m as never);
const rheaDecode = (b: Buffer) => rhea.message.decode(b) as unknown as { ttl?: number; delivery_count?: number; message_annotations?: Record<string, unknown>; body: unknown };

const added = encode({ type: 'map', value: [[{ type: 'symbol', value: 'x-opt-added' }, { type: 'string', value: 'by consumer' }]] });

/** A broker with `q` whose alternate exchange is a fanout to `dlq`; its log captured. */
function setup(options: { q?: Partial<QueueSettings>; dlq?: Partial<QueueSettings>; writer?: DeadLetterWriter; backup?: Broker } = {}) {
  const clock = new FakeClock();
  const broker = new Broker({ now: clock.now, deadLetters: options.writer ?? deadLetterWriter });
  const logged: LoggedChange[] = [];
  broker.log.attach({ append: (e) => logged.push(e) });
  if (options.backup) feedBackup(broker, options.backup);
  broker.declareExchange('dlx', 'fanout', xs());
  broker.declareQueue('dlq', qs(options.dlq));
  broker.bind('dlx', 'dlq', '');
  broker.declareQueue('q', qs({ alternateExchange: 'dlx', ...options.q }));
  return { broker, clock, logged, q: broker.queue('q') };
}

/** The message records enqueued on `queue`, as logged (a transaction's too). */
function enqueued(logged: LoggedChange[], queue: string): MessageRecord[] {
  return logged.flatMap((e) => (e.change.kind === 'transaction' ? e.change.changes : [e.change])).flatMap((c) => (c.kind === 'enqueue' && c.queue === queue ? [c.message] : []));
}

describe('broker - dead letters', () => {
  it('dead letter - rejected: the record holds the delivery-count reached, the consumer\'s annotations, queue and reason, and keeps its own expiry', () => {
    const { broker, clock, logged, q } = setup();
    broker.publish('q', parseIncoming(rheaEncode({ ttl: 60_000, message_annotations: { 'x-opt-own': 'own' }, body: 'b' })));
    const sentExpiry = q.entries()[0]!.msg.expiresAt;
    const a = new FakeConsumer('a', 1);
    q.addConsumer(a);
    q.dispatch(0);
    q.release(a.deliveries[0]!, { deliveryFailed: true, undeliverableHere: false, annotations: added });
    q.removeConsumer(a);
    const b = new FakeConsumer('b', 1);
    q.addConsumer(b);
    q.dispatch(0);
    clock.advance(10_000);
    broker.reject(q, b.deliveries[0]!);
    const [record] = enqueued(logged, 'dlq');
    expect(record).toMatchObject({ deliveryCount: 1, expiresAt: sentExpiry });
    expect(parseIncoming(record!.bytes).headerLength).toBe(record!.headerLength);
    expect(rheaDecode(record!.bytes)).toMatchObject({
      ttl: 50_000,
      delivery_count: 1,
      body: 'b',
      message_annotations: { 'x-opt-own': 'own', 'x-opt-added': 'by consumer', [DEAD_LETTER_QUEUE]: 'q', [DEAD_LETTER_REASON]: 'rejected' },
    });
    // What the dead-letter queue holds is that record.
    expect(broker.queue('dlq').entries()[0]!.msg.bytes.equals(record!.bytes)).toBe(true);
  });

  it('dead letter - expired: no expiry and no ttl (it would expire again at once), unless the dead-letter queue has a default-ttl', () => {
    for (const dlqTtl of [0, 30_000]) {
      const { broker, clock, logged } = setup({ dlq: { defaultTtlMs: dlqTtl } });
      broker.publish('q', parseIncoming(rheaEncode({ ttl: 1000, body: 'b' })));
      clock.advance(2000);
      expect(broker.expire()).toBe(1);
      const [record] = enqueued(logged, 'dlq');
      expect(record!.expiresAt).toBe(dlqTtl === 0 ? 0 : clock.t + dlqTtl);
      const got = rheaDecode(record!.bytes);
      expect(got.ttl).toBeUndefined();
      expect(got.message_annotations).toEqual({ [DEAD_LETTER_QUEUE]: 'q', [DEAD_LETTER_REASON]: 'expired' });
      // Not expired again by the next sweep.
      expect(broker.expire()).toBe(0);
      expect(broker.queue('dlq').depth).toBe(1);
    }
  });

  it('dead letter - an expiry that came from its queue\'s default-ttl stays with that queue; an absolute-expiry-time of its own goes on', () => {
    const { broker, logged, q } = setup({ q: { defaultTtlMs: 60_000 } });
    broker.publish('q', parseIncoming(rheaEncode({ body: 'default' })));
    const at = 1_000_000 + 3_600_000;
    broker.publish('q', parseIncoming(rheaEncode({ absolute_expiry_time: new Date(at), body: 'own' })));
    const c = new FakeConsumer('c', 2);
    q.addConsumer(c);
    q.dispatch(0);
    for (const e of [...c.deliveries]) broker.reject(q, e);
    const [byDefault, byOwn] = enqueued(logged, 'dlq');
    expect(byDefault!.expiresAt).toBe(0);
    expect(rheaDecode(byDefault!.bytes).ttl).toBeUndefined();
    expect(byOwn!.expiresAt).toBe(at);
    expect(rheaDecode(byOwn!.bytes).ttl).toBe(3_600_000);
  });

  it('dead letter - a deleted queue\'s messages, sent on by deleteQueue or moveToAlternate, say deleted', () => {
    for (const how of ['delete', 'move'] as const) {
      const { broker, logged, q } = setup();
      broker.publish('q', parseIncoming(rheaEncode({ body: 'b' })));
      if (how === 'delete') broker.deleteQueue('q');
      else expect(broker.moveToAlternate(q, 10)).toBe(1);
      const [record] = enqueued(logged, 'dlq');
      expect(rheaDecode(record!.bytes).message_annotations).toEqual({ [DEAD_LETTER_QUEUE]: 'q', [DEAD_LETTER_REASON]: 'deleted' });
    }
  });

  it('dead letter - an HA backup fed the log holds the same dead letter, bytes and record', () => {
    // The backup has no writer: it takes the primary's record as it is.
    const backup = new Broker();
    const { broker, q } = setup({ backup });
    broker.publish('q', parseIncoming(rheaEncode({ durable: true, ttl: 60_000, body: 'b' })));
    const c = new FakeConsumer('c', 1);
    q.addConsumer(c);
    q.dispatch(0);
    broker.reject(q, c.deliveries[0]!);
    const mine = broker.queue('dlq').entries()[0]!.msg;
    const theirs = backup.queue('dlq').entries()[0]!.msg;
    expect(theirs).toEqual(mine);
    expect(rheaDecode(theirs.bytes).message_annotations).toMatchObject({ [DEAD_LETTER_REASON]: 'rejected' });
  });

  it('dead letter - bytes the writer cannot read go on as they arrived, not lost', () => {
    const refusing: DeadLetterWriter = {
      setsOwnExpiry: () => true,
      write: () => {
        throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'malformed message: test');
      },
    };
    const { broker, logged, q } = setup({ writer: refusing });
    const bytes = rheaEncode({ body: 'b' });
    broker.publish('q', parseIncoming(bytes));
    const c = new FakeConsumer('c', 1);
    q.addConsumer(c);
    q.dispatch(0);
    broker.reject(q, c.deliveries[0]!);
    expect(enqueued(logged, 'dlq')[0]!.bytes.equals(bytes)).toBe(true);
    expect(broker.deadLettersLost).toBe(0);
  });
});

describe('broker - dead letter and dequeue order', () => {
  it.each(['rejected', 'expired'] as const)('dead letter - %s: the dead letter and the dequeue are one record, so a journal cut or a failover leaves the message in one place', (reason) => {
    const { broker, clock, logged, q } = setup();
    broker.publish('q', parseIncoming(rheaEncode({ ttl: 1_000, durable: true, body: 'b' })));
    if (reason === 'rejected') {
      const a = new FakeConsumer('a', 1);
      q.addConsumer(a);
      q.dispatch(0);
      broker.reject(q, a.deliveries[0]!);
    } else {
      clock.advance(2_000);
      broker.expire();
    }
    expect(messageRecords(logged)).toEqual(['enqueue q', 'enqueue dlq + dequeue q']);
  });
});

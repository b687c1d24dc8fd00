// Delivery delay (scheduled.ts): a message whose sender asked for a later delivery time
// (x-opt-delivery-time, or x-opt-delivery-delay) is held: in the depth, out of the
// dispatch rows, until the broker's timer moves it into its level at its id. The table's
// own order, the annotation reader's verdicts, and the queue's handling of held messages
// (expiry, rings, groups, paged rows recovery made, replication to a backup).
import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { BodyLoader, PagedRun } from '../../../src/broker/paged-message.js';
import { HeldMessages, MAX_DELIVERY_AHEAD_MS } from '../../../src/broker/scheduled.js';
import { Queue, type QueueEntry, type QueueHost } from '../../../src/broker/queue.js';
import { heldMessage, readDeliveryTime } from '../../../src/amqp/delivery-time-reader.js';
import { parseIncoming } from '../../../src/amqp/message-codec.js';
import { readGroupKey } from '../../../src/amqp/group-key-reader.js';
import { deleteQueueInSlices } from '../../../src/broker/queue-slices.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { FakeClock, FakeConsumer, feedBackup, messageRecords, msg, qs, xs } from './helpers.js';

const NOW = 1_700_000_000_000;

function sym(name: string): Buffer {
  return Buffer.concat([Buffer.from([0xa3, name.length]), Buffer.from(name, 'latin1')]);
}
function long(v: number, code = 0x81): Buffer {
  const b = Buffer.alloc(9);
  b[0] = code;
  b.writeBigInt64BE(BigInt(v), 1);
  return b;
}
function str(s: string): Buffer {
  return Buffer.concat([Buffer.from([0xa1, s.length]), Buffer.from(s)]);
}

/** A message: message-annotations of these (key, encoded value) pairs, properties with a group-id if given, an amqp-value body. */
function encoded(body: string, annotations: Array<[string, Buffer]> = [], group?: string): Buffer {
  const parts: Buffer[] = [];
  if (annotations.length > 0) {
    const items = Buffer.concat(annotations.flatMap(([k, v]) => [sym(k), v]));
    parts.push(Buffer.from([0x00, 0x53, 0x72, 0xc1, items.length + 1, annotations.length * 2]), items);
  }
  if (group !== undefined) {
    const fields = Buffer.concat([Buffer.alloc(10, 0x40), str(group)]);
    parts.push(Buffer.from([0x00, 0x53, 0x73, 0xc0, fields.length + 1, 11]), fields);
  }
  parts.push(Buffer.from([0x00, 0x53, 0x77]), str(body));
  return Buffer.concat(parts);
}

const at = (t: number): Array<[string, Buffer]> => [['x-opt-delivery-time', long(t)]];

function setup(clock = new FakeClock(NOW), groups = false): { broker: Broker; clock: FakeClock } {
  const broker = new Broker({ now: clock.now, deliveryTimes: readDeliveryTime, groupKeys: groups ? readGroupKey : undefined });
  return { broker, clock };
}

/** The amqp-value string body of an entry's message. */
function bodyOf(e: QueueEntry): string {
  const b = e.msg.bytes;
  const i = b.lastIndexOf(Buffer.from([0x00, 0x53, 0x77, 0xa1]));
  return b.toString('utf8', i + 5, i + 5 + b[i + 4]!);
}
const bodiesOf = (c: FakeConsumer): string[] => c.deliveries.map(bodyOf);

describe('HeldMessages', () => {
  it('hands out what is due, earliest first and by id among equals, at most the limit, and nothing early', () => {
    const h = new HeldMessages();
    const entry = (id: number): QueueEntry => ({ msg: { id, bytes: Buffer.alloc(0), headerLength: 0, durable: false, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined }, deliveryCount: 0, acquiredBy: undefined });
    for (const [id, due] of [[5, 300], [1, 200], [3, 100], [2, 200], [4, 900]] as const) h.add(entry(id), due);
    expect(h.nextDue()).toBe(100);
    expect(h.takeDue(99, 10)).toEqual([]);
    expect(h.takeDue(250, 2).map((d) => d.entry.msg.id)).toEqual([3, 1]);
    expect(h.takeDue(250, 10).map((d) => d.entry.msg.id)).toEqual([2]);
    // One removed by id leaves a stale heap item, passed over.
    expect(h.remove(5)?.msg.id).toBe(5);
    expect(h.nextDue()).toBe(900);
    expect(h.takeDue(10_000, 10).map((d) => d.entry.msg.id)).toEqual([4]);
    expect(h.length).toBe(0);
    expect(h.nextDue()).toBe(Infinity);
  });

  it('stays bounded when messages come and go before their time', () => {
    const h = new HeldMessages();
    for (let i = 1; i <= 20_000; i++) {
      h.add({ msg: { id: i, bytes: Buffer.alloc(0), headerLength: 0, durable: false, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined }, deliveryCount: 0, acquiredBy: undefined }, 1000 + i);
      h.remove(i);
    }
    expect(h.length).toBe(0);
    expect((h as unknown as { dues: number[] }).dues.length).toBeLessThanOrEqual(1024 + 1);
    expect(h.nextDue()).toBe(Infinity);
  });
});

describe('readDeliveryTime', () => {
  it('reads x-opt-delivery-time (long or timestamp) and x-opt-delivery-delay; the time wins over a delay', () => {
    expect(readDeliveryTime(encoded('a', at(NOW + 5000)), NOW)).toEqual({ status: 'at', at: NOW + 5000, fixed: true });
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-time', long(NOW + 7, 0x83)]]), NOW)).toEqual({ status: 'at', at: NOW + 7, fixed: true });
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-delay', long(1500)]]), NOW)).toEqual({ status: 'at', at: NOW + 1500, fixed: false });
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-delay', Buffer.from([0x71, 0, 0, 0x03, 0xe8])]]), NOW)).toEqual({ status: 'at', at: NOW + 1000, fixed: false });
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-delay', long(99_000)], ['x-opt-delivery-time', long(NOW + 10)]]), NOW)).toEqual({ status: 'at', at: NOW + 10, fixed: true });
    expect(readDeliveryTime(encoded('a', [['x-other', long(5)]]), NOW)).toEqual({ status: 'none' });
    // Keys that are nearly the name are other keys; a sym32 key is the same key.
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-tim', long(NOW + 5)], ['x-opt-delivery-timex', long(NOW + 6)]]), NOW)).toEqual({ status: 'none' });
    const sym32 = Buffer.concat([Buffer.from([0xb3, 0, 0, 0, 19]), Buffer.from('x-opt-delivery-time', 'latin1'), long(NOW + 9)]);
    const wide = Buffer.concat([Buffer.from([0x00, 0x53, 0x72, 0xc1, sym32.length + 1, 2]), sym32, Buffer.from([0x00, 0x53, 0x77]), str('w')]);
    expect(readDeliveryTime(wide, NOW)).toEqual({ status: 'at', at: NOW + 9, fixed: true });
    expect(readDeliveryTime(encoded('a'), NOW)).toEqual({ status: 'none' });
  });

  it('a past time or a negative delay is now; one past ten years, or not an integer, is invalid; malformed bytes are none', () => {
    expect(readDeliveryTime(encoded('a', at(NOW - 60_000)), NOW)).toEqual({ status: 'at', at: NOW, fixed: true });
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-delay', long(-5)]]), NOW)).toEqual({ status: 'at', at: NOW, fixed: false });
    expect(readDeliveryTime(encoded('a', at(NOW + MAX_DELIVERY_AHEAD_MS)), NOW)).toEqual({ status: 'at', at: NOW + MAX_DELIVERY_AHEAD_MS, fixed: true });
    const far = readDeliveryTime(encoded('a', at(NOW + MAX_DELIVERY_AHEAD_MS + 1)), NOW);
    expect(far).toMatchObject({ status: 'invalid' });
    expect((far as { reason: string }).reason).toContain('years ahead');
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-time', long(2 ** 62)]]), NOW)).toMatchObject({ status: 'invalid' });
    expect(readDeliveryTime(encoded('a', [['x-opt-delivery-time', str('soon')]]), NOW)).toMatchObject({ status: 'invalid', reason: expect.stringContaining('not an integer') });
    // A map whose count runs past its bytes.
    const bad = encoded('a', at(NOW + 5000));
    bad[5] = 200;
    expect(readDeliveryTime(bad, NOW)).toEqual({ status: 'none' });
    expect(readDeliveryTime(bad.subarray(0, 12), NOW)).toEqual({ status: 'none' });
  });
});

describe('heldMessage: a delay kept as the time it ends at', () => {
  it('a delay gets its end as x-opt-delivery-time beside it, read alike later; the rest byte for byte; a named time is left as it is', () => {
    const sent = encoded('delayed', [['x-opt-delivery-delay', long(60_000)], ['x-other', str('kept')]], 'g1');
    const taken = heldMessage(parseIncoming(sent), readDeliveryTime(sent, NOW), NOW + 60_000);
    // Read an hour later (a restart, a late backup, a DR copy): the same time, not an hour more.
    expect(readDeliveryTime(taken.bytes, NOW + 3_600_000 - 1)).toEqual({ status: 'at', at: NOW + 3_600_000 - 1, fixed: true });
    expect(readDeliveryTime(taken.bytes, NOW + 1000)).toEqual({ status: 'at', at: NOW + 60_000, fixed: true });
    // The bare message (properties with the group-id, the body) is the sender's, byte for byte.
    const bare = (b: Buffer) => b.subarray(b.indexOf(Buffer.from([0x00, 0x53, 0x73])));
    expect(bare(taken.bytes).equals(bare(sent))).toBe(true);
    expect(readGroupKey(taken.bytes, 64)).toBe('g1');
    expect(taken.bytes.includes(Buffer.from('kept'))).toBe(true);
    // A named time, or none, is not rewritten.
    const named = parseIncoming(encoded('named', at(NOW + 5000)));
    expect(heldMessage(named, readDeliveryTime(named.bytes, NOW), NOW + 5000)).toBe(named);
    // A header goes on in front, as the sender encoded it.
    const header = Buffer.from([0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41]); // durable
    const headed = parseIncoming(Buffer.concat([header, sent]));
    const withHeader = heldMessage(headed, readDeliveryTime(headed.bytes, NOW), NOW + 60_000);
    expect(withHeader.bytes.subarray(0, header.length).equals(header)).toBe(true);
    expect([withHeader.durable, withHeader.headerLength]).toEqual([true, header.length]);
    expect(readDeliveryTime(withHeader.bytes, NOW + 5)).toEqual({ status: 'at', at: NOW + 60_000, fixed: true });
  });
});

describe('a queue holding messages until their delivery time', () => {
  it('holds one back (in the depth, not delivered or browsed), then delivers it at its place by id once due', () => {
    const { broker, clock } = setup();
    const q = broker.declareQueue('q', qs()).queue;
    broker.publish('q', msg('', { bytes: encoded('held', at(NOW + 5000)) }));
    broker.publish('q', msg('', { bytes: encoded('plain') }));
    const browser = new FakeConsumer('b', 100, true);
    q.addConsumer(browser);
    q.dispatch(clock.now());
    expect(bodiesOf(browser)).toEqual(['plain']);
    expect([q.depth, q.available, q.scheduledDepth]).toEqual([2, 1, 1]);
    expect([...q.availableEntries()].map(bodyOf)).toEqual(['plain']);
    clock.advance(4999);
    expect(broker.releaseDue()).toBe(0);
    clock.advance(1);
    expect(broker.releaseDue()).toBe(1);
    expect(q.scheduledDepth).toBe(0);
    // By id: the held message (sent first) comes before the plain one.
    const c = new FakeConsumer('c', 10);
    q.addConsumer(c);
    q.dispatch(clock.now());
    expect(bodiesOf(c)).toEqual(['held', 'plain']);
  });

  it('a consumer whose skip marks passed its place still gets it when due', () => {
    const { broker, clock } = setup();
    const q = broker.declareQueue('q', qs()).queue;
    const c = new FakeConsumer('c', 10);
    q.addConsumer(c);
    broker.publish('q', msg('', { bytes: encoded('held', at(NOW + 1000)) }));
    for (const b of ['a', 'b']) broker.publish('q', msg('', { bytes: encoded(b) }));
    q.dispatch(clock.now());
    expect(bodiesOf(c)).toEqual(['a', 'b']);
    clock.advance(1000);
    broker.releaseDue();
    q.dispatch(clock.now());
    expect(bodiesOf(c)).toEqual(['a', 'b', 'held']);
  });

  it('expiry still applies to a held message; a purge takes held ones too', () => {
    const { broker, clock } = setup();
    const q = broker.declareQueue('q', qs()).queue;
    broker.publish('q', msg('', { bytes: encoded('short', at(NOW + 10_000)), ttlMs: 1000 }));
    broker.publish('q', msg('', { bytes: encoded('long', at(NOW + 10_000)) }));
    clock.advance(1000);
    expect(broker.expire()).toBe(1);
    expect([q.depth, q.scheduledDepth]).toEqual([1, 1]);
    expect(q.purge()).toBe(1);
    expect([q.depth, q.scheduledDepth]).toEqual([0, 0]);
    clock.advance(10_000);
    expect(broker.releaseDue()).toBe(0);
  });

  it('a ring: held messages count against max-count but do not make way, so a full ring of held ones loses the new message', () => {
    const { broker } = setup();
    const q = broker.declareQueue('q', qs({ maxCount: 2, limitPolicy: 'ring' })).queue;
    broker.publish('q', msg('', { bytes: encoded('h1', at(NOW + 1000)) }));
    broker.publish('q', msg('', { bytes: encoded('p1') }));
    broker.publish('q', msg('', { bytes: encoded('p2') }));
    // p1 made way for p2; the held one stays.
    expect([q.depth, q.scheduledDepth]).toEqual([2, 1]);
    expect([...q.availableEntries()].map(bodyOf)).toEqual(['p2']);
    broker.publish('q', msg('', { bytes: encoded('h2', at(NOW + 1000)) }));
    broker.publish('q', msg('', { bytes: encoded('p3') }));
    expect([q.depth, q.scheduledDepth, q.ringOverflow]).toEqual([2, 2, 1]);
  });

  it('message groups: a held message of a group is not the group\'s until due; then its group is kept', () => {
    const { broker, clock } = setup(new FakeClock(NOW), true);
    const q = broker.declareQueue('q', qs({ messageGroups: true })).queue;
    broker.publish('q', msg('', { bytes: encoded('g-held', at(NOW + 1000), 'g') }));
    broker.publish('q', msg('', { bytes: encoded('g-now', [], 'g') }));
    const a = new FakeConsumer('a', 10);
    const b = new FakeConsumer('b', 10);
    q.addConsumer(a);
    q.dispatch(clock.now());
    expect(bodiesOf(a)).toEqual(['g-now']);
    q.addConsumer(b);
    clock.advance(1000);
    broker.releaseDue();
    q.dispatch(clock.now());
    // a still holds g-now: the group is a's, b gets nothing of it.
    expect(bodiesOf(a)).toEqual(['g-now', 'g-held']);
    expect(bodiesOf(b)).toEqual([]);
  });

  it('an HA backup holds what the primary holds (the time is in the bytes), and a snapshot walk sees held messages', () => {
    const clock = new FakeClock(NOW);
    const { broker: primary } = setup(clock);
    const { broker: backup } = setup(clock);
    feedBackup(primary, backup);
    primary.declareQueue('q', qs({ durable: true }));
    primary.publish('q', msg('', { bytes: encoded('held', at(NOW + 3000)), durable: true }));
    const bq = backup.queues.get('q')!;
    expect([bq.depth, bq.scheduledDepth, bq.available]).toEqual([1, 1, 0]);
    expect([...primary.queues.get('q')!.liveEntries()].map(bodyOf)).toEqual(['held']);
    clock.advance(3000);
    expect(backup.releaseDue()).toBe(1);
    expect(bq.available).toBe(1);
  });

  it('paged rows recovery made are read for a delivery time at their first look, and held until it', () => {
    const clock = new FakeClock(NOW);
    const bodies = [encoded('r1', at(NOW + 2000)), encoded('r2'), encoded('r3', at(NOW - 5))];
    const removed: number[] = [];
    const host: QueueHost = {
      removed: (_q: Queue, e: QueueEntry) => removed.push(e.msg.id),
      unused: () => {},
      heldUntil: (bytes) => {
        const t = readDeliveryTime(bytes, clock.now());
        return t.status === 'at' && t.at > clock.now() ? t.at : 0;
      },
    };
    const loader: BodyLoader = { load: (m) => bodies[m.id - 1]!, loadSubject: () => undefined };
    const q = new Queue('q', qs(), host);
    const n = bodies.length;
    const run: PagedRun = {
      count: n,
      ids: Float64Array.from([1, 2, 3]),
      size: Uint32Array.from(bodies.map((b) => b.length)),
      expiresAt: new Float64Array(n),
      deliveryCount: new Uint32Array(n),
      headerLength: new Uint32Array(n),
      priority: new Uint8Array(n).fill(4),
      flags: new Uint8Array(n).fill(1),
    };
    q.enqueuePagedRun(run, loader);
    expect([q.depth, q.scheduledDepth]).toEqual([3, 0]);
    const c = new FakeConsumer('c', 10);
    q.addConsumer(c);
    q.dispatch(clock.now());
    expect(bodiesOf(c)).toEqual(['r2', 'r3']);
    expect([q.depth, q.scheduledDepth, q.pagedDepth]).toEqual([3, 1, 3]);
    clock.advance(2000);
    expect(q.releaseDue(clock.now(), 10)).toBe(1);
    q.dispatch(clock.now());
    expect(bodiesOf(c)).toEqual(['r2', 'r3', 'r1']);
    expect(removed).toEqual([]);
  });

  it('a delete with an alternate exchange moves held messages in the slices, never all in one step', () => {
    const { broker } = setup();
    const logged: LoggedChange[] = [];
    broker.log.attach({ append: (e) => logged.push(e) });
    broker.declareExchange('dlx', 'fanout', xs());
    broker.declareQueue('dlq', qs());
    broker.bind('dlx', 'dlq', '');
    const q = broker.declareQueue('q', qs({ alternateExchange: 'dlx' })).queue;
    for (let i = 0; i < 3; i++) broker.publish('q', msg('', { bytes: encoded(`plain${i}`) }));
    for (let i = 0; i < 2000; i++) broker.publish('q', msg('', { bytes: encoded(`held${i}`, at(NOW + 60_000)) }));
    expect([q.available, q.scheduledDepth]).toEqual([3, 2000]);
    // Each slice: at most its max, available ones first, then held ones, each its dead letter + dequeue in one record.
    let before = logged.length;
    expect(broker.moveToAlternate(q, 500)).toBe(500);
    const slice = messageRecords(logged.slice(before));
    expect(slice.length).toBe(500);
    expect(slice.every((r) => r === 'enqueue dlq + dequeue q')).toBe(true);
    expect([q.available, q.scheduledDepth]).toEqual([0, 1503]);
    for (let i = 0; i < 3 && q.scheduledDepth > 0; i++) expect(broker.moveToAlternate(q, 500)).toBeLessThanOrEqual(500);
    expect(broker.moveToAlternate(q, 500)).toBe(3);
    expect(q.depth).toBe(0);
    // What the delete itself then does is one step: nothing is left to move.
    before = logged.length;
    broker.deleteQueue('q');
    expect(logged.slice(before).map((e) => e.change.kind)).toEqual(['queue-delete']);
  });

  it('a delete in slices (the admin operation) sends every held message to the dead-letter queue once, in its order', async () => {
    const { broker } = setup();
    broker.declareExchange('dlx', 'fanout', xs());
    broker.declareQueue('dlq', qs());
    broker.bind('dlx', 'dlq', '');
    broker.declareQueue('q', qs({ alternateExchange: 'dlx' }));
    const sent: string[] = [];
    for (let i = 0; i < 1500; i++) {
      const body = i % 3 === 0 ? `plain${i}` : `held${i}`;
      sent.push(body);
      broker.publish('q', msg('', { bytes: encoded(body, i % 3 === 0 ? [] : at(NOW + 1000 + i)) }));
    }
    let largestStep = 0;
    const step = broker.moveToAlternate.bind(broker);
    broker.moveToAlternate = (queue, max) => {
      largestStep = Math.max(largestStep, max);
      return step(queue, max);
    };
    expect(await deleteQueueInSlices(broker, 'q')).toBe(1500);
    expect(broker.queues.has('q')).toBe(false);
    expect(largestStep).toBeLessThanOrEqual(512);
    const dead = broker.queue('dlq').entries().map(bodyOf);
    // Available ones first, in delivery order, then the held ones in id order: each once.
    expect(dead).toEqual([...sent.filter((b) => b.startsWith('plain')), ...sent.filter((b) => b.startsWith('held'))]);
  });
});

// Broker.moveAvailable and moveInSlices (src/broker/queue-move.ts, tandem queue move):
// available messages of one queue go to another in delivery order, each enqueue there
// and dequeue here one record; held and acquired messages stay; the target's limits
// hold and its duplicate-detection window is not consulted; a long move leaves the
// event loop free between slices and ends when either queue goes or the broker becomes a backup.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { deadLetterWriter, parseIncoming } from '../../../src/amqp/message-codec.js';
import { Broker, drRoleChange } from '../../../src/broker/broker.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { TandemError } from '../../../src/broker/errors.js';
import { moveInSlices } from '../../../src/broker/queue-move.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { bodies, bodyDeliveryTimes, brokerState, FakeClock, FakeConsumer, feedBackup, messageRecords, msg, newBroker, qs } from './helpers.js';

function filled(n: number, settings = qs()) {
  const made = newBroker();
  made.broker.declareQueue('dlq', settings);
  made.broker.declareQueue('orders', qs());
  for (let i = 0; i < n; i++) made.broker.publish('dlq', msg(`m${i}`));
  return { ...made, dlq: made.broker.queue('dlq'), orders: made.broker.queue('orders') };
}

describe('queue move - one slice (Broker.moveAvailable)', () => {
  it('queue move - moves at most max, in delivery order, each as one record: enqueue there, dequeue here', () => {
    const { broker, logged, dlq, orders } = filled(6);
    broker.publish('orders', msg('already'));
    const before = logged.length;
    expect(broker.moveAvailable(dlq, orders, 4)).toBe(4);
    const records = logged.slice(before);
    expect(records.every((e) => e.change.kind === 'transaction')).toBe(true);
    expect(messageRecords(records, true)).toEqual(['enqueue orders m0 + dequeue dlq', 'enqueue orders m1 + dequeue dlq', 'enqueue orders m2 + dequeue dlq', 'enqueue orders m3 + dequeue dlq']);
    expect(broker.moveAvailable(dlq, orders, 100)).toBe(2);
    expect(bodies(orders)).toEqual(['already', 'm0', 'm1', 'm2', 'm3', 'm4', 'm5']);
    expect(dlq.depth).toBe(0);
    expect(broker.moveAvailable(dlq, orders, 100)).toBe(0);
  });

  it('queue move - a priority queue gives its messages in delivery order (highest first), each keeping its delivery-count', () => {
    const { broker } = newBroker();
    const dlq = broker.declareQueue('dlq', qs({ priorities: 10 })).queue;
    const orders = broker.declareQueue('orders', qs()).queue;
    broker.publish('dlq', msg('low', { priority: 1 }));
    broker.publish('dlq', msg('high', { priority: 9 }));
    broker.publish('dlq', msg('mid', { priority: 5 }));
    // 'high' was delivered and given back: delivered once more than it says.
    const c = new FakeConsumer('c', 1);
    dlq.addConsumer(c);
    dlq.dispatch(0);
    dlq.removeConsumer(c);
    expect(broker.moveAvailable(dlq, orders, 10)).toBe(3);
    expect(bodies(orders)).toEqual(['high', 'mid', 'low']);
    expect(orders.entries().map((e) => [e.msg.bytes.toString(), e.deliveryCount, e.msg.priority])).toEqual([
      ['high', 1, 9],
      ['mid', 0, 5],
      ['low', 0, 1],
    ]);
  });

  it('queue move - messages held for a delivery time and messages out with consumers stay', () => {
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, deliveryTimes: bodyDeliveryTimes });
    const dlq = broker.declareQueue('dlq', qs()).queue;
    const orders = broker.declareQueue('orders', qs()).queue;
    for (const body of ['a', 'delay:60000', 'b', 'c', 'd']) broker.publish('dlq', msg(body));
    const c = new FakeConsumer('c', 2);
    dlq.addConsumer(c);
    dlq.dispatch(clock.now());
    expect(c.bodies).toEqual(['a', 'b']);
    expect(broker.moveAvailable(dlq, orders, 100)).toBe(2);
    expect(bodies(orders)).toEqual(['c', 'd']);
    expect(bodies(dlq)).toEqual(['a', 'delay:60000', 'b']);
    expect(dlq.scheduledDepth).toBe(1);
    expect(dlq.acquired).toBe(2);
  });

  it('queue move - a backup fed the log holds what the primary holds after a move', () => {
    const { broker } = newBroker();
    const backup = new Broker({ now: broker.now });
    feedBackup(broker, backup);
    const dlq = broker.declareQueue('dlq', qs()).queue;
    const orders = broker.declareQueue('orders', qs()).queue;
    for (let i = 0; i < 5; i++) broker.publish('dlq', msg(`m${i}`));
    expect(broker.moveAvailable(dlq, orders, 3)).toBe(3);
    expect(brokerState(backup)).toEqual(brokerState(broker));
    expect(bodies(backup.queue('orders'))).toEqual(['m0', 'm1', 'm2']);
  });

  it('queue move - a ring target drops its oldest to make room, as for a publish', () => {
    const { broker } = newBroker();
    const dlq = broker.declareQueue('dlq', qs()).queue;
    const ring = broker.declareQueue('ring', qs({ maxCount: 3, limitPolicy: 'ring' })).queue;
    for (let i = 0; i < 5; i++) broker.publish('dlq', msg(`m${i}`));
    expect(broker.moveAvailable(dlq, ring, 10)).toBe(5);
    expect(bodies(ring)).toEqual(['m2', 'm3', 'm4']);
    expect(dlq.depth).toBe(0);
  });

  it('queue move - a ring target that cannot make room (its messages out with a consumer) stops the move, the message staying', () => {
    const { broker } = newBroker();
    const dlq = broker.declareQueue('dlq', qs()).queue;
    const ring = broker.declareQueue('ring', qs({ maxCount: 1, limitPolicy: 'ring' })).queue;
    broker.publish('ring', msg('held'));
    ring.addConsumer(new FakeConsumer('c', 1));
    ring.dispatch(0);
    broker.publish('dlq', msg('m0'));
    expect(() => broker.moveAvailable(dlq, ring, 10)).toThrow(/ring queue 'ring' cannot make room/);
    expect(bodies(dlq)).toEqual(['m0']);
    expect(bodies(ring)).toEqual(['held']);
    expect(ring.ringOverflow).toBe(0);
  });
});

describe('queue move - expiry', () => {
  it("queue move - a message keeps the expiry it set itself; one from the source's default-ttl stays there and the target's default-ttl applies, as for a publish", () => {
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, deadLetters: deadLetterWriter });
    // Dead letters kept an hour; orders' messages ten seconds.
    const dlq = broker.declareQueue('dlq', qs({ defaultTtlMs: 3_600_000 })).queue;
    const orders = broker.declareQueue('orders', qs({ defaultTtlMs: 10_000 })).queue;
    const plain = broker.declareQueue('plain', qs()).queue;
    const encoded = (m: Record<string, unknown>) => parseIncoming(rhea.message.encode(m as never) as Buffer);
    broker.publish('dlq', encoded({ body: 'no-own-ttl' }));
    broker.publish('dlq', encoded({ ttl: 60_000, body: 'own-ttl' }));
    broker.publish('dlq', encoded({ body: 'to-plain' }));
    clock.advance(3_000_000);
    expect(broker.moveAvailable(dlq, orders, 2)).toBe(2);
    expect(broker.moveAvailable(dlq, plain, 1)).toBe(1);
    const start = clock.now() - 3_000_000;
    expect(orders.entries().map((e) => e.msg.expiresAt)).toEqual([clock.now() + 10_000, start + 60_000]);
    expect(plain.entries().map((e) => e.msg.expiresAt)).toEqual([0]);
  });
});

describe('queue move - in slices (moveInSlices)', () => {
  it('queue move - a full reject target stops the move with QUEUE_FULL, saying how many moved', async () => {
    const { broker, dlq } = filled(5);
    const small = broker.declareQueue('small', qs({ maxCount: 2, limitPolicy: 'reject' })).queue;
    const err = await moveInSlices(broker, dlq, small).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TandemError);
    expect((err as TandemError).code).toBe('TANDEM_ERR_QUEUE_FULL');
    expect((err as TandemError).message).toMatch(/queue 'small' is full \(max-count 2\).*2 messages were moved from 'dlq' to 'small' before/);
    expect(bodies(small)).toEqual(['m0', 'm1']);
    expect(bodies(dlq)).toEqual(['m2', 'm3', 'm4']);
  });

  it("queue move - the target's duplicate-detection window is not consulted: a replayed message reaches its consumers again", async () => {
    const broker = new Broker({ now: new FakeClock().now, dedupKeys: readDedupKey });
    const logged: LoggedChange[] = [];
    broker.log.attach({ append: (e) => logged.push(e) });
    const orders = broker.declareQueue('orders', qs({ durable: true, dedupWindow: 100 })).queue;
    const dlq = broker.declareQueue('dlq', qs({ durable: true })).queue;
    const withId = (id: string) => msg('', { bytes: rhea.message.encode({ message_id: id, durable: true, body: id }) as Buffer, durable: true });
    broker.publish('orders', withId('a'));
    expect(broker.publish('orders', withId('a')).duplicate).toBe(true); // the window holds 'a'
    broker.publish('dlq', withId('a'));
    expect(await moveInSlices(broker, dlq, orders)).toBe(1);
    expect(orders.depth).toBe(2);
    expect(orders.dedupCounts.duplicates).toBe(1);
  });

  it('queue move - count limits it; a queue moved to itself is refused', async () => {
    const { broker, dlq, orders } = filled(5);
    expect(await moveInSlices(broker, dlq, orders, 2)).toBe(2);
    expect(bodies(dlq)).toEqual(['m2', 'm3', 'm4']);
    await expect(moveInSlices(broker, dlq, dlq)).rejects.toMatchObject({ code: 'TANDEM_ERR_INVALID_ARGUMENT' });
  });

  it('queue move - refused while memory is short (a moved body is read back into memory)', async () => {
    const { broker, dlq, orders } = filled(3);
    broker.memoryAlarm = 'rss 900 MiB over the 800 MiB limit';
    await expect(moveInSlices(broker, dlq, orders)).rejects.toMatchObject({ code: 'TANDEM_ERR_MEMORY_FULL', message: expect.stringContaining('no move while memory is short') });
    expect(dlq.depth).toBe(3);
  });

  it('queue move - a memory alarm raised during a long move stops it with MEMORY_FULL, saying how many moved (each moved body is read back into memory)', async () => {
    const n = 60_000;
    const { broker, dlq, orders } = filled(n);
    const moving = moveInSlices(broker, dlq, orders);
    setImmediate(() => (broker.memoryAlarm = 'rss 900 MiB over the 800 MiB limit'));
    const err = (await moving.catch((e: unknown) => e)) as TandemError;
    expect(err).toBeInstanceOf(TandemError);
    expect(err.code).toBe('TANDEM_ERR_MEMORY_FULL');
    expect(err.message).toMatch(/no move while memory is short: rss 900 MiB.*; \d+ messages were moved from 'dlq' to 'orders' before/);
    expect(orders.depth).toBeGreaterThan(0);
    expect(orders.depth).toBeLessThan(n);
    expect(dlq.depth + orders.depth).toBe(n);
  });

  it('queue move - a large move serves the event loop between slices, keeps the order, and ends at a delete of either queue or on a backup', async () => {
    const n = 60_000;
    const { broker, dlq, orders } = filled(n);
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    try {
      expect(await moveInSlices(broker, dlq, orders)).toBe(n);
    } finally {
      clearInterval(ticker);
    }
    expect(turns).toBeGreaterThan(0);
    const got = bodies(orders);
    expect(got).toHaveLength(n);
    expect(got.every((b, i) => b === `m${i}`)).toBe(true);

    // The target deleted meanwhile: the move ends with the count so far.
    const again = filled(n);
    const moving = moveInSlices(again.broker, again.dlq, again.orders);
    setImmediate(() => again.broker.deleteQueue('orders'));
    const moved = await moving;
    expect(moved).toBeGreaterThan(0);
    expect(moved).toBeLessThan(n);
    expect(again.dlq.depth).toBe(n - moved);

    // The broker became a backup meanwhile: stopped, as a purge is.
    const third = filled(n);
    const stopping = moveInSlices(third.broker, third.dlq, third.orders);
    setImmediate(() => (third.broker.localChangesRefused = () => 'this broker is an HA backup now'));
    await expect(stopping).rejects.toMatchObject({ code: 'TANDEM_ERR_PRECONDITION', message: expect.stringMatching(/stopped after \d+ of 60000 messages: this broker is an HA backup now/) });
    expect(third.dlq.depth + third.orders.depth).toBe(n);
  });
});

describe('queue move - a DR copy of both queues (fed as the bridge feeds it)', () => {
  it("queue move - a moved message reaches the copy's target though the copy's window holds its key (its first copy's), with or without a window at the source: not dropped as a duplicate while its dequeue from the copy's source queue goes through", async () => {
    const clock = new FakeClock();
    const keyed = () => {
      const broker = new Broker({ now: clock.now, dedupKeys: readDedupKey });
      const logged: LoggedChange[] = [];
      broker.log.attach({ append: (e) => logged.push(e) });
      return { broker, logged };
    };
    const withId = (id: string) => msg('', { bytes: rhea.message.encode({ message_id: id, durable: true, body: id }) as Buffer, durable: true });
    for (const sourceWindow of [0, 100]) {
    // The copy keeps a window whether the source does or not (a DR secondary's dedup-window default).
    const src = keyed();
    for (const name of ['orders', 'dlq']) src.broker.declareQueue(name, qs({ durable: true, dedupWindow: sourceWindow }));
    const copy = keyed();
    for (const name of ['orders', 'dlq']) {
      copy.broker.declareQueue(name, qs({ durable: true, dedupWindow: 100 }));
      copy.broker.recordDr(drRoleChange(name, { source: 'source:5672', mode: 'enqueue-and-dequeue', state: 'passive', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false }));
    }
    // 'a' was published to orders, consumed and rejected: its dead letter waits in dlq.
    src.broker.publish('orders', withId('a'));
    src.broker.queue('orders').purge(10);
    src.broker.publish('dlq', withId('a'));
    expect(await moveInSlices(src.broker, src.broker.queue('dlq'), src.broker.queue('orders'))).toBe(1);
    expect(bodies(src.broker.queue('orders'))).toHaveLength(1);

    // Each source record as the DR stream carries it (record codec), one dr-transaction each.
    let lsn = 0;
    for (const e of src.logged) {
      const out = decodeChange(encodeChange(e));
      if (out.status !== 'ok') throw new Error(`did not decode: ${e.change.kind}`);
      const c = out.entry.change;
      const ops = c.kind === 'enqueue' || c.kind === 'dequeue' ? [c] : c.kind === 'transaction' ? c.changes : [];
      if (ops.length > 0) copy.broker.recordDr({ kind: 'dr-transaction', queues: ['orders', 'dlq'], lsn: ++lsn, time: 1, changes: ops });
    }
    expect(copy.broker.queue('dlq').depth).toBe(0);
    expect(copy.broker.queue('orders').depth).toBe(1);
    expect(copy.broker.queue('orders').dedupCounts.duplicates).toBe(0);
    // The copy's own record carries no mark (only its source's duplicate check needed it).
    expect(copy.logged.some((e) => e.change.kind === 'dr-transaction' && e.change.changes.some((op) => op.kind === 'enqueue' && 'restored' in op))).toBe(false);
    }
  });
});

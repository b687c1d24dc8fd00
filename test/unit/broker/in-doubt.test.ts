// Messages a broker holds when it becomes the one serving them (a start from the journal,
// an HA promotion: Broker.markHeldInDoubt; a DR activation: its dr-role change) are in
// doubt: the broker before may have delivered them. Their first delivery from here counts
// one more (Queue.deliveryCountOf), once, and so does everything that reads the count a
// consumer would see: browsers, selectors, dead letters, moves, a failed commit's give-back.
import { describe, expect, it } from 'vitest';
import { Broker, drRoleChange } from '../../../src/broker/broker.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import type { BodyLoader } from '../../../src/broker/paged-message.js';
import { MARK_CLOCK_SKEW_MS, type Queue, type QueueEntry } from '../../../src/broker/queue.js';
import type { DeliveryTimeReader } from '../../../src/broker/scheduled.js';
import { FRESH_ROLE } from '../../../src/dr/roles.js';
import { bodyDeliveryTimes, FakeClock, FakeConsumer, msg, newBroker, qs } from './helpers.js';

/** Records the delivery-count each delivery carried (what the outgoing link sends). */
class CountingConsumer extends FakeConsumer {
  readonly seen: string[] = [];
  constructor(
    id: string,
    browse = false,
    readonly selects?: (m: MessageRecord, deliveryCount: number) => boolean,
  ) {
    super(id, 1000, browse);
  }
  override deliver(entry: QueueEntry, queue: Queue): void {
    this.seen.push(`${entry.msg.bytes.toString()}:${queue.deliveryCountOf(entry)}`);
    super.deliver(entry, queue);
  }
}

/** Attach a consumer, dispatch, detach it without giving back what it took (the caller settles). */
function take(q: Queue, c: CountingConsumer): string[] {
  q.addConsumer(c);
  q.dispatch(0);
  q.consumers.splice(q.consumers.indexOf(c), 1);
  return c.seen;
}

function setup(settings: Parameters<typeof qs>[0] = {}) {
  const env = newBroker();
  const q = env.broker.declareQueue('q', qs(settings)).queue;
  const send = (...bodies: string[]) => {
    for (const b of bodies) env.broker.publish('q', msg(b, { priority: b.startsWith('high') ? 9 : 4 }));
  };
  return { ...env, q, send };
}

describe('messages in doubt', () => {
  it('in doubt - a message held at the mark counts one more delivery, once; releases add on top; later messages do not', () => {
    const { broker, q, send } = setup({ priorities: 10 });
    send('a', 'b', 'high-c');
    broker.markHeldInDoubt();
    send('d');
    const first = new CountingConsumer('first');
    expect(take(q, first)).toEqual(['high-c:1', 'a:1', 'b:1', 'd:0']);
    const [a, b, c, d] = [first.deliveries[1]!, first.deliveries[2]!, first.deliveries[0]!, first.deliveries[3]!];
    q.release(a, { deliveryFailed: true, undeliverableHere: false });
    q.release(b, { deliveryFailed: false, undeliverableHere: false });
    q.release(c, { deliveryFailed: false, undeliverableHere: false });
    q.release(d, { deliveryFailed: true, undeliverableHere: false });
    expect(take(q, new CountingConsumer('second'))).toEqual(['high-c:1', 'a:2', 'b:1', 'd:1']);
  });

  it('in doubt - a browser sees the count a consumer would get and changes nothing; a selector judges by it', () => {
    const { broker, q, send } = setup();
    send('old-1', 'old-2');
    broker.markHeldInDoubt();
    send('new');
    expect(take(q, new CountingConsumer('browser', true))).toEqual(['old-1:1', 'old-2:1', 'new:0']);
    expect(q.entries().map((e) => e.deliveryCount)).toEqual([0, 0, 0]);
    // JMSRedelivered is a delivery-count above 0 (selector-fields.ts).
    const redelivered = new CountingConsumer('selector', false, (_m, count) => count > 0);
    expect(take(q, redelivered)).toEqual(['old-1:1', 'old-2:1']);
    for (const e of redelivered.deliveries) q.release(e, { deliveryFailed: false, undeliverableHere: false });
    expect(take(q, new CountingConsumer('plain'))).toEqual(['old-1:1', 'old-2:1', 'new:0']);
  });

  it('in doubt - paged out rows count it too, a redelivered entry paged out keeps its count, a moved one is not counted again', () => {
    const { broker, q, send } = setup();
    const bodies = new Map<number, Buffer>();
    const loader: BodyLoader = { load: (m) => bodies.get(m.id)!, loadSubject: () => undefined };
    const pageAll = (queue: Queue) => {
      for (const e of queue.entries()) bodies.set(e.msg.id, e.msg.bytes);
      for (const id of [...queue.ids()]) queue.pageOut(id, loader);
    };
    broker.declareQueue('moved', qs());
    send('a', 'b', 'c');
    broker.markHeldInDoubt();
    pageAll(q);
    expect(q.pagedDepth).toBe(3);
    const first = new CountingConsumer('first');
    expect(take(q, first)).toEqual(['a:1', 'b:1', 'c:1']);
    for (const e of first.deliveries) q.release(e, { deliveryFailed: false, undeliverableHere: false });
    pageAll(q);
    expect(take(q, new CountingConsumer('second'))).toEqual(['a:1', 'b:1', 'c:1']);
    for (const e of q.entries()) q.release(e, { deliveryFailed: false, undeliverableHere: false });
    // A second mark puts them in doubt again; moved with the count the source gives (2),
    // into a queue that holds them in doubt too: not 3.
    const ids = [...q.ids()];
    send('d');
    broker.markHeldInDoubt();
    expect(broker.moveMessages('q', 'moved', [ids[0]!])).toBe(1);
    const moved = broker.queues.get('moved')!;
    pageAll(moved);
    expect(moved.pagedDepth).toBe(1);
    expect(take(moved, new CountingConsumer('moved'))).toEqual(['a:2']);
    // One never delivered since the second mark: moved with it counted (1), then delivered with 1.
    const dId = q.entries().find((e) => e.msg.bytes.toString() === 'd')!.msg.id;
    expect(broker.moveMessages('q', 'moved', [dId])).toBe(1);
    pageAll(moved);
    expect(take(moved, new CountingConsumer('moved-again'))).toEqual(['d:1']);
  });

  it('in doubt - a dead letter carries the count a consumer would have seen', () => {
    const { broker, clock, q, send } = setup({ alternateExchange: 'amq.fanout' });
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    send('rejected');
    broker.publish('q', msg('expired', { ttlMs: 1000 }));
    broker.markHeldInDoubt();
    const got = new CountingConsumer('rejecting');
    q.addConsumer(got);
    got.credit = 1;
    q.dispatch(clock.now());
    expect(got.seen).toEqual(['rejected:1']);
    broker.reject(q, got.deliveries[0]!);
    // Never delivered here: in doubt all the same.
    clock.advance(2000);
    expect(broker.expire()).toBe(1);
    q.removeConsumer(got);
    expect(take(broker.queues.get('dlq')!, new CountingConsumer('dead'))).toEqual(['rejected:1', 'expired:1']);
  });

  it('in doubt - a failed commit gives its message back with its count raised once, not counted again', () => {
    const { broker, q, send } = setup();
    send('a');
    broker.markHeldInDoubt();
    const c = new CountingConsumer('tx');
    expect(take(q, c)).toEqual(['a:1']);
    const result = broker.commit([], [{ queue: q, entry: c.deliveries[0]! }]);
    expect(q.depth).toBe(0);
    expect(broker.withdraw(result)).toBe(0);
    // As a rollback leaves it: delivered once here (1), that delivery failed (2).
    expect(take(q, new CountingConsumer('after'))).toEqual(['a:2']);
  });

  it('in doubt - a message held for its delivery time at the mark is in doubt when it becomes due, unless its sender named a time well after the mark', () => {
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, deliveryTimes: bodyDeliveryTimes });
    const q = broker.declareQueue('q', qs()).queue;
    const mark = clock.now() + 1000;
    const bodies = ['delay:60000', `at:${mark + MARK_CLOCK_SKEW_MS}`, `at:${mark + MARK_CLOCK_SKEW_MS + 1}`, `at:${mark + 60_000}`];
    for (const b of bodies) broker.publish('q', msg(b));
    clock.advance(1000);
    broker.markHeldInDoubt();
    expect(q.scheduledDepth).toBe(4);
    clock.advance(60_000);
    expect(q.releaseDue(clock.now(), 10)).toBe(4);
    // Not yet due anywhere at the mark, by a time its sender named: nobody had the last two.
    // A delay is counted again by a broker that reads it later (a restart, a late backup),
    // and a time within the clocks' allowed skew of the mark may have come at the broker before.
    const first = new CountingConsumer('due');
    expect(take(q, first)).toEqual([`${bodies[0]}:1`, `${bodies[1]}:1`, `${bodies[2]}:0`, `${bodies[3]}:0`]);
    for (const e of first.deliveries) q.release(e, { deliveryFailed: true, undeliverableHere: false });
    expect(take(q, new CountingConsumer('again'))).toEqual([`${bodies[0]}:2`, `${bodies[1]}:2`, `${bodies[2]}:1`, `${bodies[3]}:1`]);
  });

  it('in doubt - a held message nobody can have had is not counted by a move while it waits (a DR quarantine) nor by its dead letter', () => {
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, deliveryTimes: bodyDeliveryTimes });
    broker.declareExchange('dlx', 'fanout', { durable: false, alternateExchange: '', replicate: undefined });
    const dead = broker.declareQueue('dead', qs()).queue;
    broker.bind('dlx', 'dead', '');
    const q = broker.declareQueue('q', qs({ alternateExchange: 'dlx' })).queue;
    const target = broker.declareQueue('target', qs()).queue;
    const later = `at:${clock.now() + 2 * MARK_CLOCK_SKEW_MS}`;
    const soon = `at:${clock.now() + MARK_CLOCK_SKEW_MS / 2}`;
    for (const b of [later, soon, `${later}:deleted`]) broker.publish('q', msg(b));
    broker.publish('q', msg(`${later}:expired`, { ttlMs: MARK_CLOCK_SKEW_MS }));
    broker.markHeldInDoubt();
    // Moved while held: counted as its release would count it (old code: 'later' went out with 1).
    expect(broker.moveMessages('q', 'target', [...q.heldEntries()].slice(0, 2).map((e) => e.msg.id))).toBe(2);
    clock.advance(3 * MARK_CLOCK_SKEW_MS);
    // Expired while held (the expiry timer comes before the release): its dead letter is not counted.
    expect(broker.expire()).toBe(1);
    expect(take(dead, new CountingConsumer('expired'))).toEqual([`${later}:expired:0`]);
    expect(target.releaseDue(clock.now(), 10)).toBe(2);
    expect(take(target, new CountingConsumer('moved'))).toEqual([`${later}:0`, `${soon}:1`]);
    // Left on a deleted queue while held: its dead letter is not counted either.
    expect(q.scheduledDepth).toBe(1);
    broker.deleteQueue('q');
    expect(take(dead, new CountingConsumer('dead'))).toEqual([`${later}:deleted:0`]);
  });

  it('in doubt - the latest mark decides: a held message due before it is in doubt again', () => {
    const clock = new FakeClock();
    const deliveryTimes: DeliveryTimeReader = (bytes, now) => ({ status: 'at', at: Math.max(now, Number(bytes.toString())), fixed: true });
    const broker = new Broker({ now: clock.now, deliveryTimes });
    const q = broker.declareQueue('q', qs()).queue;
    const due = clock.now() + 2 * MARK_CLOCK_SKEW_MS;
    broker.publish('q', msg(String(due)));
    broker.markHeldInDoubt();
    clock.advance(3 * MARK_CLOCK_SKEW_MS);
    // A second mark (a promotion after a restart) after the message fell due: its broker may have delivered it.
    broker.markHeldInDoubt();
    expect(q.releaseDue(clock.now(), 10)).toBe(1);
    expect(take(q, new CountingConsumer('due'))).toEqual([`${due}:1`]);
  });

  it('in doubt - a later mark puts in doubt again what an earlier one counted (a DR copy activated again after the other site served it)', () => {
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, deliveryTimes: bodyDeliveryTimes });
    const q = broker.declareQueue('q', qs()).queue;
    const held = `at:${clock.now() + 2 * MARK_CLOCK_SKEW_MS}`;
    broker.publish('q', msg('plain'));
    broker.publish('q', msg(held));
    broker.markHeldInDoubt();
    clock.advance(3 * MARK_CLOCK_SKEW_MS);
    expect(q.releaseDue(clock.now(), 10)).toBe(1);
    const before = new CountingConsumer('before');
    expect(take(q, before)).toEqual(['plain:1', `${held}:0`]);
    for (const e of before.deliveries) q.release(e, { deliveryFailed: false, undeliverableHere: false });
    // Both were counted for the first mark; after the second, whoever served them meanwhile may have delivered them.
    broker.markHeldInDoubt();
    expect(take(q, new CountingConsumer('after'))).toEqual(['plain:2', `${held}:1`]);
  });

  it('in doubt - a DR activation puts its own queue in doubt, below its idFloor only', () => {
    const { broker, send } = setup();
    const other = broker.declareQueue('other', qs()).queue;
    send('copied');
    broker.publish('other', msg('elsewhere'));
    const role = { ...FRESH_ROLE, source: 'site-a:5672', mode: 'enqueue-and-dequeue' as const, state: 'active' as const, idFloor: broker.peekNextMessageId() };
    broker.recordDr(drRoleChange('q', role));
    send('after');
    expect(take(broker.queues.get('q')!, new CountingConsumer('q'))).toEqual(['copied:1', 'after:0']);
    expect(take(other, new CountingConsumer('other'))).toEqual(['elsewhere:0']);
  });

  it('in doubt - the count stops at the largest an AMQP header holds', () => {
    const { broker, q } = setup();
    broker.publish('q', msg('max', { deliveryCount: 0xffffffff }));
    broker.markHeldInDoubt();
    expect(take(q, new CountingConsumer('max'))).toEqual([`max:${0xffffffff}`]);
  });

  it('a release with delivery-failed stops at the largest count too (one more went out as 0: not redelivered)', () => {
    const { broker, q } = setup();
    broker.publish('q', msg('max', { deliveryCount: 0xffffffff }));
    const first = new CountingConsumer('first');
    expect(take(q, first)).toEqual([`max:${0xffffffff}`]);
    q.release(first.deliveries[0]!, { deliveryFailed: true, undeliverableHere: false });
    expect(take(q, new CountingConsumer('second'))).toEqual([`max:${0xffffffff}`]);
  });
});

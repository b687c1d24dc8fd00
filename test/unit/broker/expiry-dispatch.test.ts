// Expiry met while delivering: a consumer (or browser) with credit that meets a long run
// of expired messages before the expiry timer did drops (or passes) at most
// EXPIRED_PER_DISPATCH of them per dispatch, then asks to be dispatched again
// (QueueHost.moreToDispatch), so the event loop runs between slices (docs/stalls.md).
// Every expired message still goes, dead-lettered when the queue has an alternate
// exchange; the live ones come in the order they would have without the bound, and no
// consumer is given an expired one. Also: the expiry timer's tick (Queue.expire) skips a
// queue with nothing due, and finds what comes due however the row got there.
import { describe, expect, it } from 'vitest';
import { EXPIRED_PER_DISPATCH, Queue, type QueueEntry, type QueueHost, type RemovalReason } from '../../../src/broker/queue.js';
import { PagedMessage, pagedFields, type BodyLoader, type PagedRun } from '../../../src/broker/paged-message.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { FakeConsumer, kinds, messageRecords, msg, newBroker, qs } from './helpers.js';

const NOW = 1_000_000;

class Host implements QueueHost {
  readonly removed_: { id: number; reason: RemovalReason }[] = [];
  more = 0;
  removed(_q: Queue, entry: QueueEntry, reason: RemovalReason): void {
    this.removed_.push({ id: entry.msg.id, reason });
  }
  unused(): void {}
  moreToDispatch(): void {
    this.more++;
  }
}

function record(id: number, opts: { priority?: number; expiresAt?: number } = {}): MessageRecord {
  return { id, bytes: Buffer.from(`m${id}`), headerLength: 0, durable: true, priority: opts.priority ?? 4, expiresAt: opts.expiresAt ?? 0, deliveryCount: 0, subject: undefined };
}

/** A consumer that records whether it was told it is idle, and checks no delivery has expired. */
class CheckingConsumer extends FakeConsumer {
  idles = 0;
  expiredGiven: number[] = [];
  override deliver(entry: QueueEntry, queue: Queue): void {
    if (entry.msg.expiresAt !== 0 && entry.msg.expiresAt <= NOW) this.expiredGiven.push(entry.msg.id);
    super.deliver(entry, queue);
  }
  idle(): void {
    this.idles++;
  }
}

/**
 * Dispatch again while the queue asks (bounded), as the broker does after the event loop
 * ran; the most expired rows any one dispatch removed, and the dispatches it took.
 */
function dispatchUntilDone(q: Queue, host: Host): { dispatches: number; maxRemoved: number } {
  let dispatches = 0;
  let maxRemoved = 0;
  do {
    const before = host.removed_.length;
    host.more = 0;
    q.dispatch(NOW);
    maxRemoved = Math.max(maxRemoved, host.removed_.length - before);
    dispatches++;
  } while (host.more > 0 && dispatches < 10_000);
  return { dispatches, maxRemoved };
}

describe('expiry while delivering - bounded per dispatch', () => {
  it('one dispatch removes at most EXPIRED_PER_DISPATCH expired rows and asks for more; all go in the end, the live ones in order', () => {
    const host = new Host();
    const q = new Queue('q', qs(), host);
    const run = 5 * EXPIRED_PER_DISPATCH + 17;
    const live: number[] = [];
    const expired: number[] = [];
    let id = 0;
    // A long expired run at the head, then live and expired interleaved, a second run, a live tail.
    const put = (expiresAt: number, into: number[]): void => {
      q.enqueue(record(++id, { expiresAt }));
      into.push(id);
    };
    for (let i = 0; i < run; i++) put(NOW - 1, expired);
    for (let i = 0; i < 50; i++) {
      if (i % 3 === 0) put(NOW, expired);
      else put(NOW + 60_000, live);
    }
    for (let i = 0; i < 2 * EXPIRED_PER_DISPATCH; i++) put(NOW - 5, expired);
    for (let i = 0; i < 10; i++) put(0, live);

    const c = new CheckingConsumer('c', 1_000_000);
    q.addConsumer(c);
    host.more = 0;
    q.dispatch(NOW);
    expect(host.removed_.length).toBe(EXPIRED_PER_DISPATCH);
    expect(host.more).toBe(1);
    // Nothing live was reachable yet, and a consumer still behind expired rows is not idle (a drain waits).
    expect(c.ids).toEqual([]);
    expect(c.idles).toBe(0);

    const { dispatches, maxRemoved } = dispatchUntilDone(q, host);
    expect(maxRemoved).toBeLessThanOrEqual(EXPIRED_PER_DISPATCH);
    expect(dispatches).toBeGreaterThan(1);
    expect(host.more).toBe(0);
    expect(host.removed_.map((r) => r.id).sort((a, b) => a - b)).toEqual(expired);
    expect(host.removed_.every((r) => r.reason === 'expired')).toBe(true);
    expect(c.ids).toEqual(live);
    expect(c.expiredGiven).toEqual([]);
    expect(c.idles).toBe(1);
    expect(q.depth).toBe(live.length);
  });

  it('several consumers share one budget; priorities keep their order; nothing expired is given', () => {
    const host = new Host();
    const q = new Queue('q', qs({ priorities: 10 }), host);
    let id = 0;
    const expected: number[] = [];
    // High priority: an expired run, then live ones; low priority: live ones behind an expired run.
    for (let i = 0; i < 3 * EXPIRED_PER_DISPATCH; i++) q.enqueue(record(++id, { priority: 9, expiresAt: NOW - 1 }));
    const high = Array.from({ length: 5 }, () => ++id);
    for (const h of high) q.enqueue(record(h, { priority: 9, expiresAt: NOW + 1 }));
    for (let i = 0; i < 2 * EXPIRED_PER_DISPATCH; i++) q.enqueue(record(++id, { priority: 0, expiresAt: NOW }));
    const low = Array.from({ length: 5 }, () => ++id);
    for (const l of low) q.enqueue(record(l, { priority: 0 }));
    expected.push(...high, ...low);
    const a = new CheckingConsumer('a', 1000);
    const b = new CheckingConsumer('b', 1000);
    q.addConsumer(a);
    q.addConsumer(b);
    const { maxRemoved } = dispatchUntilDone(q, host);
    expect(maxRemoved).toBeLessThanOrEqual(EXPIRED_PER_DISPATCH);
    expect(host.removed_.length).toBe(5 * EXPIRED_PER_DISPATCH);
    // Round-robin between the two, each message once, in priority-then-id order overall.
    const all = [...a.deliveries, ...b.deliveries].map((e) => e.msg.id);
    expect(all.sort((x, y) => expected.indexOf(x) - expected.indexOf(y))).toEqual(expected);
    for (const c of [a, b]) {
      expect(c.expiredGiven).toEqual([]);
      expect(c.ids).toEqual([...c.ids].sort((x, y) => expected.indexOf(x) - expected.indexOf(y)));
    }
  });

  it('an expired run behind a live message (met by takeFor, not at the head) is bounded the same way', () => {
    const host = new Host();
    const q = new Queue('q', qs(), host);
    q.enqueue(record(1));
    for (let id = 2; id <= 4 * EXPIRED_PER_DISPATCH + 1; id++) q.enqueue(record(id, { expiresAt: NOW - 1 }));
    const last = 4 * EXPIRED_PER_DISPATCH + 2;
    q.enqueue(record(last));
    const c = new CheckingConsumer('c', 10);
    q.addConsumer(c);
    host.more = 0;
    q.dispatch(NOW);
    expect(c.ids).toEqual([1]);
    expect(host.removed_.length).toBe(EXPIRED_PER_DISPATCH);
    expect(host.more).toBe(1);
    dispatchUntilDone(q, host);
    expect(c.ids).toEqual([1, last]);
    expect(host.removed_.length).toBe(4 * EXPIRED_PER_DISPATCH);
  });

  it('a browser passes at most EXPIRED_PER_DISPATCH expired rows per dispatch, and sees the live ones in order', () => {
    const host = new Host();
    const q = new Queue('q', qs(), host);
    // A live head keeps the expired run from being dropped as heads: the browser walks past it.
    q.enqueue(record(1));
    const runEnd = 3 * EXPIRED_PER_DISPATCH + 1;
    for (let id = 2; id <= runEnd; id++) q.enqueue(record(id, { expiresAt: NOW - 1 }));
    q.enqueue(record(runEnd + 1));
    q.enqueue(record(runEnd + 2, { expiresAt: NOW + 1 }));
    const browser = new CheckingConsumer('b', 100, true);
    q.addConsumer(browser);
    host.more = 0;
    q.dispatch(NOW);
    expect(browser.ids).toEqual([1]);
    expect(host.more).toBe(1);
    const { dispatches } = dispatchUntilDone(q, host);
    expect(dispatches).toBe(2); // the run of 3 budgets: this one and two more
    expect(browser.ids).toEqual([1, runEnd + 1, runEnd + 2]);
    expect(browser.expiredGiven).toEqual([]);
    // A browser takes nothing: the expired rows are still there for the timer.
    expect(host.removed_).toEqual([]);
  });
});

describe('expiry while delivering - through the broker', () => {
  it('every expired message is dead-lettered once and dequeued, a slice per dispatch, each slice scheduled again', () => {
    const ready: string[] = [];
    const { broker, clock, logged } = newBroker({ events: { queueReady: (q) => ready.push(q.name) } });
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const q = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' })).queue;
    const n = 3 * EXPIRED_PER_DISPATCH + 5;
    for (let i = 0; i < n; i++) broker.publish('q', msg(`<x${i}>`, { ttlMs: 10 }));
    broker.publish('q', msg('live'));
    clock.advance(10);
    const c = new FakeConsumer('c', 100);
    q.addConsumer(c);
    logged.length = 0;
    let dispatches = 0;
    // Bounded: the broker's scheduling, done by hand.
    do {
      ready.length = 0;
      q.dispatch(clock.now());
      dispatches++;
    } while (ready.includes('q') && dispatches < 100);
    expect(dispatches).toBe(4);
    expect(c.bodies).toEqual(['live']);
    const dlq = broker.queue('dlq');
    expect(dlq.depth).toBe(n);
    // In order (the dead letter's bytes hold the body after the annotations it gained).
    const missing = dlq.entries().filter((e, i) => !e.msg.bytes.includes(`<x${i}>`));
    expect(missing.length).toBe(0);
    // Each dead letter and its dequeue in one record.
    expect(messageRecords(logged)).toEqual(Array.from({ length: n }, () => 'enqueue dlq + dequeue q'));
    expect(q.dequeued).toBe(n);
  });
});

describe('expiry timer - Queue.expire', () => {
  it('finds a message due sooner than every row it looked at before, however it got there (publish, release, paged, paged run)', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('q', qs()).queue;
    broker.publish('q', msg('long', { ttlMs: 60_000 }));
    broker.publish('q', msg('taken', { ttlMs: 50 }));
    const c = new FakeConsumer('c', 2);
    q.addConsumer(c);
    q.dispatch(clock.now());
    expect(c.bodies).toEqual(['long', 'taken']);
    // Both out with the consumer: nothing to look at.
    expect(broker.expire()).toBe(0);
    q.release(c.deliveries[0]!, { deliveryFailed: false, undeliverableHere: false });
    expect(broker.expire()).toBe(0); // looked at every row: none due before 60 s
    // A short ttl published now is found.
    broker.publish('q', msg('short', { ttlMs: 10 }));
    clock.advance(10);
    expect(broker.expire()).toBe(1);
    // One released after the look comes due sooner than anything looked at.
    q.release(c.deliveries[1]!, { deliveryFailed: false, undeliverableHere: false });
    clock.advance(40);
    expect(broker.expire()).toBe(1);
    expect(q.entries().map((e) => e.msg.bytes.toString())).toEqual(['long']);

    // Paged rows (recovery): one at a time and as a run.
    const loader: BodyLoader = { load: () => Buffer.from(''), loadSubject: () => undefined };
    const paged = (id: number, expiresAt: number): PagedMessage => new PagedMessage(pagedFields({ ...record(id), expiresAt }), 'q', loader);
    const p = new Queue('p', qs(), new Host());
    p.enqueue(record(1, { expiresAt: NOW + 60_000 }));
    expect(p.expire(NOW)).toBe(0);
    p.enqueue(paged(2, NOW + 5));
    expect(p.expire(NOW + 5)).toBe(1);
    const run: PagedRun = {
      count: 2,
      ids: new Float64Array([10, 11]),
      size: new Uint32Array([1, 1]),
      expiresAt: new Float64Array([NOW + 7, 0]),
      deliveryCount: new Uint32Array(2),
      headerLength: new Uint32Array(2),
      priority: new Uint8Array([4, 4]),
      flags: new Uint8Array([1, 1]),
    };
    expect(p.expire(NOW + 6)).toBe(0);
    p.enqueuePagedRun(run, loader);
    expect(p.expire(NOW + 7)).toBe(1);
    expect([...p.ids()]).toEqual([1, 11]);
  });

  it('a tick cut by its limit leaves the rest due for the next one', () => {
    const host = new Host();
    const q = new Queue('q', qs(), host);
    for (let id = 1; id <= 10; id++) q.enqueue(record(id, { expiresAt: id <= 6 ? NOW : NOW + 100 }));
    expect(q.expire(NOW, 4)).toBe(4);
    expect(q.expire(NOW, 4)).toBe(2);
    expect(q.expire(NOW + 99, 4)).toBe(0);
    expect(q.expire(NOW + 100, 4)).toBe(4);
    expect(q.depth).toBe(0);
  });
});

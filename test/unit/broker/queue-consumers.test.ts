// What a consumer's comings and goings cost the queue, and what it leaves behind:
// a detach visits what that consumer holds or refused, not every message out with
// others; a consumer that refused (undeliverable-here) most of the queue does not
// walk all of it at each dispatch; a queue deleted under consumers tells each.
import { describe, expect, it } from 'vitest';
import { Queue, type QueueEntry } from '../../../src/broker/queue.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { FakeConsumer, qs } from './helpers.js';

const host = { removed: () => undefined, unused: () => undefined };

function record(id: number, priority = 4): MessageRecord {
  return { id, bytes: Buffer.from(`m${id}`), headerLength: 0, durable: false, priority, expiresAt: 0, deliveryCount: 0, subject: undefined } as unknown as MessageRecord;
}

function filled(n: number, settings = qs()): Queue {
  const q = new Queue('q', settings, host);
  for (let id = 1; id <= n; id++) q.enqueue(record(id));
  return q;
}

/**
 * Counts reads of `obj[key]` from now on (the value still reads and writes as before):
 * how many entries or consumers a queue operation looked at, measured as work, not time.
 */
function countReads<T extends object>(obj: T, key: keyof T & string, counter: { reads: number }): void {
  let value = obj[key];
  Object.defineProperty(obj, key, {
    get: () => {
      counter.reads++;
      return value;
    },
    set: (v) => {
      value = v;
    },
    configurable: true,
  });
}

const refuse = { deliveryFailed: false, undeliverableHere: true };
const release = { deliveryFailed: false, undeliverableHere: false };

describe('Queue consumers - a detach or a dispatch costs what concerns that consumer', () => {
  it('attach and detach of other consumers while one holds 10,000 messages: each detach visits none of them', () => {
    const q = filled(10_000);
    const holder = new FakeConsumer('holder', 10_000);
    q.addConsumer(holder);
    q.dispatch(0);
    expect(q.acquired).toBe(10_000);
    const looked = { reads: 0 };
    for (const e of holder.deliveries) countReads(e, 'acquiredBy', looked);
    // Old: each detach walked every acquired row (with 100,000 held, 2.5 ms a detach).
    for (let i = 0; i < 200; i++) {
      const c = new FakeConsumer(`c${i}`, 0);
      q.addConsumer(c);
      q.removeConsumer(c);
    }
    expect(looked.reads).toBe(0);
    // The holder's own detach still gives everything back, each delivery counted.
    q.removeConsumer(holder);
    expect(q.acquired).toBe(0);
    expect(q.available).toBe(10_000);
    expect([...q.availableEntries()].slice(0, 3).map((e) => e.deliveryCount)).toEqual([1, 1, 1]);
  });

  it('a consumer that refused every message, dispatched again and again (each of its flows can ask), does not walk them each time', () => {
    const q = filled(10_000);
    const holder = new FakeConsumer('holder', 10_000);
    q.addConsumer(holder);
    q.dispatch(0);
    for (const e of holder.deliveries) q.release(e, refuse);
    expect(q.available).toBe(10_000);
    holder.credit = 10;
    const before = holder.deliveries.length;
    q.dispatch(0); // the first look walks them, once
    const looked = { reads: 0 };
    for (const e of holder.deliveries) countReads(e, 'refusedBy', looked);
    // Old: every dispatch walked every refused row (with 100,000 refused, 2.3 ms a dispatch).
    for (let i = 0; i < 200; i++) q.dispatch(0);
    expect(looked.reads).toBe(0);
    expect(holder.deliveries.length).toBe(before);
    // A new message is still its.
    q.enqueue(record(10_001));
    q.dispatch(0);
    expect(holder.ids.slice(before)).toEqual([10_001]);
    // Another consumer takes the refused ones, in order.
    const other = new FakeConsumer('other', 3);
    q.addConsumer(other);
    q.dispatch(0);
    expect(other.ids).toEqual([1, 2, 3]);
  });

  it('a message put back below where a consumer\'s refusals end is still offered to it', () => {
    const q = filled(10);
    const a = new FakeConsumer('a', 0);
    const b = new FakeConsumer('b', 1);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0); // b holds message 1
    expect(b.ids).toEqual([1]);
    a.credit = 9;
    q.dispatch(0); // a takes 2..10
    for (const e of a.deliveries) q.release(e, refuse);
    a.credit = 5;
    q.dispatch(0); // a refused all it may see: nothing, and it notes so
    expect(a.ids).toEqual([2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // b gives message 1 back: a never refused it, so a gets it.
    q.release(b.deliveries[0]!, release);
    b.credit = 0;
    q.dispatch(0);
    expect(a.ids.slice(9)).toEqual([1]);
  });

  it('refusals per priority level: a message a consumer may take in a lower level is found past a level it refused', () => {
    const q = new Queue('q', qs({ priorities: 10 }), host);
    for (let id = 1; id <= 5; id++) q.enqueue(record(id, 9));
    const a = new FakeConsumer('a', 5);
    q.addConsumer(a);
    q.dispatch(0);
    for (const e of a.deliveries) q.release(e, refuse);
    q.enqueue(record(6, 0));
    q.enqueue(record(7, 9));
    a.credit = 5;
    q.dispatch(0);
    expect(a.ids.slice(5)).toEqual([7, 6]);
  });

  it('a detached consumer\'s refusals are forgotten: its entries may be paged out as plain rows', () => {
    const q = filled(3);
    const a = new FakeConsumer('a', 3);
    q.addConsumer(a);
    q.dispatch(0);
    for (const e of a.deliveries) q.release(e, refuse);
    q.removeConsumer(a);
    expect([...q.availableEntries()].map((e: QueueEntry) => e.refusedBy)).toEqual([undefined, undefined, undefined]);
  });

  it('a queue deleted under its consumers tells each of them, and keeps none', () => {
    const q = filled(2);
    const told: string[] = [];
    const consumers = ['a', 'b'].map((id) => Object.assign(new FakeConsumer(id, 1), { queueDeleted: () => told.push(id) }));
    for (const c of consumers) q.addConsumer(c);
    q.dispatch(0);
    q.discard();
    expect(told).toEqual(['a', 'b']);
    expect(q.consumerCount).toBe(0);
  });
});

describe('Queue consumers - consumers without credit cost nothing per message', () => {
  it('1,000 consumers holding no credit beside one that takes 5,000 messages: one look at each per dispatch, not a walk of all of them per message', () => {
    const q = filled(5_000);
    const looked = { reads: 0 };
    for (let i = 0; i < 1_000; i++) {
      const idle = new FakeConsumer(`idle${i}`, 0);
      countReads(idle, 'credit', looked);
      q.addConsumer(idle);
    }
    const busy = new FakeConsumer('busy', 5_000);
    q.addConsumer(busy);
    // Old: each message took a pass over all of them (with 10,000 idle, 20,000 messages held the event loop 1.2 s).
    expect(q.dispatch(0)).toBe(5_000);
    expect(looked.reads).toBe(1_000);
    expect(busy.ids.slice(0, 3)).toEqual([1, 2, 3]);
  });

  it('round-robin among consumers with credit, carried on from where the last dispatch stopped, skipping ones with none', () => {
    const q = filled(7);
    const [a, idle, b] = [new FakeConsumer('a', 3), new FakeConsumer('idle', 0), new FakeConsumer('b', 10)];
    for (const c of [a, idle, b]) q.addConsumer(c);
    q.dispatch(0);
    // a runs out of credit after 3; b takes the rest.
    expect(a.ids).toEqual([1, 3, 5]);
    expect(b.ids).toEqual([2, 4, 6, 7]);
    idle.credit = 5;
    a.credit = 5;
    for (let id = 8; id <= 10; id++) q.enqueue(record(id));
    q.dispatch(0);
    // b had the last; the turn goes on from it: a, idle, b.
    expect([a.ids.slice(3), idle.ids, b.ids.slice(4)]).toEqual([[8], [9], [10]]);
  });
});

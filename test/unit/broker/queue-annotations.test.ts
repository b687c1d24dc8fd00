// A queue entry keeps the message-annotations a consumer's modified outcome added
// (AMQP 1.0 3.4.5) while it is queued: through a release, a redelivery to another
// consumer, a browser's copy, and its body being paged out to the journal.
import { describe, expect, it } from 'vitest';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { PagedMessage, type BodyLoader } from '../../../src/broker/paged-message.js';
import { Queue } from '../../../src/broker/queue.js';
import { FakeConsumer, qs } from './helpers.js';

const host = { removed: () => undefined, unused: () => undefined };

function record(id: number): MessageRecord {
  return { id, bytes: Buffer.from(`m${id}`), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined };
}

const loader: BodyLoader = { load: (m: PagedMessage) => Buffer.from(`m${m.id}`), loadSubject: () => undefined };
const added = Buffer.from([0xc1, 0x01, 0x00]);

describe('Queue - annotations a modified outcome added', () => {
  it('queue annotations - kept with the entry when it goes back, seen by the next consumer and by a browser', () => {
    const q = new Queue('q', qs(), host);
    q.enqueue(record(1));
    const a = new FakeConsumer('a', 1);
    q.addConsumer(a);
    q.dispatch(0);
    q.release(a.deliveries[0]!, { deliveryFailed: true, undeliverableHere: false, annotations: added });
    const browser = new FakeConsumer('browser', 1, true);
    const b = new FakeConsumer('b', 1);
    q.addConsumer(browser);
    q.addConsumer(b);
    q.dispatch(0);
    expect(browser.deliveries[0]!.annotations).toBe(added);
    expect(b.deliveries[0]!.annotations).toBe(added);
    expect(b.deliveries[0]!.deliveryCount).toBe(1);
    // A release that adds none keeps what the entry held.
    q.release(b.deliveries[0]!, { deliveryFailed: false, undeliverableHere: false });
    expect(q.entry(1)!.annotations).toBe(added);
  });

  it('queue annotations - an annotated entry whose body is paged out keeps its object (a paged row has no room for them), delivery-count unchanged or not', () => {
    const q = new Queue('q', qs(), host);
    q.enqueue(record(1));
    q.enqueue(record(2));
    const a = new FakeConsumer('a', 1);
    q.addConsumer(a);
    q.dispatch(0);
    // Modified without delivery-failed: its count is the message's own, only the annotations differ.
    q.release(a.deliveries[0]!, { deliveryFailed: false, undeliverableHere: false, annotations: added });
    q.removeConsumer(a);
    expect(q.pageOut(1, loader)).toBeGreaterThan(0);
    expect(q.pageOut(2, loader)).toBeGreaterThan(0);
    expect(q.pagedDepth).toBe(2);
    const b = new FakeConsumer('b', 2);
    q.addConsumer(b);
    q.dispatch(0);
    expect(b.deliveries.map((e) => [e.msg.id, e.msg instanceof PagedMessage, e.annotations])).toEqual([
      [1, true, added],
      [2, true, undefined],
    ]);
    expect(b.deliveries[0]!.msg.bytes.toString()).toBe('m1');
  });
});

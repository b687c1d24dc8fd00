// Message bodies that borrow a larger buffer's memory (src/broker/borrowed-bodies.ts):
// those still queued a tick after the tick they came in get memory of their own when
// they fill little of their buffer, are left as they are when they fill much of it (a
// backlog) and looked at again later, and a message that moves between a queue's tables
// while the walk is under way (dispatched, given back) is not missed.
import { describe, expect, it } from 'vitest';
import { BorrowedBodySweep, borrowsMemory, MOST_RECHECK_TICKS, RECHECK_TICKS } from '../../../src/broker/borrowed-bodies.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { Queue, type QueueEntry, type QueueHost, type RemovalReason } from '../../../src/broker/queue.js';
import { Broker } from '../../../src/broker/broker.js';
import { defaultExchangeSettings } from '../../../src/broker/settings.js';
import { FakeClock, FakeConsumer, msg, qs } from './helpers.js';

const NOW = 1_000_000;
const BODY = 100;

class Host implements QueueHost {
  removed(_q: Queue, _entry: QueueEntry, _reason: RemovalReason): void {}
  unused(): void {}
}

/** `count` messages (ids from `firstId`) whose bodies are consecutive 100-byte views into one buffer of `bufferBytes`. */
function borrowingRecords(count: number, bufferBytes: number, firstId = 1): MessageRecord[] {
  const read = Buffer.alloc(bufferBytes, 1);
  return Array.from({ length: count }, (_, i) => ({
    id: firstId + i,
    bytes: read.subarray(i * BODY, (i + 1) * BODY),
    headerLength: 0,
    durable: false,
    priority: 4,
    expiresAt: 0,
    deliveryCount: 0,
    subject: undefined,
  }));
}

function queueOf(records: MessageRecord[]): Queue {
  const q = new Queue('q', qs(), new Host());
  for (const r of records) q.enqueue(r);
  return q;
}

const borrowing = (records: MessageRecord[]) => records.filter((r) => borrowsMemory(r.bytes)).length;

/**
 * Consume all of a backlog but every 64th message (10 left: 1,000 bytes of a 64,000-byte
 * read), then tick until those are copied: how many ticks it took (failing past twice `within`).
 */
async function ticksUntilStragglersOwned(q: Queue, records: MessageRecord[], sweep: BorrowedBodySweep, within: number): Promise<number> {
  for (const r of records) if (r.id % 64 !== 0) expect(q.drop(r.id)).toBe(true);
  const left = records.filter((r) => r.id % 64 === 0);
  let ticks = 0;
  while (borrowing(left) > 0 && ticks < 2 * within) {
    await sweep.tick();
    ticks++;
  }
  expect(borrowing(left), `still borrowing after ${ticks} ticks`).toBe(0);
  return ticks;
}

describe('borrowed message bodies', () => {
  it('borrowed bodies - a few messages of a large read still queued two ticks on get bodies of their own, each once, the same bytes', async () => {
    const records = borrowingRecords(10, 64 * 1024);
    const q = queueOf(records);
    const sweep = new BorrowedBodySweep(() => [q]);
    await sweep.tick();
    expect(borrowing(records), 'a tick after they came: not looked at yet').toBe(10);
    await sweep.tick();
    expect(borrowing(records)).toBe(0);
    for (const r of records) expect(r.bytes.equals(Buffer.alloc(BODY, 1))).toBe(true);
    const copies = records.map((r) => r.bytes);
    for (let t = 0; t < RECHECK_TICKS + 2; t++) await sweep.tick();
    expect(records.map((r) => r.bytes), 'copied again').toEqual(copies);
    records.forEach((r, i) => expect(r.bytes).toBe(copies[i]));
  });

  it('borrowed bodies - a backlog filling its reads is left as it is; once most of it is consumed the rest is copied at the next look', async () => {
    // 640 messages fill a 64,000-byte read: nothing to gain by copying them.
    const records = borrowingRecords(640, 640 * BODY);
    const q = queueOf(records);
    const sweep = new BorrowedBodySweep(() => [q]);
    await sweep.tick();
    await sweep.tick();
    expect(borrowing(records), 'a backlog is left borrowing').toBe(640);
    expect(await ticksUntilStragglersOwned(q, records, sweep, RECHECK_TICKS)).toBeLessThanOrEqual(RECHECK_TICKS);
  });

  it('borrowed bodies - a backlog that stays whole is looked at less and less often, and its stragglers are still copied once it is consumed', async () => {
    const records = borrowingRecords(640, 640 * BODY);
    const q = queueOf(records);
    const sweep = new BorrowedBodySweep(() => [q]);
    let looks = 0;
    for (let t = 0; t < 600; t++) {
      const before = sweep.rowsLooked;
      await sweep.tick();
      if (sweep.rowsLooked > before) looks++;
    }
    expect(borrowing(records), 'a whole backlog is never copied').toBe(640);
    // The first look, then again after 16, 32, 64, 128, 256 ticks: not every 16 (38 looks).
    expect(looks).toBeLessThanOrEqual(7);
    expect(await ticksUntilStragglersOwned(q, records, sweep, MOST_RECHECK_TICKS)).toBeLessThanOrEqual(MOST_RECHECK_TICKS);
  });

  it('borrowed bodies - messages dispatched and given back between the steps of a walk are each found and copied', () => {
    // 1,000 bodies of 100 bytes in a 1 MiB read: each worth copying.
    const records = borrowingRecords(1000, 1024 * 1024);
    const q = queueOf(records);
    // Half of them out with a consumer before the walk starts (in the acquired table).
    const c = new FakeConsumer('c', 500);
    q.addConsumer(c);
    q.dispatch(NOW);
    q.borrowed.age(1);
    q.borrowed.age(2);
    let steps = 0;
    // Bounded: each step finishes a sub-range, or returns 0.
    for (let rows = q.ownBorrowedBodies(16); rows > 0 && steps < 10_000; rows = q.ownBorrowedBodies(16)) {
      steps++;
      // Between steps: the consumer gives back the newest 20 it holds (acquired -> level,
      // ahead of the walk or behind it) and is given 5 more (level -> acquired).
      if (steps % 3 === 0) {
        for (const e of c.deliveries.splice(-20)) q.release(e, { deliveryFailed: false, undeliverableHere: false });
      }
      c.credit = 5;
      q.dispatch(NOW);
    }
    expect(steps).toBeGreaterThan(10);
    expect(borrowing(records)).toBe(0);
    expect(q.depth).toBe(1000);
  });

  it('borrowed bodies - a message published to 20 queues through a fanout gets one copy of its body, not one per queue', async () => {
    const broker = new Broker({ now: new FakeClock().now });
    const names = Array.from({ length: 20 }, (_, i) => `fan${i}`);
    for (const name of names) broker.declareQueue(name, qs());
    broker.declareExchange('fan', 'fanout', { ...defaultExchangeSettings });
    for (const name of names) broker.bind('fan', name, '');
    // 10 bodies of 1,000 bytes in a 64 KiB read: each queue holds 10,000 bytes of it, worth copying.
    const read = Buffer.alloc(64 * 1024, 7);
    for (let i = 0; i < 10; i++) broker.publish('fan', msg('', { bytes: read.subarray(i * 1000, (i + 1) * 1000) }));
    const sweep = new BorrowedBodySweep(() => broker.queues.values());
    await sweep.tick();
    await sweep.tick();
    const held = new Set<ArrayBufferLike>();
    for (const name of names) {
      for (const e of broker.queues.get(name)!.entries()) {
        expect(borrowsMemory(e.msg.bytes)).toBe(false);
        expect(e.msg.bytes.equals(Buffer.alloc(1000, 7))).toBe(true);
        held.add(e.msg.bytes.buffer);
      }
    }
    // One copy a message (each queue copying for itself held 200,000 bytes for the 65,536 of the read).
    expect(held.size).toBe(10);
    expect([...held].reduce((n, b) => n + b.byteLength, 0)).toBe(10_000);
  });
});

// The memory alarm: raised at the high watermark, cleared only below the low
// one, and while raised the broker model refuses new messages with a
// resource-limit error that says what to do (consumers still work).
import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import { TandemError } from '../../../src/broker/errors.js';
import { MemoryAlarm, type HeapReading } from '../../../src/ops/memory-alarm.js';
import { FakeConsumer, msg, qs } from '../broker/helpers.js';

describe('memory alarm', () => {
  it('memory alarm - raises at 50% of the heap limit, clears below 40%, no flapping in between', () => {
    let reading: HeapReading = { used: 50, limit: 100 };
    const changes: Array<string | undefined> = [];
    let t = 0;
    const alarm = new MemoryAlarm({ read: () => reading, collect: () => {}, now: () => t, onChange: (reason) => changes.push(reason) });
    for (const used of [30, 49, 50, 60, 45, 41, 40, 39, 45, 51]) {
      reading = { used, limit: 100 };
      t += 10_000;
      alarm.check();
    }
    expect(changes.map((c) => (c === undefined ? 'clear' : 'raise'))).toEqual(['raise', 'clear', 'raise']);
    expect(changes[0]).toMatch(/max-old-space-size/);
  });

  it('memory alarm - raises when live memory reaches memory-limit though the heap is fine, clears below 80% of it', () => {
    let reading: HeapReading = { used: 10, limit: 100, live: 0 };
    const changes: Array<string | undefined> = [];
    let t = 0;
    const alarm = new MemoryAlarm({ read: () => reading, memoryLimit: 1000, collect: () => {}, now: () => t, onChange: (reason) => changes.push(reason) });
    for (const live of [500, 999, 1000, 1200, 850, 801, 799, 900, 1001]) {
      reading = { used: 10, limit: 100, live };
      t += 10_000;
      alarm.check();
    }
    expect(changes.map((c) => (c === undefined ? 'clear' : 'raise'))).toEqual(['raise', 'clear', 'raise']);
    expect(changes[0]).toMatch(/memory-limit/);
    // Cleared only when both are low: the heap past its low mark keeps it raised.
    reading = { used: 45, limit: 100, live: 100 };
    alarm.check();
    expect(alarm.active).toBe(true);
  });

  it('memory alarm - garbage is no alarm: a reading past a mark is confirmed by a full collection, at most every 2 s while it stays near what the last one left', () => {
    // What a collection leaves: `live`; what the heap shows before it: `live + garbage`.
    let live = 400;
    let garbage = 700;
    let t = 0;
    let collections = 0;
    const changes: Array<string | undefined> = [];
    const alarm = new MemoryAlarm({
      read: () => ({ used: 10, limit: 100, live: live + garbage }),
      collect: () => {
        collections++;
        garbage = 0;
      },
      now: () => t,
      memoryLimit: 1000,
      onChange: (reason) => changes.push(reason),
    });
    t = 10_000;
    alarm.check(); // 1100 shown, 400 live: collected, nothing refused
    expect([collections, changes.length]).toEqual([1, 0]);
    // Grown for real to 990, with a little garbage on top: past the limit, and far above
    // what the last collection left, so collected at once.
    live = 990;
    garbage = 20;
    t += 500;
    alarm.check();
    expect([collections, changes.length]).toEqual([2, 0]);
    // Hovering: past again half a second later, but within an eighth of the limit of what
    // the last collection left: not collected again yet, and no alarm.
    garbage = 20;
    t += 500;
    alarm.check();
    expect([collections, changes.length]).toEqual([2, 0]);
    t += 2000;
    alarm.check(); // 2 s on: collected; 990 is under the limit
    expect([collections, changes.length]).toEqual([3, 0]);
    // A fast producer: grown by far more than an eighth of the limit within half a second.
    live = 1300;
    t += 500;
    alarm.check();
    expect(collections).toBe(4);
    expect(changes).toHaveLength(1);
    expect(changes[0]).toMatch(/memory-limit/);
    expect(alarm.active).toBe(true);
    // Drained, cleared, and past again within 2 s of the last collection: confirmed at
    // once, not against the reading that raised it.
    live = 500;
    t += 500;
    alarm.check();
    expect(alarm.active).toBe(false);
    live = 1100;
    t += 500;
    alarm.check();
    expect(collections).toBe(5);
    expect(alarm.active).toBe(true);
  });

  it('memory alarm - the broker refuses new messages and transactional sends, and still delivers', () => {
    const broker = new Broker();
    const { queue } = broker.declareQueue('q', qs());
    broker.publish('q', msg('before'));
    broker.memoryAlarm = 'broker memory is nearly full';
    const refused = (() => {
      try {
        broker.publish('q', msg('during'));
      } catch (err) {
        return err;
      }
    })();
    expect(refused).toBeInstanceOf(TandemError);
    expect((refused as TandemError).condition).toBe('amqp:resource-limit-exceeded');
    expect(() => broker.commit([{ address: 'q', msg: msg('tx') }], [])).toThrow(/memory is nearly full; the transaction was rolled back/);
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    queue.dispatch(broker.now());
    expect(c.bodies).toEqual(['before']);
    broker.accept(queue, c.deliveries[0]!);
    broker.memoryAlarm = undefined;
    broker.publish('q', msg('after'));
    expect(queue.depth).toBe(1);
  });
});

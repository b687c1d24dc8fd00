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
    const alarm = new MemoryAlarm({ read: () => reading, onChange: (reason) => changes.push(reason) });
    for (const used of [30, 49, 50, 60, 45, 41, 40, 39, 45, 51]) {
      reading = { used, limit: 100 };
      alarm.check();
    }
    expect(changes.map((c) => (c === undefined ? 'clear' : 'raise'))).toEqual(['raise', 'clear', 'raise']);
    expect(changes[0]).toMatch(/max-old-space-size/);
  });

  it('memory alarm - raises when live memory reaches memory-limit though the heap is fine, clears below 80% of it', () => {
    let reading: HeapReading = { used: 10, limit: 100, live: 0 };
    const changes: Array<string | undefined> = [];
    const alarm = new MemoryAlarm({ read: () => reading, memoryLimit: 1000, onChange: (reason) => changes.push(reason) });
    for (const live of [500, 999, 1000, 1200, 850, 801, 799, 900, 1001]) {
      reading = { used: 10, limit: 100, live };
      alarm.check();
    }
    expect(changes.map((c) => (c === undefined ? 'clear' : 'raise'))).toEqual(['raise', 'clear', 'raise']);
    expect(changes[0]).toMatch(/memory-limit/);
    // Cleared only when both are low: the heap past its low mark keeps it raised.
    reading = { used: 45, limit: 100, live: 100 };
    alarm.check();
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

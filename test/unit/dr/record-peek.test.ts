// The DR source filters its window by reading the queue name straight from the
// encoded records: it must agree with the codec for every kind it claims, and
// claim no other kind.
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { defaultQueueSettings } from '../../../src/broker/settings.js';
import { peekQueueChange } from '../../../src/dr/record-peek.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { message } from '../store/helpers.js';

describe('DR record peek', () => {
  it('DR record peek - reads the queue of enqueues and dequeues as the codec wrote it', () => {
    for (const queue of ['q', 'orders.eu-west', 'ключ/队列 é', 'x'.repeat(300)]) {
      const enq: LoggedChange = { lsn: 2 ** 40 + 7, durable: true, change: { kind: 'enqueue', queue, message: message(9, 'body') } };
      const deq: LoggedChange = { lsn: 12, durable: false, change: { kind: 'dequeue', queue, id: 9 } };
      expect(peekQueueChange(encodeChange(enq))).toEqual({ queue, dequeue: false });
      expect(peekQueueChange(encodeChange(deq))).toEqual({ queue, dequeue: true });
    }
  });

  it('DR record peek - says nothing about other kinds or a cut record', () => {
    const others: LoggedChange[] = [
      { lsn: 1, durable: true, change: { kind: 'queue-declare', name: 'q', settings: defaultQueueSettings } },
      { lsn: 2, durable: true, change: { kind: 'queue-delete', name: 'q' } },
      { lsn: 3, durable: true, change: { kind: 'transaction', changes: [{ kind: 'dequeue', queue: 'q', id: 1 }] } },
      { lsn: 4, durable: true, change: { kind: 'dr-transaction', queues: ['q'], lsn: 3, time: 5, changes: [] } },
    ];
    for (const e of others) expect(peekQueueChange(encodeChange(e))).toBeUndefined();
    const record = encodeChange({ lsn: 5, durable: true, change: { kind: 'dequeue', queue: 'long-name', id: 1 } });
    expect(peekQueueChange(record.subarray(0, 16))).toBeUndefined();
    expect(peekQueueChange(record.subarray(0, 12))).toBeUndefined();
  });
});

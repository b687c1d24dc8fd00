// The DR stream's messages are written by hand into one buffer (not by rhea's
// encoder): they must be AMQP that rhea decodes to the same properties and
// records, from records already encoded or from changes.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { decodeDrMessage, encodeDrMessage, type DrStreamMessage } from '../../../src/dr/protocol.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { message } from '../store/helpers.js';

const entries: LoggedChange[] = [
  { lsn: 10, durable: true, change: { kind: 'enqueue', queue: 'orders', message: message(1, 'x'.repeat(3000)) } },
  { lsn: 11, durable: false, change: { kind: 'dequeue', queue: 'orders', id: 1 } },
  { lsn: 12, durable: true, change: { kind: 'transaction', changes: [{ kind: 'enqueue', queue: 'ä', message: message(2) }] } },
];

function roundTrip(m: DrStreamMessage): DrStreamMessage {
  return decodeDrMessage(rhea.message.decode(encodeDrMessage(m)) as never);
}

describe('DR stream protocol', () => {
  it('DR protocol - a message from records or from changes decodes to the same', () => {
    const base = { kind: 'changes' as const, lsn: 12, time: 1_700_000_000_123, head: 99, now: 1_700_000_000_456 };
    const fromEntries = roundTrip({ ...base, entries });
    const fromRecords = roundTrip({ ...base, records: entries.map((e) => encodeChange(e)) });
    expect(fromEntries).toEqual({ ...base, entries });
    expect(fromRecords).toEqual({ ...base, entries });
  });

  it('DR protocol - control messages carry their fields and no records', () => {
    const begin = roundTrip({ kind: 'snapshot-begin', lsn: 0, time: 5, head: 7, now: 8, queues: ['a', 'b'], reason: 'a: new' });
    expect(begin).toEqual({ kind: 'snapshot-begin', lsn: 0, time: 5, head: 7, now: 8, queues: ['a', 'b'], reason: 'a: new' });
    expect(roundTrip({ kind: 'heartbeat', lsn: 3, time: 4, head: 3, now: 4 })).toEqual({ kind: 'heartbeat', lsn: 3, time: 4, head: 3, now: 4 });
  });
});

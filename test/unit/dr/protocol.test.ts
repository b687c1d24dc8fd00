// The DR stream's messages are written by hand into one buffer (not by rhea's
// encoder): they must be AMQP that rhea decodes to the same properties and
// records, from records already encoded or from changes.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { MAX_REQUEST_QUEUES, decodeDrMessage, encodeDrMessage, parseRequest, type DrStreamMessage } from '../../../src/dr/protocol.js';
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

  it('DR protocol - a restart message carries the ids held per queue as ranges, and refuses ranges that are not sorted, separate and bounded', () => {
    const base = { kind: 'restart' as const, lsn: 5, time: 6, head: 7, now: 8, queues: ['q'], floor: 100 };
    // One range may name millions of ids: the secondary counts its own rows inside it, not id by id.
    expect(roundTrip({ ...base, held: { q: [1, 5, 9, 5_000_000] } }).held).toEqual({ q: [1, 5, 9, 5_000_000] });
    const bad: unknown[] = [[5, 1], [1, 5, 5, 9], [1, 5, 3, 9], [1, 2, 3], [1.5, 2], ['1', '2'], Array.from({ length: 200_002 }, (_, i) => 2 * i), { length: 1e15 }];
    for (const ranges of bad) {
      const wire = rhea.message.decode(encodeDrMessage({ ...base, held: { q: ranges as number[] } })) as never;
      expect(() => decodeDrMessage(wire), JSON.stringify(ranges).slice(0, 40)).toThrow(/held ids of "q" are not sorted, separate ranges/);
    }
    const notAnObject = rhea.message.decode(encodeDrMessage(base)) as { application_properties: Record<string, unknown> };
    notAnObject.application_properties.held = '[1,2]';
    expect(() => decodeDrMessage(notAnObject as never)).toThrow(/held must be a JSON object/);
  });

  it('DR protocol - positions, times and floors are whole numbers: anything else is refused at decode, naming the field', () => {
    const base = { kind: 'heartbeat' as const, lsn: 3, time: 4, head: 5, now: 6 };
    expect(roundTrip(base)).toEqual(base);
    for (const [field, value] of [['lsn', 1.5], ['time', 'soon'], ['head', -1], ['now', Number.NaN], ['floor', 2 ** 60]] as const) {
      const wire = rhea.message.decode(encodeDrMessage(base)) as { application_properties: Record<string, unknown> };
      wire.application_properties[field] = value;
      expect(() => decodeDrMessage(wire as never), field).toThrow(new RegExp(`heartbeat.${field} must be a whole number`));
    }
  });

  it('DR protocol - a request names each queue once, and at most MAX_REQUEST_QUEUES of them', () => {
    const q = (queue: string) => ({ queue, mode: 'enqueue-and-dequeue', from: 0 });
    expect(parseRequest(JSON.stringify([q('a'), q('b')])).map((x) => x.queue)).toEqual(['a', 'b']);
    expect(() => parseRequest(JSON.stringify([q('a'), q('b'), q('a')]))).toThrow(/names queue "a" twice/);
    const many = Array.from({ length: MAX_REQUEST_QUEUES + 1 }, (_, i) => q(`q${i}`));
    expect(() => parseRequest(JSON.stringify(many))).toThrow(/at most 10000 are taken/);
  });
});

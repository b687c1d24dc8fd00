// The two record forms a refusal's undoing added for DR copies (src/broker/broker.ts
// withdraw): an enqueue that gives a message back (`restored`, code 21) and a key
// take-back that names the refused messages (`ids`, code 22). Each is written only
// when the record needs it, so every other enqueue and take-back keeps its code (14,
// 20) and its bytes, and a broker of the version before (an HA backup or DR peer not
// yet upgraded) still reads them.
import { describe, expect, it } from 'vitest';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { dedupDigestAt } from '../../../src/broker/dedup-key.js';
import { peekQueueChange } from '../../../src/dr/record-peek.js';
import { couldStartRecord, decodeChange, encodeChange, recordLengthFits } from '../../../src/store/record-codec.js';
import { message } from './helpers.js';

const enqueue = (extra: Partial<Extract<Change, { kind: 'enqueue' }>> = {}): Change => ({ kind: 'enqueue', queue: 'orders', message: message(5, 'body'), ...extra });
const forget = (extra: Partial<Extract<Change, { kind: 'dedup-forget' }>> = {}): Change => ({ kind: 'dedup-forget', queue: 'orders', keys: Buffer.alloc(16, 3), ...extra });
const stamp = { key: dedupDigestAt(Buffer.alloc(16, 0xab)), at: 1_700_000_000_123 };

/** Every code 21 and 22 record the tests use, with the plain forms beside them. */
const samples: Change[] = [
  enqueue(),
  enqueue({ restored: true }),
  enqueue({ restored: true, dedup: stamp }),
  forget(),
  forget({ ids: [7] }),
  forget({ keys: Buffer.alloc(0), ids: [1, 2 ** 40, Number.MAX_SAFE_INTEGER] }),
  forget({ keys: Buffer.alloc(0), ids: [] }),
  { kind: 'transaction', changes: [{ kind: 'dequeue', queue: 'orders', id: 5 }, enqueue({ restored: true }) as Extract<Change, { kind: 'enqueue' }>] },
];

describe('record codec - the take-back forms', () => {
  it('record codec - an enqueue is code 14 unless it gives a message back (code 21: the same fields and then the mark)', () => {
    const plain = encodeChange({ lsn: 9, change: enqueue(), durable: true });
    const restored = encodeChange({ lsn: 9, change: enqueue({ restored: true }), durable: true });
    expect(plain[0]).toBe(14);
    expect(restored[0]).toBe(21);
    expect(restored.length).toBe(plain.length + 1);
    expect(restored.subarray(1, plain.length)).toEqual(plain.subarray(1));
    expect(restored.at(-1)).toBe(1);
    // A plain enqueue decodes without the mark (not `restored: false`), as an older broker wrote it.
    const out = decodeChange(plain);
    expect(out.status === 'ok' && 'restored' in out.entry.change).toBe(false);
    expect(decodeChange(restored)).toMatchObject({ status: 'ok', entry: { lsn: 9, change: { kind: 'enqueue', queue: 'orders', message: { id: 5 }, restored: true } } });
  });

  it('record codec - a key take-back is code 20 unless it names messages (code 22: the same fields and then the ids)', () => {
    const plain = encodeChange({ lsn: 4, change: forget(), durable: false });
    const named = encodeChange({ lsn: 4, change: forget({ ids: [7, 2 ** 40] }), durable: false });
    expect(plain[0]).toBe(20);
    expect(named[0]).toBe(22);
    expect(named.subarray(1, plain.length)).toEqual(plain.subarray(1));
    // u32 count, then each id as a u64.
    const tail = Buffer.alloc(4 + 16);
    tail.writeUInt32LE(2, 0);
    tail.writeUInt32LE(7, 4);
    tail.writeUInt32LE(0, 12);
    tail.writeUInt32LE(2 ** 8, 16);
    expect(named.subarray(plain.length)).toEqual(tail);
    const out = decodeChange(plain);
    expect(out.status === 'ok' && 'ids' in out.entry.change).toBe(false);
  });

  it('record codec - the new forms round-trip, alone and nested; each is judged a record by its header and length, and every truncation, a byte at a time, is incomplete', () => {
    samples.forEach((change, i) => {
      const entry: LoggedChange = { lsn: 2 ** 33 + i, change, durable: i % 2 === 0 };
      const buf = encodeChange(entry);
      expect(decodeChange(buf)).toEqual({ status: 'ok', entry, size: buf.length });
      expect(couldStartRecord(buf, 0)).toBe(true);
      expect(recordLengthFits(buf[0]!, buf.length)).toBe(true);
      for (let n = 0; n < buf.length; n++) expect(decodeChange(Buffer.from(buf.subarray(0, n)))).toEqual({ status: 'incomplete' });
    });
  });

  it('record codec - a count of ids the bytes do not hold is incomplete at once, not an array made to its size; an id above 2^53 is invalid', () => {
    const buf = encodeChange({ lsn: 1, change: forget({ ids: [1] }), durable: true });
    const huge = Buffer.from(buf);
    huge.writeUInt32LE(0xffff_ffff, buf.length - 12);
    expect(decodeChange(huge)).toEqual({ status: 'incomplete' });
    const big = Buffer.from(buf);
    big.writeUInt32LE(0x20_0000, buf.length - 4);
    expect(decodeChange(big)).toMatchObject({ status: 'invalid' });
    expect(() => encodeChange({ lsn: 1, change: forget({ ids: [1.5] }), durable: true })).toThrow(/ids\[0\]/);
  });

  it('record codec - a code 21 or 22 record the codec would not write (mark 0, no ids) still encodes back to itself, as a peer passing it on must', () => {
    const restored = Buffer.from(encodeChange({ lsn: 3, change: enqueue({ restored: true }), durable: true }));
    restored[restored.length - 1] = 0;
    const named = encodeChange({ lsn: 3, change: forget({ ids: [] }), durable: true });
    expect([restored[0], named[0]]).toEqual([21, 22]);
    for (const buf of [restored, named]) {
      const out = decodeChange(buf);
      expect(out.status).toBe('ok');
      if (out.status === 'ok') expect(encodeChange(out.entry)).toEqual(buf);
    }
  });

  it("record codec - the DR source's peek reads a given-back enqueue's queue as any enqueue's", () => {
    const record = encodeChange({ lsn: 3, change: enqueue({ restored: true }), durable: true });
    expect(record[0]).toBe(21);
    expect(peekQueueChange(record)).toEqual({ queue: 'orders', dequeue: false });
  });
});

import { describe, expect, it } from 'vitest';
import { couldStartRecord, decodeChange, encodeChange, RECORD_HEADER_BYTES, RECORD_KINDS, recordLengthFits, recordLsn } from '../../../src/store/record-codec.js';
import type { Change } from '../../../src/broker/changes.js';
import { dedupDigestAt, dedupDigestBytes } from '../../../src/broker/dedup-key.js';
import { prng, sampleChanges } from './helpers.js';

describe('record codec', () => {
  it('record codec - round-trips every record kind', () => {
    const samples = [...sampleChanges(), ...drSamples(), { kind: 'lsn-reservation', upTo: 2 ** 50 } as const];
    const kinds = new Set(samples.map((c) => c.kind));
    expect([...kinds].sort()).toEqual([...new Set(RECORD_KINDS.map((k) => k.name))].sort());
    samples.forEach((change, i) => {
      for (const durable of [true, false]) {
        const entry = { lsn: 2 ** 40 + i, change, durable };
        const buf = encodeChange(entry);
        const out = decodeChange(buf);
        expect(out).toEqual({ status: 'ok', entry, size: buf.length });
      }
    });
  });

  it('record codec - records written before duplicate detection (legacy codes) still decode, with no window', () => {
    // Code 1 queue-declare and code 7 enqueue as the codec wrote them before codes 13 and 14.
    const declare = Buffer.concat([
      Buffer.from([1]), u64(5), Buffer.from([1]), str('old'),
      Buffer.from([1, 0]), u64(0), Buffer.from([0]), u64(0), u64(0), Buffer.from([0]), u64(0), str(''), Buffer.from([1, 0]),
    ]);
    expect(decodeChange(declare)).toMatchObject({ status: 'ok', entry: { lsn: 5, change: { kind: 'queue-declare', name: 'old', settings: { durable: true, dedupWindow: 0, dedupTtlMs: 0, dedupKey: '' } } } });
    const enqueue = Buffer.concat([
      Buffer.from([7]), u64(6), Buffer.from([1]), str('old'),
      u64(9), str('body'), Buffer.alloc(4), Buffer.from([1, 4]), u64(0), Buffer.alloc(4), Buffer.from([0]),
    ]);
    const out = decodeChange(enqueue);
    expect(out).toMatchObject({ status: 'ok', entry: { change: { kind: 'enqueue', queue: 'old', message: { id: 9, durable: true } } } });
    expect(out.status === 'ok' && (out.entry.change as { dedup?: unknown }).dedup).toBeUndefined();
    // Never written again: a new encoding uses the new codes.
    expect(encodeChange({ lsn: 5, change: (out as { entry: { change: Change } }).entry.change, durable: true })[0]).toBe(14);
  });

  it('record codec - a queue declare without a subscription kind is written as before (code 13), so a broker of the version before reads it; one with a kind is code 19', () => {
    const settings = { durable: true, autoDelete: false, autoDeleteDelayMs: 0, exclusive: false, maxCount: 0, maxSize: 0, limitPolicy: 'reject', defaultTtlMs: 0, alternateExchange: '', priorities: 1, replicate: undefined, dedupWindow: 0, dedupTtlMs: 0, dedupKey: '' } as const;
    const plain = encodeChange({ lsn: 5, change: { kind: 'queue-declare', name: 'orders', settings }, durable: true });
    expect(plain[0]).toBe(13);
    const decoded = decodeChange(plain);
    expect(decoded).toMatchObject({ status: 'ok', entry: { lsn: 5, change: { kind: 'queue-declare', name: 'orders', settings } } });
    expect(decoded.status === 'ok' && decoded.entry.change.kind === 'queue-declare' && 'subscription' in decoded.entry.change.settings).toBe(false);
    const withKind = encodeChange({ lsn: 6, change: { kind: 'queue-declare', name: 'sub:app:s1', settings: { ...settings, subscription: 'unshared' } }, durable: true });
    expect(withKind[0]).toBe(19);
    // Code 19 is code 13's fields and then the kind, one byte (0 none, else its index + 1).
    expect(withKind.length).toBe(plain.length + Buffer.byteLength('sub:app:s1') - Buffer.byteLength('orders') + 1);
    expect(withKind.at(-1)).toBe(2);
    expect(decodeChange(withKind)).toMatchObject({ status: 'ok', entry: { change: { settings: { subscription: 'unshared' } } } });
  });

  it('record codec - a dedup key is 16 bytes after their length, as when it was a Buffer field; another length is refused', () => {
    const digest = Buffer.from('00112233445566778899aabbccddeeff', 'hex');
    const message = { id: 1, bytes: Buffer.from('b'), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined };
    const buf = encodeChange({ lsn: 3, change: { kind: 'enqueue', queue: 'q', message, dedup: { key: dedupDigestAt(digest), at: 7 } }, durable: true });
    // The stamp closes the record: presence byte, u32 length 16, the digest's bytes, u64 at.
    const tail = Buffer.concat([Buffer.from([1, 16, 0, 0, 0]), digest, u64(7)]);
    expect(buf.subarray(buf.length - tail.length)).toEqual(tail);
    const out = decodeChange(buf);
    expect(out.status === 'ok' && out.entry.change.kind === 'enqueue' && dedupDigestBytes(out.entry.change.dedup!.key)).toEqual(digest);
    const short = Buffer.concat([buf.subarray(0, buf.length - tail.length), Buffer.from([1, 15, 0, 0, 0]), digest.subarray(0, 15), u64(7)]);
    expect(decodeChange(short)).toMatchObject({ status: 'invalid', reason: 'a dedup key digest of 15 bytes, not 16' });
  });

  it('record codec - recordLsn reads the LSN of an encoded record where it lies, small or past 2^32', () => {
    for (const change of [...sampleChanges(), ...drSamples()]) {
      for (const lsn of [7, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER]) {
        const bytes = encodeChange({ lsn, change, durable: false });
        expect(recordLsn(bytes)).toBe(lsn);
        expect(recordLsn(Buffer.concat([Buffer.alloc(3), bytes]), 3)).toBe(lsn);
      }
    }
  });

  it('record codec - decodes at an offset and reports the bytes used, for stream readers', () => {
    const a = encodeChange({ lsn: 1, change: { kind: 'epoch', epoch: 3 }, durable: true });
    const b = encodeChange({ lsn: 2, change: { kind: 'queue-delete', name: 'q' }, durable: false });
    const both = Buffer.concat([a, b]);
    const first = decodeChange(both);
    expect(first.status === 'ok' && first.size).toBe(a.length);
    const second = decodeChange(both, a.length);
    expect(second.status === 'ok' && second.entry.lsn).toBe(2);
  });

  it('record codec - every truncation, fed one byte at a time, is incomplete, never a crash', () => {
    for (const change of [...sampleChanges(), ...drSamples()]) {
      const buf = encodeChange({ lsn: 99, change, durable: true });
      for (let n = 0; n < buf.length; n++) {
        // A copy of exactly n bytes, so nothing past the end can be read by mistake.
        expect(decodeChange(Buffer.from(buf.subarray(0, n)))).toEqual({ status: 'incomplete' });
      }
    }
  });

  it('record codec - garbage is invalid, not an exception', () => {
    expect(decodeChange(Buffer.from([200, 0, 0, 0, 0, 0, 0, 0, 0, 0]))).toMatchObject({ status: 'invalid' });
    const buf = encodeChange({ lsn: 1, change: { kind: 'exchange-declare', name: 'x', type: 'topic', settings: { durable: true, alternateExchange: '', replicate: undefined } }, durable: true });
    const bad = Buffer.from(buf);
    bad[9] = 7; // flags
    expect(decodeChange(bad)).toMatchObject({ status: 'invalid' });
    const badEnum = Buffer.from(buf);
    badEnum[10 + 4 + 1] = 9; // exchange type index
    expect(decodeChange(badEnum)).toMatchObject({ status: 'invalid' });
    // A dequeue smuggled into a transaction is fine; an epoch is not.
    const tx = encodeChange({ lsn: 1, change: { kind: 'transaction', changes: [{ kind: 'dequeue', queue: 'q', id: 1 }] }, durable: true });
    const txBad = Buffer.from(tx);
    txBad[14] = 10;
    expect(decodeChange(txBad).status).not.toBe('ok');
  });

  it('record codec - 20,000 mutated records decode as ok, incomplete or invalid, and what decodes encodes back to itself', () => {
    // A backup and a DR secondary decode records a peer sent, a restart the bytes a
    // disk kept: flipped bytes, changed lengths and counts, cuts and splices must be
    // an answer, never an exception, and an accepted record must be one the codec
    // could have written (so a journal or a peer it is passed on to reads the same).
    const rng = prng(Number(process.env.TANDEM_FUZZ_SEED ?? 0x2ec0d));
    const random = rng.next;
    const pick = rng.int;
    const records = [...sampleChanges(), ...drSamples()].map((change, i) => encodeChange({ lsn: 1000 + i, change, durable: i % 2 === 0 }));
    const counts = { ok: 0, incomplete: 0, invalid: 0 };
    for (let i = 0; i < 20_000; i++) {
      let b = Buffer.from(records[pick(records.length)]!);
      for (let m = random() < 0.7 ? 1 : 2 + pick(3); m > 0 && b.length > 0; m--) {
        const at = pick(b.length);
        const way = pick(5);
        if (way === 0) b[at] = pick(256);
        else if (way === 1) b[at] = [0, 1, 2, 16, 0x7f, 0xff][pick(6)]!; // a length, count, flag or presence byte
        else if (way === 2) b = b.subarray(0, at);
        else if (way === 3) b = Buffer.concat([b.subarray(0, at), b.subarray(pick(b.length)).subarray(0, 1 + pick(12)), b.subarray(at)]);
        else b = Buffer.concat([b.subarray(0, at), b.subarray(at + 1 + pick(8))]);
      }
      const r = decodeChange(Buffer.from(b));
      counts[r.status]++;
      if (r.status !== 'ok') continue;
      const again = decodeChange(encodeChange(r.entry));
      expect(again.status, `0x${b.toString('hex')}`).toBe('ok');
      expect(again.status === 'ok' && again.entry, `0x${b.toString('hex')}`).toEqual(r.entry);
    }
    console.log(`record codec fuzz: ${JSON.stringify(counts)}`);
    // Enough of each answer for the check to mean something.
    expect(Math.min(counts.ok, counts.incomplete, counts.invalid)).toBeGreaterThan(500);
  });

  it('record codec - a record nested in a transaction is refused by its code, before its fields are read, however deep', () => {
    // A transaction holding a transaction holding a transaction...: five bytes a level.
    const depth = 200_000;
    const deep = Buffer.alloc(RECORD_HEADER_BYTES + depth * 5 + 4);
    deep[0] = 9; // transaction, LSN 1, durable
    deep.writeUInt32LE(1, 1);
    deep[9] = 1;
    for (let i = 0, at = RECORD_HEADER_BYTES; i < depth; i++, at += 5) {
      deep.writeUInt32LE(1, at); // one change...
      deep[at + 4] = 9; // ...a transaction
    }
    expect(decodeChange(deep)).toEqual({ status: 'invalid', reason: 'a transaction record inside a transaction (only enqueue and dequeue may be)' });
    // Refused at the code: a dr-transaction with none of its fields there yet is
    // already invalid, not incomplete (no further bytes could make it right).
    const head = encodeChange({ lsn: 1, change: { kind: 'transaction', changes: [] }, durable: true });
    const drInside = Buffer.concat([head.subarray(0, RECORD_HEADER_BYTES), Buffer.from([1, 0, 0, 0, 11])]);
    expect(decodeChange(drInside)).toEqual({ status: 'invalid', reason: 'a dr-transaction record inside a transaction (only enqueue and dequeue may be)' });
    for (const code of [1, 7, 8, 13, 14]) {
      // The kinds allowed inside get their fields read (here: none there yet).
      const inside = Buffer.concat([head.subarray(0, RECORD_HEADER_BYTES), Buffer.from([1, 0, 0, 0, code])]);
      expect(decodeChange(inside).status, `code ${code}`).toBe(code === 1 || code === 13 ? 'invalid' : 'incomplete');
    }
  });

  it('record codec - the checks on a record\'s first bytes and length refuse only what cannot decode to exactly that length', () => {
    // segment.ts skips the checksum of whatever fails them while hunting for the
    // next valid frame: a false "no" there would read real records as damage.
    const records = [...sampleChanges(), ...drSamples(), { kind: 'lsn-reservation', upTo: 2 ** 50 } as const].map((change, i) =>
      encodeChange({ lsn: [0, 1, 2 ** 40, Number.MAX_SAFE_INTEGER][i % 4]!, change, durable: i % 2 === 0 }),
    );
    for (const b of records) {
      expect(couldStartRecord(b, 0)).toBe(true);
      expect(recordLengthFits(b[0]!, b.length)).toBe(true);
    }
    // Fixed-size kinds admit their one length only.
    const epoch = encodeChange({ lsn: 5, change: { kind: 'epoch', epoch: 2 }, durable: true });
    expect([epoch.length - 1, epoch.length, epoch.length + 1].map((n) => recordLengthFits(epoch[0]!, n))).toEqual([false, true, false]);
    expect(couldStartRecord(Buffer.from([0, ...Buffer.alloc(9)]), 0)).toBe(false); // no kind has code 0
    const rng = prng(0xc0de5);
    let refused = 0;
    for (let i = 0; i < 20_000; i++) {
      const b = Buffer.from(records[rng.int(records.length)]!);
      for (let m = 1 + rng.int(3); m > 0; m--) b[rng.int(Math.min(b.length, 24))] = rng.pick([0, 1, 2, 3, 9, 11, 64, 0x1f, 0x20, 0xff, rng.int(256)]);
      const length = rng.chance(0.5) ? b.length : rng.int(b.length + 1);
      const view = Buffer.from(b.subarray(0, length));
      const passes = couldStartRecord(view, 0) && recordLengthFits(view[0]!, length);
      const d = decodeChange(view);
      if (d.status === 'ok' && d.size === length) expect(passes, `0x${view.toString('hex')}`).toBe(true);
      if (!passes) refused++;
    }
    // ...and they do refuse a good share of what does not decode, or they would be no use.
    expect(refused).toBeGreaterThan(5000);
  });

  it('record codec - refuses to encode malformed values', () => {
    expect(() => encodeChange({ lsn: -1, change: { kind: 'epoch', epoch: 1 }, durable: true })).toThrow(TypeError);
    expect(() => encodeChange({ lsn: 1, change: { kind: 'epoch', epoch: 1.5 }, durable: true })).toThrow(/epoch/);
    expect(() => encodeChange({ lsn: 1, change: { kind: 'transaction', changes: [{ kind: 'epoch', epoch: 1 } as never] }, durable: true })).toThrow(/not allowed/);
  });
});

/** DR records (kept here: the shared store samples feed replay models that know no DR). */
function drSamples(): Change[] {
  const message = { id: 7, bytes: Buffer.from('m'), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined };
  return [
    { kind: 'dr-transaction', queues: ['a', 'b.c', ''], lsn: 2 ** 45, time: 1_700_000_000_000, changes: [{ kind: 'enqueue', queue: 'a', message }, { kind: 'dequeue', queue: 'b.c', id: 3 }] },
    { kind: 'dr-transaction', queues: [], lsn: 0, time: 0, changes: [] },
    { kind: 'dr-queue', queue: 'orders', source: 'h1:5672,h2:5672', mode: 'enqueue-only', state: 'passive' },
    { kind: 'dr-queue', queue: 'orders', source: 'h1', mode: 'enqueue-and-dequeue', state: 'removed' },
    { kind: 'dr-role', queue: 'orders', source: 'u/p@h1:5672', mode: 'enqueue-and-dequeue', state: 'fenced', epoch: 7, divergence: 2 ** 40, since: 12, idFloor: 99, fill: false, exchanges: 'orders.*,amq.topic', tell: true },
    { kind: 'dr-role', queue: 'orders', source: '', mode: 'enqueue-only', state: 'diverged', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: true, exchanges: '', tell: false },
  ];
}

function u64(v: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32LE(v % 2 ** 32, 0);
  b.writeUInt32LE(Math.floor(v / 2 ** 32), 4);
  return b;
}

function str(s: string): Buffer {
  const body = Buffer.from(s, 'utf8');
  const n = Buffer.alloc(4);
  n.writeUInt32LE(body.length, 0);
  return Buffer.concat([n, body]);
}

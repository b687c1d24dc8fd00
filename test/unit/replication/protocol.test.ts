// The HA stream message codec: what the primary writes by hand (application
// properties by rhea, then a data section holding the record batch) is what
// rhea decodes on the backup, for batches given as changes and as encoded
// records, and the records a backup hands on are the bytes the codec writes.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { MAX_DR_CREDENTIALS, Props, decodeBackupHello, decodeRecordBatch, decodeRecords, decodeStreamMessage, encodeRecordBatch, encodeStreamMessage } from '../../../src/replication/protocol.js';
import { encodeChange, encodeChangeBatch, rememberEncoding } from '../../../src/store/record-codec.js';
import { message, queueSettings } from '../store/helpers.js';

const changes: LoggedChange[] = [
  { lsn: 7, durable: true, change: { kind: 'enqueue', queue: 'qé', message: message(1, 'x'.repeat(300)) } },
  { lsn: 8, durable: false, change: { kind: 'dequeue', queue: 'q', id: 1 } },
  { lsn: 9, durable: true, change: { kind: 'queue-declare', name: 'ünïcode', settings: queueSettings({ durable: true }) } },
  { lsn: 10, durable: true, change: { kind: 'enqueue', queue: 'q', message: { ...message(2, 'y'.repeat(70_000)), subject: 'sübject' } } },
];

/** What the backup's rhea hands over for these bytes. */
const received = (bytes: Buffer) => decodeStreamMessage(rhea.message.decode(bytes) as never);

describe('replication protocol', () => {
  it('replication protocol - a changes message written by hand decodes to the same changes and records', () => {
    for (const m of [
      { kind: 'changes' as const, lsn: 10, entries: changes },
      { kind: 'changes' as const, lsn: 10, records: changes.map((e) => encodeChange(e)) },
    ]) {
      const got = received(encodeStreamMessage(m));
      expect(got.kind).toBe('changes');
      expect(got.lsn).toBe(10);
      expect(got.entries).toEqual(changes);
      expect(got.records?.map((r) => Buffer.from(r))).toEqual(changes.map((e) => encodeChange(e)));
    }
  });

  it('replication protocol - dr-credentials carry a map of passwords; anything but strings is refused', () => {
    const credentials = { 'dr@a:5672': 'pw,with:odd/chars@', 'amqps:x@b:5671': 'é' };
    expect(received(encodeStreamMessage({ kind: 'dr-credentials', lsn: 0, credentials })).credentials).toEqual(credentials);
    const bad = (value: unknown) => () => decodeStreamMessage({ application_properties: { k: 'dr-credentials', lsn: 0, credentials: value } });
    for (const value of [undefined, '[1]', '{"s":1}', 'null', 42]) expect(bad(value), String(value)).toThrow(/dr-credentials/);
    // The error never quotes the text (it holds passwords).
    expect(bad('{"s":"secret-pw"')).toThrow(/^replication: dr-credentials message that is not JSON$/);
  });

  it('replication protocol - a dr-credentials message names at most MAX_DR_CREDENTIALS sources (each costs the backup a synced file write)', () => {
    const map = (n: number) => JSON.stringify(Object.fromEntries(Array.from({ length: n }, (_, i) => [`dr@site-${i}:5672`, `pw-${i}`])));
    const decode = (n: number) => decodeStreamMessage({ application_properties: { k: 'dr-credentials', lsn: 0, credentials: map(n) } });
    expect(Object.keys(decode(MAX_DR_CREDENTIALS).credentials!)).toHaveLength(MAX_DR_CREDENTIALS);
    expect(() => decode(MAX_DR_CREDENTIALS + 1)).toThrow(`replication: dr-credentials message naming ${MAX_DR_CREDENTIALS + 1} sources, more than ${MAX_DR_CREDENTIALS}`);
  });

  it("replication protocol - a backup's hello: positions and epoch are whole numbers, the broker id a string without commas", () => {
    const hello = { [Props.brokerId]: 'b-1', [Props.lsn]: 12, [Props.journalLsn]: 2n ** 40n, [Props.epoch]: 3, [Props.replicate]: 'all' };
    expect(decodeBackupHello(hello)).toEqual({ brokerId: 'b-1', lsn: 12, journalLsn: 2 ** 40, epoch: 3, replicate: 'all' });
    // An older backup's hello, without a journal LSN (and what absent fields always meant).
    expect(decodeBackupHello({})).toEqual({ brokerId: 'unknown', lsn: 0, journalLsn: undefined, epoch: 0, replicate: '' });
    for (const [field, value] of [[Props.lsn, 'abc'], [Props.lsn, Number.NaN], [Props.lsn, 1.5], [Props.journalLsn, -1], [Props.epoch, 1e300], [Props.epoch, 2n ** 60n]] as const) {
      expect(() => decodeBackupHello({ ...hello, [field]: value }), `${field} ${String(value)}`).toThrow(new RegExp(`replication hello: ${field} must be a whole number`));
    }
    for (const id of [{ toString: 'x' }, 7, '', 'a,b', 'x'.repeat(257)]) {
      expect(() => decodeBackupHello({ ...hello, [Props.brokerId]: id }), JSON.stringify(id).slice(0, 20)).toThrow(/tandem.broker-id must be a string of 1 to 256 characters without commas/);
    }
    expect(decodeBackupHello({ ...hello, [Props.replicate]: { toString: 'x' } }).replicate).toBe('');
  });

  it('replication protocol - LSNs, epochs and divergence bounds are whole numbers: anything else is refused naming the field; an unknown kind still passes', () => {
    const props = { k: 'snapshot-end', lsn: 9, epoch: 2 };
    expect(decodeStreamMessage({ application_properties: props })).toMatchObject({ kind: 'snapshot-end', lsn: 9, epoch: 2 });
    // A ulong beyond 2^32 arrives as a bigint.
    expect(decodeStreamMessage({ application_properties: { ...props, lsn: 2n ** 40n } }).lsn).toBe(2 ** 40);
    for (const [field, value] of [['lsn', Number.NaN], ['lsn', 1.5], ['epoch', -5], ['epoch', 'x'], ['lsn', 2n ** 60n]] as const) {
      expect(() => decodeStreamMessage({ application_properties: { ...props, [field]: value } }), `${field} ${String(value)}`).toThrow(new RegExp(`snapshot-end.${field} must be a whole number`));
    }
    expect(() => decodeStreamMessage({ application_properties: { ...props, 'diverged-after': 1, 'diverged-through': -1 } })).toThrow(/diverged-through must be a whole number/);
    // A newer primary's message kind is left to the backup to ignore, as before.
    expect(decodeStreamMessage({ application_properties: { k: 'from-a-later-version', lsn: 1 } }).kind).toBe('from-a-later-version');
  });

  it('replication protocol - control messages keep their properties; an empty batch is an empty body', () => {
    const got = received(encodeStreamMessage({ kind: 'snapshot-begin', lsn: 5, epoch: 3, reason: 'the backup is empty' }));
    expect(got).toMatchObject({ kind: 'snapshot-begin', lsn: 5, epoch: 3, reason: 'the backup is empty' });
    const diverged = received(encodeStreamMessage({ kind: 'snapshot-begin', lsn: 12, epoch: 2, reason: 'ahead', divergedAfter: 11, divergedThrough: 1018 }));
    expect(diverged).toMatchObject({ divergedAfter: 11, divergedThrough: 1018 });
    expect(got.divergedAfter, 'no divergence unless the primary says so').toBeUndefined();
    expect(received(encodeStreamMessage({ kind: 'membership', lsn: 0, ready: ['a', 'b'] })).ready).toEqual(['a', 'b']);
    expect(received(encodeStreamMessage({ kind: 'changes', lsn: 1, entries: [] })).entries).toEqual([]);
  });

  it('replication protocol - a record batch is each record after its length, with or without reserved room', () => {
    const batch = encodeRecordBatch(changes);
    expect(decodeRecordBatch(batch, 'test')).toEqual(changes);
    expect(encodeChangeBatch(changes, 5).subarray(5)).toEqual(batch);
    let offset = 0;
    for (const e of changes) {
      const record = encodeChange(e);
      expect(batch.readUInt32BE(offset)).toBe(record.length);
      expect(batch.subarray(offset + 4, offset + 4 + record.length)).toEqual(record);
      offset += 4 + record.length;
    }
    expect(offset).toBe(batch.length);
  });

  it('replication protocol - a batch cut short or padded is refused with an error naming the problem, not a buffer bounds error', () => {
    const batch = encodeRecordBatch(changes);
    // One to three bytes after the last record: too few for the next record's length.
    for (const extra of [1, 2, 3]) {
      const bytes = Buffer.concat([batch, Buffer.alloc(extra)]);
      const err = (() => {
        try {
          decodeRecords(bytes, 'replication', false);
        } catch (e) {
          return e as Error & { code?: string };
        }
        return undefined;
      })();
      expect(err, `${extra} byte(s)`).toBeInstanceOf(Error);
      expect(err).not.toBeInstanceOf(RangeError);
      expect(err!.code).toBeUndefined();
      expect(err!.message).toBe(`replication: a batch of ${bytes.length} bytes ends ${extra} byte(s) after its last record, too few for a record's length (the batch was cut short)`);
      expect(() => decodeRecordBatch(bytes, 'DR stream')).toThrow(/^DR stream: a batch of .* cut short/);
    }
    // A length running past the end of the batch.
    const cut = batch.subarray(0, batch.length - 1);
    expect(() => decodeRecords(cut, 'replication', false)).toThrow(/^replication: record 4 of a batch is said to be \d+ bytes, but \d+ are left \(the batch was cut short\)$/);
    // A record with bytes after its encoding: passed on to the backup's journal as
    // they are, they would fail the frame's check at its next start.
    const record = encodeChange(changes[1]!);
    const padded = Buffer.alloc(4 + record.length + 2);
    padded.writeUInt32BE(record.length + 2, 0);
    record.copy(padded, 4);
    expect(() => decodeRecords(padded, 'replication', false)).toThrow(`replication: record 1 of a batch is said to be ${record.length + 2} bytes, but its encoding ends after ${record.length}`);
  });

  it('replication protocol - one change is encoded once per tick, never served stale bytes', async () => {
    const e: LoggedChange = { lsn: 3, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(1, 'abc') } };
    const first = encodeChange(e);
    // The journal encodes its own entry object for the same change: the same bytes, not a new encoding.
    expect(encodeChange({ lsn: 3, change: e.change, durable: true })).toBe(first);
    // Another LSN or flag is another encoding.
    expect(encodeChange({ lsn: 4, change: e.change, durable: true })).not.toBe(first);
    expect(encodeChange({ lsn: 3, change: e.change, durable: false })[9]).toBe(0);
    // A backup hands over the primary's bytes: they are served as this entry's encoding.
    const primaryBytes = Buffer.from(first);
    const copy: LoggedChange = { lsn: 3, change: e.change, durable: true };
    rememberEncoding(copy, primaryBytes);
    expect(encodeChange(copy)).toBe(primaryBytes);
    // Next tick: a change mutated since is encoded afresh.
    await Promise.resolve();
    (e.change as { message: { deliveryCount: number } }).message.deliveryCount = 5;
    const again = encodeChange(e);
    expect(again).not.toBe(primaryBytes);
    expect(again).not.toEqual(first);
  });
});

// A seeded fuzz of the HA stream decoder (src/replication/protocol.ts), which reads
// what a primary sends its backups. Valid stream messages of every kind (changes
// batches of every record kind, given as changes and as encoded records, snapshot
// markers, membership, dr-credentials) are mutated as bytes (flips, edge values,
// length fields made huge, cuts, insertions, deletions, splices with other
// messages), their batches re-framed with mutated records, and their properties
// replaced by values of the wrong type (strings, huge numbers, NaN, bigints, nested
// maps, lists, `__proto__` keys). Each goes the way a backup reads a transfer: the
// engine's message decoder (as engine-dialer.ts hands it over), then
// decodeStreamMessage. The answer must be a decoded message that is what it says
// (whole positions, strings where strings are read, records that read back as the
// entries applied) or a plain Error with a message, quickly: never a TypeError or
// RangeError from inside. A kind the backup does not know is passed through for it
// to ignore, as documented in protocol.test.ts (a newer primary's kind).
//
// TANDEM_FUZZ_SEED changes the run; TANDEM_FUZZ_CASES the number of cases.
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { decodeRecords, decodeStreamMessage, encodeStreamMessage, type StreamKind, type StreamMessage } from '../../../src/replication/protocol.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { attempt as attemptWithin, framed, onWire, u32be, wireOf, type Outcome as Decoded } from '../../helpers/peer-stream-fuzz.js';
import { mutate, mutateSome, wrongValue, type Random } from '../../helpers/mutate.js';
import { prng, sampleChanges } from '../store/helpers.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x4af022);
const CASES = Number(process.env.TANDEM_FUZZ_CASES ?? 6000);
const KINDS: readonly StreamKind[] = ['changes', 'snapshot-begin', 'snapshot-end', 'ready', 'heartbeat', 'membership', 'dr-credentials'];
/** One decode of a message of a few hundred KiB at most: far above this is a stall. */
const CASE_MS = 1000;

/** A realistic stream message of `kind`. */
function sample(kind: StreamKind, r: Random): StreamMessage {
  const lsn = r.pick([0, 1, 42, 2 ** 31, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER - 10]);
  switch (kind) {
    case 'changes': {
      const all = sampleChanges();
      const entries: LoggedChange[] = [];
      for (let i = 0, n = 1 + r.int(6); i < n; i++) entries.push({ lsn: lsn + i, change: r.pick(all), durable: r.chance(0.8) });
      return r.chance(0.5) ? { kind, lsn: lsn + entries.length, entries } : { kind, lsn: lsn + entries.length, records: entries.map((e) => encodeChange(e)) };
    }
    case 'snapshot-begin':
      return r.chance(0.5) ? { kind, lsn, epoch: 3, reason: 'the backup is too far behind', divergedAfter: 10, divergedThrough: 17 } : { kind, lsn, reason: 'new backup' };
    case 'snapshot-end':
      return { kind, lsn, epoch: r.int(10) };
    case 'membership':
      return { kind, lsn, ready: r.pick([[], ['b-1'], ['3f1e6a9c-8a1b-4d7e-9c52-0123456789ab', 'b-2', 'b-3']]) };
    case 'dr-credentials':
      return { kind, lsn, credentials: r.pick<Record<string, string>>([{}, { 'dr@a:5672': 'pw,with:odd/chars@' }, { 'amqps:x@b:5671': 'é', 's2': 'p2' }]) };
    default:
      return { kind, lsn, epoch: r.chance(0.5) ? 7 : undefined };
  }
}

/** The properties a primary writes for `m` (encodeStreamMessage), as a plain object. */
function propsOf(m: StreamMessage): Record<string, unknown> {
  return onWire(encodeStreamMessage(m)).application_properties;
}

/** A batch body: each record after its u32 length. */
function batch(records: Buffer[]): Buffer {
  return Buffer.concat(records.flatMap((rec) => [u32be(rec.length), rec]));
}
/** What a decoded message must be, whatever bytes it came from. */
function checkDecoded(m: StreamMessage, where: () => string): void {
  // A kind the backup does not know passes, for it to ignore (a newer primary's: see
  // protocol.test.ts); the fields it reads of every message are still checked.
  for (const n of [m.lsn, m.epoch, m.divergedAfter, m.divergedThrough]) {
    if (n !== undefined) expect(Number.isSafeInteger(n) && n >= 0, `${String(n)}: ${where()}`).toBe(true);
  }
  if (m.ready) for (const id of m.ready) expect(typeof id, where()).toBe('string');
  if (m.reason !== undefined) expect(typeof m.reason, where()).toBe('string');
  if (m.credentials) {
    expect(Object.getPrototypeOf(m.credentials) === Object.prototype || Object.getPrototypeOf(m.credentials) === null, where()).toBe(true);
    for (const v of Object.values(m.credentials)) expect(typeof v, where()).toBe('string');
  }
  if (m.kind === 'changes') {
    expect(m.entries!.length, where()).toBe(m.records!.length);
    // The backup journals each record's bytes as they came (rememberEncoding): they must
    // read back as the entry it applied, and that entry must be one the codec writes (its
    // own bytes may differ: a legacy code, or invalid UTF-8 read as U+FFFD, both stable).
    m.entries!.forEach((e, i) => {
      const stored = decodeChange(m.records![i]!);
      expect(stored.status === 'ok' && stored.size === m.records![i]!.length && stored.entry, `record ${i}: ${where()}`).toEqual(e);
      const again = decodeChange(encodeChange(e));
      expect(again.status === 'ok' && again.entry, `record ${i} again: ${where()}`).toEqual(e);
    });
  }
}

type Outcome = Decoded<StreamMessage>;
const attempt = (run: () => StreamMessage, where: () => string): Outcome => attemptWithin(run, where, CASE_MS);

describe('replication protocol - seeded fuzz', () => {
  it('replication protocol - a property or kind that is a map with its own toString is refused naming the field, not with a TypeError (found by the fuzz)', () => {
    // A map {toString: 1} decodes (engine fromAmqp) to an object String() cannot convert.
    const odd = onWire(framed({ k: 'heartbeat', lsn: { toString: 1 } }, Buffer.alloc(0))).application_properties;
    expect(() => decodeStreamMessage({ application_properties: odd })).toThrow(/^replication: heartbeat\.lsn must be a whole number, not "\[object Object\]"$/);
    expect(() => decodeStreamMessage({ application_properties: { k: { toString: 1 }, lsn: -1 } })).toThrow(/^replication: \[object Object\]\.lsn must be a whole number/);
  });

  it(`decodes ${CASES} mutated stream messages (bytes) to a sane message or a plain Error`, () => {
    const r = prng(SEED);
    const counts = { ok: 0, wireError: 0, streamError: 0 };
    const errors = new Map<string, number>();
    const wireErrors = new Set<string>();
    for (let i = 0; i < CASES; i++) {
      const original = encodeStreamMessage(sample(r.pick(KINDS), r));
      const donor = encodeStreamMessage(sample(r.pick(KINDS), r));
      const bytes = mutateSome(original, r, donor);
      const where = () => `seed ${SEED} case ${i}: 0x${bytes.toString('hex').slice(0, 400)}`;
      let wire: ReturnType<typeof onWire>;
      try {
        wire = onWire(bytes);
      } catch (error) {
        // The engine refuses the transfer (engine-dialer.ts catches it and detaches): an Error is all it must be.
        expect(error, where()).toBeInstanceOf(Error);
        wireErrors.add((error as Error).constructor.name);
        counts.wireError++;
        continue;
      }
      const out = attempt(() => decodeStreamMessage(wire), where);
      if ('ok' in out) {
        checkDecoded(out.ok, where);
        counts.ok++;
      } else {
        counts.streamError++;
        const key = (out.error as Error).message.replace(/\d+/g, 'N').slice(0, 60);
        errors.set(key, (errors.get(key) ?? 0) + 1);
      }
    }
    console.log(`replication protocol fuzz (bytes): ${JSON.stringify(counts)}; ${errors.size} distinct stream errors; engine errors: ${[...wireErrors].join(', ')}`);
    // Enough of each outcome for the check to mean something.
    expect(Math.min(counts.ok, counts.wireError, counts.streamError)).toBeGreaterThan(CASES / 50);
  });

  it(`decodes ${CASES} changes batches with mutated records and length fields to records that are theirs, or a plain Error`, () => {
    const r = prng(SEED + 1);
    const all = sampleChanges();
    const counts = { ok: 0, error: 0 };
    for (let i = 0; i < CASES; i++) {
      const records = Array.from({ length: 1 + r.int(5) }, (_, k) => encodeChange({ lsn: 100 + k, change: r.pick(all), durable: r.chance(0.5) }));
      // A record mutated under a length that says its (new) size: only the record codec can refuse it.
      const k = r.int(records.length);
      records[k] = mutateSome(records[k]!, r, r.pick(records));
      let body: Buffer = batch(records);
      // Sometimes the framing too: a length field huge, zero, or off by some.
      if (r.chance(0.3)) body = mutate(body, r, r.pick(['u32', 'cut', 'insert', 'delete'] as const));
      const where = () => `seed ${SEED + 1} case ${i}: 0x${body.toString('hex').slice(0, 400)}`;
      const direct = attempt(() => ({ kind: 'changes', lsn: 0, ...decodeRecords(body, 'fuzz', r.chance(0.5)) }), where);
      const wired = attempt(() => decodeStreamMessage(onWire(framed({ k: 'changes', lsn: 105 }, body))), where);
      expect('ok' in direct, where()).toBe('ok' in wired);
      if ('ok' in wired) {
        checkDecoded(wired.ok, where);
        checkDecoded((direct as { ok: StreamMessage }).ok, where);
        counts.ok++;
      } else counts.error++;
    }
    console.log(`replication protocol fuzz (batches): ${JSON.stringify(counts)}`);
    expect(Math.min(counts.ok, counts.error)).toBeGreaterThan(CASES / 20);
  });

  it(`decodes ${CASES} stream messages whose properties have the wrong types to a sane message or a plain Error`, () => {
    const r = prng(SEED + 2);
    const counts = { ok: 0, error: 0 };
    const NAMES = ['k', 'lsn', 'epoch', 'ready', 'reason', 'diverged-after', 'diverged-through', 'credentials', '__proto__', 'constructor', 'toString'];
    for (let i = 0; i < CASES; i++) {
      const m = sample(r.pick(KINDS), r);
      const props = propsOf(m);
      const bodyOf = () => (m.kind === 'changes' ? onWire(encodeStreamMessage(m)).body! : Buffer.alloc(0));
      for (let n = 1 + r.int(3); n > 0; n--) Object.defineProperty(props, r.pick(NAMES), { value: wrongValue(r), enumerable: true, configurable: true, writable: true });
      if (r.chance(0.1)) props.k = r.pick([...KINDS, 'CHANGES', 'changes ', '', 'hasOwnProperty']);
      const where = () => `seed ${SEED + 2} case ${i}: ${JSON.stringify(props, (_, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v)).slice(0, 400)}`;
      // As a plain object (a decoder of another shape), and through the wire (AMQP types, `__proto__` keys as map keys).
      const plain = attempt(() => decodeStreamMessage({ application_properties: props, body: r.chance(0.1) ? (wrongValue(r) as never) : bodyOf() }), where);
      if ('ok' in plain) checkDecoded(plain.ok, where);
      const wire = wireOf(props, bodyOf(), where);
      if (!wire) continue;
      const wired = attempt(() => decodeStreamMessage(wire), where);
      if ('ok' in wired) {
        checkDecoded(wired.ok, where);
        counts.ok++;
      } else counts.error++;
    }
    console.log(`replication protocol fuzz (property types): ${JSON.stringify(counts)}`);
    expect(Math.min(counts.ok, counts.error)).toBeGreaterThan(CASES / 50);
  });
});

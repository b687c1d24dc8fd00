// A seeded fuzz of the DR stream decoder (src/dr/protocol.ts), which reads what a DR
// source sends a secondary's bridge. Valid DR messages of every kind (declares,
// changes and snapshot batches of every record kind, snapshot markers, fill-end,
// restart with held id ranges) are mutated as bytes (flips, edge values, length
// fields made huge, cuts, insertions, deletions, splices with other messages),
// their batches re-framed with mutated records, and their properties replaced by
// values of the wrong type (strings, huge numbers, NaN, bigints, nested maps, lists,
// `__proto__` keys, JSON of the wrong shape). Each goes the way the bridge reads a
// transfer: the engine's message decoder (as engine-dialer.ts hands it over), then
// decodeDrMessage. The answer must be a decoded message that is what its type says
// (a known kind, whole positions, a list of queue names, sorted held ranges, records
// the codec writes) or a plain Error with a message, quickly: never a TypeError or
// RangeError from inside, and never a value of another shape for the bridge to trip on.
//
// TANDEM_FUZZ_SEED changes the run; TANDEM_FUZZ_CASES the number of cases.
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { decodeDrMessage, encodeDrMessage, type DrStreamKind, type DrStreamMessage } from '../../../src/dr/protocol.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { attempt as attemptWithin, framed, onWire, u32be, wireOf, type Outcome as Decoded } from '../../helpers/peer-stream-fuzz.js';
import { mutate, mutateSome, wrongValue, type Random } from '../../helpers/mutate.js';
import { prng, sampleChanges } from '../store/helpers.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0xd2f022);
const CASES = Number(process.env.TANDEM_FUZZ_CASES ?? 6000);
const KINDS: readonly DrStreamKind[] = ['declares', 'changes', 'snapshot-begin', 'snapshot', 'snapshot-end', 'heartbeat', 'fill-end', 'restart'];
/** One decode of a message of a few hundred KiB at most: far above this is a stall. */
const CASE_MS = 1000;

function entriesOf(r: Random, lsn: number, filter: (c: LoggedChange['change']) => boolean = () => true): LoggedChange[] {
  const all = sampleChanges().filter(filter);
  return Array.from({ length: 1 + r.int(6) }, (_, i) => ({ lsn: lsn + i, change: r.pick(all), durable: r.chance(0.8) }));
}

/** A realistic DR message of `kind`. */
function sample(kind: DrStreamKind, r: Random): DrStreamMessage {
  const lsn = r.pick([0, 1, 42, 2 ** 31, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER - 10]);
  const base = { kind, lsn, time: 1_700_000_000_123, head: lsn + r.int(100), now: 1_700_000_000_456 };
  const queues = r.pick([[], ['orders'], ['orders', 'ünïcode-q', 'deduped']]);
  switch (kind) {
    case 'declares':
      return { ...base, lsn: 0, entries: entriesOf(r, 0, (c) => c.kind === 'queue-declare' || c.kind === 'exchange-declare' || c.kind === 'bind') };
    case 'changes':
    case 'snapshot': {
      const entries = entriesOf(r, lsn, kind === 'snapshot' ? (c) => c.kind === 'enqueue' : undefined);
      return r.chance(0.5) ? { ...base, entries } : { ...base, records: entries.map((e) => encodeChange(e)) };
    }
    case 'snapshot-begin':
      return { ...base, queues, reason: 'orders: new copy' };
    case 'fill-end':
      return { ...base, queues };
    case 'restart':
      return { ...base, queues, floor: 100, held: r.pick<Record<string, number[]>>([{}, { orders: [1, 5, 9, 5_000_000] }, { orders: [], deduped: [3, 3] }]) };
    default:
      return base;
  }
}

/** What a decoded message must be, whatever bytes it came from: what the bridge's apply() takes it for. */
function checkDecoded(m: DrStreamMessage, where: () => string): void {
  expect(KINDS, `kind ${String(m.kind)}: ${where()}`).toContain(m.kind);
  for (const n of [m.lsn, m.time, m.head, m.now, m.floor]) {
    if (n !== undefined) expect(Number.isSafeInteger(n) && n >= 0, `${String(n)}: ${where()}`).toBe(true);
  }
  if (m.queues !== undefined) {
    expect(Array.isArray(m.queues), `queues ${typeof m.queues}: ${where()}`).toBe(true);
    for (const q of m.queues) expect(typeof q, `queue ${JSON.stringify(q)?.slice(0, 80)}: ${where()}`).toBe('string');
  }
  if (m.reason !== undefined) expect(typeof m.reason, where()).toBe('string');
  if (m.held !== undefined) {
    for (const ranges of Object.values(m.held)) {
      expect(Array.isArray(ranges) && ranges.length % 2 === 0, where()).toBe(true);
      ranges.forEach((v, i) => expect(Number.isSafeInteger(v) && (i === 0 || v >= ranges[i - 1]!), where()).toBe(true));
    }
  }
  for (const e of m.entries ?? []) {
    const again = decodeChange(encodeChange(e));
    expect(again.status === 'ok' && again.entry, where()).toEqual(e);
  }
}

type Outcome = Decoded<DrStreamMessage>;
const attempt = (run: () => DrStreamMessage, where: () => string): Outcome => attemptWithin(run, where, CASE_MS);

describe('DR protocol - seeded fuzz', () => {
  it('DR protocol - a property or kind that is a map with its own toString is refused naming the field, not with a TypeError (found by the fuzz)', () => {
    const base = { k: 'heartbeat', lsn: 1, time: 2, head: 3, now: 4 };
    const odd = onWire(framed({ ...base, now: { toString: 1, valueOf: 'x' } }, Buffer.alloc(0))).application_properties;
    expect(() => decodeDrMessage({ application_properties: odd })).toThrow(/^DR stream: heartbeat\.now must be a whole number, not "\[object Object\]"$/);
    expect(() => decodeDrMessage({ application_properties: { ...base, k: { toString: 1 } } })).toThrow(/^DR stream: unknown message kind \[object Object\]$/);
  });

  it('DR protocol - queues is a JSON list of queue names, or the message is refused naming it (found by the fuzz)', () => {
    // Taken as whatever JSON it held, a string was walked by the bridge a character at a
    // time as queue names, and a map or number failed there with "not iterable".
    const base = { kind: 'fill-end' as const, lsn: 0, time: 1, head: 2, now: 3 };
    const wire = onWire(encodeDrMessage({ ...base, queues: ['orders', 'ä'] }));
    expect(decodeDrMessage(wire).queues).toEqual(['orders', 'ä']);
    const withQueues = (queues: string) => ({ ...wire, application_properties: { ...wire.application_properties, queues } });
    for (const queues of ['"orders"', '{"orders": 1}', '5', 'null', '[1]', '["a", ["b"]]', JSON.stringify(Array.from({ length: 10_001 }, (_, i) => `q${i}`))]) {
      expect(() => decodeDrMessage(withQueues(queues)), queues.slice(0, 40)).toThrow(/^DR stream: queues must be a JSON list of at most 10000 queue names$/);
    }
    expect(() => decodeDrMessage(withQueues('[orders'))).toThrow(/^DR stream: queues is not JSON$/);
  });

  it(`decodes ${CASES} mutated DR messages (bytes) to a sane message or a plain Error`, () => {
    const r = prng(SEED);
    const counts = { ok: 0, wireError: 0, streamError: 0 };
    for (let i = 0; i < CASES; i++) {
      const original = encodeDrMessage(sample(r.pick(KINDS), r));
      const bytes = mutateSome(original, r, encodeDrMessage(sample(r.pick(KINDS), r)));
      const where = () => `seed ${SEED} case ${i}: 0x${bytes.toString('hex').slice(0, 400)}`;
      let wire: ReturnType<typeof onWire>;
      try {
        wire = onWire(bytes);
      } catch (error) {
        // The engine refuses the transfer (engine-dialer.ts catches it and detaches): an Error is all it must be.
        expect(error, where()).toBeInstanceOf(Error);
        counts.wireError++;
        continue;
      }
      const out = attempt(() => decodeDrMessage(wire), where);
      if ('ok' in out) {
        checkDecoded(out.ok, where);
        counts.ok++;
      } else counts.streamError++;
    }
    console.log(`DR protocol fuzz (bytes): ${JSON.stringify(counts)}`);
    expect(Math.min(counts.ok, counts.wireError, counts.streamError)).toBeGreaterThan(CASES / 100);
  });

  it(`decodes ${CASES} DR batches with mutated records and length fields to records the codec writes, or a plain Error`, () => {
    const r = prng(SEED + 1);
    const all = sampleChanges();
    const counts = { ok: 0, error: 0 };
    for (let i = 0; i < CASES; i++) {
      const records = Array.from({ length: 1 + r.int(5) }, (_, k) => encodeChange({ lsn: 100 + k, change: r.pick(all), durable: r.chance(0.5) }));
      const k = r.int(records.length);
      records[k] = mutateSome(records[k]!, r, r.pick(records));
      let body: Buffer = Buffer.concat(records.flatMap((rec) => [u32be(rec.length), rec]));
      if (r.chance(0.3)) body = mutate(body, r, r.pick(['u32', 'cut', 'insert', 'delete'] as const));
      const where = () => `seed ${SEED + 1} case ${i}: 0x${body.toString('hex').slice(0, 400)}`;
      const out = attempt(() => decodeDrMessage(onWire(framed({ k: r.pick(['changes', 'snapshot', 'declares'] as const), lsn: 105, time: 1, head: 105, now: 2 }, body))), where);
      if ('ok' in out) {
        checkDecoded(out.ok, where);
        counts.ok++;
      } else counts.error++;
    }
    console.log(`DR protocol fuzz (batches): ${JSON.stringify(counts)}`);
    expect(Math.min(counts.ok, counts.error)).toBeGreaterThan(CASES / 20);
  });

  it(`decodes ${CASES} DR messages whose properties have the wrong types to a sane message or a plain Error`, () => {
    const r = prng(SEED + 2);
    const counts = { ok: 0, error: 0 };
    const NAMES = ['k', 'lsn', 'time', 'head', 'now', 'queues', 'reason', 'floor', 'held', '__proto__', 'constructor', 'toString'];
    for (let i = 0; i < CASES; i++) {
      const m = sample(r.pick(KINDS), r);
      const encoded = onWire(encodeDrMessage(m));
      const props = encoded.application_properties;
      const body = encoded.body ?? Buffer.alloc(0);
      for (let n = 1 + r.int(3); n > 0; n--) Object.defineProperty(props, r.pick(NAMES), { value: wrongValue(r), enumerable: true, configurable: true, writable: true });
      if (r.chance(0.1)) props.k = r.pick([...KINDS, 'CHANGES', 'changes ', '', 'hasOwnProperty']);
      const where = () => `seed ${SEED + 2} case ${i}: ${JSON.stringify(props, (_, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v)).slice(0, 400)}`;
      const plain = attempt(() => decodeDrMessage({ application_properties: props, body: r.chance(0.1) ? (wrongValue(r) as never) : body }), where);
      if ('ok' in plain) checkDecoded(plain.ok, where);
      const wire = wireOf(props, body, where);
      if (!wire) continue;
      const wired = attempt(() => decodeDrMessage(wire), where);
      if ('ok' in wired) {
        checkDecoded(wired.ok, where);
        counts.ok++;
      } else counts.error++;
    }
    console.log(`DR protocol fuzz (property types): ${JSON.stringify(counts)}`);
    expect(Math.min(counts.ok, counts.error)).toBeGreaterThan(CASES / 50);
  });
});

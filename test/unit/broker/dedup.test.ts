// Duplicate detection in the model: the window (eviction by count and age, its
// index under churn), keys of every message-id type read from encoded messages,
// publishes and transactions against a broker, and replay of its log elsewhere.
import { createHash, randomBytes } from 'node:crypto';
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { parseIncoming } from '../../../src/amqp/message-codec.js';
import { Broker } from '../../../src/broker/broker.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { dedupDigest, dedupDigestAt, dedupDigestHex, dedupDigestStreamed, DedupKeyType, DEDUP_SHORT_VALUE_BYTES, writeDedupDigest, type DedupDigest } from '../../../src/broker/dedup-key.js';
import { DedupWindow, DEDUP_ROW_BYTES } from '../../../src/broker/dedup-window.js';
import { parseQueueSettings } from '../../../src/broker/settings.js';
import { snapshotOf } from '../../../src/replication/snapshot.js';
import { FakeClock, FakeConsumer, integerKey, msg, qs } from './helpers.js';

const key = (n: number): DedupDigest => integerKey(BigInt(n));

/** An encoded AMQP message, as a sender would put it on the wire. */
function amqp(fields: Record<string, unknown>): Buffer {
  return rhea.message.encode({ body: 'x', ...fields }) as Buffer;
}

function dedupBroker(clock = new FakeClock()): { broker: Broker; clock: FakeClock; logged: LoggedChange[] } {
  const broker = new Broker({ now: clock.now, dedupKeys: readDedupKey });
  const logged: LoggedChange[] = [];
  broker.log.attach({ append: (e) => logged.push(e) });
  return { broker, clock, logged };
}

const withId = (id: unknown, durable = true) => msg('', { bytes: amqp({ message_id: id, durable }), durable });

describe('dedup digest - the journaled format', () => {
  it('writes a short key out (type, length, value) and hashes a longer one: the first 16 bytes of SHA-256 over the type byte and the value', () => {
    // Pinned: journals and checkpoints hold these digests, so a change here
    // would let every resend after an upgrade through as a new message.
    expect(dedupDigestHex(dedupDigest(DedupKeyType.string, Buffer.from('m-1')))).toBe('84036d2d310000000000000000000000');
    expect(dedupDigestHex(dedupDigest(DedupKeyType.binary, Buffer.alloc(0)))).toBe('83000000000000000000000000000000');
    expect(dedupDigestHex(dedupDigest(DedupKeyType.symbol, Buffer.from('abcdefghijklmn')))).toBe('850e6162636465666768696a6b6c6d6e');
    expect(dedupDigestHex(integerKey(7n))).toBe('81000000000000000007000000000000');
    expect(dedupDigestHex(integerKey(-2n))).toBe('81fffffffffffffffffe000000000000');
    expect(dedupDigestHex(integerKey(18446744073709551615n))).toBe('8100ffffffffffffffff000000000000');
    const long = Buffer.from('order-000000001'); // 15 bytes: one more than a short key holds
    expect(long.length).toBe(DEDUP_SHORT_VALUE_BYTES + 1);
    expect(dedupDigestHex(dedupDigest(DedupKeyType.string, long))).toBe(
      createHash('sha256').update(Buffer.concat([Buffer.from([4]), long])).digest('hex').slice(0, 32),
    );
    // Lengths around the digest's 1 KiB scratch input too, and digests held side by
    // side (each its own bytes, not a view of something the next key overwrites).
    const lengths = [...Array.from({ length: 200 }, (_, n) => n + DEDUP_SHORT_VALUE_BYTES + 1), 1022, 1023, 1024, 1025, 5000];
    const empty = Buffer.alloc(DEDUP_SHORT_VALUE_BYTES + 1);
    const held = lengths.map((n) => [randomBytes(n), dedupDigest(DedupKeyType.binary, empty)] as const);
    for (const [value] of held) dedupDigest(DedupKeyType.string, value);
    for (const [, digest] of held) expect(digest).toEqual(dedupDigestStreamed(DedupKeyType.binary, empty));
    for (const n of lengths) {
      const value = randomBytes(n);
      for (const type of Object.values(DedupKeyType)) expect(dedupDigest(type, value)).toEqual(dedupDigestStreamed(type, value));
    }
    // Short digests are their own bytes too, and differ with type, length and value.
    const shorts = new Map<string, string>();
    for (let n = 0; n <= DEDUP_SHORT_VALUE_BYTES; n++) {
      for (const type of [DedupKeyType.binary, DedupKeyType.string, DedupKeyType.symbol]) {
        const value = Buffer.alloc(n);
        const d = dedupDigestHex(dedupDigest(type, value));
        value.fill(1);
        expect(shorts.has(d)).toBe(false);
        shorts.set(d, `${type}/${n}`);
        if (n > 0) expect(dedupDigestHex(dedupDigest(type, value))).not.toBe(d);
      }
    }
  });
});

describe('dedup window - keys, eviction and rows', () => {
  it('holds the last `limit` keys, oldest leaving first', () => {
    const w = new DedupWindow(3, 0);
    for (let i = 1; i <= 5; i++) expect(w.add(key(i), 0, i, true)).toBe(true);
    expect(w.size).toBe(3);
    expect([1, 2].map((i) => w.find(key(i), 0))).toEqual([undefined, undefined]);
    expect(w.find(key(5), 0)).toEqual({ lsn: 5, durable: true });
    expect(w.add(key(4), 0, 9, true)).toBe(false); // the first copy counts
    expect(w.find(key(4), 0)?.lsn).toBe(4);
    expect(w.evictedByCount).toBe(2);
  });

  it('forgets keys older than its ttl', () => {
    const w = new DedupWindow(100, 1000);
    w.add(key(1), 0, 1, true);
    w.add(key(2), 500, 2, true, 500);
    expect(w.find(key(1), 999)).toBeDefined();
    expect(w.find(key(1), 1000)).toBeUndefined();
    expect(w.find(key(2), 1000)).toBeDefined();
    expect(w.size).toBe(1);
    expect(w.add(key(3), 0, 3, true, 2000)).toBe(false); // too old already (a late replay)
    expect(w.evictedByAge).toBe(2);
  });

  it('keeps its index right through growth, eviction and removal (against a model)', () => {
    const limit = 5000;
    const w = new DedupWindow(limit, 0);
    // The ring as the model sees it: a removed key keeps its place until evicted.
    const order: Array<{ n: number; removed: boolean }> = [];
    const live = new Map<number, { n: number; removed: boolean }>();
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let step = 0; step < 40_000; step++) {
      const n = rand(20_000);
      if (rand(10) === 0 && live.has(n)) {
        expect(w.remove(key(n))).toBe(true);
        live.get(n)!.removed = true;
        live.delete(n);
        continue;
      }
      const added = w.add(key(n), 0, step + 1, true);
      expect(added).toBe(!live.has(n));
      if (!added) continue;
      if (order.length === limit) {
        const gone = order.shift()!;
        if (!gone.removed) live.delete(gone.n);
      }
      const row = { n, removed: false };
      order.push(row);
      live.set(n, row);
    }
    for (let n = 0; n < 20_000; n++) expect(w.find(key(n), 0) !== undefined).toBe(live.has(n));
  });

  it('fed by the log alone, keeps a ring and indexes it when first asked: the same keys as one that was indexed throughout', () => {
    // A primary's window takes keys checked; its backup's is fed what the primary took
    // (the log), as the ring wraps (limit) and keys age out (ttl).
    const limit = 3000;
    const checked = new DedupWindow(limit, 60_000);
    const logFed = new DedupWindow(limit, 60_000);
    let seed = 11;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let step = 0; step < 12_000; step++) {
      const n = rand(8000);
      const at = step * 10;
      if (checked.add(key(n), at, step + 1, true, at)) logFed.appended(key(n), at, step + 1, true, at);
    }
    expect(logFed.isIndexed).toBe(false);
    expect(checked.isIndexed).toBe(true);
    const now = 12_000 * 10;
    for (let n = 0; n < 8000; n++) {
      const want = checked.find(key(n), now);
      expect(logFed.find(key(n), now), `key ${n}`).toEqual(want);
    }
    expect(logFed.isIndexed).toBe(true);
    // Once indexed, what it takes is checked as add() checks it.
    const fresh = key(9_999_999);
    expect(logFed.appended(fresh, now, 1e6, true, now)).toBe(true);
    expect(logFed.appended(fresh, now, 1e6 + 1, true, now)).toBe(false);
    expect(logFed.find(fresh, now)?.lsn).toBe(1e6);
  });

  it('a log-fed window indexes the first of a key its ring holds twice, and evicts both in turn', () => {
    const w = new DedupWindow(4, 0);
    w.appended(key(1), 0, 1, true);
    w.appended(key(2), 0, 2, true);
    w.appended(key(1), 0, 3, true); // the overlap: the same key again
    expect(w.find(key(1), 0)?.lsn).toBe(1);
    expect(w.rows().length / DEDUP_ROW_BYTES).toBe(2); // the second copy is not a key of its own
    w.add(key(3), 0, 4, true);
    w.add(key(4), 0, 5, true); // evicts the first key(1)
    expect(w.find(key(1), 0)).toBeUndefined();
    expect(w.find(key(2), 0)?.lsn).toBe(2);
    expect(w.longestProbe()).toBeLessThan(4);
  });

  it('tells apart keys whose first word is the same (the word the index keeps), and evicts them right', () => {
    // Keys made to share their first 4 bytes (and so their home in the index) and differ after.
    const twin = (n: number): DedupDigest => ({ ...key(n), w0: 0x04030201 });
    const w = new DedupWindow(50, 0);
    for (let n = 0; n < 120; n++) {
      expect(w.add(twin(n), 0, n + 1, true)).toBe(true);
      expect(w.add(twin(n), 0, n + 1, true)).toBe(false);
    }
    for (let n = 0; n < 120; n++) expect(w.find(twin(n), 0)?.lsn).toBe(n >= 70 ? n + 1 : undefined);
    expect(w.remove(twin(100))).toBe(true);
    expect(w.find(twin(100), 0)).toBeUndefined();
    expect(w.find(twin(101), 0)?.lsn).toBe(102);
  });

  it('exports rows oldest first, only journaled ones up to an LSN when asked, and takes them back', () => {
    const w = new DedupWindow(10, 0);
    w.add(key(1), 10, 1, true);
    w.add(key(2), 20, 2, false);
    w.add(key(3), 30, 3, true);
    w.add(key(4), 40, 4, true);
    expect(w.rows().length).toBe(4 * DEDUP_ROW_BYTES);
    const journaled = w.rows({ upToLsn: 3 });
    expect(journaled.length).toBe(2 * DEDUP_ROW_BYTES);
    const copy = new DedupWindow(10, 0);
    expect(copy.addRows(journaled, 50)).toBe(2);
    expect([1, 2, 3, 4].map((i) => copy.find(key(i), 50)?.lsn)).toEqual([1, undefined, 3, undefined]);
  });

  it('writes each row as digest | at (f64 LE) | lsn (f64 LE), across a wrapped ring with removed and non-durable keys', () => {
    const w = new DedupWindow(50, 0);
    const added: Array<{ digest: Buffer; at: number; lsn: number; durable: boolean }> = [];
    // 120 keys through a window of 50: the ring wraps; every seventh is taken back.
    for (let i = 1; i <= 120; i++) {
      const digest = key(i * 7919);
      const entry = { digest, at: 1000.5 + i, lsn: i * 3, durable: i % 3 !== 0 };
      w.add(entry.digest, entry.at, entry.lsn, entry.durable);
      added.push(entry);
      if (i % 7 === 0) w.remove(digest);
    }
    const expected = (upTo?: number) => {
      const kept = added.slice(-50).filter((e, j) => (added.length - 50 + j + 1) % 7 !== 0 && (upTo === undefined || (e.durable && e.lsn <= upTo)));
      return Buffer.concat(
        kept.map((e) => {
          const row = Buffer.alloc(DEDUP_ROW_BYTES);
          writeDedupDigest(e.digest, row, 0);
          row.writeDoubleLE(e.at, 16);
          row.writeDoubleLE(e.lsn, 24);
          return row;
        }),
      );
    };
    expect(w.rows().equals(expected())).toBe(true);
    expect(w.rows({ upToLsn: 300 }).equals(expected(300))).toBe(true);
    expect(w.rows({ upToLsn: 300 }).length).toBeLessThan(w.rows().length);
  });

  it('spreads keys a sender chose over its index: sequential integers, and keys that differ in one word only', () => {
    // Short keys are their digest written out, alike in all but a few bytes: placed
    // by those bytes they would share one probe run, and each lookup would scan it.
    const n = 1 << 17;
    const w = new DedupWindow(n, 0);
    for (let i = 0; i < n; i++) w.add(key(i), 0, i + 1, true);
    const third = (i: number): DedupDigest => ({ w0: 0, w1: 0, w2: 0, w3: i });
    for (let i = 0; i < n / 2; i++) w.add(third(i), 0, n + i + 1, true);
    expect(w.size).toBe(n);
    expect(w.longestProbe()).toBeLessThan(200);
    expect(w.find(key(n / 2 - 1), 0)).toBeUndefined(); // the older half made room
    expect(w.find(key(n / 2), 0)?.lsn).toBe(n / 2 + 1);
    expect(w.find(third(n / 2 - 1), 0)?.lsn).toBe(n + n / 2);
  });

  it('costs well under 100 bytes per key (53 when full), off the V8 heap', () => {
    // Full to its capacity (the arrays double up to the limit): the most it costs per key.
    const n = 1 << 18;
    const w = new DedupWindow(n, 0);
    const digests = randomBytes(n * 16);
    for (let i = 0; i < n; i++) w.add(dedupDigestAt(digests, i * 16), 0, i + 1, true);
    expect(w.size).toBe(n);
    expect(w.memoryBytes / w.size).toBeLessThan(54);
  });
});

describe('dedup keys - message-id types and application properties', () => {
  const read = (fields: Record<string, unknown>, property?: string) => readDedupKey(amqp(fields), property);
  const digest = (fields: Record<string, unknown>, property?: string) => {
    const r = read(fields, property);
    return r.status === 'key' ? dedupDigestHex(r.digest) : r.status;
  };

  it('reads ulong, uuid, binary and string message-ids, and compares type and value', () => {
    const uuid = rhea.string_to_uuid(rhea.generate_uuid());
    const ids = [
      { message_id: 7 },
      { message_id: rhea.types.wrap_ulong(7) },
      { message_id: rhea.types.wrap_uuid(uuid) },
      { message_id: rhea.types.wrap_binary(Buffer.from(uuid)) },
      { message_id: '7' },
      { message_id: 'order-1' },
    ];
    const digests = ids.map((f) => digest(f));
    // An int and a ulong 7 are one key; a uuid and a binary of the same bytes are not; nor "7" and 7.
    expect(digests[0]).toBe(digests[1]);
    expect(new Set(digests.slice(1)).size).toBe(5);
    expect(digest({ message_id: 'order-1' })).toBe(digests[5]);
    expect(digest({ message_id: 'order-2' })).not.toBe(digests[5]);
  });

  it('reads every integer type and width as its value: one key per number, whatever its encoding', () => {
    // A properties section holding only a message-id, encoded by hand (list8, count 1).
    const withId = (value: Buffer) => Buffer.concat([Buffer.from([0x00, 0x53, 0x73, 0xc0, value.length + 1, 1]), value]);
    const encode = (code: number, width: number, v: bigint): Buffer => {
      const b = Buffer.alloc(1 + width);
      b[0] = code;
      let u = BigInt.asUintN(8 * width, v);
      for (let i = width; i >= 1; i--) {
        b[i] = Number(u & 0xffn);
        u >>= 8n;
      }
      return b;
    };
    const types: Array<[code: number, width: number, signed: boolean]> = [
      [0x50, 1, false], [0x60, 2, false], [0x70, 4, false], [0x52, 1, false], [0x80, 8, false], [0x53, 1, false],
      [0x51, 1, true], [0x61, 2, true], [0x71, 4, true], [0x54, 1, true], [0x81, 8, true], [0x55, 1, true],
    ];
    const values = [0n, 1n, 7n, 127n, 128n, 255n, 256n, 32767n, 65535n, 2147483647n, 4294967295n, 4294967296n, -4294967297n, 9007199254740991n, -9007199254740991n, 9007199254740992n, -9007199254740992n, 9007199254740993n, 9223372036854775807n, 18446744073709551615n, -1n, -128n, -129n, -32768n, -2147483648n, -9223372036854775808n];
    let checked = 0;
    for (const [code, width, signed] of types) {
      const min = signed ? -(1n << BigInt(8 * width - 1)) : 0n;
      const max = signed ? (1n << BigInt(8 * width - 1)) - 1n : (1n << BigInt(8 * width)) - 1n;
      for (const v of values) {
        if (v < min || v > max) continue;
        const r = readDedupKey(withId(encode(code, width, v)), undefined);
        expect(r, `type 0x${code.toString(16)} value ${v}`).toEqual({ status: 'key', digest: integerKey(v) });
        checked++;
      }
    }
    for (const code of [0x43, 0x44]) expect(readDedupKey(withId(Buffer.from([code])), undefined)).toEqual({ status: 'key', digest: integerKey(0n) });
    expect(checked).toBeGreaterThan(100);
  });

  it('says missing for no message-id, invalid for an uncomparable one', () => {
    expect(read({})).toEqual({ status: 'missing' });
    expect(read({ message_id: rhea.types.wrap_double(1.5) }).status).toBe('invalid');
    expect(read({ message_id: rhea.types.wrap_boolean(true) }).status).toBe('invalid');
  });

  it('reads an application property instead, when a queue names one', () => {
    const f = { message_id: 'm1', application_properties: { _AMQ_DUPL_ID: 'dup-1', other: 3 } };
    expect(digest(f, '_AMQ_DUPL_ID')).toBe(digest({ application_properties: { _AMQ_DUPL_ID: 'dup-1' } }, '_AMQ_DUPL_ID'));
    expect(digest(f, '_AMQ_DUPL_ID')).not.toBe(digest(f));
    expect(read(f, 'absent')).toEqual({ status: 'missing' });
    expect(read({ application_properties: { k: { a: 1 } } }, 'k').status).toBe('invalid');
  });

  it('does not read entries past an application-properties map whose count says more than it holds', () => {
    // A map8 of size 1 saying 2 entries, and after it bytes that read as k: "dup". The broker does
    // not decode application properties at publish, so the reader must keep to the map itself.
    const entry = Buffer.concat([Buffer.from([0xa1, 0x01]), Buffer.from('k'), Buffer.from([0xa1, 0x03]), Buffer.from('dup')]);
    const short = Buffer.concat([Buffer.from([0x00, 0x53, 0x74, 0xc1, 0x01, 0x02]), entry]);
    expect(readDedupKey(short, 'k')).toEqual({ status: 'invalid', reason: 'application-properties holds fewer entries than its count says' });
    // Its key inside, its value outside.
    const half = Buffer.concat([Buffer.from([0x00, 0x53, 0x74, 0xc1, 0x04, 0x02]), entry]);
    expect(readDedupKey(half, 'k').status).toBe('invalid');
    // The same entry inside the map is read.
    const whole = Buffer.concat([Buffer.from([0x00, 0x53, 0x74, 0xc1, 1 + entry.length, 0x02]), entry]);
    expect(readDedupKey(whole, 'k').status).toBe('key');
  });

  it('reads the first properties section, as the broker reads the head; the offset the head reader found gives the same key', () => {
    // Hand-made sections: a properties section holding one string message-id, and a data body.
    const props = (id: string) => Buffer.concat([Buffer.from([0x00, 0x53, 0x73, 0xc0, id.length + 3, 1, 0xa1, id.length]), Buffer.from(id)]);
    const header = Buffer.from([0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41]); // durable
    const body = Buffer.from([0x00, 0x53, 0x75, 0xa0, 0x01, 0x78]);
    const first = readDedupKey(Buffer.concat([props('first'), body]), undefined);
    expect(first.status).toBe('key');
    const missing = { status: 'missing' };
    const cases: Array<[Buffer, unknown]> = [
      [Buffer.concat([header, props('first'), body]), first],
      [Buffer.concat([header, props('first')]), first],
      [Buffer.concat([header, body]), missing],
      [amqp({ message_id: 'first', application_properties: { k: 1 } }), first],
      [amqp({ message_id: 'first', message_annotations: { x: 1 }, durable: true }), first],
      [amqp({ application_properties: { message_id: 'no' } }), missing],
    ];
    // Past the head reader's four sections: the key reader finds it, though the broker refuses such a message (headers repeated).
    const repeated = Buffer.concat([header, header, header, header, props('first'), body]);
    expect(readDedupKey(repeated, undefined)).toEqual(first);
    expect(() => parseIncoming(repeated)).toThrow(/a header section out of place/);
    // A second properties section: the key reader takes the first, and the broker refuses the message.
    const twice = Buffer.concat([props('first'), props('second'), body]);
    expect(readDedupKey(twice, undefined)).toEqual(first);
    expect(() => parseIncoming(twice)).toThrow(/a properties section out of place/);
    for (const [bytes, want] of cases) {
      const parsed = parseIncoming(bytes);
      expect(readDedupKey(bytes, undefined)).toEqual(want);
      expect(readDedupKey(bytes, undefined, parsed.propertiesAt)).toEqual(want);
    }
    // An offset that is not where a properties section starts is not trusted: the reader looks itself.
    const bytes = cases[0]![0];
    expect(readDedupKey(bytes, undefined, 0)).toEqual(first);
    expect(readDedupKey(bytes, undefined, 5)).toEqual(first);
  });

  it('never throws on malformed bytes, whatever properties offset the head reader gave', () => {
    const good = amqp({ message_id: 'abc', durable: true, application_properties: { k: 'v' } });
    const found = parseIncoming(good).propertiesAt;
    expect(found).toBeGreaterThan(0);
    const answers = ['key', 'missing', 'invalid'];
    // A truncated message, read with no offset, the good message's offset (now past
    // the end or into the cut), and offsets no head reader gives.
    for (let cut = 0; cut < good.length; cut++) {
      const bytes = good.subarray(0, cut);
      for (const at of [undefined, -1, 0, found, cut, cut + 7, good.length + 100]) {
        expect(answers).toContain(readDedupKey(bytes, undefined, at).status);
        expect(answers).toContain(readDedupKey(bytes, 'k', at).status);
      }
    }
    // Every byte of the whole message overwritten in turn, read at the offset found
    // before: the bytes there may no longer be a properties section at all.
    for (let i = 0; i < good.length; i++) {
      for (const b of [0x00, 0x40, 0xa1, 0xb1, 0xc0, 0xd0, 0xff]) {
        const bytes = Buffer.from(good);
        bytes[i] = b;
        expect(answers).toContain(readDedupKey(bytes, undefined, found).status);
        expect(answers).toContain(readDedupKey(bytes, 'k', found).status);
      }
    }
  });
});

describe('dedup - publish and transactions', () => {
  const settings = qs({ durable: true, dedupWindow: 100 });

  it('takes a key once: a resend is a duplicate whether the first copy is queued, delivered or consumed', () => {
    const { broker, logged } = dedupBroker();
    const q = broker.declareQueue('orders', settings).queue;
    const first = broker.publish('orders', withId('a'));
    expect(first.duplicate).toBeUndefined();
    const again = broker.publish('orders', withId('a'));
    expect(again).toMatchObject({ duplicate: true, lsn: first.lsn, durable: true, queues: [] });
    const c = new FakeConsumer('c1', 10);
    q.addConsumer(c);
    q.dispatch();
    expect(broker.publish('orders', withId('a')).duplicate).toBe(true);
    broker.accept(q, c.deliveries[0]!);
    expect(q.depth).toBe(0);
    expect(broker.publish('orders', withId('a')).duplicate).toBe(true);
    expect(q.dedupCounts.duplicates).toBe(3);
    expect(logged.filter((e) => e.change.kind === 'enqueue')).toHaveLength(1);
    expect(broker.publish('orders', withId('b')).duplicate).toBeUndefined();
  });

  it('passes messages without a key (counted), and with an uncomparable one (counted, reported)', () => {
    const reports: string[] = [];
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, dedupKeys: readDedupKey, events: { dedupKeyInvalid: (_q, reason) => reports.push(reason) } });
    const q = broker.declareQueue('orders', settings).queue;
    broker.publish('orders', msg('', { bytes: amqp({}) }));
    broker.publish('orders', msg('', { bytes: amqp({}) }));
    broker.publish('orders', withId(rhea.types.wrap_double(2.5)));
    broker.publish('orders', withId(rhea.types.wrap_double(2.5)));
    expect(q.depth).toBe(4);
    expect(q.dedupCounts).toEqual({ duplicates: 0, withoutKey: 2, invalidKey: 2 });
    expect(reports[0]).toMatch(/not compared/);
  });

  it('forgets the key of a publish taken back (its journal write failed), so the resend gets in', () => {
    const { broker } = dedupBroker();
    const q = broker.declareQueue('orders', settings).queue;
    broker.withdraw(broker.publish('orders', withId('a')));
    expect(q.depth).toBe(0);
    expect(broker.publish('orders', withId('a')).duplicate).toBeUndefined();
    expect(q.depth).toBe(1);
  });

  it('evicts by age: a resend after the ttl is a new message', () => {
    const { broker, clock } = dedupBroker();
    const q = broker.declareQueue('orders', qs({ dedupWindow: 10, dedupTtlMs: 60_000 })).queue;
    broker.publish('orders', withId('a', false));
    clock.advance(59_999);
    expect(broker.publish('orders', withId('a', false)).duplicate).toBe(true);
    clock.advance(1);
    expect(broker.publish('orders', withId('a', false)).duplicate).toBeUndefined();
    expect(q.depth).toBe(2);
  });

  it('transactions: keys enter at commit, once per transaction; a rolled-back one leaves none', () => {
    const { broker } = dedupBroker();
    const q = broker.declareQueue('orders', settings).queue;
    // Rolled back: the coordinator drops its sends, the broker never saw them.
    const rolledBack = [{ address: 'orders', msg: withId('t1') }];
    void rolledBack;
    const r = broker.commit([{ address: 'orders', msg: withId('t1') }, { address: 'orders', msg: withId('t1') }, { address: 'orders', msg: withId('t2') }], []);
    expect(q.depth).toBe(2);
    expect(r.dedupKeys).toHaveLength(2);
    const again = broker.commit([{ address: 'orders', msg: withId('t1') }, { address: 'orders', msg: withId('t2') }], []);
    expect(again).toMatchObject({ duplicate: true, queues: [] });
    expect(q.depth).toBe(2);
    expect(broker.publish('orders', withId('t2')).duplicate).toBe(true);
    // A commit whose durability failed is withdrawn: its messages go, its keys are given back.
    const failed = broker.commit([{ address: 'orders', msg: withId('t3') }, { address: 'orders', msg: withId('t4') }], []);
    expect(q.depth).toBe(4);
    broker.withdraw(failed);
    expect(q.depth).toBe(2);
    expect(broker.commit([{ address: 'orders', msg: withId('t3') }], []).duplicate).toBeUndefined();
  });

  it('a broker applying the log (an HA backup) ends with the same window, and refuses what the first refused', () => {
    const { broker, logged } = dedupBroker();
    broker.declareQueue('orders', settings);
    for (const id of ['a', 'b', 'a', 'c']) broker.publish('orders', withId(id));
    broker.commit([{ address: 'orders', msg: withId('d') }, { address: 'orders', msg: withId('b') }], []);
    const backup = new Broker({ now: broker.now, dedupKeys: readDedupKey });
    for (const e of logged) backup.apply(e);
    const q = backup.queue('orders');
    expect(q.depth).toBe(4);
    expect(q.dedup!.size).toBe(4);
    expect(q.dedup!.isIndexed).toBe(false); // a backup only appends
    expect(backup.indexDedupWindows()).toBe(4); // what a promotion does
    for (const id of ['a', 'b', 'c', 'd']) expect(backup.publish('orders', withId(id)).duplicate).toBe(true);
    expect(backup.publish('orders', withId('e')).duplicate).toBeUndefined();
  });

  it('a key taken back (its journal write failed) leaves the backups too: promoted, one lets the resend in instead of answering it as a duplicate of a message never kept', () => {
    const { broker, logged } = dedupBroker();
    broker.declareQueue('orders', settings);
    broker.publish('orders', withId('kept'));
    // The publish and the commit went out to the backups before the journal failed.
    broker.withdraw(broker.publish('orders', withId('refused')));
    broker.withdraw(broker.commit([{ address: 'orders', msg: withId('t-refused') }], []));
    const backup = new Broker({ now: broker.now, dedupKeys: readDedupKey });
    for (const e of logged) backup.apply(e);
    const q = backup.queue('orders');
    expect(q.depth).toBe(1);
    backup.indexDedupWindows(); // promoted
    expect(backup.publish('orders', withId('kept')).duplicate).toBe(true);
    expect(backup.publish('orders', withId('refused')).duplicate).toBeUndefined();
    expect(backup.publish('orders', withId('t-refused')).duplicate).toBeUndefined();
    expect(q.depth).toBe(3);
    expect(logged.filter((e) => e.change.kind === 'dedup-forget')).toHaveLength(2);
  });

  it("an HA snapshot gives a backup the keys of non-durable messages as not durable, in the window's order: the backup neither journals nor checkpoints them, so they go with a restart of the whole cluster as their messages do", () => {
    const { broker } = dedupBroker();
    broker.declareQueue('orders', settings);
    const sent: Array<[string, boolean]> = [['d1', true], ['n1', false], ['n2', false], ['d2', true], ['n3', false]];
    for (const [id, durable] of sent) broker.publish('orders', withId(id, durable));
    const records = [...snapshotOf(broker).records].filter((r) => r.change.kind === 'dedup-keys');
    expect(records.map((r) => r.durable)).toEqual([true, false, true, false]);
    const backup = new Broker({ now: broker.now, dedupKeys: readDedupKey });
    let lsn = 0;
    for (const r of snapshotOf(broker).records) backup.apply({ lsn: ++lsn, change: r.change, durable: r.durable });
    const window = backup.queue('orders').dedup!;
    expect(window.size).toBe(5);
    // What a checkpoint keeps (durable keys only) and what the journal got (durable records) hold d1 and d2 alone.
    const held = (rows: Buffer) => Array.from({ length: rows.length / DEDUP_ROW_BYTES }, (_, i) => dedupDigestHex(dedupDigestAt(rows, i * DEDUP_ROW_BYTES)));
    const digestOf = (id: string) => dedupDigestHex(dedupDigest(DedupKeyType.string, Buffer.from(id)));
    expect(held(window.rows({ upToLsn: Infinity }))).toEqual(['d1', 'd2'].map(digestOf));
    expect(held(Buffer.concat(records.filter((r) => r.durable).map((r) => (r.change as { rows: Buffer }).rows)))).toEqual(['d1', 'd2'].map(digestOf));
    // In the primary's order, so both evict the same key next.
    expect(held(window.rows())).toEqual(sent.map(([id]) => digestOf(id)));
  });

  it('a DR copy of a source without a window is deduplicated by the secondary', () => {
    const { broker } = dedupBroker();
    broker.declareQueue('orders', settings);
    const copy = (id: number, mid: string) => ({ kind: 'enqueue' as const, queue: 'orders', message: { id, bytes: amqp({ message_id: mid, durable: true }), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined } });
    const logged = broker.recordDr({ kind: 'dr-transaction', queues: ['orders'], lsn: 10, time: 0, changes: [copy(1, 'x'), copy(2, 'x'), copy(3, 'y')] });
    expect(broker.queue('orders').depth).toBe(2);
    const kept = (logged.change as { changes: unknown[] }).changes;
    expect(kept).toHaveLength(2); // the journal and backups never see the second copy
    broker.recordDr({ kind: 'dr-transaction', queues: ['orders'], lsn: 11, time: 0, changes: [copy(4, 'y')] });
    expect(broker.queue('orders').depth).toBe(2);
    // After activation, a client resending what it sent the lost site:
    expect(broker.publish('orders', withId('x')).duplicate).toBe(true);
  });
});

describe('dedup settings - refused at declare when out of range', () => {
  it('parses the window, ttl and key, and refuses bad values with what is accepted', () => {
    expect(parseQueueSettings({ 'qpid.dedup-window': '1000000', 'qpid.dedup-ttl': '10m', 'qpid.dedup-key': '_AMQ_DUPL_ID' })).toMatchObject({ dedupWindow: 1_000_000, dedupTtlMs: 600_000, dedupKey: '_AMQ_DUPL_ID' });
    expect(() => parseQueueSettings({ 'dedup-window': -1 })).toThrow(/whole number/);
    expect(() => parseQueueSettings({ 'dedup-window': 1e9 })).toThrow(/between 0/);
    expect(() => parseQueueSettings({ 'dedup-window': 10, 'dedup-ttl': '30d' })).toThrow(/duration|7 days/);
    expect(() => parseQueueSettings({ 'dedup-ttl': '10m' })).toThrow(/need a dedup-window/);
    expect(() => parseQueueSettings({ 'dedup-window': 10, 'dedup-key': 5 })).toThrow(/property name/);
    // Broker defaults apply only to a queue that sets none of the dedup arguments.
    const defaults = qs({ dedupWindow: 50, dedupTtlMs: 1000 });
    expect(parseQueueSettings({ durable: true }, defaults)).toMatchObject({ dedupWindow: 50, dedupTtlMs: 1000 });
    expect(parseQueueSettings({ 'dedup-window': 0 }, defaults)).toMatchObject({ dedupWindow: 0, dedupTtlMs: 0 });
  });
});

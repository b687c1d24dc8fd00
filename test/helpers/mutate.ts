// Byte mutations for the seeded fuzz tests of what a peer or a disk hands us (the
// replication and DR streams, the checkpoint, journal segments): the damage a
// broken or hostile sender, a bad disk or a cut write leaves. Driven by the
// tests' seeded PRNG (test/unit/store/helpers.ts `prng`), so a failing case
// replays from its seed and number.

export interface Random {
  next(): number;
  int(n: number): number;
  pick<T>(xs: readonly T[]): T;
  chance(p: number): boolean;
}

/** Values a length, count, flag or type byte is often checked against. */
const EDGE_BYTES = [0x00, 0x01, 0x02, 0x10, 0x40, 0x7f, 0x80, 0xa0, 0xb0, 0xc0, 0xd0, 0xff];
/** 32-bit values a length or count field is set to: zero, small, just past, huge. */
const EDGE_U32 = [0, 1, 4, 0x7fffffff, 0x80000000, 0xfffffff0, 0xffffffff, 1 << 30, (1 << 30) + 1, 1 << 20];

export type Mutation = 'flip' | 'byte' | 'u32' | 'cut' | 'insert' | 'delete' | 'splice' | 'zero';
export const MUTATIONS: readonly Mutation[] = ['flip', 'byte', 'u32', 'cut', 'insert', 'delete', 'splice', 'zero'];

/**
 * One mutation of `b` (never changed in place). `donor` gives spliced bytes (another
 * valid encoding, so the splice carries real structure); `within` limits where it
 * strikes ([from, to) of b), so a test can aim at a part (a block's payload).
 */
export function mutate(b: Buffer, r: Random, how: Mutation = r.pick(MUTATIONS), donor: Buffer = b, within: [number, number] = [0, b.length]): Buffer {
  const [from, to] = within;
  if (to <= from) return Buffer.from(b);
  const at = from + r.int(to - from);
  const out = Buffer.from(b);
  switch (how) {
    case 'flip':
      out[at] = out[at]! ^ (1 << r.int(8));
      return out;
    case 'byte':
      out[at] = r.chance(0.5) ? r.pick(EDGE_BYTES) : r.int(256);
      return out;
    case 'u32': {
      // A length or count field (big- or little-endian) set to an edge value.
      const w = Math.min(at, Math.max(from, to - 4));
      if (w + 4 > out.length) return out;
      const v = r.pick(EDGE_U32);
      if (r.chance(0.5)) out.writeUInt32BE(v >>> 0, w);
      else out.writeUInt32LE(v >>> 0, w);
      return out;
    }
    case 'cut':
      return out.subarray(0, at);
    case 'insert': {
      const bytes = Buffer.alloc(1 + r.int(16));
      for (let i = 0; i < bytes.length; i++) bytes[i] = r.chance(0.5) ? r.pick(EDGE_BYTES) : r.int(256);
      return Buffer.concat([out.subarray(0, at), bytes, out.subarray(at)]);
    }
    case 'delete':
      return Buffer.concat([out.subarray(0, at), out.subarray(Math.min(to, at + 1 + r.int(16)))]);
    case 'splice': {
      const d = r.int(Math.max(1, donor.length));
      return Buffer.concat([out.subarray(0, at), donor.subarray(d, d + 1 + r.int(64)), out.subarray(at + r.int(32))]);
    }
    case 'zero':
      out.fill(0, at, Math.min(to, at + 1 + r.int(64)));
      return out;
  }
}

/** One to four mutations, mostly one (a nearly whole input reaches the deep paths). */
export function mutateSome(b: Buffer, r: Random, donor: Buffer = b): Buffer {
  let out = b;
  for (let n = r.chance(0.7) ? 1 : 2 + r.int(3); n > 0 && out.length > 0; n--) out = mutate(out, r, r.pick(MUTATIONS), donor);
  return out;
}

/**
 * Plain values of the wrong type (or of the right type and absurd) for a property a
 * decoder reads: what a peer of another version, or a hostile one, may send.
 */
export function wrongValue(r: Random): unknown {
  const values: Array<() => unknown> = [
    () => 'abc',
    () => '',
    () => '12',
    () => '-1',
    () => 'x'.repeat(1 + r.int(3000)),
    () => -1,
    () => 1.5,
    () => Number.NaN,
    () => Number.POSITIVE_INFINITY,
    () => Number.MAX_SAFE_INTEGER + 2,
    () => 2 ** 64,
    () => 1e300,
    () => 2n ** 64n - 1n,
    () => -(2n ** 63n),
    () => 2n ** 53n + 1n,
    () => true,
    () => null,
    () => Buffer.from('bytes'),
    () => new Date(0),
    () => [],
    () => [1, 'a', null],
    () => ({}),
    () => ({ a: { b: { c: [1, 2, { d: 'e' }] } } }),
    () => JSON.parse('{"__proto__": {"k": "changes", "lsn": 5, "polluted": true}}'),
    () => JSON.parse('{"__proto__": 1, "constructor": {"prototype": {"polluted": true}}}'),
    () => ({ length: 1e15 }),
    () => ({ toString: 1, valueOf: 'x' }),
    () => JSON.parse('{"__proto__": {"toString": 1}}'),
    () => '{"__proto__": {"polluted": true}}',
    () => '[1,2,3]',
    () => '{"a": 1}',
    () => '{"a": "b", "__proto__": "c"}',
    () => 'null',
    () => '1e999',
    () => `[${'['.repeat(5000)}${']'.repeat(5000)}]`,
  ];
  return r.pick(values)();
}

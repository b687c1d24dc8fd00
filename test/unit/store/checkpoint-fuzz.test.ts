// A seeded fuzz of the checkpoint loader (src/store/checkpoint.ts readCheckpoint, and
// what Journal.open builds from it). A real checkpoint (queues, a table of more than
// one 1024-row chunk, config records, a dedup window) is damaged: raw bytes (flips,
// edge values, cuts, insertions, splices), and, since a block's CRC only proves its
// bytes were written, not that they are sane, blocks mutated under a recomputed CRC:
// payloads (record heads, rows, ids as NaN or out of order, columns, dedup names and
// rows), header JSON fields replaced by wrong types and absurd numbers, blocks dropped,
// repeated or swapped with a matching end block. Journal.open (materializing the
// messages, as a broker's start does) must either open (using the checkpoint, or
// setting it aside and replaying the journal) or refuse with a StoreError: never
// another exception, a hang, or memory out of proportion to the file.
//
// TANDEM_FUZZ_SEED changes the run; TANDEM_FUZZ_CASES the number of cases.
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEDUP_ROW_BYTES } from '../../../src/broker/dedup-window.js';
import { CHECKPOINT_CORRUPT, CHECKPOINT_FILE } from '../../../src/store/checkpoint.js';
import { crc32c } from '../../../src/store/crc32c.js';
import { isStoreError } from '../../../src/store/errors.js';
import { Journal } from '../../../src/store/journal.js';
import { mutate, mutateSome, wrongValue, type Random } from '../../helpers/mutate.js';
import { durable, message, prng, queueSettings, removeDir, sampleChanges, tempDir, Workload, withTimeout } from './helpers.js';

const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0xc4f022);
const CASES = Math.ceil(Number(process.env.TANDEM_FUZZ_CASES ?? 6000) / 15);
/** One open of a small journal: far above this is a hang. */
const CASE_MS = 10_000;
/** Memory one case may leave grown (RSS, loosely): the journal and checkpoint are under a MiB. */
const GROWTH_BOUND = 256 * 1024 * 1024;

const HEADER = 1;
const RECORDS = 2;
const ROWS = 3;
const END = 4;
const DEDUP = 5;

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await removeDir(d);
});

const quiet = { info() {}, warn() {}, error() {} };
let base = '';
let original = Buffer.alloc(0);

interface Block {
  type: number;
  payload: Buffer;
}

/** The blocks of a checkpoint file (after its 12-byte magic and version). */
function blocksOf(file: Buffer): Block[] {
  const out: Block[] = [];
  for (let at = 12; at < file.length; ) {
    const len = file.readUInt32LE(at + 4);
    out.push({ type: file.readUInt32LE(at), payload: file.subarray(at + 12, at + 12 + len) });
    at += 12 + len;
  }
  return out;
}

/** A checkpoint file of these blocks, each under a good CRC; the end block counts what comes before it unless told otherwise. */
function fileOf(blocks: Block[], fixEnd = true): Buffer {
  const parts: Buffer[] = [original.subarray(0, 12)];
  let before = 0;
  for (const b of blocks) {
    let payload = b.payload;
    if (b.type === END && fixEnd) {
      payload = Buffer.alloc(4);
      payload.writeUInt32LE(before, 0);
    } else before++;
    const head = Buffer.alloc(12);
    head.writeUInt32LE(b.type, 0);
    head.writeUInt32LE(payload.length, 4);
    head.writeUInt32LE(crc32c(payload, crc32c(head, 0, 0, 8)), 8);
    parts.push(head, payload);
  }
  return Buffer.concat(parts);
}

/** Every path to a value in a JSON tree, with a setter. */
function leaves(node: unknown, set: (v: unknown) => void, out: Array<{ path: string; set: (v: unknown) => void }>, p = ''): void {
  out.push({ path: p, set });
  if (node === null || typeof node !== 'object') return;
  const o = node as Record<string, unknown>;
  for (const k of Object.keys(o)) leaves(o[k], (v) => (o[k] = v), out, `${p}.${k}`);
}

/** The header JSON with one field replaced, a number nudged, or a list entry repeated. */
function mutateHeader(payload: Buffer, r: Random): Buffer {
  const root = { h: JSON.parse(payload.toString('utf8')) as unknown };
  const all: Array<{ path: string; set: (v: unknown) => void }> = [];
  leaves(root.h, (v) => (root.h = v), all);
  for (let n = 1 + r.int(2); n > 0; n--) {
    const { set } = r.pick(all);
    const way = r.int(4);
    if (way === 0) set(wrongValue(r));
    else if (way === 1) set(r.pick([0, 1, 2, 7, 1023, 1024, 1025, 2 ** 31, 2 ** 32, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER, 1e300]));
    else if (way === 2) set(r.pick([[], [0], [{}], [{ id: 1, tombTargets: [], copiedFrom: [] }], [{ name: 'big', declaredAt: 1, rows: 1024 }, { name: 'big', declaredAt: 1, rows: 1024 }]]));
    else set(undefined);
  }
  // undefined when the header itself was set to undefined: written as null.
  let text = JSON.stringify(root.h, (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v)) ?? 'null';
  // Keys JSON.stringify writes as own properties are fine; a literal __proto__ key needs text.
  if (r.chance(0.1)) text = text.replace(/^\{/, '{"__proto__": {"queues": [{"name": "x", "declaredAt": 1, "rows": 5}]}, ');
  return Buffer.from(text);
}

/** A rows block's ids and columns damaged in the ways a row reader must not trust. */
function mutateRows(payload: Buffer, r: Random): Buffer {
  const out = Buffer.from(payload);
  const n = out.readUInt32LE(4);
  const way = r.int(5);
  if (way === 0) out.writeUInt32LE(r.pick([0, 1, 2, 5, 0xffffffff]), 0); // queue index
  else if (way === 1) out.writeUInt32LE(r.pick([0, 1, n - 1, n + 1, 1024, 1025, 0xffffffff]) >>> 0, 4); // row count
  else if (way === 2 && n > 0) out.writeDoubleLE(r.pick([Number.NaN, -1, 0.5, 2 ** 60, Number.POSITIVE_INFINITY, 0, -0]), 8 + 8 * r.int(n)); // an id
  else if (way === 3) {
    // A column value (segment, offset, size, parts...) set to an edge.
    const at = 8 + 8 * n + r.int(Math.max(1, out.length - 8 - 8 * n - 4));
    if (at + 4 <= out.length) out.writeUInt32LE(r.pick([0, 1, 0x7fffffff, 0xffffffff, 2 ** 20]) >>> 0, at);
  } else return mutate(out, r);
  return out;
}

/** A dedup block's name length or rows damaged. */
function mutateDedup(payload: Buffer, r: Random): Buffer {
  const out = Buffer.from(payload);
  const way = r.int(3);
  if (way === 0) out.writeUInt32LE(r.pick([0, 1, out.length, out.length - 4, 0xffffffff]) >>> 0, 0);
  else if (way === 1 && out.length >= 8) out.writeDoubleLE(r.pick([Number.NaN, -1, 2 ** 60, Number.POSITIVE_INFINITY]), out.length - 8 - 8 * r.int(3));
  else return mutate(out, r);
  return out;
}

/** One damaged checkpoint: raw, or blocks that each pass their CRC. */
function damaged(r: Random): { bytes: Buffer; how: string } {
  const blocks = blocksOf(original);
  const way = r.int(6);
  if (way === 0) return { bytes: mutateSome(original, r), how: 'raw' };
  if (way === 1) {
    const k = r.int(blocks.length);
    blocks[k] = { ...blocks[k]!, payload: mutateSome(blocks[k]!.payload, r) };
    return { bytes: fileOf(blocks, r.chance(0.8)), how: `payload of block ${k} (type ${blocks[k]!.type})` };
  }
  if (way === 2) {
    const k = blocks.findIndex((b) => b.type === HEADER);
    blocks[k] = { ...blocks[k]!, payload: mutateHeader(blocks[k]!.payload, r) };
    return { bytes: fileOf(blocks), how: 'header JSON' };
  }
  if (way === 3) {
    const targets = blocks.map((b, i) => ({ b, i })).filter(({ b }) => b.type === ROWS || b.type === DEDUP || b.type === RECORDS);
    const { b, i } = r.pick(targets);
    const payload = b.type === ROWS ? mutateRows(b.payload, r) : b.type === DEDUP ? mutateDedup(b.payload, r) : recordsDamaged(b.payload, r);
    blocks[i] = { ...b, payload };
    return { bytes: fileOf(blocks), how: `fields of block ${i} (type ${b.type})` };
  }
  if (way === 4) {
    // Blocks dropped, repeated or swapped (the end block kept last, counting them).
    const body = blocks.slice(0, -1);
    const k = r.int(body.length);
    const op = r.int(3);
    if (op === 0) body.splice(k, 1);
    else if (op === 1) body.splice(k, 0, body[r.int(body.length)]!);
    else {
      const j = r.int(body.length);
      [body[k], body[j]] = [body[j]!, body[k]!];
    }
    return { bytes: fileOf([...body, blocks.at(-1)!]), how: `blocks ${['dropped', 'repeated', 'swapped'][op]}` };
  }
  // A block of an unknown or wrong type, or a length past the file, under a good CRC.
  const k = r.int(blocks.length);
  blocks[k] = { ...blocks[k]!, type: r.pick([0, HEADER, RECORDS, ROWS, END, DEDUP, 6, 0xffffffff]) };
  return { bytes: fileOf(blocks, r.chance(0.5)), how: `block ${k} retyped ${blocks[k]!.type}` };
}

/** The records block: a record's 16-byte head (segment, offset, size, length) or its bytes. */
function recordsDamaged(payload: Buffer, r: Random): Buffer {
  if (payload.length < 16) return mutate(payload, r);
  const out = Buffer.from(payload);
  // The first record's head, or somewhere in the block.
  if (r.chance(0.5)) out.writeUInt32LE(r.pick([0, 1, 5, 0x7fffffff, 0xffffffff, 1 << 30]) >>> 0, 4 * r.int(4));
  else return mutateSome(out, r);
  return out;
}

describe('checkpoint - seeded fuzz', () => {
  beforeAll(async () => {
    base = await tempDir('tandem-ckpt-fuzz-');
    dirs.push(base);
    const { journal } = await Journal.open({ dataDir: base, autoCompact: false, segmentBytes: 64 * 1024 });
    // A dedup window for the checkpoint: digest | at | lsn rows, oldest first.
    const rows = Buffer.alloc(3 * DEDUP_ROW_BYTES, 0xab);
    for (let i = 0; i < 3; i++) {
      rows.writeDoubleLE(1_700_000_000_000 + i, i * DEDUP_ROW_BYTES + 16);
      rows.writeDoubleLE(3 + i, i * DEDUP_ROW_BYTES + 24);
    }
    journal.windowSource = () => [{ queue: 'deduped', rows }];
    let lsn = 0;
    // (Not the sample of a message id of 2^53 - 1: the journal reserves ids past the highest.)
    for (const change of sampleChanges()) if (change.kind !== 'enqueue' || change.message.id < 1e9) journal.append({ lsn: ++lsn, change, durable: true });
    journal.append({ lsn: ++lsn, change: { kind: 'queue-declare', name: 'big', settings: queueSettings() }, durable: true });
    // More than one 1024-row chunk, so a queue has several rows blocks.
    for (let id = 100; id < 1300; id++) journal.append({ lsn: ++lsn, change: { kind: 'enqueue', queue: 'big', message: message(id, `b${id}`) }, durable: true });
    const work = new Workload(prng(SEED), lsn);
    for (let i = 0; i < 300; i++) {
      const e = work.step();
      if (e) journal.append(e);
    }
    await durable(journal, work.lsn);
    await journal.close(); // writes the checkpoint of everything
    original = readFileSync(path.join(base, 'journal', CHECKPOINT_FILE));
    const types = blocksOf(original).map((b) => b.type);
    expect(types[0]).toBe(HEADER);
    expect(types.filter((t) => t === ROWS).length).toBeGreaterThan(1);
    expect(types).toContain(DEDUP);
    expect(types.at(-1)).toBe(END);
  });

  it(`Journal.open on ${CASES} damaged checkpoints opens (using it or setting it aside) or refuses with a StoreError`, async () => {
    const r = prng(SEED);
    const counts = { fromCheckpoint: 0, setAside: 0, refused: 0 };
    const reasons = new Map<string, number>();
    for (let i = 0; i < CASES; i++) {
      const { bytes, how } = damaged(r);
      const dir = await tempDir('tandem-ckpt-case-');
      dirs.push(dir);
      cpSync(base, dir, { recursive: true });
      writeFileSync(path.join(dir, 'journal', CHECKPOINT_FILE), bytes);
      const where = `seed ${SEED} case ${i} (${how}): ${bytes.length} bytes`;
      const before = process.memoryUsage().rss;
      const warned: string[] = [];
      const logger = { ...quiet, warn: (o: { reason?: string }) => void warned.push(String(o?.reason ?? '')) };
      try {
        const { journal, recovered } = await withTimeout(Journal.open({ dataDir: dir, autoCompact: false, materialize: true, logger }), CASE_MS, where);
        expect(recovered.changes.length, where).toBeGreaterThan(0);
        await journal.close({ checkpoint: false });
        if (existsSync(path.join(dir, 'journal', CHECKPOINT_CORRUPT))) counts.setAside++;
        else counts.fromCheckpoint++;
        for (const w of warned) reasons.set(w.replace(/\d+/g, 'N').slice(0, 50), (reasons.get(w.replace(/\d+/g, 'N').slice(0, 50)) ?? 0) + 1);
      } catch (err) {
        expect(isStoreError(err), `${(err as Error)?.constructor?.name}: ${(err as Error)?.message} at ${where}\n${(err as Error)?.stack}`).toBe(true);
        counts.refused++;
      }
      const grown = process.memoryUsage().rss - before;
      expect(grown, `RSS grew by ${grown} bytes: ${where}`).toBeLessThan(GROWTH_BOUND);
      await removeDir(dir);
    }
    console.log(`checkpoint fuzz: ${JSON.stringify(counts)}; ${reasons.size} distinct reasons to set it aside`);
    // Enough of the damage gets past the CRCs for the check to mean something.
    expect(counts.setAside).toBeGreaterThan(CASES / 4);
    expect(reasons.size).toBeGreaterThan(10);
  }, 240_000);
});

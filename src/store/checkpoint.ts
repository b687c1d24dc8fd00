// The checkpoint file: what recovery would rebuild from the journal up to a
// position, so a restart loads it and replays only the records after it (see
// docs/journal.md for when it is written and how compaction respects it).
//
// Layout (little endian), journal/checkpoint:
//   "TNDMCKPT" | u32 version
//   blocks, each: u32 type | u32 payload length | u32 CRC-32C (of type, length, payload) | payload
//     1 header  JSON: position, the frame before it, LSNs, epoch, segments, queues
//     2 records the live records that are not messages: u32 seg | u32 offset |
//               u32 size | u32 length | record (record-codec), repeated
//     3 rows    u32 queue index | u32 count | ids f64[count] | each message column [count]
//               (one block per 1024-row chunk of a queue's table, as in memory)
//     5 dedup   u32 name length | queue name | a duplicate-detection window's rows
//               (DedupWindow.rows: its durable keys in the journal, oldest first)
//     4 end     u32 number of blocks before it
// A file without a valid end block, or with any bad block, is not a checkpoint.
//
// Columns are written as the typed arrays hold them, so a checkpoint is only
// written and read on little-endian hosts (every platform Node supports here).
//
// Written as checkpoint.tmp, fsynced, renamed over checkpoint, directory fsynced:
// a crash at any step leaves the previous checkpoint (or none) whole.

import { open, rename, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CHUNK, COLUMN_TYPE_BYTES, IdTable, type IdChunk } from '../util/id-table.js';
import { DEDUP_ROW_BYTES } from '../broker/dedup-window.js';
import { crc32c } from './crc32c.js';
import { syncDir, type JournalIo } from './io.js';
import { MESSAGE_COLUMNS, type IndexSnapshot, type Location } from './live-index.js';
import { decodeChange, encodeChange, RECORD_HEADER_BYTES, type RecordBody } from './record-codec.js';
import { FRAME_HEADER_BYTES, MAX_RECORD_BYTES } from './segment.js';

export const CHECKPOINT_FILE = 'checkpoint';
export const CHECKPOINT_TMP = 'checkpoint.tmp';
export const CHECKPOINT_CORRUPT = 'checkpoint.corrupt';
const MAGIC = Buffer.from('TNDMCKPT');
const VERSION = 1;
const HEADER = 1;
const RECORDS = 2;
const ROWS = 3;
const END = 4;
const DEDUP = 5;
const BLOCK_HEADER = 12;
const COLUMN_BYTES = MESSAGE_COLUMNS.map((t) => COLUMN_TYPE_BYTES[t]);
const ROW_BYTES = 8 + COLUMN_BYTES.reduce((a, b) => a + b, 0);
/** Write in pieces of about this size. */
const WRITE_BYTES = 4 * 1024 * 1024;

/** Where the checkpoint stands in the journal, and what it knows beyond the index. */
export interface CheckpointMeta {
  /** Every synced record before this position is reflected; none after. */
  position: { seg: number; offset: number };
  /** The frame that ends at `position` (checked at load: the checkpoint belongs to this journal). */
  lastFrame: { seg: number; offset: number; size: number; lsn: number } | undefined;
  /** Highest LSN of any record or reservation before `position`. */
  lastLsn: number;
  maxMessageId: number;
}

/** A queue's duplicate-detection window as a checkpoint keeps it. */
export interface CheckpointWindow {
  queue: string;
  rows: Buffer;
}

export interface LoadedCheckpoint {
  meta: CheckpointMeta;
  windows: CheckpointWindow[];
  state: Omit<IndexSnapshot, 'release'>;
  bytes: number;
}

export const checkpointSupported = os.endianness() === 'LE';

export class CheckpointError extends Error {}

/**
 * Write `snap` as the journal's checkpoint. `abandoned` is asked between writes:
 * true stops (the journal was destroyed), leaving only checkpoint.tmp behind.
 * Resolves with the bytes written; rejects on I/O errors (checkpoint.tmp removed).
 */
export async function writeCheckpoint(
  dir: string,
  io: JournalIo,
  snap: IndexSnapshot,
  meta: CheckpointMeta,
  abandoned: () => boolean,
  writeBytes = WRITE_BYTES,
  windows: readonly CheckpointWindow[] = [],
): Promise<number> {
  const tmp = path.join(dir, CHECKPOINT_TMP);
  // Encoded now: the snapshot's records must not change under us (chunks are frozen).
  const header = Buffer.from(
    JSON.stringify({
      version: VERSION,
      meta,
      epoch: snap.epoch,
      reservedUpTo: snap.reservedUpTo,
      newest: snap.newest,
      segments: snap.segments,
      queues: snap.queues.map((q) => ({ name: q.name, declaredAt: q.declaredAt, rows: q.chunks.reduce((n, ch) => n + ch.count, 0) })),
    }),
  );
  const records = encodeRecords(snap.records);
  const fd = await io.open(tmp, 'w');
  let bytes = 0;
  let blocks = 0;
  try {
    let pending: Buffer[] = [MAGIC, u32(VERSION)];
    let pendingBytes = MAGIC.length + 4;
    const writeAll = async (data: Buffer): Promise<void> => {
      let done = 0;
      while (done < data.length) done += await io.write(fd, data, done, data.length - done, bytes + done);
      bytes += data.length;
    };
    const flush = async (): Promise<void> => {
      if (abandoned()) throw new CheckpointError('the journal was closed while its checkpoint was written');
      // Small parts are gathered into one write; a large one (a dedup window's rows,
      // tens of MB) is written where it lies rather than copied once more.
      let run: Buffer[] = [];
      for (const part of pending) {
        if (part.length < writeBytes) {
          run.push(part);
          continue;
        }
        if (run.length > 0) await writeAll(Buffer.concat(run));
        run = [];
        await writeAll(part);
      }
      if (run.length > 0) await writeAll(Buffer.concat(run));
      pending = [];
      pendingBytes = 0;
    };
    /** One block; its payload may come in parts (written one after the other, one CRC over all). */
    const add = async (type: number, ...payload: Buffer[]): Promise<void> => {
      const length = payload.reduce((n, p) => n + p.length, 0);
      const head = Buffer.allocUnsafe(BLOCK_HEADER);
      head.writeUInt32LE(type, 0);
      head.writeUInt32LE(length, 4);
      let crc = crc32c(head, 0, 0, 8);
      for (const p of payload) crc = crc32c(p, crc);
      head.writeUInt32LE(crc, 8);
      pending.push(head, ...payload);
      pendingBytes += BLOCK_HEADER + length;
      blocks++;
      if (pendingBytes >= writeBytes) await flush();
    };
    await add(HEADER, header);
    await add(RECORDS, records);
    for (let qi = 0; qi < snap.queues.length; qi++) {
      for (const ch of snap.queues[qi]!.chunks) if (ch.count > 0) await add(ROWS, encodeChunk(qi, ch));
    }
    for (const w of windows) {
      const name = Buffer.from(w.queue, 'utf8');
      await add(DEDUP, u32(name.length), name, w.rows);
    }
    await add(END, u32(blocks));
    await flush();
    await io.fdatasync(fd);
  } catch (err) {
    await io.close(fd).catch(() => undefined);
    await rm(tmp, { force: true });
    throw err;
  }
  await io.close(fd);
  await rename(tmp, path.join(dir, CHECKPOINT_FILE));
  await syncDir(io, dir);
  return bytes;
}

/**
 * Read the checkpoint. undefined: there is none. Throws CheckpointError saying
 * why a file that is there cannot be used.
 */
export async function readCheckpoint(dir: string): Promise<LoadedCheckpoint | undefined> {
  const file = path.join(dir, CHECKPOINT_FILE);
  let fh;
  try {
    fh = await open(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new CheckpointError(`cannot open ${file}: ${(err as Error).message}`);
  }
  try {
    if (!checkpointSupported) throw new CheckpointError('checkpoints are only read on little-endian hosts');
    const size = (await fh.stat()).size;
    const reader = new BlockReader(fh, size);
    const magic = await reader.take(MAGIC.length + 4);
    if (!magic.subarray(0, MAGIC.length).equals(MAGIC)) throw new CheckpointError('not a checkpoint file (bad magic)');
    const version = magic.readUInt32LE(MAGIC.length);
    if (version !== VERSION) throw new CheckpointError(`checkpoint version ${version} is not known to this tandemd (${VERSION})`);
    let header: HeaderJson | undefined;
    let records: LoadedCheckpoint['state']['records'] | undefined;
    /** Chunks by queue index, for the queues that have rows blocks (an empty queue has none). */
    const tables = new Map<number, IdChunk<never>[]>();
    const chunkMaker = new IdTable<never>(MESSAGE_COLUMNS);
    const windows: CheckpointWindow[] = [];
    let blocks = 0;
    // Bounded: every block consumes at least its 12-byte header, or throws.
    for (;;) {
      const { type, payload } = await reader.block();
      if (type === END) {
        if (payload.length !== 4 || payload.readUInt32LE(0) !== blocks) throw new CheckpointError('the end block does not match the blocks before it');
        if (reader.position !== size) throw new CheckpointError('data after the end block');
        break;
      }
      blocks++;
      if (type === HEADER) {
        if (header) throw new CheckpointError('a second header block');
        header = parseHeader(payload);
      } else if (type === RECORDS) {
        if (records) throw new CheckpointError('a second records block');
        records = decodeRecords(payload);
      } else if (type === ROWS) {
        if (!header) throw new CheckpointError('rows before the header');
        const qi = payload.readUInt32LE(0);
        if (qi >= header.queues.length) throw new CheckpointError(`rows for queue ${qi}, which the header does not name`);
        let list = tables.get(qi);
        if (!list) tables.set(qi, (list = []));
        list.push(decodeChunk(payload, chunkMaker));
      } else if (type === DEDUP) {
        windows.push(decodeWindow(payload));
      } else {
        throw new CheckpointError(`unknown block type ${type}`);
      }
    }
    if (!header || !records) throw new CheckpointError('header or records block missing');
    const queues = header.queues.map((q, i) => {
      const chunks = tables.get(i) ?? [];
      const rows = chunks.reduce((n, ch) => n + ch.count, 0);
      if (rows !== q.rows) throw new CheckpointError(`queue '${q.name}' has ${rows} rows, the header says ${q.rows}`);
      return { name: q.name, declaredAt: q.declaredAt, chunks };
    });
    return {
      meta: header.meta,
      windows,
      state: { epoch: header.epoch, reservedUpTo: header.reservedUpTo, newest: header.newest, records, segments: header.segments, queues },
      bytes: size,
    };
  } catch (err) {
    if (err instanceof CheckpointError) throw err;
    throw new CheckpointError(`cannot read ${file}: ${(err as Error).message}`);
  } finally {
    await fh.close();
  }
}

interface HeaderJson {
  meta: CheckpointMeta;
  epoch: number;
  reservedUpTo: number;
  newest: IndexSnapshot['newest'];
  segments: IndexSnapshot['segments'];
  queues: Array<{ name: string; declaredAt: number; rows: number }>;
}

// ---- the header, checked ---------------------------------------------------

/**
 * The header block, checked field by field before anything is built from it,
 * and rebuilt from the fields checked (nothing else in the JSON gets through).
 * Its CRC only proves the bytes are as written, not that a tandemd wrote them:
 * a `queues` that was `{"length": 5e7}` once drove a loop that ran the process
 * out of memory, past any CheckpointError. Every list here is a real array, so
 * its length is bounded by the JSON's size. Throws CheckpointError naming the
 * first field that is wrong.
 */
function parseHeader(payload: Buffer): HeaderJson {
  let json: unknown;
  try {
    json = JSON.parse(payload.toString('utf8'));
  } catch {
    throw new CheckpointError('the header block is not JSON');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new CheckpointError('the header block is not a JSON object');
  const h = json as Record<string, unknown>;
  const meta = object(h.meta, 'meta');
  const position = object(meta.position, 'meta.position');
  return {
    meta: {
      position: { seg: count(position.seg, 'meta.position.seg'), offset: count(position.offset, 'meta.position.offset') },
      lastFrame: meta.lastFrame === undefined ? undefined : { ...frameLocation(meta.lastFrame, 'meta.lastFrame'), lsn: logNumber(object(meta.lastFrame, 'meta.lastFrame').lsn, 'meta.lastFrame.lsn') },
      lastLsn: logNumber(meta.lastLsn, 'meta.lastLsn'),
      maxMessageId: logNumber(meta.maxMessageId, 'meta.maxMessageId'),
    },
    epoch: count(h.epoch, 'epoch'),
    reservedUpTo: logNumber(h.reservedUpTo, 'reservedUpTo'),
    newest: h.newest === undefined ? undefined : { lsn: logNumber(object(h.newest, 'newest').lsn, 'newest.lsn'), home: frameLocation(object(h.newest, 'newest').home, 'newest.home') },
    segments: list(h.segments, 'segments').map((v, i) => {
      const seg = object(v, `segments[${i}]`);
      return {
        id: count(seg.id, `segments[${i}].id`),
        tombTargets: counts(seg.tombTargets, `segments[${i}].tombTargets`),
        copiedFrom: counts(seg.copiedFrom, `segments[${i}].copiedFrom`),
      };
    }),
    queues: list(h.queues, 'queues').map((v, i) => {
      const q = object(v, `queues[${i}]`);
      if (typeof q.name !== 'string') throw new CheckpointError(`header field queues[${i}].name is not a string`);
      return { name: q.name, declaredAt: count(q.declaredAt, `queues[${i}].declaredAt`), rows: count(q.rows, `queues[${i}].rows`) };
    }),
  };
}

function object(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new CheckpointError(`header field ${what} is not an object`);
  return v as Record<string, unknown>;
}

function list(v: unknown, what: string): unknown[] {
  if (!Array.isArray(v)) throw new CheckpointError(`header field ${what} is not a list`);
  return v;
}

/** A segment id, offset, LSN, message id or row count: a whole number JS holds exactly. */
function count(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new CheckpointError(`header field ${what} is not a whole number (${typeof v === 'number' ? v : typeof v})`);
  return v;
}

/**
 * Highest LSN or message id a checkpoint may name: the journal reserves a block above
 * the highest it knows before it hands one out, and that reservation must still be a
 * number a record holds (a header naming 2^53 - 1 made the first one throw at open).
 */
const MAX_LOG_NUMBER = Number.MAX_SAFE_INTEGER - 2 ** 40;

/** An LSN or message id of the header: a whole number with room for the reservations above it. */
function logNumber(v: unknown, what: string): number {
  const n = count(v, what);
  if (n > MAX_LOG_NUMBER) throw new CheckpointError(`header field ${what} is ${n}, past any log's numbers`);
  return n;
}

function counts(v: unknown, what: string): number[] {
  return list(v, what).map((x, i) => count(x, `${what}[${i}]`));
}

/** Where a frame lies; its size within what a frame can be (the journal reads that many bytes to check it). */
function frameLocation(v: unknown, what: string): Location {
  const o = object(v, what);
  const size = count(o.size, `${what}.size`);
  if (size < FRAME_HEADER_BYTES + RECORD_HEADER_BYTES || size > FRAME_HEADER_BYTES + MAX_RECORD_BYTES) throw new CheckpointError(`header field ${what}.size is ${size}, which no frame is`);
  return { seg: count(o.seg, `${what}.seg`), offset: count(o.offset, `${what}.offset`), size };
}

function u32(v: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(v, 0);
  return b;
}

function encodeRecords(records: IndexSnapshot['records']): Buffer {
  const parts: Buffer[] = [];
  for (const r of records) {
    const enc = encodeChange({ lsn: r.lsn, change: r.body, durable: true });
    const head = Buffer.allocUnsafe(16);
    head.writeUInt32LE(r.home.seg, 0);
    head.writeUInt32LE(r.home.offset, 4);
    head.writeUInt32LE(r.home.size, 8);
    head.writeUInt32LE(enc.length, 12);
    parts.push(head, enc);
  }
  return Buffer.concat(parts);
}

function decodeRecords(buf: Buffer): Array<{ lsn: number; home: Location; body: RecordBody }> {
  const out: Array<{ lsn: number; home: Location; body: RecordBody }> = [];
  let at = 0;
  while (at < buf.length) {
    if (at + 16 > buf.length) throw new CheckpointError('records block cut short');
    const home = { seg: buf.readUInt32LE(at), offset: buf.readUInt32LE(at + 4), size: buf.readUInt32LE(at + 8) };
    const len = buf.readUInt32LE(at + 12);
    const d = decodeChange(buf.subarray(at + 16, at + 16 + len));
    if (d.status !== 'ok' || d.size !== len) throw new CheckpointError(`a record in the records block does not decode (${d.status === 'invalid' ? d.reason : d.status})`);
    out.push({ lsn: d.entry.lsn, home, body: d.entry.change });
    at += 16 + len;
  }
  return out;
}

function encodeChunk(queueIndex: number, ch: IdChunk<never>): Buffer {
  const n = ch.count;
  const buf = Buffer.allocUnsafe(8 + n * ROW_BYTES);
  buf.writeUInt32LE(queueIndex, 0);
  buf.writeUInt32LE(n, 4);
  let at = 8;
  const put = (a: Float64Array | Uint32Array | Uint16Array | Uint8Array, bytesPer: number): void => {
    const src = new Uint8Array(a.buffer, a.byteOffset + ch.start * bytesPer, n * bytesPer);
    buf.set(src, at);
    at += n * bytesPer;
  };
  put(ch.ids, 8);
  ch.cols.forEach((c, k) => put(c, COLUMN_BYTES[k]!));
  return buf;
}

function decodeWindow(payload: Buffer): CheckpointWindow {
  const n = payload.length >= 4 ? payload.readUInt32LE(0) : Infinity;
  const rows = payload.length - 4 - n;
  if (!(rows >= 0) || rows % DEDUP_ROW_BYTES !== 0) throw new CheckpointError(`a dedup block of ${payload.length} bytes is not a queue name and whole rows`);
  // Copies: the reader's buffer is reused for the next blocks.
  return { queue: payload.toString('utf8', 4, 4 + n), rows: Buffer.from(payload.subarray(4 + n)) };
}

function decodeChunk(payload: Buffer, maker: IdTable<never>): IdChunk<never> {
  const n = payload.readUInt32LE(4);
  if (n === 0 || n > CHUNK || payload.length !== 8 + n * ROW_BYTES) throw new CheckpointError(`a rows block of ${payload.length} bytes cannot hold ${n} rows`);
  const ch = maker.newChunk();
  let at = 8;
  const get = (a: Float64Array | Uint32Array | Uint16Array | Uint8Array, bytesPer: number): void => {
    new Uint8Array(a.buffer, a.byteOffset, n * bytesPer).set(payload.subarray(at, at + n * bytesPer));
    at += n * bytesPer;
  };
  get(ch.ids, 8);
  ch.cols.forEach((c, k) => get(c, COLUMN_BYTES[k]!));
  ch.start = 0;
  ch.end = n;
  for (let i = 1; i < n; i++) if (!(ch.ids[i - 1]! < ch.ids[i]!)) throw new CheckpointError('rows out of id order');
  return ch;
}

/** Sequential reads of a file in blocks, through one buffer. */
class BlockReader {
  position = 0;
  private buf = Buffer.allocUnsafe(WRITE_BYTES);
  private have = 0;
  private from = 0;

  constructor(
    private readonly fh: import('node:fs/promises').FileHandle,
    private readonly size: number,
  ) {}

  async take(n: number): Promise<Buffer> {
    if (this.position + n > this.size) throw new CheckpointError(`the file ends at ${this.size}, inside a block (a write was cut short)`);
    if (this.have - this.from < n) {
      const left = this.buf.subarray(this.from, this.have);
      const next = Buffer.allocUnsafe(Math.max(WRITE_BYTES, n));
      left.copy(next, 0);
      this.buf = next;
      this.have = left.length;
      this.from = 0;
      // Bounded: each read returns at least one byte (the size was checked above) or the loop stops.
      while (this.have < n) {
        const { bytesRead } = await this.fh.read(this.buf, this.have, this.buf.length - this.have, this.position + this.have);
        if (bytesRead === 0) throw new CheckpointError('the file is shorter than it was');
        this.have += bytesRead;
      }
    }
    const out = this.buf.subarray(this.from, this.from + n);
    this.from += n;
    this.position += n;
    return out;
  }

  async block(): Promise<{ type: number; payload: Buffer }> {
    const at = this.position;
    const head = Buffer.from(await this.take(BLOCK_HEADER));
    const type = head.readUInt32LE(0);
    const len = head.readUInt32LE(4);
    if (len > this.size) throw new CheckpointError(`block at ${at} claims ${len} bytes`);
    const payload = await this.take(len);
    if (crc32c(payload, crc32c(head, 0, 0, 8)) !== head.readUInt32LE(8)) throw new CheckpointError(`CRC mismatch in the block at offset ${at}`);
    return { type, payload };
  }
}

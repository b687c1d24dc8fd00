// A window of recent changes, kept off the V8 heap: what an HA primary keeps so
// a backup that comes back gets only what it lacks, and what a DR source keeps
// so a bridge can resume after a break.
//
// Both keep many changes (HA up to 1,000,000, DR 200,000 by default). Held as
// objects (change, message, body) they made the heap a large, ever-renewed set
// that V8 had to collect: p99 latency at 10,000 msgs/s went from ~15 ms to
// ~150 ms (bench/RESULTS.md). So each change is encoded with the record codec
// into large shared chunks, its LSN, time and place go into typed arrays, and a
// change becomes objects again only when a stream reads it.
import type { LoggedChange } from '../broker/changes.js';
import { decodeChange, encodeChange } from '../store/record-codec.js';

export interface Stamped {
  entry: LoggedChange;
  /** Source clock (ms) when the change was made (DR; 0 where nobody asks). */
  at: number;
}

const CHUNK_BYTES = 4 * 1024 * 1024;
/**
 * Emptied chunks kept for reuse. Memory the process has not touched yet costs a
 * page fault per 4 KiB on first write: copying a 1 KiB change into a fresh chunk
 * took ~450 ns against ~30 ns into one written before, and that was 5-10% of each
 * cluster broker's CPU under load. A full window drops a chunk for each one it
 * starts, so one spare covers the steady state; two allow for a reset.
 */
const SPARE_CHUNKS = 2;

interface Chunk {
  buf: Buffer;
  used: number;
  /** Entries in it not yet dropped. */
  live: number;
}

/** Recent changes in LSN order, oldest dropped first (by count and by bytes). */
export class ChangeWindow {
  // Per entry, in a ring: LSN, time, chunk number, offset, length.
  private lsns = new Float64Array(1024);
  private times = new Float64Array(1024);
  private chunkNos = new Float64Array(1024);
  private offsets = new Uint32Array(1024);
  private lengths = new Uint32Array(1024);
  /** Bytes pushed since the window was made, through each entry (for bytesAfter). */
  private cums = new Float64Array(1024);
  private pushed = 0;
  private head = 0;
  private count = 0;
  private readonly chunks: Chunk[] = [];
  private readonly spares: Buffer[] = [];
  /** Chunk number of chunks[0]. */
  private firstChunkNo = 0;
  private bytes = 0;
  firstSeq = 0;
  /** A reader at or beyond this LSN can be served from the window. */
  coversFromLsn: number;

  constructor(
    startLsn: number,
    private readonly maxCount: number,
    private readonly maxBytes: number,
  ) {
    this.coversFromLsn = startLsn;
  }

  get endSeq(): number {
    return this.firstSeq + this.count;
  }

  /** Changes the window holds. */
  get size(): number {
    return this.count;
  }

  /** Bytes the window holds (encoded changes). */
  get byteSize(): number {
    return this.bytes;
  }

  push(entry: LoggedChange, at: number): void {
    const record = encodeChange(entry);
    const chunkNo = this.place(record);
    const chunk = this.chunks[chunkNo - this.firstChunkNo]!;
    const offset = chunk.used;
    record.copy(chunk.buf, offset);
    chunk.used += record.length;
    chunk.live++;
    if (this.count === this.lsns.length) this.grow();
    const i = (this.head + this.count) % this.lsns.length;
    this.lsns[i] = entry.lsn;
    this.times[i] = at;
    this.chunkNos[i] = chunkNo;
    this.offsets[i] = offset;
    this.lengths[i] = record.length;
    this.pushed += record.length;
    this.cums[i] = this.pushed;
    this.count++;
    this.bytes += record.length;
    while (this.count > this.maxCount || (this.bytes > this.maxBytes && this.count > 1)) this.dropOldest();
  }

  /** The change at `seq`, decoded (a fresh object each call). */
  at(seq: number): Stamped | undefined {
    const i = this.slot(seq);
    if (i === undefined) return undefined;
    const decoded = decodeChange(this.recordIn(i));
    if (decoded.status !== 'ok') throw new Error(`change window: change at seq ${seq} does not decode (${decoded.status})`);
    const { lsn, change, durable } = decoded.entry;
    return { entry: { lsn, change: change as LoggedChange['change'], durable }, at: this.times[i]! };
  }

  /**
   * The change at `seq` as the record codec encoded it, for a stream that sends
   * every change without looking at it. A view, valid until the next push or reset
   * (emptied chunks are written again): copy it before keeping it.
   */
  recordAt(seq: number): Buffer | undefined {
    const i = this.slot(seq);
    return i === undefined ? undefined : this.recordIn(i);
  }

  /** When the change at `seq` was made (the `at` it was pushed with), without decoding it. */
  timeAt(seq: number): number | undefined {
    const i = this.slot(seq);
    return i === undefined ? undefined : this.times[i];
  }

  /** The LSN at `seq`, without decoding the change. */
  lsnAt(seq: number): number | undefined {
    const i = this.slot(seq);
    return i === undefined ? undefined : this.lsns[i];
  }

  /**
   * Bytes of the encoded changes after `lsn` (what a reader that has `lsn` still
   * lacks), or undefined when the window no longer reaches back to it.
   */
  bytesAfter(lsn: number): number | undefined {
    if (lsn < this.coversFromLsn) return undefined;
    const i = this.slot(this.seqAfter(lsn));
    return i === undefined ? 0 : this.pushed - (this.cums[i]! - this.lengths[i]!);
  }

  seqAfter(lsn: number): number {
    // First entry with an LSN above `lsn` (LSNs only grow along the window).
    let lo = 0;
    let hi = this.count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.lsns[(this.head + mid) % this.lsns.length]! <= lsn) lo = mid + 1;
      else hi = mid;
    }
    return this.firstSeq + lo;
  }

  /** Start over (a backup replaced its state with a snapshot); sequence numbers go on. */
  reset(lsn: number): void {
    this.firstSeq = this.endSeq;
    this.head = 0;
    this.count = 0;
    this.bytes = 0;
    this.firstChunkNo += this.chunks.length;
    for (const c of this.chunks) this.recycle(c.buf);
    this.chunks.length = 0;
    this.coversFromLsn = lsn;
  }

  private recordIn(i: number): Buffer {
    const chunk = this.chunks[this.chunkNos[i]! - this.firstChunkNo]!;
    const offset = this.offsets[i]!;
    return chunk.buf.subarray(offset, offset + this.lengths[i]!);
  }

  private slot(seq: number): number | undefined {
    const k = seq - this.firstSeq;
    if (k < 0 || k >= this.count) return undefined;
    return (this.head + k) % this.lsns.length;
  }

  /** The chunk number a record of this size goes into (a new chunk when the last is full). */
  private place(record: Buffer): number {
    const last = this.chunks.at(-1);
    if (last && last.used + record.length <= last.buf.length) return this.firstChunkNo + this.chunks.length - 1;
    const buf = record.length <= CHUNK_BYTES ? (this.spares.pop() ?? Buffer.allocUnsafe(CHUNK_BYTES)) : Buffer.allocUnsafe(record.length);
    this.chunks.push({ buf, used: 0, live: 0 });
    return this.firstChunkNo + this.chunks.length - 1;
  }

  private recycle(buf: Buffer): void {
    if (buf.length === CHUNK_BYTES && this.spares.length < SPARE_CHUNKS) this.spares.push(buf);
  }

  private dropOldest(): void {
    const i = this.head;
    const chunk = this.chunks[this.chunkNos[i]! - this.firstChunkNo]!;
    chunk.live--;
    this.bytes -= this.lengths[i]!;
    this.coversFromLsn = this.lsns[i]!;
    this.head = (this.head + 1) % this.lsns.length;
    this.count--;
    this.firstSeq++;
    // Whole chunks go once nothing in them is live (never the one being filled).
    while (this.chunks.length > 1 && this.chunks[0]!.live === 0) {
      this.recycle((this.chunks.shift() as Chunk).buf);
      this.firstChunkNo++;
    }
  }

  private grow(): void {
    const n = this.lsns.length * 2;
    const order = (src: Float64Array | Uint32Array, dst: Float64Array | Uint32Array): void => {
      for (let k = 0; k < this.count; k++) dst[k] = src[(this.head + k) % src.length]!;
    };
    const lsns = new Float64Array(n);
    const times = new Float64Array(n);
    const chunkNos = new Float64Array(n);
    const offsets = new Uint32Array(n);
    const lengths = new Uint32Array(n);
    const cums = new Float64Array(n);
    order(this.cums, cums);
    order(this.lsns, lsns);
    order(this.times, times);
    order(this.chunkNos, chunkNos);
    order(this.offsets, offsets);
    order(this.lengths, lengths);
    this.lsns = lsns;
    this.times = times;
    this.chunkNos = chunkNos;
    this.offsets = offsets;
    this.lengths = lengths;
    this.cums = cums;
    this.head = 0;
  }
}

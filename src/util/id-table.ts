// A table of rows kept in ascending id order, stored in chunks of typed arrays:
// one Float64Array of ids plus one typed array per column, and, only in chunks
// that need them, a sparse array of objects. Millions of rows cost a few dozen
// bytes each instead of an object (and its hidden class, pointers and map
// entry) per row: queues and the journal's index hold one row per message.
//
// Rows are addressed by position, a number `chunk * CHUNK + slot` that stays
// valid only until the next insert or remove (those return the position that
// follows, or the new row's). Lookups by id are binary searches. Appending in id
// order, removing at either end and removing near the front are cheap; an
// insert or remove in the middle shifts at most half a chunk (memmove).
//
// freeze() hands out the current chunks as a consistent, immutable snapshot
// (a checkpoint writes them out while the table keeps changing): a mutation of
// a frozen chunk copies it first (copy-on-write), so the snapshot never changes.

export type ColumnType = 'f64' | 'u32' | 'u16' | 'u8';
type Column = Float64Array | Uint32Array | Uint16Array | Uint8Array;

/** Bytes per value of each column type (the checkpoint's row format uses them too). */
export const COLUMN_TYPE_BYTES: Readonly<Record<ColumnType, number>> = { f64: 8, u32: 4, u16: 2, u8: 1 };
const BYTES = COLUMN_TYPE_BYTES;
const CTOR = { f64: Float64Array, u32: Uint32Array, u16: Uint16Array, u8: Uint8Array } as const;

/** Rows per chunk. A power of two; 1024 keeps a shift under a few microseconds. */
export const CHUNK = 1024;

export class IdChunk<T> {
  readonly buffer: ArrayBuffer;
  readonly ids: Float64Array;
  readonly cols: Column[];
  /** Objects by slot, allocated when the first one is set. */
  objs: Array<T | undefined> | undefined;
  objCount = 0;
  /** Rows are in slots [start, end). */
  start = 0;
  end = 0;
  /** Snapshots (freeze()) holding this chunk: copy before changing while above 0. */
  frozen = 0;

  constructor(layout: Layout, from?: IdChunk<T>) {
    this.buffer = from ? from.buffer.slice(0) : new ArrayBuffer(layout.bytes);
    this.ids = new Float64Array(this.buffer, 0, CHUNK);
    this.cols = layout.offsets.map((off, k) => new CTOR[layout.types[k]!](this.buffer, off, CHUNK));
    if (from) {
      this.objs = from.objs?.slice();
      this.objCount = from.objCount;
      this.start = from.start;
      this.end = from.end;
    }
  }

  get count(): number {
    return this.end - this.start;
  }

  /** Move rows [from, to) by `by` slots (memmove on every array). */
  shift(from: number, to: number, by: number): void {
    if (from >= to) return;
    this.ids.copyWithin(from + by, from, to);
    for (const c of this.cols) c.copyWithin(from + by, from, to);
    if (this.objs) moveObjects(this.objs, from, to, by);
  }
}

/**
 * Array.prototype.copyWithin on an array of objects takes V8's generic path: ~12 µs
 * for 512 rows on this machine, against ~0.6 µs for this loop (typed arrays' copyWithin
 * is a memmove, ~0.03 µs). Four consumers acking one queue out of order remove rows
 * mid-chunk, and the profile had those shifts at 10% of the broker's time.
 */
function moveObjects<T>(objs: Array<T | undefined>, from: number, to: number, by: number): void {
  if (by > 0) for (let k = to - 1; k >= from; k--) objs[k + by] = objs[k];
  else for (let k = from; k < to; k++) objs[k + by] = objs[k];
}

interface Layout {
  types: ColumnType[];
  offsets: number[];
  bytes: number;
  /** Emptied chunks of this layout, kept for the next table that needs one (see SPARE_CHUNKS). */
  spares: IdChunk<never>[];
}

/**
 * Emptied chunks kept per layout, across all tables of it. A queue whose consumer
 * keeps up goes from empty to one message and back with every message: its last
 * chunk empties and a new one is made for the next message, each a zeroed
 * ArrayBuffer of up to ~30 KB and a view per column. That cost ~5 µs a message
 * here (a publish and its removal: ~6 µs against ~1 µs with a message left
 * standing in the queue), on each table the message passes through (a queue's
 * level, its acquired rows, the journal's index). A few spares per layout serve
 * every busy queue's churn, and bound what idle tables cannot give back: a
 * spare per table would keep ~30 KB for each of thousands of empty queues.
 */
const SPARE_CHUNKS = 8;
const layouts = new Map<string, Layout>();

/** Spare chunks kept now for tables of these columns (tests and status). */
export function spareChunks(columns: readonly ColumnType[]): number {
  return layoutOf(columns).spares.length;
}

/** The layout of these columns, one per column list, so that tables of it share their spare chunks. */
function layoutOf(types: readonly ColumnType[]): Layout {
  const key = types.join(',');
  let layout = layouts.get(key);
  if (!layout) layouts.set(key, (layout = newLayout(types)));
  return layout;
}

function newLayout(types: readonly ColumnType[]): Layout {
  // Widest first, so every view is aligned.
  const order = types.map((t, k) => k).sort((a, b) => BYTES[types[b]!] - BYTES[types[a]!]);
  const offsets = new Array<number>(types.length);
  let at = 8 * CHUNK; // the ids
  for (const k of order) {
    offsets[k] = at;
    at += BYTES[types[k]!] * CHUNK;
  }
  return { types: [...types], offsets, bytes: at, spares: [] };
}

export class IdTable<T = never> {
  private readonly layout: Layout;
  private chunks: IdChunk<T>[] = [];
  private rows = 0;
  /** Bumped by every insert and remove: an iterator can tell its position is still good. */
  version = 0;

  constructor(columns: readonly ColumnType[]) {
    this.layout = layoutOf(columns);
  }

  get length(): number {
    return this.rows;
  }

  /** Bytes of typed-array storage (for tests and status). */
  get storageBytes(): number {
    return this.chunks.length * this.layout.bytes;
  }

  first(): number {
    const c = this.chunks[0];
    return c ? c.start : -1;
  }

  last(): number {
    const n = this.chunks.length;
    return n === 0 ? -1 : (n - 1) * CHUNK + this.chunks[n - 1]!.end - 1;
  }

  next(pos: number): number {
    const c = Math.floor(pos / CHUNK);
    const i = pos - c * CHUNK + 1;
    const ch = this.chunks[c]!;
    if (i < ch.end) return pos + 1;
    const nx = this.chunks[c + 1];
    return nx ? (c + 1) * CHUNK + nx.start : -1;
  }

  id(pos: number): number {
    const c = Math.floor(pos / CHUNK);
    return this.chunks[c]!.ids[pos - c * CHUNK]!;
  }

  get(pos: number, col: number): number {
    const c = Math.floor(pos / CHUNK);
    return this.chunks[c]!.cols[col]![pos - c * CHUNK]!;
  }

  set(pos: number, col: number, value: number): void {
    const c = Math.floor(pos / CHUNK);
    this.writable(c).cols[col]![pos - c * CHUNK] = value;
  }

  obj(pos: number): T | undefined {
    const c = Math.floor(pos / CHUNK);
    return this.chunks[c]!.objs?.[pos - c * CHUNK];
  }

  setObj(pos: number, value: T | undefined): void {
    const c = Math.floor(pos / CHUNK);
    const ch = this.writable(c);
    const i = pos - c * CHUNK;
    const had = ch.objs?.[i] !== undefined;
    if (value === undefined) {
      if (!had) return;
      ch.objs![i] = undefined;
      if (--ch.objCount === 0) ch.objs = undefined;
      return;
    }
    ch.objs ??= new Array<T | undefined>(CHUNK);
    ch.objs[i] = value;
    if (!had) ch.objCount++;
  }

  /** Position of the row with this id, or -1. */
  find(id: number): number {
    const pos = this.lowerBound(id);
    return pos >= 0 && this.id(pos) === id ? pos : -1;
  }

  /** Position of the first row whose id is >= id, or -1 if there is none. */
  lowerBound(id: number): number {
    const chunks = this.chunks;
    const n = chunks.length;
    if (n === 0) return -1;
    // The last chunk whose first id is <= id (or the first chunk).
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      const ch = chunks[mid]!;
      if (ch.ids[ch.start]! <= id) lo = mid;
      else hi = mid - 1;
    }
    const ch = chunks[lo]!;
    let a = ch.start;
    let b = ch.end;
    while (a < b) {
      const mid = (a + b) >>> 1;
      if (ch.ids[mid]! < id) a = mid + 1;
      else b = mid;
    }
    if (a < ch.end) return lo * CHUNK + a;
    const nx = chunks[lo + 1];
    return nx ? (lo + 1) * CHUNK + nx.start : -1;
  }

  /**
   * Insert a row for `id` (not present) and return its position. Its columns and
   * object are zero / undefined: the caller fills them in.
   */
  insert(id: number): number {
    this.version++;
    this.rows++;
    const chunks = this.chunks;
    const n = chunks.length;
    const tail = chunks[n - 1];
    if (!tail || id > tail.ids[tail.end - 1]!) return this.append(id);
    // The chunk to insert into: the last whose first id is below id (or the first).
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      const ch = chunks[mid]!;
      if (ch.ids[ch.start]! < id) lo = mid;
      else hi = mid - 1;
    }
    let c = lo;
    let ch = this.writable(c);
    if (ch.count === CHUNK) {
      this.split(c);
      const right = chunks[c + 1]!;
      if (id > right.ids[right.start]!) c++;
      ch = this.writable(c);
    }
    let at = ch.start;
    let b = ch.end;
    while (at < b) {
      const mid = (at + b) >>> 1;
      if (ch.ids[mid]! < id) at = mid + 1;
      else b = mid;
    }
    // Shift the shorter side that has room.
    if (ch.end < CHUNK && (ch.start === 0 || ch.end - at <= at - ch.start)) {
      ch.shift(at, ch.end, 1);
      ch.end++;
    } else {
      ch.shift(ch.start, at, -1);
      ch.start--;
      at--;
    }
    this.clearSlot(ch, at, id);
    return c * CHUNK + at;
  }

  /** Remove the row at `pos`; returns the position of the row after it, or -1. */
  removeAt(pos: number): number {
    this.version++;
    this.rows--;
    const c = Math.floor(pos / CHUNK);
    const i = pos - c * CHUNK;
    const ch = this.writable(c);
    if (ch.objs?.[i] !== undefined) {
      ch.objs[i] = undefined;
      // A chunk about to empty keeps its (now empty) objects array for its next use as a spare.
      if (--ch.objCount === 0 && ch.count > 1) ch.objs = undefined;
    }
    let nextSlot: number;
    if (i - ch.start < ch.end - 1 - i) {
      ch.shift(ch.start, i, 1);
      if (ch.objs) ch.objs[ch.start] = undefined;
      ch.start++;
      nextSlot = i + 1;
    } else {
      ch.shift(i + 1, ch.end, -1);
      ch.end--;
      if (ch.objs) ch.objs[ch.end] = undefined;
      nextSlot = i;
    }
    if (ch.count === 0) {
      this.chunks.splice(c, 1);
      this.giveBack(ch);
      const nx = this.chunks[c];
      return nx ? c * CHUNK + nx.start : -1;
    }
    // Merge a sparse chunk with its successor so random removals cannot leave
    // thousands of nearly empty chunks behind.
    const nx = this.chunks[c + 1];
    if (ch.count < CHUNK / 4) {
      const pv = this.chunks[c - 1];
      const withNext = nx !== undefined && ch.count + nx.count <= CHUNK / 2;
      const withPrev = pv !== undefined && ch.count + pv.count <= CHUNK / 2;
      if (withNext || withPrev) {
        const nextId = nextSlot < ch.end ? ch.ids[nextSlot]! : nx?.ids[nx.start];
        this.mergeNext(withPrev ? c - 1 : c);
        return nextId === undefined ? -1 : this.lowerBound(nextId);
      }
    }
    if (nextSlot < ch.end) return c * CHUNK + nextSlot;
    return nx ? (c + 1) * CHUNK + nx.start : -1;
  }

  /**
   * Append rows whose ids are all above the table's last, ascending: `ids` and,
   * per column, its values (typed arrays of the same length, copied in bulk).
   * Objects stay unset.
   */
  appendRows(ids: Float64Array, cols: ReadonlyArray<ArrayLike<number> & { subarray(a: number, b: number): ArrayLike<number> }>): void {
    const n = ids.length;
    if (n === 0) return;
    const last = this.rows > 0 ? this.id(this.last()) : -Infinity;
    if (!(ids[0]! > last)) throw new RangeError(`appendRows: id ${ids[0]} is not above the last id ${last}`);
    this.version++;
    let done = 0;
    // Bounded: each pass copies at least one row into a chunk with room.
    while (done < n) {
      let ch = this.chunks[this.chunks.length - 1];
      if (!ch || ch.end === CHUNK) {
        ch = new IdChunk<T>(this.layout);
        this.chunks.push(ch);
      } else {
        ch = this.writable(this.chunks.length - 1);
      }
      const k = Math.min(CHUNK - ch.end, n - done);
      ch.ids.set(ids.subarray(done, done + k), ch.end);
      for (let c = 0; c < ch.cols.length; c++) (ch.cols[c] as Column).set(cols[c]!.subarray(done, done + k) as never, ch.end);
      ch.end += k;
      done += k;
    }
    this.rows += n;
  }

  clear(): void {
    this.version++;
    this.chunks = [];
    this.rows = 0;
  }

  /** Positions of every row, in id order. Do not change the table while iterating. */
  *positions(): IterableIterator<number> {
    for (let c = 0; c < this.chunks.length; c++) {
      const ch = this.chunks[c]!;
      for (let i = ch.start; i < ch.end; i++) yield c * CHUNK + i;
    }
  }

  /** The chunks, to read rows in bulk right now (they change with the table: do not keep them). */
  chunkList(): readonly IdChunk<T>[] {
    return this.chunks;
  }

  /**
   * The chunks as they are now, never to change (see the header). Pass them to
   * thaw() when done, so the table stops copying them.
   */
  freeze(): IdChunk<T>[] {
    for (const ch of this.chunks) ch.frozen++;
    return this.chunks.slice();
  }

  thaw(snapshot: readonly IdChunk<T>[]): void {
    for (const ch of snapshot) ch.frozen--;
  }

  /** Build a table from chunks (a checkpoint being loaded); they are adopted, not copied. */
  adopt(chunks: IdChunk<T>[]): void {
    this.version++;
    this.chunks = chunks;
    this.rows = chunks.reduce((n, ch) => n + ch.count, 0);
  }

  /** A fresh, empty chunk of this table's layout (for loading). */
  newChunk(): IdChunk<T> {
    return new IdChunk<T>(this.layout);
  }

  // ---- internals ------------------------------------------------------------

  private append(id: number): number {
    const chunks = this.chunks;
    let c = chunks.length - 1;
    let ch = chunks[c];
    if (!ch || ch.end === CHUNK) {
      if (ch && ch.start > CHUNK / 2) {
        // Mostly consumed from the front: slide down rather than start a new chunk.
        ch = this.writable(c);
        ch.shift(ch.start, ch.end, -ch.start);
        if (ch.objs) ch.objs.fill(undefined, ch.end - ch.start, ch.end);
        ch.end -= ch.start;
        ch.start = 0;
      } else {
        ch = this.spareOrNewChunk();
        chunks.push(ch);
        c++;
      }
    } else {
      ch = this.writable(c);
    }
    const at = ch.end++;
    this.clearSlot(ch, at, id);
    return c * CHUNK + at;
  }

  /**
   * An empty chunk: a spare if its layout has one, else a new one. A spare's slots
   * hold what its last table left there; that is harmless, as every slot is written
   * (clearSlot) before it counts as a row.
   */
  private spareOrNewChunk(): IdChunk<T> {
    return (this.layout.spares.pop() as IdChunk<T> | undefined) ?? new IdChunk<T>(this.layout);
  }

  /** A chunk just taken out of the table, kept as a spare unless a snapshot holds it or there are enough. */
  private giveBack(ch: IdChunk<T>): void {
    if (ch.frozen !== 0 || this.layout.spares.length >= SPARE_CHUNKS) return;
    ch.start = 0;
    ch.end = 0;
    // Its objects array, if it kept one (removeAt), holds nothing now: kept too, as a table of entries needs one per chunk.
    ch.objCount = 0;
    this.layout.spares.push(ch as IdChunk<never>);
  }

  private clearSlot(ch: IdChunk<T>, at: number, id: number): void {
    ch.ids[at] = id;
    for (const col of ch.cols) col[at] = 0;
    if (ch.objs) ch.objs[at] = undefined;
  }

  private writable(c: number): IdChunk<T> {
    const ch = this.chunks[c]!;
    if (ch.frozen === 0) return ch;
    const copy = new IdChunk<T>(this.layout, ch);
    this.chunks[c] = copy;
    return copy;
  }

  /** Split a full chunk into two halves. */
  private split(c: number): void {
    const ch = this.writable(c);
    const half = ch.start + (ch.count >>> 1);
    const right = new IdChunk<T>(this.layout);
    const n = ch.end - half;
    right.ids.set(ch.ids.subarray(half, ch.end), 0);
    ch.cols.forEach((col, k) => (right.cols[k] as Column).set(col.subarray(half, ch.end) as never, 0));
    if (ch.objs) {
      for (let i = half; i < ch.end; i++) {
        const o = ch.objs[i];
        if (o === undefined) continue;
        (right.objs ??= new Array<T | undefined>(CHUNK))[i - half] = o;
        right.objCount++;
        ch.objs[i] = undefined;
        ch.objCount--;
      }
      if (ch.objCount === 0) ch.objs = undefined;
    }
    right.end = n;
    ch.end = half;
    this.chunks.splice(c + 1, 0, right);
  }

  private mergeNext(c: number): void {
    const ch = this.writable(c);
    const nx = this.chunks[c + 1]!;
    // Compact to the front, then copy the successor's rows after.
    ch.shift(ch.start, ch.end, -ch.start);
    if (ch.objs) ch.objs.fill(undefined, ch.count, ch.end);
    ch.end -= ch.start;
    ch.start = 0;
    const n = nx.count;
    ch.ids.set(nx.ids.subarray(nx.start, nx.end), ch.end);
    ch.cols.forEach((col, k) => col.set(nx.cols[k]!.subarray(nx.start, nx.end) as never, ch.end));
    if (nx.objs) {
      for (let i = nx.start; i < nx.end; i++) {
        const o = nx.objs[i];
        if (o === undefined) continue;
        (ch.objs ??= new Array<T | undefined>(CHUNK))[ch.end + i - nx.start] = o;
        ch.objCount++;
      }
    }
    ch.end += n;
    this.chunks.splice(c + 1, 1);
  }
}

// A queue's duplicate-detection window: the keys (16-byte digests, see
// dedup-key.ts) of the last `limit` messages it took, for at most `ttlMs`.
//
// Keys arrive in log order and leave oldest first (by count or by age), so the
// window is a ring of rows in typed arrays (digest, time, LSN, flags) plus an
// open-addressing hash index of ring slots, both outside the V8 heap like a
// queue's rows (src/util/id-table.ts): about 53-69 bytes per key (37 in the
// ring, two to four 8-byte index entries at a load factor of 1/4 to 1/2), and no
// object per key for the garbage collector to walk. The arrays grow by doubling
// up to `limit`, so a window that is mostly empty costs little.
//
// A key's place in the index is a keyed hash of its digest (HalfSipHash, with a
// secret drawn per window): short keys are their digest written out, so a
// publisher could otherwise choose message-ids that all land in one probe run and
// make every lookup a scan. An index entry holds that hash beside the slot: a
// probe compares it and reads the ring only on a match, and eviction finds an
// entry's home from it (the ring keeps each key's hash too, so an eviction
// computes none). In a window of a million keys every ring read is a cache miss
// (the publish path touches other memory between keys), and the profile of a
// full window had the index probe as its largest cost.
//
// A window fed only by the log (an HA backup applying its primary's enqueues)
// never answers a lookup: the broker that logged a key already decided it was
// new. So such a window keeps just the ring, each key an append in order, and
// builds its index the first time it must answer (a promotion does it at once,
// Broker.indexDedupWindows): a backup pays no hash and no random memory access
// per message, which on a cluster's shared cores the primary would pay for.
//
// The LSN of the change that brought a key in tells a duplicate's sender when
// the first copy is safe (its settlement waits for that LSN), and tells a
// checkpoint which keys the journal already holds (rowsUpTo).

import { randomBytes } from 'node:crypto';
import { halfSipHash16, type HalfSipKey } from '../util/half-siphash.js';
import { DEDUP_DIGEST_BYTES, wordAt, type DedupDigest } from './dedup-key.js';

export { DEDUP_DIGEST_BYTES };

/** Exported row: digest | at f64 | lsn f64 (checkpoints, HA snapshots). */
export const DEDUP_ROW_BYTES = DEDUP_DIGEST_BYTES + 16;
const WORDS = DEDUP_DIGEST_BYTES / 4;
const F_DURABLE = 1;
/** Taken back (a publish whose journal write failed): in the ring until evicted, not in the index. */
const F_REMOVED = 2;
const FIRST_CAPACITY = 1024;
/** Index positions per region when the index is built in one go (indexRows): 512 entries, 4 KiB. */
const REGION_BITS = 9;

function randomKey(): HalfSipKey {
  const k = randomBytes(8);
  return { k0: k.readUInt32LE(0), k1: k.readUInt32LE(4) };
}

/**
 * Why rows another broker sent (a DR source's window, with a copy of a queue) cannot be
 * taken in, or undefined: whole rows, at most `maxRows` of them, each with a time from 0
 * to `notAfter`. A time that is NaN or far ahead would hold back eviction by age of every
 * key after it (the ring drops its oldest first, and stops at one not yet old enough).
 */
export function badDedupRows(rows: Buffer, maxRows: number, notAfter: number): string | undefined {
  if (rows.length % DEDUP_ROW_BYTES !== 0) return `${rows.length} bytes are not whole rows of ${DEDUP_ROW_BYTES}`;
  if (rows.length / DEDUP_ROW_BYTES > maxRows) return `${rows.length / DEDUP_ROW_BYTES} rows in one record, more than the ${maxRows} a sender puts in one`;
  for (let at = 0; at < rows.length; at += DEDUP_ROW_BYTES) {
    const time = rows.readDoubleLE(at + DEDUP_DIGEST_BYTES);
    if (!(time >= 0 && time <= notAfter)) return `row ${at / DEDUP_ROW_BYTES + 1} has time ${time}, not one from 0 to ${notAfter}`;
  }
  return undefined;
}

/**
 * `rows` (changed in place) with every time after `notAfter` set to it. A DR source sends
 * its window's keys with a copy, and the bridge refuses a time more than an hour ahead of
 * the source's clock (badDedupRows): a source whose wall clock stepped back holds keys
 * stamped by the clock before the step, and refusing them stopped every copy of the queue
 * for the step's length less that hour. Sent as now, such a key is kept a full dedup-ttl
 * from now, no less than its true age asks.
 */
export function rowsNotAfter(rows: Buffer, notAfter: number): Buffer {
  for (let at = DEDUP_DIGEST_BYTES; at + 8 <= rows.length; at += DEDUP_ROW_BYTES) {
    if (rows.readDoubleLE(at) > notAfter) rows.writeDoubleLE(notAfter, at);
  }
  return rows;
}

/** A copy of `rows` with each row's LSN set to `lsn`: keys taken into another log, at its position. */
export function dedupRowsAt(rows: Buffer, lsn: number): Buffer {
  const out = Buffer.from(rows);
  for (let at = 0; at + DEDUP_ROW_BYTES <= out.length; at += DEDUP_ROW_BYTES) out.writeDoubleLE(lsn, at + DEDUP_DIGEST_BYTES + 8);
  return out;
}

export interface DedupHit {
  /** LSN of the change that brought the key in. */
  lsn: number;
  durable: boolean;
}

export class DedupWindow {
  private cap = 0;
  private keys = new Uint32Array(0);
  /** Per ring slot, its key's keyed hash (where its index entry lives). */
  private tags = new Uint32Array(0);
  private at = new Float64Array(0);
  private lsns = new Float64Array(0);
  private flags = new Uint8Array(0);
  /** Per hash position two words: ring slot + 1 (0: empty), and the key's keyed hash. */
  private index = new Uint32Array(0);
  /** The index's secret: the same for the window's life (its positions are never exported). */
  private readonly hashKey = randomKey();
  /**
   * The key lookup() last looked for, as words, and its keyed hash: a publish
   * looks a key up (find) and then takes it in (add), and the second lookup
   * finds the hash here instead of computing it again. It starts as the
   * all-zero key with its hash, so it is always a true pair.
   */
  private readonly last = new Uint32Array(4);
  private lastTag = halfSipHash16(this.hashKey, 0, 0, 0, 0);
  private mask = 0;
  /** Whether the index holds the ring's keys (see appended()). */
  private indexed = false;
  /** What the eviction warm-up in find() read (kept so the read is not optimised away). */
  private warmed = 0;
  /** Slot of the oldest row, and rows in the ring (removed ones included). */
  private head = 0;
  private count = 0;
  /** Rows ever put in the ring: the sequence number of the next one (rowsFrom). */
  private added = 0;
  /** Keys evicted by count and by age since the window was made (status). */
  evictedByCount = 0;
  evictedByAge = 0;

  constructor(
    readonly limit: number,
    /** 0: no age limit. */
    readonly ttlMs: number,
  ) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`a dedup window holds at least one key, not ${limit}`);
  }

  /** Keys in the window (taken-back ones not counted once their slot is reused). */
  get size(): number {
    return this.count;
  }

  /** Bytes of memory the window holds (all of it in typed arrays, off the V8 heap). */
  get memoryBytes(): number {
    return this.keys.byteLength + this.tags.byteLength + this.at.byteLength + this.lsns.byteLength + this.flags.byteLength + this.index.byteLength;
  }

  /** Whether lookups are ready: false for a window only the log has fed so far (a backup's). */
  get isIndexed(): boolean {
    return this.indexed;
  }

  /** The key's entry if it is in the window (and not older than the ttl at `now`). */
  find(digest: DedupDigest, now: number): DedupHit | undefined {
    this.evictExpired(now);
    this.ensureIndexed();
    const slot = this.lookup(digest.w0, digest.w1, digest.w2, digest.w3, this.count === this.limit);
    if (slot < 0) return undefined;
    return { lsn: this.lsns[slot]!, durable: (this.flags[slot]! & F_DURABLE) !== 0 };
  }

  /**
   * Take a key in, dropping the oldest beyond the limit. A key already there is
   * left as it was (false): the first copy is the one that counts.
   */
  add(digest: DedupDigest, at: number, lsn: number, durable: boolean, now = at): boolean {
    this.ensureIndexed();
    return this.take(digest.w0, digest.w1, digest.w2, digest.w3, at, lsn, durable, now);
  }

  /**
   * A key the log brought (a change another broker, or this one before a restart,
   * logged as new): taken in as add() does, but into the ring alone while the
   * window is not indexed. The index built later keeps the first of any key the
   * ring holds twice (a snapshot and the stream after it can overlap).
   */
  appended(digest: DedupDigest, at: number, lsn: number, durable: boolean, now = at): boolean {
    return this.take(digest.w0, digest.w1, digest.w2, digest.w3, at, lsn, durable, now);
  }

  /** Build the index now if it is not (a promotion: before the first publisher waits on it). */
  ensureIndexed(): void {
    if (this.indexed) return;
    this.indexed = true;
    this.indexRows(true);
  }

  /**
   * Take in the digest whose words are w0..w3 (add, appended, and rows with no
   * object made per key: a restart loads millions): checked against the index and
   * put in it when the window is indexed, into the ring alone (nothing hashed or
   * looked up) when it is not.
   */
  private take(w0: number, w1: number, w2: number, w3: number, at: number, lsn: number, durable: boolean, now: number): boolean {
    this.evictExpired(now);
    if (this.ttlMs > 0 && at + this.ttlMs <= now) return false; // already too old to matter
    if (!this.indexed) {
      this.put(w0, w1, w2, w3, at, lsn, durable);
      return true;
    }
    if (this.lookup(w0, w1, w2, w3) >= 0) return false;
    this.put(w0, w1, w2, w3, at, lsn, durable);
    this.insertIndex((this.head + this.count - 1) % this.cap, this.lastTag);
    return true;
  }

  /** A new newest row, the oldest evicted first if the window is full. */
  private put(w0: number, w1: number, w2: number, w3: number, at: number, lsn: number, durable: boolean): void {
    if (this.count === this.limit) this.evictOldest('count');
    if (this.count === this.cap) this.grow();
    const slot = (this.head + this.count) % this.cap;
    const k = slot * WORDS;
    this.keys[k] = w0;
    this.keys[k + 1] = w1;
    this.keys[k + 2] = w2;
    this.keys[k + 3] = w3;
    this.at[slot] = at;
    this.lsns[slot] = lsn;
    this.flags[slot] = durable ? F_DURABLE : 0;
    this.count++;
    this.added++;
  }

  /** Take a key back out (its publish failed): a resend must get in. */
  remove(digest: DedupDigest): boolean {
    this.ensureIndexed();
    const slot = this.lookup(digest.w0, digest.w1, digest.w2, digest.w3);
    if (slot < 0) return false;
    this.flags[slot]! |= F_REMOVED;
    this.deleteIndex(slot);
    return true;
  }

  /** The same keys (flags and LSNs too) in a window of other bounds: the oldest beyond its limit or age leave. */
  resized(limit: number, ttlMs: number, now: number): DedupWindow {
    const out = new DedupWindow(limit, ttlMs);
    const keys = this.keys;
    for (let i = 0; i < this.count; i++) {
      const slot = (this.head + i) % this.cap;
      const f = this.flags[slot]!;
      if (f & F_REMOVED) continue;
      const k = slot * WORDS;
      out.take(keys[k]!, keys[k + 1]!, keys[k + 2]!, keys[k + 3]!, this.at[slot]!, this.lsns[slot]!, (f & F_DURABLE) !== 0, now);
    }
    if (this.indexed) out.ensureIndexed();
    return out;
  }

  /** Drop keys older than the ttl. */
  evictExpired(now: number): void {
    if (this.ttlMs <= 0) return;
    while (this.count > 0 && this.at[this.head]! + this.ttlMs <= now) this.evictOldest('age');
  }

  /**
   * The window's keys as rows, oldest first: all of them, or (checkpoint) only
   * durable ones the journal holds, with LSN <= `upToLsn`.
   */
  rows(filter?: { upToLsn: number }): Buffer {
    // Written through one DataView, little-endian as the format is on any platform: a
    // checkpoint exports a million rows, and Buffer's per-field writers took ~90 ms
    // of the event loop for that, against 20-45 ms this way.
    const out = Buffer.allocUnsafe(this.count * DEDUP_ROW_BYTES);
    const view = new DataView(out.buffer, out.byteOffset, out.length);
    let n = 0;
    for (let i = 0; i < this.count; i++) {
      const slot = (this.head + i) % this.cap;
      const f = this.flags[slot]!;
      if (f & F_REMOVED) continue;
      if (filter && (!(f & F_DURABLE) || this.lsns[slot]! > filter.upToLsn)) continue;
      this.writeRow(view, n++, slot);
    }
    return out.subarray(0, n * DEDUP_ROW_BYTES);
  }

  /** The sequence number the next row taken in gets (rows are numbered from 0 as they come, evicted ones included). */
  get endSeq(): number {
    return this.added;
  }

  /**
   * Rows (as rows() writes them) of the ring rows numbered `from` up to `end`
   * (exclusive), at most `maxRows` looked at, and the number to go on from: a DR
   * copy reads a live window a piece at a time, as of the point (`end`) its copy
   * stands for. Rows evicted meanwhile are passed over, as are taken-back ones.
   */
  rowsFrom(from: number, end: number, maxRows: number): { rows: Buffer; next: number } {
    const first = Math.max(from, this.added - this.count);
    const last = Math.min(end, this.added, first + maxRows);
    const out = Buffer.allocUnsafe(Math.max(0, last - first) * DEDUP_ROW_BYTES);
    const view = new DataView(out.buffer, out.byteOffset, out.length);
    let n = 0;
    for (let seq = first; seq < last; seq++) {
      const slot = (this.head + seq - (this.added - this.count)) % this.cap;
      if (!(this.flags[slot]! & F_REMOVED)) this.writeRow(view, n++, slot);
    }
    return { rows: out.subarray(0, n * DEDUP_ROW_BYTES), next: Math.max(last, from) };
  }

  /** Ring slot `slot` as row `n` of `view` (digest words, at, lsn; little-endian). */
  private writeRow(view: DataView, n: number, slot: number): void {
    const at = n * DEDUP_ROW_BYTES;
    const k = slot * WORDS;
    view.setUint32(at, this.keys[k]!, true);
    view.setUint32(at + 4, this.keys[k + 1]!, true);
    view.setUint32(at + 8, this.keys[k + 2]!, true);
    view.setUint32(at + 12, this.keys[k + 3]!, true);
    view.setFloat64(at + DEDUP_DIGEST_BYTES, this.at[slot]!, true);
    view.setFloat64(at + DEDUP_DIGEST_BYTES + 8, this.lsns[slot]!, true);
  }

  /**
   * All the window's keys as rows (rows()), oldest first, cut into runs of keys that are
   * all durable or all not, of at most `maxRows` rows each: an HA snapshot, whose
   * backup must keep a key only as long as its message may outlive a restart.
   */
  runs(maxRows: number): Array<{ rows: Buffer; durable: boolean }> {
    const all = this.rows();
    const out: Array<{ rows: Buffer; durable: boolean }> = [];
    let start = 0;
    let n = 0;
    let durable = false;
    for (let i = 0; i < this.count; i++) {
      const f = this.flags[(this.head + i) % this.cap]!;
      if (f & F_REMOVED) continue;
      const d = (f & F_DURABLE) !== 0;
      if (n > start && (d !== durable || n - start === maxRows)) {
        out.push({ rows: all.subarray(start * DEDUP_ROW_BYTES, n * DEDUP_ROW_BYTES), durable });
        start = n;
      }
      durable = d;
      n++;
    }
    if (n > start) out.push({ rows: all.subarray(start * DEDUP_ROW_BYTES, n * DEDUP_ROW_BYTES), durable });
    return out;
  }

  /** Take in rows made by rows() (oldest first), as durable keys or not (as appended() does); rows with LSN below `fromLsn` are skipped. Returns keys added. */
  addRows(rows: Buffer, now: number, fromLsn = 0, durable = true): number {
    if (rows.length % DEDUP_ROW_BYTES !== 0) throw new RangeError(`dedup window rows of ${rows.length} bytes are not whole rows of ${DEDUP_ROW_BYTES}`);
    let added = 0;
    // Sized once for what comes, not doubled (and rehashed) on the way.
    const wanted = Math.min(this.limit, this.count + rows.length / DEDUP_ROW_BYTES);
    if (wanted > this.cap) this.grow(wanted);
    for (let at = 0; at < rows.length; at += DEDUP_ROW_BYTES) {
      const lsn = rows.readDoubleLE(at + DEDUP_DIGEST_BYTES + 8);
      if (lsn < fromLsn) continue;
      if (this.take(wordAt(rows, at), wordAt(rows, at + 4), wordAt(rows, at + 8), wordAt(rows, at + 12), rows.readDoubleLE(at + DEDUP_DIGEST_BYTES), lsn, durable, now)) added++;
    }
    return added;
  }

  /** The farthest any index entry sits from its home position (tests: keys a sender chose must not pile up). */
  longestProbe(): number {
    let longest = 0;
    this.ensureIndexed();
    for (let i = 0; i <= this.mask && this.cap > 0; i++) {
      if (this.index[2 * i] === 0) continue;
      longest = Math.max(longest, (i - (this.index[2 * i + 1]! & this.mask) + this.mask + 1) & this.mask);
    }
    return longest;
  }

  // ---- internals -------------------------------------------------------------

  private evictOldest(why: 'count' | 'age'): void {
    const slot = this.head;
    if (this.indexed && !(this.flags[slot]! & F_REMOVED)) this.deleteIndex(slot);
    this.head = (this.head + 1) % this.cap;
    this.count--;
    if (why === 'count') this.evictedByCount++;
    else this.evictedByAge++;
  }

  private next(i: number): number {
    return (i + 1) & this.mask;
  }

  /**
   * The ring slot holding the digest whose words are w0..w3, or -1; leaves its keyed
   * hash in lastTag. `warmVictim`: the window is full, so taking this key in will
   * evict the oldest one, whose index entry is a cache miss of its own (a random
   * place in many megabytes, as is this key's). It is read right beside this key's
   * first probe, so the two misses are in flight together rather than one after
   * the other.
   */
  private lookup(w0: number, w1: number, w2: number, w3: number, warmVictim = false): number {
    const last = this.last;
    if (last[0] !== w0 || last[1] !== w1 || last[2] !== w2 || last[3] !== w3) {
      last[0] = w0;
      last[1] = w1;
      last[2] = w2;
      last[3] = w3;
      this.lastTag = halfSipHash16(this.hashKey, w0, w1, w2, w3);
    }
    const tag = this.lastTag;
    if (this.cap === 0) return -1;
    const home = tag & this.mask;
    // This key's first entry, then the victim's: both loads issued before either is used.
    const first = this.index[2 * home]!;
    if (warmVictim) this.warmed = this.index[2 * (this.tags[this.head]! & this.mask)]!;
    if (first === 0) return -1;
    // Bounded: the index is at most half full, so an empty position comes.
    for (let i = home; ; i = this.next(i)) {
      const v = this.index[2 * i]!;
      if (v === 0) return -1;
      if (this.index[2 * i + 1] !== tag) continue;
      const k = (v - 1) * WORDS;
      if (this.keys[k] === w0 && this.keys[k + 1] === w1 && this.keys[k + 2] === w2 && this.keys[k + 3] === w3) return v - 1;
    }
  }

  /**
   * Put every live row of the ring into the (empty) index: a log-fed window's first
   * answer, and each growth. Row after row in ring order, each insert would land at
   * a random place in many megabytes, a cache miss apiece (about half a second for
   * a million keys on the 2-core bench machine). So the rows are first sorted by the
   * region of the index their home lies in (a counting sort over REGION_BITS, stable,
   * so that of a key the ring holds twice the older comes first) and inserted region
   * by region, each insert near the one before. `hash`: the rows' keyed hashes are
   * not known yet (a log-fed window), and a key the ring holds twice is possible: its
   * second copy is marked removed, as add() would have refused it.
   */
  private indexRows(hash: boolean): void {
    const regions = Math.max(1, (this.mask + 1) >>> REGION_BITS);
    const starts = new Uint32Array(regions + 1);
    const keys = this.keys;
    for (let i = 0; i < this.count; i++) {
      const slot = (this.head + i) % this.cap;
      if (this.flags[slot]! & F_REMOVED) continue;
      const k = slot * WORDS;
      if (hash) this.tags[slot] = halfSipHash16(this.hashKey, keys[k]!, keys[k + 1]!, keys[k + 2]!, keys[k + 3]!);
      starts[((this.tags[slot]! & this.mask) >>> REGION_BITS) + 1]!++;
    }
    for (let r = 0; r < regions; r++) starts[r + 1]! += starts[r]!;
    // (slot, hash) pairs: the inserts below then read nothing at the rows' own (random) places.
    const order = new Uint32Array(2 * starts[regions]!);
    for (let i = 0; i < this.count; i++) {
      const slot = (this.head + i) % this.cap;
      if (this.flags[slot]! & F_REMOVED) continue;
      const tag = this.tags[slot]!;
      const at = 2 * starts[(tag & this.mask) >>> REGION_BITS]!++;
      order[at] = slot;
      order[at + 1] = tag;
    }
    for (let j = 0; j < order.length; j += 2) {
      const slot = order[j]!;
      const tag = order[j + 1]!;
      if (hash && this.holdsKeyOf(slot, tag)) this.flags[slot]! |= F_REMOVED; // the ring's second copy
      else this.placeIndex(slot, tag);
    }
  }

  /**
   * Whether the index holds the key of ring slot `slot` (whose hash is `tag`)
   * already. Not lookup(): that takes the key's words, which here would be read from
   * the row's own place, random in the sorted order, for every row; this reads the
   * two rows' keys only on a hash match.
   */
  private holdsKeyOf(slot: number, tag: number): boolean {
    const keys = this.keys;
    const k = slot * WORDS;
    for (let i = tag & this.mask; ; i = this.next(i)) {
      const v = this.index[2 * i]!;
      if (v === 0) return false;
      if (this.index[2 * i + 1] !== tag) continue;
      const o = (v - 1) * WORDS;
      if (keys[o] === keys[k] && keys[o + 1] === keys[k + 1] && keys[o + 2] === keys[k + 2] && keys[o + 3] === keys[k + 3]) return true;
    }
  }

  /** Index ring slot `slot`, whose key's hash is `tag`, and keep that hash beside its row. */
  private insertIndex(slot: number, tag: number): void {
    this.placeIndex(slot, tag);
    this.tags[slot] = tag;
  }

  /** The index entry alone (the row's hash is in tags already). */
  private placeIndex(slot: number, tag: number): void {
    let i = tag & this.mask;
    while (this.index[2 * i] !== 0) i = this.next(i);
    this.index[2 * i] = slot + 1;
    this.index[2 * i + 1] = tag;
  }

  /** Remove a slot from the index, shifting later entries of its probe run back (no tombstones). */
  private deleteIndex(slot: number): void {
    let i = this.tags[slot]! & this.mask;
    while (this.index[2 * i] !== slot + 1) {
      if (this.index[2 * i] === 0) return;
      i = this.next(i);
    }
    let j = i;
    for (;;) {
      j = this.next(j);
      const v = this.index[2 * j]!;
      if (v === 0) break;
      const tag = this.index[2 * j + 1]!;
      const k = tag & this.mask;
      // The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
      const stays = i <= j ? i < k && k <= j : i < k || k <= j;
      if (!stays) {
        this.index[2 * i] = v;
        this.index[2 * i + 1] = tag;
        i = j;
      }
    }
    this.index[2 * i] = 0;
    this.index[2 * i + 1] = 0;
  }

  private grow(atLeast = 0): void {
    const cap = Math.min(this.limit, Math.max(FIRST_CAPACITY, this.cap * 2, atLeast));
    const keys = new Uint32Array(cap * WORDS);
    const tags = new Uint32Array(cap);
    const at = new Float64Array(cap);
    const lsns = new Float64Array(cap);
    const flags = new Uint8Array(cap);
    for (let i = 0; i < this.count; i++) {
      const from = (this.head + i) % this.cap;
      keys.set(this.keys.subarray(from * WORDS, from * WORDS + WORDS), i * WORDS);
      tags[i] = this.tags[from]!;
      at[i] = this.at[from]!;
      lsns[i] = this.lsns[from]!;
      flags[i] = this.flags[from]!;
    }
    this.keys = keys;
    this.tags = tags;
    this.at = at;
    this.lsns = lsns;
    this.flags = flags;
    this.cap = cap;
    this.head = 0;
    let size = 2;
    while (size < cap * 2) size *= 2;
    this.index = new Uint32Array(2 * size);
    this.mask = size - 1;
    if (this.indexed) this.indexRows(false);
  }
}


// Segment files and the frame around each record.
//
// A journal is a directory of segment files named by a zero-padded sequence
// number (journal/00000001.seg, ...). A segment is a plain run of frames:
//   u32 LE payload length | u32 LE CRC-32C (of the length bytes, then payload) | payload
// where the payload is one record as encoded by record-codec.ts (its first bytes
// are the record type and the 64-bit LSN). No segment header: an empty file is a
// valid empty segment, so creating one needs no write before it is usable.

import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { crc32c } from './crc32c.js';
import { couldStartRecord, decodeChange, RECORD_HEADER_BYTES, recordLengthFits, type CodecEntry, type DecodeOptions } from './record-codec.js';

export const FRAME_HEADER_BYTES = 8;
/** The CRC covers the length field, then the payload. */
const LENGTH_FIELD_BYTES = 4;
/** Upper bound on one record, to reject a garbage length before trusting it. */
export const MAX_RECORD_BYTES = 1 << 30;
const SEGMENT_RE = /^(\d{8,})\.seg$/;

export function segmentFileName(id: number): string {
  return `${String(id).padStart(8, '0')}.seg`;
}

export function segmentPath(dir: string, id: number): string {
  return path.join(dir, segmentFileName(id));
}

/** Segment ids present in `dir`, ascending. */
export async function listSegments(dir: string): Promise<number[]> {
  const names = await readdir(dir);
  const ids: number[] = [];
  for (const name of names) {
    const m = SEGMENT_RE.exec(name);
    if (m) ids.push(Number(m[1]));
  }
  return ids.sort((a, b) => a - b);
}

export function encodeFrame(payload: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  writeFrame(frame, 0, payload);
  return frame;
}

/** Frame `payload` into `buf` at `at` (room for FRAME_HEADER_BYTES + its length); returns the frame's size. */
export function writeFrame(buf: Buffer, at: number, payload: Buffer): number {
  const size = FRAME_HEADER_BYTES + payload.length;
  buf.writeUInt32LE(payload.length, at);
  payload.copy(buf, at + FRAME_HEADER_BYTES);
  buf.writeUInt32LE(crc32c(buf, crc32c(buf, 0, at, at + LENGTH_FIELD_BYTES), at + FRAME_HEADER_BYTES, at + size), at + LENGTH_FIELD_BYTES);
  return size;
}

export type FrameRead =
  | { status: 'ok'; entry: CodecEntry; size: number }
  | { status: 'bad'; reason: string };

/** Read the frame at `offset`; `bad` covers short, mis-checksummed and undecodable frames. */
export function readFrame(buf: Buffer, offset: number, options?: DecodeOptions): FrameRead {
  const left = buf.length - offset;
  if (left < FRAME_HEADER_BYTES) return { status: 'bad', reason: `short frame header (${left} bytes)` };
  const len = buf.readUInt32LE(offset);
  if (len < RECORD_HEADER_BYTES || len > MAX_RECORD_BYTES) return { status: 'bad', reason: `impossible record length ${len}` };
  if (len > left - FRAME_HEADER_BYTES) return { status: 'bad', reason: `record of ${len} bytes runs past end of file` };
  const start = offset + FRAME_HEADER_BYTES;
  const crc = crc32c(buf, crc32c(buf, 0, offset, offset + LENGTH_FIELD_BYTES), start, start + len);
  if (crc !== buf.readUInt32LE(offset + LENGTH_FIELD_BYTES)) return { status: 'bad', reason: 'CRC mismatch' };
  const payload = buf.subarray(start, start + len);
  const decoded = decodeChange(payload, 0, options);
  if (decoded.status === 'incomplete') return { status: 'bad', reason: 'record shorter than its fields' };
  if (decoded.status === 'invalid') return { status: 'bad', reason: decoded.reason };
  if (decoded.size !== len) return { status: 'bad', reason: `record has ${len - decoded.size} trailing bytes` };
  return { status: 'ok', entry: decoded.entry, size: FRAME_HEADER_BYTES + len };
}

export interface ScannedRecord {
  offset: number;
  /** Frame bytes (header included). */
  size: number;
  entry: CodecEntry;
}

export interface SegmentScan {
  records: ScannedRecord[];
  /** End of the last good frame: where a torn tail gets cut. */
  goodEnd: number;
  fileSize: number;
  /** The first bad frame, if any, and what the search for a valid frame after it found. */
  bad?: { offset: number; reason: string; after: Resync };
}

export interface ScanOptions extends DecodeOptions {
  /** Offset of the first frame to read (a checkpoint covers what is before it). Default 0. */
  start?: number;
  /** Called for each good frame instead of collecting them in `records` (which stays empty). */
  onRecord?: (r: ScannedRecord) => void;
}

/**
 * Read frames from the start until the end or the first bad one. A crash can
 * only tear the tail of a log written sequentially, so the caller needs to know
 * whether anything valid follows a bad frame: `bad.after` says.
 */
export function scanSegment(buf: Buffer, options?: ScanOptions): SegmentScan {
  const records: ScannedRecord[] = [];
  const onRecord = options?.onRecord ?? ((r: ScannedRecord) => void records.push(r));
  let offset = options?.start ?? 0;
  while (offset < buf.length) {
    const f = readFrame(buf, offset, options);
    if (f.status === 'bad') {
      return { records, goodEnd: offset, fileSize: buf.length, bad: { offset, reason: f.reason, after: nextValidFrame(buf, offset + 1) } };
    }
    onRecord({ offset, size: f.size, entry: f.entry });
    offset += f.size;
  }
  return { records, goodEnd: offset, fileSize: buf.length };
}

// ---- resynchronising after a bad frame ----------------------------------------

/** What a search for the next valid frame found. */
export type Resync =
  /** The first valid frame after the bad one starts at `offset`. */
  | { status: 'found'; offset: number }
  /** Nothing valid up to the end of the segment: what a write torn by a crash leaves. */
  | { status: 'none' }
  /**
   * The budget ran out at `offset`: no valid frame starts between the bad frame
   * and `offset`, and whether one starts after it is unknown. Never read as a
   * torn tail: recovery treats it as damage.
   */
  | { status: 'gave-up'; offset: number; checked: number };

/**
 * Bytes the searches of one pass over a segment may checksum: this floor, plus
 * so many times the segment's size.
 */
export const RESYNC_FLOOR_BYTES = 16 * 1024 * 1024;
export const RESYNC_BYTES_PER_SEGMENT_BYTE = 4;

/**
 * A cap on the checksumming done while searching for valid frames. Every offset
 * whose bytes pass the cheap header checks costs a CRC over the length it
 * claims, up to the rest of the segment. Real damage (zeroes, random bytes, a
 * torn write) leaves almost no such offsets, but bytes shaped like frame headers
 * every few bytes (a message body can be made so) would cost a CRC over the rest
 * of the file per offset: quadratic, hours and more for a 64 MiB segment. Under a cap of a
 * few times the segment's size the search is linear whatever the content, and a
 * search that reaches it says so (`gave-up`) instead of guessing.
 */
export class ResyncBudget {
  /** Bytes checksummed so far (tests read it: the work done, not the time taken). */
  spent = 0;

  constructor(readonly limit: number) {}

  static forSegment(bytes: number): ResyncBudget {
    return new ResyncBudget(RESYNC_FLOOR_BYTES + RESYNC_BYTES_PER_SEGMENT_BYTE * bytes);
  }

  /** Spend `n` bytes if the cap allows it. */
  take(n: number): boolean {
    if (this.spent + n > this.limit) return false;
    this.spent += n;
    return true;
  }

  /** Count `n` bytes already spent (a bad frame read in passing): later searches get less. */
  charge(n: number): void {
    this.spent += n;
  }
}

/**
 * The search for the first valid frame at or after `from` (where a reader
 * resynchronises). Offsets whose header could not start a valid frame (length,
 * record code, flags, LSN, a size the record kind allows: see couldStartRecord)
 * are passed over without a checksum; these checks only reject what readFrame
 * would reject too, so the answer is the same as trying every offset, unless the
 * budget runs out first. The LSN is not held to a window around the last good
 * one: compaction copies records forward with their old LSNs, and an HA backup's
 * journal jumps to its primary's LSNs (or back, after rewindTo), so a valid frame
 * after the damage may carry any LSN.
 */
export function nextValidFrame(buf: Buffer, from: number, budget = ResyncBudget.forSegment(buf.length)): Resync {
  for (let at = from; at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES <= buf.length; at++) {
    if (!couldStartRecord(buf, at + FRAME_HEADER_BYTES)) continue;
    const len = claimedLength(buf, at);
    if (len === undefined || !recordLengthFits(buf[at + FRAME_HEADER_BYTES]!, len)) continue;
    if (!budget.take(LENGTH_FIELD_BYTES + len)) return { status: 'gave-up', offset: at, checked: budget.spent };
    if (readFrame(buf, at).status === 'ok') return { status: 'found', offset: at };
  }
  return { status: 'none' };
}

/** A part of a segment that is not valid frames, as --repair removes it. */
export interface BadRange {
  offset: number;
  bytes: number;
  /** Why the frame at `offset` is bad. */
  reason: string;
  /**
   * The search for the next valid frame gave up here: from this offset to the
   * end of the range nothing was searched (valid frames may have been there).
   */
  unsearchedFrom?: number;
}

/**
 * For --repair: the parts of `buf` that are not valid frames, in order (none:
 * the segment is whole). Each bad frame's range ends where the next valid frame
 * starts, so every valid frame is kept, unless the budget runs out: the range
 * then says `unsearchedFrom`, and ends where the bad frame's own length says it
 * does if a valid frame starts there, else at the end of the segment.
 */
export function badRanges(buf: Buffer, budget = ResyncBudget.forSegment(buf.length)): BadRange[] {
  const ranges: BadRange[] = [];
  let at = 0;
  // Bounded: each pass moves `at` forward by a frame, past the bad one, or to the end.
  while (at < buf.length) {
    const f = readFrame(buf, at);
    if (f.status === 'ok') {
      at += f.size;
      continue;
    }
    // A bad frame cost its checksum too: with many of them, that alone would be quadratic.
    const len = claimedLength(buf, at);
    if (len !== undefined) budget.charge(LENGTH_FIELD_BYTES + len);
    const next = nextValidFrame(buf, at + 1, budget);
    if (next.status !== 'gave-up') {
      const end = next.status === 'found' ? next.offset : buf.length;
      ranges.push({ offset: at, bytes: end - at, reason: f.reason });
      at = end;
      continue;
    }
    // Out of budget: the alternative is to drop the rest of the segment. When only
    // the bad frame's payload is damaged (its length intact), the next frame starts
    // where that length says; a valid frame there keeps every frame from it on. A
    // valid frame before it would have been found first, so this skips nothing the
    // search had reached. Each such jump moves past the bytes it checksums: linear.
    const end = len === undefined ? buf.length : at + FRAME_HEADER_BYTES + len;
    const resumes = validFrameAt(buf, end, budget);
    ranges.push({ offset: at, bytes: (resumes ? end : buf.length) - at, reason: f.reason, unsearchedFrom: next.offset });
    if (!resumes) break;
    at = end;
  }
  return ranges;
}

/** Whether a valid frame starts at `at`, its checksum counted against the budget. */
function validFrameAt(buf: Buffer, at: number, budget: ResyncBudget): boolean {
  if (at >= buf.length) return false;
  const len = claimedLength(buf, at);
  if (len !== undefined) budget.charge(LENGTH_FIELD_BYTES + len);
  return readFrame(buf, at).status === 'ok';
}

/** The payload length in the frame header at `at`, if it is one readFrame would checksum. */
function claimedLength(buf: Buffer, at: number): number | undefined {
  const left = buf.length - at - FRAME_HEADER_BYTES;
  if (left < RECORD_HEADER_BYTES) return undefined;
  const len = buf.readUInt32LE(at);
  return len >= RECORD_HEADER_BYTES && len <= left && len <= MAX_RECORD_BYTES ? len : undefined;
}

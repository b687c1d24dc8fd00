// Segment files and the frame around each record.
//
// A journal is a directory of segment files named by a zero-padded sequence
// number (journal/00000001.seg, ...). A segment is a header, then a plain run of frames:
//   u32 LE payload length | u32 LE CRC-32C (of the length bytes, then payload) | payload
// where the payload is one record as encoded by record-codec.ts (its first bytes
// are the record type and the 64-bit LSN).
//
// The header holds the segment's salt: a random 32-bit value its frames' CRCs
// start from (the CRC's initial value). Why: a client chooses the bytes of its
// message bodies, and CRC-32C is public, so a body can hold a complete frame that
// checks. The search for the next valid frame after a bad one (a torn write, at
// start; every bad frame, in --repair) would then take it for a record: a torn
// write of such a message refused the start as damage, and --repair kept the
// forged record (a dequeue of another user's message, a queue delete). Without the
// salt, which never leaves the journal, a forged frame checks with odds of 2^-32.
//
// The header is written, synced, before the first frame, so only a crash while a
// segment is made leaves one short. It is two copies of
//   'TNDJ' | u32 LE format (1) | u32 LE salt | u32 LE CRC-32C of the 12 bytes before
// so one damaged copy costs nothing. A segment without one (its first four bytes
// a frame length, which is below 2^30 while 'TNDJ' read as a u32 is above) is one
// written before salts: its frames start at 0 and their CRCs from 0. So is an
// empty file.
import { randomBytes } from 'node:crypto';
import { readdir, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { crc32c, crc32cPrevious } from './crc32c.js';
import { couldStartRecord, decodeChange, RECORD_HEADER_BYTES, recordLengthFits, type CodecEntry, type DecodeOptions } from './record-codec.js';

export const FRAME_HEADER_BYTES = 8;
const MAGIC_BYTES = Buffer.from('TNDJ', 'latin1');
/** 'TNDJ' as a little-endian u32: above any frame length a segment without a header can start with. */
const SEGMENT_MAGIC = MAGIC_BYTES.readUInt32LE(0);
const SEGMENT_FORMAT = 1;
const HEADER_COPY_BYTES = 16;
export const SEGMENT_HEADER_BYTES = 2 * HEADER_COPY_BYTES;
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

// ---- the segment header --------------------------------------------------------

/** A new salt: any u32 but 0, which stands for "no salt" (a segment written before salts). */
export function newSalt(): number {
  for (;;) {
    const salt = randomBytes(4).readUInt32LE(0);
    if (salt !== 0) return salt;
  }
}

/** The header of a segment whose frames' CRCs start from `salt`. */
export function encodeSegmentHeader(salt: number): Buffer {
  const header = Buffer.alloc(SEGMENT_HEADER_BYTES);
  for (let at = 0; at < SEGMENT_HEADER_BYTES; at += HEADER_COPY_BYTES) {
    header.writeUInt32LE(SEGMENT_MAGIC, at);
    header.writeUInt32LE(SEGMENT_FORMAT, at + 4);
    header.writeUInt32LE(salt >>> 0, at + 8);
    header.writeUInt32LE(crc32c(header, 0, at, at + 12), at + 12);
  }
  return header;
}

/** Where a segment's frames start and the salt their CRCs start from. */
export interface SegmentLayout {
  salt: number;
  dataStart: number;
}

export type SegmentHeaderRead =
  | { status: 'ok'; layout: SegmentLayout }
  /** Shorter than a header that was begun: a crash while the segment was made (nothing was ever written after it). */
  | { status: 'torn'; reason: string }
  /**
   * Both copies fail their check (no frame in the segment can be checked: `--repair`
   * solves the salt from its frames), or a format this version does not know
   * (`unknownFormat`: nothing here may rewrite it).
   */
  | { status: 'damaged'; reason: string; unknownFormat?: true };

/** The layout of a segment whose first bytes are `head` (the first SEGMENT_HEADER_BYTES of the file, or all of a shorter one). */
export function readSegmentHeader(head: Buffer): SegmentHeaderRead {
  if (head.length === 0) return { status: 'ok', layout: { salt: 0, dataStart: 0 } };
  const magicAt = (at: number): boolean => head.length >= at + 4 && head.readUInt32LE(at) === SEGMENT_MAGIC;
  if (!magicAt(0) && !magicAt(HEADER_COPY_BYTES)) {
    // No header: a segment from before salts. Unless it is too short to hold a
    // frame's length and starts like the magic: a header cut short.
    if (head.length < 4 && head.equals(MAGIC_BYTES.subarray(0, head.length))) {
      return { status: 'torn', reason: `segment header cut short (${head.length} bytes)` };
    }
    return { status: 'ok', layout: { salt: 0, dataStart: 0 } };
  }
  // A header begun but not finished: written before any frame, so nothing else is lost.
  if (head.length < SEGMENT_HEADER_BYTES) return { status: 'torn', reason: `segment header cut short (${head.length} bytes)` };
  for (let at = 0; at < SEGMENT_HEADER_BYTES; at += HEADER_COPY_BYTES) {
    if (!magicAt(at) || head.readUInt32LE(at + 12) !== crc32c(head, 0, at, at + 12)) continue;
    const format = head.readUInt32LE(at + 4);
    if (format !== SEGMENT_FORMAT) return { status: 'damaged', reason: `segment format ${format}, which this version does not know`, unknownFormat: true };
    return { status: 'ok', layout: { salt: head.readUInt32LE(at + 8), dataStart: SEGMENT_HEADER_BYTES } };
  }
  return { status: 'damaged', reason: 'both copies of the segment header fail their check, so no record in it can be checked' };
}

/** The header of the open segment file `fh` (what its first bytes say, however few). */
export async function segmentHeaderOf(fh: FileHandle): Promise<SegmentHeaderRead> {
  const head = Buffer.alloc(SEGMENT_HEADER_BYTES);
  return readSegmentHeader(head.subarray(0, (await fh.read(head, 0, head.length, 0)).bytesRead));
}

// ---- frames ---------------------------------------------------------------------

export function encodeFrame(payload: Buffer, salt: number): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  writeFrame(frame, 0, payload, salt);
  return frame;
}

/** Frame `payload` into `buf` at `at` (room for FRAME_HEADER_BYTES + its length) for a segment salted `salt`; returns the frame's size. */
export function writeFrame(buf: Buffer, at: number, payload: Buffer, salt: number): number {
  const size = FRAME_HEADER_BYTES + payload.length;
  buf.writeUInt32LE(payload.length, at);
  payload.copy(buf, at + FRAME_HEADER_BYTES);
  buf.writeUInt32LE(frameCrc(buf, at, size, salt), at + LENGTH_FIELD_BYTES);
  return size;
}

/** The CRC of the frame of `size` bytes at `at`: its length field, then its payload, from the segment's salt. */
function frameCrc(buf: Buffer, at: number, size: number, salt: number): number {
  return crc32c(buf, crc32c(buf, salt, at, at + LENGTH_FIELD_BYTES), at + FRAME_HEADER_BYTES, at + size);
}

export type FrameRead =
  | { status: 'ok'; entry: CodecEntry; size: number }
  | { status: 'bad'; reason: string };

/** Read the frame at `offset` of a segment salted `salt`; `bad` covers short, mis-checksummed and undecodable frames. */
export function readFrame(buf: Buffer, offset: number, salt: number, options?: DecodeOptions): FrameRead {
  const left = buf.length - offset;
  if (left < FRAME_HEADER_BYTES) return { status: 'bad', reason: `short frame header (${left} bytes)` };
  const len = buf.readUInt32LE(offset);
  if (len < RECORD_HEADER_BYTES || len > MAX_RECORD_BYTES) return { status: 'bad', reason: `impossible record length ${len}` };
  if (len > left - FRAME_HEADER_BYTES) return { status: 'bad', reason: `record of ${len} bytes runs past end of file` };
  const start = offset + FRAME_HEADER_BYTES;
  if (frameCrc(buf, offset, FRAME_HEADER_BYTES + len, salt) !== buf.readUInt32LE(offset + LENGTH_FIELD_BYTES)) return { status: 'bad', reason: 'CRC mismatch' };
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
  /** Offset of the first frame to read (a checkpoint covers what is before it). Default: the first after the header. */
  start?: number;
  /** Called for each good frame instead of collecting them in `records` (which stays empty). */
  onRecord?: (r: ScannedRecord) => void;
}

/**
 * Read a whole segment's frames, from its header (or `start`) until the end or
 * the first bad one. A crash can only tear the tail of a log written
 * sequentially, so the caller needs to know whether anything valid follows a
 * bad frame: `bad.after` says. A header cut short is a tail torn at 0; a
 * damaged one is a bad frame at 0 after which nothing can be checked.
 */
export function scanSegment(buf: Buffer, options?: ScanOptions): SegmentScan {
  const records: ScannedRecord[] = [];
  const header = readSegmentHeader(buf.subarray(0, SEGMENT_HEADER_BYTES));
  if (header.status !== 'ok') {
    const after: Resync = header.status === 'torn' ? { status: 'none' } : { status: 'unsalted' };
    return { records, goodEnd: 0, fileSize: buf.length, bad: { offset: 0, reason: header.reason, after } };
  }
  const { salt, dataStart } = header.layout;
  const onRecord = options?.onRecord ?? ((r: ScannedRecord) => void records.push(r));
  let offset = Math.max(options?.start ?? 0, dataStart);
  while (offset < buf.length) {
    const f = readFrame(buf, offset, salt, options);
    if (f.status === 'bad') {
      return { records, goodEnd: offset, fileSize: buf.length, bad: { offset, reason: f.reason, after: nextValidFrame(buf, offset + 1, salt) } };
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
  | { status: 'gave-up'; offset: number; checked: number }
  /** The segment's header is damaged: without its salt no frame in it can be checked. */
  | { status: 'unsalted' };

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
export function nextValidFrame(buf: Buffer, from: number, salt: number, budget = ResyncBudget.forSegment(buf.length)): Resync {
  for (let at = from; at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES <= buf.length; at++) {
    if (!couldStartRecord(buf, at + FRAME_HEADER_BYTES)) continue;
    const len = claimedLength(buf, at);
    if (len === undefined || !recordLengthFits(buf[at + FRAME_HEADER_BYTES]!, len)) continue;
    if (!budget.take(LENGTH_FIELD_BYTES + len)) return { status: 'gave-up', offset: at, checked: budget.spent };
    if (readFrame(buf, at, salt).status === 'ok') return { status: 'found', offset: at };
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
  /** The segment's header is damaged: the range is the whole segment, whose records could not be checked. */
  unsalted?: boolean;
  /** Not removed but replaced by these bytes: a damaged header rebuilt with the salt its frames were solved for. */
  rewrite?: Buffer;
}

/**
 * For --repair: the parts of `buf` that are not valid frames, in order (none:
 * the segment is whole). Each bad frame's range ends where the next valid frame
 * starts, so every valid frame is kept, unless the budget runs out: the range
 * then says `unsearchedFrom`, and ends where the bad frame's own length says it
 * does if a valid frame starts there, else at the end of the segment.
 */
export function badRanges(buf: Buffer, budget = ResyncBudget.forSegment(buf.length)): BadRange[] {
  const header = readSegmentHeader(buf.subarray(0, SEGMENT_HEADER_BYTES));
  // A header cut short: removing it leaves an empty segment, which is valid.
  if (header.status === 'torn') return [{ offset: 0, bytes: buf.length, reason: header.reason }];
  let salt: number;
  let at: number;
  const ranges: BadRange[] = [];
  if (header.status === 'damaged') {
    const solved = header.unknownFormat ? undefined : recoveredSalt(buf);
    if (solved === undefined) return [{ offset: 0, bytes: buf.length, reason: header.reason, unsalted: true }];
    ranges.push({ offset: 0, bytes: SEGMENT_HEADER_BYTES, reason: `${header.reason}; rebuilt with the salt solved from its first two frames`, rewrite: encodeSegmentHeader(solved) });
    salt = solved;
    at = SEGMENT_HEADER_BYTES;
  } else {
    ({ salt, dataStart: at } = header.layout);
  }
  // Bounded: each pass moves `at` forward by a frame, past the bad one, or to the end.
  while (at < buf.length) {
    const f = readFrame(buf, at, salt);
    if (f.status === 'ok') {
      at += f.size;
      continue;
    }
    // A bad frame cost its checksum too: with many of them, that alone would be quadratic.
    const len = claimedLength(buf, at);
    if (len !== undefined) budget.charge(LENGTH_FIELD_BYTES + len);
    const next = nextValidFrame(buf, at + 1, salt, budget);
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
    const resumes = validFrameAt(buf, end, salt, budget);
    ranges.push({ offset: at, bytes: (resumes ? end : buf.length) - at, reason: f.reason, unsearchedFrom: next.offset });
    if (!resumes) break;
    at = end;
  }
  return ranges;
}

/**
 * The salt of a segment whose header copies are both damaged, solved from the CRC of
 * its first frame (crc32cPrevious). Any CRC solves for some salt, so the salt counts
 * only if that frame then decodes and the next one checks with it too (odds of 2^-32
 * for bytes that are not frames of this segment); a segment of one frame is not
 * rebuilt.
 */
function recoveredSalt(buf: Buffer): number | undefined {
  const at = SEGMENT_HEADER_BYTES;
  const len = claimedLength(buf, at);
  if (len === undefined) return undefined;
  const size = FRAME_HEADER_BYTES + len;
  const salt = crc32cPrevious(buf.readUInt32LE(at + LENGTH_FIELD_BYTES), [
    { data: buf, start: at, end: at + LENGTH_FIELD_BYTES },
    { data: buf, start: at + FRAME_HEADER_BYTES, end: at + size },
  ]);
  if (readFrame(buf, at, salt).status !== 'ok' || at + size >= buf.length) return undefined;
  return readFrame(buf, at + size, salt).status === 'ok' ? salt : undefined;
}

/** Whether a valid frame starts at `at`, its checksum counted against the budget. */
function validFrameAt(buf: Buffer, at: number, salt: number, budget: ResyncBudget): boolean {
  if (at >= buf.length) return false;
  const len = claimedLength(buf, at);
  if (len !== undefined) budget.charge(LENGTH_FIELD_BYTES + len);
  return readFrame(buf, at, salt).status === 'ok';
}

/** The payload length in the frame header at `at`, if it is one readFrame would checksum. */
function claimedLength(buf: Buffer, at: number): number | undefined {
  const left = buf.length - at - FRAME_HEADER_BYTES;
  if (left < RECORD_HEADER_BYTES) return undefined;
  const len = buf.readUInt32LE(at);
  return len >= RECORD_HEADER_BYTES && len <= left && len <= MAX_RECORD_BYTES ? len : undefined;
}

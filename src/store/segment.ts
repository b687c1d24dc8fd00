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
import { decodeChange, isKnownRecordCode, RECORD_HEADER_BYTES, type CodecEntry, type DecodeOptions } from './record-codec.js';

export const FRAME_HEADER_BYTES = 8;
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
  buf.writeUInt32LE(crc32c(buf, crc32c(buf, 0, at, at + 4), at + FRAME_HEADER_BYTES, at + size), at + 4);
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
  const crc = crc32c(buf, crc32c(buf, 0, offset, offset + 4), start, start + len);
  if (crc !== buf.readUInt32LE(offset + 4)) return { status: 'bad', reason: 'CRC mismatch' };
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
  /** The first bad frame, if any, and whether a valid frame exists anywhere after it. */
  bad?: { offset: number; reason: string; validAfter: boolean };
}

export interface ScanOptions extends DecodeOptions {
  /** Offset of the first frame to read (a checkpoint covers what is before it). Default 0. */
  start?: number;
  /** Called for each good frame instead of collecting them in `records` (which stays empty). */
  onRecord?: (r: ScannedRecord) => void;
}

export function scanSegment(buf: Buffer, options?: ScanOptions): SegmentScan {
  const records: ScannedRecord[] = [];
  const onRecord = options?.onRecord ?? ((r: ScannedRecord) => void records.push(r));
  let offset = options?.start ?? 0;
  while (offset < buf.length) {
    const f = readFrame(buf, offset, options);
    if (f.status === 'bad') {
      return { records, goodEnd: offset, fileSize: buf.length, bad: { offset, reason: f.reason, validAfter: hasValidFrameAfter(buf, offset + 1) } };
    }
    onRecord({ offset, size: f.size, entry: f.entry });
    offset += f.size;
  }
  return { records, goodEnd: offset, fileSize: buf.length };
}

/**
 * A crash can only tear the tail of a log written sequentially, so a bad frame
 * with a valid frame somewhere after it means damage. We look at every later
 * offset; the cheap checks (known code, sane length) keep this linear in practice.
 */
function hasValidFrameAfter(buf: Buffer, from: number): boolean {
  return nextValidFrame(buf, from) !== undefined;
}

/** Offset of the first valid frame at or after `from` (where a reader resynchronises), if any. */
export function nextValidFrame(buf: Buffer, from: number): number | undefined {
  for (let at = from; at + FRAME_HEADER_BYTES + RECORD_HEADER_BYTES <= buf.length; at++) {
    if (!isKnownRecordCode(buf[at + FRAME_HEADER_BYTES]!)) continue;
    const len = buf.readUInt32LE(at);
    if (len < RECORD_HEADER_BYTES || len > buf.length - at - FRAME_HEADER_BYTES) continue;
    if (readFrame(buf, at).status === 'ok') return at;
  }
  return undefined;
}

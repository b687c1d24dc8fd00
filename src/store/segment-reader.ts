// Reads records back from segment files, for message bodies paged out of memory.
//
// Reads are synchronous on purpose: a consumer reaching a paged message needs
// its body before the delivery can be encoded, and the caller batches (one read
// per contiguous run of records, see Pager), so one pread of up to a few hundred
// KiB stands in for hundreds of messages. The writer's fdatasync never runs here.
//
// Only synced records are read (the index hands out synced locations only), and
// a segment is only deleted after every live record in it has a synced copy
// elsewhere, so a location is valid for as long as nothing awaits between
// looking it up and reading it: the caller does both in one synchronous step.

import fs from 'node:fs';
import { JournalReadError, JournalRecordDamagedError } from './errors.js';
import type { Location } from './live-index.js';
import type { CodecEntry } from './record-codec.js';
import { RECORD_HEADER_BYTES } from './record-codec.js';
import { FRAME_HEADER_BYTES, MAX_RECORD_BYTES, readFrame, readSegmentHeader, SEGMENT_HEADER_BYTES, segmentPath, type SegmentHeaderRead } from './segment.js';

/** Read neighbouring records with one pread when the gap between them is at most this. */
const MAX_GAP = 64 * 1024;
/** ...and the whole read stays under this. */
const MAX_RUN = 4 * 1024 * 1024;

export class SegmentReader {
  /** Preads done and records decoded (tests check that a transaction is decoded once per read). */
  readonly stats = { preads: 0, decodes: 0 };
  /** Open descriptors by segment, with the salt its frames' CRCs start from and its size when last looked at, oldest first (Map keeps insertion order). */
  private readonly fds = new Map<number, OpenSegment>();

  constructor(
    private readonly dir: string,
    private readonly maxOpen = 16,
  ) {}

  /** Decode the records at `locs`; the result is in the order of `locs`. Throws JournalReadError. */
  read(locs: readonly Location[]): CodecEntry[] {
    const order = locs.map((_, i) => i).sort((a, b) => locs[a]!.seg - locs[b]!.seg || locs[a]!.offset - locs[b]!.offset);
    const out = new Array<CodecEntry>(locs.length);
    let i = 0;
    while (i < order.length) {
      const first = locs[order[i]!]!;
      let end = first.offset + first.size;
      let j = i + 1;
      for (; j < order.length; j++) {
        const next = locs[order[j]!]!;
        if (next.seg !== first.seg || next.offset - end > MAX_GAP || next.offset + next.size - first.offset > MAX_RUN) break;
        end = Math.max(end, next.offset + next.size);
      }
      const opened = this.open(first.seg);
      const { fd, salt } = opened;
      // Checked before a buffer is made for it: a damaged checkpoint's row said a
      // record of 2.7 GB lay there, and a buffer of that size was allocated.
      for (let k = i; k < j; k++) checkLocation(locs[order[k]!]!, this.dir);
      if (end > opened.size) opened.size = fs.fstatSync(fd).size; // the active segment grows
      if (end > opened.size) throw new JournalRecordDamagedError(`journal record at ${segmentPath(this.dir, first.seg)} offset ${first.offset} lies past the segment's end (${opened.size} bytes)`);
      const buf = this.pread(fd, first.seg, first.offset, end - first.offset);
      // Messages of one transaction share a record: decode it once, not once per message.
      const decoded = new Map<number, CodecEntry>();
      for (let k = i; k < j; k++) {
        const loc = locs[order[k]!]!;
        let entry = decoded.get(loc.offset);
        if (!entry) {
          const f = readFrame(buf.subarray(loc.offset - first.offset, loc.offset - first.offset + loc.size), 0, salt);
          if (f.status !== 'ok') {
            throw new JournalRecordDamagedError(`journal record at ${segmentPath(this.dir, loc.seg)} offset ${loc.offset} cannot be read back (${f.reason})`);
          }
          entry = f.entry;
          decoded.set(loc.offset, entry);
          this.stats.decodes++;
        }
        out[order[k]!] = entry;
      }
      i = j;
    }
    return out;
  }

  /** The segment is gone (compaction): drop its descriptor. */
  forget(seg: number): void {
    const open = this.fds.get(seg);
    if (open === undefined) return;
    this.fds.delete(seg);
    fs.closeSync(open.fd);
  }

  close(): void {
    for (const seg of [...this.fds.keys()]) this.forget(seg);
  }

  private pread(fd: number, seg: number, position: number, length: number): Buffer {
    const buf = Buffer.allocUnsafe(length);
    this.stats.preads++;
    let done = 0;
    // Bounded: each pass reads at least one byte or throws.
    while (done < length) {
      const n = fs.readSync(fd, buf, done, length - done, position + done);
      if (n === 0) throw new JournalRecordDamagedError(`journal segment ${segmentPath(this.dir, seg)} ends before offset ${position + length}`);
      done += n;
    }
    return buf;
  }

  /** The segment's descriptor and salt, opened (and its header read) if need be. */
  private open(seg: number): OpenSegment {
    const open = this.fds.get(seg);
    if (open !== undefined) return open;
    if (this.fds.size >= this.maxOpen) this.forget(this.fds.keys().next().value as number);
    let fd: number;
    try {
      fd = fs.openSync(segmentPath(this.dir, seg), 'r');
    } catch (err) {
      throw new JournalReadError(`cannot open journal segment ${segmentPath(this.dir, seg)} to read a message back (${(err as Error).message})`, { cause: err });
    }
    let header: SegmentHeaderRead;
    try {
      const head = Buffer.alloc(SEGMENT_HEADER_BYTES);
      header = readSegmentHeader(head.subarray(0, fs.readSync(fd, head, 0, head.length, 0)));
    } catch (err) {
      fs.closeSync(fd);
      throw new JournalReadError(`cannot read the header of journal segment ${segmentPath(this.dir, seg)} (${(err as Error).message})`, { cause: err });
    }
    if (header.status !== 'ok') {
      fs.closeSync(fd);
      throw new JournalRecordDamagedError(`journal segment ${segmentPath(this.dir, seg)} cannot be read back (${header.reason})`);
    }
    const opened: OpenSegment = { fd, salt: header.layout.salt, size: fs.fstatSync(fd).size };
    this.fds.set(seg, opened);
    return opened;
  }
}

interface OpenSegment {
  fd: number;
  salt: number;
  size: number;
}

/** A location no frame can have (the index's rows come from a checkpoint, whose CRC proves only that they were written so). */
function checkLocation(loc: Location, dir: string): void {
  if (!Number.isSafeInteger(loc.offset) || loc.offset < 0 || !Number.isSafeInteger(loc.size) || loc.size < FRAME_HEADER_BYTES + RECORD_HEADER_BYTES || loc.size > FRAME_HEADER_BYTES + MAX_RECORD_BYTES) {
    throw new JournalRecordDamagedError(`the journal's index puts a record at ${segmentPath(dir, loc.seg)} offset ${loc.offset}, ${loc.size} bytes, which no record can be`);
  }
}

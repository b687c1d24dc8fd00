// The reader of paged message bodies trusts the journal's index for where a record
// lies, and the index's rows may come from a checkpoint whose CRC proves only that
// they were written so. A location no record can have, or one past the segment's
// end, is a damaged record (the message is set aside), before any buffer is made:
// a damaged row once said 2.7 GB, and a buffer of that size was allocated.
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { JournalRecordDamagedError } from '../../../src/store/errors.js';
import { Journal } from '../../../src/store/journal.js';
import { SegmentReader } from '../../../src/store/segment-reader.js';
import { SEGMENT_HEADER_BYTES, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, message, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

describe('segment reader', () => {
  it('segment reader - a location no record can have, or past the segment\'s end, is a damaged record; a real one reads', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { journal } = await Journal.open({ dataDir, autoCompact: false });
    journal.append({ lsn: 1, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
    journal.append({ lsn: 2, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(1, 'hello') } });
    await durable(journal, 2);
    await journal.close({ checkpoint: false });
    const dir = path.join(dataDir, 'journal');
    const seg = Number((await readdir(dir)).filter((n) => n.endsWith('.seg')).sort()[0]!.slice(0, 8));
    const enqueue = scanSegment(await readFile(segmentPath(dir, seg))).records.find((r) => r.entry.change.kind === 'enqueue')!;
    const reader = new SegmentReader(dir);
    try {
      expect(reader.read([{ seg, offset: enqueue.offset, size: enqueue.size }])[0]!.lsn).toBe(2);
      const bad = [
        { seg, offset: enqueue.offset, size: 2_701_131_925 },
        { seg, offset: -1, size: enqueue.size },
        { seg, offset: enqueue.offset, size: 3 },
      ];
      for (const loc of bad) expect(() => reader.read([loc]), JSON.stringify(loc)).toThrow(/which no record can be/);
      const past = { seg, offset: enqueue.offset + 1_000_000, size: enqueue.size };
      expect(() => reader.read([past])).toThrow(JournalRecordDamagedError);
      expect(() => reader.read([past])).toThrow(/lies past the segment's end/);
      expect(enqueue.offset).toBeGreaterThanOrEqual(SEGMENT_HEADER_BYTES);
    } finally {
      reader.close();
    }
  });
});

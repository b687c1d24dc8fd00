// Salted segments in a journal (segment.ts): every segment the journal makes starts
// with a header holding its own salt; a journal written before salts still opens,
// and compaction moves its records into salted segments; a full disk while a
// header is written fails the records queued behind it like any full disk, and
// the journal carries on.
import { readdir, readFile, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { DiskFullError } from '../../../src/store/errors.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal } from '../../../src/store/journal.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { encodeFrame, readSegmentHeader, SEGMENT_HEADER_BYTES, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, durableResult, message, modelState, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});
async function fresh(): Promise<string> {
  const d = await tempDir();
  dirs.push(d);
  return d;
}

const declare = (lsn: number): LoggedChange => ({ lsn, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() }, durable: true });
const enqueue = (lsn: number, id: number): LoggedChange => ({ lsn, change: { kind: 'enqueue', queue: 'q', message: message(id, `body-${id}-`.padEnd(100, 'x')) }, durable: true });
const dequeue = (lsn: number, id: number): LoggedChange => ({ lsn, change: { kind: 'dequeue', queue: 'q', id }, durable: true });

async function segmentHeaders(dataDir: string): Promise<Array<{ name: string; salt: number; dataStart: number }>> {
  const dir = path.join(dataDir, 'journal');
  const names = (await readdir(dir)).filter((n) => n.endsWith('.seg')).sort();
  const out = [];
  for (const name of names) {
    const header = readSegmentHeader((await readFile(path.join(dir, name))).subarray(0, SEGMENT_HEADER_BYTES));
    if (header.status !== 'ok') throw new Error(`${name}: ${header.reason}`);
    out.push({ name, ...header.layout });
  }
  return out;
}

/** A queue and 60 messages in segments of 2 KiB (several of them), the journal closed; the log written. */
async function writeSixtyMessages(dataDir: string, checkpoint: boolean): Promise<LoggedChange[]> {
  const { journal } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 2048 });
  const log: LoggedChange[] = [declare(1)];
  for (let id = 1; id <= 60; id++) log.push(enqueue(1 + id, id));
  for (const e of log) journal.append(e);
  await durable(journal, 61);
  await journal.close({ checkpoint });
  return log;
}

describe('salted segments in a journal', () => {
  it('salted segments - each segment the journal writes has a header and a salt of its own; a restart reads them all', async () => {
    const dataDir = await fresh();
    const log = await writeSixtyMessages(dataDir, true);
    const headers = await segmentHeaders(dataDir);
    expect(headers.length).toBeGreaterThan(3);
    for (const h of headers) {
      expect(h.dataStart).toBe(SEGMENT_HEADER_BYTES);
      expect(h.salt).not.toBe(0);
    }
    expect(new Set(headers.map((h) => h.salt)).size).toBe(headers.length);
    const again = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    expect(modelState(again.recovered.changes.map((c) => c.change))).toEqual(modelState(log.map((e) => e.change)));
    await again.journal.close();
  });

  it('salted segments - a journal written before salts opens as it was; compaction copies its live records into salted segments, which a restart reads', async () => {
    const dataDir = await fresh();
    const dir = path.join(dataDir, 'journal');
    await mkdir(dir, { recursive: true });
    // Two segments as the format before salts wrote them: no header, CRCs from 0.
    const before: LoggedChange[] = [declare(1)];
    for (let id = 1; id <= 40; id++) before.push(enqueue(1 + id, id));
    for (let id = 1; id <= 36; id++) before.push(dequeue(100 + id, id));
    const frames = before.map((e) => encodeFrame(encodeChange(e), 0));
    await writeFile(segmentPath(dir, 1), Buffer.concat(frames.slice(0, 41)));
    await writeFile(segmentPath(dir, 2), Buffer.concat(frames.slice(41)));
    expect((await segmentHeaders(dataDir)).map((h) => h.salt)).toEqual([0, 0]);

    const a = await Journal.open({ materialize: true, dataDir, autoCompact: false, compactLiveRatio: 1 });
    expect(modelState(a.recovered.changes.map((c) => c.change))).toEqual(modelState(before.map((e) => e.change)));
    const after = [enqueue(200, 41), enqueue(201, 42)];
    for (const e of after) a.journal.append(e);
    await durable(a.journal, 201);
    const report = await a.journal.compact();
    // The old segments' live records (the declare, messages 37-40) now live in a salted segment.
    expect(report.copiedRecords).toBeGreaterThan(0);
    expect(report.deletedSegments).toEqual(expect.arrayContaining([1, 2]));
    await a.journal.close();
    const headers = await segmentHeaders(dataDir);
    expect(headers.every((h) => h.salt !== 0)).toBe(true);
    const b = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    expect(modelState(b.recovered.changes.map((c) => c.change))).toEqual(modelState([...before, ...after].map((e) => e.change)));
    await b.journal.close();
  });

  it('salted segments - a full disk while a new segment\'s header is written fails the records behind it; the next append makes the segment again and a restart reads every confirmed record', async () => {
    const dataDir = await fresh();
    let failHeader = false;
    let headerFailures = 0;
    const io: JournalIo = {
      ...nodeIo,
      write: (fd, buf, offset, length, position) => {
        if (failHeader && position === 0) {
          failHeader = false;
          headerFailures++;
          return Promise.reject(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' }));
        }
        return nodeIo.write(fd, buf, offset, length, position);
      },
    };
    const { journal } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 1024, io });
    const confirmed: LoggedChange[] = [declare(1)];
    journal.append(declare(1));
    await durable(journal, 1);
    let lsn = 1;
    let failed = 0;
    for (let id = 1; id <= 40; id++) {
      // Every 10th append lands in a new segment whose header write fails.
      if (id % 10 === 0) failHeader = true;
      const e = enqueue(++lsn, id);
      journal.append(e);
      const err = await durableResult(journal, e.lsn);
      if (err) {
        expect(err).toBeInstanceOf(DiskFullError);
        failed++;
      } else confirmed.push(e);
    }
    expect(headerFailures).toBeGreaterThan(0);
    expect(failed).toBeGreaterThan(0);
    await journal.close();
    for (const name of (await readdir(path.join(dataDir, 'journal'))).filter((n) => n.endsWith('.seg'))) {
      expect(scanSegment(await readFile(path.join(dataDir, 'journal', name))).bad, name).toBeUndefined();
    }
    const again = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    expect(modelState(again.recovered.changes.map((c) => c.change))).toEqual(modelState(confirmed.map((e) => e.change)));
    await again.journal.close();
  });

  it('salted segments - both copies of a segment\'s header damaged: the start is refused; --repair solves the salt from its frames, rebuilds the header and keeps every record', async () => {
    const dataDir = await fresh();
    // No checkpoint: the start reads every segment (behind a checkpoint a damaged header is met when a body is read back).
    const log = await writeSixtyMessages(dataDir, false);
    const headers = await segmentHeaders(dataDir);
    const victim = headers[1]!;
    const file = path.join(dataDir, 'journal', victim.name);
    const bytes = await readFile(file);
    bytes[9]! ^= 0x55; // the salt of the first copy
    bytes[16 + 12]! ^= 0x55; // the CRC of the second
    await writeFile(file, bytes);

    await expect(Journal.open({ materialize: true, dataDir, autoCompact: false })).rejects.toThrow(/both copies of the segment header fail their check.*--repair rebuilds the header/);
    const lines: string[] = [];
    const logger = { info() {}, warn() {}, error: (_o: object, msg?: string) => void lines.push(msg ?? '') };
    const repaired = await Journal.open({ materialize: true, dataDir, autoCompact: false, repair: true, logger });
    expect(modelState(repaired.recovered.changes.map((c) => c.change))).toEqual(modelState(log.map((e) => e.change)));
    await repaired.journal.close();
    expect(lines.some((l) => l.startsWith(`REPAIR: rebuilt the damaged header of ${file}`))).toBe(true);
    expect((await segmentHeaders(dataDir)).find((h) => h.name === victim.name)?.salt).toBe(victim.salt);
  });
});

// The journal checkpoint: a restart loads it and replays only what follows it.
// Property: random workloads with checkpoints written at random moments (also
// while the queues keep changing, one small write at a time), compaction, clean
// closes and crashes; crash images are taken at every step of a checkpoint write
// (each write, the sync, the directory sync after the rename) and at other
// moments. Every image must recover exactly the records it holds: the model of
// the surviving records, as a full replay sees them. Then each image's checkpoint
// is damaged (a flipped byte, a cut) and it must still recover the same, by
// replaying everything, with a warning.
import { cpSync, existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { CHECKPOINT_CORRUPT, CHECKPOINT_FILE, CheckpointError, readCheckpoint } from '../../../src/store/checkpoint.js';
import { crc32c } from '../../../src/store/crc32c.js';
import { JournalCorruptError, JournalReadError } from '../../../src/store/errors.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal } from '../../../src/store/journal.js';
import { listSegments, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, journaled, message, modelState, prng, queueSettings, removeDir, tempDir, Workload, type ModelState } from './helpers.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await removeDir(d);
});
async function fresh(): Promise<string> {
  const d = await tempDir();
  dirs.push(d);
  return d;
}

interface Logged {
  warn: unknown[];
  info: Array<{ o: unknown; msg?: string }>;
}
function recordingLogger(): Logged & { logger: { info(o: unknown, msg?: string): void; warn(o: unknown): void; error(): void } } {
  const l: Logged = { warn: [], info: [] };
  return { ...l, logger: { info: (o, msg) => void l.info.push({ o, msg }), warn: (o) => void l.warn.push(o), error() {} } };
}
const fromCheckpoint = (l: Logged): boolean => l.info.some((e) => e.msg?.includes('from its checkpoint'));

/**
 * The model of what a journal directory must recover: every change confirmed
 * before the crash (up to `confirmed`), plus those written after it that are
 * whole in its segments (a torn tail is not). Compaction may have removed a
 * confirmed dequeue together with what it killed, so confirmed changes count
 * whether their record is still there or not.
 */
async function survivorsModel(journalDir: string, log: readonly LoggedChange[], confirmed: number): Promise<{ model: ModelState; maxLsn: number }> {
  const present = new Set<number>();
  for (const id of await listSegments(journalDir)) {
    const scan = scanSegment(await readFile(segmentPath(journalDir, id)));
    for (const r of scan.records) if (r.entry.change.kind !== 'lsn-reservation') present.add(r.entry.lsn);
  }
  const kept = log.filter((e) => e.lsn <= confirmed || present.has(e.lsn));
  return { model: modelState(journaled(kept)), maxLsn: Math.max(0, ...present) };
}

/** The payload of a checkpoint's first block, its header. */
function headerBlock(file: Buffer): Buffer {
  const at = 12; // magic and version
  expect(file.readUInt32LE(at)).toBe(1);
  return file.subarray(at + 12, at + 12 + file.readUInt32LE(at + 4));
}

/** The checkpoint with another header payload, under a good CRC: only what the header says is wrong. */
function withHeader(file: Buffer, payload: Buffer): Buffer {
  const at = 12;
  const old = headerBlock(file);
  const head = Buffer.alloc(12);
  head.writeUInt32LE(1, 0);
  head.writeUInt32LE(payload.length, 4);
  head.writeUInt32LE(crc32c(payload, crc32c(head, 0, 0, 8)), 8);
  return Buffer.concat([file.subarray(0, at), head, payload, file.subarray(at + 12 + old.length)]);
}

describe('journal checkpoint', () => {
  it('checkpoint - a clean restart loads the checkpoint, replays nothing, and equals a full replay', async () => {
    const dataDir = await fresh();
    const work = new Workload(prng(7), 0);
    const { journal } = await Journal.open({ dataDir, autoCompact: false, segmentBytes: 4096 });
    for (let i = 0; i < 600; ) {
      const e = work.step();
      if (!e) continue;
      journal.append(e);
      i++;
    }
    await durable(journal, work.lsn);
    await journal.close(); // writes a checkpoint of everything
    expect(existsSync(path.join(dataDir, 'journal', CHECKPOINT_FILE))).toBe(true);
    const copy = await fresh();
    await rm(copy, { recursive: true });
    cpSync(dataDir, copy, { recursive: true });

    const l = recordingLogger();
    const a = await Journal.open({ materialize: true, dataDir, autoCompact: false, logger: l.logger });
    await a.journal.close();
    expect(fromCheckpoint(l)).toBe(true);
    const replayed = l.info.find((e) => e.msg?.includes('from its checkpoint'))!.o as { replayedRecords: number };
    expect(replayed.replayedRecords).toBe(0);
    // The same directory without checkpoints: every record read.
    const b = await Journal.open({ materialize: true, dataDir: copy, autoCompact: false, checkpoint: false });
    await b.journal.close();
    expect(existsSync(path.join(copy, 'journal', CHECKPOINT_FILE))).toBe(false);
    expect(a.recovered.changes).toEqual(b.recovered.changes);
    expect(modelState(a.recovered.changes.map((c) => c.change))).toEqual(modelState(journaled(work.log)));
    for (const k of ['lastLsn', 'lastChangeLsn', 'epoch', 'messages', 'maxMessageId'] as const) expect(a.recovered[k], k).toBe(b.recovered[k]);
    expect(a.recovered.config).toEqual(b.recovered.config);
  });

  for (const seed of [1, 2, 3, 4, 5]) {
    it(`checkpoint property - seed ${seed}: crash images at every step of checkpoint writes, and damaged checkpoints, recover the surviving records`, async () => {
      const dataDir = await fresh();
      const imagesDir = await fresh();
      const journalDir = path.join(dataDir, 'journal');
      const rnd = prng(seed);
      const work = new Workload(rnd, 0);
      const images: Array<{ dir: string; where: string; confirmed: number }> = [];
      let confirmed = 0; // every change up to this LSN was confirmed durable before the image
      const take = (where: string) => {
        if (images.length >= 45 || !rnd.chance(0.5)) return;
        const dir = path.join(imagesDir, String(images.length));
        cpSync(journalDir, path.join(dir, 'journal'), { recursive: true });
        images.push({ dir, where, confirmed });
      };
      // Taps the checkpoint's file operations and every directory sync: a crash image before each.
      const tapped = new Set<number>();
      const io: JournalIo = {
        ...nodeIo,
        syncedWrites: false, // writes then fdatasync, which this io holds or watches
        open: async (p, flags) => {
          if (p === journalDir) take('before a directory sync');
          const fd = await nodeIo.open(p, flags);
          if (p.endsWith('checkpoint.tmp')) tapped.add(fd);
          return fd;
        },
        write: (fd, ...rest) => {
          if (tapped.has(fd)) take('before a checkpoint write');
          return nodeIo.write(fd, ...rest);
        },
        fdatasync: (fd) => {
          if (tapped.has(fd)) take('before the checkpoint sync');
          return nodeIo.fdatasync(fd);
        },
        close: (fd) => {
          tapped.delete(fd);
          return nodeIo.close(fd);
        },
      };
      let checkpoints = 0;
      for (let session = 0; session < 4; session++) {
        const { journal, recovered } = await Journal.open({
          materialize: true,
          dataDir,
          io,
          autoCompact: false,
          segmentBytes: 2048,
          reserveLsnBlock: 100,
          checkpointBytes: 2048 + rnd.int(8192),
          checkpointWriteBytes: 64 + rnd.int(512),
        });
        const expected = await survivorsModel(journalDir, work.log, confirmed);
        expect(modelState(recovered.changes.map((c) => c.change)), `open of session ${session}`).toEqual(expected.model);
        work.lsn = Math.max(work.lsn, recovered.lastLsn);
        for (let round = 0; round < 12; round++) {
          const pending: Array<Promise<unknown>> = [];
          for (let i = 0; i < 25; ) {
            const e = work.step();
            if (!e) continue;
            journal.append(e);
            i++;
            // A checkpoint in the middle of a burst: the queues change while it is written.
            if (rnd.chance(0.02)) pending.push(journal.checkpoint());
          }
          await durable(journal, work.lsn);
          confirmed = work.lsn;
          await Promise.all(pending);
          if (rnd.chance(0.3)) await journal.compact();
          if (rnd.chance(0.2)) take(`session ${session}, round ${round}`);
        }
        checkpoints += journal.checkpointsWritten;
        if (rnd.chance(0.5)) await journal.close();
        else {
          journal.destroy(); // kill -9: whatever was written stays, nothing more is
          await journal.close();
        }
      }
      expect(checkpoints).toBeGreaterThan(0);
      expect(images.length).toBeGreaterThan(5);
      let usedCheckpoint = 0;
      for (const image of images) {
        const jdir = path.join(image.dir, 'journal');
        const expected = await survivorsModel(jdir, work.log, image.confirmed);
        const ckpt = path.join(jdir, CHECKPOINT_FILE);
        const pristine = existsSync(ckpt) ? await readFile(ckpt) : undefined;
        // Each variant recovers its own copy of the image.
        const variants: Array<[string, (file: string) => Promise<void>]> = [['without its checkpoint', async (f) => rm(f, { force: true })]];
        if (pristine) {
          variants.push(['with its checkpoint', async () => undefined]);
          variants.push([
            'with a flipped byte in its checkpoint',
            async (f) => {
              const b = Buffer.from(pristine);
              b[rnd.int(b.length)]! ^= 1 << rnd.int(8);
              await writeFile(f, b);
            },
          ]);
          variants.push(['with its checkpoint cut short', async (f) => truncate(f, rnd.int(pristine.length))]);
        }
        for (const [k, [name, damage]] of variants.entries()) {
          const dir = `${image.dir}-${k}`;
          cpSync(image.dir, dir, { recursive: true });
          await damage(path.join(dir, 'journal', CHECKPOINT_FILE));
          const l = recordingLogger();
          const r = await Journal.open({ materialize: true, dataDir: dir, autoCompact: false, logger: l.logger });
          await r.journal.close({ checkpoint: false });
          expect(modelState(r.recovered.changes.map((c) => c.change)), `${image.where}, ${name}`).toEqual(expected.model);
          expect(r.recovered.lastLsn, `${image.where}, ${name}`).toBeGreaterThanOrEqual(expected.maxLsn);
          if (k === 1) {
            // An intact checkpoint always fits its journal: compaction kept what it needs.
            expect(l.warn.filter((w) => (w as { keptAs?: string }).keptAs), `${image.where}, ${name}`).toEqual([]);
            if (fromCheckpoint(l)) usedCheckpoint++;
          }
          if (k >= 2) {
            // Damaged: never used; set aside with a warning, everything replayed.
            expect(fromCheckpoint(l), `${image.where}, ${name}`).toBe(false);
            expect(l.warn.length, `${image.where}, ${name}`).toBeGreaterThan(0);
            expect(existsSync(path.join(dir, 'journal', CHECKPOINT_CORRUPT))).toBe(true);
          }
        }
      }
      expect(usedCheckpoint).toBeGreaterThan(0);
    }, 60_000);
  }

  it('checkpoint - a header of the wrong shape (its CRC good) is refused at once, naming the field, and the journal replays everything instead', async () => {
    const dataDir = await fresh();
    const { journal } = await Journal.open({ dataDir, autoCompact: false });
    let lsn = 0;
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
    // A queue with no messages has no rows block: the header names more queues than there are rows blocks.
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'empty', settings: queueSettings() } });
    for (let id = 1; id <= 3; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id) } });
    await durable(journal, lsn);
    await journal.close(); // writes the checkpoint
    const file = path.join(dataDir, 'journal', CHECKPOINT_FILE);
    const pristine = await readFile(file);
    const header = JSON.parse(headerBlock(pristine).toString('utf8')) as Record<string, unknown> & { meta: Record<string, unknown>; queues: unknown[] };
    expect(header.queues).toHaveLength(2);
    const expected = await (async () => {
      const l = recordingLogger();
      const r = await Journal.open({ materialize: true, dataDir, autoCompact: false, logger: l.logger });
      await r.journal.close({ checkpoint: false });
      expect(fromCheckpoint(l), 'the intact checkpoint is used').toBe(true);
      return r.recovered.changes;
    })();

    const variants: Array<[string, Record<string, unknown>, RegExp]> = [
      ['queues a length, not a list', { ...header, queues: { length: 1e6 } }, /^header field queues is not a list$/],
      ['no meta', { ...header, meta: undefined }, /^header field meta is not an object$/],
      ['a last frame too big to read', { ...header, meta: { ...header.meta, lastFrame: { seg: 1, offset: 0, size: 2 ** 40, lsn: 1 } } }, /^header field meta\.lastFrame\.size is 1099511627776, which no frame is$/],
      ['a queue name that is a number', { ...header, queues: [{ name: 5, declaredAt: 1, rows: 0 }, header.queues[1]] }, /^header field queues\[0\]\.name is not a string$/],
      ['segments a string', { ...header, segments: 'abc' }, /^header field segments is not a list$/],
      ['a negative epoch', { ...header, epoch: -1 }, /^header field epoch is not a whole number \(-1\)$/],
      ['a JSON list', [header] as unknown as Record<string, unknown>, /^the header block is not a JSON object$/],
      // The reservation above it would not fit a record: a TypeError at open, before.
      ['a last LSN of 2^53 - 1', { ...header, meta: { ...header.meta, lastLsn: Number.MAX_SAFE_INTEGER } }, /^header field meta\.lastLsn is 9007199254740991, past any log's numbers$/],
      ['a message id of 2^53 - 1', { ...header, meta: { ...header.meta, maxMessageId: Number.MAX_SAFE_INTEGER } }, /^header field meta\.maxMessageId is 9007199254740991, past any log's numbers$/],
    ];
    for (const [name, bad, reason] of variants) {
      await rm(path.join(dataDir, 'journal', CHECKPOINT_CORRUPT), { force: true });
      await writeFile(file, withHeader(pristine, Buffer.from(JSON.stringify(bad))));
      const err = await readCheckpoint(path.join(dataDir, 'journal')).catch((e: unknown) => e);
      expect(err, name).toBeInstanceOf(CheckpointError);
      expect((err as Error).message, name).toMatch(reason);
      const l = recordingLogger();
      const r = await Journal.open({ materialize: true, dataDir, autoCompact: false, logger: l.logger });
      await r.journal.close({ checkpoint: false });
      expect(fromCheckpoint(l), name).toBe(false);
      expect(l.warn, name).toContainEqual(expect.objectContaining({ reason: expect.stringMatching(reason) }));
      expect(existsSync(path.join(dataDir, 'journal', CHECKPOINT_CORRUPT)), name).toBe(true);
      expect(r.recovered.changes, name).toEqual(expected);
    }
  });

  it('checkpoint - the queues changing while a checkpoint is written (copy-on-write) do not change what it holds', async () => {
    const dataDir = await fresh();
    const { journal } = await Journal.open({ dataDir, autoCompact: false, checkpointWriteBytes: 4096 });
    let lsn = 0;
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
    const n = 20_000;
    for (let id = 1; id <= n; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, `m${id}`) } });
    await durable(journal, lsn);
    const written = journal.checkpoint();
    // While it is written: dequeue from the front, the middle and the back, add more.
    for (let k = 0; k < 3000; k++) {
      const id = k % 3 === 0 ? k + 1 : k % 3 === 1 ? 10_000 + k : n - k;
      journal.append({ lsn: ++lsn, durable: true, change: { kind: 'dequeue', queue: 'q', id } });
      if (k % 500 === 0) await new Promise((r) => setImmediate(r));
    }
    for (let id = n + 1; id <= n + 2000; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, `m${id}`) } });
    await durable(journal, lsn);
    const report = (await written)!;
    expect(report.messages).toBe(n);
    journal.destroy(); // crash: the checkpoint written above, then everything after it replayed
    await journal.close();
    const l = recordingLogger();
    const { journal: again, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false, logger: l.logger });
    await again.close();
    expect(fromCheckpoint(l)).toBe(true);
    const ids = recovered.changes.filter((c) => c.change.kind === 'enqueue').map((c) => (c.change as { message: { id: number } }).message.id);
    const expected: number[] = [];
    const gone = new Set<number>();
    for (let k = 0; k < 3000; k++) gone.add(k % 3 === 0 ? k + 1 : k % 3 === 1 ? 10_000 + k : n - k);
    for (let id = 1; id <= n + 2000; id++) if (!gone.has(id)) expected.push(id);
    expect(ids).toEqual(expected);
  });

  it('checkpoint - damage after its position stops the start; damage it covers is found when the body is read back', async () => {
    const dataDir = await fresh();
    const { journal } = await Journal.open({ dataDir, autoCompact: false });
    let lsn = 0;
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
    for (let id = 1; id <= 3; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, `covered ${id}`) } });
    await durable(journal, lsn);
    await journal.checkpoint();
    for (let id = 4; id <= 6; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, `after ${id}`) } });
    await durable(journal, lsn);
    journal.destroy();
    await journal.close();
    const jdir = path.join(dataDir, 'journal');
    const segs = await listSegments(jdir);
    const flipped = new Map<string, { file: string; at: number }>();
    /** Flip a bit in the record holding this body text (again: flip it back). */
    const flip = async (bodyText: string) => {
      let where = flipped.get(bodyText);
      for (const id of segs) {
        if (where) break;
        const file = segmentPath(jdir, id);
        const at = (await readFile(file)).indexOf(bodyText);
        if (at >= 0) flipped.set(bodyText, (where = { file, at }));
      }
      if (!where) throw new Error(`no record holds ${bodyText}`);
      const buf = await readFile(where.file);
      buf[where.at]! ^= 0x20;
      await writeFile(where.file, buf);
    };
    // A damaged record after the checkpoint, with valid records after it: refuse to start, as without one.
    await flip('after 5');
    const err = await Journal.open({ dataDir, autoCompact: false }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JournalCorruptError);
    // A damaged record the checkpoint covers: the start goes on; reading that body fails, loudly, and nothing is dequeued.
    await flip('covered 2');
    await flip('after 5'); // undo: flipping the same bit again restores it
    const { journal: j2, recovered } = await Journal.open({ dataDir, autoCompact: false });
    expect(recovered.messages).toBe(6);
    expect(j2.readMessages([{ queue: 'q', id: 1 }])[0]!.toString()).toBe('covered 1');
    expect(() => j2.readMessages([{ queue: 'q', id: 2 }])).toThrow(JournalReadError);
    await j2.close({ checkpoint: false });
    // A full replay (--repair path: checkpoint removed) finds it at start.
    const err2 = await Journal.open({ dataDir, autoCompact: false, checkpoint: false }).catch((e: unknown) => e);
    expect(err2).toBeInstanceOf(JournalCorruptError);
  });

  it('checkpoint - compaction keeps what the checkpoint needs; with no room for a new one, the old one goes so compaction can free space', async () => {
    const dataDir = await fresh();
    let full = false;
    const io: JournalIo = {
      ...nodeIo,
      syncedWrites: false, // as the other ios here (this one only fails the checkpoint's open)
      open: async (p, flags) => {
        if (full && p.endsWith('checkpoint.tmp')) throw Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
        return nodeIo.open(p, flags);
      },
    };
    const l = recordingLogger();
    const { journal } = await Journal.open({ dataDir, io, autoCompact: false, segmentBytes: 1024, logger: l.logger, checkpointBytes: 1 << 30 });
    let lsn = 0;
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
    for (let id = 1; id <= 40; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, 'x'.repeat(80)) } });
    await durable(journal, lsn);
    await journal.checkpoint();
    for (let id = 1; id <= 40; id++) journal.append({ lsn: ++lsn, durable: true, change: { kind: 'dequeue', queue: 'q', id } });
    await durable(journal, lsn);
    const segsBefore = (await listSegments(path.join(dataDir, 'journal'))).length;
    // Everything is dead, but the segments at and after the checkpoint's position stay.
    const first = await journal.compact();
    const bytesOf = async () => {
      let b = 0;
      for (const n of await readdir(path.join(dataDir, 'journal'))) if (n.endsWith('.seg')) b += (await stat(path.join(dataDir, 'journal', n))).size;
      return b;
    };
    const kept = await bytesOf();
    expect(first.deletedSegments.length).toBeLessThan(segsBefore - 1);
    full = true;
    expect(await journal.checkpoint()).toBeUndefined();
    expect(existsSync(path.join(dataDir, 'journal', CHECKPOINT_FILE))).toBe(false);
    expect(l.warn.some((w) => JSON.stringify(w).includes('ENOSPC'))).toBe(true);
    const second = await journal.compact();
    expect(second.deletedSegments.length).toBeGreaterThan(0);
    expect(await bytesOf()).toBeLessThan(kept);
    full = false;
    await journal.close();
    const { journal: again, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    await again.close();
    expect(recovered.messages).toBe(0);
    expect(recovered.changes.map((c) => c.change.kind)).toEqual(['queue-declare']);
  });
});

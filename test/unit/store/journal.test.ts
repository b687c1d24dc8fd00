import { constants } from 'node:fs';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { TandemError } from '../../../src/broker/errors.js';
import { DataDirLockedError, isStoreError, JournalCorruptError } from '../../../src/store/errors.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal } from '../../../src/store/journal.js';
import { LOCK_FILE_NAME } from '../../../src/store/lock.js';
import { MAX_RECORD_BYTES, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, holdableSyncIo, message, modelState, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
const journals: Journal[] = [];
async function fresh(): Promise<string> {
  const d = await tempDir();
  dirs.push(d);
  return d;
}
async function open(dataDir: string, extra: Partial<Parameters<typeof Journal.open>[0]> = {}) {
  const r = await Journal.open({ materialize: true, dataDir, autoCompact: false, ...extra });
  journals.push(r.journal);
  return r;
}
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  for (const d of dirs.splice(0)) await removeDir(d);
});

const declare = (lsn: number, name = 'q'): LoggedChange => ({ lsn, change: { kind: 'queue-declare', name, settings: queueSettings() }, durable: true });
const enqueue = (lsn: number, id: number, queue = 'q', isDurable = true): LoggedChange => ({ lsn, change: { kind: 'enqueue', queue, message: message(id) }, durable: isDurable });

describe('journal', () => {
  it('journal - an empty directory recovers to nothing and reserves LSNs ahead', async () => {
    const dataDir = await fresh();
    const { journal, recovered } = await open(dataDir);
    expect({ ...recovered, changes: recovered.changes }).toEqual({ config: [], messages: 0, maxMessageId: 0, dedupWindows: new Map(), changes: [], lastLsn: 0, lastChangeLsn: 0, epoch: 0 });
    await journal.close();
    const again = await open(dataDir, { reserveLsnBlock: 1000 });
    // The first open reserved 1..1,000,000 before handing anything out.
    expect(again.recovered.lastLsn).toBe(1_000_000);
  });

  it('journal - durable changes survive a restart; non-durable ones are not written but their LSNs are never reused', async () => {
    const dataDir = await fresh();
    const a = await open(dataDir, { reserveLsnBlock: 100 });
    a.journal.append(declare(1));
    a.journal.append(enqueue(2, 1));
    a.journal.append(enqueue(3, 2, 'q', false));
    a.journal.append({ lsn: 4, change: { kind: 'epoch', epoch: 5 }, durable: false });
    for (let lsn = 5; lsn < 400; lsn++) a.journal.append(enqueue(lsn, 1000 + lsn, 'q', false));
    await durable(a.journal, 399);
    a.journal.destroy(); // like kill -9: nothing more is flushed
    await a.journal.close();
    const b = await open(dataDir);
    expect(b.recovered.changes.map((c) => c.lsn)).toEqual([1, 2, 4]);
    expect(b.recovered.epoch).toBe(5);
    // Reservations ran ahead of LSN 399 although nothing past LSN 4 was written.
    expect(b.recovered.lastLsn).toBeGreaterThanOrEqual(399);
  });

  it('journal - a change whose record would be over the most recovery reads is refused whole, and the journal restarts on the rest', async () => {
    const dataDir = await fresh();
    const a = await open(dataDir);
    a.journal.append(declare(1));
    // The message's bytes alone are just under MAX_RECORD_BYTES; its record's other fields pass it.
    const huge: LoggedChange = { lsn: 2, change: { kind: 'enqueue', queue: 'q', message: { ...message(1), bytes: Buffer.alloc(MAX_RECORD_BYTES - 8) } }, durable: true };
    let refused: unknown;
    try {
      a.journal.append(huge);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(TandemError);
    expect((refused as TandemError).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    expect((refused as Error).message).toMatch(/enqueue of \d+ bytes is more than one journal record may be/);
    a.journal.append(enqueue(3, 2));
    await durable(a.journal, 3);
    a.journal.destroy(); // like kill -9: recovery replays the segment, checkpoint or not
    await a.journal.close();
    const b = await open(dataDir);
    expect(b.recovered.changes.map((c) => c.lsn)).toEqual([1, 3]);
  });

  it('journal - by default segments are opened O_DSYNC and a group commit needs no fdatasync', async () => {
    const dataDir = await fresh();
    const fds: number[] = [];
    let fdatasyncs = 0;
    const io: JournalIo = {
      ...nodeIo, // syncedWrites: true, as in production
      open: async (p, flags) => {
        const fd = await nodeIo.open(p, flags);
        if (p.endsWith('.seg')) fds.push(fd);
        return fd;
      },
      fdatasync: (fd) => {
        fdatasyncs++;
        return nodeIo.fdatasync(fd);
      },
    };
    const { journal } = await open(dataDir, { io });
    journal.append(declare(1));
    for (let lsn = 2; lsn <= 50; lsn++) journal.append(enqueue(lsn, lsn));
    await durable(journal, 50);
    expect(fds.length).toBeGreaterThan(0);
    // Linux shows an fd's open flags (octal) in /proc/self/fdinfo; O_DSYNC is 010000.
    const info = await readFile(`/proc/self/fdinfo/${fds.at(-1)}`, 'utf8');
    const flags = parseInt(/^flags:\s+([0-7]+)/m.exec(info)![1]!, 8);
    expect(flags & constants.O_DSYNC).toBe(constants.O_DSYNC);
    expect(fdatasyncs).toBe(0);
    await journal.close();
    const again = await open(dataDir);
    expect(again.recovered.lastChangeLsn).toBe(50);
  });

  it('journal - group commit: appends made while a sync is in flight share one sync', async () => {
    const dataDir = await fresh();
    const c = holdableSyncIo();
    const { journal } = await open(dataDir, { io: c.io });
    const base = c.counts.fdatasync;
    journal.append(declare(1));
    c.hold();
    const first = durable(journal, 1);
    // Wait until the first flush is stuck in its fdatasync.
    while (c.counts.fdatasync === base) await new Promise((r) => setImmediate(r));
    const order: number[] = [];
    const done: Promise<void>[] = [];
    for (let lsn = 2; lsn <= 501; lsn++) {
      journal.append(enqueue(lsn, lsn));
      done.push(durable(journal, lsn).then(() => void order.push(lsn)));
    }
    expect(journal.durableLsn).toBe(0);
    c.release();
    await first;
    await Promise.all(done);
    expect(c.counts.fdatasync - base).toBe(2); // one for LSN 1, one for all 500 others
    expect(order).toEqual(Array.from({ length: 500 }, (_, i) => i + 2));
    expect(journal.durableLsn).toBe(501);
  });

  it('journal - whenDurable fires in LSN order, at once when nothing is pending', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    const order: string[] = [];
    journal.whenDurable(0, () => order.push('nothing pending'));
    journal.append(declare(1));
    journal.append(enqueue(2, 1, 'q', false)); // non-durable: covered by the sync of LSN 1
    journal.append(enqueue(3, 2));
    journal.whenDurable(3, () => order.push('3'));
    journal.whenDurable(2, () => order.push('2'));
    journal.whenDurable(1, () => order.push('1'));
    await durable(journal, 3);
    expect(order).toEqual(['nothing pending', '1', '2', '3']);
    expect(() => journal.append(declare(3, 'again'))).toThrow(RangeError);
  });

  it('journal - segments roll at segmentBytes and frames carry length, CRC, type and LSN', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir, { segmentBytes: 512 });
    journal.append(declare(1));
    for (let lsn = 2; lsn <= 40; lsn++) journal.append(enqueue(lsn, lsn));
    await durable(journal, 40);
    await journal.close();
    const names = (await readdir(path.join(dataDir, 'journal'))).filter((n) => n.endsWith('.seg')).sort();
    expect(names.length).toBeGreaterThan(3);
    const lsns: number[] = [];
    for (const n of names) {
      const buf = await readFile(path.join(dataDir, 'journal', n));
      expect(buf.length).toBeLessThanOrEqual(512);
      const scan = scanSegment(buf);
      expect(scan.bad).toBeUndefined();
      for (const r of scan.records) if (r.entry.change.kind !== 'lsn-reservation') lsns.push(r.entry.lsn);
    }
    expect(lsns).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
  });

  it('journal - a torn final record is cut off and the rest recovered', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    journal.append(declare(1));
    journal.append(enqueue(2, 1));
    await durable(journal, 2);
    journal.destroy(); // a crash: no checkpoint at close covers what is cut below
    await journal.close();
    const file = segmentPath(path.join(dataDir, 'journal'), 1);
    const size = (await stat(file)).size;
    const buf = await readFile(file);
    await writeFile(file, buf.subarray(0, size - 3));
    const warnings: unknown[] = [];
    const logger = { info() {}, warn: (o: unknown) => void warnings.push(o), error() {} };
    const { recovered } = await open(dataDir, { logger });
    expect(recovered.changes.map((c) => c.lsn)).toEqual([1]);
    expect(warnings.length).toBe(1);
    expect((await stat(file)).size).toBeLessThan(size - 3);
  });

  it('journal - a corrupt record in the middle refuses to start, naming file and offset; repair removes only it, keeps the records after it and a copy', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    journal.append(declare(1));
    journal.append(enqueue(2, 1));
    journal.append(enqueue(3, 2));
    await durable(journal, 3);
    journal.destroy(); // a crash: no checkpoint covers the damaged record (see the checkpoint tests for one that does)
    await journal.close();
    const file = segmentPath(path.join(dataDir, 'journal'), 1);
    const buf = await readFile(file);
    const scan = scanSegment(buf);
    const victim = scan.records.find((r) => r.entry.lsn === 2 && r.entry.change.kind === 'enqueue')!;
    buf[victim.offset + victim.size - 2]! ^= 0x40;
    await writeFile(file, buf);

    const err = await Journal.open({ materialize: true, dataDir }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JournalCorruptError);
    expect(isStoreError(err)).toBe(true);
    const ce = err as JournalCorruptError;
    expect(ce.code).toBe('TANDEM_ERR_JOURNAL_CORRUPT');
    expect(ce.file).toBe(file);
    expect(ce.offset).toBe(victim.offset);
    expect(ce.message).toContain(file);
    expect(ce.message).toContain(String(victim.offset));
    expect(ce.message).toContain('tandemd --repair');
    // The failed open released the lock.
    expect(await readdir(dataDir)).not.toContain(LOCK_FILE_NAME);

    const errors: unknown[] = [];
    const logger = { info() {}, warn() {}, error: (o: unknown) => void errors.push(o) };
    const { journal: repaired, recovered } = await open(dataDir, { repair: true, logger });
    expect(recovered.changes.map((c) => c.lsn)).toEqual([1, 3]);
    expect(errors).toContainEqual(expect.objectContaining({ file, offset: victim.offset, bytes: victim.size }));
    expect((await readFile(`${file}.corrupt`)).equals(buf)).toBe(true);
    // The repaired segment is whole: a plain start (no --repair) reads the same records.
    await repaired.close({ checkpoint: false });
    const again = await open(dataDir);
    expect(again.recovered.changes.map((c) => c.lsn)).toEqual([1, 3]);
  });

  it('journal - a damaged message whose body is shaped like record headers: the search gives up within its budget; the start is refused, not cut as a torn tail; --repair removes that record and says what it did not search', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    // A frame header every 18 bytes, each claiming 128 KiB and passing every check
    // but the CRC (exchange-declare, LSN 0, flags 0): a body anyone could publish.
    // Trying every offset after the damage would checksum ~1 GB before the next record.
    const body = Buffer.alloc(256 * 1024);
    for (let at = 0; at + 18 <= body.length; at += 18) {
      body.writeUInt32LE(128 * 1024, at);
      body[at + 8] = 3;
    }
    journal.append(declare(1));
    journal.append({ lsn: 2, change: { kind: 'enqueue', queue: 'q', message: { ...message(1), bytes: body } }, durable: true });
    journal.append(enqueue(3, 2));
    await durable(journal, 3);
    journal.destroy(); // a crash: no checkpoint covers the damaged record
    await journal.close();
    const file = segmentPath(path.join(dataDir, 'journal'), 1);
    const damaged = await readFile(file);
    const victim = scanSegment(damaged).records.find((r) => r.entry.lsn === 2)!;
    damaged[victim.offset + victim.size - 100]! ^= 0x01; // in the body: the frame's length is intact
    await writeFile(file, damaged);

    const err = await Journal.open({ materialize: true, dataDir }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JournalCorruptError);
    const ce = err as JournalCorruptError;
    expect(ce.offset).toBe(victim.offset);
    expect(ce.reason).toMatch(/^CRC mismatch; the search for a valid record after it gave up at byte offset \d+/);
    // Not read as a torn tail: nothing was cut.
    expect((await readFile(file)).equals(damaged)).toBe(true);

    const errors: Array<Record<string, unknown>> = [];
    const logger = { info() {}, warn() {}, error: (o: Record<string, unknown>) => void errors.push(o) };
    const { journal: repaired, recovered } = await open(dataDir, { repair: true, logger });
    // The damaged record goes; the one after it stays (its frame starts where the bad one's length says).
    expect(recovered.changes.map((c) => c.lsn)).toEqual([1, 3]);
    const removal = errors.find((o) => o.unsearchedFrom !== undefined)!;
    expect(removal).toMatchObject({ file, offset: victim.offset, bytes: victim.size, reason: 'CRC mismatch' });
    expect(removal.unsearchedFrom as number).toBeGreaterThan(victim.offset);
    expect(removal.unsearchedFrom as number).toBeLessThan(victim.offset + victim.size);
    expect((await readFile(`${file}.corrupt`)).equals(damaged)).toBe(true);
    await repaired.close({ checkpoint: false });
    const again = await open(dataDir);
    expect(again.recovered.changes.map((c) => c.lsn)).toEqual([1, 3]);
  });

  it('journal - a second journal on the same directory fails with the holder PID; a stale lock is taken over', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    const err = await Journal.open({ materialize: true, dataDir }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DataDirLockedError);
    expect((err as DataDirLockedError).code).toBe('TANDEM_ERR_DATA_DIR_LOCKED');
    expect((err as DataDirLockedError).pid).toBe(process.pid);
    expect((err as Error).message).toContain(String(process.pid));
    await journal.close();
    await journal.close(); // idempotent

    // A PID that cannot exist (above pid_max) stands for a broker killed long ago.
    await writeFile(path.join(dataDir, LOCK_FILE_NAME), '2147483646\n');
    const warnings: unknown[] = [];
    const again = await open(dataDir, { logger: { info() {}, warn: (o: unknown) => void warnings.push(o), error() {} } });
    expect(again.recovered.lastLsn).toBe(1_000_000);
    expect(warnings).toHaveLength(1);
    expect((await readFile(path.join(dataDir, LOCK_FILE_NAME), 'utf8')).trim()).toBe(String(process.pid));
  });

  it('journal - transactions are one record and replay whole; queue delete drops its records', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    const log: LoggedChange[] = [
      declare(1, 'a'),
      declare(2, 'b'),
      enqueue(3, 1, 'a'),
      { lsn: 4, change: { kind: 'transaction', changes: [{ kind: 'dequeue', queue: 'a', id: 1 }, { kind: 'enqueue', queue: 'b', message: message(2) }, { kind: 'enqueue', queue: 'b', message: message(3) }] }, durable: true },
      { lsn: 5, change: { kind: 'dequeue', queue: 'b', id: 3 }, durable: true },
      declare(6, 'gone'),
      enqueue(7, 4, 'gone'),
      { lsn: 8, change: { kind: 'queue-delete', name: 'gone' }, durable: true },
    ];
    log.forEach((e) => journal.append(e));
    await durable(journal, 8);
    await journal.close();
    const { recovered } = await open(dataDir);
    expect(modelState(recovered.changes.map((c) => c.change))).toEqual(modelState(log.map((e) => e.change)));
    // The transaction's live part: its one live enqueue, as a message with the transaction's LSN.
    expect(recovered.changes.map((c) => c.lsn)).toEqual([1, 2, 4]);
    expect(recovered.changes[2]!.change).toEqual({ kind: 'enqueue', queue: 'b', message: message(2) });
    expect(recovered.messages).toBe(1);
    expect(recovered.maxMessageId).toBe(4);
    // 8 (the delete) is dead, but as the newest change it stays: it is how far the log went.
    expect(recovered.lastChangeLsn).toBe(8);
  });

  it('journal - a transaction keeps only its durable messages: a non-durable one in it does not come back after its (unjournaled) dequeue', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    const tx = { kind: 'transaction' as const, changes: [{ kind: 'enqueue' as const, queue: 'q', message: message(1, 'fleeting', { durable: false }) }, { kind: 'enqueue' as const, queue: 'q', message: message(2, 'kept') }] };
    journal.append(declare(1));
    journal.append({ lsn: 2, change: tx, durable: true });
    // The non-durable message is consumed: a dequeue that is not durable, so not journaled.
    journal.append({ lsn: 3, change: { kind: 'dequeue', queue: 'q', id: 1 }, durable: false });
    journal.append(enqueue(4, 3));
    await durable(journal, 4);
    await journal.close();
    const { recovered } = await open(dataDir);
    expect(recovered.messages).toBe(2);
    const ids = recovered.changes.flatMap((c) => (c.change.kind === 'enqueue' ? [c.change.message.id] : []));
    expect(ids).toEqual([2, 3]);
    // The caller's change is left as it was.
    expect(tx.changes).toHaveLength(2);
  });

  it('journal - destroy fails outstanding waiters at once; both close and destroy are idempotent', async () => {
    const dataDir = await fresh();
    const c = holdableSyncIo();
    const { journal } = await open(dataDir, { io: c.io });
    c.hold();
    journal.append(declare(1));
    const p = new Promise<Error | undefined>((r) => journal.whenDurable(1, r));
    while (c.counts.fdatasync < 2) await new Promise((r) => setImmediate(r));
    journal.destroy();
    journal.destroy();
    const err = await p;
    expect(isStoreError(err)).toBe(true);
    c.release();
    await journal.close();
  });

  it('journal - a declare of a queue that exists replaces it, as the broker does: its older messages and bindings are dead', async () => {
    const dataDir = await fresh();
    const { journal } = await open(dataDir);
    journal.append(declare(1));
    journal.append(enqueue(2, 1));
    journal.append({ lsn: 3, change: { kind: 'bind', exchange: 'amq.direct', queue: 'q', key: 'k' }, durable: true });
    journal.append(declare(4)); // an HA backup applying a primary's delete-and-recreate it did not see
    journal.append(enqueue(5, 2));
    await durable(journal, 5);
    await journal.close();
    const { recovered } = await open(dataDir);
    expect(recovered.changes.map((c) => [c.lsn, c.change.kind])).toEqual([
      [4, 'queue-declare'],
      [5, 'enqueue'],
    ]);
    expect(recovered.maxMessageId).toBe(2);
  });
});

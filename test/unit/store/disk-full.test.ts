// Disk full on a real filesystem: a 2 MiB tmpfs. Needs root (mount); skipped with
// a clear message where mounting is not permitted.

import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { DiskFullError, isStoreError } from '../../../src/store/errors.js';
import { Journal } from '../../../src/store/journal.js';
import { scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durableResult, message, queueSettings } from './helpers.js';

let mountDir = '';
let mounted = false;
let skipReason = '';

beforeAll(async () => {
  mountDir = await mkdtemp(path.join(os.tmpdir(), 'tandem-diskfull-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mountDir], { stdio: 'pipe' });
    mounted = true;
  } catch (err) {
    skipReason = `cannot mount a tmpfs (${(err as Error).message.split('\n')[0]}); run as root to test disk full`;
  }
});

afterAll(async () => {
  if (mounted) execFileSync('umount', [mountDir]);
  await rmdir(mountDir).catch(() => undefined);
});

describe('journal disk full', () => {
  it('journal disk full - failed records get TANDEM_ERR_DISK_FULL, the segment is cut back, writing resumes once space is freed', async (ctx) => {
    if (!mounted) {
      console.warn(`journal disk full - SKIPPED: ${skipReason}`);
      ctx.skip();
    }
    const dataDir = path.join(mountDir, 'data');
    // Ballast we can delete later to "free space".
    const ballast = path.join(mountDir, 'ballast');
    await writeFile(ballast, Buffer.alloc(512 * 1024));
    const warnings: unknown[] = [];
    const logger = { info() {}, warn: (o: unknown) => void warnings.push(o), error: (o: unknown) => void warnings.push(o) };
    const { journal } = await Journal.open({ materialize: true, dataDir, segmentBytes: 8 * 1024 * 1024, logger, autoCompact: false });
    let lsn = 1_000_000;
    const confirmed: LoggedChange[] = [];
    const append = (e: Omit<LoggedChange, 'lsn'>): LoggedChange => {
      const entry = { ...e, lsn: ++lsn } as LoggedChange;
      journal.append(entry);
      return entry;
    };
    const decl = append({ change: { kind: 'queue-declare', name: 'q', settings: queueSettings() }, durable: true });
    expect(await durableResult(journal, decl.lsn)).toBeUndefined();
    confirmed.push(decl);

    // Fill the disk, one 40 KiB message per flush, until a write fails.
    let failure: Error | undefined;
    let id = 0;
    for (let i = 0; i < 200 && !failure; i++) {
      const e = append({ change: { kind: 'enqueue', queue: 'q', message: message(++id, 'x'.repeat(40 * 1024)) }, durable: true });
      const err = await durableResult(journal, e.lsn);
      if (err) failure = err;
      else confirmed.push(e);
    }
    expect(failure).toBeInstanceOf(DiskFullError);
    expect(isStoreError(failure) && failure.code).toBe('TANDEM_ERR_DISK_FULL');
    expect(failure!.message).toContain(path.join(dataDir, 'journal'));
    // Nothing half-written remains: the segment ends with the last confirmed record.
    const seg = segmentPath(path.join(dataDir, 'journal'), 1);
    const scan = scanSegment(await readFile(seg));
    expect(scan.bad).toBeUndefined();
    expect(scan.records.at(-1)!.entry.lsn).toBe(confirmed.at(-1)!.lsn);

    // Still full: a later batch fails too, every record in it reported.
    const a = append({ change: { kind: 'enqueue', queue: 'q', message: message(++id, 'y'.repeat(40 * 1024)) }, durable: true });
    const b = append({ change: { kind: 'dequeue', queue: 'q', id: 1 }, durable: true });
    const [ea, eb] = await Promise.all([durableResult(journal, a.lsn), durableResult(journal, b.lsn)]);
    expect(ea).toBeInstanceOf(DiskFullError);
    expect(eb).toBeInstanceOf(DiskFullError);

    // Free space: the journal carries on by itself.
    await rm(ballast);
    const c = append({ change: { kind: 'enqueue', queue: 'q', message: message(++id, 'z'.repeat(1024)) }, durable: true });
    const d = append({ change: { kind: 'dequeue', queue: 'q', id: 2 }, durable: true });
    expect(await durableResult(journal, d.lsn)).toBeUndefined();
    confirmed.push(c, d);
    expect(warnings.length).toBeGreaterThan(0);
    await journal.close();
    expect((await stat(seg)).size).toBeGreaterThan(0);

    // Recovery is clean and holds exactly the confirmed records (less what they consumed).
    const recoveryWarnings: unknown[] = [];
    const r = await Journal.open({ materialize: true, dataDir, logger: { info() {}, warn: (o: unknown) => void recoveryWarnings.push(o), error: (o: unknown) => void recoveryWarnings.push(o) }, autoCompact: false });
    await r.journal.close();
    expect(recoveryWarnings).toEqual([]);
    const expectIds = confirmed.filter((e) => e.change.kind === 'enqueue').map((e) => (e.change as { message: { id: number } }).message.id).filter((x) => x !== 2);
    const gotIds = r.recovered.changes.filter((e) => e.change.kind === 'enqueue').map((e) => (e.change as { message: { id: number } }).message.id);
    expect(gotIds).toEqual(expectIds);
    expect(r.recovered.changes.map((e) => e.lsn)).not.toContain(a.lsn);
    expect(r.recovered.changes.map((e) => e.lsn)).not.toContain(b.lsn);
    expect(r.recovered.lastLsn).toBeGreaterThanOrEqual(d.lsn);
  });
});

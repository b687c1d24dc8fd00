// The diverged area of a data dir: journals a backup set aside, instead of
// discarding them, when it rejoined a primary whose log lacks some of its
// changes. Those changes may have been confirmed to clients (by a primary of an
// older epoch, before a broker that lacked them was promoted), so they are kept
// until the operator has looked at them (`tandem ha diverged`).
//
// Layout: <data-dir>/diverged/<epoch>-<first LSN>-<last LSN>/
//           journal/        the backup's journal as it was (readable with the journal code)
//           diverged.json   what is kept and why (DivergedInfo)
//           republished     how many of its messages were re-published so far
//
// A journal is set aside in two steps that survive a crash at any point: when the
// snapshot begins it is renamed to journal.replaced-<time> (daemon.ts) and this
// module writes <that>.diverged.json beside it; once the snapshot is complete it
// is moved into the diverged area rather than deleted. A crash in between puts
// the old journal back (the snapshot starts again, and so does the set-aside).
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { EpochStart } from './epoch-history.js';
import { syncDir } from './journal-marker.js';

export const DIVERGED_DIR = 'diverged';
const INFO_FILE = 'diverged.json';
const REPUBLISHED_FILE = 'republished';
const SNAPSHOT_POINT_FILE = 'ha-snapshot-point';

/** What a diverged journal holds and why it was kept. */
export interface DivergedInfo {
  /** The epoch the backup was in. */
  epoch: number;
  /** Its changes after this LSN are not in the primary's log ... */
  after: number;
  /** ... up to this one. */
  through: number;
  /** The primary's epoch when it sent the snapshot. */
  primaryEpoch: number;
  /** The primary's reason for the snapshot. */
  reason: string;
  /** ISO time of the set-aside. */
  setAsideAt: string;
  /**
   * The snapshot point the journal was loaded at (0: never loaded from a snapshot).
   * Its snapshot records are numbered 1..N below this point, so they count as
   * changes at this point, not at their own numbers.
   */
  snapshotPoint: number;
  /** The backup's epoch history at the time. */
  history: EpochStart[];
}

export interface DivergedSet extends DivergedInfo {
  name: string;
  /** The directory holding journal/ and diverged.json. */
  path: string;
  /** Messages re-published so far (tandem ha diverged republish). */
  republished: number;
}

/** Beside a journal just renamed aside for a snapshot: keep it, not discard it, once the snapshot is in. */
export function noteDivergence(aside: string, info: DivergedInfo): void {
  writeSynced(`${aside}.${INFO_FILE}`, JSON.stringify(info, null, 2));
}

/** Forget the note of a set-aside that will not happen (a snapshot load interrupted: the old journal is back). */
export function dropDivergenceNote(aside: string): void {
  rmSync(`${aside}.${INFO_FILE}`, { force: true });
}

/**
 * A snapshot is complete: move the replaced journal `aside` into the diverged area
 * if a divergence was noted for it. Undefined when there was none (delete it).
 */
export function keepIfDiverged(dataDir: string, aside: string): DivergedSet | undefined {
  const note = `${aside}.${INFO_FILE}`;
  if (!existsSync(note)) return undefined;
  const info = JSON.parse(readFileSync(note, 'utf8')) as DivergedInfo;
  const root = join(dataDir, DIVERGED_DIR);
  mkdirSync(root, { recursive: true });
  const base = `${info.epoch}-${info.after + 1}-${info.through}`;
  let name = base;
  // Bounded by the entries of one directory.
  for (let n = 2; existsSync(join(root, name)); n++) name = `${base}-${n}`;
  const dir = join(root, name);
  mkdirSync(dir);
  renameSync(aside, join(dir, 'journal'));
  renameSync(note, join(dir, INFO_FILE));
  syncDir(dir);
  syncDir(root);
  syncDir(dataDir);
  return { ...info, name, path: dir, republished: 0 };
}

/** Every diverged set of this data dir, oldest first; unreadable entries are skipped. */
export function listDiverged(dataDir: string): DivergedSet[] {
  const root = join(dataDir, DIVERGED_DIR);
  if (!existsSync(root)) return [];
  const out: DivergedSet[] = [];
  for (const name of readdirSync(root).sort()) {
    const set = readDiverged(join(root, name));
    if (set) out.push(set);
  }
  return out.sort((a, b) => a.setAsideAt.localeCompare(b.setAsideAt));
}

/** One diverged set by its directory; undefined when it is not one. */
export function readDiverged(dir: string): DivergedSet | undefined {
  try {
    const info = JSON.parse(readFileSync(join(dir, INFO_FILE), 'utf8')) as DivergedInfo;
    const republished = existsSync(join(dir, REPUBLISHED_FILE)) ? Number(readFileSync(join(dir, REPUBLISHED_FILE), 'utf8').trim()) || 0 : 0;
    return { ...info, name: basename(dir), path: dir, republished };
  } catch {
    return undefined;
  }
}

/** Record that the first `count` messages of the set were re-published and accepted (atomic replace). */
export function recordRepublished(set: DivergedSet, count: number): void {
  const file = join(set.path, REPUBLISHED_FILE);
  writeFileSync(`${file}.tmp`, `${count}\n`);
  renameSync(`${file}.tmp`, file);
}

/** The snapshot point the current journal was loaded at (0: it never was). */
export function readSnapshotPoint(dataDir: string): number {
  try {
    return Number(readFileSync(join(dataDir, SNAPSHOT_POINT_FILE), 'utf8').trim()) || 0;
  } catch {
    return 0;
  }
}

export function writeSnapshotPoint(dataDir: string, lsn: number): void {
  writeSynced(join(dataDir, SNAPSHOT_POINT_FILE), `${lsn}\n`);
}

function writeSynced(file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text);
  const fd = openSync(`${file}.tmp`, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(`${file}.tmp`, file);
}

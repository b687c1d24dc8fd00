// The few file operations the journal writer needs, as an interface so tests can
// count syncs or inject failures. The default runs them on libuv's threadpool
// (callback fs API): a slow fdatasync never blocks the event loop.

import fs from 'node:fs';

export interface JournalIo {
  /**
   * Segment files are opened O_DSYNC: a write returns once its data (and the file
   * size) is on disk, as write + fdatasync would, in one threadpool call instead of
   * two. Each hop back to a busy event loop costs a turn, so this shortens every
   * group commit. When false the writer calls fdatasync after its writes (tests that
   * hold or fail the sync use that).
   */
  readonly syncedWrites?: boolean;
  open(path: string, flags: string | number): Promise<number>;
  /** May write fewer bytes than asked (the caller loops). */
  write(fd: number, buf: Buffer, offset: number, length: number, position: number): Promise<number>;
  fdatasync(fd: number): Promise<void>;
  fsync(fd: number): Promise<void>;
  ftruncate(fd: number, length: number): Promise<void>;
  close(fd: number): Promise<void>;
}

const done =
  <T>(resolve: (v: T) => void, reject: (e: Error) => void) =>
  (err: NodeJS.ErrnoException | null, v?: T): void => {
    if (err) reject(err);
    else resolve(v as T);
  };

export const nodeIo: JournalIo = {
  syncedWrites: true,
  open: (p, flags) => new Promise((res, rej) => fs.open(p, flags, 0o640, done(res, rej))),
  write: (fd, buf, offset, length, position) =>
    new Promise((res, rej) => fs.write(fd, buf, offset, length, position, (err, n) => (err ? rej(err) : res(n)))),
  fdatasync: (fd) => new Promise((res, rej) => fs.fdatasync(fd, (err) => (err ? rej(err) : res()))),
  fsync: (fd) => new Promise((res, rej) => fs.fsync(fd, (err) => (err ? rej(err) : res()))),
  ftruncate: (fd, length) => new Promise((res, rej) => fs.ftruncate(fd, length, (err) => (err ? rej(err) : res()))),
  close: (fd) => new Promise((res, rej) => fs.close(fd, (err) => (err ? rej(err) : res()))),
};

/** fsync a directory so a created, renamed or removed entry survives power loss. */
export async function syncDir(io: JournalIo, dir: string): Promise<void> {
  const fd = await io.open(dir, 'r');
  try {
    await io.fsync(fd);
  } finally {
    await io.close(fd);
  }
}

export function isDiskFull(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

// One broker per data directory. Node has no flock(), so the lock is a file
// created with O_EXCL holding the owner's PID. A lock whose PID no longer runs
// (no /proc/PID, or a PID reused by a process that is not tandemd) is stale,
// left by a crash or a power loss, and is taken over.

import { existsSync, readFileSync } from 'node:fs';
import { open, readFile, unlink } from 'node:fs/promises';
import path from 'node:path';
import { DataDirLockedError } from './errors.js';

export const LOCK_FILE_NAME = 'tandemd.lock';

function pidAlive(pid: number): boolean {
  if (pid === process.pid) return true;
  if (existsSync('/proc/self')) {
    // After a power loss the recorded PID often belongs to some other process by now:
    // only a tandemd holds the lock.
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('tandemd');
    } catch {
      return false;
    }
  }
  // No procfs (not Linux): signal 0 probes the PID without touching it.
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class DataDirLock {
  private released = false;

  private constructor(readonly file: string) {}

  static async acquire(dataDir: string, log?: { warn(o: object, msg?: string): void }): Promise<DataDirLock> {
    const file = path.join(dataDir, LOCK_FILE_NAME);
    for (let attempt = 0; ; attempt++) {
      try {
        const fh = await open(file, 'wx', 0o644);
        try {
          await fh.writeFile(`${process.pid}\n`);
          await fh.sync();
        } finally {
          await fh.close();
        }
        return new DataDirLock(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 2) throw err;
      }
      const text = await readFile(file, 'utf8').catch(() => '');
      const pid = Number.parseInt(text.trim(), 10);
      // An empty or garbled file is a crash between create and write: stale too.
      if (Number.isInteger(pid) && pid > 0 && pidAlive(pid)) throw new DataDirLockedError(file, pid);
      log?.warn({ lockFile: file, stalePid: Number.isNaN(pid) ? null : pid }, 'taking over a stale data directory lock');
      await unlink(file).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
  }

  /** Remove the lock file, if it is still ours. Idempotent. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    const text = await readFile(this.file, 'utf8').catch(() => '');
    if (Number.parseInt(text.trim(), 10) === process.pid) await unlink(this.file).catch(() => undefined);
  }
}

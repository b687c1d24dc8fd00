// One broker per data directory. Node has no flock(), so the lock is a file
// created with O_EXCL holding the owner's PID. A lock whose PID no longer runs
// (no /proc/PID, or a PID reused by a process that is not tandemd) is stale,
// left by a crash or a power loss, and is taken over.
//
// Taking over is read, unlink, create: two brokers starting at once on a stale
// lock could both read it stale, and the second unlink the first one's new lock
// (1 in 12 simultaneous starts ran two brokers on one journal). So the whole
// acquisition runs under a mutex the kernel keeps for us: a listening unix socket
// in the abstract namespace, named after the directory's device and inode. Only
// one process can bind a name, and the kernel frees it when that process dies,
// however it dies, so the mutex itself is never stale. (Abstract names are per
// network namespace: brokers in different namespaces sharing one directory are
// still kept apart by the lock file, outside of that race.)

import { existsSync, readFileSync } from 'node:fs';
import { open, readFile, stat, unlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
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

/** Bind the directory's abstract socket name: the server, or undefined if another process has it. */
async function bindDirMutex(dataDir: string): Promise<Server | undefined> {
  const st = await stat(dataDir);
  const name = `\0tandem-data-dir:${st.dev}:${st.ino}`;
  const server = createServer((socket) => socket.destroy());
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(undefined) : reject(err)));
    server.listen({ path: name, exclusive: true }, () => {
      server.unref(); // holding a lock is no reason to keep the process alive
      resolve(server);
    });
  });
}

async function lockOwner(file: string): Promise<number> {
  const pid = Number.parseInt((await readFile(file, 'utf8').catch(() => '')).trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : 0;
}

export class DataDirLock {
  private released = false;

  private constructor(
    readonly file: string,
    private readonly mutex: Server | undefined,
  ) {}

  static async acquire(dataDir: string, log?: { warn(o: object, msg?: string): void }): Promise<DataDirLock> {
    const file = path.join(dataDir, LOCK_FILE_NAME);
    const mutex = process.platform === 'linux' ? await bindDirMutex(dataDir) : undefined;
    if (process.platform === 'linux' && !mutex) throw new DataDirLockedError(file, await lockOwner(file));
    try {
      return new DataDirLock(await DataDirLock.takeFile(file, log), mutex);
    } catch (err) {
      mutex?.close();
      throw err;
    }
  }

  private static async takeFile(file: string, log?: { warn(o: object, msg?: string): void }): Promise<string> {
    for (let attempt = 0; ; attempt++) {
      try {
        const fh = await open(file, 'wx', 0o644);
        try {
          await fh.writeFile(`${process.pid}\n`);
          await fh.sync();
        } finally {
          await fh.close();
        }
        return file;
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

  /** Remove the lock file, if it is still ours, then free the mutex. Idempotent. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    if ((await lockOwner(this.file)) === process.pid) await unlink(this.file).catch(() => undefined);
    this.mutex?.close();
  }
}

// Small filesystems for tests of a full disk: a tmpfs mounted for one test (root
// only; the caller skips, saying so, where mounting is refused) and a way to fill it.
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmdirSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Mount a tmpfs of `size` (e.g. '6m') on a new directory; undefined (and why) where mounting is refused. */
export function mountTmpfs(prefix: string, size: string): { dir: string; unmount: () => void } | { refused: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    rmdirSync(dir);
    return { refused: `cannot mount a tmpfs (${(err as Error).message.split('\n')[0]}); run as root to test a full disk` };
  }
  return {
    dir,
    unmount: () => {
      execFileSync('umount', [dir]);
      rmdirSync(dir);
    },
  };
}

/** Fill the filesystem holding `file` with it, until a write finds no space. */
export function fillFilesystem(file: string): void {
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(64 * 1024);
  try {
    for (let i = 0; i < 100_000; i++) writeSync(fd, chunk);
    throw new Error(`${file}: 6 GiB written and still room: not the small filesystem a test of a full disk needs`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    closeSync(fd);
  }
}

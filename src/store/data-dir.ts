// The data directory must exist and be writable before anything is recovered. Node's
// recursive mkdir reports ENOENT for a directory it cannot create on a read-only
// filesystem, which sent operators looking for a missing path; say what is wrong.
import { accessSync, constants, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';

export class DataDirError extends Error {
  readonly code = 'TANDEM_ERR_DATA_DIR';
  override readonly name = 'DataDirError';
}

/** Create `dir` if needed and check that it can be written, or throw a DataDirError saying why. */
export function prepareDataDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw new DataDirError(`cannot create the data directory ${dir}: ${whyNotWritable(dir) ?? (err as Error).message}`, { cause: err });
  }
  const why = whyNotWritable(dir);
  if (why) throw new DataDirError(`the data directory ${dir} cannot be written: ${why}`);
}

/** Why the directory (or, if it does not exist, its nearest existing parent) is not writable. */
function whyNotWritable(dir: string): string | undefined {
  let at = path.resolve(dir);
  while (!existsSync(at) && path.dirname(at) !== at) at = path.dirname(at);
  try {
    accessSync(at, constants.W_OK | constants.X_OK);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EROFS') return `${at} is on a read-only filesystem`;
    if (code === 'EACCES' || code === 'EPERM') return `${at} is not writable by this user (uid ${process.getuid?.() ?? '?'}); check its owner and mode`;
    return `${at}: ${(err as Error).message}`;
  }
}

// Files that hold secrets (password files, the users file, a config file with a
// password in it): read them, and say when their mode lets every local user read them.
import { statSync } from 'node:fs';
import { ConfigError } from './config.js';
import { MAX_SECRET_FILE_BYTES, readBoundedText, type FileReadError } from './bounded-read.js';

/** The password in a file: its first line, without the line end. */
export function readSecretFile(path: string, what: string): string {
  let text: string;
  try {
    text = readBoundedText(path, MAX_SECRET_FILE_BYTES, what);
  } catch (err) {
    const e = err as FileReadError;
    throw new ConfigError(e.errno === 'EACCES' ? `${what} ${path}: permission denied (the broker runs as the tandem user: make the file 0640 root:tandem)` : e.message);
  }
  const password = text.split(/\r?\n/, 1)[0] ?? '';
  if (password === '') throw new ConfigError(`${what} ${path} is empty: put the password on its first line`);
  return password;
}

/** One line per file that exists and is readable by others ("o+r"). */
export function secretFileProblems(files: Array<{ path: string; what: string }>): string[] {
  const out: string[] = [];
  for (const { path, what } of files) {
    let mode: number;
    try {
      mode = statSync(path).mode;
    } catch {
      continue;
    }
    if ((mode & 0o004) !== 0) out.push(`${what} ${path} is readable by every user (mode ${(mode & 0o777).toString(8).padStart(4, '0')}): chmod 0640 and chgrp tandem it`);
  }
  return out;
}

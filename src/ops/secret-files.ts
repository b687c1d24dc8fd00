// Files that hold secrets (password files, the users file, a config file with a
// password in it): read them, and say when their mode lets every local user read them.
import { statSync } from 'node:fs';
import { ConfigError } from './config.js';
import type { FileReadError } from './bounded-read.js';
import { readPasswordFile } from './password-file.js';

/** The password in a file: its first line, without the line end (password-file.ts says why only that). */
export function readSecretFile(path: string, what: string): string {
  try {
    return readPasswordFile(path, what);
  } catch (err) {
    const e = err as FileReadError;
    throw new ConfigError(e.errno === 'EACCES' ? `${what} ${path}: permission denied (the broker runs as the tandem user: make the file 0640 root:tandem)` : e.message);
  }
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

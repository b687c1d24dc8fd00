// A file the broker re-reads when it changes (the users file, the ACL file): read at
// start, where a bad file is an error the start fails on; later, a change that does not
// parse is logged and the last good copy stays in force, so a half-saved edit locks
// nobody out.
import { statSync } from 'node:fs';
import { readBoundedText, type FileReadError } from './bounded-read.js';
import type { Logger } from './log.js';

/**
 * Hundreds of thousands of users or ACL rules; past it the path is surely wrong
 * (/dev/zero would fill the heap, at start or at any later access to the file).
 */
export const MAX_WATCHED_FILE_BYTES = 64 * 1024 * 1024;

export class WatchedFile<T> {
  private current: T;
  /** Identity of the version read (mtime, size, inode): a change to any of them is a new version. */
  private version: string;

  constructor(
    readonly path: string,
    private readonly parse: (text: string, path: string) => T,
    private readonly absent: () => T,
    private readonly what: string,
    private readonly log?: Logger,
  ) {
    this.version = versionOf(path);
    this.current = this.read();
  }

  /** The file's content as last understood (checked for a change first). */
  get value(): T {
    const version = versionOf(this.path);
    if (version !== this.version) {
      this.version = version;
      try {
        this.current = this.read();
      } catch (err) {
        this.log?.error({ file: this.path, err: (err as Error).message }, `the ${this.what} changed and no longer parses: still using the last good copy until it is fixed`);
      }
    }
    return this.current;
  }

  private read(): T {
    let text: string;
    try {
      text = readBoundedText(this.path, MAX_WATCHED_FILE_BYTES, `the ${this.what}`);
    } catch (err) {
      if ((err as FileReadError).errno === 'ENOENT') return this.absent();
      throw err;
    }
    return this.parse(text, this.path);
  }
}

function versionOf(path: string): string {
  try {
    const st = statSync(path);
    return `${st.mtimeMs}:${st.size}:${st.ino}`;
  } catch {
    return 'absent';
  }
}

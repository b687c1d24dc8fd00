// Reading an operator's file (tandemd.conf, a password file, the users file) as text,
// with a size limit and a UTF-8 check; TLS files as bytes, with a size limit. readFileSync
// alone reads whatever the path gives: /dev/zero or a 100 MB file filled the heap (GBs)
// before anything was said, a directory failed with a bare EISDIR, and bytes that are not
// UTF-8 became U+FFFD, so a password file with a Latin-1 byte gave a password that
// silently never matched.
// A FIFO or a process substitution (`--config <(...)`) is read like a file, up to the limit.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

export class FileReadError extends Error {
  override name = 'FileReadError';
  constructor(
    message: string,
    /** The errno code when the file could not be opened or read (ENOENT, EACCES, ...). */
    readonly errno?: string,
  ) {
    super(message);
  }
}

/** A password is one line; a file longer than this is not a password file (/dev/zero, a key). */
export const MAX_SECRET_FILE_BYTES = 64 * 1024;

/** Bytes read per read(2): small enough not to matter, large enough for few calls. */
const CHUNK = 64 * 1024;

/**
 * The file's bytes as text, or a FileReadError whose message names `what`, the path and
 * what is wrong. At most `maxBytes` are read: a longer file is refused (never half taken).
 */
export function readBoundedText(path: string | number, maxBytes: number, what: string): string {
  const shown = typeof path === 'number' ? 'standard input' : path;
  return utf8Text(readBoundedBytes(path, maxBytes, what), what, shown);
}

/**
 * TLS files (certificates, keys, CA bundles, CRLs): a PEM key or certificate is a few KiB,
 * a CA bundle of every public CA about 200 KiB. Past this the path is surely wrong.
 */
export const MAX_TLS_FILE_BYTES = 4 * 1024 * 1024;

/**
 * A CRL lists every certificate its CA revoked and not yet expired: a private CA's is
 * KiBs, 16 MiB is some 500,000 entries. Each SIGHUP parses the file whole, twice.
 */
export const MAX_CRL_FILE_BYTES = 16 * 1024 * 1024;

/**
 * The file's bytes (readBoundedText without the UTF-8 check: DER, or PEM that OpenSSL reads
 * as bytes). The same refusals: a directory, a file past `maxBytes`, one that cannot be read.
 */
export function readBoundedBytes(path: string | number, maxBytes: number, what: string): Buffer {
  const shown = typeof path === 'number' ? 'standard input' : path;
  let fd: number;
  try {
    fd = typeof path === 'number' ? path : openSync(path, 'r');
  } catch (err) {
    throw failure(err, what, shown);
  }
  try {
    if (typeof path !== 'number' && fstatSync(fd).isDirectory()) throw new FileReadError(`${what} ${shown} is a directory, not a file`, 'EISDIR');
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.min(CHUNK, maxBytes + 1 - total));
      let n: number;
      try {
        n = readSync(fd, chunk, 0, chunk.length, null);
      } catch (err) {
        // stdin that is a non-blocking pipe or TTY with nothing yet: wait for it as cat would.
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
          continue;
        }
        throw failure(err, what, shown);
      }
      if (n === 0) break;
      chunks.push(chunk.subarray(0, n));
      total += n;
      if (total > maxBytes) throw new FileReadError(`${what} ${shown} is larger than ${sizeText(maxBytes)}: is it the right file?`, 'EFBIG');
    }
    return Buffer.concat(chunks, total);
  } finally {
    if (typeof path !== 'number') closeSync(fd);
  }
}

function utf8Text(bytes: Buffer, what: string, shown: string): string {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    // Name the line, never its content: the file may hold a password.
    const line = lineOfFirstBadByte(bytes);
    throw new FileReadError(`${what} ${shown} is not UTF-8 text (line ${line} holds a byte that is not): save it as UTF-8`, 'EILSEQ');
  }
}

/** The 1-based line of the first byte sequence that is not UTF-8. */
function lineOfFirstBadByte(bytes: Buffer): number {
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let start = 0;
  let line = 1;
  for (let i = 0; i <= bytes.length; i++) {
    if (i < bytes.length && bytes[i] !== 0x0a) continue;
    try {
      decoder.decode(bytes.subarray(start, i));
    } catch {
      return line;
    }
    line++;
    start = i + 1;
  }
  return line;
}

function failure(err: unknown, what: string, shown: string): FileReadError {
  const e = err as NodeJS.ErrnoException;
  if (err instanceof FileReadError) return err;
  if (e.code === 'EISDIR') return new FileReadError(`${what} ${shown} is a directory, not a file`, e.code);
  if (e.code === 'ENOENT') return new FileReadError(`${what} ${shown} does not exist`, e.code);
  if (e.code === 'EACCES') return new FileReadError(`${what} ${shown}: permission denied`, e.code);
  return new FileReadError(`${what} ${shown}: ${e.message}`, e.code);
}

function sizeText(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MiB` : bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} bytes`;
}

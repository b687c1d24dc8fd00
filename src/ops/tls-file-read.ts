// TLS files (tls-cert, tls-key, tls-ca, tls-crl and their ha-/dr-/CLI twins) read bounded:
// readFileSync took /dev/zero until the heap was full, and a directory gave a bare EISDIR.
// Bytes, not text: OpenSSL reads PEM as bytes, and a CRL may be DER.
import { FileReadError, MAX_CRL_FILE_BYTES, MAX_TLS_FILE_BYTES, readBoundedBytes } from './bounded-read.js';

/**
 * The file's bytes, or a FileReadError naming `key` and the path: `cannot read KEY PATH:
 * ENOENT` (the errno of open or read), `KEY PATH is a directory, not a file`, or `KEY PATH is
 * larger than 4 MiB` (16 MiB for a CRL file).
 */
export function readTlsFile(path: string, key: string, kind: 'pem' | 'crl' = 'pem'): Buffer {
  try {
    return readBoundedBytes(path, kind === 'crl' ? MAX_CRL_FILE_BYTES : MAX_TLS_FILE_BYTES, key);
  } catch (err) {
    const e = err as FileReadError;
    if (e.errno === 'EISDIR' || e.errno === 'EFBIG' || !(err instanceof FileReadError)) throw err;
    throw new FileReadError(`cannot read ${key} ${path}: ${e.errno ?? e.message}`, e.errno);
  }
}

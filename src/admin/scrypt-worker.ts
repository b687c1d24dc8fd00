// The body of the password-hashing thread (password-hasher.ts): scrypt runs here,
// synchronously, so it never takes one of libuv's pool threads from the journal.
import { scryptSync } from 'node:crypto';
import { parentPort } from 'node:worker_threads';

export interface ScryptRequest {
  id: number;
  password: string;
  salt: Uint8Array;
  keylen: number;
  N: number;
  r: number;
  p: number;
}

export type ScryptReply = { id: number; key: Uint8Array } | { id: number; error: string };

parentPort!.on('message', (m: ScryptRequest) => {
  try {
    const key = scryptSync(m.password, m.salt, m.keylen, { N: m.N, r: m.r, p: m.p, maxmem: 256 * m.N * m.r + 1024 * 1024 });
    parentPort!.postMessage({ id: m.id, key } satisfies ScryptReply);
  } catch (err) {
    parentPort!.postMessage({ id: m.id, error: (err as Error).message } satisfies ScryptReply);
  }
});

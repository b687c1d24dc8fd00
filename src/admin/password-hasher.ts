// scrypt for the broker's logins on a thread of its own. Node's crypto.scrypt runs on
// libuv's thread pool (4 threads by default), the pool the journal's O_DSYNC writes
// also wait for: a flood of logins with wrong passwords held every durable message
// behind a hash. One worker thread: logins queue behind each other (the login
// throttle keeps that queue short), the journal never does.
import { Worker } from 'node:worker_threads';
import type { ScryptReply, ScryptRequest } from './scrypt-worker.js';

export type ScryptFn = (password: string, salt: Buffer, keylen: number, params: { N: number; r: number; p: number }) => Promise<Buffer>;

export class PasswordHasher {
  private worker: Worker | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve(key: Buffer): void; reject(err: Error): void }>();

  readonly scrypt: ScryptFn = (password, salt, keylen, params) =>
    new Promise<Buffer>((resolve, reject) => {
      const id = ++this.nextId;
      this.pending.set(id, { resolve, reject });
      const request: ScryptRequest = { id, password, salt, keylen, ...params };
      this.thread().postMessage(request);
    });

  /** Stop the thread; hashes still queued fail. */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    await w?.terminate();
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(new URL('./scrypt-worker.js', import.meta.url));
    // Never what keeps the broker alive.
    worker.unref();
    worker.on('message', (m: ScryptReply) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if ('key' in m) p.resolve(Buffer.from(m.key));
      else p.reject(new Error(m.error));
    });
    const fail = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`password hashing thread exited (${code})`)));
    this.worker = worker;
    return worker;
  }
}

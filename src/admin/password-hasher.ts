// scrypt for the broker's logins on a thread of its own. Node's crypto.scrypt runs on
// libuv's thread pool (4 threads by default), the pool the journal's O_DSYNC writes
// also wait for: a flood of logins with wrong passwords held every durable message
// behind a hash. One worker thread: logins queue behind each other, the journal never
// does.
//
// The queue is kept here, not in the thread's message port, and the thread is given
// one hash at a time: a request whose signal aborts (its client's socket is gone) is
// dropped before it costs a hash. Otherwise clients that send a PLAIN init and leave
// at once queue hashes faster than one thread does them (~50 ms each at N=16384), and
// every queued one keeps its connection and the bytes it sent: the million-frame fuzz
// ended with 1,700 such connections (bench/README.md, frame fuzzing).
import { Worker } from 'node:worker_threads';
import type { ScryptReply, ScryptRequest } from './scrypt-worker.js';

export type ScryptFn = (password: string, salt: Buffer, keylen: number, params: { N: number; r: number; p: number }, signal?: AbortSignal) => Promise<Buffer>;

interface Job {
  request: ScryptRequest;
  resolve(key: Buffer): void;
  reject(err: Error): void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/** The error an abandoned hash rejects with (its caller asked for it to stop). */
export function abandoned(): Error {
  return new DOMException('the hash was abandoned', 'AbortError');
}

export class PasswordHasher {
  private worker: Worker | undefined;
  private nextId = 0;
  /** Waiting for the thread, oldest first. */
  private readonly queue: Job[] = [];
  /** The one the thread is hashing now. */
  private running: Job | undefined;

  readonly scrypt: ScryptFn = (password, salt, keylen, params, signal) =>
    new Promise<Buffer>((resolve, reject) => {
      if (signal?.aborted) return reject(abandoned());
      const job: Job = { request: { id: ++this.nextId, password, salt, keylen, ...params }, resolve, reject, signal, onAbort: undefined };
      if (signal) {
        job.onAbort = () => this.abandon(job);
        signal.addEventListener('abort', job.onAbort, { once: true });
      }
      this.queue.push(job);
      this.next();
    });

  /** Hashes asked for and not finished (the one running included). */
  get backlog(): number {
    return this.queue.length + (this.running ? 1 : 0);
  }

  /** Stop the thread; hashes still queued fail. */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.failAll(new Error('the password hashing thread was stopped'));
    await w?.terminate();
  }

  private next(): void {
    if (this.running || this.queue.length === 0) return;
    const job = this.queue.shift()!;
    this.running = job;
    this.thread().postMessage(job.request);
  }

  /** A caller gave up: a queued job goes unhashed; a running one's answer is thrown away. */
  private abandon(job: Job): void {
    const at = this.queue.indexOf(job);
    if (at >= 0) this.queue.splice(at, 1);
    else if (this.running !== job) return;
    // The thread still finishes a running hash; its reply then finds no job and starts the next.
    job.reject(abandoned());
  }

  private settle(job: Job): void {
    if (job.signal && job.onAbort) job.signal.removeEventListener('abort', job.onAbort);
  }

  private failAll(err: Error): void {
    const jobs = [...(this.running ? [this.running] : []), ...this.queue.splice(0)];
    this.running = undefined;
    for (const job of jobs) {
      this.settle(job);
      job.reject(err);
    }
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(new URL('./scrypt-worker.js', import.meta.url));
    // Never what keeps the broker alive.
    worker.unref();
    worker.on('message', (m: ScryptReply) => {
      const job = this.running;
      if (!job || job.request.id !== m.id) return;
      this.running = undefined;
      this.settle(job);
      // Settling a promise twice is a no-op: an abandoned job was rejected already.
      if ('key' in m) job.resolve(Buffer.from(m.key));
      else job.reject(new Error(m.error));
      this.next();
    });
    const fail = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.failAll(err);
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`password hashing thread exited (${code})`)));
    this.worker = worker;
    return worker;
  }
}

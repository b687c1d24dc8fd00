// The broker's password-hashing thread: hashes queue here and go to the thread one at
// a time, so one whose caller gave up (its client's socket is gone) costs nothing.
// The thread runs built JavaScript (dist/admin/scrypt-worker.js): `npm run build` first.
import { scryptSync } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { PasswordHasher } from '../../../dist/admin/password-hasher.js';

// Real cost: the queue behind one hash is what is measured.
const params = { N: 16384, r: 8, p: 1 };
const salt = Buffer.alloc(16, 7);
let hasher: PasswordHasher | undefined;
afterEach(async () => {
  await hasher?.close();
  hasher = undefined;
});

describe('password hasher', () => {
  it('password hasher - a hash gives the key scrypt gives', async () => {
    hasher = new PasswordHasher();
    const key = await hasher.scrypt('secret', salt, 32, params);
    expect(key.equals(scryptSync('secret', salt, 32, { ...params, maxmem: 64 * 1024 * 1024 }))).toBe(true);
    expect(hasher.backlog).toBe(0);
  });

  it('password hasher - abandoned hashes leave the queue at once, unhashed, and the next live one is not kept behind them', async () => {
    hasher = new PasswordHasher();
    const first = hasher.scrypt('first', salt, 32, params);
    const gone = new AbortController();
    const abandoned = Array.from({ length: 40 }, (_, i) => hasher!.scrypt(`guess-${i}`, salt, 32, params, gone.signal));
    const outcomes = Promise.allSettled(abandoned);
    expect(hasher.backlog).toBe(41);
    gone.abort();
    // Only the hash the thread already has is left.
    expect(hasher.backlog).toBe(1);
    const settled = await outcomes;
    expect(settled.every((s) => s.status === 'rejected' && (s.reason as Error).name === 'AbortError')).toBe(true);
    await first;
    const started = performance.now();
    await hasher.scrypt('live', salt, 32, params);
    const oneHash = performance.now() - started;
    // 40 hashes would take 40 times one; the next live one waits for none of them.
    expect(hasher.backlog).toBe(0);
    const again = performance.now();
    await hasher.scrypt('again', salt, 32, params);
    expect(performance.now() - again).toBeLessThan(Math.max(10 * oneHash, 2000));
  });

  it('password hasher - a hash abandoned while the thread runs it rejects at once; the thread goes on with the next', async () => {
    hasher = new PasswordHasher();
    const gone = new AbortController();
    const running = hasher.scrypt('running', salt, 32, params, gone.signal);
    const next = hasher.scrypt('next', salt, 32, params);
    gone.abort();
    await expect(running).rejects.toThrow(/abandoned/);
    const key = await next;
    expect(key.equals(scryptSync('next', salt, 32, { ...params, maxmem: 64 * 1024 * 1024 }))).toBe(true);
  });
});

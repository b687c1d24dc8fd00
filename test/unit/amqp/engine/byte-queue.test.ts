// The engine's input queue (byte-queue.ts) against a plain concatenation of what
// was pushed: bytes cut into random chunks (empty ones too) and read back in
// random units, in place (contiguous + skip) or taken, give exactly the bytes
// pushed, in order, whether a unit lies in one chunk or straddles several.
import { describe, expect, it } from 'vitest';
import { ByteQueue } from '../../../../src/amqp/engine/byte-queue.js';
import { prng } from '../../../../src/util/prng.js';

describe('engine byte queue', () => {
  it('gives back what was pushed, read in place or taken, across chunk boundaries', () => {
    const rnd = prng(3);
    for (let run = 0; run < 200; run++) {
      const all = Buffer.from(Array.from({ length: 2000 }, () => Math.floor(rnd() * 256)));
      const q = new ByteQueue();
      let pushed = 0;
      let read = 0;
      const out: Buffer[] = [];
      while (read < all.length) {
        if (pushed < all.length && (q.length === 0 || rnd() < 0.5)) {
          const n = Math.min(all.length - pushed, Math.floor(rnd() * 60));
          q.push(all.subarray(pushed, pushed + n));
          pushed += n;
          continue;
        }
        const n = 1 + Math.floor(rnd() * Math.min(q.length, 90));
        if (rnd() < 0.5) {
          const at = q.contiguous(n);
          out.push(Buffer.from(q.head.subarray(at, at + n)));
          q.skip(n);
        } else {
          out.push(Buffer.from(q.take(n)));
        }
        read += n;
        expect(q.length).toBe(pushed - read);
      }
      expect(Buffer.concat(out).equals(all)).toBe(true);
    }
  });
});

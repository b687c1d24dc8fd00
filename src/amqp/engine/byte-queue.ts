// The bytes read from a socket and not yet consumed, as the chunks they came in.
// A unit (protocol header or frame) that lies inside one chunk is handed out as a
// view of it, with no copy; only a unit that straddles reads is gathered, once.

export class ByteQueue {
  private chunks: Buffer[] = [];
  /** Where the first chunk's unread bytes start. */
  private offset = 0;
  private total = 0;

  get length(): number {
    return this.total;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.total += chunk.length;
  }

  /** The first `n` bytes (n <= length), contiguous, removed from the queue. */
  take(n: number): Buffer {
    const first = this.chunks[0]!;
    const inFirst = first.length - this.offset;
    if (inFirst >= n) {
      const out = first.subarray(this.offset, this.offset + n);
      if (inFirst === n) {
        this.chunks.shift();
        this.offset = 0;
      } else {
        this.offset += n;
      }
      this.total -= n;
      return out;
    }
    return this.gather(n, true);
  }

  /**
   * Where the first `n` bytes (n <= length) lie contiguous: in `head` from the
   * returned offset. They are gathered into one chunk first if they straddle reads.
   * The bytes stay queued (skip() removes them): a frame is read in place, with no
   * view made of it.
   */
  contiguous(n: number): number {
    const first = this.chunks[0]!;
    if (first.length - this.offset < n) {
      const joined = this.gather(n, true);
      // The chunk the gathered bytes ended in starts where they did: cut it there, as offset now means the joined chunk's.
      if (this.offset > 0) this.chunks[0] = this.chunks[0]!.subarray(this.offset);
      this.chunks.unshift(joined);
      this.offset = 0;
      this.total += n;
    }
    return this.offset;
  }

  /** The chunk contiguous() spoke of. */
  get head(): Buffer {
    return this.chunks[0]!;
  }

  /** Drop the first `n` bytes (n <= length) that contiguous(n) made one run. */
  skip(n: number): void {
    const first = this.chunks[0]!;
    this.offset += n;
    this.total -= n;
    if (this.offset === first.length) {
      this.chunks.shift();
      this.offset = 0;
    }
  }

  /** Everything left, as the chunks it is in (to hand back to another reader). */
  drain(): Buffer[] {
    const out = this.chunks.map((c, i) => (i === 0 ? c.subarray(this.offset) : c));
    this.chunks = [];
    this.offset = 0;
    this.total = 0;
    return out;
  }

  private gather(n: number, consume: boolean): Buffer {
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    let index = 0;
    let offset = this.offset;
    while (filled < n) {
      const c = this.chunks[index]!;
      const take = Math.min(c.length - offset, n - filled);
      c.copy(out, filled, offset, offset + take);
      filled += take;
      offset += take;
      if (offset === c.length) {
        index++;
        offset = 0;
      }
    }
    if (consume) {
      this.chunks.splice(0, index);
      this.offset = offset;
      this.total -= n;
    }
    return out;
  }
}

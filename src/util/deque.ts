// A growable ring buffer: O(1) push/shift at both ends, which queues do millions
// of times; Array.prototype.shift is O(n) once arrays get large.
export class Deque<T> {
  private items: Array<T | undefined>;
  private head = 0;
  private count = 0;

  constructor(initialCapacity = 16) {
    this.items = new Array(initialCapacity);
  }

  get length(): number {
    return this.count;
  }

  push(item: T): void {
    if (this.count === this.items.length) this.grow();
    this.items[(this.head + this.count) % this.items.length] = item;
    this.count++;
  }

  unshift(item: T): void {
    if (this.count === this.items.length) this.grow();
    this.head = (this.head - 1 + this.items.length) % this.items.length;
    this.items[this.head] = item;
    this.count++;
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count--;
    return item;
  }

  peek(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  at(index: number): T | undefined {
    if (index < 0 || index >= this.count) return undefined;
    return this.items[(this.head + index) % this.items.length];
  }

  /** Insert at a position (0 = front); O(distance to the nearer end). */
  insertAt(index: number, item: T): void {
    if (index <= 0) return this.unshift(item);
    if (index >= this.count) return this.push(item);
    if (this.count === this.items.length) this.grow();
    const cap = this.items.length;
    if (index < this.count / 2) {
      this.head = (this.head - 1 + cap) % cap;
      for (let i = 0; i < index; i++) {
        this.items[(this.head + i) % cap] = this.items[(this.head + i + 1) % cap];
      }
    } else {
      for (let i = this.count; i > index; i--) {
        this.items[(this.head + i) % cap] = this.items[(this.head + i - 1) % cap];
      }
    }
    this.items[(this.head + index) % cap] = item;
    this.count++;
  }

  /** Remove and return the item at a position; O(distance to the nearer end). */
  removeAt(index: number): T | undefined {
    if (index < 0 || index >= this.count) return undefined;
    if (index === 0) return this.shift();
    const cap = this.items.length;
    const item = this.items[(this.head + index) % cap];
    if (index < this.count / 2) {
      for (let i = index; i > 0; i--) {
        this.items[(this.head + i) % cap] = this.items[(this.head + i - 1) % cap];
      }
      this.items[this.head] = undefined;
      this.head = (this.head + 1) % cap;
    } else {
      for (let i = index; i < this.count - 1; i++) {
        this.items[(this.head + i) % cap] = this.items[(this.head + i + 1) % cap];
      }
      this.items[(this.head + this.count - 1) % cap] = undefined;
    }
    this.count--;
    return item;
  }

  /** First index whose key is >= key, for a deque kept sorted by key. */
  lowerBound(key: number, keyOf: (item: T) => number): number {
    let lo = 0;
    let hi = this.count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (keyOf(this.at(mid) as T) < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  clear(): void {
    this.items = new Array(16);
    this.head = 0;
    this.count = 0;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = 0; i < this.count; i++) yield this.items[(this.head + i) % this.items.length] as T;
  }

  private grow(): void {
    const next = new Array<T | undefined>(Math.max(1, this.items.length * 2));
    for (let i = 0; i < this.count; i++) next[i] = this.items[(this.head + i) % this.items.length];
    this.items = next;
    this.head = 0;
  }
}

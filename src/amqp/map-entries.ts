// The entries of one encoded AMQP map, walked where they lie: the one bounded walk the
// readers of a message's maps share (application-properties for dedup keys and
// selectors, message-annotations for delivery times and for merging added annotations).
//
// A map (types spec 1.6.23) is map8 (0xc1: 1-byte size and count) or map32 (0xd1: 4-byte
// ones); its count is the number of elements, keys and values alike, so twice the
// entries. What a peer sends is checked before anything is read by it:
//
//   - null is an empty map (a section's value may be null: proton-j writes
//     `new ApplicationProperties(null)` so, and a selector's `x IS NULL` must hold);
//   - any other type (a list, a described value) is not a map;
//   - the value must fit the bytes, and its size hold its count field;
//   - the count is even, and no more than the bytes left (every element takes at least
//     its constructor byte), so a walk is bounded by the map's bytes before it starts;
//   - each key and each value ends within the map (a count that says more than the map
//     holds would read the next section's bytes as entries);
//   - the entries fill the map exactly, checked when the walk reaches its end.
//
// Anything else is `problem`, the reason, and the walk ends: never a throw. Each reader
// has one walker of its own, made once: the walk makes no object per entry or per message.
import { encodedValueSize } from './encoded-value.js';

const MAP8 = 0xc1;
const MAP32 = 0xd1;
const NULL = 0x40;

export class MapEntries {
  /** Where the entry next() stepped to starts: its key. */
  keyAt = 0;
  /** Where that entry's value starts (its key ends here). */
  valueAt = 0;
  /** Where that entry's value ends (the next entry starts here). */
  valueEnd = 0;
  /** Why the map was refused (undefined: it was not); set by start or next. */
  problem: string | undefined;

  /** The map's bytes while a walk is on, dropped at its end (one its reader left by a throw: at the next start), so a walker keeps no message alive. */
  private bytes: Buffer | undefined;
  private what = '';
  private end = 0;
  private left = 0;

  /**
   * Starts a walk over the map at `at` in `bytes` (`what` names it in a problem):
   * true, or false with `problem` saying why it is no well-formed map's head.
   */
  start(bytes: Buffer, at: number, what: string): boolean {
    this.bytes = undefined;
    this.what = what;
    this.problem = undefined;
    const code = bytes[at];
    if (code === NULL) return this.empty(bytes, at + 1);
    if (code !== MAP8 && code !== MAP32) return this.refuse(`${what} is not a map (type 0x${(code ?? 0).toString(16)})`);
    let end: number;
    try {
      end = at + encodedValueSize(bytes, at);
    } catch (err) {
      return this.refuse(`${what} does not read: ${(err as Error).message}`);
    }
    const first = at + (code === MAP8 ? 3 : 9);
    if (first > end) return this.refuse(`${what} is too short for its count`);
    const count = code === MAP8 ? bytes[at + 2]! : bytes.readUInt32BE(at + 5);
    if (count % 2 !== 0) return this.refuse(`${what} has an odd number of elements`);
    if (count > end - first) return this.refuse(`${what} holds fewer entries than its count says`);
    this.bytes = bytes;
    this.end = end;
    this.left = count / 2;
    this.valueEnd = first;
    return true;
  }

  /**
   * Steps to the next entry (keyAt, valueAt, valueEnd): false when there is none, at the
   * map's end or at a problem (`problem` then says which). Bounded: at most the map's
   * count halved, each step past at least two of its bytes.
   */
  next(): boolean {
    const bytes = this.bytes;
    if (bytes === undefined) return false;
    const keyAt = this.valueEnd;
    if (this.left === 0) {
      if (keyAt !== this.end) return this.refuse(`${this.what} holds more than its count says`);
      this.bytes = undefined;
      return false;
    }
    if (keyAt >= this.end) return this.refuse(`${this.what} holds fewer entries than its count says`);
    let valueAt: number;
    let valueEnd: number;
    try {
      valueAt = keyAt + encodedValueSize(bytes, keyAt);
      // A key that ends at the map's end has no value in it.
      valueEnd = valueAt < this.end ? valueAt + encodedValueSize(bytes, valueAt) : Number.POSITIVE_INFINITY;
    } catch (err) {
      return this.refuse(`${this.what} does not read: ${(err as Error).message}`);
    }
    if (valueEnd > this.end) return this.refuse(`${this.what} holds fewer entries than its count says`);
    this.keyAt = keyAt;
    this.valueAt = valueAt;
    this.valueEnd = valueEnd;
    this.left--;
    return true;
  }

  /**
   * Steps over the entries left, as next() does: true if the map is well-formed to its
   * end, else false with `problem`. For a reader that found what it wanted before the end.
   */
  finish(): boolean {
    // Bounded as next() is.
    while (this.next());
    return this.problem === undefined;
  }

  /** A walk with no entries, the map ending at `end`. */
  private empty(bytes: Buffer, end: number): true {
    this.bytes = bytes;
    this.end = end;
    this.left = 0;
    this.valueEnd = end;
    return true;
  }

  private refuse(problem: string): false {
    this.problem = problem;
    this.bytes = undefined;
    return false;
  }
}

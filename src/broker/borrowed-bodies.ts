// Message bodies that borrow memory. A body arrives as a view into a larger buffer:
// the socket read it came in (up to 64 KiB holding many messages, for many queues),
// the HA batch it was replicated in (up to 256 records), Node's 8 KiB pool. Any one
// view keeps its whole buffer alive. Not copying let a few messages left queued among
// many consumed ones (a dead-letter or slow queue beside a busy one, a low priority, a
// delivery delay, a consumer's unsettled ones) hold far more than their size, outside
// what max-memory counts: 100-byte stragglers held 7.5 KiB each on a standalone broker,
// 16 and 20 KiB on an HA primary and its backup (test/integration/borrowed-bodies.test.ts).
// Copying every body as it arrives costs what most messages, consumed moments later,
// never need: an allocation of its own (~1.1 µs a 1 KiB body in a loop of nothing else,
// against 0.05 µs for the view), more once the garbage collector has to promote it.
//
// So a body is given memory of its own once it has stayed, and only where it holds
// much more than itself: each queue notes the ids of messages that arrived with borrowed
// bodies, as a range per tick of the sweep's timer (BorrowedRanges), and a range a tick
// old is walked (Queue.ownBorrowedBodies). The bodies still there are grouped by the
// buffer they borrow: those of a buffer they fill at least a quarter of are left as they
// are (a backlog: every message of a read still queued, which copying would only cost:
// +2.5-3 µs of broker CPU a message published into a queue nobody reads, bench/RESULTS.md),
// and looked at again after RECHECK_TICKS ticks, in case most of the buffer's messages
// have gone since (a look that copies none of them doubles the wait, up to
// MOST_RECHECK_TICKS: a backlog of a million kept bodies costs ~0.3 s of walking a look);
// the others are copied, each at most once in its life. A message consumed within a
// tick is never looked at.
import { performance } from 'node:perf_hooks';

/** The sweep's period: a body is copied after it stayed one to two of these. */
export const BORROWED_BODY_TICK_MS = 1000;
/** Bodies left borrowing (they filled enough of their buffer) are looked at again after this many ticks... */
export const RECHECK_TICKS = 16;
/** ...and after twice as many each time a look copies none of them, up to this many. */
export const MOST_RECHECK_TICKS = 256;
/** Bodies of one buffer that fill less than this share of it are copied. */
const KEPT_SHARE = 1 / 4;
/** Rows a queue's walk looks at per step (a step looks at a sub-range whole: see Queue.ownBorrowedBodies). */
export const BORROWED_STEP_ROWS = 2048;
/** A sweep yields the event loop after this long. */
const SLICE_MS = 10;

/**
 * Whether `bytes` keeps alive memory well beyond itself: a view into a buffer more
 * than twice its size. (At most one such view per buffer takes more than half of it,
 * so what is not copied holds at most twice its size.)
 */
export function borrowsMemory(bytes: Buffer): boolean {
  return bytes.buffer.byteLength > 2 * bytes.length;
}

/** A copy of `bytes` in memory of its own (not Node's shared pool, which is borrowing again). */
export function ownedCopy(bytes: Buffer): Buffer {
  const out = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(out);
  return out;
}

/**
 * The owned copy made of each borrowed body, while that body is still referenced. The
 * records one publish makes for the queues it reaches (and the copies a move or a failed
 * commit's give-back makes of a record) share one body; each queue's walk copying it for
 * itself turned one body into one per queue, up to a quarter of its buffer each: a
 * 6,000-byte straggler sent to a fanout of 20 queues held 107 KB, where before any copying
 * it held the 59 KB read it came in. A copy outlives its body only as long as something
 * still holds the body (another queue's record, the HA window of changes).
 */
const copies = new WeakMap<Buffer, Buffer>();

/** An owned copy of `bytes`, the same one for every record that shares `bytes`. */
export function sharedOwnedCopy(bytes: Buffer): Buffer {
  let copy = copies.get(bytes);
  if (copy === undefined) {
    copy = ownedCopy(bytes);
    copies.set(bytes, copy);
  }
  return copy;
}

/** An id range, empty when lo > hi. */
class IdRange {
  lo = Infinity;
  hi = -Infinity;

  get isEmpty(): boolean {
    return this.lo > this.hi;
  }

  add(id: number): void {
    if (id < this.lo) this.lo = id;
    if (id > this.hi) this.hi = id;
  }

  /** Take `other` in, leaving it empty. */
  takeIn(other: IdRange): void {
    if (other.isEmpty) return;
    this.lo = Math.min(this.lo, other.lo);
    this.hi = Math.max(this.hi, other.hi);
    other.clear();
  }

  clear(): void {
    this.lo = Infinity;
    this.hi = -Infinity;
  }
}

/**
 * The ids of a queue's messages whose bodies borrow memory, by age: those of the current
 * tick (young), of the tick before (waiting), those left borrowing at a look (recheck),
 * and the range the sweep walks (due). Ranges, not lists: ids in a queue mostly arrive
 * in increasing order, and a walk of a range visits only the rows still there.
 */
export class BorrowedRanges {
  private readonly young = new IdRange();
  private readonly waiting = new IdRange();
  private readonly recheck = new IdRange();
  private readonly due = new IdRange();
  /** The ids the last look again at kept bodies covered, and the bodies of them it copied. */
  private readonly rechecked = new IdRange();
  private recheckedCopies = 0;
  /** Ticks between looks again at kept bodies, and the tick of the next one. */
  private recheckEvery = RECHECK_TICKS;
  private nextRecheck = RECHECK_TICKS;
  private lastTick = 0;

  note(id: number): void {
    this.young.add(id);
  }

  /** A body left borrowing by a look: looked at again later (RECHECK_TICKS). */
  noteKept(id: number): void {
    // The first kept since the last look again waits its full time, not for a look long due.
    if (this.recheck.isEmpty) this.nextRecheck = Math.max(this.nextRecheck, this.lastTick + this.recheckEvery);
    this.recheck.add(id);
  }

  /** A body given memory of its own. */
  noteCopied(id: number): void {
    if (id >= this.rechecked.lo && id <= this.rechecked.hi) this.recheckedCopies++;
  }

  /** A tick: the waiting range is due (and the kept ones, when their time came), the young one waits. */
  age(tick: number): void {
    this.lastTick = tick;
    this.due.takeIn(this.waiting);
    if (tick >= this.nextRecheck && !this.recheck.isEmpty) {
      // Kept bodies a look again left all as they were (a backlog still whole) are looked at less often.
      const fruitless = !this.rechecked.isEmpty && this.recheckedCopies === 0;
      this.recheckEvery = fruitless ? Math.min(2 * this.recheckEvery, MOST_RECHECK_TICKS) : RECHECK_TICKS;
      this.nextRecheck = tick + this.recheckEvery;
      this.rechecked.clear();
      this.rechecked.add(this.recheck.lo);
      this.rechecked.add(this.recheck.hi);
      this.recheckedCopies = 0;
      this.due.takeIn(this.recheck);
    }
    this.waiting.takeIn(this.young);
  }

  get hasDue(): boolean {
    return !this.due.isEmpty;
  }

  /** The first id of the due range not looked at yet, and its last. */
  get dueLo(): number {
    return this.due.lo;
  }

  get dueHi(): number {
    return this.due.hi;
  }

  /** Ids up to `id` of the due range are done. */
  doneThrough(id: number): void {
    this.due.lo = id + 1;
    if (this.due.isEmpty) this.due.clear();
  }
}

/**
 * For one step of a walk: the bytes the borrowing bodies found hold of each buffer, and
 * so whether those of a buffer are copied (they fill less than KEPT_SHARE of it) or left.
 */
export class BorrowedShares {
  private readonly live = new Map<ArrayBufferLike, number>();

  add(bytes: Buffer): void {
    this.live.set(bytes.buffer, (this.live.get(bytes.buffer) ?? 0) + bytes.length);
  }

  worthCopying(bytes: Buffer): boolean {
    return (this.live.get(bytes.buffer) ?? 0) < KEPT_SHARE * bytes.buffer.byteLength;
  }
}

/** What the sweep needs of a queue (Queue implements it). */
export interface BorrowingQueue {
  readonly borrowed: BorrowedRanges;
  /** Copy the bodies of one step of the due range; rows looked at (0: nothing due). */
  ownBorrowedBodies(maxRows: number): number;
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * The sweep over every queue, run at each tick (the daemon's timer): ages each queue's
 * ranges and walks the due ones in slices, the event loop free between them. One run at
 * a time; a tick during a run ages the ranges and leaves the walking to the run.
 */
export class BorrowedBodySweep {
  private running = false;
  /** Bodies copied and rows looked at, ever (for tests and status). */
  rowsLooked = 0;

  constructor(private readonly queues: () => Iterable<BorrowingQueue>) {}

  private ticks = 0;

  async tick(): Promise<void> {
    const queues = [...this.queues()];
    const tick = ++this.ticks;
    for (const q of queues) q.borrowed.age(tick);
    if (this.running) return;
    this.running = true;
    try {
      let sliceStart = performance.now();
      for (const q of queues) {
        // Bounded: each step finishes a sub-range of the due range, or returns 0.
        for (let rows = q.ownBorrowedBodies(BORROWED_STEP_ROWS); rows > 0; rows = q.ownBorrowedBodies(BORROWED_STEP_ROWS)) {
          this.rowsLooked += rows;
          if (performance.now() - sliceStart < SLICE_MS) continue;
          await nextTurn();
          sliceStart = performance.now();
        }
      }
    } finally {
      this.running = false;
    }
  }
}

// Memory alarm, like RabbitMQ's memory high watermark: when the V8 heap nears
// its limit, the broker refuses new messages (senders get
// amqp:resource-limit-exceeded with the reason) instead of dying of "heap out of
// memory" and taking every queued message's availability with it. Consumers,
// replication and DR keep running, so the alarm clears as queues drain.
//
// Two things are watched. The heap is what can kill the process: V8 stops it at heap_size_limit (about
// 4 GiB by default; raise it with NODE_OPTIONS=--max-old-space-size=MiB). Queued
// messages whose bodies are paged out no longer weigh on it (they are rows of
// typed arrays, outside the heap: docs/journal.md); what does is objects: message
// bodies in memory, connections, deliveries in flight, replication windows. The
// watermark is half of the limit, because a restart must be able to recover
// everything that was accepted (see `high`). And the machine: queued messages'
// rows and bodies live outside the heap, so the live memory of the process (heap
// objects plus the memory held by buffers and typed arrays) is held under
// memory-limit (default 40% of the machine's or the cgroup's memory). Not RSS:
// freed memory need not go back to the system, and the alarm must clear once
// consumers drain the queues. Hysteresis keeps it from flapping, and a reading past
// a mark is confirmed by a full collection before anything is refused (garbage counts
// until V8 collects it).
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { monotonicNow } from '../util/monotonic-clock.js';

export interface HeapReading {
  /** Old-generation heap in use, and its limit. */
  used: number;
  limit: number;
  /** Live memory of the whole process (heap plus buffers and typed arrays), when watched. */
  live?: number;
}

export interface MemoryAlarmOptions {
  /**
   * Raise the alarm at this share of the old generation's limit. Default 0.5:
   * a restart must recover what was accepted, and recovery briefly needs more
   * heap than the running broker (measured: 1M queued messages, ~450 MiB heap
   * running, ~1.3 GiB peak RSS while recovering). A broker should never accept
   * messages it could not restart with.
   */
  high?: number;
  /** Clear it below this share. Default 0.4. */
  low?: number;
  /**
   * Bytes of live memory (heap plus buffers and typed arrays) at which the alarm is
   * raised too; it clears below low/high of it. Unset: not watched.
   */
  memoryLimit?: number;
  read?: () => HeapReading;
  /** A full garbage collection (tests pass their own). */
  collect?: () => void;
  /** Milliseconds now (tests pass their own clock). */
  now?: () => number;
  onChange(reason: string | undefined, reading: HeapReading): void;
}

const MiB = 1024 * 1024;
const COLLECT_EVERY_MS = 5000;
/**
 * A reading past a mark is confirmed by a full collection first, at most this often
 * while the readings stay near what the last collection left: a broker hovering at a
 * mark must not spend its time collecting.
 */
const CONFIRM_EVERY_MS = 2000;
/**
 * ...and at once when a reading has grown by this share of its mark since the last
 * collection: a fast producer must not get far past the mark before the alarm.
 */
const CONFIRM_GROWTH = 1 / 8;

let gcFunction: (() => void) | undefined;
/** A full GC (V8's gc(), reached without starting node with --expose-gc). */
function collectGarbage(): void {
  if (!gcFunction) {
    v8.setFlagsFromString('--expose-gc');
    gcFunction = runInNewContext('gc') as () => void;
  }
  gcFunction();
}
/** V8's young generation on 64-bit (three 16 MiB semi-spaces): part of heap_size_limit, never usable by old objects. */
const YOUNG_GENERATION = 48 * MiB;

/**
 * What runs out: the old generation. heap_size_limit counts the young generation
 * too, so with a small heap the process died at half of it; compare old objects
 * with what is left for them.
 */
function readOldSpace(): HeapReading {
  const h = v8.getHeapStatistics();
  const young = v8.getHeapSpaceStatistics().filter((s) => s.space_name.startsWith('new_')).reduce((n, s) => n + s.space_used_size, 0);
  return { used: h.used_heap_size - young, limit: Math.max(h.heap_size_limit / 2, h.heap_size_limit - YOUNG_GENERATION), live: h.used_heap_size + h.external_memory };
}

export class MemoryAlarm {
  private raised = false;
  private lastCollect = 0;
  /** What the last confirming collection left. */
  private confirmed: HeapReading | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly high: number;
  private readonly low: number;
  private readonly read: () => HeapReading;
  private readonly collect: () => void;
  private readonly now: () => number;

  constructor(private readonly opts: MemoryAlarmOptions) {
    this.high = opts.high ?? 0.5;
    this.low = opts.low ?? 0.4;
    this.read = opts.read ?? readOldSpace;
    this.collect = opts.collect ?? collectGarbage;
    this.now = opts.now ?? monotonicNow;
  }

  get active(): boolean {
    return this.raised;
  }

  start(intervalMs = 500): void {
    this.timer = setInterval(() => this.check(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Compare the heap with the watermarks; report a change. */
  check(): void {
    // While raised, the heap holds drained messages as garbage until V8 next collects,
    // and an idle broker allocates too little for that to happen: collect now and then.
    if (this.raised && this.now() - this.lastCollect > COLLECT_EVERY_MS) {
      this.lastCollect = this.now();
      this.collect();
    }
    let r = this.read();
    if (!this.raised && this.past(r)) {
      // The readings count garbage until V8 next collects, and bin/tandemd lets V8 keep
      // up to --initial-old-space-size of it before it does: only a full collection
      // tells live memory from garbage, so none is refused for garbage.
      if (this.now() - this.lastCollect < CONFIRM_EVERY_MS && !this.grownSinceConfirmed(r)) return;
      this.lastCollect = this.now();
      this.collect();
      r = this.read();
      this.confirmed = r;
    }
    const share = r.used / r.limit;
    const limit = this.opts.memoryLimit;
    const liveShare = limit !== undefined && r.live !== undefined ? r.live / limit : 0;
    if (!this.raised && this.past(r)) {
      this.raised = true;
      // Once cleared, growth is measured from nothing: the next crossing is confirmed at once.
      this.confirmed = undefined;
      this.opts.onChange(
        share >= this.high
          ? `broker memory is nearly full (${Math.round(r.used / MiB)} of ${Math.round(r.limit / MiB)} MiB heap): new messages are refused until consumers drain the queues; ` +
              'to allow more, start the broker with NODE_OPTIONS=--max-old-space-size=<MiB>'
          : `broker memory is nearly full (${Math.round(r.live! / MiB)} MiB in use, memory-limit ${Math.round(limit! / MiB)} MiB): new messages are refused until consumers drain the queues; ` +
              "to allow more, raise memory-limit (default: 40% of the machine's or the cgroup's memory)",
        r,
      );
    } else if (this.raised && share < this.low && liveShare < this.low / this.high) {
      this.raised = false;
      this.opts.onChange(undefined, r);
    }
  }

  /** Grown by CONFIRM_GROWTH of a mark since the last confirming collection. */
  private grownSinceConfirmed(r: HeapReading): boolean {
    const c = this.confirmed;
    if (!c) return true;
    const limit = this.opts.memoryLimit;
    return r.used - c.used >= CONFIRM_GROWTH * this.high * r.limit || (limit !== undefined && r.live !== undefined && r.live - (c.live ?? 0) >= CONFIRM_GROWTH * limit);
  }

  /** Past the heap's high mark or memory-limit. */
  private past(r: HeapReading): boolean {
    const limit = this.opts.memoryLimit;
    return r.used / r.limit >= this.high || (limit !== undefined && r.live !== undefined && r.live >= limit);
  }
}

// Auto-delete queues: one timer per queue that lost its last consumer, deleting it
// once auto-delete-delay has passed with nobody back.
import type { Broker } from './broker.js';
import type { Queue } from './queue.js';

export interface AutoDeleteLogger {
  debug(o: object, msg: string): void;
  warn(o: object, msg: string): void;
}

/** setTimeout's longest delay, 2^31 - 1 ms (about 24.8 days). */
export const MAX_TIMER_MS = 0x7fffffff;

export class AutoDeleteTimers {
  private readonly timers = new Map<Queue, NodeJS.Timeout>();

  constructor(
    private readonly broker: Broker,
    private readonly log: AutoDeleteLogger,
  ) {}

  /** `queue` has no consumer now: delete it after its delay (a later call starts the delay again). */
  schedule(queue: Queue): void {
    this.cancel(queue);
    this.arm(queue, queue.settings.autoDeleteDelayMs);
  }

  /**
   * Wait `remainingMs`, then delete. setTimeout takes at most MAX_TIMER_MS and fires
   * at once for more (a 30-day delay deleted the queue within milliseconds): a longer
   * delay is waited out in steps.
   */
  private arm(queue: Queue, remainingMs: number): void {
    const stepMs = Math.min(remainingMs, MAX_TIMER_MS);
    const timer = setTimeout(() => {
      if (remainingMs > stepMs) return this.arm(queue, remainingMs - stepMs);
      this.timers.delete(queue);
      // Deleted meanwhile (or replaced by a queue of the same name), or in use again.
      if (this.broker.queues.get(queue.name) !== queue || queue.consumerCount > 0) return;
      try {
        this.broker.deleteQueue(queue.name);
        this.log.debug({ queue: queue.name }, 'auto-delete queue deleted');
      } catch (err) {
        this.log.warn({ queue: queue.name, err: (err as Error).message }, 'auto-delete failed');
      }
    }, stepMs);
    // A pending deletion never keeps the process alive.
    timer.unref();
    this.timers.set(queue, timer);
  }

  /**
   * This broker starts serving (a standalone start, an HA promotion): every auto-delete
   * queue that has had a consumer and has none now is deleted after its delay, as if its
   * last consumer had just left. Its consumers went with the restart, or were on the old
   * primary, and a backup never schedules (its primary's log deletes its queues), so none
   * of them had a timer. Whether a queue had a consumer is in the log ('queue-consumed'):
   * one that never had any is waiting for its first, and stays, as it would on a broker
   * that ran on (so does one from a journal written before that record existed, which
   * cannot tell). Returns how many were scheduled.
   */
  scheduleUnused(queues: Iterable<Queue>): number {
    let n = 0;
    for (const queue of queues) {
      if (!queue.settings.autoDelete || !queue.consumed || queue.consumerCount > 0) continue;
      this.schedule(queue);
      n++;
    }
    return n;
  }

  cancel(queue: Queue): void {
    const t = this.timers.get(queue);
    if (t) clearTimeout(t);
    this.timers.delete(queue);
  }

  /** The broker is stopping: no queue is deleted any more. */
  stop(): void {
    for (const t of this.timers.values()) clearTimeout(t);
  }
}

// Auto-delete queues: one timer per queue that lost its last consumer, deleting it
// once auto-delete-delay has passed with nobody back.
import type { Broker } from './broker.js';
import type { Queue } from './queue.js';
import { deleteQueueInSlices } from './queue-slices.js';

export interface AutoDeleteLogger {
  debug(o: object, msg: string): void;
  warn(o: object, msg: string): void;
}

/** setTimeout's longest delay, 2^31 - 1 ms (about 24.8 days). */
export const MAX_TIMER_MS = 0x7fffffff;

export class AutoDeleteTimers {
  private readonly timers = new Map<Queue, NodeJS.Timeout>();
  /** Queues whose delete has begun and not ended (one with an alternate exchange takes slices). */
  private readonly deleting = new Set<Queue>();

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
      // Deleted meanwhile (or replaced by a queue of the same name), in use again, or being deleted.
      if (this.broker.queues.get(queue.name) !== queue || queue.consumerCount > 0 || this.deleting.has(queue)) return;
      this.delete(queue);
    }, stepMs);
    // A pending deletion never keeps the process alive.
    timer.unref();
    this.timers.set(queue, timer);
  }

  /**
   * Delete `queue` as an admin delete does: what it holds goes to its alternate exchange
   * in slices with the event loop free between them. In one go, a million paged durable
   * messages held the broker for seconds (docs/stalls.md): no client served, no HA
   * heartbeat sent. Once begun it goes on to the end, as an admin delete does, even if a
   * consumer attaches meanwhile (that consumer is detached with the queue).
   */
  private delete(queue: Queue): void {
    this.deleting.add(queue);
    deleteQueueInSlices(this.broker, queue.name)
      .then(() => this.log.debug({ queue: queue.name }, 'auto-delete queue deleted'))
      .catch((err: unknown) => this.log.warn({ queue: queue.name, err: (err as Error).message }, 'auto-delete failed'))
      .finally(() => this.deleting.delete(queue));
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

// Notices a step of the wall clock and says what it moves. Timeouts, heartbeats, rate
// limits and sessions run on the monotonic clock (util/monotonic-clock.ts) and do not
// notice one; message expiry, delivery times and duplicate-detection ages are wall-clock by
// design (AMQP's absolute times, journaled and replicated with the message), so a step
// forward expires and releases early and a step back holds them longer by its size. An
// operator who sees that needs to know the clock stepped, and by how much.
import { monotonicNow } from '../util/monotonic-clock.js';
import type { Logger } from './log.js';

/**
 * A change of the wall clock against the monotonic one, between two checks, this large
 * or larger is a step. NTP slews at most 0.5 ms a second: far below it.
 */
export const STEP_THRESHOLD_MS = 1000;

export class ClockStepWatch {
  /** Wall clock minus monotonic clock at the last check. */
  private offset: number;

  constructor(
    private readonly log: Pick<Logger, 'warn'>,
    private readonly wall: () => number = Date.now,
    private readonly monotonic: () => number = monotonicNow,
  ) {
    this.offset = wall() - monotonic();
  }

  /** The step since the last check (ms, negative: back), logged, or 0 if none. Called every second by the daemon. */
  check(): number {
    const offset = this.wall() - this.monotonic();
    const step = offset - this.offset;
    this.offset = offset;
    if (Math.abs(step) < STEP_THRESHOLD_MS) return 0;
    const seconds = Math.round(Math.abs(step) / 1000);
    this.log.warn(
      { stepMs: step },
      step > 0
        ? `the wall clock stepped forward by ${seconds} s: timeouts and heartbeats do not follow it, but messages whose expiry or delivery time it passed expire or are delivered now, and duplicate-detection entries it aged past their window are forgotten`
        : `the wall clock stepped back by ${seconds} s: timeouts and heartbeats do not follow it, but messages held now expire and are delivered up to ${seconds} s later than they asked, and duplicate-detection entries are kept that much longer`,
    );
    return step;
  }
}

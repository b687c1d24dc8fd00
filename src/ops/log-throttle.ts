// A condition that refuses every message (a full disk, a failing device) would write
// one log line per message: thousands a second, burying everything else. One line per
// interval says the same, with the count of those it stood for.
import { monotonicNow } from '../util/monotonic-clock.js';

export class LogThrottle {
  private readonly last = new Map<string, { at: number; held: number }>();

  constructor(
    private readonly intervalMs = 10_000,
    private readonly now: () => number = monotonicNow,
    /** Kinds of event tracked at once; callers key by error code, so a handful. */
    private readonly maxKeys = 64,
  ) {}

  /**
   * Whether to log this event of `key` now: undefined to stay silent, else the number
   * of events of that key held back since the last line (0 for the first).
   */
  admit(key: string): number | undefined {
    const t = this.now();
    const entry = this.last.get(key);
    if (entry && t - entry.at < this.intervalMs) {
      entry.held++;
      return undefined;
    }
    if (!entry && this.last.size >= this.maxKeys) this.last.delete(this.last.keys().next().value as string);
    this.last.set(key, { at: t, held: 0 });
    return entry?.held ?? 0;
  }
}

/** The events a throttled line also stands for, as a log field (none on the first line). */
export function suppressedField(held: number): { suppressed?: number } {
  return held > 0 ? { suppressed: held } : {};
}

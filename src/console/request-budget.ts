// How many API requests a user who is not an admin may make: a bucket per user of
// BURST requests, refilled at RATE a second. A reader's GET /api/queues of thousands
// of queues costs the broker's one thread milliseconds; a script asking in a loop
// took most of it from the clients (AMQP management, the same QUERY, is admins'
// alone). Admins are not counted: they may stop the broker in other ways. A page
// makes a few requests a minute, besides its one event stream.
import { monotonicNow } from '../util/monotonic-clock.js';

export const READER_REQUESTS_BURST = 60;
export const READER_REQUESTS_PER_SECOND = 20;

interface Bucket {
  tokens: number;
  at: number;
}

export class RequestBudget {
  /** One per user who asked lately (users of the users file: a bounded set). */
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly burst = READER_REQUESTS_BURST,
    private readonly perSecond = READER_REQUESTS_PER_SECOND,
    private readonly now: () => number = monotonicNow,
  ) {}

  /** Whether `user` may make one more request now (and if so, it is counted). */
  take(user: string): boolean {
    const t = this.now();
    const b = this.buckets.get(user) ?? { tokens: this.burst, at: t };
    b.tokens = Math.min(this.burst, b.tokens + ((t - b.at) / 1000) * this.perSecond);
    b.at = t;
    this.buckets.set(user, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}

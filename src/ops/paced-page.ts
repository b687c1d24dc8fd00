// The metrics page, made for many scrapers at the cost of few. Whoever reaches the
// metrics port may scrape, without a login, and a page of thousands of queues takes
// the broker's one thread tens of milliseconds: eight clients scraping in a loop took
// AMQP round trips from 0.5 ms to 250 ms. So one page is made at a time, shared by
// every scrape that asks while it is made or waited for, and the next is started no
// sooner than COOL_DOWN_FACTOR times as long as the last took (at most MAX_COOL_DOWN_MS)
// after it: scraping takes at most a tenth of the thread, however many scrape. A
// scraper that asks after the last page was answered gets a page made after it asked.
import { setTimeout as sleep } from 'node:timers/promises';

export const COOL_DOWN_FACTOR = 9;
/** A page at least this often, however long one takes (Prometheus gives up after 10 s by default). */
export const MAX_COOL_DOWN_MS = 5_000;

export class PacedPage {
  private making: Promise<Buffer> | undefined;
  /** When the next page may be started (performance.now()). */
  private nextAt = 0;

  constructor(private readonly make: () => Promise<string>) {}

  /** The page for a scrape that comes now: the one being made or waited for, else a new one. */
  page(): Promise<Buffer> {
    this.making ??= this.wait().then(async () => {
      const started = performance.now();
      try {
        // One Buffer for every answer: each socket keeps a reference to it, not a copy.
        return Buffer.from(await this.make());
      } finally {
        const finished = performance.now();
        this.nextAt = finished + Math.min(MAX_COOL_DOWN_MS, (finished - started) * COOL_DOWN_FACTOR);
        this.making = undefined;
      }
    });
    return this.making;
  }

  private async wait(): Promise<void> {
    const ms = this.nextAt - performance.now();
    if (ms > 0) await sleep(ms, undefined, { ref: false });
  }
}

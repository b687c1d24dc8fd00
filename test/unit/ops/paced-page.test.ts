// PacedPage (src/ops/paced-page.ts): scrapes that ask together share one page, and the
// next page is started only after a pause as long as COOL_DOWN_FACTOR pages took, so
// however many scrape, making pages takes at most a tenth of the broker's thread.
import { describe, expect, it } from 'vitest';
import { COOL_DOWN_FACTOR, PacedPage } from '../../../src/ops/paced-page.js';

/** A page maker that takes the thread `ms` (as prom-client does) and records when it ran. */
function maker(ms: number) {
  const runs: Array<{ start: number; end: number }> = [];
  let n = 0;
  const make = async () => {
    const start = performance.now();
    while (performance.now() - start < ms) {
      // Busy, as a page of thousands of queues is.
    }
    runs.push({ start, end: performance.now() });
    return `page ${++n}`;
  };
  return { runs, make };
}

describe('paced page', () => {
  it('paced page - scrapes asking together get one page; one asking after it gets a new page, made after a pause of nine times its cost', async () => {
    const { runs, make } = maker(20);
    const paced = new PacedPage(make);
    const together = await Promise.all([paced.page(), paced.page(), paced.page()]);
    expect(together.map(String)).toEqual(['page 1', 'page 1', 'page 1']);
    expect(String(await paced.page())).toBe('page 2');
    expect(runs).toHaveLength(2);
    const pause = runs[1]!.start - runs[0]!.end;
    // A lower bound only: a timer never fires early by more than the clock's rounding.
    expect(pause).toBeGreaterThanOrEqual(COOL_DOWN_FACTOR * 20 - 2);
  });

  it('paced page - a page that failed is not given to the next scrape', async () => {
    let calls = 0;
    const paced = new PacedPage(async () => {
      if (++calls === 1) throw new Error('collect failed');
      return 'fine';
    });
    await expect(paced.page()).rejects.toThrow('collect failed');
    expect(String(await paced.page())).toBe('fine');
  });
});

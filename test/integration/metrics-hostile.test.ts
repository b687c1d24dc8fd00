// /metrics against clients that scrape too much, on a real tandemd: no login is needed
// there, so how often a page is made is the broker's choice, not theirs (paced-page.ts),
// and a connection may not pile up requests (http-bounds.ts).
import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_UNANSWERED_PER_CONNECTION } from '../../src/util/http-bounds.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { scrape } from '../helpers/scrape.js';
import { manage } from '../helpers/tandem-cli.js';

afterAll(async () => {
  await killAllBrokers();
});

/**
 * `count` GET /metrics sent on one connection in one write (HTTP/1.1 pipelining): the
 * bodies of the answers, or, when the broker closes the connection first, how many came.
 */
function pipelined(port: number, count: number): Promise<{ bodies: string[]; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const bodies: string[] = [];
    let buffered = Buffer.alloc(0);
    const done = (closed: boolean) => {
      socket.destroy();
      resolve({ bodies, closed });
    };
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (let answer = nextAnswer(buffered); answer; answer = nextAnswer(buffered)) {
        bodies.push(answer.body);
        buffered = buffered.subarray(answer.used);
      }
      if (bodies.length === count) done(false);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => done(true));
    socket.write('GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(count));
  });
}

/** The first whole answer in `data` (Content-Length or chunked), and the bytes it took; undefined until it is whole. */
function nextAnswer(data: Buffer): { body: string; used: number } | undefined {
  const end = data.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const head = data.subarray(0, end).toString('latin1');
  let at = end + 4;
  const length = /^content-length: *(\d+)/im.exec(head)?.[1];
  if (length !== undefined) return data.length < at + Number(length) ? undefined : { body: data.subarray(at, at + Number(length)).toString('utf8'), used: at + Number(length) };
  if (!/^transfer-encoding: *chunked/im.test(head)) throw new Error(`an answer of unknown length: ${head}`);
  const chunks: Buffer[] = [];
  for (;;) {
    const line = data.indexOf('\r\n', at);
    if (line < 0) return undefined;
    const size = parseInt(data.subarray(at, line).toString('latin1'), 16);
    if (data.length < line + 2 + size + 2) return undefined;
    if (size === 0) return { body: Buffer.concat(chunks).toString('utf8'), used: line + 4 };
    chunks.push(data.subarray(line + 2, line + 2 + size));
    at = line + 2 + size + 2;
  }
}

describe('metrics hostile', () => {
  it('metrics hostile - scrapes that come together are answered with one page, made once; a scrape after it gets a new one', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    // Made once for all, the pages are the same bytes; made once each, the process
    // figures in them (heap, CPU seconds) differ.
    const together = await pipelined(broker.metricsPort!, MAX_UNANSWERED_PER_CONNECTION);
    expect(together.bodies).toHaveLength(MAX_UNANSWERED_PER_CONNECTION);
    expect(new Set(together.bodies).size).toBe(1);
    expect(together.bodies[0]).toMatch(/^tandem_ha_state\{state="standalone"\} 1$/m);
    // A scrape that asks after the last page was answered sees what happened since.
    const before = await scrape(broker.metricsPort!);
    expect(before.samples.get('tandem_queue_depth{queue="paced"}')).toBeUndefined();
    await manage(broker.port, 'CREATE', 'queue', 'paced', {});
    expect((await scrape(broker.metricsPort!)).samples.get('tandem_queue_depth{queue="paced"}')).toBe(0);
  }, 60_000);

  it('metrics hostile - a connection that pipelines more requests than it may have unanswered is closed, and the broker serves the next scraper', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    const flood = await pipelined(broker.metricsPort!, 2000);
    expect(flood.closed).toBe(true);
    expect(flood.bodies.length).toBeLessThanOrEqual(MAX_UNANSWERED_PER_CONNECTION);
    await waitFor(async () => (await scrape(broker.metricsPort!)).samples.get('tandem_ha_state{state="standalone"}') === 1, { timeout: 10_000, name: 'scraped again' });
  }, 60_000);
});

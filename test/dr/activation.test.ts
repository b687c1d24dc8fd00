// Activation of a large DR queue: 1,000,000 messages replicated, then `tandem dr
// activate`, then a consumer's first message. Both ways in are taken: the first
// half is on the source before the queue is added on the secondary (copied by
// the snapshot, most bodies paged out to the source's journal, so read back as
// the copy goes), the second half is sent while that copy runs (the log). A
// consumer on the source takes the first 1,000 meanwhile, so the secondary must
// end with exactly messages 1000..1000999, in order; the whole queue is drained
// after activation to check that. Bodies are small integers (the benchmark,
// bench/dr.mjs, uses 1 KiB). The time to the first message is printed, not
// asserted (tests assert correctness; speed is for bench/).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, drStatus, mgmt, receive, send } from './helpers.js';

const HALF = 500_500;
const CONSUMED = 1000;
const TOTAL = 2 * HALF;
const CHUNK = 20_000;

async function sendRange(port: number, from: number, to: number, durable: boolean): Promise<void> {
  for (let start = from; start < to; start += CHUNK) {
    const n = Math.min(CHUNK, to - start);
    await send(port, 'big', Array.from({ length: n }, (_, i) => start + i), { durable, window: 2000 });
  }
}

describe('DR activation', () => {
  let primary: TestBroker;
  let secondary: TestBroker;

  beforeAll(async () => {
    // A small max-memory pages the first half's bodies out; a window that outlasts the copy spares a second snapshot.
    primary = await TestBroker.start({ args: ['--max-memory', '4MiB', '--dr-retain-changes', '2000000'] });
    secondary = await TestBroker.start();
  });
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR - a queue with 1M replicated messages is activated and serves its oldest message at once', async () => {
    await tandem(['queue', 'add', 'big', '--durable', '-b', primary.url]);
    const t0 = Date.now();
    await sendRange(primary.port, 0, HALF, true);
    const paged = Number((await mgmt(primary.port, 'READ'))['paged-messages']);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'big', source: primary.url, mode: 'enqueue-and-dequeue' });
    const second = sendRange(primary.port, HALF, TOTAL, false);
    expect(await receive(primary.port, 'big', CONSUMED)).toEqual(Array.from({ length: CONSUMED }, (_, i) => i));
    await second;
    const sendMs = Date.now() - t0;
    await drFlush(primary.port, secondary.port, 240_000);
    const replicatedMs = Date.now() - t0;
    const depth = TOTAL - CONSUMED;
    expect(depth).toBe(1_000_000);
    expect((await drStatus(secondary.port))[0].depth).toBe(depth);

    const a0 = Date.now();
    const r = await tandem(['dr', 'activate', 'big', '-b', secondary.url]);
    expect(r.code, r.stderr).toBe(0);
    const first = await receive(secondary.port, 'big', 1);
    const firstMs = Date.now() - a0;
    expect(first).toEqual([CONSUMED]);
    // The first half came by the snapshot, its bodies read back from the source's journal.
    const copies = primary.stderr
      .split('\n')
      .filter((l) => l.includes('DR: snapshot sent; following the log'))
      .map((l) => Number((JSON.parse(l) as { messages: number }).messages));
    expect(copies.length, 'the source logged no snapshot sent').toBeGreaterThan(0);
    expect(paged).toBeGreaterThan(0);
    console.log(
      `activation: ${depth} messages replicated (snapshots of ${copies.join(', ')} messages, ${paged} of the first ${HALF} paged out at the source; sent by ${sendMs} ms, replicated by ${replicatedMs} ms); activate + first message in ${firstMs} ms (CLI process start included)`,
    );

    // Everything else, exactly once and in order.
    const d0 = Date.now();
    const rest = await receive(secondary.port, 'big', depth - 1, { timeoutMs: 180_000 });
    for (let i = 0; i < rest.length; i++) {
      if (rest[i] !== CONSUMED + 1 + i) throw new Error(`message ${i + 1} after activation: expected ${CONSUMED + 1 + i}, got ${String(rest[i])}`);
    }
    expect(rest.length).toBe(depth - 1);
    expect((await drStatus(secondary.port))[0].depth).toBe(0);
    console.log(`activation: drained the other ${rest.length} in order in ${Date.now() - d0} ms`);
  }, 600_000);
});

// Activation of a large DR queue: as many messages as can be sent in about 45 s
// (up to 1M) replicated, then `tandem dr activate`, then a consumer's first
// message. The time is measured and printed, not asserted (tests assert
// correctness; speed is for bench/).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, drStatus, mgmt, receive, send } from './helpers.js';

const MAX = 1_000_000;
const SEND_BUDGET_MS = Number(process.env.TANDEM_DR_ACTIVATION_MS ?? 45_000);

describe('DR activation', () => {
  let primary: TestBroker;
  let secondary: TestBroker;

  beforeAll(async () => {
    primary = await TestBroker.start();
    secondary = await TestBroker.start();
  });
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR - a large replicated queue is activated and serves its first message at once', async () => {
    await tandem(['queue', 'add', 'big', '--durable', '-b', primary.url]);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'big', source: primary.url, mode: 'enqueue-and-dequeue' });
    const t0 = Date.now();
    let sent = 0;
    while (sent < MAX && Date.now() - t0 < SEND_BUDGET_MS) {
      const n = Math.min(20_000, MAX - sent);
      await send(primary.port, 'big', Array.from({ length: n }, (_, i) => sent + i), { durable: false, window: 2000 });
      sent += n;
    }
    const sendMs = Date.now() - t0;
    await drFlush(primary.port, secondary.port, 180_000);
    const replicatedMs = Date.now() - t0;
    expect((await drStatus(secondary.port))[0].depth).toBe(sent);
    const a0 = Date.now();
    const r = await tandem(['dr', 'activate', 'big', '-b', secondary.url]);
    expect(r.code, r.stderr).toBe(0);
    const first = await receive(secondary.port, 'big', 1);
    const firstMs = Date.now() - a0;
    expect(first).toEqual([0]);
    console.log(`activation: ${sent} messages replicated (sent in ${sendMs} ms, replicated by ${replicatedMs} ms); activate + first message in ${firstMs} ms (CLI process start included)`);
  }, 300_000);
});

// After a restart, recovered rows are read for a delivery time at their first look
// (queue.ts holdUnchecked), their bodies from disk when paged. A consumer or browser
// meeting a long run of held messages read every one of them in one dispatch (0.7 s
// for 100,000 paged messages of 1 KiB in-process, the event loop held all along); now a
// dispatch reads at most UNCHECKED_PER_DISPATCH of them and asks for another
// (moreToDispatch), as it does for expired rows, and the order holds.
import { afterEach, describe, expect, it } from 'vitest';
import { UNCHECKED_PER_DISPATCH } from '../../../src/broker/queue.js';
import type { Journal } from '../../../src/store/journal.js';
import { FakeConsumer, bodyDeliveryTimes, msg, qs } from '../broker/helpers.js';
import { openPagedBroker, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  for (const d of dirs.splice(0)) await removeDir(d);
});

async function open(dataDir: string) {
  const opened = await openPagedBroker(dataDir, 64 * 1024, { broker: { deliveryTimes: bodyDeliveryTimes } });
  journals.push(opened.journal);
  return opened;
}

describe('held messages recovered from the journal, read in slices', () => {
  it('held recovered - a consumer and a browser meeting 3,000 recovered held messages read at most UNCHECKED_PER_DISPATCH a dispatch, then get the message behind them', async () => {
    const held = 3 * UNCHECKED_PER_DISPATCH - 72;
    const dir = await tempDir();
    dirs.push(dir);
    {
      const { broker, journal } = await open(dir);
      broker.declareQueue('q', qs({ durable: true }));
      const at = Date.now() + 3_600_000;
      for (let i = 0; i < held; i++) broker.publish('q', msg(`at:${at}:${i}`.padEnd(512, '.'), { durable: true }), { heldUntil: at });
      broker.publish('q', msg('now', { durable: true }));
      await new Promise<void>((resolve, reject) => journal.whenDurable(broker.log.lsn, (err) => (err ? reject(err) : resolve())));
      await journal.close();
      journals.length = 0;
    }
    const { broker } = await open(dir);
    let more = 0;
    broker.events = { queueReady: () => more++ };
    const q = broker.queue('q');
    const browser = new FakeConsumer('b', 10, true);
    const consumer = new FakeConsumer('c', 10);
    q.addConsumer(browser);
    q.addConsumer(consumer);
    const scheduled: number[] = [];
    // Bounded: each dispatch reads at least one row or delivers.
    for (let i = 0; i < 20 && consumer.deliveries.length === 0; i++) {
      const asked = more;
      q.dispatch(Date.now());
      scheduled.push(q.scheduledDepth);
      if (consumer.deliveries.length === 0) expect(more, 'a dispatch cut short asks for another').toBeGreaterThan(asked);
    }
    // Each dispatch read at most its budget (browser and consumer together), each held row once.
    expect(scheduled.slice(0, 3)).toEqual([UNCHECKED_PER_DISPATCH, 2 * UNCHECKED_PER_DISPATCH, held]);
    expect(consumer.deliveries.map((e) => e.msg.bytes.toString())).toEqual(['now']);
    expect(browser.deliveries.map((e) => e.msg.bytes.toString())).toEqual(['now']);
    expect(q.scheduledDepth).toBe(held);
  });
});

// A detaching consumer's unsettled messages go back in slices (Queue.giveBack): a client
// holding a million (a large session window) that detached put them all back in one go,
// 0.4 s in-process without answering anyone (docs/stalls.md). Past GIVEN_BACK_AT_ONCE the
// queue walks its acquired rows in id order, at most GIVEN_BACK_PER_DISPATCH per dispatch,
// asking to be dispatched again after the event loop ran (QueueHost.moreToDispatch).
// Every message still comes back once, delivery-count raised, in id order, and no consumer
// is given a message behind one still to come back; groups stay the departed consumer's
// until their last held message is back; a transaction's acceptances stay acquired.
import { describe, expect, it } from 'vitest';
import { Queue, type Consumer, type QueueEntry, type QueueHost, type RemovalReason } from '../../../src/broker/queue.js';
import { deleteQueueInSlices } from '../../../src/broker/queue-slices.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { defaultExchangeSettings } from '../../../src/broker/settings.js';
import { FakeConsumer, msg, newBroker, qs } from './helpers.js';

const NOW = 1_000_000;
/** Far more than either bound (1,024 at once, 4,096 per dispatch): several slices. */
const HELD = 20_000;
/** The most one step (the detach, or one dispatch) may put back here: the old code put back HELD at once. */
const MOST_PER_STEP = 5_000;

class Host implements QueueHost {
  more = 0;
  removed(_q: Queue, _entry: QueueEntry, _reason: RemovalReason): void {}
  unused(): void {}
  moreToDispatch(): void {
    this.more++;
  }
  /** A body 'g<key>:<n>' is in group <key>. */
  groupKey(bytes: Buffer): string | undefined {
    const m = /^g(\w+):/.exec(bytes.toString());
    return m ? m[1] : undefined;
  }
}

function record(id: number, body = `m${id}`, priority = 4): MessageRecord {
  return { id, bytes: Buffer.from(body), headerLength: 0, durable: true, priority, expiresAt: 0, deliveryCount: 0, subject: undefined };
}

/** A consumer that holds what it is given until told otherwise, as a link does (held: its unsettled ones). */
class Holder extends FakeConsumer {
  readonly unsettled = new Set<QueueEntry>();
  override deliver(entry: QueueEntry, queue: Queue): void {
    super.deliver(entry, queue);
    this.unsettled.add(entry);
  }
  override held(): Iterable<QueueEntry> {
    return this.unsettled;
  }
}

/**
 * Dispatch while the queue asks (bounded), as the broker does after the event loop ran;
 * the most messages any one dispatch put back (acquired count fell by), and how many dispatches.
 */
function dispatchUntilDone(q: Queue, host: Host): { dispatches: number; mostPutBack: number } {
  let dispatches = 0;
  let mostPutBack = 0;
  do {
    host.more = 0;
    const acquiredBefore = q.acquired;
    const deliveredBefore = q.consumers.reduce((n, c) => n + (c as FakeConsumer).deliveries.length, 0);
    q.dispatch(NOW);
    const delivered = q.consumers.reduce((n, c) => n + (c as FakeConsumer).deliveries.length, 0) - deliveredBefore;
    // Put back = acquired fell by, plus what was taken again in the same dispatch.
    mostPutBack = Math.max(mostPutBack, acquiredBefore - q.acquired + delivered);
    dispatches++;
  } while (host.more > 0 && dispatches < 10_000);
  return { dispatches, mostPutBack };
}

/** A queue of `count` messages (ids 1..count) of which a consumer `a` holds the first `held`. */
function queueWithHolder(count: number, held: number): { host: Host; q: Queue; a: Holder } {
  const host = new Host();
  const q = new Queue('q', qs(), host);
  for (let id = 1; id <= count; id++) q.enqueue(record(id));
  const a = new Holder('a', held);
  q.addConsumer(a);
  q.dispatch(NOW);
  return { host, q, a };
}

describe('give-back of a detached consumer - in slices', () => {
  it('give-back - 20,000 held messages go back a slice per dispatch; a waiting consumer gets each once, in id order, count raised, then the ones behind', () => {
    const { host, q, a } = queueWithHolder(HELD + 50, HELD);
    expect(q.acquired).toBe(HELD);
    const b = new Holder('b', 0);
    q.addConsumer(b);
    b.credit = 1_000_000;

    host.more = 0;
    const availableBefore = q.available;
    q.removeConsumer(a);
    // Nothing walked yet: the detach only asks for dispatches.
    expect(q.available - availableBefore, 'put back by the detach itself').toBeLessThanOrEqual(MOST_PER_STEP);
    expect(host.more).toBeGreaterThan(0);
    const { dispatches, mostPutBack } = dispatchUntilDone(q, host);
    expect(mostPutBack).toBeLessThanOrEqual(MOST_PER_STEP);
    expect(dispatches).toBeGreaterThan(HELD / MOST_PER_STEP);
    // B got every message once, in id order: the ones A held (not one behind a message
    // still to come back), then the 50 behind them.
    const ids = b.ids;
    expect(ids.length).toBe(HELD + 50);
    expect(ids).toEqual(Array.from({ length: HELD + 50 }, (_, i) => i + 1));
    expect(b.deliveries.slice(0, HELD).every((e) => e.deliveryCount === 1)).toBe(true);
    expect(b.deliveries.slice(HELD).every((e) => e.deliveryCount === 0)).toBe(true);
    expect(q.givingBack).toBe(false);
    expect(q.acquired).toBe(HELD + 50);
  });

  it('give-back - a browser attached meanwhile sees every message once, in id order (its cursor passes none still to come back)', () => {
    const { host, q, a } = queueWithHolder(HELD + 50, HELD);
    q.removeConsumer(a);
    q.dispatch(NOW); // one slice back
    const browser = new FakeConsumer('browser', 1_000_000, true);
    q.addConsumer(browser);
    dispatchUntilDone(q, host);
    expect(browser.ids).toEqual(Array.from({ length: HELD + 50 }, (_, i) => i + 1));
  });

  it('give-back - with nobody waiting, every message is available again after the dispatches, none lost or stuck acquired', () => {
    const { host, q, a } = queueWithHolder(HELD, HELD);
    q.removeConsumer(a);
    dispatchUntilDone(q, host);
    expect(q.acquired).toBe(0);
    expect(q.available).toBe(HELD);
    expect(q.depth).toBe(HELD);
    expect(q.givingBack).toBe(false);
  });

  it('give-back - a few held messages go back at once, as before', () => {
    const { q, a } = queueWithHolder(100, 100);
    q.removeConsumer(a);
    expect(q.available).toBe(100);
    expect(q.givingBack).toBe(false);
  });

  it('give-back - two consumers detaching one after the other: each message back once, in id order for the consumer left', () => {
    const host = new Host();
    const q = new Queue('q', qs(), host);
    for (let id = 1; id <= 3 * HELD; id++) q.enqueue(record(id));
    const a = new Holder('a', HELD);
    const c = new Holder('c', HELD);
    q.addConsumer(a);
    q.addConsumer(c);
    q.dispatch(NOW); // round-robin: a the odd ids, c the even ones
    const b = new Holder('b', 0);
    q.addConsumer(b);
    q.removeConsumer(a);
    q.dispatch(NOW);
    q.dispatch(NOW);
    q.removeConsumer(c); // the walk starts again from the lowest id
    b.credit = 1_000_000;
    dispatchUntilDone(q, host);
    const ids = b.ids;
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBe(3 * HELD);
    // What b took after both detaches came in id order (it took nothing before: no credit).
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
  });

  it('give-back - the walk begins at the lowest message the departed consumer took, not at a long run another consumer holds', () => {
    const host = new Host();
    const q = new Queue('q', qs(), host);
    for (let id = 1; id <= 5 * HELD; id++) q.enqueue(record(id));
    const live = new Holder('live', 4 * HELD);
    q.addConsumer(live);
    q.dispatch(NOW);
    const c = new Holder('c', 2048);
    q.addConsumer(c);
    q.dispatch(NOW);
    expect(c.ids[0]).toBe(4 * HELD + 1);
    const b = new Holder('b', 1_000_000);
    q.addConsumer(b);
    q.removeConsumer(c);
    // 2,048 rows to walk from c's first: one dispatch (from the first acquired row, 20 of them).
    const { dispatches } = dispatchUntilDone(q, host);
    expect(dispatches).toBeLessThanOrEqual(2);
    expect(b.ids).toEqual(Array.from({ length: HELD }, (_, i) => 4 * HELD + i + 1));
    expect(live.unsettled.size).toBe(4 * HELD);
    expect(q.acquired).toBe(5 * HELD);
  });

  it('give-back - a message group stays the departed consumer\'s until its last held message is back, then is free; its order kept', () => {
    const host = new Host();
    const q = new Queue('q', qs({ messageGroups: true }), host);
    // Group x throughout, and ungrouped messages between.
    for (let id = 1; id <= HELD; id++) q.enqueue(record(id, id % 2 === 0 ? `gx:${id}` : `m${id}`));
    const a = new Holder('a', HELD / 2);
    q.addConsumer(a);
    q.dispatch(NOW);
    const heldByA = a.ids;
    const b = new Holder('b', 1_000_000);
    q.addConsumer(b);
    q.dispatch(NOW);
    // B gets the rest, but none of group x: A owns it.
    expect(heldByA.length).toBe(HELD / 2);
    expect(b.ids.filter((id) => id % 2 === 0)).toEqual([]);
    q.removeConsumer(a);
    dispatchUntilDone(q, host);
    const groupX = b.deliveries.filter((e) => e.msg.bytes.toString().startsWith('gx:')).map((e) => e.msg.id);
    expect(groupX).toEqual(Array.from({ length: HELD / 2 }, (_, i) => 2 * (i + 1)));
    expect(b.ids.length).toBe(HELD);
    expect(new Set(b.ids).size).toBe(HELD);
    expect(q.ownedGroupCount).toBe(1); // B holds group x now
  });

  it('give-back - what a transaction accepted stays acquired (its commit or rollback decides); the rest goes back', () => {
    const { host, q, a } = queueWithHolder(HELD, HELD);
    for (const e of a.deliveries.slice(0, 10)) e.txAccepted = true;
    q.removeConsumer(a);
    dispatchUntilDone(q, host);
    expect(q.acquired).toBe(10);
    expect(q.available).toBe(HELD - 10);
    expect(q.givingBack).toBe(false);
    // The rollback gives them back as it did.
    for (const e of a.deliveries.slice(0, 10)) q.release(e, { deliveryFailed: true, undeliverableHere: false });
    expect(q.available).toBe(HELD);
  });

  it('give-back - a priority queue: per level, nothing behind a message still to come back is given', () => {
    const host = new Host();
    const q = new Queue('q', qs({ priorities: 10 }), host);
    for (let id = 1; id <= HELD; id++) q.enqueue(record(id, `m${id}`, id % 3 === 0 ? 9 : 0));
    const a = new Holder('a', HELD / 2);
    q.addConsumer(a);
    q.dispatch(NOW);
    const b = new Holder('b', 0);
    q.addConsumer(b);
    q.removeConsumer(a);
    b.credit = 1_000_000;
    dispatchUntilDone(q, host);
    expect(b.ids.length).toBe(HELD);
    for (const p of [0, 9]) {
      const ids = b.deliveries.filter((e) => e.msg.priority === p).map((e) => e.msg.id);
      expect(ids, `level ${p} in id order`).toEqual([...ids].sort((x, y) => x - y));
    }
  });

  it('give-back - a queue deleted mid-way forgets it; a delete with an alternate exchange sends each message on once', async () => {
    const { broker } = newBroker();
    broker.declareExchange('dlx', 'fanout', { ...defaultExchangeSettings, durable: true });
    broker.declareQueue('dlq', qs());
    broker.bind('dlx', 'dlq', '');
    broker.declareQueue('q', qs({ alternateExchange: 'dlx' }));
    for (let i = 0; i < HELD + 7; i++) broker.publish('q', msg(`m${i}`));
    const q = broker.queues.get('q')!;
    const a: Consumer = new Holder('a', HELD);
    q.addConsumer(a);
    q.dispatch(broker.now());
    q.removeConsumer(a);
    expect(q.givingBack).toBe(true);
    await deleteQueueInSlices(broker, 'q');
    expect(broker.queues.has('q')).toBe(false);
    const dlq = broker.queues.get('dlq')!;
    expect(dlq.depth).toBe(HELD + 7);
    const bodies = dlq.entries().map((e) => e.msg.bytes.toString());
    expect(new Set(bodies).size).toBe(HELD + 7);
    expect(q.givingBack).toBe(false);
  });
});

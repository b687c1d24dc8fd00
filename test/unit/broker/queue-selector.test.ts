// Consumers with a message selector (Consumer.selects) on the queue model: each gets
// only what its selector selects, the rest stays in order for the others; a row's
// verdict is asked once per consumer (the skip marks keep it) unless the row is put
// back; a long run of rows a selector passes over is walked a bounded number per
// dispatch; paged rows are read back to be judged, and one that cannot be read is
// not selected; a browser with a selector sees the selected ones only.
import { describe, expect, it } from 'vitest';
import type { MessageRecord } from '../../../src/broker/changes.js';
import type { BodyLoader, PagedMessage } from '../../../src/broker/paged-message.js';
import { GROUP_SCAN_LIMIT, Queue, type QueueEntry, type QueueHost } from '../../../src/broker/queue.js';
import { compileSelector } from '../../../src/amqp/selector-filter.js';
import { FakeConsumer, dispatchUntilIdle, qs } from './helpers.js';

class Host implements QueueHost {
  more = 0;
  removed(): void {}
  unused(): void {}
  moreToDispatch(): void {
    this.more++;
  }
}

function record(id: number, body: string): MessageRecord {
  return { id, bytes: Buffer.from(body), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined };
}

/** A consumer whose selector takes the messages whose body starts with `prefix`, counting each verdict by message id. */
class SelectingConsumer extends FakeConsumer {
  readonly asked = new Map<number, number>();
  readonly selects: (msg: MessageRecord) => boolean;
  constructor(id: string, prefix: string, credit = 1000, browse = false) {
    super(id, credit, browse);
    this.selects = (msg) => {
      this.asked.set(msg.id, (this.asked.get(msg.id) ?? 0) + 1);
      return msg.bytes.toString().startsWith(prefix);
    };
  }
  get verdicts(): number {
    let n = 0;
    for (const v of this.asked.values()) n += v;
    return n;
  }
}

/** A consumer with a selector as the AMQP edge compiles it. */
class CompiledSelectorConsumer extends FakeConsumer {
  readonly selects: (msg: MessageRecord, deliveryCount: number) => boolean;
  constructor(id: string, selector: string) {
    super(id, 10);
    this.selects = compileSelector(selector).selects;
  }
}

function queue(): { q: Queue; host: Host } {
  const host = new Host();
  return { q: new Queue('q', qs(), host), host };
}

describe('queue consumers with selectors', () => {
  it('two consumers with complementary selectors each get exactly theirs, in order; a plain consumer gets what neither selects', () => {
    const { q } = queue();
    const colours = ['blue', 'red', 'blue', 'green', 'red', 'red', 'blue', 'green'];
    colours.forEach((c, i) => q.enqueue(record(i + 1, `${c}-${i + 1}`)));
    const blue = new SelectingConsumer('blue', 'blue');
    const red = new SelectingConsumer('red', 'red');
    q.addConsumer(blue);
    q.addConsumer(red);
    q.dispatch(0);
    expect(blue.bodies).toEqual(['blue-1', 'blue-3', 'blue-7']);
    expect(red.bodies).toEqual(['red-2', 'red-5', 'red-6']);
    expect(q.available).toBe(2);
    const plain = new FakeConsumer('plain');
    q.addConsumer(plain);
    q.dispatch(0);
    expect(plain.bodies).toEqual(['green-4', 'green-8']);
  });

  it('a selector that selects nothing leaves every message, in order, for a plain consumer', () => {
    const { q } = queue();
    const none = new SelectingConsumer('none', 'nothing');
    q.addConsumer(none);
    for (let id = 1; id <= 20; id++) {
      q.enqueue(record(id, `m${id}`));
      q.dispatch(0);
    }
    expect(none.ids).toEqual([]);
    const plain = new FakeConsumer('plain');
    q.addConsumer(plain);
    q.dispatch(0);
    expect(plain.ids).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });

  it('asks a selector once per row, however many dispatches pass; a row put back is asked again (with the rows after it: the mark is one place)', () => {
    const { q } = queue();
    const none = new SelectingConsumer('none', 'nothing');
    q.addConsumer(none);
    for (let id = 1; id <= 200; id++) {
      q.enqueue(record(id, `m${id}`));
      q.dispatch(0);
      q.dispatch(0);
    }
    expect(none.verdicts).toBe(200);
    expect([...none.asked.values()].every((n) => n === 1)).toBe(true);
    // A plain consumer takes message 1 and gives it back: below the mark, so asked again (once).
    const plain = new FakeConsumer('plain', 1);
    q.addConsumer(plain);
    q.dispatch(0);
    expect(plain.ids).toEqual([1]);
    q.release(plain.deliveries[0]!, { deliveryFailed: false, undeliverableHere: false });
    q.dispatch(0);
    q.dispatch(0);
    expect(none.asked.get(1)).toBe(2);
    expect([...none.asked.values()].every((n) => n <= 2)).toBe(true);
    // And once more only: the mark is back past them all.
    const after = none.verdicts;
    for (let i = 0; i < 5; i++) q.dispatch(0);
    expect(none.verdicts).toBe(after);
  });

  it('a consumer without a selector is never asked about rows (the selector hook is not called)', () => {
    const { q } = queue();
    const selecting = new SelectingConsumer('s', 'keep');
    const plain = new FakeConsumer('plain');
    q.addConsumer(plain);
    for (let id = 1; id <= 10; id++) q.enqueue(record(id, `m${id}`));
    q.dispatch(0);
    expect(plain.ids.length).toBe(10);
    expect(selecting.verdicts).toBe(0);
  });

  it('rows put back below a selecting consumer\'s mark are the only ones it asks about again, and it gets those it selects, in order', () => {
    const { q, host } = queue();
    const n = 5000;
    // Rows 50 and 60 are the selecting consumer's, but a plain consumer holds them (1-100) when it first looks.
    for (let id = 1; id <= n; id++) q.enqueue(record(id, id === 50 || id === 60 ? `take${id}` : `skip${id}`));
    const plain = new FakeConsumer('plain', 100);
    q.addConsumer(plain);
    q.dispatch(0);
    expect(plain.ids.length).toBe(100);
    const c = new SelectingConsumer('c', 'take', 1000);
    q.addConsumer(c);
    dispatchUntilIdle(q, host);
    expect(c.verdicts).toBe(n - 100);
    // Given back, out of order: only these are asked about, not the 4,900 rows after them.
    const byId = (id: number) => plain.deliveries.find((e) => e.msg.id === id)!;
    for (const id of [60, 7, 50, 3]) q.release(byId(id), { deliveryFailed: true, undeliverableHere: false });
    dispatchUntilIdle(q, host);
    expect(c.ids).toEqual([50, 60]);
    expect(c.verdicts).toBe(n - 100 + 4);
    // The rows it passed over are still there for the plain consumer, in order.
    plain.credit = 10;
    dispatchUntilIdle(q, host);
    expect(plain.ids.slice(100)).toEqual([3, 7, 101, 102, 103, 104, 105, 106, 107, 108]);
    // More rows given back than one region keeps (MAX_RETURNED): walked again as before, still right.
    for (let id = 8; id <= 100; id++) if (id !== 50 && id !== 60) q.release(byId(id), { deliveryFailed: true, undeliverableHere: false });
    dispatchUntilIdle(q, host);
    expect(c.ids).toEqual([50, 60]);
    expect([...c.asked.values()].every((v) => v <= 3)).toBe(true);
    // Out: the selecting consumer's 2, and the plain one's 1, 2, 4-6, 3, 7 and 101-108.
    expect(q.available).toBe(n - 2 - 15);
  });

  it('a long run of rows it does not select is walked at most GROUP_SCAN_LIMIT (+1) rows per dispatch, once, and the matching message behind it arrives', () => {
    const { q, host } = queue();
    const run = 20 * GROUP_SCAN_LIMIT;
    for (let id = 1; id <= run; id++) q.enqueue(record(id, `skip${id}`));
    q.enqueue(record(run + 1, 'take'));
    const c = new SelectingConsumer('c', 'take', 10);
    q.addConsumer(c);
    const { dispatches, mostWalked: maxPerDispatch } = dispatchUntilIdle(q, host, { walked: () => q.selectorRowsSkipped });
    expect(c.ids).toEqual([run + 1]);
    expect(maxPerDispatch).toBeLessThanOrEqual(GROUP_SCAN_LIMIT + 1);
    expect(dispatches).toBeGreaterThan(10);
    expect(c.verdicts).toBe(run + 1);
    // Idle now: later dispatches look at nothing again.
    const walked = q.selectorRowsSkipped;
    dispatchUntilIdle(q, host);
    expect(q.selectorRowsSkipped).toBe(walked);
  });

  it('a plain consumer is served while a selecting one walks a long run', () => {
    const { q, host } = queue();
    const run = 4 * GROUP_SCAN_LIMIT;
    for (let id = 1; id <= run; id++) q.enqueue(record(id, `skip${id}`));
    const c = new SelectingConsumer('c', 'take', 10);
    const plain = new FakeConsumer('plain', 3);
    q.addConsumer(c);
    q.addConsumer(plain);
    q.dispatch(0);
    expect(plain.ids).toEqual([1, 2, 3]);
    dispatchUntilIdle(q, host);
    expect(c.ids).toEqual([]);
  });
});

/** Stands in for the journal: bodies by id, some of which cannot be read. */
class MapLoader implements BodyLoader {
  readonly bodies = new Map<number, Buffer>();
  readonly damaged = new Set<number>();
  load(m: PagedMessage): Buffer {
    if (this.damaged.has(m.id)) throw new Error(`record of message ${m.id} is damaged`);
    return this.bodies.get(m.id)!;
  }
  loadSubject(): string | undefined {
    return undefined;
  }
}

describe('selectors on paged messages and browsers', () => {
  it('judges paged rows by their body read back; one that cannot be read is not selected, and stays', () => {
    const { q } = queue();
    const loader = new MapLoader();
    for (let id = 1; id <= 6; id++) {
      const m = record(id, id % 2 === 0 ? `take${id}` : `skip${id}`);
      loader.bodies.set(id, m.bytes);
      q.enqueue(m);
      expect(q.pageOut(id, loader)).toBeGreaterThan(0);
    }
    loader.damaged.add(4);
    const c = new SelectingConsumer('c', 'take');
    q.addConsumer(c);
    q.dispatch(0);
    expect(c.ids).toEqual([2, 6]);
    expect(q.available).toBe(4);
  });

  it('a browser with a selector sees the selected messages only, takes none, and sees new ones as they come', () => {
    const { q, host } = queue();
    for (let id = 1; id <= 6; id++) q.enqueue(record(id, id % 3 === 0 ? `take${id}` : `skip${id}`));
    const b = new SelectingConsumer('b', 'take', 10, true);
    q.addConsumer(b);
    dispatchUntilIdle(q, host);
    expect(b.ids).toEqual([3, 6]);
    q.enqueue(record(7, 'take7'));
    q.enqueue(record(8, 'skip8'));
    dispatchUntilIdle(q, host);
    expect(b.ids).toEqual([3, 6, 7]);
    expect(q.available).toBe(8);
    const entries: QueueEntry[] = q.entries();
    expect(entries.every((e) => e.acquiredBy === undefined)).toBe(true);
  });

  it('a browser passing a long run does so a bounded number of rows per dispatch', () => {
    const { q, host } = queue();
    const run = 5 * GROUP_SCAN_LIMIT;
    for (let id = 1; id <= run; id++) q.enqueue(record(id, `skip${id}`));
    q.enqueue(record(run + 1, 'take'));
    const b = new SelectingConsumer('b', 'take', 10, true);
    q.addConsumer(b);
    const { dispatches, mostWalked: maxPerDispatch } = dispatchUntilIdle(q, host, { limit: 100, walked: () => q.selectorRowsSkipped });
    expect(b.ids).toEqual([run + 1]);
    expect(maxPerDispatch).toBeLessThanOrEqual(GROUP_SCAN_LIMIT + 1);
    expect(dispatches).toBeGreaterThan(1);
  });

  it('a selector on JMSXDeliveryCount or JMSRedelivered sees each entry\'s count as it is now, raised by releases', () => {
    const { q, host } = queue();
    for (let i = 1; i <= 3; i++) q.enqueue(record(i, `m${i}`));
    const first = new FakeConsumer('first', 10);
    q.addConsumer(first);
    q.dispatch(0);
    expect(first.ids).toEqual([1, 2, 3]);
    // Message 2 given back as delivery-failed (a rollback, a closed consumer): its count is raised; 1 and 3 are not.
    q.release(first.deliveries[1]!, { deliveryFailed: true, undeliverableHere: false });
    q.release(first.deliveries[0]!, { deliveryFailed: false, undeliverableHere: false });
    q.release(first.deliveries[2]!, { deliveryFailed: false, undeliverableHere: false });
    q.removeConsumer(first);
    const fresh = new CompiledSelectorConsumer('fresh', 'JMSRedelivered = FALSE');
    q.addConsumer(fresh);
    dispatchUntilIdle(q, host);
    const again = new CompiledSelectorConsumer('again', 'JMSXDeliveryCount > 1');
    q.addConsumer(again);
    dispatchUntilIdle(q, host);
    expect(fresh.ids).toEqual([1, 3]);
    expect(again.ids).toEqual([2]);
  });
});


// Message groups (qpid.message-groups): a group belongs to the consumer that holds an
// unsettled message of it, nobody else gets its messages meanwhile, and it is free
// again once its owner holds none (settled, released, modified, rejected, detached).
// Messages without a group-id flow as on any queue. The group is kept per row, so a
// paged-out message keeps it without its body being read, and a consumer passing a long
// run of a group someone else owns does so a bounded number of rows per dispatch.
import { describe, expect, it } from 'vitest';
import rhea from 'rhea';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { MAX_GROUP_ID_BYTES, MessageGroups } from '../../../src/broker/message-groups.js';
import { PagedMessage, pagedFields, type BodyLoader, type PagedRun } from '../../../src/broker/paged-message.js';
import { GROUP_SCAN_LIMIT, Queue, type QueueEntry, type QueueHost } from '../../../src/broker/queue.js';
import { parseQueueSettings } from '../../../src/broker/settings.js';
import { readGroupKey } from '../../../src/amqp/group-key-reader.js';
import { FakeConsumer, dispatchUntilIdle, feedBackup, msg, newBroker, qs } from './helpers.js';

/** properties with group-id (field 10) as a str8, then an amqp-value body; `header`: a header section first. */
function encoded(group: string | undefined, body: string, header = false): { bytes: Buffer; headerLength: number } {
  const parts: Buffer[] = [];
  if (header) parts.push(Buffer.from([0x00, 0x53, 0x70, 0x45]));
  if (group !== undefined) {
    const g = Buffer.from(group, 'utf8');
    const fields = Buffer.concat([Buffer.alloc(10, 0x40), Buffer.from([0xa1, g.length]), g]);
    parts.push(Buffer.from([0x00, 0x53, 0x73, 0xc0, fields.length + 1, 11]), fields);
  }
  const b = Buffer.from(body);
  parts.push(Buffer.from([0x00, 0x53, 0x77, 0xa1, b.length]), b);
  return { bytes: Buffer.concat(parts), headerLength: header ? 4 : 0 };
}

const groupOf = new Map<number, string | undefined>();

function record(id: number, group: string | undefined, opts: { priority?: number; expiresAt?: number } = {}): MessageRecord {
  groupOf.set(id, group);
  const { bytes, headerLength } = encoded(group, `m${id}`, id % 2 === 0);
  return { id, bytes, headerLength, durable: true, priority: opts.priority ?? 4, expiresAt: opts.expiresAt ?? 0, deliveryCount: 0, subject: undefined };
}

class Host implements QueueHost {
  removedIds: number[] = [];
  more = 0;
  removed(_q: Queue, entry: QueueEntry): void {
    this.removedIds.push(entry.msg.id);
  }
  unused(): void {}
  moreToDispatch(): void {
    this.more++;
  }
  groupKey(bytes: Buffer, maxBytes: number): string | undefined {
    return readGroupKey(bytes, maxBytes);
  }
}

/** Who holds an unsettled message of each group now; every delivery is checked against it. */
class Holdings {
  private readonly holders = new Map<string, { consumer: GroupConsumer; count: number }>();
  violations: string[] = [];
  took(c: GroupConsumer, id: number): void {
    const g = groupOf.get(id);
    if (g === undefined) return;
    const h = this.holders.get(g);
    if (h && h.consumer !== c) this.violations.push(`group ${g}: message ${id} went to ${c.id} while ${h.consumer.id} holds ${h.count}`);
    if (h && h.consumer === c) h.count++;
    else this.holders.set(g, { consumer: c, count: 1 });
  }
  settled(id: number): void {
    const g = groupOf.get(id);
    if (g === undefined) return;
    const h = this.holders.get(g)!;
    if (--h.count === 0) this.holders.delete(g);
  }
}

class GroupConsumer extends FakeConsumer {
  readonly holding = new Set<QueueEntry>();
  constructor(
    id: string,
    credit: number,
    private readonly holdings: Holdings,
  ) {
    super(id, credit);
  }
  override deliver(entry: QueueEntry, queue: Queue): void {
    this.holdings.took(this, entry.msg.id);
    this.holding.add(entry);
    super.deliver(entry, queue);
  }
  /** Settle (accept) the oldest it holds; its id. */
  acceptOldest(q: Queue): number | undefined {
    const e = [...this.holding].sort((a, b) => a.msg.id - b.msg.id)[0];
    if (!e) return undefined;
    this.settle(q, e, 'accept');
    return e.msg.id;
  }
  settle(q: Queue, e: QueueEntry, how: 'accept' | 'reject' | 'release' | 'modified'): void {
    this.holding.delete(e);
    this.holdings.settled(e.msg.id);
    if (how === 'accept') q.remove(e, 'accepted');
    else if (how === 'reject') q.remove(e, 'rejected');
    else q.release(e, { deliveryFailed: how === 'modified', undeliverableHere: false });
  }
  /** Ids delivered, per group. */
  idsOf(group: string | undefined): number[] {
    return this.ids.filter((id) => groupOf.get(id) === group);
  }
}

function groupedQueue(overrides = {}): { q: Queue; host: Host; holdings: Holdings } {
  const host = new Host();
  const q = new Queue('q', qs({ messageGroups: true, ...overrides }), host);
  return { q, host, holdings: new Holdings() };
}

/** Ascending, without repeats: a group's messages came in order. */
function ascending(ids: number[]): boolean {
  return ids.every((id, i) => i === 0 || id > ids[i - 1]!);
}

describe('message groups - reading the group-id', () => {
  it('reads group-id as rhea and our own encoding write it, after a header and message-annotations, and nothing else', () => {
    const withAll = rhea.message.encode({ durable: true, priority: 7, message_annotations: { x: 1 }, message_id: 'id-1', user_id: Buffer.from('u'), to: 'q', subject: 's', reply_to: 'r', correlation_id: 42, content_type: 'text/plain', creation_time: new Date(5), group_id: 'orders-7', group_sequence: 3, body: 'x' } as never);
    expect(readGroupKey(withAll, MAX_GROUP_ID_BYTES)).toBe('orders-7');
    expect(readGroupKey(rhea.message.encode({ message_id: 'id-1', body: 'x' }), MAX_GROUP_ID_BYTES)).toBeUndefined();
    expect(readGroupKey(rhea.message.encode({ body: 'x' }), MAX_GROUP_ID_BYTES)).toBeUndefined();
    expect(readGroupKey(encoded('g', 'b', true).bytes, MAX_GROUP_ID_BYTES)).toBe('g');
    expect(readGroupKey(encoded(undefined, 'b', true).bytes, MAX_GROUP_ID_BYTES)).toBeUndefined();
  });

  it('keys a long group-id by its first bytes, and gives up (no group) on truncated or hostile bytes without throwing', () => {
    const long = 'x'.repeat(200);
    expect(readGroupKey(encoded(long, 'b').bytes, 16)).toBe('x'.repeat(16));
    const bytes = encoded('group', 'b', true).bytes;
    for (let cut = 0; cut < bytes.length; cut++) {
      const key = readGroupKey(bytes.subarray(0, cut), MAX_GROUP_ID_BYTES);
      expect(key === undefined || key === 'group').toBe(true);
    }
    // Descriptors nested without end, sizes past the end, lists claiming 2^32 fields: no group, no exception.
    expect(readGroupKey(Buffer.alloc(64, 0x00), MAX_GROUP_ID_BYTES)).toBeUndefined();
    expect(readGroupKey(Buffer.from([0x00, 0x53, 0x73, 0xd0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), MAX_GROUP_ID_BYTES)).toBeUndefined();
    expect(readGroupKey(Buffer.from([0x00, 0x53, 0x72, 0xd1, 0x7f, 0xff, 0xff, 0xff]), MAX_GROUP_ID_BYTES)).toBeUndefined();
  });

  it('is a queue argument (qpid.message-groups), off unless asked for, refused when not a boolean', () => {
    expect(parseQueueSettings({}).messageGroups).toBeUndefined();
    expect(parseQueueSettings({ 'qpid.message-groups': true }).messageGroups).toBe(true);
    expect(parseQueueSettings({ 'message-groups': 'yes' }).messageGroups).toBe(true);
    expect(parseQueueSettings({ 'qpid.message-groups': 'false' }).messageGroups).toBeUndefined();
    expect(() => parseQueueSettings({ 'qpid.message-groups': 'sometimes' })).toThrow(/qpid.message-groups must be true or false/);
  });
});

describe('message groups - the interned groups', () => {
  it('past its bound, new groups share one overflow group (owned as one), and slots are freed with their last message and reused', () => {
    const g = new MessageGroups(3);
    const a = g.enter('a', 1);
    const b = g.enter('b', 2);
    const c = g.enter('c', 3);
    const d = g.enter('d', 4);
    const e = g.enter('e', 5);
    expect(new Set([a, b, c]).size).toBe(3);
    expect(d).toBe(e); // d and e merged: still one consumer at a time, in order
    expect(g.overflowed).toBe(2);
    expect(g.size).toBe(4);
    const owner = new FakeConsumer('o');
    g.acquire(d, owner);
    expect(g.ownedByOther(e, new FakeConsumer('x'))).toBe(true);
    expect(g.unhold(d)).toBe(true);
    g.leave(a);
    g.leave(b);
    expect(g.size).toBe(2);
    const f = g.enter('f', 6);
    expect([a, b]).toContain(f); // a freed slot, reused
    expect(f).not.toBe(d);
    expect(g.ownedByOther(f, owner)).toBe(false);
  });
});

describe('message groups - the dispatch rule on a queue', () => {
  it('interleaved groups, two consumers: each group at one consumer, in order, while held', () => {
    const { q, holdings } = groupedQueue();
    let id = 0;
    // Three groups over two consumers: round-robin alone would hand each group to both.
    for (let i = 0; i < 39; i++) q.enqueue(record(++id, ['A', 'B', 'C'][i % 3]));
    const a = new GroupConsumer('a', 3, holdings);
    const b = new GroupConsumer('b', 3, holdings);
    q.addConsumer(a);
    q.addConsumer(b);
    // Settle one at a time, the two in turn, giving credit back: ownership moves as groups free.
    for (let round = 0; round < 200 && q.depth > 0; round++) {
      q.dispatch(0);
      const c = round % 2 === 0 ? a : b;
      if (c.acceptOldest(q) !== undefined) c.credit++;
    }
    expect(q.depth).toBe(0);
    expect(holdings.violations).toEqual([]);
    for (const g of ['A', 'B', 'C']) {
      const order = [...a.deliveries, ...b.deliveries].filter((e) => groupOf.get(e.msg.id) === g).map((e) => e.msg.id);
      expect(ascending(order)).toBe(true);
    }
  });

  it('three consumers: a group another holds is passed over, messages without a group go to whoever is next', () => {
    const { q, holdings } = groupedQueue();
    const plan: Array<string | undefined> = ['A', 'A', 'B', undefined, 'A', 'C', undefined, 'B', 'C', undefined, 'A', 'B'];
    plan.forEach((g, i) => q.enqueue(record(1000 + i, g)));
    const cs = ['x', 'y', 'z'].map((n) => new GroupConsumer(n, 100, holdings));
    for (const c of cs) q.addConsumer(c);
    q.dispatch(0);
    expect(holdings.violations).toEqual([]);
    expect(q.available).toBe(0);
    // Each group went whole to one consumer (nobody settled), in order.
    for (const g of ['A', 'B', 'C']) {
      const owners = cs.filter((c) => c.idsOf(g).length > 0);
      expect(owners.length).toBe(1);
      expect(owners[0]!.idsOf(g)).toEqual(plan.flatMap((p, i) => (p === g ? [1000 + i] : [])));
    }
    // Ungrouped ones went to whoever was next, each once.
    expect(cs.flatMap((c) => c.idsOf(undefined)).sort()).toEqual([1003, 1006, 1009]);
    expect(q.groupCount).toBe(3);
    expect(q.ownedGroupCount).toBe(3);
  });

  it('a queue without message groups shares a group between consumers, as before', () => {
    const q = new Queue('q', qs(), new Host());
    for (let id = 1; id <= 4; id++) q.enqueue(record(id, 'A'));
    const a = new FakeConsumer('a', 10);
    const b = new FakeConsumer('b', 10);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0);
    expect(a.ids).toEqual([1, 3]);
    expect(b.ids).toEqual([2, 4]);
    expect(q.groupCount).toBeUndefined();
  });

  for (const how of ['accept', 'reject', 'release', 'modified'] as const) {
    it(`${how}: the owner's last held message settled frees the group for the next consumer`, () => {
      const { q, host, holdings } = groupedQueue();
      for (let id = 1; id <= 3; id++) q.enqueue(record(id, 'A'));
      q.enqueue(record(4, 'B'));
      const a = new GroupConsumer('a', 1, holdings);
      const b = new GroupConsumer('b', 0, holdings);
      q.addConsumer(a);
      q.addConsumer(b);
      q.dispatch(0);
      expect(a.ids).toEqual([1]);
      b.credit = 10;
      q.dispatch(0);
      // b passes over A (a holds 1) and takes B.
      expect(b.ids).toEqual([4]);
      const asked = host.more;
      a.settle(q, a.deliveries[0]!, how);
      // The group's next messages wait for b: the queue asks for a dispatch (an accept
      // brings no new message or credit that would dispatch it otherwise).
      expect(host.more).toBeGreaterThan(asked);
      q.dispatch(0);
      const back = how === 'release' || how === 'modified';
      expect(b.idsOf('A')).toEqual(back ? [1, 2, 3] : [2, 3]);
      expect(holdings.violations).toEqual([]);
      if (how === 'modified') expect(b.deliveries.find((e) => e.msg.id === 1)!.deliveryCount).toBe(1);
    });
  }

  it('the owner keeps its group while it holds any one of its messages: settling one of two does not free it', () => {
    const { q, holdings } = groupedQueue();
    for (let id = 1; id <= 4; id++) q.enqueue(record(id, 'A'));
    const a = new GroupConsumer('a', 2, holdings);
    const b = new GroupConsumer('b', 5, holdings);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0);
    expect(a.ids).toEqual([1, 2]);
    expect(b.ids).toEqual([]);
    a.acceptOldest(q);
    q.dispatch(0);
    expect(b.ids).toEqual([]);
    a.credit = 1;
    q.dispatch(0);
    expect(a.ids).toEqual([1, 2, 3]);
    expect(holdings.violations).toEqual([]);
  });

  it('a detach gives the group back with its messages: the next consumer gets them in order', () => {
    const { q, holdings } = groupedQueue();
    for (let id = 1; id <= 5; id++) q.enqueue(record(id, 'A'));
    const a = new GroupConsumer('a', 2, holdings);
    const b = new GroupConsumer('b', 0, holdings);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0);
    b.credit = 10;
    q.dispatch(0);
    expect(b.ids).toEqual([]);
    q.removeConsumer(a);
    q.dispatch(0);
    expect(b.ids).toEqual([1, 2, 3, 4, 5]);
  });

  it('a message accepted under a transaction keeps its group owned after its consumer detaches, until the rollback releases it', () => {
    const { q, holdings } = groupedQueue();
    for (let id = 1; id <= 3; id++) q.enqueue(record(id, 'A'));
    const a = new GroupConsumer('a', 1, holdings);
    const b = new GroupConsumer('b', 0, holdings);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0);
    const held = a.deliveries[0]!;
    held.txAccepted = true;
    q.removeConsumer(a);
    b.credit = 10;
    q.dispatch(0);
    expect(b.ids).toEqual([]);
    // The rollback (coordinator.ts) releases it: the group is free, in order.
    held.txAccepted = false;
    q.release(held, { deliveryFailed: true, undeliverableHere: false });
    q.dispatch(0);
    expect(b.ids).toEqual([1, 2, 3]);
  });

  it('a committed transaction dequeues the held message and frees the group', () => {
    const { q, holdings } = groupedQueue();
    for (let id = 1; id <= 3; id++) q.enqueue(record(id, 'A'));
    const a = new GroupConsumer('a', 1, holdings);
    const b = new GroupConsumer('b', 10, holdings);
    q.addConsumer(a);
    q.dispatch(0);
    q.addConsumer(b);
    q.dispatch(0);
    expect(b.ids).toEqual([]);
    expect(q.drop(1)).toBe(true); // the commit's dequeue
    q.dispatch(0);
    expect(b.ids).toEqual([2, 3]);
  });

  it('priorities: a group stays at its owner across levels, higher levels first', () => {
    const { q, holdings } = groupedQueue({ priorities: 10 });
    q.enqueue(record(1, 'A', { priority: 0 }));
    q.enqueue(record(2, 'A', { priority: 0 }));
    q.enqueue(record(3, 'A', { priority: 9 }));
    q.enqueue(record(4, 'B', { priority: 9 }));
    q.enqueue(record(5, 'B', { priority: 0 }));
    const a = new GroupConsumer('a', 1, holdings);
    const b = new GroupConsumer('b', 5, holdings);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0);
    // a takes the highest (3, A); b passes over A in both levels: B's 4, then 5.
    expect(a.ids).toEqual([3]);
    expect(b.ids).toEqual([4, 5]);
    a.settle(q, a.deliveries[0]!, 'accept');
    q.dispatch(0);
    expect(b.ids).toEqual([4, 5, 1, 2]);
    expect(holdings.violations).toEqual([]);
  });

  it('expiry and a ring drop take messages out of their groups; a group with no messages left frees its slot', () => {
    const { q } = groupedQueue({ maxCount: 3, limitPolicy: 'ring' });
    q.enqueue(record(1, 'A', { expiresAt: 50 }));
    q.enqueue(record(2, 'B'));
    q.enqueue(record(3, 'C'));
    expect(q.groupCount).toBe(3);
    expect(q.expire(100)).toBe(1);
    expect(q.groupCount).toBe(2);
    expect(q.makeRoom(10)).toBe(true);
    q.enqueue(record(4, 'D'));
    expect(q.makeRoom(10)).toBe(true); // drops 2 (B)
    q.enqueue(record(5, 'D'));
    expect(q.groupCount).toBe(2); // C and D
    q.purge();
    expect(q.groupCount).toBe(0);
  });
});

/** Stands in for the journal: bodies by id, loads counted. */
class MapLoader implements BodyLoader {
  readonly bodies = new Map<number, Buffer>();
  loads = 0;
  load(m: PagedMessage): Buffer {
    this.loads++;
    return this.bodies.get(m.id)!;
  }
  loadSubject(): string | undefined {
    return undefined;
  }
}

describe('message groups - paged messages', () => {
  it('a message paged out keeps its group, and passing over it reads no body back', () => {
    const { q, holdings } = groupedQueue();
    const loader = new MapLoader();
    for (let id = 1; id <= 6; id++) {
      const m = record(id, id <= 4 ? 'A' : 'B');
      loader.bodies.set(id, m.bytes);
      q.enqueue(m);
    }
    const a = new GroupConsumer('a', 1, holdings);
    q.addConsumer(a);
    q.dispatch(0); // a owns A
    for (const id of [2, 3, 4, 5, 6]) expect(q.pageOut(id, loader)).toBeGreaterThan(0);
    const b = new GroupConsumer('b', 10, holdings);
    q.addConsumer(b);
    q.dispatch(0);
    expect(b.ids).toEqual([5, 6]);
    expect(loader.loads).toBe(0);
    expect(holdings.violations).toEqual([]);
  });

  it('recovered paged rows (groups not in the journal index) are read once at their first look and then kept apart', () => {
    const { q, holdings } = groupedQueue();
    const loader = new MapLoader();
    const n = 8;
    const run: PagedRun = {
      count: n,
      ids: new Float64Array(n),
      size: new Uint32Array(n),
      expiresAt: new Float64Array(n),
      deliveryCount: new Uint32Array(n),
      headerLength: new Uint32Array(n),
      priority: new Uint8Array(n),
      flags: new Uint8Array(n),
    };
    for (let i = 0; i < n; i++) {
      const m = record(100 + i, i % 2 === 0 ? 'A' : 'B');
      loader.bodies.set(m.id, m.bytes);
      const f = pagedFields(m);
      run.ids[i] = f.id;
      run.size[i] = f.size;
      run.headerLength[i] = f.headerLength;
      run.priority[i] = f.priority;
      run.flags[i] = 1;
    }
    q.enqueuePagedRun(run, loader);
    const a = new GroupConsumer('a', 1, holdings);
    const b = new GroupConsumer('b', 1, holdings);
    q.addConsumer(a);
    q.addConsumer(b);
    q.dispatch(0);
    expect(a.ids).toEqual([100]);
    expect(b.ids).toEqual([101]);
    const loadsAfterFirst = loader.loads;
    a.credit = 10;
    q.dispatch(0); // a passes over B rows (b holds B): each read once, at most
    expect(a.ids).toEqual([100, 102, 104, 106]);
    b.credit = 10;
    q.dispatch(0);
    expect(b.ids).toEqual([101, 103, 105, 107]);
    expect(loader.loads - loadsAfterFirst).toBeLessThanOrEqual(n);
    expect(holdings.violations).toEqual([]);
    expect(q.groupCount).toBe(2);
  });
});

describe('message groups - a long run of an owned group', () => {
  it('a second consumer gets the next message of another group, each dispatch passing at most GROUP_SCAN_LIMIT rows, the run walked once', () => {
    const { q, host, holdings } = groupedQueue();
    const run = 20 * GROUP_SCAN_LIMIT;
    for (let id = 1; id <= run; id++) q.enqueue(record(id, 'A'));
    const a = new GroupConsumer('a', 1, holdings);
    q.addConsumer(a);
    q.dispatch(0); // a owns A, holding message 1
    const b = new GroupConsumer('b', 10, holdings);
    q.addConsumer(b);
    q.enqueue(record(run + 1, 'B'));
    // The broker dispatches again while moreToDispatch asks (a bounded number of times here).
    const { dispatches, mostWalked: maxPerDispatch } = dispatchUntilIdle(q, host, { walked: () => q.groupRowsSkipped, until: () => b.ids.length > 0 });
    expect(b.ids).toEqual([run + 1]);
    expect(maxPerDispatch).toBeLessThanOrEqual(GROUP_SCAN_LIMIT);
    expect(dispatches).toBeGreaterThan(1);
    // From here, new messages of other groups cost b no walk of the run.
    const walked = q.groupRowsSkipped;
    for (let i = 2; i <= 50; i++) {
      q.enqueue(record(run + i, 'C'));
      q.dispatch(0);
    }
    expect(b.ids.length).toBe(10);
    expect(q.groupRowsSkipped - walked).toBeLessThan(100);
    expect(walked).toBeLessThan(run + GROUP_SCAN_LIMIT);
    // When A frees, its messages go to whoever has credit, from its first one.
    a.settle(q, a.deliveries[0]!, 'accept');
    b.settle(q, b.deliveries[0]!, 'accept');
    b.credit = 2;
    const beforeFree = q.groupRowsSkipped;
    q.dispatch(0);
    expect(holdings.violations).toEqual([]);
    expect(b.idsOf('A')).toEqual([2, 3]);
    // b's look started at A's first message, not at the head of the queue again.
    expect(q.groupRowsSkipped - beforeFree).toBe(0);
  });

  it('with nothing but the owned group queued, a waiting consumer stops asking once it has looked at every row', () => {
    const { q, host, holdings } = groupedQueue();
    const run = 5 * GROUP_SCAN_LIMIT;
    for (let id = 1; id <= run; id++) q.enqueue(record(id, 'A'));
    const a = new GroupConsumer('a', 1, holdings);
    q.addConsumer(a);
    q.dispatch(0);
    const b = new GroupConsumer('b', 10, holdings);
    q.addConsumer(b);
    let dispatches = 0;
    do {
      host.more = 0;
      q.dispatch(0);
      dispatches++;
    } while (host.more > 0 && dispatches < 1000);
    expect(host.more).toBe(0);
    expect(dispatches).toBeLessThanOrEqual(6);
    const walked = q.groupRowsSkipped;
    for (let i = 0; i < 100; i++) q.dispatch(0);
    expect(q.groupRowsSkipped).toBe(walked);
    expect(b.ids).toEqual([]);
  });
});

describe('message groups - through the broker', () => {
  it('an HA backup declares the queue with its groups and reads each replicated message\'s group; a dispatch cut short is scheduled again', () => {
    const ready: string[] = [];
    const primary = newBroker({ events: { queueReady: (q) => ready.push(q.name) }, groupKeys: readGroupKey }).broker;
    const backup = newBroker({ groupKeys: readGroupKey }).broker;
    feedBackup(primary, backup);
    primary.declareQueue('orders', qs({ durable: true, messageGroups: true }));
    for (let i = 0; i < 6; i++) primary.publish('orders', msg('', { ...encoded(`g${i % 3}`, `b${i}`), durable: true }));
    const copy = backup.queues.get('orders')!;
    expect(copy.settings.messageGroups).toBe(true);
    expect(copy.groupCount).toBe(3);
    expect(primary.queues.get('orders')!.groupCount).toBe(3);
    ready.length = 0;
    primary.moreToDispatch(primary.queues.get('orders')!);
    expect(ready).toEqual(['orders']);
  });
});

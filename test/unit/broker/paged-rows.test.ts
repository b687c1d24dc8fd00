// Queues keep paged messages as rows of numbers, not objects (queue.ts). A queue
// whose every body is paged out after each step must behave exactly like one
// that keeps everything in memory: same deliveries, order, delivery counts,
// expiries, browsing, refusals and removals.
import { describe, expect, it } from 'vitest';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { PagedMessage, type BodyLoader } from '../../../src/broker/paged-message.js';
import type { Queue, QueueEntry } from '../../../src/broker/queue.js';
import { FakeConsumer, msg, newBroker, prng, qs } from './helpers.js';

/** Stands in for the journal: keeps every record it is shown, reads count as loads. */
class MapLoader implements BodyLoader {
  readonly records = new Map<string, MessageRecord>();
  loads = 0;
  keep(queue: string, m: MessageRecord): void {
    if (!(m instanceof PagedMessage)) this.records.set(`${queue}/${m.id}`, { ...m });
  }
  load(m: PagedMessage): Buffer {
    this.loads++;
    const r = this.records.get(`${m.queue}/${m.id}`);
    if (!r) throw new Error(`no body for ${m.queue}/${m.id}`);
    return r.bytes;
  }
  loadSubject(m: PagedMessage): string | undefined {
    return this.records.get(`${m.queue}/${m.id}`)!.subject;
  }
}

function view(e: QueueEntry) {
  return { id: e.msg.id, body: e.msg.bytes.toString(), dc: e.deliveryCount, subject: e.msg.subject, expiresAt: e.msg.expiresAt, priority: e.msg.priority };
}

function world(paging: boolean, priorities: number) {
  const env = newBroker();
  const loader = new MapLoader();
  const queue = env.broker.declareQueue('q', qs({ priorities, alternateExchange: 'amq.fanout' })).queue;
  const dlq = env.broker.declareQueue('dlq', qs()).queue;
  env.broker.bind('amq.fanout', 'dlq', '');
  const pageAll = () => {
    if (!paging) return;
    for (const q of [queue, dlq]) {
      for (const e of q.entries()) loader.keep(q.name, e.msg);
      for (const id of [...q.ids()]) q.pageOut(id, loader);
    }
  };
  const consumers = [new RecordingConsumer('a', 0), new RecordingConsumer('b', 0), new RecordingConsumer('browser', 0, true)];
  for (const c of consumers) queue.addConsumer(c);
  return { ...env, loader, queue, dlq, pageAll, consumers };
}

type World = ReturnType<typeof world>;

/** Records what each delivery looked like when it was made (entry objects change later). */
class RecordingConsumer extends FakeConsumer {
  readonly seen: Array<ReturnType<typeof view>> = [];
  override deliver(entry: QueueEntry, queue: Queue): void {
    this.seen.push(view(entry));
    super.deliver(entry, queue);
  }
}

function state(w: World) {
  return {
    q: w.queue.entries().map(view),
    available: [...w.queue.availableEntries()].map((e) => e.msg.id),
    dlq: w.dlq.entries().map(view),
    depth: [w.queue.depth, w.queue.available, w.queue.acquired, w.queue.byteDepth],
    nonDurable: [w.queue.nonDurableDepth, w.dlq.nonDurableDepth],
    delivered: w.consumers.map((c) => c.seen),
  };
}

describe('queue paged rows', () => {
  for (const [seed, priorities] of [
    [1, 1],
    [2, 3],
    [3, 10],
    [4, 1],
  ] as const) {
    it(`queue paged rows - seed ${seed}, ${priorities} levels: a fully paged queue behaves like one in memory`, () => {
      const worlds = [world(false, priorities), world(true, priorities)];
      const rnd = prng(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
      for (let step = 0; step < 1500; step++) {
        const op = rnd();
        // The same decision in both worlds; positions are taken from the in-memory one.
        const plan =
          op < 0.35
            ? { kind: 'send', body: `m${step}`, durable: rnd() < 0.6, priority: Math.floor(rnd() * 10), ttl: rnd() < 0.15 ? 1 + Math.floor(rnd() * 50) : undefined, subject: rnd() < 0.3 ? `s${step % 3}` : undefined }
            : op < 0.55
              ? { kind: 'credit', consumer: Math.floor(rnd() * 3), n: 1 + Math.floor(rnd() * 4) }
              : op < 0.85
                ? { kind: 'settle', consumer: Math.floor(rnd() * 2), how: pick(['accept', 'reject', 'release', 'failed', 'refuse'] as const), k: rnd() }
                : op < 0.9
                  ? { kind: 'time', ms: Math.floor(rnd() * 20) }
                  : op < 0.93
                    ? { kind: 'expire' }
                    : op < 0.95
                      ? { kind: 'detach', consumer: Math.floor(rnd() * 2) }
                      : op < 0.97
                        ? { kind: 'purge', n: 1 + Math.floor(rnd() * 3) }
                        : { kind: 'ring' };
        for (const w of worlds) {
          const [a, b] = w.consumers;
          switch (plan.kind) {
            case 'send':
              w.broker.publish('q', msg(plan.body!, { durable: plan.durable!, priority: plan.priority!, ttlMs: plan.ttl, subject: plan.subject }));
              break;
            case 'credit':
              w.consumers[plan.consumer!]!.credit += plan.n!;
              break;
            case 'settle': {
              const c = [a, b][plan.consumer!]!;
              // What it holds now, by id (the in-memory world delivers the same object again on redelivery).
              const held = [...new Map(c.deliveries.filter((e) => e.acquiredBy === c).map((e) => [e.msg.id, e])).values()].sort((x, y) => x.msg.id - y.msg.id);
              if (held.length === 0) break;
              const e = held[Math.floor(plan.k! * held.length)]!;
              if (plan.how === 'accept') w.broker.accept(w.queue, e);
              else if (plan.how === 'reject') w.broker.reject(w.queue, e);
              else w.queue.release(e, { deliveryFailed: plan.how === 'failed', undeliverableHere: plan.how === 'refuse' });
              break;
            }
            case 'time':
              w.clock.advance(plan.ms!);
              break;
            case 'expire':
              w.broker.expire();
              break;
            case 'detach': {
              const c = [a, b][plan.consumer!]!;
              w.queue.removeConsumer(c);
              w.queue.addConsumer(c);
              break;
            }
            case 'purge':
              w.queue.purge(plan.n!);
              break;
            case 'ring':
              w.queue.makeRoom(0);
              break;
          }
          w.queue.dispatch(w.clock.now());
          w.pageAll();
        }
        if (process.env.EVERY || step % 50 === 0 || step === 1499) {
          expect(state(worlds[1]!), `step ${step}`).toEqual(state(worlds[0]!));
          // The count of non-durable messages (what an HA backup asks before trusting its journal) is exact.
          for (const q of [worlds[1]!.queue, worlds[1]!.dlq]) expect(q.nonDurableDepth, `step ${step} ${q.name}`).toBe(q.entries().filter((e) => !e.msg.durable).length);
        }
      }
      expect(worlds[1]!.queue.pagedDepth).toBeGreaterThan(0);
      expect(worlds[1]!.loader.loads).toBeGreaterThan(0);
    });
  }

  it('queue paged rows - liveEntries streams every message present throughout while the queue changes', () => {
    const w = world(true, 3);
    for (let i = 0; i < 3000; i++) w.broker.publish('q', msg(`m${i}`, { durable: true, priority: i % 10 }));
    w.pageAll();
    const c = w.consumers[0]!;
    c.credit = 1_000_000;
    const seen = new Set<number>();
    const stable = new Set(w.queue.ids());
    const it = w.queue.liveEntries();
    let n = 0;
    for (let r = it.next(); !r.done; r = it.next()) {
      seen.add(r.value.msg.id);
      // Between steps: deliver some, release some back, accept some, add new ones.
      if (++n % 7 === 0) {
        w.queue.dispatch(w.clock.now());
        const held = c.deliveries.filter((e) => e.acquiredBy === c);
        for (const [k, e] of held.entries()) {
          if (k % 3 === 0) {
            w.broker.accept(w.queue, e);
            stable.delete(e.msg.id);
          } else w.queue.release(e, { deliveryFailed: false, undeliverableHere: false });
        }
        c.credit = 5;
        w.broker.publish('q', msg(`late${n}`, { durable: true }));
      }
    }
    // Everything that was there from start to end was seen, moves between acquired and available notwithstanding.
    for (const id of stable) expect(seen.has(id)).toBe(true);
  });

  it('queue paged rows - a paged message costs a few dozen bytes, not an object', () => {
    const w = world(true, 1);
    const n = 50_000;
    const bytes = Buffer.alloc(100, 'x');
    for (let i = 0; i < n; i++) w.queue.enqueuePaged({ id: i + 1, size: bytes.length, headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, hasSubject: false }, w.loader);
    expect(w.queue.depth).toBe(n);
    expect(w.queue.pagedDepth).toBe(n);
    expect(w.queue.residentBytes).toBe(0);
    const storage = (w.queue as unknown as { levels: Array<{ storageBytes: number }> }).levels[0]!.storageBytes;
    expect(storage / n).toBeLessThan(40);
    // Looking a row up does not make an object; entry() does, and keeps it.
    expect(w.queue.isResident(10)).toBe(false);
    const e = w.queue.entry(10)!;
    expect(e.msg).toBeInstanceOf(PagedMessage);
    expect(w.queue.entry(10)).toBe(e);
  });

  it('queue paged rows - a run of recovered rows lands as one by one would, on plain and priority queues', () => {
    for (const priorities of [1, 4]) {
      const a = world(true, priorities);
      const b = world(true, priorities);
      const n = 3000;
      const run = {
        count: n,
        ids: Float64Array.from({ length: n }, (_, i) => 5 + i * 3),
        size: Uint32Array.from({ length: n }, (_, i) => 10 + (i % 7)),
        expiresAt: Float64Array.from({ length: n }, (_, i) => (i % 11 === 0 ? 2_000_000 + i : 0)),
        deliveryCount: Uint32Array.from({ length: n }, (_, i) => i % 3),
        headerLength: Uint32Array.from({ length: n }, (_, i) => i % 5),
        priority: Uint8Array.from({ length: n }, (_, i) => i % 10),
        flags: Uint8Array.from({ length: n }, (_, i) => 1 | (i % 2 ? 2 : 0)),
      };
      // Expired ones go to the alternate exchange, which reads their bodies.
      for (const w of [a, b]) for (let i = 0; i < n; i++) w.loader.keep('q', { id: run.ids[i]!, bytes: Buffer.alloc(run.size[i]!), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined });
      a.queue.enqueuePagedRun(run, a.loader);
      for (let i = 0; i < n; i++) {
        b.queue.enqueuePaged(
          { id: run.ids[i]!, size: run.size[i]!, expiresAt: run.expiresAt[i]!, deliveryCount: run.deliveryCount[i]!, headerLength: run.headerLength[i]!, priority: run.priority[i]!, durable: true, hasSubject: (run.flags[i]! & 2) !== 0 },
          b.loader,
        );
      }
      const rowsOf = (q: Queue) => [...q.availableEntries()].map((e) => {
        const m = e.msg as PagedMessage;
        return [m.id, m.size, m.expiresAt, m.deliveryCount, m.headerLength, m.priority, m.durable, m.hasSubject, e.deliveryCount];
      });
      expect(rowsOf(a.queue)).toEqual(rowsOf(b.queue));
      expect([a.queue.depth, a.queue.byteDepth, a.queue.pagedDepth, a.queue.pagedByteDepth, a.queue.residentBytes, a.queue.enqueued]).toEqual([b.queue.depth, b.queue.byteDepth, b.queue.pagedDepth, b.queue.pagedByteDepth, b.queue.residentBytes, b.queue.enqueued]);
      // Expiry counts came along: expire() finds them.
      a.clock.advance(2_000_000);
      b.clock.advance(2_000_000);
      expect(a.broker.expire()).toBe(b.broker.expire());
      expect(a.queue.depth).toBe(b.queue.depth);
    }
  });
});

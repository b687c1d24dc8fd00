// Property: a second broker fed the first one's logged changes through apply()
// ends in the same state, whatever the first one did. Seeded random workloads
// of every kind of mutation; states compared after each batch.
import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { ExchangeType, LoggedChange } from '../../../src/broker/changes.js';
import { isTandemError } from '../../../src/broker/errors.js';
import type { Queue, QueueEntry } from '../../../src/broker/queue.js';
import { FakeClock, FakeConsumer, brokerState, msg, prng, qs, xs } from './helpers.js';

const QUEUES = ['q0', 'q1', 'q2', 'q3', 'q4'];
const EXCHANGES = ['x0', 'x1', 'x2', 'amq.direct', 'amq.topic', 'amq.fanout'];
const KEYS = ['', 'a', 'b', 'a.b', 'a.*', '#', 'a.#', '*.b'];
const SUBJECTS = [undefined, '', 'a', 'b', 'a.b', 'c.b', 'a.b.c'];

interface Held {
  queue: Queue;
  consumer: FakeConsumer;
  entry: QueueEntry;
}

class Workload {
  readonly clock = new FakeClock();
  readonly broker = new Broker({ now: this.clock.now });
  readonly logged: LoggedChange[] = [];
  readonly consumers: Array<{ queue: Queue; consumer: FakeConsumer }> = [];
  private held: Held[] = [];
  private nextConsumer = 0;
  readonly counts = new Map<string, number>();

  constructor(private readonly rand: () => number) {
    this.broker.log.attach({ append: (e) => this.logged.push(e) });
  }

  private int(n: number): number {
    return Math.floor(this.rand() * n);
  }
  private pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)];
  }
  private chance(p: number): boolean {
    return this.rand() < p;
  }

  private liveQueues(): Queue[] {
    return [...this.broker.queues.values()];
  }

  /** Collect what consumers were handed since the last look. */
  private harvest(): void {
    for (const { queue, consumer } of this.consumers) {
      for (const entry of consumer.deliveries.splice(0)) this.held.push({ queue, consumer, entry });
    }
    // Forget deliveries no longer held (settled, or released by consumer removal).
    this.held = this.held.filter((h) => h.entry.acquiredBy === h.consumer && h.queue.entry(h.entry.msg.id) === h.entry);
  }

  private takeHeld(): Held | undefined {
    this.harvest();
    if (this.held.length === 0) return undefined;
    return this.held.splice(this.int(this.held.length), 1)[0];
  }

  private message() {
    return msg(`m${this.int(1000)}`.padEnd(1 + this.int(8), '.'), {
      durable: this.chance(0.5),
      priority: this.int(10),
      ttlMs: this.chance(0.2) ? 1 + this.int(50) : undefined,
      subject: this.pick(SUBJECTS),
    });
  }

  step(): void {
    const r = this.int(100);
    const op =
      r < 6 ? 'declareQueue'
      : r < 8 ? 'deleteQueue'
      : r < 11 ? 'declareExchange'
      : r < 12 ? 'deleteExchange'
      : r < 18 ? 'bind'
      : r < 20 ? 'unbind'
      : r < 45 ? 'publish'
      : r < 50 ? 'addConsumer'
      : r < 52 ? 'removeConsumer'
      : r < 58 ? 'dispatch'
      : r < 66 ? 'accept'
      : r < 69 ? 'reject'
      : r < 74 ? 'release'
      : r < 77 ? 'expire'
      : r < 79 ? 'purge'
      : r < 85 ? 'commit'
      : r < 88 ? 'withdraw'
      : r < 92 ? 'tick'
      : 'credit';
    this.counts.set(op, (this.counts.get(op) ?? 0) + 1);
    try {
      this.run(op);
    } catch (err) {
      if (!isTandemError(err)) throw err;
      this.counts.set(`${op}:refused`, (this.counts.get(`${op}:refused`) ?? 0) + 1);
    }
  }

  private run(op: string): void {
    const b = this.broker;
    const now = this.clock.now();
    switch (op) {
      case 'declareQueue': {
        const exchanges = [...b.exchanges.keys()];
        const limited = this.chance(0.4);
        b.declareQueue(
          this.pick(QUEUES),
          qs({
            durable: this.chance(0.5),
            maxCount: limited ? 1 + this.int(6) : 0,
            maxSize: limited && this.chance(0.3) ? 10 + this.int(30) : 0,
            limitPolicy: this.chance(0.5) ? 'ring' : 'reject',
            priorities: this.chance(0.3) ? 1 + this.int(10) : 1,
            defaultTtlMs: this.chance(0.2) ? 1 + this.int(40) : 0,
            alternateExchange: this.chance(0.3) ? this.pick(exchanges) : '',
          }),
        );
        break;
      }
      case 'deleteQueue': {
        const name = this.pick(QUEUES);
        const queue = b.queues.get(name);
        b.deleteQueue(name);
        if (queue) {
          for (let i = this.consumers.length - 1; i >= 0; i--) if (this.consumers[i].queue === queue) this.consumers.splice(i, 1);
        }
        break;
      }
      case 'declareExchange': {
        const types: ExchangeType[] = ['direct', 'topic', 'fanout'];
        const exchanges = [...b.exchanges.keys()];
        b.declareExchange(
          this.pick(EXCHANGES.slice(0, 3)),
          this.pick(types),
          xs({ durable: this.chance(0.5), alternateExchange: this.chance(0.3) ? this.pick(exchanges) : '' }),
        );
        break;
      }
      case 'deleteExchange':
        b.deleteExchange(this.pick(EXCHANGES));
        break;
      case 'bind':
        b.bind(this.pick(EXCHANGES), this.pick(QUEUES), this.pick(KEYS));
        break;
      case 'unbind': {
        const withBindings = [...b.exchanges.values()].filter((e) => e.bindings.length > 0);
        if (withBindings.length === 0) return;
        const e = this.pick(withBindings);
        const binding = this.pick(e.bindings);
        b.unbind(e.name, binding.queue, binding.key);
        break;
      }
      case 'publish':
        b.publish(this.pick([...QUEUES, ...EXCHANGES]), this.message());
        break;
      case 'addConsumer': {
        const queues = this.liveQueues();
        if (queues.length === 0) return;
        const queue = this.pick(queues);
        const consumer = new FakeConsumer(`c${this.nextConsumer++}`, this.int(4), this.chance(0.15));
        queue.addConsumer(consumer);
        this.consumers.push({ queue, consumer });
        break;
      }
      case 'removeConsumer': {
        if (this.consumers.length === 0) return;
        const [{ queue, consumer }] = this.consumers.splice(this.int(this.consumers.length), 1);
        queue.removeConsumer(consumer);
        break;
      }
      case 'credit': {
        if (this.consumers.length === 0) return;
        this.pick(this.consumers).consumer.credit += 1 + this.int(3);
        break;
      }
      case 'dispatch':
        for (const queue of this.liveQueues()) queue.dispatch(now);
        break;
      case 'accept': {
        const h = this.takeHeld();
        if (h && !h.consumer.browse) b.accept(h.queue, h.entry);
        break;
      }
      case 'reject': {
        const h = this.takeHeld();
        if (h && !h.consumer.browse) b.reject(h.queue, h.entry);
        break;
      }
      case 'release': {
        const h = this.takeHeld();
        if (h && !h.consumer.browse) {
          h.queue.release(h.entry, { deliveryFailed: this.chance(0.5), undeliverableHere: this.chance(0.3) });
        }
        break;
      }
      case 'expire':
        b.expire();
        break;
      case 'purge': {
        const queues = this.liveQueues();
        if (queues.length > 0) this.pick(queues).purge(this.int(3));
        break;
      }
      case 'commit': {
        // Half the commits send everything to one address, so limits add up.
        const one = this.chance(0.5) ? this.pick([...QUEUES, 'amq.fanout']) : undefined;
        const sends = Array.from({ length: this.int(5) }, () => ({
          address: one ?? this.pick([...QUEUES, ...EXCHANGES]),
          msg: this.message(),
        }));
        const accepts: Array<{ queue: Queue; entry: QueueEntry }> = [];
        for (let n = this.int(3); n > 0; n--) {
          const h = this.takeHeld();
          if (h && !h.consumer.browse) accepts.push({ queue: h.queue, entry: h.entry });
        }
        b.commit(sends, accepts);
        break;
      }
      case 'withdraw': {
        const r = b.publish(this.pick([...QUEUES, ...EXCHANGES]), this.message());
        if (this.chance(0.5)) for (const queue of this.liveQueues()) queue.dispatch(now);
        b.withdraw(r);
        break;
      }
      case 'tick':
        this.clock.advance(1 + this.int(20));
        break;
    }
  }
}

/**
 * The durable flag a change should carry, judged on a broker in the state just
 * before it (the replica, which is in step with the primary).
 */
function expectedDurable(before: Broker, change: LoggedChange['change']): boolean {
  switch (change.kind) {
    case 'queue-declare':
      return change.settings.durable;
    case 'exchange-declare':
      return change.settings.durable;
    case 'queue-delete':
      return before.queue(change.name).settings.durable;
    case 'exchange-delete':
      return before.exchange(change.name).settings.durable;
    case 'bind':
    case 'unbind': {
      const e = before.exchange(change.exchange);
      return (e.settings.durable || e.builtIn) && before.queue(change.queue).settings.durable;
    }
    case 'enqueue':
      return change.message.durable && before.queue(change.queue).settings.durable;
    case 'dequeue': {
      const q = before.queue(change.queue);
      const entry = q.entry(change.id);
      if (!entry) throw new Error(`dequeue of message ${change.id} that ${change.queue} does not hold`);
      return entry.msg.durable && q.settings.durable;
    }
    case 'transaction': {
      // A dequeue may take a message the same transaction enqueued (a commit's ring eviction of it).
      const own = new Map<string, boolean>();
      return change.changes.some((op) => {
        const key = `${op.queue} ${op.kind === 'enqueue' ? op.message.id : op.id}`;
        const durable = op.kind === 'dequeue' && own.has(key) ? own.get(key)! : expectedDurable(before, op);
        if (op.kind === 'enqueue') own.set(key, durable);
        return durable;
      });
    }
    case 'epoch':
      return true;
  }
}

/** What must hold on the broker that did the work. */
function checkInvariants(broker: Broker): void {
  for (const q of broker.queues.values()) {
    const entries = q.entries();
    expect(entries.length).toBe(q.depth);
    expect(entries.reduce((n, e) => n + e.msg.bytes.length, 0)).toBe(q.byteDepth);
    expect(q.available + q.acquired).toBe(q.depth);
    const available = [...q.availableEntries()];
    expect(available.length).toBe(q.available);
    for (const e of available) {
      expect(e.acquiredBy).toBeUndefined();
      expect(q.entry(e.msg.id)).toBe(e);
    }
    if (q.settings.limitPolicy === 'reject') {
      if (q.settings.maxCount > 0) expect(q.depth).toBeLessThanOrEqual(q.settings.maxCount);
      if (q.settings.maxSize > 0) expect(q.byteDepth).toBeLessThanOrEqual(q.settings.maxSize);
    }
  }
}

describe('apply() replays the log into the same state (random workloads)', () => {
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8, 99, 2024]) {
    it(`seed ${seed}`, () => {
      const w = new Workload(prng(seed));
      const replica = new Broker({ now: w.clock.now });
      let applied = 0;
      for (let batch = 0; batch < 60; batch++) {
        for (let i = 0; i < 25; i++) w.step();
        for (; applied < w.logged.length; applied++) {
          const e = w.logged[applied];
          expect(e.lsn).toBe(applied + 1);
          expect({ lsn: e.lsn, change: e.change, durable: e.durable }).toEqual({
            lsn: e.lsn,
            change: e.change,
            durable: expectedDurable(replica, e.change),
          });
          replica.apply(e);
        }
        checkInvariants(w.broker);
        expect(brokerState(replica)).toEqual(brokerState(w.broker));
        expect(replica.log.lsn).toBe(w.broker.log.lsn);
      }
      // A fresh broker replaying everything at once gets there too.
      const cold = new Broker({ now: w.clock.now });
      for (const e of w.logged) cold.apply(e, { adopt: false });
      expect(brokerState(cold)).toEqual(brokerState(w.broker));
      // The workload really exercised the model.
      for (const op of ['publish', 'accept', 'commit', 'deleteQueue', 'expire', 'bind']) {
        expect(w.counts.get(op) ?? 0).toBeGreaterThan(0);
      }
      expect(w.logged.length).toBeGreaterThan(200);
    });
  }
});

// The DR source's copy of a queue is read from the live queue while the broker
// goes on (publishes, consumers, transactions). Whatever happens meanwhile, a
// mirror that applies the copy and then the log after the snapshot point ends
// equal to the source; an enqueue-only copy holds every message the queue held
// at that point (also those consumed before the copy reached them), in id
// order, plus every later enqueue; and a copy never holds a message enqueued
// after the snapshot point.
import { describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import type { QueueEntry } from '../../../src/broker/queue.js';
import { DrSnapshotReader } from '../../../src/dr/snapshot.js';
import { FakeConsumer, msg, newBroker, prng, qs } from '../broker/helpers.js';

let kept = 0;

function run(seed: number, mode: 'enqueue-and-dequeue' | 'enqueue-only'): void {
  const rnd = prng(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const { broker, clock, logged } = newBroker();
  broker.declareQueue('a', qs({ durable: true }));
  broker.declareQueue('b', qs({ durable: true }));
  const qa = broker.queue('a');
  const consumer = new FakeConsumer('c', 0);
  qa.addConsumer(consumer);
  let n = 0;
  const bodyOf = new Map<number, string>();
  const publish = (address: string) => {
    const body = `${address}${n++}`;
    bodyOf.set(broker.publish(address, msg(body, { durable: rnd() < 0.5 })).id, body);
  };
  /** One message of `a` taken by the consumer (not yet settled), if any is available. */
  const take = (): QueueEntry | undefined => {
    const before = consumer.deliveries.length;
    consumer.credit = 1;
    qa.dispatch(clock.now());
    consumer.credit = 0;
    return consumer.deliveries.length > before ? consumer.deliveries.at(-1) : undefined;
  };
  for (let i = 0, k = 200 + int(800); i < k; i++) publish(rnd() < 0.8 ? 'a' : 'b');
  for (let i = 0, k = int(50); i < k; i++) {
    const e = take();
    if (e) broker.accept(qa, e);
  }

  const P = broker.log.lsn;
  const atP = new Set(qa.entries().map((e) => e.msg.id));
  const reader = new DrSnapshotReader(broker, ['a'], P, { keepDequeued: new Set(mode === 'enqueue-only' ? ['a'] : []) });
  broker.log.attach({ append: (e) => reader.noteChange(e.change) });
  const afterP = logged.length;
  const copied: LoggedChange[] = [];
  const dequeuedBeforeRead = new Set<number>();
  for (let step = 0; step < 10_000 && !reader.done; step++) {
    const r = rnd();
    if (r < 0.3) publish(rnd() < 0.7 ? 'a' : 'b');
    else if (r < 0.5) {
      const e = take();
      if (e) broker.accept(qa, e);
    } else if (r < 0.55) {
      // A consumer taking a run far ahead of the reading.
      for (let k = int(30); k > 0; k--) {
        const e = take();
        if (e) broker.accept(qa, e);
      }
    } else if (r < 0.6) {
      const e = take();
      broker.commit([{ address: 'a', msg: msg(`tx${n++}`, { durable: true }) }, { address: 'b', msg: msg(`tx${n++}`, { durable: true }) }], e ? [{ queue: qa, entry: e }] : []);
    } else {
      copied.push(...reader.next(1 + int(40), 1 << 20));
    }
  }
  expect(reader.done).toBe(true);
  expect(broker.removalWatchers.size).toBe(0);
  const order = copied.map((e) => (e.change.kind === 'enqueue' ? e.change.message.id : -1));
  for (let i = 1; i < order.length; i++) expect(order[i]).toBeGreaterThan(order[i - 1]!);
  const copiedIds = new Set(copied.map((e) => (e.change.kind === 'enqueue' ? e.change.message.id : -1)));
  expect(copied.every((e) => e.change.kind === 'enqueue' && e.change.queue === 'a')).toBe(true);
  expect(copiedIds.size).toBe(copied.length);
  // Nothing enqueued after P is in the copy; everything there at P and still there is.
  for (const id of copiedIds) expect(atP.has(id)).toBe(true);
  const later = logged.slice(afterP);
  const dequeuedAfterP = new Set<number>();
  for (const e of later) {
    const ops = e.change.kind === 'transaction' ? e.change.changes : [e.change];
    for (const op of ops) if (op.kind === 'dequeue' && op.queue === 'a') dequeuedAfterP.add(op.id);
  }
  for (const id of atP) if (!dequeuedAfterP.has(id)) expect(copiedIds.has(id)).toBe(true);
  for (const id of atP) if (!copiedIds.has(id)) dequeuedBeforeRead.add(id);
  // Bodies as they were sent, also of the messages kept after they left.
  for (const e of copied) if (e.change.kind === 'enqueue') expect(e.change.message.bytes.toString()).toBe(bodyOf.get(e.change.message.id));
  if (mode === 'enqueue-only') {
    expect(dequeuedBeforeRead.size).toBe(0);
    kept += reader.keptOnLeaving;
    return;
  }

  // A mirror: the copy, then the log after P (enqueue if absent, dequeue).
  const mirror = new Set(copiedIds);
  const only = new Set(copiedIds);
  for (const e of later) {
    const ops = e.change.kind === 'transaction' ? e.change.changes : [e.change];
    for (const op of ops) {
      if (op.kind === 'enqueue' && op.queue === 'a') {
        mirror.add(op.message.id);
        only.add(op.message.id);
      } else if (op.kind === 'dequeue' && op.queue === 'a') mirror.delete(op.id);
    }
  }
  expect([...mirror].sort((x, y) => x - y)).toEqual(qa.entries().map((e) => e.msg.id));
}

describe('DR snapshot reader', () => {
  it('DR snapshot reader - a copy read while the queue changes, plus the log after it, equals the source', () => {
    for (let seed = 1; seed <= 40; seed++) run(seed, 'enqueue-and-dequeue');
  });

  it('DR snapshot reader - an enqueue-only copy holds everything the queue held at the snapshot point, consumed meanwhile or not, in order', () => {
    for (let seed = 1; seed <= 40; seed++) run(seed, 'enqueue-only');
    // The consumer did overtake the reading (else this would prove nothing).
    expect(kept).toBeGreaterThan(100);
  });

  it('DR snapshot reader - stops reading a queue deleted after the snapshot point', () => {
    const { broker } = newBroker();
    broker.declareQueue('a', qs({ durable: true }));
    for (let i = 0; i < 10; i++) broker.publish('a', msg(`m${i}`, { durable: true }));
    const reader = new DrSnapshotReader(broker, ['a', 'missing'], broker.log.lsn);
    expect(reader.bound).toBe(10);
    expect(reader.next(4, 1 << 20)).toHaveLength(4);
    broker.deleteQueue('a');
    broker.declareQueue('a', qs({ durable: true }));
    broker.publish('a', msg('new', { durable: true }));
    expect(reader.next(100, 1 << 20)).toEqual([]);
    expect(reader.done).toBe(true);
  });
});

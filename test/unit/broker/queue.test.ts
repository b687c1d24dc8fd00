import { describe, expect, it } from 'vitest';
import type { Queue } from '../../../src/broker/queue.js';
import type { BodyLoader } from '../../../src/broker/paged-message.js';
import { FakeConsumer, bodies, kinds, messageRecords, msg, newBroker, prng, qs } from './helpers.js';

function setup(settings = qs()) {
  const env = newBroker();
  const queue = env.broker.declareQueue('q', settings).queue;
  const send = (...names: string[]) => names.map((n) => env.broker.publish('q', msg(n)).id);
  const dispatch = (q: Queue = queue) => q.dispatch(env.clock.now());
  return { ...env, queue, send, dispatch };
}

describe('Queue delivery', () => {
  it('delivers in FIFO order', () => {
    const { queue, send, dispatch } = setup();
    send('a', 'b', 'c', 'd');
    const c = new FakeConsumer('c1');
    queue.addConsumer(c);
    expect(dispatch()).toBe(4);
    expect(c.bodies).toEqual(['a', 'b', 'c', 'd']);
    expect(queue.available).toBe(0);
    expect(queue.acquired).toBe(4);
    expect(queue.depth).toBe(4);
  });

  it('shares messages round-robin among consumers', () => {
    const { queue, send, dispatch } = setup();
    const [c1, c2, c3] = [new FakeConsumer('c1'), new FakeConsumer('c2'), new FakeConsumer('c3')];
    for (const c of [c1, c2, c3]) queue.addConsumer(c);
    send('1', '2', '3', '4', '5', '6', '7');
    dispatch();
    expect(c1.bodies).toEqual(['1', '4', '7']);
    expect(c2.bodies).toEqual(['2', '5']);
    expect(c3.bodies).toEqual(['3', '6']);
    // The rotation continues where it stopped.
    send('8');
    dispatch();
    expect(c2.bodies).toEqual(['2', '5', '8']);
  });

  it('round-robin stays fair when a consumer is removed', () => {
    const { queue, send, dispatch } = setup();
    const [c1, c2, c3] = [new FakeConsumer('c1'), new FakeConsumer('c2'), new FakeConsumer('c3')];
    for (const c of [c1, c2, c3]) queue.addConsumer(c);
    send('1', '2');
    dispatch(); // c1:1 c2:2, next is c3
    queue.removeConsumer(c1); // '1' goes back to the queue
    send('3', '4');
    dispatch();
    expect(c3.bodies).toEqual(['1', '4']);
    expect(c2.bodies).toEqual(['2', '3']);
  });

  it('respects credit: 0 gets nothing, 1 gets one', () => {
    const { queue, send, dispatch } = setup();
    const c0 = new FakeConsumer('c0', 0);
    const c1 = new FakeConsumer('c1', 1);
    queue.addConsumer(c0);
    queue.addConsumer(c1);
    send('a', 'b', 'c');
    expect(dispatch()).toBe(1);
    expect(c0.deliveries).toEqual([]);
    expect(c1.bodies).toEqual(['a']);
    expect(c1.credit).toBe(0);
    expect(queue.available).toBe(2);
    c0.credit = 5;
    expect(dispatch()).toBe(2);
    expect(c0.bodies).toEqual(['b', 'c']);
    expect(c0.credit).toBe(3);
  });

  it('accept removes the message and logs a dequeue', () => {
    const { broker, queue, send, dispatch, logged } = setup();
    send('a', 'b');
    const c = new FakeConsumer('c', 1);
    queue.addConsumer(c);
    dispatch();
    logged.length = 0;
    broker.accept(queue, c.deliveries[0]);
    expect(bodies(queue)).toEqual(['b']);
    expect(logged.map((e) => e.change)).toEqual([{ kind: 'dequeue', queue: 'q', id: c.deliveries[0].msg.id }]);
    // A second accept of the same delivery changes nothing.
    broker.accept(queue, c.deliveries[0]);
    expect(logged).toHaveLength(1);
    expect(queue.dequeued).toBe(1);
  });

  it('released messages go back in id order and are redelivered first', () => {
    const { queue, send, dispatch } = setup();
    send('1', '2', '3', '4');
    const c = new FakeConsumer('c', 3);
    queue.addConsumer(c);
    dispatch();
    expect(c.bodies).toEqual(['1', '2', '3']);
    // Release out of order: 3 then 1.
    queue.release(c.deliveries[2], { deliveryFailed: false, undeliverableHere: false });
    queue.release(c.deliveries[0], { deliveryFailed: false, undeliverableHere: false });
    expect([...queue.availableEntries()].map((e) => e.msg.bytes.toString())).toEqual(['1', '3', '4']);
    expect(c.deliveries[0].deliveryCount).toBe(0);
    c.credit = 10;
    dispatch();
    expect(c.bodies).toEqual(['1', '2', '3', '1', '3', '4']);
  });

  it('reject removes the message and sends it to the alternate exchange', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const q = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' })).queue;
    broker.publish('q', msg('bad', { subject: 's' }));
    const c = new FakeConsumer('c');
    q.addConsumer(c);
    q.dispatch(clock.now());
    logged.length = 0;
    broker.reject(q, c.deliveries[0]);
    expect(q.depth).toBe(0);
    expect(bodies(broker.queue('dlq'))).toEqual(['bad']);
    // One record: a journal cut or a failover leaves the message in one of the two queues.
    expect(messageRecords(logged)).toEqual(['enqueue dlq + dequeue q']);
    const dead = broker.queue('dlq').entries()[0];
    expect(dead.msg.subject).toBe('s');
  });

  it('reject without alternate exchange just drops', () => {
    const { broker, queue, send, dispatch, logged } = setup();
    send('a');
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    dispatch();
    logged.length = 0;
    broker.reject(queue, c.deliveries[0]);
    expect(queue.depth).toBe(0);
    expect(kinds(logged)).toEqual(['dequeue']);
  });

  it('modified delivery-failed raises the delivery count', () => {
    const { queue, send, dispatch } = setup();
    send('a');
    const c = new FakeConsumer('c', 1);
    queue.addConsumer(c);
    dispatch();
    queue.release(c.deliveries[0], { deliveryFailed: true, undeliverableHere: false });
    c.credit = 1;
    dispatch();
    expect(c.bodies).toEqual(['a', 'a']);
    expect(c.deliveries[1].deliveryCount).toBe(1);
    queue.release(c.deliveries[1], { deliveryFailed: true, undeliverableHere: false });
    expect(queue.entry(c.deliveries[1].msg.id)?.deliveryCount).toBe(2);
  });

  it('undeliverable-here is not redelivered to that consumer, but is to others', () => {
    const { queue, send, dispatch } = setup();
    send('a', 'b');
    const c1 = new FakeConsumer('c1', 1);
    queue.addConsumer(c1);
    dispatch();
    expect(c1.bodies).toEqual(['a']);
    queue.release(c1.deliveries[0], { deliveryFailed: false, undeliverableHere: true });
    expect(c1.deliveries[0].deliveryCount).toBe(0);
    c1.credit = 10;
    dispatch();
    expect(c1.bodies).toEqual(['a', 'b']);
    expect(queue.available).toBe(1);
    const c2 = new FakeConsumer('c2');
    queue.addConsumer(c2);
    dispatch();
    expect(c2.bodies).toEqual(['a']);
  });

  it('a refused message does not block later ones for that consumer', () => {
    const { queue, send, dispatch } = setup();
    send('a');
    const c1 = new FakeConsumer('c1', 1);
    queue.addConsumer(c1);
    dispatch();
    queue.release(c1.deliveries[0], { deliveryFailed: true, undeliverableHere: true });
    send('b', 'c');
    c1.credit = 5;
    dispatch();
    expect(c1.bodies).toEqual(['a', 'b', 'c']);
    expect(queue.available).toBe(1);
    expect(c1.credit).toBe(3);
  });

  it('removing a consumer releases what it held, delivery count raised, in id order', () => {
    const { queue, send, dispatch, logged } = setup();
    send('1', '2', '3');
    const c1 = new FakeConsumer('c1', 2);
    queue.addConsumer(c1);
    dispatch();
    const before = logged.length;
    queue.removeConsumer(c1);
    expect(logged.length).toBe(before); // releases are not state changes of the log
    expect(queue.available).toBe(3);
    const c2 = new FakeConsumer('c2');
    queue.addConsumer(c2);
    dispatch();
    expect(c2.bodies).toEqual(['1', '2', '3']);
    expect(c2.deliveries.map((e) => e.deliveryCount)).toEqual([1, 1, 0]);
    // Removing an unknown consumer is harmless.
    queue.removeConsumer(c1);
    expect(queue.consumerCount).toBe(1);
  });

  it('browsers see messages without acquiring, in id order, each with its own cursor', () => {
    const { broker, queue, send, dispatch } = setup();
    send('a', 'b', 'c');
    const b1 = new FakeConsumer('b1', 2, true);
    const b2 = new FakeConsumer('b2', 10, true);
    queue.addConsumer(b1);
    queue.addConsumer(b2);
    dispatch();
    expect(b1.bodies).toEqual(['a', 'b']);
    expect(b2.bodies).toEqual(['a', 'b', 'c']);
    expect(queue.available).toBe(3);
    expect(queue.acquired).toBe(0);
    send('d');
    b1.credit = 10;
    dispatch();
    expect(b1.bodies).toEqual(['a', 'b', 'c', 'd']);
    expect(b2.bodies).toEqual(['a', 'b', 'c', 'd']);
    // A consumer still gets everything.
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    dispatch();
    expect(c.bodies).toEqual(['a', 'b', 'c', 'd']);
    // Nothing new for the browsers; removing a browser does not release anything.
    expect(b1.deliveries).toHaveLength(4);
    queue.removeConsumer(b1);
    expect(queue.acquired).toBe(4);
    void broker;
  });

  it('browsers see priority queues in id order', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('p', qs({ priorities: 10 })).queue;
    broker.publish('p', msg('low', { priority: 0 }));
    broker.publish('p', msg('high', { priority: 9 }));
    broker.publish('p', msg('mid', { priority: 5 }));
    const b = new FakeConsumer('b', 10, true);
    q.addConsumer(b);
    q.dispatch(clock.now());
    expect(b.bodies).toEqual(['low', 'high', 'mid']);
  });

  it('countIdsBetween counts the ids a span holds, over every priority level and the acquired rows, as has() id by id would', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('p', qs({ priorities: 10 })).queue;
    const ids: number[] = [];
    for (let i = 0; i < 3000; i++) ids.push(broker.publish('p', msg(`m${i}`, { priority: i % 7 })).id);
    // Some taken out, some acquired by a consumer that has not settled them.
    for (const id of ids.filter((_, i) => i % 5 === 0)) q.remove(q.entry(id)!, 'accepted');
    q.addConsumer(new FakeConsumer('c', 200));
    q.dispatch(clock.now());
    expect(q.acquired).toBe(200);
    const bruteForce = (lo: number, hi: number) => {
      let n = 0;
      for (let id = lo; id <= hi; id++) if (q.has(id)) n++;
      return n;
    };
    const first = ids[0]!;
    const last = ids[ids.length - 1]!;
    for (const [lo, hi] of [[first, last], [first - 10, first + 10], [first + 100, first + 2500], [last, last + 1e12], [last + 1, last + 5], [0, 0]] as const) {
      expect(q.countIdsBetween(lo, hi), `${lo}..${hi}`).toBe(bruteForce(lo, Math.min(hi, last + 10)));
    }
  });

  it('priorities: higher first, FIFO within a level', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('p', qs({ priorities: 10 })).queue;
    const sends: Array<[string, number]> = [
      ['a0', 0],
      ['b9', 9],
      ['c4', 4],
      ['d9', 9],
      ['e0', 0],
      ['f4', 4],
      ['g7', 7],
    ];
    for (const [body, priority] of sends) broker.publish('p', msg(body, { priority }));
    const c = new FakeConsumer('c');
    q.addConsumer(c);
    q.dispatch(clock.now());
    expect(c.bodies).toEqual(['b9', 'd9', 'g7', 'c4', 'f4', 'a0', 'e0']);
  });

  it('priorities with fewer levels group AMQP priorities evenly', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('p', qs({ priorities: 2 })).queue;
    for (const [body, priority] of [
      ['a', 0],
      ['b', 4],
      ['c', 5],
      ['d', 9],
      ['e', 3],
    ] as Array<[string, number]>) {
      broker.publish('p', msg(body, { priority }));
    }
    const c = new FakeConsumer('c');
    q.addConsumer(c);
    q.dispatch(clock.now());
    expect(c.bodies).toEqual(['c', 'd', 'a', 'b', 'e']);
  });

  it('a plain queue ignores priority', () => {
    const { broker, queue, dispatch } = setup();
    broker.publish('q', msg('a', { priority: 0 }));
    broker.publish('q', msg('b', { priority: 9 }));
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    dispatch();
    expect(c.bodies).toEqual(['a', 'b']);
  });

  it('a released priority message goes back before later ones of its level', () => {
    const { broker, clock } = newBroker();
    const q = broker.declareQueue('p', qs({ priorities: 10 })).queue;
    broker.publish('p', msg('h1', { priority: 9 }));
    broker.publish('p', msg('h2', { priority: 9 }));
    broker.publish('p', msg('l1', { priority: 1 }));
    const c = new FakeConsumer('c', 1);
    q.addConsumer(c);
    q.dispatch(clock.now());
    q.release(c.deliveries[0], { deliveryFailed: false, undeliverableHere: false });
    c.credit = 10;
    q.dispatch(clock.now());
    expect(c.bodies).toEqual(['h1', 'h1', 'h2', 'l1']);
  });
});

describe('Queue limits', () => {
  it('reject policy refuses the message with TANDEM_ERR_QUEUE_FULL (max-count)', () => {
    const { broker, queue, send, logged } = setup(qs({ maxCount: 2 }));
    send('a', 'b');
    const before = logged.length;
    expect(() => broker.publish('q', msg('c'))).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_QUEUE_FULL' }));
    expect(logged.length).toBe(before);
    expect(bodies(queue)).toEqual(['a', 'b']);
  });

  it('reject policy refuses the message (max-size)', () => {
    const { broker, queue } = setup(qs({ maxSize: 10 }));
    broker.publish('q', msg('12345'));
    broker.publish('q', msg('12345'));
    expect(() => broker.publish('q', msg('1'))).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_QUEUE_FULL' }));
    expect(queue.byteDepth).toBe(10);
  });

  it('a full queue behind a fanout refuses the message for every queue', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('q1', qs());
    broker.declareQueue('q2', qs({ maxCount: 1 }));
    broker.declareQueue('q3', qs());
    for (const n of ['q1', 'q2', 'q3']) broker.bind('amq.fanout', n, '');
    broker.publish('amq.fanout', msg('first'));
    const before = logged.length;
    let err: unknown;
    try {
      broker.publish('amq.fanout', msg('second'));
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'TANDEM_ERR_QUEUE_FULL' });
    expect((err as Error).message).toContain('q2');
    expect(logged.length).toBe(before);
    for (const n of ['q1', 'q2', 'q3']) expect(bodies(broker.queue(n))).toEqual(['first']);
  });

  it('space freed by accepting makes room again', () => {
    const { broker, queue, send, dispatch } = setup(qs({ maxCount: 1 }));
    send('a');
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    dispatch();
    expect(() => send('b')).toThrow();
    broker.accept(queue, c.deliveries[0]);
    send('b');
    expect(bodies(queue)).toEqual(['b']);
  });

  it('ring policy drops the oldest and logs its dequeue', () => {
    const { queue, send, logged } = setup(qs({ maxCount: 3, limitPolicy: 'ring' }));
    const ids = send('a', 'b', 'c');
    logged.length = 0;
    send('d', 'e');
    expect(bodies(queue)).toEqual(['c', 'd', 'e']);
    expect(logged.map((e) => e.change.kind === 'dequeue' ? ['dequeue', e.change.id] : [e.change.kind])).toEqual([
      ['dequeue', ids[0]],
      ['enqueue'],
      ['dequeue', ids[1]],
      ['enqueue'],
    ]);
  });

  it('ring policy by size drops as many as needed', () => {
    const { queue, send } = setup(qs({ maxSize: 6, limitPolicy: 'ring' }));
    send('aa', 'bb', 'cc');
    send('dddd');
    expect(bodies(queue)).toEqual(['cc', 'dddd']);
    expect(queue.byteDepth).toBe(6);
  });

  it('ring policy skips acquired messages', () => {
    const { queue, send, dispatch } = setup(qs({ maxCount: 2, limitPolicy: 'ring' }));
    send('a', 'b');
    const c = new FakeConsumer('c', 1);
    queue.addConsumer(c);
    dispatch();
    send('c');
    expect(bodies(queue)).toEqual(['a', 'c']);
  });

  it('ring policy refuses a message larger than max-size, keeping what the queue holds', () => {
    const { broker, queue, send, logged } = setup(qs({ maxSize: 6, limitPolicy: 'ring' }));
    send('aa', 'bb');
    logged.length = 0;
    expect(() => broker.publish('q', msg('x'.repeat(7)))).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_QUEUE_FULL' }));
    expect(bodies(queue)).toEqual(['aa', 'bb']);
    expect(queue.byteDepth).toBe(4);
    expect(logged).toEqual([]);
    // One that fits exactly still makes room.
    send('cccccc');
    expect(bodies(queue)).toEqual(['cccccc']);
  });

  it('a priority ring drops the lowest priority first, never a higher one for a lower newcomer', () => {
    const env = newBroker();
    const queue = env.broker.declareQueue('q', qs({ maxCount: 3, limitPolicy: 'ring', priorities: 10 })).queue;
    const send = (body: string, priority: number) => env.broker.publish('q', msg(body, { priority })).queues;
    send('hi1', 9);
    send('lo1', 0);
    send('hi2', 9);
    // A newcomer of a level with messages of its own (or below) evicts the lowest, oldest first.
    expect(send('mid', 5)).toEqual(['q']);
    expect(bodies(queue)).toEqual(['hi1', 'hi2', 'mid']);
    // One below everything held is the one the ring loses: no change logged, counted as the ring's overflow.
    env.logged.length = 0;
    expect(send('lo2', 0)).toEqual([]);
    expect(bodies(queue)).toEqual(['hi1', 'hi2', 'mid']);
    expect(env.logged).toEqual([]);
    expect(queue.depth).toBe(3);
    expect(queue.ringOverflow).toBe(1);
    // An equal priority takes the oldest of its level.
    send('hi3', 9);
    expect(bodies(queue)).toEqual(['hi1', 'hi2', 'hi3']);
    send('hi4', 9);
    expect(bodies(queue)).toEqual(['hi2', 'hi3', 'hi4']);
  });

  it('a priority ring by size drops nothing when the lower levels cannot make room', () => {
    const env = newBroker();
    const queue = env.broker.declareQueue('q', qs({ maxSize: 8, limitPolicy: 'ring', priorities: 10 })).queue;
    const send = (body: string, priority: number) => env.broker.publish('q', msg(body, { priority })).queues;
    send('aa', 0);
    send('hhhhhh', 9);
    // Dropping 'aa' would free 2 bytes of the 4 needed: it stays, and the newcomer is lost.
    expect(send('bbbb', 0)).toEqual([]);
    expect(bodies(queue)).toEqual(['aa', 'hhhhhh']);
    expect(queue.byteDepth).toBe(8);
    // A higher newcomer makes room from below and from its own level.
    send('cccc', 9);
    expect(bodies(queue)).toEqual(['cccc']);
  });

  it('a ring whose every message is acquired loses the new one: the limit holds (max-count)', () => {
    const { broker, queue, send, dispatch, logged } = setup(qs({ maxCount: 2, limitPolicy: 'ring' }));
    send('a', 'b');
    const c = new FakeConsumer('c', 10);
    queue.addConsumer(c);
    dispatch();
    expect(queue.acquired).toBe(2);
    logged.length = 0;
    // Nothing available can make way: not enqueued, nothing logged, counted.
    expect(broker.publish('q', msg('c')).queues).toEqual([]);
    expect(queue.depth).toBe(2);
    expect(queue.ringOverflow).toBe(1);
    expect(logged).toEqual([]);
    dispatch();
    expect(c.bodies).toEqual(['a', 'b']);
    // Once one is settled there is room again.
    broker.accept(queue, c.deliveries[0]!);
    expect(broker.publish('q', msg('d')).queues).toEqual(['q']);
    expect(bodies(queue)).toEqual(['b', 'd']);
    expect(queue.ringOverflow).toBe(1);
  });

  it('a ring by size drops nothing when its available messages cannot free enough, and loses the new one', () => {
    const { broker, queue, send, dispatch } = setup(qs({ maxSize: 6, limitPolicy: 'ring' }));
    send('aaaa');
    const c = new FakeConsumer('c', 1);
    queue.addConsumer(c);
    dispatch();
    send('b');
    // 4 acquired + 1 available + 3 new is 2 over; dropping 'b' frees only 1.
    expect(broker.publish('q', msg('ccc')).queues).toEqual([]);
    expect(bodies(queue)).toEqual(['aaaa', 'b']);
    expect(queue.byteDepth).toBe(5);
    expect(queue.ringOverflow).toBe(1);
    // One that fits after dropping 'b' takes its place.
    expect(broker.publish('q', msg('dd')).queues).toEqual(['q']);
    expect(bodies(queue)).toEqual(['aaaa', 'dd']);
    expect(queue.byteDepth).toBe(6);
    // Given back, the acquired bytes can make way again.
    queue.removeConsumer(c);
    expect(broker.publish('q', msg('eeee')).queues).toEqual(['q']);
    expect(bodies(queue)).toEqual(['dd', 'eeee']);
  });

  it('a priority ring whose every message is acquired loses the new one, whatever its priority', () => {
    const env = newBroker();
    const queue = env.broker.declareQueue('q', qs({ maxCount: 2, limitPolicy: 'ring', priorities: 10 })).queue;
    env.broker.publish('q', msg('lo', { priority: 0 }));
    env.broker.publish('q', msg('hi', { priority: 9 }));
    queue.addConsumer(new FakeConsumer('c', 10));
    queue.dispatch(env.clock.now());
    expect(env.broker.publish('q', msg('top', { priority: 9 })).queues).toEqual([]);
    expect(queue.depth).toBe(2);
  });

  it('a ring never goes over its limits, and loses a new message only when its available ones could not make way (seeded)', () => {
    for (const [seed, priorities] of [
      [1, 1],
      [2, 1],
      [3, 3],
      [4, 10],
    ] as const) {
      const rand = prng(seed);
      const env = newBroker();
      const queue = env.broker.declareQueue('q', qs({ maxCount: 8, maxSize: 60, limitPolicy: 'ring', priorities })).queue;
      const consumers = [new FakeConsumer('a', 0), new FakeConsumer('b', 0)];
      for (const c of consumers) queue.addConsumer(c);
      const held = (c: FakeConsumer) => c.deliveries.filter((e) => e.acquiredBy === c);
      for (let step = 0; step < 2000; step++) {
        const c = consumers[Math.floor(rand() * 2)]!;
        const r = rand();
        if (r < 0.45) {
          const size = 1 + Math.floor(rand() * 12);
          const priority = Math.floor(rand() * 10);
          const available = [...queue.availableEntries()];
          // On a priority queue only those of the new one's level or below (levels as levelIndex in queue.ts).
          const level = (p: number) => Math.floor((p * priorities) / 10);
          const freeable = available.filter((e) => priorities === 1 || level(e.msg.priority) <= level(priority));
          const freeCount = freeable.length;
          const freeBytes = freeable.reduce((n, e) => n + e.msg.bytes.length, 0);
          const needCount = queue.depth + 1 - 8;
          const needBytes = queue.byteDepth + size - 60;
          const taken = env.broker.publish('q', msg('x'.repeat(size), { priority })).queues;
          // Lost exactly when the ones that may make way could not free enough.
          expect(taken.length === 0, `step ${step}`).toBe(needCount > freeCount || needBytes > freeBytes);
        } else if (r < 0.6) c.credit += 1 + Math.floor(rand() * 3);
        else if (r < 0.9) {
          const e = held(c)[0];
          if (e && r < 0.75) env.broker.accept(queue, e);
          else if (e && r < 0.85) queue.release(e, { deliveryFailed: true, undeliverableHere: false });
          else if (e) env.broker.reject(queue, e);
        } else if (r < 0.95) {
          queue.removeConsumer(c);
          c.deliveries.length = 0;
          queue.addConsumer(c);
        } else queue.purge(1);
        queue.dispatch(env.clock.now());
        expect(queue.depth, `step ${step}`).toBeLessThanOrEqual(8);
        expect(queue.byteDepth, `step ${step}`).toBeLessThanOrEqual(60);
      }
      expect(queue.ringOverflow).toBeGreaterThan(0);
    }
  });

  it('a ring fed by a commit while every message is acquired: the new one is logged in and dropped again, the limit holds', () => {
    const { broker, queue, send, dispatch, logged } = setup(qs({ maxCount: 2, limitPolicy: 'ring' }));
    send('a', 'b');
    queue.addConsumer(new FakeConsumer('c', 10));
    dispatch();
    logged.length = 0;
    broker.commit([{ address: 'q', msg: msg('t') }], []);
    expect(queue.depth).toBe(2);
    expect(queue.acquired).toBe(2);
    expect(queue.ringOverflow).toBe(1);
    // A backup applying the log ends where this broker is: the enqueue and its drop are one record.
    expect(kinds(logged)).toEqual(['transaction']);
    const tx = logged[0]!.change as Extract<(typeof logged)[number]['change'], { kind: 'transaction' }>;
    expect(tx.changes).toHaveLength(2);
    expect(tx.changes[1]).toMatchObject({ kind: 'dequeue', queue: 'q', id: tx.changes[0]!.kind === 'enqueue' ? tx.changes[0]!.message.id : -1 });
  });
});

describe('Queue TTL', () => {
  it('expired messages are skipped at dispatch and logged as dequeued', () => {
    const { broker, queue, clock, dispatch, logged } = setup();
    broker.publish('q', msg('short', { ttlMs: 100 }));
    broker.publish('q', msg('forever'));
    broker.publish('q', msg('long', { ttlMs: 10_000 }));
    clock.advance(100);
    logged.length = 0;
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    dispatch();
    expect(c.bodies).toEqual(['forever', 'long']);
    expect(kinds(logged)).toEqual(['dequeue']);
    expect(queue.depth).toBe(2);
  });

  it('an expired message behind a live one is skipped too', () => {
    const { broker, queue, clock, dispatch } = setup();
    broker.publish('q', msg('live'));
    broker.publish('q', msg('short', { ttlMs: 50 }));
    broker.publish('q', msg('live2'));
    clock.advance(60);
    const c = new FakeConsumer('c');
    queue.addConsumer(c);
    dispatch();
    expect(c.bodies).toEqual(['live', 'live2']);
    expect(queue.depth).toBe(2);
  });

  it('the queue default TTL applies to messages that set none', () => {
    const { broker, queue, clock } = setup(qs({ defaultTtlMs: 1000 }));
    broker.publish('q', msg('default'));
    broker.publish('q', msg('own', { ttlMs: 5000 }));
    broker.publish('q', msg('abs', { absoluteExpiry: clock.now() + 3000 }));
    const expiries = queue.entries().map((e) => e.msg.expiresAt - clock.now());
    expect(expiries).toEqual([1000, 5000, 3000]);
    clock.advance(999);
    expect(broker.expire()).toBe(0);
    clock.advance(1);
    expect(broker.expire()).toBe(1);
    expect(bodies(queue)).toEqual(['own', 'abs']);
    clock.advance(2000);
    expect(broker.expire()).toBe(1);
    expect(bodies(queue)).toEqual(['own']);
  });

  it('expire(limit) drops at most limit messages, oldest first, across queues; the next call takes the rest', () => {
    const { broker, queue, clock } = setup(qs({ defaultTtlMs: 1000 }));
    broker.declareQueue('q2', qs({ defaultTtlMs: 1000 }));
    for (let i = 0; i < 5; i++) broker.publish('q', msg(`a${i}`));
    for (let i = 0; i < 3; i++) broker.publish('q2', msg(`b${i}`));
    clock.advance(1000);
    expect(broker.expire(4)).toBe(4);
    expect(bodies(queue)).toEqual(['a4']);
    expect(broker.expire(4)).toBe(4);
    expect(broker.queue('q2').depth).toBe(0);
    expect(broker.expire(4)).toBe(0);
  });

  it('with both a header ttl and an absolute-expiry-time the earlier one holds; the default ttl only for messages that set neither', () => {
    const { broker, queue, clock } = setup(qs({ defaultTtlMs: 500 }));
    const now = clock.now();
    broker.publish('q', msg('abs-first', { ttlMs: 10_000, absoluteExpiry: now + 1000 }));
    broker.publish('q', msg('ttl-first', { ttlMs: 2000, absoluteExpiry: now + 10_000 }));
    broker.publish('q', msg('past', { ttlMs: 10_000, absoluteExpiry: -5 }));
    broker.publish('q', msg('long-abs', { absoluteExpiry: now + 3000 }));
    broker.publish('q', msg('default'));
    expect(queue.entries().map((e) => [e.msg.bytes.toString(), e.msg.expiresAt])).toEqual([
      ['abs-first', now + 1000],
      ['ttl-first', now + 2000],
      ['past', 1],
      ['long-abs', now + 3000],
      ['default', now + 500],
    ]);
    expect(broker.expire()).toBe(1);
    clock.advance(1000);
    expect(broker.expire()).toBe(2);
    expect(bodies(queue)).toEqual(['ttl-first', 'long-abs']);
  });

  it('expire() removes expired messages, leaves acquired ones, and logs dequeues', () => {
    const { broker, queue, clock, dispatch, logged } = setup();
    broker.publish('q', msg('a', { ttlMs: 10 }));
    broker.publish('q', msg('b', { ttlMs: 10 }));
    broker.publish('q', msg('c'));
    const c = new FakeConsumer('c', 1);
    queue.addConsumer(c);
    dispatch();
    clock.advance(10);
    logged.length = 0;
    expect(broker.expire()).toBe(1);
    expect(bodies(queue)).toEqual(['a', 'c']);
    expect(kinds(logged)).toEqual(['dequeue']);
  });

  it('expired messages go to the alternate exchange', () => {
    const { broker, clock } = newBroker();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const q = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' })).queue;
    broker.publish('q', msg('x', { ttlMs: 5 }));
    clock.advance(5);
    broker.expire();
    expect(q.depth).toBe(0);
    expect(bodies(broker.queue('dlq'))).toEqual(['x']);
    // The dead letter does not inherit the expiry.
    expect(broker.queue('dlq').entries()[0].msg.expiresAt).toBe(0);
    // Also when found expired at dispatch.
    broker.publish('q', msg('y', { ttlMs: 5 }));
    clock.advance(5);
    q.addConsumer(new FakeConsumer('c'));
    q.dispatch(clock.now());
    expect(bodies(broker.queue('dlq'))).toEqual(['x', 'y']);
  });

  it('an expired message is not dead-lettered back into the queue it expired from', () => {
    for (const settings of [qs({ alternateExchange: 'amq.fanout' }), qs({ alternateExchange: 'amq.fanout', defaultTtlMs: 1000 })]) {
      const { broker, clock } = newBroker();
      broker.declareQueue('dlq', qs());
      const q = broker.declareQueue('q', settings).queue;
      // The alternate exchange routes to the dead-letter queue and back to the queue itself.
      broker.bind('amq.fanout', 'dlq', '');
      broker.bind('amq.fanout', 'q', '');
      broker.publish('q', msg('x', { ttlMs: 5 }));
      clock.advance(5);
      expect(broker.expire()).toBe(1);
      // Found expired at dispatch, the same.
      broker.publish('q', msg('y', { ttlMs: 5 }));
      clock.advance(5);
      const c = new FakeConsumer('c');
      q.addConsumer(c);
      q.dispatch(clock.now());
      // Nothing expired reaches the queue's consumers, and the dead-letter queue gets each once.
      clock.advance(10_000);
      broker.expire();
      q.dispatch(clock.now());
      expect(c.bodies).toEqual([]);
      expect(q.depth).toBe(0);
      expect(bodies(broker.queue('dlq'))).toEqual(['x', 'y']);
    }
  });

  it('a message that expired while acquired is dropped (dead-lettered) when released, not delivered', () => {
    const { broker, clock } = newBroker();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const q = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout', priorities: 10 })).queue;
    broker.publish('q', msg('hi', { ttlMs: 10, priority: 9 }));
    broker.publish('q', msg('lo', { priority: 0 }));
    const c1 = new FakeConsumer('c1', 1);
    q.addConsumer(c1);
    q.dispatch(clock.now());
    expect(c1.bodies).toEqual(['hi']);
    clock.advance(10);
    // Out with a consumer, it is not expired under it.
    expect(broker.expire()).toBe(0);
    q.release(c1.deliveries[0], { deliveryFailed: true, undeliverableHere: false });
    const c2 = new FakeConsumer('c2');
    q.addConsumer(c2);
    q.dispatch(clock.now());
    expect(c2.bodies).toEqual(['lo']);
    expect(bodies(broker.queue('dlq'))).toEqual(['hi']);
    expect(broker.queue('dlq').entries()[0].deliveryCount).toBe(1);
  });

  it('browsers skip expired messages', () => {
    const { broker, queue, clock, dispatch } = setup();
    broker.publish('q', msg('a'));
    broker.publish('q', msg('b', { ttlMs: 5 }));
    broker.publish('q', msg('c'));
    clock.advance(5);
    const b = new FakeConsumer('b', 10, true);
    queue.addConsumer(b);
    dispatch();
    expect(b.bodies).toEqual(['a', 'c']);
  });
});

describe('Queue purge, delete, auto-delete', () => {
  it('purge removes available messages (all, or up to a limit) and logs each', () => {
    const { queue, send, dispatch, logged } = setup();
    send('a', 'b', 'c', 'd', 'e');
    const c = new FakeConsumer('c', 1);
    queue.addConsumer(c);
    dispatch();
    logged.length = 0;
    expect(queue.purge(2)).toBe(2);
    expect(bodies(queue)).toEqual(['a', 'd', 'e']);
    expect(queue.purge()).toBe(2);
    expect(bodies(queue)).toEqual(['a']);
    expect(kinds(logged)).toEqual(['dequeue', 'dequeue', 'dequeue', 'dequeue']);
  });

  it('purge of a priority queue with a limit takes exactly that many', () => {
    const { broker } = newBroker();
    const q = broker.declareQueue('p', qs({ priorities: 3 })).queue;
    for (let i = 0; i < 9; i++) broker.publish('p', msg(`m${i}`, { priority: i }));
    expect(q.purge(4)).toBe(4);
    expect(q.depth).toBe(5);
  });

  it('deleteQueue moves remaining messages to the alternate exchange', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' }));
    broker.publish('q', msg('a'));
    broker.publish('q', msg('b'));
    logged.length = 0;
    expect(broker.deleteQueue('q')).toBe(2);
    expect(broker.queues.has('q')).toBe(false);
    expect(bodies(broker.queue('dlq'))).toEqual(['a', 'b']);
    // Each sent on and dequeued in one record before the queue goes: a crash or failover part-way loses none.
    expect(kinds(logged)).toEqual(['transaction', 'transaction', 'queue-delete']);
    expect(messageRecords(logged)).toEqual(['enqueue dlq + dequeue q', 'enqueue dlq + dequeue q']);
  });

  it('deleteQueue: a paged message whose body cannot be read back is dropped, counted and reported; the others go on and the delete completes', () => {
    const lost: Array<[string, number, string, number]> = [];
    const deleted: string[] = [];
    const { broker, logged } = newBroker({
      events: { deadLetterLost: (q, id, reason, total) => lost.push([q.name, id, reason, total]), queueDeleted: (q) => deleted.push(q.name) },
    });
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const queue = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' })).queue;
    const ids = ['a', 'b', 'c', 'd'].map((b) => broker.publish('q', msg(b, { subject: b === 'd' ? 'sub' : undefined })).id);
    // Bodies paged out to a "journal" whose records of b (body) and d (subject) are damaged.
    const kept = new Map(queue.entries().map((e) => [e.msg.id, e.msg] as const));
    const loader: BodyLoader = {
      load: (m) => {
        if (m.id === ids[1]) throw new Error('journal record of message 2 is damaged');
        return kept.get(m.id)!.bytes;
      },
      loadSubject: (m) => {
        if (m.id === ids[3]) throw new Error('journal record of message 4 is damaged');
        return kept.get(m.id)!.subject;
      },
    };
    for (const id of ids) queue.pageOut(id, loader);
    expect(queue.pagedDepth).toBe(4);
    logged.length = 0;
    expect(broker.deleteQueue('q')).toBe(4);
    expect(broker.queues.has('q')).toBe(false);
    expect(deleted).toEqual(['q']);
    expect(bodies(broker.queue('dlq'))).toEqual(['a', 'c']);
    expect(kinds(logged)).toEqual(['transaction', 'dequeue', 'transaction', 'dequeue', 'queue-delete']);
    expect(messageRecords(logged)).toEqual(['enqueue dlq + dequeue q', 'dequeue q', 'enqueue dlq + dequeue q', 'dequeue q']);
    expect(lost.map(([q, id, , total]) => [q, id, total])).toEqual([
      ['q', ids[1], 1],
      ['q', ids[3], 2],
    ]);
    expect(lost[0]![2]).toContain('journal record of message 2 is damaged');
    expect(broker.deadLettersLost).toBe(2);
  });

  it('a dead letter a full alternate queue refuses is dropped, counted and reported, not silently', () => {
    const lost: number[] = [];
    const { broker } = newBroker({ events: { deadLetterLost: (_q, id) => lost.push(id) } });
    broker.declareQueue('dlq', qs({ maxCount: 1 }));
    broker.bind('amq.fanout', 'dlq', '');
    broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' }));
    const ids = ['a', 'b'].map((b) => broker.publish('q', msg(b)).id);
    expect(broker.deleteQueue('q')).toBe(2);
    expect(bodies(broker.queue('dlq'))).toEqual(['a']);
    expect(lost).toEqual([ids[1]]);
    expect(broker.deadLettersLost).toBe(1);
  });

  it('settling a delivery of a deleted queue changes nothing', () => {
    const { broker, clock, logged } = newBroker();
    broker.declareQueue('dlq', qs());
    broker.bind('amq.fanout', 'dlq', '');
    const old = broker.declareQueue('q', qs({ alternateExchange: 'amq.fanout' })).queue;
    broker.publish('q', msg('a'));
    broker.publish('q', msg('b'));
    broker.publish('q', msg('c'));
    const c = new FakeConsumer('c');
    old.addConsumer(c);
    old.dispatch(clock.now());
    broker.deleteQueue('q');
    expect(bodies(broker.queue('dlq'))).toEqual(['a', 'b', 'c']);
    const fresh = broker.declareQueue('q', qs()).queue;
    broker.publish('q', msg('new'));
    const n = logged.length;
    broker.accept(old, c.deliveries[0]);
    broker.reject(old, c.deliveries[1]); // must not dead-letter 'b' a second time
    old.release(c.deliveries[2], { deliveryFailed: true, undeliverableHere: false });
    expect(broker.commit([], [{ queue: old, entry: c.deliveries[2] }]).lsn).toBe(0);
    old.removeConsumer(c);
    expect(logged.length).toBe(n);
    expect(bodies(broker.queue('dlq'))).toEqual(['a', 'b', 'c']);
    expect(bodies(fresh)).toEqual(['new']);
    expect(old.depth).toBe(0);
  });

  it('deleteQueue with if-empty / if-unused refuses', () => {
    const { broker, queue, send } = setup();
    send('a');
    expect(() => broker.deleteQueue('q', { ifEmpty: true })).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_PRECONDITION' }));
    queue.addConsumer(new FakeConsumer('c', 0));
    expect(() => broker.deleteQueue('q', { ifUnused: true })).toThrow(expect.objectContaining({ code: 'TANDEM_ERR_PRECONDITION' }));
    expect(broker.queues.has('q')).toBe(true);
  });

  it('an auto-delete queue reports unused when its last consumer goes', () => {
    const unused: string[] = [];
    const deleted: string[] = [];
    const { broker } = newBroker({
      events: { queueUnused: (q) => unused.push(q.name), queueDeleted: (q) => deleted.push(q.name) },
    });
    const q = broker.declareQueue('auto', qs({ autoDelete: true })).queue;
    const plain = broker.declareQueue('plain', qs()).queue;
    const [c1, c2] = [new FakeConsumer('c1'), new FakeConsumer('c2')];
    q.addConsumer(c1);
    q.addConsumer(c2);
    q.removeConsumer(c1);
    expect(unused).toEqual([]);
    q.removeConsumer(c2);
    expect(unused).toEqual(['auto']);
    plain.addConsumer(c1);
    plain.removeConsumer(c1);
    expect(unused).toEqual(['auto']);
    broker.deleteQueue('auto');
    expect(deleted).toEqual(['auto']);
  });

  it('queueReady fires for each queue a publish reaches', () => {
    const ready: string[] = [];
    const { broker } = newBroker({ events: { queueReady: (q) => ready.push(q.name) } });
    broker.declareQueue('q1', qs());
    broker.declareQueue('q2', qs());
    broker.bind('amq.fanout', 'q1', '');
    broker.bind('amq.fanout', 'q2', '');
    broker.publish('amq.fanout', msg('x'));
    expect(ready.sort()).toEqual(['q1', 'q2']);
  });
});

describe('withdraw', () => {
  it('removes a published message that is still available', () => {
    const { broker, logged } = newBroker();
    broker.declareQueue('q1', qs());
    broker.declareQueue('q2', qs());
    broker.bind('amq.fanout', 'q1', '');
    broker.bind('amq.fanout', 'q2', '');
    broker.publish('amq.fanout', msg('keep'));
    const r = broker.publish('amq.fanout', msg('gone'));
    // q1's copy was handed to a consumer already: left to it.
    const c = new FakeConsumer('c', 2);
    broker.queue('q1').addConsumer(c);
    broker.queue('q1').dispatch(0);
    logged.length = 0;
    broker.withdraw(r);
    expect(bodies(broker.queue('q1'))).toEqual(['keep', 'gone']);
    expect(bodies(broker.queue('q2'))).toEqual(['keep']);
    expect(logged.map((e) => e.change)).toEqual([{ kind: 'dequeue', queue: 'q2', id: r.id }]);
  });

  it('of a message that went nowhere is harmless', () => {
    const { broker } = newBroker();
    const r = broker.publish('amq.fanout', msg('x'));
    expect(r).toMatchObject({ queues: [], id: 0 });
    broker.withdraw(r);
  });
});

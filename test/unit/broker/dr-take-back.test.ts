// What a refusal's undoing (Broker.withdraw: the journal write failed) tells a DR
// copy that keeps a duplicate-detection window, in the model: a message a failed
// commit had accepted comes back marked `restored`, and the copy takes it back
// instead of dropping it as a duplicate of its own first copy; a refused publish
// on a queue that keeps no window names its message, and the copy forgets the key
// it had read from it, so the client's resend gets in after an activation. The
// copy is fed as the bridge feeds it (src/dr/bridge.ts): enqueues and dequeues as
// dr-transactions, a take-back through forgetDedupKeys.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { Broker, drRoleChange } from '../../../src/broker/broker.js';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { FakeClock, FakeConsumer, msg, qs } from './helpers.js';

type TxOp = Extract<Change, { kind: 'enqueue' | 'dequeue' }>;

function keyedBroker(clock: FakeClock): { broker: Broker; logged: LoggedChange[] } {
  const broker = new Broker({ now: clock.now, dedupKeys: readDedupKey });
  const logged: LoggedChange[] = [];
  broker.log.attach({ append: (e) => logged.push(e) });
  return { broker, logged };
}

const withId = (id: string) => msg('', { bytes: rhea.message.encode({ message_id: id, body: id, durable: true }) as Buffer, durable: true });
const windowed = qs({ durable: true, dedupWindow: 1000 });
const plain = qs({ durable: true });
const idsOf = (broker: Broker, queue: string) => [...broker.queue(queue).ids()];

/** A DR copy of `orders` (window: `settings`'s), passive, fed from its source's log. */
function copyOf(clock: FakeClock, settings = windowed) {
  const { broker, logged } = keyedBroker(clock);
  broker.declareQueue('orders', settings);
  broker.recordDr(drRoleChange('orders', { source: 'source:5672', mode: 'enqueue-and-dequeue', state: 'passive', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false }));
  let lsn = 0;
  /** The source's changes as one bridge batch: enqueues and dequeues, as the bridge flushes them. */
  const apply = (entries: LoggedChange[]) => {
    const ops: TxOp[] = [];
    for (const e of entries) {
      const c = e.change;
      if (c.kind === 'enqueue' || c.kind === 'dequeue') ops.push(c);
      else if (c.kind === 'transaction') ops.push(...c.changes);
      else if (c.kind === 'dedup-forget') {
        if (ops.length > 0) broker.recordDr({ kind: 'dr-transaction', queues: ['orders'], lsn: ++lsn, time: 1, changes: ops.splice(0) });
        broker.forgetDedupKeys(c.queue, c.keys, c.ids);
      }
    }
    if (ops.length > 0) broker.recordDr({ kind: 'dr-transaction', queues: ['orders'], lsn: ++lsn, time: 1, changes: ops });
  };
  /** `tandem dr activate`: the copy serves clients. */
  const activate = () => {
    broker.recordDr(drRoleChange('orders', { ...broker.drQueues.get('orders')!, state: 'active', epoch: 2 }));
    broker.indexDedupWindows();
  };
  return { broker, logged, apply, activate };
}

/** Deliver every message of `orders` to one consumer, and commit its acceptance of all of them. */
function acceptAll(broker: Broker) {
  const q = broker.queue('orders');
  const c = new FakeConsumer('c');
  q.addConsumer(c);
  q.dispatch(0);
  return broker.commit([], c.deliveries.map((entry) => ({ queue: q, entry })));
}

describe('DR take-back - a message given back after a failed commit', () => {
  for (const [source, settings] of [['without a window', plain], ['with a window', windowed]] as const) {
    it(`a copy with a window takes it back (source queue ${source}), once and in its place, and keeps its key: a resend after activation is a duplicate`, () => {
      const clock = new FakeClock();
      const src = keyedBroker(clock);
      src.broker.declareQueue('orders', settings);
      for (const id of ['m-0', 'm-1', 'm-2']) src.broker.publish('orders', withId(id));
      const commit = acceptAll(src.broker);
      // The commit's journal write failed (disk full): rolled back, its acceptances given back.
      expect(src.broker.withdraw(commit)).toBe(0);
      expect(idsOf(src.broker, 'orders')).toEqual([1, 2, 3]);
      const back = src.logged.filter((e) => e.change.kind === 'enqueue' && e.change.restored);
      expect(back.map((e) => (e.change as { message: { id: number } }).message.id)).toEqual([1, 2, 3]);

      // The copy got the publishes, the commit and the give-backs: in one batch, and one by one.
      for (const batches of [[src.logged], src.logged.map((e) => [e])]) {
        const copy = copyOf(clock);
        for (const b of batches) copy.apply(b);
        expect(idsOf(copy.broker, 'orders')).toEqual([1, 2, 3]);
        const q = copy.broker.queue('orders');
        expect(q.dedupCounts.duplicates).toBe(0);
        expect(q.dedup!.size).toBe(3);
        // The copy's own records carry no mark: only its source's duplicate check needed it.
        const own = copy.logged.flatMap((e) => (e.change.kind === 'dr-transaction' ? e.change.changes : []));
        expect(own.some((op) => op.kind === 'enqueue' && 'restored' in op)).toBe(false);
        copy.activate();
        expect(copy.broker.publish('orders', withId('m-1')).duplicate).toBe(true);
        expect(copy.broker.publish('orders', withId('m-3')).duplicate).toBeUndefined();
        expect(idsOf(copy.broker, 'orders')).toHaveLength(4);
      }

      // The source's records as its journal and its HA backups read them: the mark is
      // kept (a backup promoted later serves the DR copy from them), and a backup takes
      // the given-back message as any enqueue.
      const backup = new Broker({ now: clock.now, dedupKeys: readDedupKey });
      for (const e of src.logged) {
        const out = decodeChange(encodeChange(e));
        if (out.status !== 'ok' || out.entry.change.kind === 'lsn-reservation') throw new Error(`did not decode: ${e.change.kind}`);
        expect(out.entry).toEqual(e);
        backup.apply(out.entry as LoggedChange);
      }
      expect(idsOf(backup, 'orders')).toEqual([1, 2, 3]);
      backup.indexDedupWindows();
      expect(backup.publish('orders', withId('m-0')).duplicate).toBe(settings.dedupWindow > 0 ? true : undefined);
    });
  }

  it('a copy whose window lost the key (evicted) takes the key in again with the message it gives back (code 21 on the stream)', () => {
    const clock = new FakeClock();
    const src = keyedBroker(clock);
    src.broker.declareQueue('orders', plain);
    src.broker.publish('orders', withId('m-0'));
    const commit = acceptAll(src.broker);
    src.broker.withdraw(commit);
    const giveBack = src.logged.at(-1)!;
    expect(encodeChange(giveBack)[0]).toBe(21);
    const copy = copyOf(clock, qs({ durable: true, dedupWindow: 1 }));
    copy.apply(src.logged.slice(0, -1));
    // Another key pushed m-0's out of the one-key window meanwhile.
    copy.broker.recordDr({ kind: 'dr-transaction', queues: ['orders'], lsn: 100, time: 1, changes: [{ kind: 'enqueue', queue: 'orders', message: { id: 50, bytes: withId('other').bytes, headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined } }] });
    copy.apply([giveBack]);
    expect(idsOf(copy.broker, 'orders')).toEqual([1, 50]);
    copy.activate();
    expect(copy.broker.publish('orders', withId('m-0')).duplicate).toBe(true);
  });
});

describe('DR take-back - a refused publish on a queue without a window', () => {
  it("names the message in its take-back, before the purge, once a DR copy follows the cluster; a copy with a window forgets the key it read from it, so the resend after activation is kept", () => {
    const clock = new FakeClock();
    // Where no DR copy follows, nothing new is written (nothing is, for a queue without a
    // window); a queue with a window names its keys, as before (code 20).
    const alone = keyedBroker(clock);
    alone.broker.declareQueue('orders', plain);
    alone.broker.withdraw(alone.broker.publish('orders', withId('x')));
    expect(alone.logged.map((e) => e.change.kind)).toEqual(['queue-declare', 'enqueue', 'dequeue']);
    const keyed = keyedBroker(clock);
    keyed.broker.declareQueue('orders', windowed);
    keyed.broker.noteDrFollowed();
    keyed.broker.withdraw(keyed.broker.publish('orders', withId('x')));
    const keysOnly = keyed.logged.find((e) => e.change.kind === 'dedup-forget')!;
    expect('ids' in keysOnly.change).toBe(false);
    expect(encodeChange(keysOnly)[0]).toBe(20);

    const src = keyedBroker(clock);
    src.broker.declareQueue('orders', plain);
    src.broker.noteDrFollowed();
    src.broker.publish('orders', withId('kept'));
    const refused = src.broker.publish('orders', withId('refused'));
    const before = src.logged.length;
    src.broker.withdraw(refused);
    expect(src.logged.slice(before).map((e) => e.change)).toEqual([
      { kind: 'dedup-forget', queue: 'orders', keys: Buffer.alloc(0), ids: [refused.id] },
      { kind: 'dequeue', queue: 'orders', id: refused.id },
    ]);
    expect(encodeChange(src.logged[before]!)[0]).toBe(22);

    const copy = copyOf(clock);
    copy.apply(src.logged);
    expect(idsOf(copy.broker, 'orders')).toEqual([1]);
    // The copy's own take-back names the key it read: its journal and backups apply that as any.
    const own = copy.logged.filter((e) => e.change.kind === 'dedup-forget').map((e) => e.change as Extract<Change, { kind: 'dedup-forget' }>);
    expect(own).toHaveLength(1);
    expect(own[0]!.keys.length).toBe(16);
    expect('ids' in own[0]!).toBe(false);
    copy.activate();
    expect(copy.broker.publish('orders', withId('kept')).duplicate).toBe(true);
    expect(copy.broker.publish('orders', withId('refused')).duplicate).toBeUndefined();
    expect(copy.broker.queue('orders').dedupCounts.duplicates).toBe(1);
  });

  it('a committed send refused so is named too, and the same copy fed one change at a time ends the same', () => {
    const clock = new FakeClock();
    const src = keyedBroker(clock);
    src.broker.declareQueue('orders', plain);
    src.broker.noteDrFollowed();
    const failed = src.broker.commit([{ address: 'orders', msg: withId('t-1') }, { address: 'orders', msg: withId('t-2') }], []);
    src.broker.withdraw(failed);
    expect(src.logged.filter((e) => e.change.kind === 'dedup-forget').map((e) => (e.change as { ids?: number[] }).ids)).toEqual([[1, 2]]);
    const copy = copyOf(clock);
    for (const e of src.logged) copy.apply([e]);
    expect(idsOf(copy.broker, 'orders')).toEqual([]);
    copy.activate();
    for (const id of ['t-1', 't-2']) expect(copy.broker.publish('orders', withId(id)).duplicate).toBeUndefined();
    expect(copy.broker.queue('orders').dedupCounts.duplicates).toBe(0);
  });

  it('an HA backup of the source applies the named take-back as nothing; a copy without a window logs nothing for it', () => {
    const clock = new FakeClock();
    const src = keyedBroker(clock);
    src.broker.declareQueue('orders', plain);
    src.broker.noteDrFollowed();
    src.broker.withdraw(src.broker.publish('orders', withId('refused')));
    const backup = new Broker({ now: clock.now, dedupKeys: readDedupKey });
    for (const e of src.logged) backup.apply(e);
    expect(idsOf(backup, 'orders')).toEqual([]);
    expect(backup.queue('orders').dedup).toBeUndefined();

    const copy = copyOf(clock, plain);
    copy.broker.noteDrFollowed();
    const before = copy.logged.length;
    copy.apply(src.logged);
    expect(copy.logged.slice(before).map((e) => e.change.kind)).toEqual(['dr-transaction', 'dr-transaction']);
  });
});

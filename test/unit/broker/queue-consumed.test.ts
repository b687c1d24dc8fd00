// "This auto-delete queue has had a consumer" is queue state in the change log
// ('queue-consumed'), written once per queue at its first consumer, so a broker that
// starts serving (a restart, a promotion) deletes only the queues that had one and
// keeps those still waiting for their first: journaled (durable queues), sent to HA
// backups by the live stream and in a snapshot (replicated queues), and never logged
// by a broker that takes no local change (a backup's browser).
import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { snapshotOf, type SnapshotRecord } from '../../../src/replication/snapshot.js';
import { FakeConsumer, feedBackup, newBroker, qs } from './helpers.js';

const consumedRecords = (log: LoggedChange[]) => log.filter((e) => e.change.kind === 'queue-consumed').map((e) => ({ change: e.change, durable: e.durable }));

describe('queue-consumed', () => {
  it('queue-consumed - the first consumer of an auto-delete queue (a browser counts) logs it once, durable as the queue; later consumers log nothing; a queue that is not auto-delete logs nothing', () => {
    const { broker, logged } = newBroker();
    const ad = broker.declareQueue('ad', qs({ durable: true, autoDelete: true, autoDeleteDelayMs: 1000 })).queue;
    const mem = broker.declareQueue('mem', qs({ autoDelete: true })).queue;
    const plain = broker.declareQueue('plain', qs({ durable: true })).queue;
    expect(ad.consumed).toBe(false);
    const a = new FakeConsumer('a');
    ad.addConsumer(a);
    ad.addConsumer(new FakeConsumer('b'));
    ad.removeConsumer(a);
    ad.addConsumer(new FakeConsumer('c'));
    mem.addConsumer(new FakeConsumer('browser', 10, true));
    plain.addConsumer(new FakeConsumer('p'));
    expect(consumedRecords(logged)).toEqual([
      { change: { kind: 'queue-consumed', name: 'ad' }, durable: true },
      { change: { kind: 'queue-consumed', name: 'mem' }, durable: false },
    ]);
    expect([ad.consumed, mem.consumed, plain.consumed]).toEqual([true, true, false]);
  });

  it('queue-consumed - a queue made again under the name starts without it, and its own first consumer logs it again', () => {
    const { broker, logged } = newBroker();
    const first = broker.declareQueue('ad', qs({ durable: true, autoDelete: true })).queue;
    first.addConsumer(new FakeConsumer('a'));
    broker.deleteQueue('ad');
    const again = broker.declareQueue('ad', qs({ durable: true, autoDelete: true })).queue;
    expect(again.consumed).toBe(false);
    again.addConsumer(new FakeConsumer('b'));
    expect(consumedRecords(logged)).toHaveLength(2);
    // A backup applying that log ends with the second queue consumed, as the primary has it.
    const backup = new Broker();
    for (const e of logged) backup.apply(e);
    expect(backup.queue('ad').consumed).toBe(true);
    const cut = new Broker();
    for (const e of logged.slice(0, logged.findIndex((e) => e.change.kind === 'queue-declare' && e.lsn > 1) + 1)) cut.apply(e);
    expect(cut.queue('ad').consumed).toBe(false);
  });

  it('queue-consumed - a broker that takes no local change (an HA backup, a broker stopping) logs nothing and leaves the queue unmarked; a queue neither durable nor replicated is marked without a record', () => {
    const { broker, logged } = newBroker();
    let refused: string | undefined = 'this broker is an HA backup';
    broker.localChangesRefused = () => refused;
    const ad = broker.declareQueue('ad', qs({ durable: true, autoDelete: true })).queue;
    const temp = broker.declareQueue('temp', qs({ autoDelete: true, replicate: 'none' })).queue;
    const browser = new FakeConsumer('browser', 10, true);
    ad.addConsumer(browser);
    ad.removeConsumer(browser);
    temp.addConsumer(new FakeConsumer('t'));
    expect(consumedRecords(logged)).toEqual([]);
    expect([ad.consumed, temp.consumed]).toEqual([false, true]);
    // Serving now: the next first consumer is logged.
    refused = undefined;
    ad.addConsumer(new FakeConsumer('c'));
    expect(consumedRecords(logged)).toEqual([{ change: { kind: 'queue-consumed', name: 'ad' }, durable: true }]);
  });

  it('queue-consumed - reaches a backup by the live stream for queues of level all and configuration, not none; a snapshot carries it for the consumed queues alone, durable as each queue', () => {
    const { broker: primary } = newBroker();
    const backup = new Broker();
    const passed = feedBackup(primary, backup);
    for (const [name, replicate, durable] of [
      ['all', 'all', true],
      ['conf', 'configuration', false],
      ['none', 'none', true],
      ['waiting', 'all', true],
    ] as const) {
      primary.declareQueue(name, qs({ durable, autoDelete: true, replicate }));
      if (name !== 'waiting') primary.queue(name).addConsumer(new FakeConsumer(`c-${name}`));
    }
    expect(consumedRecords(passed).map((r) => r.change)).toEqual([
      { kind: 'queue-consumed', name: 'all' },
      { kind: 'queue-consumed', name: 'conf' },
    ]);
    expect(['all', 'conf', 'waiting'].map((n) => backup.queue(n).consumed)).toEqual([true, true, false]);
    expect(backup.queues.has('none')).toBe(false);
    // A backup that joins now gets a snapshot.
    const records: SnapshotRecord[] = [];
    const snap = snapshotOf(primary);
    for (let r = snap.records.next(); !r.done; r = snap.records.next()) records.push(r.value);
    expect(records.filter((r) => r.change.kind === 'queue-consumed')).toEqual([
      { change: { kind: 'queue-consumed', name: 'all' }, durable: true },
      { change: { kind: 'queue-consumed', name: 'conf' }, durable: false },
    ]);
    const joined = new Broker();
    let lsn = 0;
    for (const r of records) joined.apply({ lsn: ++lsn, change: r.change, durable: r.durable });
    expect(['all', 'conf', 'waiting'].map((n) => joined.queue(n).consumed)).toEqual([true, true, false]);
  });
});

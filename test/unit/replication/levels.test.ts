// Replication levels mixed in one broker: what the filter passes to a backup (the
// live stream) and what a snapshot gives one, for a transaction that spans queues
// of every level and exchanges bound across levels. Both backups must end in the
// same state: the primary's, less what its levels keep back.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { Broker } from '../../../src/broker/broker.js';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { snapshotOf } from '../../../src/replication/snapshot.js';
import { FakeClock, brokerState, feedBackup, msg, qs, xs } from '../broker/helpers.js';

/** A primary with a backup fed by the filter as the live stream is; `passed`: what went out. */
function primaryWithBackup(clock: FakeClock): { primary: Broker; backup: Broker; passed: LoggedChange[] } {
  const primary = new Broker({ now: clock.now, defaultReplicate: 'all', dedupKeys: readDedupKey });
  const backup = new Broker({ now: clock.now, defaultReplicate: 'all', dedupKeys: readDedupKey });
  return { primary, backup, passed: feedBackup(primary, backup) };
}

/** A backup made from a snapshot of `primary` taken now, records applied in order as a backup loads them. */
function snapshotBackup(primary: Broker, clock: FakeClock): Broker {
  const backup = new Broker({ now: clock.now, defaultReplicate: 'all', dedupKeys: readDedupKey });
  const snap = snapshotOf(primary);
  let lsn = 0;
  for (let r = snap.records.next(); !r.done; r = snap.records.next()) backup.apply({ lsn: ++lsn, change: r.value.change, durable: r.value.durable });
  return backup;
}

/** The primary's state as a backup must hold it: queues of level none, exchanges of level none and their bindings left out, messages of `configuration` queues too. */
function replicatedState(primary: Broker): unknown {
  const state = brokerState(primary) as {
    queues: Array<{ name: string; settings: { replicate: string | undefined }; ids: number[]; depth: number; bytes: number }>;
    exchanges: Array<{ name: string; settings: { replicate: string | undefined }; bindings: Array<{ queue: string }> }>;
    epoch: number;
  };
  const level = (s: { replicate: string | undefined }) => s.replicate ?? 'all';
  const kept = new Set(state.queues.filter((q) => level(q.settings) !== 'none').map((q) => q.name));
  return {
    queues: state.queues.filter((q) => kept.has(q.name)).map((q) => (level(q.settings) === 'all' ? q : { ...q, ids: [], depth: 0, bytes: 0 })),
    exchanges: state.exchanges
      .filter((e) => level(e.settings) !== 'none')
      .map((e) => ({ ...e, bindings: e.bindings.filter((b) => kept.has(b.queue)) })),
    epoch: state.epoch,
  };
}

describe('replication levels', () => {
  it('replication levels - a transaction over queues of every level reaches a backup as one change of its `all` part; live stream and snapshot agree', () => {
    const clock = new FakeClock();
    const { primary, backup, passed } = primaryWithBackup(clock);
    primary.declareQueue('q-all', qs({ durable: true, replicate: 'all' }));
    primary.declareQueue('q-conf', qs({ durable: true, replicate: 'configuration' }));
    primary.declareQueue('q-none', qs({ durable: true, replicate: 'none' }));
    primary.declareQueue('q-default', qs({ durable: true }));
    primary.declareExchange('fan', 'fanout', xs({ durable: true, replicate: 'all' }));
    primary.declareExchange('ex-none', 'topic', xs({ durable: true, replicate: 'none' }));
    primary.declareExchange('ex-conf', 'topic', xs({ durable: true, replicate: 'configuration' }));
    for (const q of ['q-all', 'q-conf', 'q-none', 'q-default']) {
      primary.bind('fan', q, '');
      primary.bind('ex-none', q, '#');
      primary.bind('ex-conf', q, '#');
      primary.bind('amq.topic', q, q);
    }
    // One message to each queue through an exchange of each level.
    primary.publish('fan', msg('fanned', { durable: true }));
    primary.publish('ex-none', msg('topic-none', { durable: true, subject: 'a' }));
    primary.publish('ex-conf', msg('topic-conf', { durable: true, subject: 'a' }));
    const first = (q: string) => primary.queue(q).entries()[0]!;
    const accepts = ['q-all', 'q-conf', 'q-none', 'q-default'].map((q) => ({ queue: primary.queue(q), entry: first(q) }));
    passed.length = 0;
    primary.commit(
      [
        { address: 'q-all', msg: msg('tx-all', { durable: true }) },
        { address: 'q-conf', msg: msg('tx-conf', { durable: true }) },
        { address: 'q-none', msg: msg('tx-none', { durable: true }) },
        { address: 'fan', msg: msg('tx-fan') },
      ],
      accepts,
    );
    // One change, with the sends and acceptances of the queues of level all only.
    expect(passed.map((e) => e.change.kind)).toEqual(['transaction']);
    const ops = (passed[0]!.change as Extract<Change, { kind: 'transaction' }>).changes;
    expect(ops.map((op) => `${op.kind} ${op.queue}`).sort()).toEqual(
      ['dequeue q-all', 'dequeue q-default', 'enqueue q-all', 'enqueue q-all', 'enqueue q-default'].sort(),
    );
    expect(brokerState(backup)).toEqual(replicatedState(primary));
    expect(brokerState(backup)).toEqual(brokerState(snapshotBackup(primary, clock)));
    // The backup holds q-all and q-default as the primary does, message for message.
    for (const q of ['q-all', 'q-default']) {
      expect(backup.queue(q).entries().map((e) => e.msg.bytes.toString())).toEqual(primary.queue(q).entries().map((e) => e.msg.bytes.toString()));
    }
    expect(backup.queue('q-conf').depth).toBe(0);
    expect(backup.queues.has('q-none')).toBe(false);
    expect(backup.exchanges.has('ex-none')).toBe(false);
  });

  it('replication levels - a queue deleted and declared again at another level: the backup follows each change, and a snapshot taken after agrees', () => {
    const clock = new FakeClock();
    const { primary, backup } = primaryWithBackup(clock);
    primary.declareQueue('q', qs({ durable: true, replicate: 'all' }));
    primary.bind('amq.fanout', 'q', '');
    primary.publish('q', msg('old', { durable: true }));
    primary.deleteQueue('q');
    primary.declareQueue('q', qs({ durable: true, replicate: 'none' }));
    primary.bind('amq.fanout', 'q', '');
    primary.publish('q', msg('unreplicated', { durable: true }));
    expect(backup.queues.has('q')).toBe(false);
    expect(brokerState(backup)).toEqual(replicatedState(primary));
    primary.deleteQueue('q');
    primary.declareQueue('q', qs({ durable: true, replicate: 'configuration' }));
    primary.bind('amq.fanout', 'q', '');
    primary.publish('amq.fanout', msg('conf', { durable: true }));
    expect(backup.queue('q').depth).toBe(0);
    expect(brokerState(backup)).toEqual(replicatedState(primary));
    primary.deleteQueue('q');
    primary.declareQueue('q', qs({ durable: true, replicate: 'all' }));
    primary.bind('amq.fanout', 'q', '');
    primary.publish('amq.fanout', msg('new', { durable: true }));
    expect(backup.queue('q').entries().map((e) => e.msg.bytes.toString())).toEqual(['new']);
    expect(brokerState(backup)).toEqual(replicatedState(primary));
    expect(brokerState(backup)).toEqual(brokerState(snapshotBackup(primary, clock)));
  });

  it('replication levels - a resend after failover is taken again by the queues whose messages were not replicated, and refused by the `all` queue that has the first copy', () => {
    const clock = new FakeClock();
    const { primary, backup } = primaryWithBackup(clock);
    const window = { dedupWindow: 100, dedupTtlMs: 0 };
    primary.declareQueue('d-all', qs({ durable: true, replicate: 'all', ...window }));
    primary.declareQueue('d-conf', qs({ durable: true, replicate: 'configuration', ...window }));
    primary.declareQueue('d-none', qs({ durable: true, replicate: 'none', ...window }));
    for (const q of ['d-all', 'd-conf', 'd-none']) primary.bind('amq.fanout', q, '');
    const keyed = () => msg('', { bytes: rhea.message.encode({ message_id: 'order-1', durable: true, body: 'x' }) as Buffer, durable: true });
    primary.publish('amq.fanout', keyed());
    // The primary refuses the resend on every queue.
    expect(primary.publish('amq.fanout', keyed()).duplicate).toBe(true);
    const fromSnapshot = snapshotBackup(primary, clock);
    for (const promoted of [backup, fromSnapshot]) {
      // Promoted: d-all has the message and its key; d-conf has neither (its messages are not
      // replicated, so neither are its keys); d-none is not there. The resend gets in where
      // the message is missing, and only there.
      promoted.indexDedupWindows();
      expect(promoted.queue('d-all').dedup?.size).toBe(1);
      expect(promoted.queue('d-conf').dedup?.size ?? 0).toBe(0);
      const resend = promoted.publish('amq.fanout', keyed());
      expect(resend.queues).toEqual(['d-conf']);
      expect(promoted.queue('d-all').depth).toBe(1);
      expect(promoted.queue('d-conf').depth).toBe(1);
      expect(promoted.queues.has('d-none')).toBe(false);
    }
  });
});

// JMS noLocal (QueueSettings.noLocal): a subscription's queue does not take what its own
// side published: one connection's (a private subscription) or one container-id's (a
// named one), by publish and by a committed transaction; other queues bound alike take
// everything, and so does it from anyone else, or from nobody (a dead letter); a backup
// fed the log has the same setting; the setting is journaled in its own record code,
// with every other queue declared as before.
import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { Publisher } from '../../../src/broker/no-local.js';
import { defaultQueueSettings } from '../../../src/broker/settings.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { FakeClock, bodies, feedBackup, msg, qs, xs } from './helpers.js';

const alice: Publisher = { connection: 'c1', container: 'app' };
const aliceAgain: Publisher = { connection: 'c2', container: 'app' };
const bob: Publisher = { connection: 'c3', container: 'other' };

function newsBroker(): Broker {
  const broker = new Broker({ now: new FakeClock().now });
  broker.declareExchange('news', 'topic', xs({ durable: true }));
  broker.declareQueue('private', qs({ noLocal: { by: 'connection', id: 'c1' } }));
  broker.declareQueue('sub:app:d', qs({ durable: true, subscription: 'unshared', noLocal: { by: 'container', id: 'app' } }));
  broker.declareQueue('all', qs());
  for (const q of ['private', 'sub:app:d', 'all']) broker.bind('news', q, '#');
  return broker;
}

describe('routing to a subscription queue with noLocal', () => {
  it('leaves out its own connection (private) or container-id (named), by publish and by commit', () => {
    const broker = newsBroker();
    broker.publish('news/k', msg('from-alice'), { publisher: alice });
    broker.publish('news/k', msg('from-alice-again'), { publisher: aliceAgain });
    broker.publish('news/k', msg('from-bob'), { publisher: bob });
    broker.publish('news/k', msg('from-nobody'));
    broker.commit([{ address: 'news/k', msg: msg('tx-alice') }], [], alice);
    broker.commit([{ address: 'news/k', msg: msg('tx-bob') }], [], bob);
    expect(bodies(broker.queue('private'))).toEqual(['from-alice-again', 'from-bob', 'from-nobody', 'tx-bob']);
    expect(bodies(broker.queue('sub:app:d'))).toEqual(['from-bob', 'from-nobody', 'tx-bob']);
    expect(bodies(broker.queue('all'))).toEqual(['from-alice', 'from-alice-again', 'from-bob', 'from-nobody', 'tx-alice', 'tx-bob']);
  });

  it('a message sent straight to the queue by its address is held to it too', () => {
    const broker = newsBroker();
    broker.publish('sub:app:d', msg('own'), { publisher: aliceAgain });
    broker.publish('sub:app:d', msg('theirs'), { publisher: bob });
    expect(bodies(broker.queue('sub:app:d'))).toEqual(['theirs']);
  });

  it('a backup fed the log has the queue with its noLocal, and the same messages', () => {
    const primary = new Broker({ now: new FakeClock().now });
    const backup = new Broker({ now: new FakeClock().now });
    feedBackup(primary, backup);
    primary.declareExchange('news', 'topic', xs({ durable: true }));
    primary.declareQueue('sub:app:d', qs({ durable: true, subscription: 'unshared', noLocal: { by: 'container', id: 'app' } }));
    primary.bind('news', 'sub:app:d', '#');
    primary.publish('news/k', msg('own'), { publisher: alice });
    primary.publish('news/k', msg('theirs'), { publisher: bob });
    expect(backup.queue('sub:app:d').settings.noLocal).toEqual({ by: 'container', id: 'app' });
    expect(bodies(backup.queue('sub:app:d'))).toEqual(['theirs']);
  });
});

describe('record codec - a queue with noLocal', () => {
  const settings = { ...defaultQueueSettings, durable: true };
  it('is declared with code 26 and reads back with it, selector and all', () => {
    const noLocal = { by: 'container', id: 'app' } as const;
    const both = encodeChange({ lsn: 5, change: { kind: 'queue-declare', name: 'sub:app:s', settings: { ...settings, subscription: 'unshared', selector: 'a = 1', noLocal } }, durable: true });
    expect(both[0]).toBe(26);
    const back = decodeChange(both);
    expect(back.status === 'ok' && back.entry.change.kind === 'queue-declare' && back.entry.change.settings).toEqual({ ...settings, subscription: 'unshared', selector: 'a = 1', noLocal });
    const connection = decodeChange(encodeChange({ lsn: 6, change: { kind: 'queue-declare', name: 'p', settings: { ...settings, noLocal: { by: 'connection', id: 'c7' } } }, durable: true }));
    expect(connection).toMatchObject({ status: 'ok', entry: { change: { settings: { noLocal: { by: 'connection', id: 'c7' } } } } });
  });

  it('every queue without it keeps its older code, readable by the version before', () => {
    expect(encodeChange({ lsn: 7, change: { kind: 'queue-declare', name: 'sel', settings: { ...settings, selector: 'a = 1' } }, durable: true })[0]).toBe(25);
    expect(encodeChange({ lsn: 8, change: { kind: 'queue-declare', name: 'g', settings: { ...settings, messageGroups: true } }, durable: true })[0]).toBe(24);
    expect(encodeChange({ lsn: 9, change: { kind: 'queue-declare', name: 'plain', settings }, durable: true })[0]).toBe(13);
    const older = decodeChange(encodeChange({ lsn: 10, change: { kind: 'queue-declare', name: 'sel', settings: { ...settings, selector: 'a = 1' } }, durable: true }));
    expect(older.status === 'ok' && older.entry.change.kind === 'queue-declare' && older.entry.change.settings.noLocal).toBeUndefined();
  });

  it('a damaged scope is an invalid record, not a crash', () => {
    const bytes = encodeChange({ lsn: 11, change: { kind: 'queue-declare', name: 'p', settings: { ...settings, noLocal: { by: 'connection', id: 'c7' } } }, durable: true });
    // The scope's enum byte sits before the id's u32 length and its 2 bytes, at the end.
    const damaged = Buffer.from(bytes);
    damaged[damaged.length - 2 - 4 - 1] = 9;
    expect(decodeChange(damaged).status).not.toBe('ok');
  });
});

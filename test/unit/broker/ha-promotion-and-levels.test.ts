// Two HA rules of the broker model, driven without sockets: a broker that starts serving (promoted, or started)
// schedules the deletion of its auto-delete queues that had a consumer and have none now
// (AutoDeleteTimers.scheduleUnused, fake timers), and a declare an operator or
// client asks for (Broker.checkAlternateReplicated, as management's create calls it)
// may not make a replicated queue or exchange depend on an alternate exchange of
// level none (the integration side: test/integration/ha-levels.test.ts).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AutoDeleteTimers } from '../../../src/broker/auto-delete.js';
import { TandemError } from '../../../src/broker/errors.js';
import { parseExchangeSettings, parseQueueSettings } from '../../../src/broker/settings.js';
import { FakeConsumer, bodies, msg, newBroker, qs } from './helpers.js';

describe('auto-delete at promotion', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('auto-delete - a promotion schedules each auto-delete queue that had a consumer (the log says so) and has none now, with its own delay; one that never had one, one with a consumer, or not auto-delete, stays', () => {
    // The primary, where consumers came and went (it is gone before any delay passed).
    const { broker: primary, logged } = newBroker();
    primary.declareQueue('short', qs({ autoDelete: true, autoDeleteDelayMs: 1000 }));
    primary.declareQueue('long', qs({ autoDelete: true, autoDeleteDelayMs: 5000 }));
    primary.declareQueue('waiting', qs({ autoDelete: true, autoDeleteDelayMs: 1000 }));
    primary.declareQueue('used', qs({ autoDelete: true, autoDeleteDelayMs: 1000 }));
    primary.declareQueue('plain', qs());
    primary.publish('short', msg('a'));
    primary.publish('waiting', msg('w'));
    for (const name of ['short', 'long', 'plain']) {
      const gone = new FakeConsumer(`gone-${name}`);
      primary.queue(name).addConsumer(gone);
      primary.queue(name).removeConsumer(gone);
    }
    // The backup, promoted: it holds the queues as the primary's log made them, consumed or not.
    const { broker } = newBroker();
    for (const entry of logged) broker.apply(entry);
    const timers = new AutoDeleteTimers(broker, { debug: () => undefined, warn: () => undefined });
    broker.events = { queueUnused: (q) => timers.schedule(q), queueDeleted: (q) => timers.cancel(q) };
    expect(['short', 'long', 'waiting', 'used', 'plain'].map((n) => broker.queue(n).consumed)).toEqual([true, true, false, false, false]);
    const used = broker.queue('used');
    const c = new FakeConsumer('c');
    used.addConsumer(c);
    expect(timers.scheduleUnused(broker.queues.values())).toBe(2);
    vi.advanceTimersByTime(1000);
    expect([...broker.queues.keys()].sort()).toEqual(['long', 'plain', 'used', 'waiting']);
    vi.advanceTimersByTime(4000);
    expect([...broker.queues.keys()].sort()).toEqual(['plain', 'used', 'waiting']);
    // The consumer that stayed leaves: the usual delay. The queue that never had one keeps waiting, messages and all.
    used.removeConsumer(c);
    vi.advanceTimersByTime(1000);
    expect([...broker.queues.keys()].sort()).toEqual(['plain', 'waiting']);
    vi.advanceTimersByTime(60_000);
    expect(bodies(broker.queue('waiting'))).toEqual(['w']);
    timers.stop();
  });
});

describe('alternate exchanges and replication levels', () => {
  function refusal(fn: () => unknown): TandemError | undefined {
    try {
      fn();
      return undefined;
    } catch (err) {
      if (err instanceof TandemError) return err;
      throw err;
    }
  }

  it('levels - a replicated queue or exchange an operator declares may not name an alternate exchange of level none (invalid argument); a DR copy and the log are taken as they are', () => {
    const { broker } = newBroker();
    // As management's create does: checked, then declared.
    const declareQueue = (name: string, args: Record<string, unknown>) => {
      const settings = parseQueueSettings(args);
      broker.checkAlternateReplicated('queue', name, settings);
      return broker.declareQueue(name, settings);
    };
    const declareExchange = (name: string, type: 'fanout' | 'topic', args: Record<string, unknown>) => {
      const settings = parseExchangeSettings(args);
      broker.checkAlternateReplicated('exchange', name, settings);
      return broker.declareExchange(name, type, settings);
    };
    declareExchange('dlx-none', 'fanout', { 'qpid.replicate': 'none' });
    declareExchange('dlx-conf', 'fanout', { 'qpid.replicate': 'configuration' });
    for (const args of [{ 'qpid.replicate': 'all' }, { 'qpid.replicate': 'configuration' }, {}]) {
      const err = refusal(() => declareQueue('q', { ...args, 'alternate-exchange': 'dlx-none' }));
      expect(err?.code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
      expect(err?.condition).toBe('amqp:invalid-field');
      expect(err?.message).toMatch(/queue 'q' is replicated \(replicate (all|configuration)\) but its alternate exchange 'dlx-none' is not/);
    }
    const ex = refusal(() => declareExchange('x', 'topic', { 'alternate-exchange': 'dlx-none' }));
    expect(ex?.code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    expect(ex?.message).toMatch(/exchange 'x' is replicated \(replicate all\) but its alternate exchange 'dlx-none' is not/);
    expect(broker.queues.has('q')).toBe(false);
    expect(broker.exchanges.has('x')).toBe(false);
    // Taken: not replicated itself, or an alternate that is (or is built in).
    expect(declareQueue('q-none', { 'qpid.replicate': 'none', 'alternate-exchange': 'dlx-none' }).created).toBe(true);
    expect(declareExchange('x-none', 'fanout', { 'qpid.replicate': 'none', 'alternate-exchange': 'dlx-none' }).created).toBe(true);
    expect(declareQueue('q-conf', { 'alternate-exchange': 'dlx-conf' }).created).toBe(true);
    expect(declareQueue('q-builtin', { 'alternate-exchange': 'amq.fanout' }).created).toBe(true);
    // A DR copy keeps the alternate its source gave it: declared without the check.
    const source = parseQueueSettings({ 'alternate-exchange': 'dlx-none', 'qpid.replicate': 'none' });
    expect(broker.declareQueue('copy', { ...source, durable: true, replicate: 'all' }).created).toBe(true);
    // A journal (or a primary) holding such a queue from before is applied as it is.
    const replica = newBroker().broker;
    replica.apply({ lsn: 1, durable: true, change: { kind: 'exchange-declare', name: 'dlx-none', type: 'fanout', settings: { durable: true, alternateExchange: '', replicate: 'none' } } });
    replica.apply({ lsn: 2, durable: true, change: { kind: 'queue-declare', name: 'old', settings: qs({ durable: true, alternateExchange: 'dlx-none', replicate: 'all' }) } });
    expect(replica.queues.has('old')).toBe(true);
  });
});

// Topic subscriptions with a selector (QueueSettings.selector): a message routed to the
// subscription's queue goes in only when its selector selects it (publish, transaction,
// dead letter); other queues bound alike take everything; a backup fed the log has the
// same queue, selector included, without evaluating anything; the selector is journaled
// in its own record code, and every other queue is declared as before.
import { describe, expect, it } from 'vitest';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { amqp } from '../../../src/amqp/engine/types.js';
import { parseIncoming } from '../../../src/amqp/message-codec.js';
import { compileSelector } from '../../../src/amqp/selector-filter.js';
import { Broker } from '../../../src/broker/broker.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { defaultQueueSettings } from '../../../src/broker/settings.js';
import { FakeClock, bodies, feedBackup, qs, xs } from './helpers.js';

/** An encoded message with a colour property and a body. */
function coloured(colour: string, body: string) {
  const section = (code: number, value: Parameters<typeof encode>[0]) => encode({ type: 'described', descriptor: amqp.ulong(code), value });
  const bytes = Buffer.concat([section(0x74, amqp.map([[amqp.string('colour'), amqp.string(colour)]])), section(0x77, amqp.string(body))]);
  return parseIncoming(bytes);
}

function brokerWithSelectors(): Broker {
  const clock = new FakeClock();
  return new Broker({ now: clock.now, selectors: (text) => compileSelector(text).selects });
}

const bodyOf = (b: string) => /(b\d+)/.exec(b)![1];

describe('routing to a subscription queue with a selector', () => {
  it('takes only what its selector selects; a queue bound alike without one takes everything', () => {
    const broker = brokerWithSelectors();
    broker.declareExchange('news', 'topic', xs());
    broker.declareQueue('sub:app:blue', qs({ durable: true, subscription: 'unshared', selector: "colour = 'blue'" }));
    broker.declareQueue('all', qs());
    broker.bind('news', 'sub:app:blue', '#');
    broker.bind('news', 'all', '#');
    ['blue', 'red', 'blue', 'green'].forEach((c, i) => broker.publish('news/x', coloured(c, `b${i}`)));
    expect(bodies(broker.queue('sub:app:blue')).map(bodyOf)).toEqual(['b0', 'b2']);
    expect(bodies(broker.queue('all')).map(bodyOf)).toEqual(['b0', 'b1', 'b2', 'b3']);
    // A transaction's sends are routed the same way.
    broker.commit([{ address: 'news/x', msg: coloured('blue', 'b4') }, { address: 'news/x', msg: coloured('red', 'b5') }], []);
    expect(bodies(broker.queue('sub:app:blue')).map(bodyOf)).toEqual(['b0', 'b2', 'b4']);
    expect(bodies(broker.queue('all')).map(bodyOf)).toEqual(['b0', 'b1', 'b2', 'b3', 'b4', 'b5']);
  });

  it('JMSXDeliveryCount, JMSRedelivered and JMSExpiration at routing are the message\'s own: its count, its ttl from now', () => {
    const clock = new FakeClock();
    const broker = new Broker({ now: clock.now, selectors: (text) => compileSelector(text).selects });
    broker.declareExchange('news', 'topic', xs());
    broker.declareQueue('first', qs({ selector: 'JMSXDeliveryCount = 1 AND NOT JMSRedelivered' }));
    broker.declareQueue('soon', qs({ selector: `JMSExpiration > 0 AND JMSExpiration <= ${clock.t + 1000}` }));
    broker.bind('news', 'first', '#');
    broker.bind('news', 'soon', '#');
    broker.publish('news/x', coloured('blue', 'b0'));
    broker.publish('news/x', { ...coloured('blue', 'b1'), deliveryCount: 2 });
    broker.publish('news/x', { ...coloured('blue', 'b2'), ttlMs: 1000 });
    broker.publish('news/x', { ...coloured('blue', 'b3'), ttlMs: 1001 });
    expect(bodies(broker.queue('first')).map(bodyOf)).toEqual(['b0', 'b2', 'b3']);
    expect(bodies(broker.queue('soon')).map(bodyOf)).toEqual(['b2']);
  });

  it('dead letters routed to it are selected too', () => {
    const broker = brokerWithSelectors();
    broker.declareExchange('dlx', 'fanout', xs());
    broker.declareQueue('sub:app:dead-blue', qs({ selector: "colour = 'blue'" }));
    broker.bind('dlx', 'sub:app:dead-blue', '');
    broker.declareQueue('work', qs({ alternateExchange: 'dlx' }));
    broker.publish('work', coloured('blue', 'b0'));
    broker.publish('work', coloured('red', 'b1'));
    const work = broker.queue('work');
    for (const entry of work.entries()) broker.reject(work, entry);
    expect(bodies(broker.queue('sub:app:dead-blue')).map(bodyOf)).toEqual(['b0']);
  });

  it('a broker without a compiler (or a selector that does not compile) loses nothing: every message goes in', () => {
    const plain = new Broker({ now: new FakeClock().now });
    plain.declareQueue('q', qs({ selector: "colour = 'blue'" }));
    plain.publish('q', coloured('red', 'b0'));
    expect(plain.queue('q').depth).toBe(1);
    const broker = brokerWithSelectors();
    broker.declareQueue('odd', qs({ selector: "colour = 'blue" }));
    broker.publish('odd', coloured('red', 'b0'));
    expect(broker.queue('odd').depth).toBe(1);
  });

  it('a backup fed the log has the queue with its selector, and the same messages', () => {
    const primary = brokerWithSelectors();
    const backup = new Broker({ now: new FakeClock().now });
    feedBackup(primary, backup);
    primary.declareExchange('news', 'topic', xs({ durable: true }));
    primary.declareQueue('sub:app:s', qs({ durable: true, subscription: 'unshared', selector: 'n > 1' }));
    primary.bind('news', 'sub:app:s', '#');
    const n = (v: number) => {
      const section = (code: number, value: Parameters<typeof encode>[0]) => encode({ type: 'described', descriptor: amqp.ulong(code), value });
      return parseIncoming(Buffer.concat([section(0x74, amqp.map([[amqp.string('n'), amqp.int(v)]])), section(0x77, amqp.string(`b${v}`))]));
    };
    for (let i = 0; i < 4; i++) primary.publish('news/k', n(i));
    expect(backup.queue('sub:app:s').settings.selector).toBe('n > 1');
    expect(bodies(backup.queue('sub:app:s')).map(bodyOf)).toEqual(['b2', 'b3']);
  });
});

describe('record codec - a queue with a selector', () => {
  it('is declared with code 25 and reads back with it; every other queue keeps its code', () => {
    const settings = { ...defaultQueueSettings, durable: true };
    const selected = encodeChange({ lsn: 5, change: { kind: 'queue-declare', name: 'sub:a:s', settings: { ...settings, subscription: 'unshared', selector: "colour = 'blue'" } }, durable: true });
    expect(selected[0]).toBe(25);
    expect(decodeChange(selected)).toMatchObject({ status: 'ok', entry: { change: { kind: 'queue-declare', name: 'sub:a:s', settings: { subscription: 'unshared', selector: "colour = 'blue'" } } } });
    const kindOnly = encodeChange({ lsn: 11, change: { kind: 'queue-declare', name: 'sub:a:u', settings: { ...settings, subscription: 'shared', selector: 'a = 1' } }, durable: true });
    const back = decodeChange(kindOnly);
    expect(back.status === 'ok' && back.entry.change.kind === 'queue-declare' && back.entry.change.settings).toEqual({ ...settings, subscription: 'shared', selector: 'a = 1' });
    const withGroups = encodeChange({ lsn: 6, change: { kind: 'queue-declare', name: 'tmp', settings: { ...settings, messageGroups: true, selector: 'a = 1' } }, durable: true });
    expect(withGroups[0]).toBe(25);
    expect(decodeChange(withGroups)).toMatchObject({ status: 'ok', entry: { change: { settings: { messageGroups: true, selector: 'a = 1' } } } });
    expect(encodeChange({ lsn: 7, change: { kind: 'queue-declare', name: 'plain', settings }, durable: true })[0]).toBe(13);
    expect(encodeChange({ lsn: 8, change: { kind: 'queue-declare', name: 'sub:a:t', settings: { ...settings, subscription: 'unshared' } }, durable: true })[0]).toBe(19);
    expect(encodeChange({ lsn: 9, change: { kind: 'queue-declare', name: 'g', settings: { ...settings, messageGroups: true } }, durable: true })[0]).toBe(24);
    const plain = decodeChange(encodeChange({ lsn: 10, change: { kind: 'queue-declare', name: 'g', settings: { ...settings, messageGroups: true } }, durable: true }));
    expect(plain.status === 'ok' && plain.entry.change.kind === 'queue-declare' && plain.entry.change.settings.selector).toBeUndefined();
  });
});

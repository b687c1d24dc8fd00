// A fanout publish one of whose queues refuses its copy (the journal refuses a record
// of more than 1 GiB, and a longer queue name makes a longer record, so one message
// can fit one queue's record and not another's) is refused whole: the sender is told
// it was refused, so no queue may keep a copy, and no window may keep its key.
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { Broker } from '../../../src/broker/broker.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { TandemError } from '../../../src/broker/errors.js';
import { defaultExchangeSettings } from '../../../src/broker/settings.js';
import { FakeClock, msg, qs } from './helpers.js';

/** A broker whose log refuses, as the journal does, the enqueue of one queue's copy. */
function brokerRefusing(queue: string): { broker: Broker; logged: LoggedChange[]; refuse: { on: boolean } } {
  const broker = new Broker({ now: new FakeClock().now, dedupKeys: readDedupKey });
  const logged: LoggedChange[] = [];
  const refuse = { on: true };
  broker.log.attach({
    append: (e) => {
      if (refuse.on && e.change.kind === 'enqueue' && e.change.queue === queue) {
        throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'an enqueue of 1073741900 bytes is more than one journal record may be');
      }
      logged.push(e);
    },
  });
  for (const name of ['a', 'b', 'c']) {
    broker.declareQueue(name, qs({ durable: true, dedupWindow: 100 }));
  }
  broker.declareExchange('fan', 'fanout', { ...defaultExchangeSettings, durable: true });
  for (const name of ['a', 'b', 'c']) broker.bind('fan', name, '');
  return { broker, logged, refuse };
}

const withId = (id: string) => msg('', { bytes: rhea.message.encode({ body: 'x', message_id: id, durable: true }) as Buffer, durable: true });

describe('fanout publish refused by one of its queues', () => {
  it('leaves no copy in the queues before it, logs their removal, and keeps no key, so the resend gets in everywhere', () => {
    const { broker, logged, refuse } = brokerRefusing('b');
    expect(() => broker.publish('fan', withId('m-1'))).toThrow(/more than one journal record/);
    for (const name of ['a', 'b', 'c']) expect(broker.queues.get(name)!.depth, name).toBe(0);
    // Readers of the log (the journal, HA backups, DR) saw a's enqueue: they see it go again.
    const kinds = logged.filter((e) => e.change.kind === 'enqueue' || e.change.kind === 'dequeue').map((e) => `${e.change.kind} ${(e.change as { queue: string }).queue}`);
    expect(kinds).toEqual(['enqueue a', 'dequeue a']);

    refuse.on = false;
    const resent = broker.publish('fan', withId('m-1'));
    expect(resent.duplicate).toBeUndefined();
    expect(resent.queues.sort()).toEqual(['a', 'b', 'c']);
    for (const name of ['a', 'b', 'c']) expect(broker.queues.get(name)!.depth, name).toBe(1);
  });

  it('the first queue refusing leaves nothing to take back', () => {
    const { broker, logged } = brokerRefusing('a');
    expect(() => broker.publish('fan', withId('m-2'))).toThrow(TandemError);
    for (const name of ['a', 'b', 'c']) expect(broker.queues.get(name)!.depth, name).toBe(0);
    expect(logged.filter((e) => e.change.kind === 'enqueue' || e.change.kind === 'dequeue')).toEqual([]);
  });
});

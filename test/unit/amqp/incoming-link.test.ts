// A sending link while the broker refuses messages (a clean shutdown has begun):
// what arrives is released, and a transactional send let go of fails its transaction,
// so a commit arriving during the drain cannot go through without it.
import { describe, expect, it } from 'vitest';
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { readDeliveryTime } from '../../../src/amqp/delivery-time-reader.js';
import { IncomingLink } from '../../../src/amqp/incoming-link.js';
import { Broker } from '../../../src/broker/broker.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import type { Logger } from '../../../src/ops/log.js';
import { FakeClock, msg, newBroker, qs, xs } from '../broker/helpers.js';

const log = { warn() {}, info() {}, debug() {}, error() {} } as unknown as Logger;
const gate: SettlementGate = { whenSafe: (_lsn, _durable, cb) => cb() };

function refusingLink() {
  const { broker } = newBroker();
  broker.declareQueue('q', qs());
  const refused: Array<{ txnId: Buffer; why: string }> = [];
  const handed: Buffer[] = [];
  const link = new IncomingLink({ flow() {}, session: { connection: { identity: undefined } } } as unknown as Link, broker, gate, {
    address: 'q',
    creditWindow: 10,
    maxMessageSize: 1 << 20,
    ensureAddress() {},
    onTransactional: (_d, _m, _a, txnId) => handed.push(txnId),
    onTransactionalRefused: (txnId, why) => refused.push({ txnId, why }),
    refusing: () => 'the broker is shutting down',
  }, log);
  return { broker, link, refused, handed };
}

function delivery(remoteState?: unknown): Delivery & { released: number } {
  return { remoteState, remoteSettled: false, released: 0, release() { this.released++; } } as unknown as Delivery & { released: number };
}

describe('incoming link - while the broker refuses messages', () => {
  it('a transactional send is released and its transaction fails, with the reason', () => {
    const { broker, link, refused, handed } = refusingLink();
    const txnId = Buffer.from('01234567');
    const d = delivery({ def: { name: 'transactional-state' }, fields: { 'txn-id': txnId } });
    link.onMessage(d, Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x01, 0x78]));
    expect(d.released).toBe(1);
    expect(handed).toEqual([]);
    expect(refused).toEqual([{ txnId, why: 'the broker is shutting down' }]);
    expect(broker.queue('q').depth).toBe(0);
  });

  it('a plain send is released and nothing else happens', () => {
    const { broker, link, refused } = refusingLink();
    const d = delivery();
    link.onMessage(d, Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x01, 0x78]));
    expect(d.released).toBe(1);
    expect(refused).toEqual([]);
    expect(broker.queue('q').depth).toBe(0);
  });
});

describe('incoming link - a delayed message', () => {
  it('has its delivery time read once, by the link, for every queue the publish reaches; a publish without it has each queue read it', () => {
    const NOW = 1_700_000_000_000;
    const clock = new FakeClock(NOW);
    let brokerReads = 0;
    const broker = new Broker({
      now: clock.now,
      deliveryTimes: (bytes, now) => {
        brokerReads++;
        return readDeliveryTime(bytes, now);
      },
    });
    broker.declareExchange('fan', 'fanout', xs());
    for (const q of ['a', 'b', 'c']) {
      broker.declareQueue(q, qs());
      broker.bind('fan', q, '');
    }
    const link = new IncomingLink({ flow() {}, credit: 100, session: { connection: { identity: undefined } } } as unknown as Link, broker, gate, {
      address: 'fan',
      creditWindow: 10,
      maxMessageSize: 1 << 20,
      ensureAddress() {},
    }, log);
    // message-annotations {x-opt-delivery-time: NOW + 3000 (a long)}, then an amqp-value body.
    const time = Buffer.alloc(9);
    time[0] = 0x81;
    time.writeBigInt64BE(BigInt(NOW + 3000), 1);
    const entry = Buffer.concat([Buffer.from([0xa3, 19]), Buffer.from('x-opt-delivery-time'), time]);
    const bytes = Buffer.concat([Buffer.from([0x00, 0x53, 0x72, 0xc1, entry.length + 1, 2]), entry, Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x01, 0x78])]);
    link.onMessage({ remoteSettled: true } as unknown as Delivery, bytes);
    const held = () => ['a', 'b', 'c'].map((q) => broker.queue(q).scheduledDepth);
    expect(held()).toEqual([1, 1, 1]);
    expect(brokerReads).toBe(0);
    // A publish that did not come by a link (a dead letter, a management reply): each queue reads it.
    broker.publish('fan', msg('', { bytes }));
    expect(held()).toEqual([2, 2, 2]);
    expect(brokerReads).toBe(3);
  });
});

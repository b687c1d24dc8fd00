// A sending link while the broker refuses messages (a clean shutdown has begun):
// what arrives is released, and a transactional send let go of fails its transaction,
// so a commit arriving during the drain cannot go through without it.
import { describe, expect, it } from 'vitest';
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { IncomingLink } from '../../../src/amqp/incoming-link.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import type { Logger } from '../../../src/ops/log.js';
import { newBroker, qs } from '../broker/helpers.js';

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

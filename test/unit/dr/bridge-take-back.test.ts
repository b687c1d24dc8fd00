// A DR bridge applying a source's undoing of a refusal (Broker.withdraw: its journal
// write failed) to a copy that keeps a duplicate-detection window, from the stream
// as the source sends it: a failed commit's dequeue and the enqueue that gives the
// message back in one batch (the message held here still when the give-back is
// read), and a take-back naming a refused message between its enqueue and its purge.
import { pino } from 'pino';
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { readDedupKey } from '../../../src/amqp/dedup-key-reader.js';
import { Broker, drRoleChange } from '../../../src/broker/broker.js';
import type { LoggedChange, MessageRecord } from '../../../src/broker/changes.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import { DrBridge } from '../../../src/dr/bridge.js';
import type { PeerDialer } from '../../../src/peer-link/transport.js';
import { encodeRecordBatch } from '../../../src/replication/protocol.js';
import { waitFor } from '../../helpers/broker.js';
import { FakeClock, qs } from '../broker/helpers.js';
import { message } from '../store/helpers.js';

const SOURCE = 'source:5672';

const keyed = (id: number, key: string): MessageRecord => message(id, key, { bytes: rhea.message.encode({ message_id: key, body: key, durable: true }) as Buffer });

/** A copy of `orders` (window 1000) at source position 10, and a bridge following a scripted source that the test sends batches of changes. */
async function copyFollowing() {
  const clock = new FakeClock();
  const broker = new Broker({ now: clock.now, dedupKeys: readDedupKey });
  broker.declareQueue('orders', qs({ durable: true, dedupWindow: 1000 }));
  broker.recordDr(drRoleChange('orders', { source: SOURCE, mode: 'enqueue-and-dequeue', state: 'passive', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false }));
  broker.recordDr({ kind: 'dr-transaction', queues: ['orders'], lsn: 10, time: 1, changes: [] });
  let deliver: ((m: unknown, d: unknown) => void) | undefined;
  const dialer = {
    dial: (_o: unknown, events: { opened(p: unknown): void; disconnected(e: unknown): void }) => {
      setImmediate(() => events.opened({}));
      return {
        openReceiver: (o: { address: string }, ev: { attached(a: unknown): void; message(m: unknown, d: unknown): void }) => {
          deliver = (m, d) => ev.message(m, d);
          setImmediate(() => ev.attached({ source: { address: o.address }, properties: { 'tandem.dr.source': true } }));
          return { addCredit() {} };
        },
        abandon() {},
      };
    },
  } as unknown as PeerDialer;
  const gate = { whenSafe: (_l: number, _d: boolean, cb: (err?: Error) => void) => cb() } as unknown as SettlementGate;
  const bridge = new DrBridge(SOURCE, { broker, gate, log: pino({ level: 'silent' }), autoCreate: true, instanceId: 'x', password: undefined, tls: {}, dialer });
  bridge.restart();
  await waitFor(() => bridge.state === 'connected', { timeout: 5000, name: 'bridge connected' });
  const applied: number[] = [];
  /** One 'changes' message holding `entries`, covering up to the last one's LSN. */
  const send = async (entries: LoggedChange[]) => {
    const lsn = entries.at(-1)!.lsn;
    deliver!({ application_properties: { k: 'changes', lsn, time: 2, head: lsn, now: 0 }, body: encodeRecordBatch(entries) }, { accept: () => applied.push(lsn) });
    await waitFor(() => applied.includes(lsn), { timeout: 5000, name: `batch up to ${lsn} applied` });
  };
  const activate = () => {
    broker.recordDr(drRoleChange('orders', { ...broker.drQueues.get('orders')!, state: 'active', epoch: 2 }));
    broker.indexDedupWindows();
  };
  return { broker, bridge, send, activate };
}

const entry = (lsn: number, change: LoggedChange['change']): LoggedChange => ({ lsn, change, durable: true });

describe('DR bridge - the undoing of a refusal at the source', () => {
  it('a message given back after a failed commit, in the batch that holds the commit dequeuing it: taken back, once, in its place, its key kept', async () => {
    const { broker, bridge, send, activate } = await copyFollowing();
    await send([entry(11, { kind: 'enqueue', queue: 'orders', message: keyed(1, 'm-0') }), entry(12, { kind: 'enqueue', queue: 'orders', message: keyed(2, 'm-1') })]);
    await send([
      entry(13, { kind: 'transaction', changes: [{ kind: 'dequeue', queue: 'orders', id: 1 }, { kind: 'dequeue', queue: 'orders', id: 2 }] }),
      entry(14, { kind: 'enqueue', queue: 'orders', message: { ...keyed(1, 'm-0'), deliveryCount: 1 }, restored: true }),
      entry(15, { kind: 'enqueue', queue: 'orders', message: { ...keyed(2, 'm-1'), deliveryCount: 1 }, restored: true }),
    ]);
    expect([...broker.queue('orders').ids()]).toEqual([1, 2]);
    expect(broker.queue('orders').dedupCounts.duplicates).toBe(0);
    expect(broker.drPositions.get('orders')?.lsn).toBe(15);
    bridge.stop();
    activate();
    expect(broker.publish('orders', { bytes: keyed(9, 'm-1').bytes, headerLength: 0, durable: true, priority: 4, ttlMs: undefined, absoluteExpiry: undefined, deliveryCount: 0, subject: undefined }).duplicate).toBe(true);
  });

  it('a take-back naming a refused message (its source queue keeps no window): the copy forgets the key it read from it before the purge takes it', async () => {
    const { broker, bridge, send, activate } = await copyFollowing();
    await send([
      entry(11, { kind: 'enqueue', queue: 'orders', message: keyed(1, 'kept') }),
      entry(12, { kind: 'enqueue', queue: 'orders', message: keyed(2, 'refused') }),
      entry(13, { kind: 'dedup-forget', queue: 'orders', keys: Buffer.alloc(0), ids: [2] }),
      entry(14, { kind: 'dequeue', queue: 'orders', id: 2 }),
    ]);
    expect([...broker.queue('orders').ids()]).toEqual([1]);
    bridge.stop();
    activate();
    const resend = (key: string) => broker.publish('orders', { bytes: keyed(0, key).bytes, headerLength: 0, durable: true, priority: 4, ttlMs: undefined, absoluteExpiry: undefined, deliveryCount: 0, subject: undefined });
    expect(resend('kept').duplicate).toBe(true);
    expect(resend('refused').duplicate).toBeUndefined();
    expect([...broker.queue('orders').ids()]).toHaveLength(2);
  });
});

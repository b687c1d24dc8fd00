// Dead letters on a real tandemd, read by Debian's python3-qpid-proton: a message
// rejected, expired, or left on a deleted queue goes to the queue's alternate exchange
// as what happened to it says: the delivery-count it had reached (raised by modified
// outcomes with delivery-failed), the message-annotations consumers added, the queue
// it left and why (x-opt-tandem-dead-letter-queue, -reason), and an expiry that is its
// own (a rejected message's ttl still runs; an expired one's dead letter has none). The
// dead letter is the enqueue record's bytes: the same after kill -9 and a restart, and
// on the backup that a failover promotes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { runPython } from '../helpers/python.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';

interface Got {
  body: string;
  delivery_count: number;
  /** Seconds (proton's unit); 0: none. */
  ttl: number;
  durable: boolean;
  expiry_time: number;
  annotations: Record<string, unknown>;
}

async function proton(port: number, cmd: string, address: string, arg: object = {}): Promise<Got | undefined> {
  return (await protonOut(port, cmd, address, arg)).got;
}

/** One command of test/interop/py/annotations.py; its failure thrown. */
async function protonOut(port: number, cmd: string, address: string, arg: object): Promise<{ ok: boolean; error?: string; got?: Got; all?: Got[] }> {
  const out = await runPython<{ ok: boolean; error?: string; got?: Got; all?: Got[] }>('annotations.py', [cmd, `127.0.0.1:${port}`, address, JSON.stringify(arg)]);
  if (!out.ok) throw new Error(`proton ${cmd} ${address}: ${out.error}`);
  return out;
}

/** Wait until nothing of `queue` is out with a consumer (a disposition was taken). */
async function settled(port: number, queue: string): Promise<void> {
  await waitFor(async () => ((await manage(port, 'READ', 'queue', queue)) as { acquired?: number }).acquired === 0, { name: `${queue} settled` });
}

/** queue `name` whose alternate exchange is `name`.x, a fanout to `name`.dlq (whose own alternate, when given, is `dlqAlternate`). */
async function withDeadLetters(port: number, name: string, options: { durable?: boolean; queue?: Record<string, unknown>; dlq?: Record<string, unknown> } = {}): Promise<void> {
  const durable = options.durable ?? false;
  await manage(port, 'CREATE', 'exchange', `${name}.x`, { 'exchange-type': 'fanout', durable });
  await manage(port, 'CREATE', 'queue', `${name}.dlq`, { durable, ...options.dlq });
  await manage(port, 'CREATE', 'binding', undefined, { exchange: `${name}.x`, queue: `${name}.dlq` });
  await manage(port, 'CREATE', 'queue', name, { durable, 'alternate-exchange': `${name}.x`, ...options.queue });
}

const QUEUE = 'x-opt-tandem-dead-letter-queue';
const REASON = 'x-opt-tandem-dead-letter-reason';

afterAll(async () => {
  await killAllBrokers();
});

describe('dead letters - say what happened to the message', () => {
  let broker: TestBroker;
  beforeAll(async () => {
    broker = await TestBroker.start();
  });

  it('dead letter - a rejected message carries the delivery-count its modified outcomes raised, their annotations, its queue and reason, and the ttl it has left', async () => {
    await withDeadLetters(broker.port, 'dl.reject');
    await proton(broker.port, 'send', 'dl.reject', { ttl: 600, annotations: { 'x-opt-own': 'own' } });
    await proton(broker.port, 'modify', 'dl.reject', { annotations: { 'x-opt-added': 'by consumer' } });
    await settled(broker.port, 'dl.reject');
    const before = await proton(broker.port, 'reject', 'dl.reject');
    expect(before).toMatchObject({ delivery_count: 1, annotations: { 'x-opt-own': 'own', 'x-opt-added': 'by consumer' } });
    await waitFor(async () => (await queueDepth(broker.port, 'dl.reject.dlq')) === 1, { name: 'dead letter' });
    const got = (await proton(broker.port, 'receive', 'dl.reject.dlq'))!;
    // Old code: delivery_count 0, the sender's annotations alone.
    expect(got.delivery_count).toBe(1);
    expect(got.annotations).toEqual({ 'x-opt-own': 'own', 'x-opt-added': 'by consumer', [QUEUE]: 'dl.reject', [REASON]: 'rejected' });
    expect(got.body).toBe('hello');
    // Its own ttl still runs: what is left of it.
    expect(got.ttl).toBeGreaterThan(0);
    expect(got.ttl).toBeLessThanOrEqual(600);
  });

  it('dead letter - a rejected message whose own ttl runs out on the dead-letter queue expires there, and goes on as expired', async () => {
    await manage(broker.port, 'CREATE', 'exchange', 'dl.again.last.x', { 'exchange-type': 'fanout' });
    await manage(broker.port, 'CREATE', 'queue', 'dl.again.last', {});
    await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'dl.again.last.x', queue: 'dl.again.last' });
    await withDeadLetters(broker.port, 'dl.again', { dlq: { 'alternate-exchange': 'dl.again.last.x' } });
    // Sent and rejected at once, well within its ttl.
    const first = await proton(broker.port, 'send-reject', 'dl.again', { ttl: 3 });
    expect(first!.delivery_count).toBe(0);
    // Old code: the dead letter never expired (its record had no expiry).
    await waitFor(async () => (await queueDepth(broker.port, 'dl.again.last')) === 1, { name: 'dead letter expired from dl.again.dlq', timeout: 20_000 });
    expect(await queueDepth(broker.port, 'dl.again.dlq')).toBe(0);
    const got = (await proton(broker.port, 'receive', 'dl.again.last'))!;
    expect(got.annotations).toEqual({ [QUEUE]: 'dl.again.dlq', [REASON]: 'expired' });
    expect(got.ttl).toBe(0);
  });

  it('dead letter - an expired message\'s dead letter has no ttl (it would expire again at once), and says it expired', async () => {
    await withDeadLetters(broker.port, 'dl.expired');
    await proton(broker.port, 'send', 'dl.expired', { ttl: 0.2, annotations: { 'x-opt-own': 1 } });
    await waitFor(async () => (await queueDepth(broker.port, 'dl.expired.dlq')) === 1, { name: 'expired message dead-lettered', timeout: 20_000 });
    const got = (await proton(broker.port, 'browse', 'dl.expired.dlq'))!;
    // Old code: the header's ttl of 200 ms went out again with it.
    expect(got.ttl).toBe(0);
    expect(got.annotations).toEqual({ 'x-opt-own': 1, [QUEUE]: 'dl.expired', [REASON]: 'expired' });
    // Still there after a browse: taken by a consumer, not expired again.
    expect((await proton(broker.port, 'receive', 'dl.expired.dlq'))!.body).toBe('hello');
  });

  it('dead letter - a queue\'s default-ttl stays with that queue; the dead-letter queue\'s own default-ttl applies to a dead letter without a ttl', async () => {
    await withDeadLetters(broker.port, 'dl.default', { queue: { 'default-ttl': '1h' } });
    await proton(broker.port, 'send-reject', 'dl.default');
    await waitFor(async () => (await queueDepth(broker.port, 'dl.default.dlq')) === 1, { name: 'dead letter' });
    expect((await proton(broker.port, 'receive', 'dl.default.dlq'))!.ttl).toBe(0);
    await withDeadLetters(broker.port, 'dl.dlqttl', { dlq: { 'default-ttl': '10m' } });
    await proton(broker.port, 'send-reject', 'dl.dlqttl');
    await waitFor(async () => (await queueDepth(broker.port, 'dl.dlqttl.dlq')) === 1, { name: 'dead letter' });
    const ttl = (await proton(broker.port, 'receive', 'dl.dlqttl.dlq'))!.ttl;
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(600);
  });

  it('dead letter - messages left on a deleted queue go on with reason deleted, their raised delivery-count and their annotations', async () => {
    await withDeadLetters(broker.port, 'dl.deleted');
    await proton(broker.port, 'send', 'dl.deleted', { body: 'modified' });
    await proton(broker.port, 'modify', 'dl.deleted', { annotations: { 'x-opt-added': 'a' } });
    await settled(broker.port, 'dl.deleted');
    await proton(broker.port, 'send', 'dl.deleted', { body: 'plain', ttl: 600 });
    await manage(broker.port, 'DELETE', 'queue', 'dl.deleted');
    await waitFor(async () => (await queueDepth(broker.port, 'dl.deleted.dlq')) === 2, { name: 'dead letters' });
    const [a, b] = (await protonOut(broker.port, 'receive-all', 'dl.deleted.dlq', { count: 2 })).all!;
    expect(a).toMatchObject({ body: 'modified', delivery_count: 1, ttl: 0, annotations: { 'x-opt-added': 'a', [QUEUE]: 'dl.deleted', [REASON]: 'deleted' } });
    expect(b).toMatchObject({ body: 'plain', delivery_count: 0, annotations: { [QUEUE]: 'dl.deleted', [REASON]: 'deleted' } });
    expect(b!.ttl).toBeGreaterThan(0);
  });
});

describe('dead letters - the journaled and replicated record is the dead letter', () => {
  it('dead letter - after kill -9 and a restart on the same journal the dead letter is the same', async () => {
    const first = await TestBroker.start();
    await withDeadLetters(first.port, 'dl.crash', { durable: true });
    await proton(first.port, 'send', 'dl.crash', { durable: true, ttl: 3600, annotations: { 'x-opt-own': 'own' } });
    await proton(first.port, 'modify', 'dl.crash', { annotations: { 'x-opt-added': 'by consumer' } });
    await settled(first.port, 'dl.crash');
    await proton(first.port, 'reject', 'dl.crash');
    await waitFor(async () => (await queueDepth(first.port, 'dl.crash.dlq')) === 1, { name: 'dead letter' });
    const before = (await proton(first.port, 'browse', 'dl.crash.dlq'))!;
    expect(before).toMatchObject({ delivery_count: 1, durable: true, annotations: { 'x-opt-own': 'own', 'x-opt-added': 'by consumer', [QUEUE]: 'dl.crash', [REASON]: 'rejected' } });
    await first.kill();
    const second = await TestBroker.start({ dataDir: first.dataDir });
    const after = (await proton(second.port, 'receive', 'dl.crash.dlq'))!;
    // Held at the restart, so in doubt: its first delivery since counts one more (docs/journal.md).
    expect({ ...after, ttl: undefined }).toEqual({ ...before, ttl: undefined, delivery_count: before.delivery_count + 1 });
    // The expiry went with the record: still set, still within the sender's hour.
    expect(after.ttl).toBeGreaterThan(0);
    expect(after.ttl).toBeLessThanOrEqual(3600);
    await second.stop();
  });

  it('dead letter - the backup promoted after the primary dies gives the same dead letter', async () => {
    const cluster = await TestCluster.ready(2);
    const primary = cluster.brokers[0]!;
    await withDeadLetters(primary.port, 'dl.ha', { durable: true });
    await proton(primary.port, 'send', 'dl.ha', { durable: true, annotations: { 'x-opt-own': 'own' } });
    await proton(primary.port, 'modify', 'dl.ha', { annotations: { 'x-opt-added': 'by consumer' } });
    await settled(primary.port, 'dl.ha');
    await proton(primary.port, 'reject', 'dl.ha');
    await waitFor(async () => (await queueDepth(primary.port, 'dl.ha.dlq')) === 1, { name: 'dead letter' });
    const before = (await proton(primary.port, 'browse', 'dl.ha.dlq'))!;
    expect(before).toMatchObject({ delivery_count: 1, annotations: { 'x-opt-added': 'by consumer', [QUEUE]: 'dl.ha', [REASON]: 'rejected' } });
    await cluster.backupsCaughtUp(0);
    await primary.kill();
    expect((await cluster.promote(1)).code).toBe(0);
    await cluster.waitState(1, 'active');
    // Held at the promotion, so in doubt: its first delivery since counts one more (docs/pacemaker.md).
    expect(await proton(cluster.ports[1]!, 'receive', 'dl.ha.dlq')).toEqual({ ...before, delivery_count: before.delivery_count + 1 });
  }, 120_000);
});

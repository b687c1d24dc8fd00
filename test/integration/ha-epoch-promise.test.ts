// A promotion's promise of its new epoch (HA-EPOCH-PROMISE, src/ha/epoch-promise.ts) on
// real brokers: a promotion the guard refuses leaves no promise anywhere (the primary
// keeps its backups); a backup that holds a promise lets an older primary go (which
// learns it is stale and stops) and follows the newer one, whose epoch is above the
// promise; hostile promise requests are refused with amqp:invalid-field and change
// nothing.
import { afterEach, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../src/admin/client.js';
import { TandemError } from '../../src/broker/errors.js';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient } from '../helpers/rhea-client.js';

let cluster: TestCluster | undefined;
const clients: ManagementClient[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await cluster?.stopAll();
  cluster = undefined;
});

type Status = { state: string; epoch: number; 'promised-epoch'?: number | null; backups: Array<{ state: string }> };

async function statusOf(c: TestCluster, i: number): Promise<Status> {
  const s = (await c.status(i)) as Status | undefined;
  if (!s) throw new Error(`broker ${i} did not answer HA-STATUS`);
  return s;
}

/** A management client of broker i, as another broker would connect (an HA admin connection: backups admit it). */
async function admin(c: TestCluster, i: number): Promise<ManagementClient> {
  const client = await ManagementClient.connect({ host: '127.0.0.1', port: c.ports[i]! }, { timeoutMs: 10_000, properties: { 'qpid.ha-admin': true } });
  clients.push(client);
  return client;
}

/** A durable message sent to broker i is accepted (its backups hold it). */
async function publishAccepted(c: TestCluster, i: number, queue: string): Promise<void> {
  const client = await TestClient.connect({ port: c.ports[i]! });
  try {
    const [outcome] = await client.send(queue, [{ body: 'after', durable: true }], { timeoutMs: 20_000 });
    expect(outcome?.state).toBe('accepted');
  } finally {
    client.connection.close();
  }
}

describe('ha - a promotion promises its epoch', () => {
  it('ha epoch promise - a promotion the guard refuses (the primary is alive) leaves no promise: the primary keeps its backups', async () => {
    const c = (cluster = await TestCluster.ready(3));
    const before = await statusOf(c, 0);
    const refused = await c.promote(1);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/is already the primary/);
    for (const i of [0, 1, 2]) expect((await statusOf(c, i))['promised-epoch'], `broker ${i}`).toBeNull();
    // Only the promotion of broker 0 (epoch 1) was ever promised.
    for (const i of [1, 2]) expect(c.brokers[i]!.stderr.match(/is being promoted to epoch \d+/g), `broker ${i}`).toEqual([`is being promoted to epoch ${before.epoch}`]);
    const after = await statusOf(c, 0);
    expect(after.state).toBe('active');
    expect(after.epoch).toBe(before.epoch);
    expect(after.backups.map((b) => b.state)).toEqual(['ready', 'ready']);
    await publishAccepted(c, 0, 'promise-refused');
    expect(c.brokers[0]!.alive).toBe(true);
  }, 120_000);

  it('ha epoch promise - a backup promised a newer epoch lets the older primary go (it stops as stale) and follows the newer one, promoted above the promise', async () => {
    const c = (cluster = await TestCluster.ready(3));
    const epoch = (await statusOf(c, 0)).epoch;
    const answer = (await (await admin(c, 2)).request('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch: epoch + 1, by: 'a-test-promotion' })) as Record<string, unknown>;
    expect(answer['promised-epoch']).toBe(epoch + 1);
    await waitFor(() => new RegExp(`broker a-test-promotion is being promoted to epoch ${epoch + 1}: this broker follows no primary of an older epoch`).test(c.brokers[2]!.stderr), {
      timeout: 10_000,
      name: 'the backup logs the promise',
    });
    // The old primary meets the promise (the backup's hello, or its HA-STATUS) and stops rather than serve below it.
    const old = c.brokers[0]!;
    await waitFor(() => !old.alive, { timeout: 30_000, name: 'the older primary stops' });
    await waitFor(() => /this primary is stale/.test(old.stderr), { timeout: 10_000, name: 'the older primary says why' });
    expect(old.stderr).toMatch(new RegExp(`promised epoch ${epoch + 1} by a promotion, above (this primary's epoch |ours \\()${epoch}`));
    expect((await statusOf(c, 2))['promised-epoch']).toBe(epoch + 1);

    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const primary = await statusOf(c, 1);
    expect(primary.epoch).toBe(epoch + 2);
    // The promotion promised its own epoch to the backup (above the one it held), which its log then reached.
    await c.waitState(2, 'ready', 30_000);
    await waitFor(async () => (await statusOf(c, 2))['promised-epoch'] === null, { timeout: 30_000, name: 'the promise kept' });
    await waitFor(() => new RegExp(`this broker's log reached epoch ${epoch + 2}: the promise of epoch ${epoch + 2} is kept`).test(c.brokers[2]!.stderr), { timeout: 10_000, name: 'the backup logs the promise kept' });
    await publishAccepted(c, 1, 'promise-followed');
  }, 120_000);

  it('ha epoch promise - promise requests with bad epochs are refused with amqp:invalid-field and change nothing', async () => {
    const c = (cluster = await TestCluster.ready(3));
    const before = await statusOf(c, 0);
    const bad: unknown[] = [Number.NaN, 'abc', String(before.epoch + 1), 2 ** 53, -1, 0, 1.5, 2 ** 32 + 1, null];
    for (const i of [0, 2]) {
      const client = await admin(c, i);
      for (const epoch of bad) {
        const err = await client.request('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch, by: 'hostile' }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err, `broker ${i}, epoch ${String(epoch)}`).toBeInstanceOf(TandemError);
        // TANDEM_ERR_INVALID_ARGUMENT is amqp:invalid-field (src/broker/errors.ts).
        expect((err as TandemError).code, `broker ${i}, epoch ${String(epoch)}`).toBe('TANDEM_ERR_INVALID_ARGUMENT');
        expect((err as TandemError).message).toMatch(/epoch must be a whole number from 1 to 4294967296/);
      }
      const noBy = await client.request('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch: before.epoch + 1 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((noBy as TandemError).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    }
    for (const i of [0, 1, 2]) expect((await statusOf(c, i))['promised-epoch'], `broker ${i}`).toBeNull();
    const after = await statusOf(c, 0);
    expect(after.state).toBe('active');
    expect(after.epoch).toBe(before.epoch);
    expect(after.backups.map((b) => b.state)).toEqual(['ready', 'ready']);
    expect(c.brokers.every((b) => b!.alive)).toBe(true);
    await publishAccepted(c, 0, 'promise-hostile');
  }, 120_000);
});

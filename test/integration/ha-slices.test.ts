// Operations done in slices on an HA primary (docs/stalls.md), killed -9 mid-slice and
// replaced by a backup: every message is in exactly one place on the new primary, the
// queue it was on or the dead-letter queue, never both, never neither.
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { browseBodies } from '../helpers/rhea-client.js';
import { copiesIn, fill } from '../helpers/queue-contents.js';
import { declareWithDeadLetters, manage, queueDepth } from '../helpers/tandem-cli.js';

describe('ha - operations in slices', () => {
  let cluster: TestCluster | undefined;
  afterAll(async () => {
    await cluster?.stopAll();
  });

  it('ha slices - a delete moving messages to the alternate exchange, primary killed mid-slice: each message in one place on the new primary', async () => {
    const c = (cluster = await TestCluster.ready(3));
    const N = 6000;
    await declareWithDeadLetters(c.ports[0]!, 'sl');
    await fill(c.ports[0]!, 'sl', N);
    await c.backupsCaughtUp(0);
    const deleting = manage(c.ports[0]!, 'DELETE', 'queue', 'sl').catch((err: Error) => err);
    await waitFor(async () => (await queueDepth(c.ports[0]!, 'sl.dlq')) > 500, { timeout: 30_000, interval: 10, name: 'delete under way' });
    await c.kill(0);
    await deleting;
    const next = await promoteFurtherAhead(c);
    const copies = new Map<number, string[]>();
    await copiesIn(c.ports[next]!, 'sl', copies);
    await copiesIn(c.ports[next]!, 'sl.dlq', copies);
    const twice = [...copies].filter(([, where]) => where.length > 1);
    const missing = Array.from({ length: N }, (_, i) => i).filter((i) => !copies.has(i));
    expect(missing).toEqual([]);
    expect(twice).toEqual([]);
    // A delete the kill cut short was not answered: the queue is there with what it still
    // held, and deleting it again finishes the move.
    if ([...copies.values()].some((where) => where.includes('sl'))) await manage(c.ports[next]!, 'DELETE', 'queue', 'sl');
    const after = new Map<number, string[]>();
    await copiesIn(c.ports[next]!, 'sl.dlq', after);
    expect([...after.values()].filter((where) => where.length !== 1)).toEqual([]);
    expect(after.size).toBe(N);
  }, 120_000);

  it('ha slices - a delete done in one step (a small queue), primary killed while the backups take its dead letters: none lost', async () => {
    await cluster?.stopAll();
    const c = (cluster = await TestCluster.ready(3));
    // Under one slice (512), so deleted in one step; large, so its dead letters take a while to replicate.
    const N = 480;
    await declareWithDeadLetters(c.ports[0]!, 'one');
    await fill(c.ports[0]!, 'one', N, {}, 'y'.repeat(64 * 1024));
    await c.backupsCaughtUp(0);
    const deleting = manage(c.ports[0]!, 'DELETE', 'queue', 'one').catch((err: Error) => err);
    await waitFor(async () => (await queueDepth(c.ports[0]!, 'one.dlq')) > 0, { timeout: 30_000, interval: 5, name: 'delete done' });
    await c.kill(0);
    await deleting;
    const next = await promoteFurtherAhead(c);
    const copies = new Map<number, string[]>();
    await copiesIn(c.ports[next]!, 'one', copies);
    await copiesIn(c.ports[next]!, 'one.dlq', copies);
    const twice = [...copies].filter(([, where]) => where.length > 1);
    const missing = Array.from({ length: N }, (_, i) => i).filter((i) => !copies.has(i));
    expect(missing).toEqual([]);
    expect(twice).toEqual([]);
  }, 120_000);

  it('ha slices - a purge killed mid-slice: the promoted backup holds an unbroken tail of the queue, in order, and none of what it purged', async () => {
    await cluster?.stopAll();
    const c = (cluster = await TestCluster.ready(3));
    const N = 6000;
    await manage(c.ports[0]!, 'CREATE', 'queue', 'pu', { durable: true });
    await fill(c.ports[0]!, 'pu', N);
    await c.backupsCaughtUp(0);
    const purging = manage(c.ports[0]!, 'PURGE', 'queue', 'pu').catch((err: Error) => err);
    await waitFor(async () => (await queueDepth(c.ports[0]!, 'pu')) < N - 500, { timeout: 30_000, interval: 10, name: 'purge under way' });
    await c.kill(0);
    await purging;
    const next = await promoteFurtherAhead(c);
    const held = (await browseBodies(c.ports[next]!, 'pu', await queueDepth(c.ports[next]!, 'pu'))).map((b) => Number(b.split('|')[0]));
    // A purge takes from the head: what is left is the messages from some point on.
    const from = N - held.length;
    expect(held).toEqual(Array.from({ length: held.length }, (_, i) => from + i));
  }, 120_000);

  it('ha slices - expiry in slices with dead letters, primary killed mid-slice: each expired message dead-lettered once by the old and new primary together', async () => {
    await cluster?.stopAll();
    const c = (cluster = await TestCluster.ready(3));
    const N = 6000;
    await declareWithDeadLetters(c.ports[0]!, 'ex');
    // Due at one instant after the fill, so the timer's first slice takes 5,000 at once.
    await fill(c.ports[0]!, 'ex', N, { absolute_expiry_time: new Date(Date.now() + 8000) });
    await waitFor(async () => (await queueDepth(c.ports[0]!, 'ex.dlq')) > 0, { timeout: 30_000, interval: 10, name: 'expiry under way' });
    await c.kill(0);
    const next = await promoteFurtherAhead(c);
    // The new primary expires what is left; each message then has its one dead letter.
    await waitFor(async () => (await queueDepth(c.ports[next]!, 'ex')) === 0, { timeout: 30_000, interval: 200, name: 'the rest expired' });
    const copies = new Map<number, string[]>();
    await copiesIn(c.ports[next]!, 'ex.dlq', copies);
    const twice = [...copies].filter(([, where]) => where.length > 1);
    const missing = Array.from({ length: N }, (_, i) => i).filter((i) => !copies.has(i));
    expect(missing).toEqual([]);
    expect(twice).toEqual([]);
  }, 120_000);
});

// Configuration changed while messages flow, then kill -9 of the primary (without
// waiting for the backups) and a promotion: a queue deleted and declared again under
// its name with another replication level (all, configuration, none, all again), its
// bindings moved to other keys. The new primary's queues, levels and bindings are the
// last ones clients were told of, and the queue holds exactly what was accepted into
// its last incarnation, in order: nothing of an earlier one, nothing missing.
import { afterAll, describe, expect, it } from 'vitest';
import { rowsOf } from '../../src/admin/client.js';
import { killAllBrokers } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { TestClient, browseBodies } from '../helpers/rhea-client.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';

describe('ha - configuration changes across failover', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('ha config changes - a queue redeclared at each replication level and rebound while a publisher sends: the promoted backup has the last configuration and exactly what its last incarnation accepted', async () => {
    const c = await TestCluster.ready(3);
    const port = c.ports[0]!;
    await manage(port, 'CREATE', 'exchange', 'cx', { 'exchange-type': 'direct', durable: true });
    const client = await TestClient.connect({ port });
    const sender = await client.openSender('cx');
    let n = 0;
    /** Send `count` messages with subject `key` to cx; the bodies accepted. */
    const publish = async (key: string, count: number): Promise<string[]> => {
      const bodies = Array.from({ length: count }, () => `${key}-${n++}`);
      const outcomes = await client.send(sender, bodies.map((body) => ({ body, subject: key, durable: true })));
      return bodies.filter((_, i) => outcomes[i]!.state === 'accepted');
    };
    const incarnation = async (replicate: string, key: string): Promise<void> => {
      await manage(port, 'CREATE', 'queue', 'cq', { durable: true, 'qpid.replicate': replicate });
      await manage(port, 'CREATE', 'binding', undefined, { exchange: 'cx', queue: 'cq', key });
    };
    await incarnation('all', 'a');
    await publish('a', 50);
    let last: string[] = [];
    for (const [replicate, key] of [
      ['configuration', 'b'],
      ['none', 'c'],
      ['all', 'd'],
    ] as const) {
      await manage(port, 'DELETE', 'queue', 'cq');
      await incarnation(replicate, key);
      // The old key routes nowhere now; the new one into this incarnation.
      await publish('a', 5);
      last = await publish(key, 50);
    }
    // The binding moved from d to e: d routes nowhere, e into the queue.
    await manage(port, 'DELETE', 'binding', undefined, { exchange: 'cx', queue: 'cq', key: 'd' });
    await manage(port, 'CREATE', 'binding', undefined, { exchange: 'cx', queue: 'cq', key: 'e' });
    await publish('d', 5);
    last.push(...(await publish('e', 50)));
    expect(last.length).toBe(100);

    // At once: what was accepted is on the ready backups already.
    await c.kill(0);
    const next = await promoteFurtherAhead(c);
    const np = c.ports[next]!;
    const queue = (await manage(np, 'READ', 'queue', 'cq')) as Record<string, unknown>;
    expect(queue['qpid.replicate']).toBe('all');
    const bindings = rowsOf(await manage(np, 'QUERY', 'binding', undefined))
      .filter((b) => b.exchange === 'cx')
      .map((b) => `${String(b.queue)}:${String(b.key)}`);
    expect(bindings).toEqual(['cq:e']);
    expect(await browseBodies(np, 'cq', await queueDepth(np, 'cq'))).toEqual(last);
    await client.close();
  }, 120_000);
});

// A backup killed -9 and restarted again and again (on its journal, and once on a fresh
// data dir) while a publisher keeps the primary busy, the other backup gone, so the restarted one is the only broker a settlement can
// wait for; the primary is killed as soon as it is ready again, and it is promoted.
// Everything the publisher was told was accepted is on it.
import type { Delivery, EventContext } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient, browseBodies } from '../helpers/rhea-client.js';
import { queueDepth } from '../helpers/tandem-cli.js';

const QUEUE = 'busy';
const ROUNDS = 3;

describe('ha - a backup restarted under load', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('ha backup restart - killed -9 and restarted 3 times under load (once without its data), promoted right after it is ready again: nothing accepted is lost', async () => {
    const c = await TestCluster.ready(3);
    await c.kill(2);
    const client = await TestClient.connect({ port: c.ports[0]! });
    const sender = await client.openSender(QUEUE);
    const accepted = new Set<number>();
    const inFlight = new Map<Delivery, number>();
    let seq = 0;
    let sending = true;
    const pump = () => {
      // At most 200 unanswered: the rest waits for credit and outcomes.
      while (sending && sender.sendable() && inFlight.size < 200) inFlight.set(sender.send({ body: `m${seq}`, durable: true }), seq++);
    };
    sender.on('accepted', (ctx: EventContext) => {
      const i = inFlight.get(ctx.delivery as Delivery);
      inFlight.delete(ctx.delivery as Delivery);
      if (i !== undefined) accepted.add(i);
      pump();
    });
    sender.on('sendable', pump);
    pump();

    for (let round = 0; round < ROUNDS; round++) {
      const before = accepted.size;
      await waitFor(() => accepted.size > before + 1000, { timeout: 60_000, name: `traffic in round ${round}` });
      await c.kill(1);
      // The middle round on a fresh data dir (a replaced machine: a snapshot), the others on its journal.
      if (round === 1) (c.dataDirs as Array<string | undefined>)[1] = undefined;
      await c.startBroker(1);
      await c.waitState(1, 'ready', 60_000);
    }
    // Right after it is ready: the primary goes, the restarted backup takes over.
    await c.kill(0);
    sending = false;
    client.destroy();
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    await c.waitState(1, 'active', 30_000);

    const held = new Set((await browseBodies(c.ports[1]!, QUEUE, await queueDepth(c.ports[1]!, QUEUE))).map((b) => Number(b.slice(1))));
    const lost = [...accepted].filter((i) => !held.has(i));
    expect(accepted.size).toBeGreaterThan(ROUNDS * 1000);
    expect(lost).toEqual([]);
  }, 240_000);
});

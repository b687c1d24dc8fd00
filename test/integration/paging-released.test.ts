// Bodies out with a consumer while the pager ran, on a real tandemd: once given back
// (the consumer detached with them unsettled) they are paged like any other, so the
// queue's bodies in memory come back under max-memory; the consumer after it gets each
// intact, in order, marked redelivered.
import { afterAll, describe, expect, it } from 'vitest';
import type { Message } from 'rhea';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const MiB = 1024 * 1024;
const COUNT = 300;
const SIZE = 8192; // 2.4 MiB of bodies against a 1 MiB budget
const FILLER = 50;

function body(i: number): string {
  return `m${i}:`.padEnd(SIZE, String.fromCharCode(97 + (i % 26)));
}

async function status(port: number): Promise<Record<string, number>> {
  return (await manage(port, 'READ', 'broker', undefined)) as Record<string, number>;
}

describe('paging - messages given back by a consumer', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('paging released - bodies a consumer held unsettled while the pager ran are paged once its detach gives them back, then delivered intact and in order', async () => {
    const broker = await TestBroker.start({ args: ['--max-memory', '1MiB'] });
    const holder = await TestClient.connect({ port: broker.port });
    const r1 = await holder.openReceiver('given-back');
    r1.receiver.add_credit(COUNT);
    const producer = await TestClient.connect({ port: broker.port });
    const batch: Message[] = Array.from({ length: COUNT }, (_, i) => ({ body: body(i), durable: true }));
    const outcomes = await producer.send('given-back', batch, { timeoutMs: 30_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    // Every one is out with the consumer, unsettled: their bodies are over the budget and
    // cannot go.
    expect(await r1.next(COUNT, 30_000)).toHaveLength(COUNT);
    // Newer messages nobody takes: a pass pages them first (newest first) and, still over the
    // budget, goes on to the older ones, out with the consumer. Once all of these are paged,
    // a pass has looked at those.
    const filler: Message[] = Array.from({ length: FILLER }, (_, i) => ({ body: body(i), durable: true }));
    expect((await producer.send('given-back.filler', filler, { timeoutMs: 30_000 })).every((o) => o.state === 'accepted')).toBe(true);
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'given-back.filler')) as Record<string, number>)['paged-depth'] === FILLER, { timeout: 10_000, name: 'newer messages paged' });
    expect((await status(broker.port))['resident-bytes']).toBeGreaterThan(2 * MiB);

    // The detach gives them back. Old code: the pass had dropped them as candidates, so
    // their 2.4 MiB stayed in memory until a consumer took them again.
    await r1.close();
    await waitFor(async () => ((await manage(broker.port, 'READ', 'queue', 'given-back')) as Record<string, number>).acquired === 0, { name: 'given back' });
    const paged = await waitFor(async () => {
      const s = await status(broker.port);
      return s['resident-bytes']! <= MiB ? s : undefined;
    }, { timeout: 10_000, name: 'resident bytes under max-memory after the release' });
    expect(paged!['paged-messages']).toBeGreaterThan(FILLER + COUNT - MiB / SIZE - 1);

    const r2 = await holder.openReceiver('given-back');
    r2.receiver.add_credit(COUNT);
    const got = await r2.next(COUNT, 30_000);
    for (const m of got) m.delivery.accept();
    expect(got.map((m) => String(bodyOf(m.message)))).toEqual(batch.map((m) => m.body));
    expect(got.every((m) => m.message.delivery_count === 1)).toBe(true);
    expect(await r2.drainFor(200)).toHaveLength(0);
    holder.connection.close();
    producer.connection.close();
    await broker.stop();
  }, 90_000);
});

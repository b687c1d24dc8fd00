// Delivery delay on real brokers (x-opt-delivery-time, as qpid-jms sends it; rhea sets it
// here): a held message is in the depth (`scheduled` in queue show), not delivered
// before its time, then delivered; it stays held across kill -9 and a restart (its body
// paged to the journal or not; a delay kept as the time it ends at, not counted again
// from the restart) and across a failover, none lost, none early (and, due well
// after the promotion, not marked redelivered: nobody can have had them). A delivery
// time past ten years ahead, or not a number, is rejected at publish (amqp:invalid-field).
import { afterAll, describe, expect, it } from 'vitest';
import type { EventContext } from 'rhea';
import { MARK_CLOCK_SKEW_MS } from '../../src/broker/queue.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { promoteFurtherAhead } from '../helpers/partition.js';
import { TestClient, bodyOf, type TestReceiver } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

const TEN_YEARS_MS = 10 * 366 * 24 * 3600 * 1000;

/** Record when each message (by body) arrives. */
function arrivals(r: TestReceiver): Map<string, number> {
  const at = new Map<string, number>();
  r.receiver.on('message', (ctx: EventContext) => at.set(String(bodyOf(ctx.message!)), Date.now()));
  return at;
}

async function queueShow(port: number, name: string): Promise<{ depth: number; scheduled: number; 'paged-depth': number }> {
  return (await manage(port, 'READ', 'queue', name)) as { depth: number; scheduled: number; 'paged-depth': number };
}

/** Held messages of `bodies` due at `due`, durable, big ones so that some are paged out (max-memory 1 MiB). */
function held(bodies: string[], due: number, size = 0): Array<Record<string, unknown>> {
  return bodies.map((b) => ({ body: size > 0 ? b + ' '.repeat(size) : b, durable: true, message_annotations: { 'x-opt-delivery-time': due } }));
}

/** Consume everything from `queue` on `port`: nothing of `bodies` before `due`, then all of them; their delivery-counts and arrival times. */
async function expectHeldUntil(port: number, queue: string, bodies: string[], due: number): Promise<{ counts: number[]; at: Map<string, number> }> {
  const client = await TestClient.connect({ port });
  try {
    const r = await client.openReceiver(queue);
    const at = arrivals(r);
    r.receiver.add_credit(1000);
    const got = await r.next(bodies.length, Math.max(0, due - Date.now()) + 15_000);
    for (const g of got) g.delivery.accept();
    expect(got.map((g) => String(bodyOf(g.message)).trimEnd()).sort()).toEqual([...bodies].sort());
    // Not early: the broker moves a held message only once its time has come (a clock both processes share).
    for (const [body, t] of at) expect(t, `${body.trimEnd()} arrived ${due - t} ms early`).toBeGreaterThanOrEqual(due);
    expect(await r.drainFor(200)).toEqual([]);
    return { counts: got.map((g) => g.message.delivery_count ?? 0), at };
  } finally {
    await client.close();
  }
}

describe('delivery delay (x-opt-delivery-time)', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('held until due (in the depth as scheduled), then delivered; a hostile time is refused; kept held across kill -9 and restart, paged bodies too', async () => {
    let broker = await TestBroker.start({ args: ['--max-memory', '1MiB'] });
    await manage(broker.port, 'CREATE', 'queue', 'd', { durable: true });
    const client = await TestClient.connect({ port: broker.port });
    const refused = await client.send('d', [
      { body: 'far', message_annotations: { 'x-opt-delivery-time': Date.now() + TEN_YEARS_MS + 60_000 } },
      { body: 'word', message_annotations: { 'x-opt-delivery-time': 'tomorrow' } },
    ]);
    expect(refused.map((o) => o.state)).toEqual(['rejected', 'rejected']);
    expect(refused[0]!.error).toMatchObject({ condition: 'amqp:invalid-field', description: expect.stringContaining('years ahead') });
    expect(refused[1]!.error?.condition).toBe('amqp:invalid-field');

    const due = Date.now() + 9000;
    const small = ['h-0', 'h-1'];
    const big = Array.from({ length: 12 }, (_, i) => `big-${i}`);
    const past = { body: 'past', durable: true, message_annotations: { 'x-opt-delivery-time': Date.now() - 60_000 } };
    // A delay, not a time: the broker keeps the time it ends at, so the restart does not count it again.
    const delayed = { body: 'delay', durable: true, message_annotations: { 'x-opt-delivery-delay': 9000 } };
    const outcomes = await client.send('d', [...held(small, due), ...held(big, due, 200 * 1024), delayed, past, { body: 'plain', durable: true }]);
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    // Only the due ones are delivered now.
    const r = await client.openReceiver('d');
    r.receiver.add_credit(100);
    const now = await r.next(2);
    expect(now.map((g) => String(bodyOf(g.message)))).toEqual(['past', 'plain']);
    for (const g of now) g.delivery.accept();
    expect(await r.drainFor(300)).toEqual([]);
    await r.close();
    await client.close();
    const shown = await queueShow(broker.port, 'd');
    expect([shown.depth, shown.scheduled]).toEqual([15, 15]);

    // Time passes before the kill, so a delay counted again from the restart would end well after its time.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    await broker.kill();
    broker = await TestBroker.start({ args: ['--max-memory', '1MiB'], dataDir: broker.dataDir });
    const restartedAt = Date.now();
    // Recovery made paged rows of most of them (max-memory 1 MiB): each is read for its time at its first look.
    const recovered = await queueShow(broker.port, 'd');
    expect(recovered.depth).toBe(15);
    expect(recovered['paged-depth']).toBeGreaterThan(0);
    const { at } = await expectHeldUntil(broker.port, 'd', [...small, ...big, 'delay'], due);
    expect(at.get('delay')!, 'the delay was counted again from the restart').toBeLessThan(restartedAt + 9000);
    expect((await queueShow(broker.port, 'd')).depth).toBe(0);
  }, 90_000);

  it('held across a failover (kill -9 of the primary, a backup promoted): none lost, none early, none marked redelivered', async () => {
    const c = await TestCluster.ready(3);
    await manage(c.ports[0]!, 'CREATE', 'queue', 'f', { durable: true });
    const due = Date.now() + 16_000;
    const bodies = Array.from({ length: 5 }, (_, i) => `f-${i}`);
    const client = await TestClient.connect({ port: c.ports[0]! });
    expect((await client.send('f', held(bodies, due))).every((o) => o.state === 'accepted')).toBe(true);
    client.destroy();
    await c.kill(0);
    const next = await promoteFurtherAhead(c);
    const promotedBy = Date.now();
    if (promotedBy < due - 500) expect(await queueShow(c.ports[next]!, 'f')).toMatchObject({ depth: 5, scheduled: 5 });
    const { counts } = await expectHeldUntil(c.ports[next]!, 'f', bodies, due);
    // Held messages are in doubt at a promotion, but these were due, by the time their
    // sender named, well after it (queue.ts MARK_CLOCK_SKEW_MS): nobody can have had them.
    if (due > promotedBy + MARK_CLOCK_SKEW_MS) expect(counts).toEqual([0, 0, 0, 0, 0]);
  }, 120_000);
});

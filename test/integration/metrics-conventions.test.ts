// What docs/metrics.md promises of /metrics beyond each figure: running counts (names
// ending in _total) are typed counters, and a primary's held settlements have a metric
// of their own (the README's `tandem ha query` settlement, not only a name inside the
// deprecated tandem_subsystem gauge).
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { TestClient } from '../helpers/rhea-client.js';
import { scrape } from '../helpers/scrape.js';
import { manage } from '../helpers/tandem-cli.js';

const opened: TestClient[] = [];

afterAll(async () => {
  for (const c of opened) await c.close().catch(() => undefined);
  await killAllBrokers();
});

/** `# TYPE name type` lines of a scrape, by name. */
function types(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

describe('metrics conventions', () => {
  it('metrics types - every family named _total is a counter, with the count the broker keeps', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    await manage(broker.port, 'CREATE', 'queue', 'typed.q', { 'max-count': 1, policy: 'ring' });
    const c = await TestClient.connect({ port: broker.port });
    opened.push(c);
    await c.send('typed.q', ['a', 'b', 'c']);
    const s = await scrape(broker.metricsPort!);
    const typed = types(s.text);
    // tandem_process_*: prom-client's defaults, some of them gauges named _total (active handles).
    const totals = [...typed.keys()].filter((name) => name.endsWith('_total') && !name.startsWith('tandem_process_'));
    for (const name of ['tandem_queue_enqueued_total', 'tandem_queue_dequeued_total', 'tandem_queue_ring_overflow_total', 'tandem_dead_letters_lost_total', 'tandem_messages_accepted_total', 'tandem_connections_refused_handshakes_total']) {
      expect(totals).toContain(name);
    }
    expect(totals.filter((name) => typed.get(name) !== 'counter')).toEqual([]);
    // Typed a counter, still the broker's own count: three in, the two oldest pushed out by the ring.
    expect(s.samples.get('tandem_queue_enqueued_total{queue="typed.q"}')).toBe(3);
    expect(s.samples.get('tandem_queue_ring_overflow_total{queue="typed.q"}')).toBe(0);
    expect(s.samples.get('tandem_dead_letters_lost_total')).toBe(0);
    expect(s.samples.get('tandem_connections_refused_handshakes_total')).toBe(0);
    expect(s.samples.get('tandem_queue_depth{queue="typed.q"}')).toBe(1);
  });

  it('metrics ha - tandem_ha_settlements_held is 1 while a 2-broker primary has lost its only backup, 0 before', async () => {
    const cluster = await TestCluster.start(2, ['--metrics-port', '0']);
    expect((await cluster.promote(0)).code).toBe(0);
    await cluster.waitState(1, 'ready');
    const primary = cluster.brokers[0]!;
    await waitFor(async () => (await scrape(primary.metricsPort!)).samples.get('tandem_ha_backups_ready') === 1, { timeout: 10_000, name: 'the backup ready in the scrape' });
    expect((await scrape(primary.metricsPort!)).samples.get('tandem_ha_settlements_held')).toBe(0);
    // The promotion's epoch, on the primary and the backup that follows it.
    const epoch = (await scrape(primary.metricsPort!)).samples.get('tandem_ha_epoch')!;
    expect(epoch).toBeGreaterThan(0);
    await waitFor(async () => (await scrape(cluster.brokers[1]!.metricsPort!)).samples.get('tandem_ha_epoch') === epoch, { timeout: 10_000, name: "the backup at the primary's epoch" });
    await cluster.brokers[1]!.kill();
    await waitFor(async () => (await scrape(primary.metricsPort!)).samples.get('tandem_ha_settlements_held') === 1, { timeout: 20_000, interval: 200, name: 'settlements held once the only backup is gone' });
    expect((await scrape(primary.metricsPort!)).samples.get('tandem_ha_backups_ready')).toBe(0);
  }, 60_000);
});

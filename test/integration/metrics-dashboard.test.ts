// The shipped Grafana dashboard and alert rules query only metrics a real broker
// exports. One scrape holds them all: the primary of a 2-broker cluster (backup
// lag) that also keeps a DR copy of a standalone broker's queue (DR lag, link).
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { metricNames, scrape } from '../helpers/scrape.js';
import { tandem } from '../helpers/tandem-cli.js';
import { drFlush, send } from '../dr/helpers.js';

interface Panel {
  title: string;
  targets?: Array<{ expr: string }>;
}

/** Metric names in a PromQL expression (ours all start with tandem_; label values are quoted). */
function namesIn(expr: string): string[] {
  return [...expr.replace(/"[^"]*"/g, '""').matchAll(/\btandem_[a-z0-9_]+/g)].map((m) => m[0]);
}

afterAll(async () => {
  await killAllBrokers();
});

describe('metrics dashboard', () => {
  it('dashboard - every panel of packaging/grafana/tandem-dashboard.json and every alert rule queries metrics a real broker exports', async () => {
    const source = await TestBroker.start();
    const cluster = await TestCluster.start(2, ['--metrics-port', '0']);
    expect((await cluster.promote(0)).code).toBe(0);
    await cluster.waitState(1, 'ready');
    const primary = cluster.brokers[0]!;
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'orders', '--source', source.url, '-b', primary.url]);
    expect(add.code, add.stderr).toBe(0);
    await send(source.port, 'orders', ['o1'], { durable: true });
    await drFlush(source.port, primary.port);
    await waitFor(async () => (await scrape(primary.metricsPort!)).samples.has('tandem_dr_link_up{queue="orders"}'), { timeout: 15_000, name: 'DR figures in the scrape' });
    const exported = metricNames(await scrape(primary.metricsPort!));

    const dashboard = JSON.parse(readFileSync('packaging/grafana/tandem-dashboard.json', 'utf8')) as { panels: Panel[] };
    expect(dashboard.panels.length).toBeGreaterThan(0);
    const missing: string[] = [];
    for (const p of dashboard.panels) {
      const exprs = (p.targets ?? []).map((t) => t.expr);
      expect(exprs.length, `panel ${p.title} has a query`).toBeGreaterThan(0);
      for (const e of exprs) {
        const names = namesIn(e);
        expect(names.length, `panel ${p.title}: ${e}`).toBeGreaterThan(0);
        for (const n of names) if (!exported.has(n)) missing.push(`panel ${p.title}: ${n}`);
      }
    }
    const rules = readFileSync('packaging/prometheus/tandem-alerts.yml', 'utf8');
    for (const m of rules.matchAll(/^\s*expr: (.*)$/gm)) for (const n of namesIn(m[1]!)) if (!exported.has(n)) missing.push(`alert rule: ${n}`);
    expect(missing).toEqual([]);
  }, 90_000);
});

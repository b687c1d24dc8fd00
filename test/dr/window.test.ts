// The DR window of recent changes is kept only once a DR copy follows the cluster
// (the 'dr-followed' change, journaled and replicated): a broker nobody copies keeps
// nothing; the first bridge arms it, on the HA backups too (a promoted backup serves a
// bridge from its own window); a restart keeps it armed from the journal, and a copy
// that was away catches up with nothing lost, duplicated or reordered.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { scrape } from '../helpers/scrape.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, range, send } from './helpers.js';

async function windowFigures(b: TestBroker): Promise<{ kept: number; changes: number }> {
  const s = await scrape(b.metricsPort!);
  return { kept: s.samples.get('tandem_dr_window_kept')!, changes: s.samples.get('tandem_dr_window_changes')! };
}

describe('DR window kept only while a copy follows', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('nothing is kept before the first copy; from then on it is, across a restart, and a copy catches up', async () => {
    let source = await TestBroker.start({ args: ['--metrics-port', '0'] });
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', source.url])).code).toBe(0);
    await send(source.port, 'orders', range('a', 0, 200), { durable: true });
    expect(await windowFigures(source)).toEqual({ kept: 0, changes: 0 });

    const secondary = await TestBroker.start();
    const add = await tandem(['dr', 'add', 'orders', '--source', source.url, '-b', secondary.url]);
    expect(add.code, add.stderr).toBe(0);
    await drFlush(source.port, secondary.port);
    await send(source.port, 'orders', range('b', 0, 100), { durable: true });
    await drFlush(source.port, secondary.port);
    const armed = await windowFigures(source);
    expect(armed.kept).toBe(1);
    expect(armed.changes).toBeGreaterThanOrEqual(100);

    // The copy goes away; the source restarts on its journal: armed again before any
    // bridge comes back, so what is published now is kept. (A restart moves the LSN past
    // its reservation, so the returning copy still gets a snapshot: the window does not
    // outlive the process, only the decision to keep one does.)
    await secondary.kill();
    const port = source.port;
    expect(await source.stop()).toBe(0);
    source = await TestBroker.start({ dataDir: source.dataDir, port, args: ['--metrics-port', '0'] });
    expect((await windowFigures(source)).kept).toBe(1);
    await send(source.port, 'orders', range('c', 0, 100), { durable: true });
    expect((await windowFigures(source)).changes).toBeGreaterThanOrEqual(100);

    const back = await TestBroker.start({ dataDir: secondary.dataDir });
    await waitFor(async () => (await drFlush(source.port, back.port).catch(() => undefined)) !== undefined, { timeout: 30_000, name: 'copy caught up' });
    expect(await contents(back.port, 'orders')).toEqual([...range('a', 0, 200), ...range('b', 0, 100), ...range('c', 0, 100)]);
  });

  it("an HA backup of the source keeps the window once a copy attached to its primary", async () => {
    const cluster = await TestCluster.start(2, ['--metrics-port', '0']);
    expect((await cluster.promote(0)).code).toBe(0);
    await cluster.waitState(1, 'ready');
    const [primary, backup] = [cluster.brokers[0]!, cluster.brokers[1]!];
    expect((await tandem(['queue', 'add', 'ha-orders', '--durable', '-b', primary.url])).code).toBe(0);
    await send(primary.port, 'ha-orders', range('h', 0, 50), { durable: true });
    expect((await windowFigures(backup)).kept).toBe(0);
    const secondary = await TestBroker.start();
    const add = await tandem(['dr', 'add', 'ha-orders', '--source', cluster.url, '-b', secondary.url]);
    expect(add.code, add.stderr).toBe(0);
    await drFlush(primary.port, secondary.port);
    await send(primary.port, 'ha-orders', range('i', 0, 50), { durable: true });
    await waitFor(async () => (await windowFigures(backup)).kept === 1 && (await windowFigures(backup)).changes >= 50, { timeout: 10_000, name: 'backup keeps the window' });
  });
});

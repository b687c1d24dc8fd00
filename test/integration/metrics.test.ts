// /metrics of real brokers in Prometheus' conventions: one metric per figure,
// units in the names, labels only for what varies (queue, backup, state). A
// standalone broker, a 3-broker cluster's primary while a backup is SIGSTOPped,
// and a DR secondary whose source goes away.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster, type HaStatusJson } from '../helpers/cluster.js';
import { TestClient } from '../helpers/rhea-client.js';
import { scrape } from '../helpers/scrape.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { drFlush, send } from '../dr/helpers.js';

const opened: TestClient[] = [];
const stopped: TestBroker[] = [];

afterAll(async () => {
  for (const b of stopped) b.signal('SIGCONT');
  for (const c of opened) await c.close().catch(() => undefined);
  await killAllBrokers();
});

const durable = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => ({ body: `${prefix}${i}`, durable: true }));

describe('metrics', () => {
  it('metrics standalone - state, queue depth, journal size and syncs, memory alarm; the old gauge says it is deprecated', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    const c = await TestClient.connect({ port: broker.port });
    opened.push(c);
    await c.send('metrics.q', durable(3, 'm'));
    const s = await scrape(broker.metricsPort!);
    expect(s.samples.get('tandem_ha_state{state="standalone"}')).toBe(1);
    for (const st of ['joining', 'catchup', 'ready', 'recovering', 'active']) expect(s.samples.get(`tandem_ha_state{state="${st}"}`)).toBe(0);
    expect(s.samples.get('tandem_ha_backups_ready')).toBe(0);
    expect(s.samples.get('tandem_queue_depth{queue="metrics.q"}')).toBe(3);
    // A temporary queue with 2 messages: summed, with no series of its own.
    const reply = await c.openReceiver({ dynamic: true });
    await c.send((reply.receiver as unknown as { source: { address: string } }).source.address, ['r1', 'r2']);
    const t = await scrape(broker.metricsPort!);
    expect(t.text).not.toMatch(/queue="tmp\./);
    expect(t.samples.get('tandem_temporary_queues')).toBe(1);
    expect(t.samples.get('tandem_temporary_queue_depth')).toBe(2);
    expect(t.samples.get('tandem_temporary_queue_bytes')).toBeGreaterThan(0);
    expect(s.samples.get('tandem_journal_bytes')).toBeGreaterThan(0);
    expect(s.samples.get('tandem_journal_sync_seconds_count')).toBeGreaterThan(0);
    expect(s.samples.get('tandem_journal_sync_seconds_bucket{le="+Inf"}')).toBe(s.samples.get('tandem_journal_sync_seconds_count'));
    expect(s.samples.get('tandem_memory_alarm')).toBe(0);
    expect(s.samples.get('tandem_ha_epoch')).toBe(0);
    // Paging's figures, which only the deprecated gauge had: off by default, nothing paged.
    expect(s.samples.get('tandem_store_max_memory_bytes')).toBeGreaterThanOrEqual(0);
    expect(s.samples.get('tandem_store_resident_bytes')).toBeGreaterThan(0);
    expect(s.samples.get('tandem_store_paged_messages')).toBe(0);
    expect(s.samples.get('tandem_store_paged_out_total')).toBe(0);
    expect(s.help.get('tandem_subsystem')).toMatch(/^DEPRECATED/);
    // Nothing about DR copies or backups where there is none; the DR source's window is kept by nobody yet.
    expect(s.text).not.toMatch(/^tandem_dr_(?!window_)|^tandem_ha_backup_lag/m);
    expect(s.samples.get('tandem_dr_window_kept')).toBe(0);
  });

  it('metrics standalone - a full ring that loses a newcomer and a dead letter its alternate queue refuses are each counted', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    const c = await TestClient.connect({ port: broker.port });
    opened.push(c);
    await manage(broker.port, 'CREATE', 'queue', 'ring.q', { 'max-count': 1, policy: 'ring' });
    await manage(broker.port, 'CREATE', 'exchange', 'dl.x', { 'exchange-type': 'fanout' });
    await manage(broker.port, 'CREATE', 'queue', 'dl.full', { 'max-count': 1 });
    expect((await tandem(['bind', 'dl.x', 'dl.full', '-b', `127.0.0.1:${broker.port}`])).code).toBe(0);
    await manage(broker.port, 'CREATE', 'queue', 'dl.src', { 'alternate-exchange': 'dl.x' });
    // The ring's one message is out with a consumer: the newcomer cannot make way.
    const ring = await c.openReceiver('ring.q');
    ring.receiver.add_credit(5);
    await c.send('ring.q', ['held']);
    await ring.next(1);
    await c.send('ring.q', ['lost']);
    // dl.full is full: the message dl.src's consumer rejects cannot go on.
    await c.send('dl.x', ['filler']);
    await c.send('dl.src', ['rejected']);
    const src = await c.openReceiver('dl.src');
    src.receiver.add_credit(1);
    const [got] = await src.next(1);
    got!.delivery.reject();
    await waitFor(async () => (await scrape(broker.metricsPort!)).samples.get('tandem_dead_letters_lost_total') === 1, { timeout: 10_000, name: 'the dropped dead letter counted' });
    const s = await scrape(broker.metricsPort!);
    expect(s.samples.get('tandem_queue_ring_overflow_total{queue="ring.q"}')).toBe(1);
    expect(s.samples.get('tandem_queue_ring_overflow_total{queue="dl.src"}')).toBe(0);
  });

  it('metrics standalone - a queue with message groups shows the groups consumers hold and the messages passed over for their owner; other queues have no such series', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    const c = await TestClient.connect({ port: broker.port });
    opened.push(c);
    await manage(broker.port, 'CREATE', 'queue', 'groups.q', { 'qpid.message-groups': true });
    await manage(broker.port, 'CREATE', 'queue', 'plain.q', {});
    await c.send('plain.q', ['p']);
    const groups = ['a', 'a', 'b', 'a', 'c'];
    await c.send('groups.q', groups.map((g, i) => ({ body: `${g}${i}`, group_id: g })));
    const before = await scrape(broker.metricsPort!);
    expect(before.samples.get('tandem_queue_message_groups_owned{queue="groups.q"}')).toBe(0);
    expect(before.samples.get('tandem_queue_message_group_rows_skipped_total{queue="groups.q"}')).toBe(0);
    // The first consumer holds a0: group a is its own until it settles.
    const first = await c.openReceiver('groups.q');
    first.receiver.add_credit(1);
    const [a0] = await first.next(1);
    expect(a0!.message.body).toBe('a0');
    // The second is given b and c; a1 and a3 are passed over, a's owner holding a0.
    const second = await c.openReceiver('groups.q');
    second.receiver.add_credit(10);
    const got = await second.next(2);
    expect(got.map((r) => r.message.body)).toEqual(['b2', 'c4']);
    const held = await scrape(broker.metricsPort!);
    expect(held.samples.get('tandem_queue_message_groups_owned{queue="groups.q"}')).toBe(3);
    expect(held.samples.get('tandem_queue_message_group_rows_skipped_total{queue="groups.q"}')).toBeGreaterThanOrEqual(2);
    expect(held.help.get('tandem_queue_message_groups_owned')).toMatch(/message groups/);
    // No series for queues without groups (plain.q, the temporary ones).
    expect(held.text).not.toMatch(/^tandem_queue_message_group[^{]*\{queue="(?!groups\.q")/m);
    expect(held.samples.get('tandem_queue_depth{queue="plain.q"}')).toBe(1);
    // b2 and c4 settled: their groups are free; a stays held by the first consumer (a0 unsettled).
    for (const r of got) r.delivery.accept();
    await waitFor(async () => (await scrape(broker.metricsPort!)).samples.get('tandem_queue_message_groups_owned{queue="groups.q"}') === 1, { timeout: 10_000, name: 'group a alone held' });
    // The second consumer gone, a0 settled: nobody holds a group (nobody with credit is left to take a1).
    await second.close();
    a0!.delivery.accept();
    await waitFor(async () => (await scrape(broker.metricsPort!)).samples.get('tandem_queue_message_groups_owned{queue="groups.q"}') === 0, { timeout: 10_000, name: 'no group held' });
  });

  it('metrics ha - the primary shows its state, ready backups and each backup lag; a SIGSTOPped backup lags, then is no longer ready', async () => {
    const cluster = await TestCluster.start(3, ['--metrics-port', '0', '--ha-heartbeat-interval', '3s']);
    expect((await cluster.promote(0)).code).toBe(0);
    await cluster.waitState(1, 'ready');
    await cluster.waitState(2, 'ready');
    const primary = cluster.brokers[0]!;
    const ids = ((await cluster.status(0)) as HaStatusJson).backups.map((b) => b.id);
    expect(ids).toHaveLength(2);
    await waitFor(async () => (await scrape(primary.metricsPort!)).samples.get('tandem_ha_backups_ready') === 2, { timeout: 10_000, name: 'two ready backups in the scrape' });
    let s = await scrape(primary.metricsPort!);
    expect(s.samples.get('tandem_ha_state{state="active"}')).toBe(1);
    expect(s.samples.get('tandem_ha_state{state="ready"}')).toBe(0);
    for (const id of ids) {
      expect(s.samples.get(`tandem_ha_backup_lag_changes{backup="${id}"}`)).toBeGreaterThanOrEqual(0);
      expect(s.samples.get(`tandem_ha_backup_lag_seconds{backup="${id}"}`)).toBeGreaterThanOrEqual(0);
      expect(s.samples.get(`tandem_ha_backup_lag_bytes{backup="${id}"}`)).toBeGreaterThanOrEqual(0);
    }
    // A backup's own scrape says ready.
    expect((await scrape(cluster.brokers[1]!.metricsPort!)).samples.get('tandem_ha_state{state="ready"}')).toBe(1);

    const status = (await cluster.status(0)) as HaStatusJson;
    const victimIndex = 2;
    const victim = cluster.brokers[victimIndex]!;
    const victimId = ((await cluster.status(victimIndex)) as HaStatusJson & { 'broker-id': string })['broker-id'];
    expect(status.backups.map((b) => b.id)).toContain(victimId);
    victim.signal('SIGSTOP');
    stopped.push(victim);
    const c = await TestClient.connect({ port: primary.port });
    opened.push(c);
    // Held until the silent backup is dropped; meanwhile it owes these changes.
    const sent = c.send('ha.metrics.q', durable(5, 'h'), { timeoutMs: 60_000 });
    await waitFor(
      async () => {
        const m = (await scrape(primary.metricsPort!)).samples;
        return (
          (m.get(`tandem_ha_backup_lag_changes{backup="${victimId}"}`) ?? 0) > 0 &&
          (m.get(`tandem_ha_backup_lag_seconds{backup="${victimId}"}`) ?? 0) > 0 &&
          // At least the encoded size of the enqueues it owes (each holds its body and headers).
          (m.get(`tandem_ha_backup_lag_bytes{backup="${victimId}"}`) ?? 0) >= (m.get(`tandem_ha_backup_lag_changes{backup="${victimId}"}`) ?? 0) * 20
        );
      },
      { timeout: 10_000, interval: 100, name: 'the stopped backup lags in changes, bytes and seconds' },
    );
    await waitFor(async () => (await scrape(primary.metricsPort!)).samples.get('tandem_ha_backups_ready') === 1, { timeout: 30_000, interval: 200, name: 'one ready backup after the drop' });
    await sent;
    victim.signal('SIGCONT');
    await waitFor(async () => (await scrape(primary.metricsPort!)).samples.get('tandem_ha_backups_ready') === 2, { timeout: 60_000, interval: 200, name: 'two ready backups again' });
    s = await scrape(primary.metricsPort!);
    expect(s.samples.get('tandem_queue_depth{queue="ha.metrics.q"}')).toBe(5);
  }, 150_000);

  it('metrics dr - a DR secondary shows each copy lag and link; the link goes down with its source', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start({ args: ['--metrics-port', '0'] });
    expect((await tandem(['queue', 'add', 'orders', '--durable', '-b', a.url])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'orders', '--source', a.url, '-b', b.url]);
    expect(add.code, add.stderr).toBe(0);
    await send(a.port, 'orders', ['o1', 'o2'], { durable: true });
    await drFlush(a.port, b.port);
    await waitFor(async () => (await scrape(b.metricsPort!)).samples.get('tandem_dr_link_up{queue="orders"}') === 1, { timeout: 15_000, name: 'link up' });
    const s = await scrape(b.metricsPort!);
    expect(s.samples.get('tandem_dr_lag_changes{queue="orders"}')).toBe(0);
    expect(s.samples.get('tandem_dr_lag_seconds{queue="orders"}')).toBeGreaterThanOrEqual(0);
    expect(s.samples.get('tandem_queue_depth{queue="orders"}')).toBe(2);
    expect(s.samples.get('tandem_dr_role{queue="orders",role="passive copy"}')).toBe(1);
    expect(s.samples.get('tandem_dr_role{queue="orders",role="activated"}')).toBe(0);
    expect(s.samples.get('tandem_dr_quarantined_messages{queue="orders"}')).toBe(0);
    const epoch = s.samples.get('tandem_dr_epoch{queue="orders"}')!;
    expect(epoch).toBeGreaterThanOrEqual(0);
    await a.kill();
    await waitFor(async () => (await scrape(b.metricsPort!)).samples.get('tandem_dr_link_up{queue="orders"}') === 0, { timeout: 15_000, name: 'link down once the source is gone' });
    // Activated: the role and the epoch say so.
    const activate = await tandem(['dr', 'activate', 'orders', '-b', b.url]);
    expect(activate.code, activate.stderr).toBe(0);
    const after = await scrape(b.metricsPort!);
    expect(after.samples.get('tandem_dr_role{queue="orders",role="activated"}')).toBe(1);
    expect(after.samples.get('tandem_dr_role{queue="orders",role="passive copy"}')).toBe(0);
    expect(after.samples.get('tandem_dr_epoch{queue="orders"}')).toBeGreaterThan(epoch);
  }, 60_000);
});

// Wall-clock steps on real tandemd processes: libfaketime steps a broker's wall clock an
// hour forward and back while it runs, CLOCK_MONOTONIC untouched, as NTP, a resumed VM or
// `date -s` step a production machine's. Timeouts and rate limits are durations and must
// not notice (src/util/monotonic-clock.ts); message expiry follows the wall clock by design,
// which is also the proof that each step reached the broker's Date.now().
import { setTimeout as sleep } from 'node:timers/promises';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { SteppedClock, removeClockFiles, skipClockSteps } from '../helpers/faketime.js';
import { TestClient } from '../helpers/rhea-client.js';
import { ADMIN, ConsoleClient, READER, writeUsers } from '../console/helpers.js';
import { contents, drFlush, range, send } from '../dr/helpers.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

const HOUR = 3600;

afterAll(async () => {
  await killAllBrokers();
  removeClockFiles();
});

/** A message whose expiry shows whether a step reached the broker's wall clock. */
async function sendProbe(client: TestClient, queue: string, ttlMs: number): Promise<void> {
  const [outcome] = await client.send(queue, [{ body: 'probe', ttl: ttlMs, durable: true }]);
  expect(outcome!.state).toBe('accepted');
}

/** How many messages `queue` holds (browsed: they stay). */
async function queued(client: TestClient, queue: string): Promise<number> {
  const browser = await client.openReceiver({ address: queue, distribution_mode: 'copy' });
  browser.receiver.add_credit(10);
  const seen = await browser.drainFor(500);
  await browser.close();
  return seen.length;
}

describe.skipIf(skipClockSteps)('clock steps', () => {
  it('clock steps - clients holding 2 s idle-time-out heartbeats stay connected while the wall clock steps an hour forward and two back', async () => {
    const clock = new SteppedClock();
    const broker = await TestBroker.start({ env: clock.env, args: ['--idle-timeout', '2s'] });
    const client = await TestClient.connect({ port: broker.port, idle_time_out: 2000 });
    await sendProbe(client, 'ttl-probe', 30 * 60_000);
    expect(await queued(client, 'ttl-probe')).toBe(1);

    clock.set(HOUR);
    await sleep(4000);
    expect(client.closed, `closed after the forward step: ${JSON.stringify(client.errors)}`).toBe(false);
    // Expiry is wall-clock (AMQP's): the message's 30 minutes are over at +1 h.
    expect(await queued(client, 'ttl-probe')).toBe(0);

    clock.set(0);
    await sleep(4000);
    clock.set(-HOUR);
    await sleep(4000);
    expect(client.closed, `closed after the backward steps: ${JSON.stringify(client.errors)}`).toBe(false);
    // And it still works: a round trip on the same connection.
    await client.send('after-steps', ['still here']);
    expect((await client.receiveAndAccept('after-steps', 1)).map((m) => m.body)).toEqual(['still here']);
    const log = `${broker.stdout}\n${broker.stderr}`;
    expect(log).not.toMatch(/over idle-time-out/);
    // The broker saw each step, and said what it moves.
    expect(log).toMatch(/the wall clock stepped forward by 3600 s/);
    expect(log.match(/the wall clock stepped back by 3600 s/g)).toHaveLength(2);
    await client.close();
  }, 60_000);

  it("clock steps - an HA cluster whose primary's, then backup's, wall clock steps an hour forward and back under load keeps its backup, its primary and its client, and loses or duplicates nothing", async () => {
    const clocks = [new SteppedClock(), new SteppedClock()];
    const cluster = await TestCluster.ready(2, [], { envOf: (i) => clocks[i]!.env });
    const client = await TestClient.connect({ port: cluster.ports[0]!, idle_time_out: 2000 });
    const sender = await client.openSender('steady');
    const receiver = await client.openReceiver('steady');
    receiver.receiver.add_credit(5000);
    await sendProbe(client, 'ttl-probe', 30 * 60_000);

    let sent = 0;
    // Each step comes while the cluster idles (only heartbeats: a message every 50 ms would
    // refresh every "last heard" before its silence was judged), and each phase outlasts the
    // primary's 2 s without acknowledgements and the backup's 2 s of silence.
    const phases: Array<[broker: number, seconds: number]> = [[0, HOUR], [0, 0], [0, -HOUR], [0, 0], [1, HOUR], [1, 0], [1, -HOUR], [1, 0]];
    for (const [i, seconds] of phases) {
      clocks[i]!.set(seconds);
      await sleep(1500);
      const until = performance.now() + 1500;
      while (performance.now() < until) {
        const [outcome] = await client.send(sender, [{ body: `m${sent}`, durable: true }]);
        expect(outcome!.state, `message ${sent} after broker ${i}'s clock went to ${seconds} s`).toBe('accepted');
        sent++;
        await sleep(50);
      }
      if (i === 0 && seconds === HOUR) expect(await queued(client, 'ttl-probe'), "the primary's step reached its Date.now()").toBe(0);
    }
    const got = await receiver.next(sent, 20_000);
    for (const r of got) r.delivery.accept();
    expect(got.map((r) => r.message.body)).toEqual(Array.from({ length: sent }, (_, n) => `m${n}`));
    expect(await receiver.drainFor(300)).toHaveLength(0);

    expect(client.closed, JSON.stringify(client.errors)).toBe(false);
    const status = await cluster.status(0);
    expect(status?.state).toBe('active');
    expect(status?.backups.map((b) => b.state)).toEqual(['ready']);
    // Never dropped, never lost: attached once, in all those steps.
    const log = (i: number) => `${cluster.brokers[i]!.stdout}\n${cluster.brokers[i]!.stderr}`;
    expect(log(0)).not.toMatch(/backup dropped/);
    expect(log(1)).not.toMatch(/lost the link to the primary/);
    expect(log(1).match(/following the primary/g)).toHaveLength(1);
    await client.close();
    await cluster.stopAll();
  }, 90_000);

  it('clock steps - delivery delays and ttls are wall-clock: across a step back, messages sent after it are timed by the new clock, and those sent before are held only until the clock is right again', async () => {
    const clock = new SteppedClock();
    const broker = await TestBroker.start({ env: clock.env });
    const client = await TestClient.connect({ port: broker.port });
    const delayed = (body: string) => ({ body, message_annotations: { 'x-opt-delivery-delay': 1000 } });
    await client.send('delayed', [delayed('before')]);
    await client.send('expiring', [{ body: 'before', ttl: 1000 }]);
    clock.set(-HOUR);
    await sleep(300);
    await client.send('delayed', [delayed('after')]);
    await client.send('expiring', [{ body: 'after', ttl: 1000 }]);
    const receiver = await client.openReceiver('delayed');
    receiver.receiver.add_credit(10);
    // Their delay and ttl are over by the new clock; the earlier ones' by neither clock yet.
    expect((await receiver.next(1)).map((r) => r.message.body)).toEqual(['after']);
    await sleep(2500);
    expect((await receiver.drainFor(0)).length).toBe(0);
    expect(await queued(client, 'expiring')).toBe(1);
    // The clock is put right: the journaled times are met, nothing is held for ever.
    clock.set(0);
    expect((await receiver.next(1)).map((r) => r.message.body)).toEqual(['before']);
    await sleep(1500);
    expect(await queued(client, 'expiring')).toBe(0);
    expect(`${broker.stdout}\n${broker.stderr}`).toMatch(/the wall clock stepped back by 3600 s: .* messages held now expire and are delivered up to 3600 s later/);
  }, 60_000);

  it('clock steps - a primary whose wall clock steps an hour back while its backup hangs still drops it within two heartbeats: its publisher is not held an hour', async () => {
    const clock = new SteppedClock();
    // Settling alone once no backup is ready: the publisher waits only while the hung backup is not dropped.
    const cluster = await TestCluster.ready(2, ['--ha-min-ready-backups', '0'], { envOf: (i) => (i === 0 ? clock.env : undefined) });
    const client = await TestClient.connect({ port: cluster.ports[0]!, idle_time_out: 2000 });
    const sender = await client.openSender('held');
    expect((await client.send(sender, ['before']))[0]!.state).toBe('accepted');
    const backup = cluster.brokers[1]!;
    process.kill(backup.pid, 'SIGSTOP');
    try {
      // Sent to the hung backup before the step: the primary waits for its acknowledgement.
      const pending = client.send(sender, ['during'], { timeoutMs: 15_000 });
      await sleep(200);
      clock.set(-HOUR);
      expect((await pending)[0]!.state).toBe('accepted');
      expect(`${cluster.brokers[0]!.stdout}\n${cluster.brokers[0]!.stderr}`).toMatch(/backup dropped/);
    } finally {
      process.kill(backup.pid, 'SIGCONT');
    }
    await client.close();
    await cluster.stopAll();
  }, 60_000);

  it("clock steps - a DR link whose secondary's, then source's, wall clock steps an hour forward and back stays connected and copies everything once", async () => {
    const clocks = [new SteppedClock(), new SteppedClock()];
    const source = await TestBroker.start({ env: clocks[0]!.env });
    const secondary = await TestBroker.start({ env: clocks[1]!.env });
    expect((await tandem(['queue', 'add', 'mirror', '--durable', '-b', source.url])).code).toBe(0);
    const added = await tandem(['dr', 'add', 'mirror', '--source', source.url, '-b', secondary.url]);
    expect(added.code, added.stderr).toBe(0);
    await send(source.port, 'mirror', range('m', 0, 10));
    await drFlush(source.port, secondary.port);
    // Steps while the link idles (the source's heartbeats every 500 ms): a forward step on the
    // secondary can only lose the link when it comes between a heartbeat and the bridge's
    // next check of its silence, so several.
    const secondarySteps = Array.from({ length: 4 }, () => [[1, HOUR], [1, 0]] as const).flat();
    let next = 10;
    for (const [i, seconds] of [...secondarySteps, [1, -HOUR], [1, 0], [0, HOUR], [0, 0], [0, -HOUR], [0, 0]] as const) {
      clocks[i].set(seconds);
      await sleep(1200);
      await send(source.port, 'mirror', range('m', next, next + 5));
      next += 5;
    }
    await drFlush(source.port, secondary.port);
    expect(await contents(secondary.port, 'mirror')).toEqual(range('m', 0, next));
    const log = `${secondary.stdout}\n${secondary.stderr}`;
    expect(log.match(/DR: replicating from the source primary/g)).toHaveLength(1);
    // The steps reached the secondary's wall clock (the last, from -1 h back to the real time, is forward too).
    expect(log.match(/the wall clock stepped forward by 3600 s/g)).toHaveLength(5);
    expect(log.match(/the wall clock stepped back by 3600 s/g)).toHaveLength(5);
  }, 90_000);

  it("clock steps - a DR source whose wall clock stepped two hours back still copies a queue with a duplicate-detection window", async () => {
    const clock = new SteppedClock();
    const source = await TestBroker.start({ env: clock.env });
    const secondary = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'keyed', '--durable', '--dedup-window', '100', '-b', source.url])).code).toBe(0);
    const client = await TestClient.connect({ port: source.port });
    await client.send('keyed', [{ body: 'a', message_id: 'k1', durable: true }, { body: 'b', message_id: 'k2', durable: true }]);
    await client.close();
    // The keys are stamped by the clock before the step: two hours ahead of the source's clock
    // after it, past the hour a bridge allows (the copy was refused, and asked again, for an hour).
    clock.set(-2 * HOUR);
    await sleep(300);
    const added = await tandem(['dr', 'add', 'keyed', '--source', source.url, '-b', secondary.url]);
    expect(added.code, added.stderr).toBe(0);
    await drFlush(source.port, secondary.port, 15_000);
    expect(await contents(secondary.port, 'keyed')).toEqual(['a', 'b']);
    // With its keys: the copy's window holds both.
    expect(((await manage(secondary.port, 'READ', 'queue', 'keyed')) as Record<string, unknown>)['dedup-keys']).toBe(2);
    expect(`${secondary.stdout}\n${secondary.stderr}`).not.toMatch(/malformed/);
  }, 60_000);

  it("clock steps - the console keeps its sessions across a step forward and does not lock a reader out after a step back", async () => {
    const clock = new SteppedClock();
    const users = await writeUsers(mkdtempSync(join(tmpdir(), 'tandem-clock-console-')));
    const broker = await TestBroker.start({ env: clock.env, args: ['--auth', 'yes', '--users-file', users, '--console-port', '0'] });
    const admin = new ConsoleClient(broker.consoleUrl!);
    const reader = new ConsoleClient(broker.consoleUrl!);
    expect((await admin.login(ADMIN)).status).toBe(200);
    expect((await reader.login(READER)).status).toBe(200);
    expect((await reader.request('GET', '/api/queues')).status).toBe(200);

    // A session expires after 30 idle minutes: a step of an hour is not an hour of idleness.
    clock.set(HOUR);
    await sleep(300);
    expect((await admin.request('GET', '/api/queues')).status).toBe(200);
    expect((await reader.request('GET', '/api/queues')).status).toBe(200);

    // The reader's request budget refills with time: a step back is not an hour of debt.
    clock.set(0);
    await sleep(300);
    expect((await reader.request('GET', '/api/queues')).status).toBe(200);
    expect((await admin.request('GET', '/api/queues')).status).toBe(200);
  }, 60_000);
});

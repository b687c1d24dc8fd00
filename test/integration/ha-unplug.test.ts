// A power loss of the primary, without Pacemaker: the primary runs in a network
// namespace of its own whose cable is pulled (test/helpers/netns.ts), so its
// address answers nothing, not even a reset, as when a host loses power. The two
// backups and a client with reconnect run in the "site" namespace. One backup is
// promoted once both have seen the primary go; the promote must not be held up
// by the silent address, the other backup must find the new primary although
// that address is in its list, and no accepted message may be lost. The times are
// recorded (printed), not asserted.
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, repoRoot, tandemBin, waitFor } from '../helpers/broker.js';
import { NODE_ADDRESS, NetnsPair, SITE_ADDRESS, netnsAvailable } from '../helpers/netns.js';
import { HA_USER, haIdentity, type HaIdentity } from '../helpers/ha-identity.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import type { ChildProcess } from 'node:child_process';

const usable = netnsAvailable();
const net = new NetnsPair('haunplug');
const addresses = [`${NODE_ADDRESS}:5672`, `${SITE_ADDRESS}:5672`, `${SITE_ADDRESS}:5673`];
/** The CLI's -b for broker i: the HA admin, its password from TANDEM_PASSWORD. */
const admin = (i: number) => `${HA_USER}@${addresses[i]!}`;
const identityDir = mkdtempSync(join(tmpdir(), 'tandem-unplug-'));
let identity: HaIdentity;
const brokersUrl = addresses.join(',');
let client: ChildProcess | undefined;

interface ClientEvent {
  t: number;
  ev: string;
  id?: number;
  host?: string;
  accepted?: number;
  received?: number;
  missing?: number[];
}

function startBroker(i: number): Promise<TestBroker> {
  const [host, port] = addresses[i]!.split(':');
  return TestBroker.start({
    netns: i === 0 ? net.node : net.site,
    port: Number(port),
    // Off loopback a cluster needs auth=yes and an admin identity between brokers.
    config: identity.config,
    args: ['--host', host!, '--ha-cluster', 'yes', '--ha-brokers-url', brokersUrl, '--ha-heartbeat-interval', '1s', '--ha-backup-timeout', '10s'],
  });
}

async function status(i: number): Promise<{ state: string; primary: string | null } | undefined> {
  const r = await net.exec(net.site, [process.execPath, tandemBin, 'ha', 'status', '-b', admin(i), '--json', '--timeout', '3']);
  try {
    return JSON.parse(r.stdout) as { state: string; primary: string | null };
  } catch {
    return undefined;
  }
}

/** When a broker's log says it followed `primary` (its JSON log lines carry the time). */
function followedAt(b: TestBroker, primary: string): number | undefined {
  for (const line of b.stderr.split('\n')) {
    if (!line.includes('following the primary')) continue;
    try {
      const o = JSON.parse(line) as { time: number; primary: string };
      if (o.primary === primary) return o.time;
    } catch {
      // not JSON
    }
  }
  return undefined;
}

describe.skipIf(!usable)('ha - power loss of the primary (its address silent)', () => {
  beforeAll(async () => {
    identity = await haIdentity(identityDir);
    net.create();
  });

  afterAll(async () => {
    if (client?.exitCode === null) client.kill('SIGKILL');
    await killAllBrokers();
    net.destroy();
    rmSync(identityDir, { recursive: true, force: true });
  });

  it('ha unplug - the promote and the other backup do not wait for the silent address; nothing accepted is lost', async () => {
    const brokers = [await startBroker(0), await startBroker(1), await startBroker(2)];
    const promoted = await net.exec(net.site, [process.execPath, tandemBin, 'ha', 'promote', '-b', admin(0), '--cluster-manager']);
    expect(promoted.code, promoted.stderr).toBe(0);
    for (const i of [1, 2]) await waitFor(async () => (await status(i))?.state === 'ready', { timeout: 30_000, interval: 100, name: `broker ${i} ready` });

    client = net.spawn(net.site, [process.execPath, join(repoRoot, 'test', 'cluster', 'failover-client.mjs'), brokersUrl, 'unplugq']);
    const events: ClientEvent[] = [];
    let buffer = '';
    let clientErr = '';
    client.stdout!.on('data', (d: Buffer) => {
      buffer += d.toString();
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        try {
          events.push(JSON.parse(line) as ClientEvent);
        } catch {
          // not an event
        }
      }
    });
    client.stderr!.on('data', (d: Buffer) => (clientErr += d.toString()));
    await waitFor(() => events.filter((e) => e.ev === 'accepted').length >= 300, { timeout: 30_000, name: 'traffic flowing' });

    // Power loss: the process freezes, the cable goes, then the process dies (its
    // resets and FINs go nowhere). From the site its address is silent from now on.
    const load = loadavg()[0];
    brokers[0]!.signal('SIGSTOP');
    net.unplug();
    const unpluggedAt = Date.now();
    await brokers[0]!.kill();
    // The environment really drops SYNs (a reset would be an answer and prove nothing).
    const probe = await net.exec(net.site, [process.execPath, '--input-type=module', '-e',
      `import { probeTcp } from ${JSON.stringify(join(repoRoot, 'dist', 'util', 'tcp-reach.js'))}; console.log(await probeTcp(${JSON.stringify(NODE_ADDRESS)}, 5672, { deadlineMs: 1500, resendMs: 500 }))`]);
    expect(probe.stdout.trim(), probe.stderr).toBe('silent');

    // The cluster manager decides only after the node is gone from the cluster: here,
    // once both backups have seen their primary go (heartbeat timeout).
    for (const i of [1, 2]) await waitFor(async () => (await status(i))?.primary === null, { timeout: 20_000, interval: 50, name: `broker ${i} lost the primary` });
    const lostAt = Date.now();

    const promoteAt = Date.now();
    const second = await net.exec(net.site, [process.execPath, tandemBin, 'ha', 'promote', '-b', admin(1), '--cluster-manager']);
    const promotedAt = Date.now();
    expect(second.code, second.stderr).toBe(0);

    await waitFor(async () => {
      const s = await status(2);
      return s?.state === 'ready' && s.primary === addresses[1];
    }, { timeout: 30_000, interval: 100, name: 'the other backup ready with the new primary' });
    await waitFor(() => events.some((e) => e.ev === 'accepted' && e.host === addresses[1] && e.t > promotedAt), { timeout: 30_000, name: 'a message accepted by the new primary' }).catch((err: Error) => {
      throw new Error(`${err.message}; unplugged ${unpluggedAt} promoted ${promotedAt}; the client since the unplug: ${JSON.stringify(events.filter((e) => e.t > unpluggedAt && e.ev !== 'received').slice(0, 40))} ${clientErr}`);
    });
    const followed = followedAt(brokers[2]!, addresses[1]!);
    const firstAccept = events.find((e) => e.ev === 'accepted' && e.host === addresses[1] && e.t > unpluggedAt);

    client.kill('SIGUSR2');
    const summary = await waitFor(() => events.find((e) => e.ev === 'summary'), { timeout: 45_000, name: 'client summary' });
    expect(summary.missing).toEqual([]);
    expect(summary.accepted).toBeGreaterThan(300);
    expect(summary.received).toBe(summary.accepted);

    const timings = {
      load_1min: Math.round(load * 100) / 100,
      unplug_to_backups_saw_loss_ms: lostAt - unpluggedAt,
      promote_run_ms: promotedAt - promoteAt,
      promote_returned_to_other_backup_following_ms: followed === undefined ? null : followed - promotedAt,
      promote_returned_to_first_accept_ms: firstAccept ? firstAccept.t - promotedAt : null,
      accepted: summary.accepted,
    };
    console.log(`ha unplug timings: ${JSON.stringify(timings)}`);
  });
});

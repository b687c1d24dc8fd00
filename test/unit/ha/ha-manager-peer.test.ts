// What another broker tells the HA manager, taken as untrusted: a backup's hello on
// the replication link, the HA-STATUS answers a promotion reads, and stream messages
// out of their order. A malformed value is refused with what is wrong; it never
// becomes a position, an epoch or a state. The manager runs on the broker model, its
// peers are fakes (the management client and the TCP probe are stubbed; its follower
// dials ports where nothing listens).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';

vi.mock('../../../src/util/tcp-reach.js', async (importOriginal) => ({ ...(await importOriginal<object>()), probeTcp: async () => 'answered' }));

import { ManagementClient } from '../../../src/admin/client.js';
import type { StreamMessage } from '../../../src/replication/protocol.js';
import { DrCredentials } from '../../../src/dr/credentials.js';
import { HaManager } from '../../../src/ha/ha-manager.js';
import { loadSettings } from '../../../src/ops/config.js';
import type { DeliveryRef, PeerError, PeerSender } from '../../../src/peer-link/transport.js';
import { newBroker, qs } from '../broker/helpers.js';

const dirs: string[] = [];
const managers: HaManager[] = [];
afterEach(async () => {
  for (const m of managers.splice(0)) await m.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  vi.restoreAllMocks();
});

/** An HA status answer of the broker at `port`: joining, empty. */
const joining = (port: number): Record<string, unknown> => ({ state: 'joining', epoch: 0, lsn: 0, instance: `broker-${port}`, 'epoch-history': [] });

/** A manager of a 3-broker cluster whose brokers answer HA-STATUS with `answer(port)`. */
function manager(answer: (port: number) => unknown = joining) {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-ha-peer-'));
  dirs.push(dir);
  const settings = loadSettings({ dataDir: dir, haCluster: 'yes', haBrokersUrl: '127.0.0.1:1,127.0.0.1:2,127.0.0.1:3' });
  const { broker } = newBroker();
  const fatal: string[] = [];
  const ha = new HaManager({
    broker,
    settings,
    log: pino({ level: 'silent' }),
    resetStore: async () => undefined,
    snapshotComplete: () => undefined,
    whenDurable: (_lsn, cb) => cb(),
    instanceId: 'candidate',
    recoveredLsn: 0,
    onPrimary: () => undefined,
    fatal: (reason) => fatal.push(reason),
    drCredentials: new DrCredentials(dir),
  });
  vi.spyOn(ManagementClient, 'connect').mockImplementation(async (a) => ({ request: async () => answer(a.port), close: () => undefined }) as unknown as ManagementClient);
  managers.push(ha);
  ha.start();
  return { ha, broker, settings, fatal };
}

/** The serving end of a replication link a backup attached with `hello`. */
function backupLink(hello: Record<string, unknown>) {
  const sent: Buffer[] = [];
  const heard: { refused?: PeerError } = {};
  const link: PeerSender = {
    hello,
    accept: () => undefined,
    refuse: (e) => (heard.refused = e),
    credit: () => 1000,
    send: (bytes): DeliveryRef => (sent.push(bytes), {}),
    // This backup never acknowledges anything.
    onOutcome: () => undefined,
    close: () => undefined,
  };
  return { link, sent, heard };
}

const tick = () => new Promise((r) => setImmediate(r));

/** A stream message given to the backup side, as the follower hands it over (a private step of the manager). */
const handle = (ha: HaManager, m: StreamMessage): Promise<unknown> => (ha as unknown as { handle(m: StreamMessage): Promise<unknown> }).handle(m);

describe('ha manager - input from other brokers', () => {
  it('ha peer input - a backup whose hello LSN is not a whole number is refused, and nothing is settled without its acknowledgement', async () => {
    const { ha, broker, settings } = manager();
    expect((await ha.promote()).state).toBe('active');
    for (const lsn of ['abc', Number.NaN, 1.5]) {
      const b = backupLink({ 'tandem.broker-id': 'b-1', 'tandem.lsn': lsn, 'tandem.epoch': broker.epoch, 'tandem.replicate': settings.haReplicate });
      expect(ha.openReplication(b.link, 'backup:1'), String(lsn)).toBeUndefined();
      expect(b.heard.refused).toEqual({ condition: 'amqp:invalid-field', description: 'replication hello: tandem.lsn must be a whole number, not ' + JSON.stringify(String(lsn)) });
    }
    await tick();
    await tick();
    // No backup was taken: a change waits for one (a NaN position used to make it ready at once and release this).
    expect(ha.status().backups).toEqual([]);
    let settled = false;
    ha.gate.whenSafe(broker.log.lsn + 1, true, () => (settled = true));
    await tick();
    expect(settled).toBe(false);
  });

  it('ha peer input - a hello whose broker id is no string is refused saying so, not a TypeError', async () => {
    const { ha, broker, settings } = manager();
    await ha.promote();
    const b = backupLink({ 'tandem.broker-id': { toString: 'x' }, 'tandem.lsn': 0, 'tandem.epoch': broker.epoch, 'tandem.replicate': settings.haReplicate });
    expect(ha.openReplication(b.link, 'backup:1')).toBeUndefined();
    expect(b.heard.refused?.condition).toBe('amqp:invalid-field');
    expect(b.heard.refused?.description).toMatch(/tandem.broker-id must be a string/);
  });

  it("ha peer input - a broker's HA-STATUS whose epoch or LSN is not a whole number counts as no answer: the promotion raises a whole epoch", async () => {
    for (const field of ['epoch', 'lsn']) {
      for (const bad of ['abc', 1e300, 1.5, -5]) {
        const { ha, broker } = manager((port) => (port === 2 ? { ...joining(port), [field]: bad } : joining(port)));
        const r = await ha.promote();
        expect(r.state, `${field} ${bad}`).toBe('active');
        expect(broker.epoch, `${field} ${bad}`).toBe(1);
        expect(r.guard?.checked).toMatch(/2 of 3 brokers/);
      }
    }
  });

  it('ha peer input - an epoch at the largest whole number refuses the promotion before the epoch is raised', async () => {
    const { ha, broker } = manager((port) => (port === 2 ? { ...joining(port), epoch: Number.MAX_SAFE_INTEGER } : joining(port)));
    await expect(ha.promote({ acceptDataLoss: true })).rejects.toThrow(/the next epoch would be 9007199254740992/);
    expect(broker.epoch).toBe(0);
    expect(ha.state).toBe('joining');
  });

  it('ha peer input - a malformed answer that says it is the primary still stops the promotion', async () => {
    const { ha } = manager((port) => (port === 2 ? { ...joining(port), state: 'active', epoch: 'x' } : joining(port)));
    await expect(ha.promote({ acceptDataLoss: true })).rejects.toThrow(/127.0.0.1:2 says it is the primary \(active\)/);
    expect(ha.state).toBe('joining');
  });

  it('ha peer input - ready while a snapshot loads, or snapshot-end without one, is refused (the follower then drops the link)', async () => {
    const { ha, broker } = manager();
    ha.sm.transition('catchup', 'attached to the primary');
    await handle(ha, { kind: 'snapshot-begin', lsn: 100, epoch: 1, reason: 'test' });
    await handle(ha, { kind: 'changes', lsn: 0, entries: [{ lsn: 1, durable: true, change: { kind: 'queue-declare', name: 'q', settings: qs({ durable: true }) } }] });
    // Ready here made the broker promotable holding one record of the snapshot, its position valid for a diff.
    await expect(handle(ha, { kind: 'ready', lsn: 50, epoch: 1 })).rejects.toThrow('the primary sent ready while a snapshot was being loaded');
    expect(ha.state).toBe('catchup');
    expect(ha.status().lsn).toBe(0);
    await handle(ha, { kind: 'snapshot-end', lsn: 100, epoch: 1 });
    await handle(ha, { kind: 'ready', lsn: 100, epoch: 1 });
    expect(ha.state).toBe('ready');
    expect(broker.log.lsn).toBe(100);
    // A second snapshot-end: there is no snapshot to end.
    await expect(handle(ha, { kind: 'snapshot-end', lsn: 200, epoch: 7 })).rejects.toThrow('the primary sent snapshot-end without a snapshot being loaded');
    expect(broker.epoch).toBe(1);
    expect(broker.log.lsn).toBe(100);
  });
});

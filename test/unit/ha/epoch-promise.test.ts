// A promotion's promise of its new epoch (src/ha/epoch-promise.ts), on the HA manager
// with fake peers (the management client and the TCP probe are stubbed, as in
// ha-manager-peer.test.ts): it is sent only once the guard has allowed the promotion
// and before the broker serves, the next epoch goes above every promise seen, a backup
// keeps it (on disk) until it follows a primary of that epoch, a primary below it stops,
// and hostile requests change nothing.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';

vi.mock('../../../src/util/tcp-reach.js', async (importOriginal) => ({ ...(await importOriginal<object>()), probeTcp: async () => 'answered' }));

import { ManagementClient } from '../../../src/admin/client.js';
import { AdminOperations, type Requester } from '../../../src/admin/dispatcher.js';
import type { AdminContext } from '../../../src/admin/operations.js';
import { TandemError } from '../../../src/broker/errors.js';
import { DrCredentials } from '../../../src/dr/credentials.js';
import { MAX_HA_EPOCH, PROMISED_EPOCH_PROPERTY, readPromiseRequest } from '../../../src/ha/epoch-promise.js';
import { HaManager } from '../../../src/ha/ha-manager.js';
import { registerHaOperations } from '../../../src/ha/ha-operations.js';
import { loadSettings } from '../../../src/ops/config.js';
import type { PeerDialer, PeerSender } from '../../../src/peer-link/transport.js';
import { Follower } from '../../../src/replication/follower.js';
import type { StreamMessage } from '../../../src/replication/protocol.js';
import { newBroker, qs } from '../broker/helpers.js';

const dirs: string[] = [];
const managers: HaManager[] = [];
afterEach(async () => {
  for (const m of managers.splice(0)) await m.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  vi.restoreAllMocks();
});

const joining = (port: number): Record<string, unknown> => ({ state: 'joining', epoch: 0, lsn: 0, instance: `broker-${port}`, 'epoch-history': [] });

interface Sent {
  port: number;
  operation: string;
  body: Record<string, unknown>;
  /** The promoting broker's state when the request went out. */
  stateThen: string;
}

/**
 * A manager of a 3-broker cluster (ports 1-3, none of them itself) whose peers answer
 * HA-STATUS with `answer(port)` (undefined: no answer) and HA-EPOCH-PROMISE with
 * `promised(port)` (a promise that never settles: a broker that does not answer).
 */
function manager(o: { answer?: (port: number) => unknown; promised?: (port: number) => Promise<unknown>; dir?: string } = {}) {
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'tandem-ha-promise-'));
  if (!o.dir) dirs.push(dir);
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
  const sent: Sent[] = [];
  const answer = o.answer ?? joining;
  vi.spyOn(ManagementClient, 'connect').mockImplementation(async (a) => {
    return {
      request: async (operation: string, _type: string, _name: string, body: Record<string, unknown> = {}) => {
        sent.push({ port: a.port, operation, body, stateThen: ha.state });
        if (operation === 'HA-STATUS') {
          const r = answer(a.port);
          if (r === undefined) throw new Error('no answer');
          return r;
        }
        return (o.promised ?? (async () => ({})))(a.port);
      },
      close: () => undefined,
    } as unknown as ManagementClient;
  });
  managers.push(ha);
  ha.start();
  return { ha, broker, settings, fatal, sent, dir };
}

const promisesIn = (sent: Sent[]) => sent.filter((s) => s.operation === 'HA-EPOCH-PROMISE');

/** The serving end of a replication link a backup attached with `hello`. */
function backupLink(hello: Record<string, unknown>) {
  const heard: { refused?: { condition?: string; description?: string }; accepted?: boolean } = {};
  const link: PeerSender = {
    hello,
    accept: () => void (heard.accepted = true),
    refuse: (e) => void (heard.refused = e),
    credit: () => 1000,
    send: () => ({}),
    onOutcome: () => undefined,
    close: () => undefined,
  };
  return { link, heard };
}

/** A stream message given to the backup side, as the follower hands it over. */
const handle = (ha: HaManager, m: StreamMessage): Promise<unknown> => (ha as unknown as { handle(m: StreamMessage): Promise<unknown> }).handle(m);

/** A private step of the manager, called as its timers and follower call it. */
const privately = (ha: HaManager) =>
  ha as unknown as { checkStale(): Promise<boolean>; refusesPrimary(epoch: number): string | undefined };

describe('ha epoch promise - the promoting broker', () => {
  it('ha epoch promise - a promotion the guard allows promises its new epoch to every other broker before it serves', async () => {
    const { ha, broker, sent } = manager();
    const r = await ha.promote();
    expect(r.state).toBe('active');
    const promises = promisesIn(sent);
    expect(promises.map((p) => p.port).sort()).toEqual([1, 2, 3]);
    for (const p of promises) {
      expect(p.body).toEqual({ epoch: broker.epoch, by: ha.brokerId });
      // Sent while it was still a backup: no publisher was served at the new epoch before it.
      expect(p.stateThen).toBe('joining');
    }
    expect(broker.epoch).toBe(1);
  });

  it('ha epoch promise - a promotion refused by the guard (another primary answers) promises nothing', async () => {
    const { ha, sent, broker } = manager({ answer: (port) => (port === 2 ? { ...joining(port), state: 'active', epoch: 3 } : joining(port)) });
    await expect(ha.promote()).rejects.toThrow(/127.0.0.1:2 is already the primary/);
    expect(promisesIn(sent)).toEqual([]);
    expect(broker.epoch).toBe(0);
  });

  it('ha epoch promise - a joining broker refused for want of a majority promises nothing', async () => {
    const { ha, sent } = manager({ answer: (port) => (port === 1 ? joining(port) : undefined) });
    await expect(ha.promote()).rejects.toThrow(/promotion refused: no majority/);
    expect(promisesIn(sent)).toEqual([]);
    expect(ha.status()['promised-epoch']).toBeNull();
  });

  it('ha epoch promise - the new epoch goes above every epoch promised to a broker that answered, and above its own promise', async () => {
    const { ha, broker } = manager({ answer: (port) => (port === 3 ? { ...joining(port), 'promised-epoch': 7 } : joining(port)) });
    await ha.promote();
    expect(broker.epoch).toBe(8);
    expect(ha.history.latest?.epoch).toBe(8);

    const own = manager();
    own.ha.receivePromise({ epoch: 12, by: 'another-broker' }, 'test');
    await own.ha.promote();
    expect(own.broker.epoch).toBe(13);
    // Its own promotion keeps the promise: none is left.
    expect(own.ha.status()['promised-epoch']).toBeNull();
    expect(existsSync(join(own.dir, 'ha-promised-epoch'))).toBe(false);
  });

  it('ha epoch promise - a promised-epoch that is not a whole number within the bound makes the answer count as none', async () => {
    for (const bad of ['9', -1, 1.5, MAX_HA_EPOCH + 1, Number.MAX_SAFE_INTEGER]) {
      const { ha, broker } = manager({ answer: (port) => (port === 3 ? { ...joining(port), 'promised-epoch': bad } : joining(port)) });
      const r = await ha.promote();
      expect(broker.epoch, String(bad)).toBe(1);
      expect(r.guard?.checked, String(bad)).toMatch(/2 of 3 brokers/);
    }
  });

  it('ha epoch promise - a broker that does not answer its promise does not hold the promotion up', async () => {
    // Broker 3 did not answer HA-STATUS (frozen), and never answers the promise either.
    const { ha, sent } = manager({ answer: (port) => (port === 3 ? undefined : joining(port)), promised: (port) => (port === 3 ? new Promise(() => undefined) : Promise.resolve({})) });
    const r = await ha.promote();
    expect(r.state).toBe('active');
    expect(promisesIn(sent).map((p) => p.port).sort()).toEqual([1, 2, 3]);
  });

  it('ha epoch promise - a rival promotion seen during the round (its promise reached us, or a broker answers as a primary of the epoch) makes this one give way', async () => {
    let ha: HaManager | undefined;
    // Broker 2, being promoted at the same time to the same epoch, promises it to us meanwhile.
    const rivalPromise = manager({ promised: async (port) => (port === 2 ? ha!.receivePromise({ epoch: 1, by: 'rival' }, 'test') : {}) });
    ha = rivalPromise.ha;
    await expect(ha.promote()).rejects.toThrow(/promotion refused: broker rival is being promoted to epoch 1 at the same time; this broker goes on as a backup/);
    expect(ha.state).toBe('joining');
    expect(rivalPromise.broker.epoch).toBe(0);
    expect(ha.status()['promised-epoch']).toBe(1);
    // Broker 3 became the primary of that epoch meanwhile.
    const rivalPrimary = manager({ promised: async (port) => (port === 3 ? { state: 'recovering', epoch: 1, 'promised-epoch': null } : {}) });
    await expect(rivalPrimary.ha.promote()).rejects.toThrow(/127.0.0.1:3 is already the primary of epoch 1/);
    expect(rivalPrimary.broker.epoch).toBe(0);
    expect(rivalPrimary.ha.isPrimary).toBe(false);
  });

  it('ha epoch promise - a broker that refuses the promise (an older version) does not fail the promotion', async () => {
    const { ha } = manager({ promised: async () => Promise.reject(new TandemError('TANDEM_ERR_NOT_IMPLEMENTED', "unknown operation 'HA-EPOCH-PROMISE'")) });
    expect((await ha.promote()).state).toBe('active');
  });
});

describe('ha epoch promise - a broker that is promised', () => {
  it('ha epoch promise - a backup keeps the highest promise, on disk, refuses older primaries, and lets it go once it follows the promised epoch', async () => {
    const first = manager();
    first.ha.receivePromise({ epoch: 5, by: 'b1' }, 'test');
    first.ha.receivePromise({ epoch: 4, by: 'b2' }, 'test');
    expect(first.ha.status()['promised-epoch']).toBe(5);
    expect(privately(first.ha).refusesPrimary(4)).toMatch(/promised epoch 5 \(by broker b1\): it does not follow a primary of epoch 4/);
    expect(privately(first.ha).refusesPrimary(5)).toBeUndefined();
    expect(privately(first.ha).refusesPrimary(6)).toBeUndefined();
    await first.ha.stop();

    // A restart remembers it.
    const again = manager({ dir: first.dir });
    expect(again.ha.status()['promised-epoch']).toBe(5);
    expect(privately(again.ha).refusesPrimary(2)).toBeDefined();
    // Attached to a primary of the promised epoch, it still holds the promise (that primary
    // may freeze before it sends anything); once its log holds the epoch, it is kept.
    again.ha.sm.transition('catchup', 'attached to the primary');
    await handle(again.ha, { kind: 'changes', lsn: 1, entries: [{ lsn: 1, durable: true, change: { kind: 'queue-declare', name: 'q', settings: qs({ durable: true }) } }] });
    expect(again.ha.status()['promised-epoch']).toBe(5);
    await handle(again.ha, { kind: 'changes', lsn: 2, entries: [{ lsn: 2, durable: true, change: { kind: 'epoch', epoch: 5 } }] });
    expect(again.broker.epoch).toBe(5);
    expect(again.ha.status()['promised-epoch']).toBeNull();
    expect(existsSync(join(first.dir, 'ha-promised-epoch'))).toBe(false);
    expect(privately(again.ha).refusesPrimary(2)).toBeUndefined();
  });

  it('ha epoch promise - a primary promised a newer epoch is stale and stops; one at or above it carries on', async () => {
    const { ha, broker, fatal } = manager();
    await ha.promote();
    expect(broker.epoch).toBe(1);
    ha.receivePromise({ epoch: 1, by: 'b1' }, 'test');
    expect(fatal).toEqual([]);
    expect(() => ha.receivePromise({ epoch: 2, by: 'b1' }, 'test')).toThrow(/allowed a promotion to epoch 2, above this primary's epoch 1: this primary is stale/);
    expect(fatal).toHaveLength(1);
  });

  it('ha epoch promise - a primary stops when a backup hello says it was promised a newer epoch, or when an HA-STATUS answer does', async () => {
    const hello = (promised: unknown, epoch: number) => ({ 'tandem.broker-id': 'b-1', 'tandem.lsn': 0, 'tandem.epoch': epoch, 'tandem.replicate': 'all', [PROMISED_EPOCH_PROPERTY]: promised });
    const a = manager();
    await a.ha.promote();
    for (const bad of ['x', -1, 1.5, MAX_HA_EPOCH + 1]) {
      const b = backupLink(hello(bad, 1));
      expect(a.ha.openReplication(b.link, 'backup:1'), String(bad)).toBeUndefined();
      expect(b.heard.refused?.condition, String(bad)).toBe('amqp:invalid-field');
    }
    const same = backupLink(hello(1, 1));
    expect(a.ha.openReplication(same.link, 'backup:1')).toBeDefined();
    expect(a.fatal).toEqual([]);
    const newer = backupLink(hello(2, 1));
    expect(a.ha.openReplication(newer.link, 'backup:2')).toBeUndefined();
    expect(newer.heard.refused?.condition).toBe('tandem:ha:not-primary');
    expect(a.fatal).toEqual(['a backup was promised epoch 2 by a promotion, above this primary\'s epoch 1: this primary is stale']);

    // Broker 2 becomes this primary's backup, then is promised a newer epoch.
    let peer: Record<string, unknown> | undefined;
    const s = manager({ answer: (port) => (port === 2 && peer ? { ...joining(port), ...peer } : joining(port)) });
    await s.ha.promote();
    peer = { state: 'ready', epoch: s.broker.epoch, 'promised-epoch': null };
    expect(await privately(s.ha).checkStale()).toBe(false);
    peer = { ...peer, 'promised-epoch': s.broker.epoch + 1 };
    expect(await privately(s.ha).checkStale()).toBe(true);
    expect(s.fatal[0]).toMatch(/127.0.0.1:2 was promised epoch \d+ by a promotion, above ours \(\d+\): this primary is stale/);
  });

  it('ha epoch promise - a promise sent by this broker itself (its own promotion reaching its own address) is no promise', () => {
    const { ha } = manager();
    ha.receivePromise({ epoch: 3, by: ha.brokerId }, 'test');
    expect(ha.status()['promised-epoch']).toBeNull();
  });
});

describe('ha epoch promise - hostile requests', () => {
  it('ha epoch promise - an epoch that is not a whole number from 1 to the bound, or a by that is no broker id, is invalid-field', () => {
    for (const epoch of [Number.NaN, 'abc', '5', 2 ** 53, -1, 0, 1.5, MAX_HA_EPOCH + 1, null, undefined, true, {}, [], Infinity]) {
      let err: unknown;
      try {
        readPromiseRequest({ epoch, by: 'b1' });
      } catch (e) {
        err = e;
      }
      expect(err, String(epoch)).toBeInstanceOf(TandemError);
      expect((err as TandemError).code, String(epoch)).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    }
    for (const by of [undefined, '', 7, 'x'.repeat(129), {}]) {
      expect(() => readPromiseRequest({ epoch: 2, by }), String(by)).toThrow(/by must be the promoted broker's id/);
    }
    expect(readPromiseRequest({ epoch: MAX_HA_EPOCH, by: 'b' })).toEqual({ epoch: MAX_HA_EPOCH, by: 'b' });
    expect(readPromiseRequest({ epoch: BigInt(MAX_HA_EPOCH), by: 'b' })).toEqual({ epoch: MAX_HA_EPOCH, by: 'b' });
  });

  it('ha epoch promise - the operation needs an admin, is refused before it reaches the manager when malformed, and changes nothing', async () => {
    const { ha } = manager();
    const ops = new AdminOperations({} as AdminContext, pino({ level: 'silent' }));
    registerHaOperations(ops, ha, () => ({}));
    const admin: Requester = { user: 'admin', admin: true, connectionId: 'c1' };
    for (const requester of [
      { user: 'bob', admin: false, connectionId: 'c2' },
      { user: 'carol', admin: false, reader: true, connectionId: 'c3' },
    ]) {
      await expect(ops.perform('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch: 4, by: 'b1' }, requester)).rejects.toMatchObject({ code: 'TANDEM_ERR_UNAUTHORIZED' });
    }
    for (const epoch of [Number.NaN, 'abc', 2 ** 53, -1, 0]) {
      await expect(ops.perform('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch, by: 'b1' }, admin), String(epoch)).rejects.toMatchObject({ code: 'TANDEM_ERR_INVALID_ARGUMENT' });
    }
    expect(ha.status()['promised-epoch']).toBeNull();
    expect(await ops.perform('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch: 4, by: 'b1' }, admin)).toMatchObject({ 'promised-epoch': 4 });
    // A standalone broker has nothing to promise, and says why (after the same checks).
    const standalone = new AdminOperations({} as AdminContext, pino({ level: 'silent' }));
    registerHaOperations(standalone, undefined, () => ({}));
    await expect(standalone.perform('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch: 'x', by: 'b1' }, admin)).rejects.toMatchObject({ code: 'TANDEM_ERR_INVALID_ARGUMENT' });
    await expect(standalone.perform('HA-EPOCH-PROMISE', 'broker', 'broker', { epoch: 4, by: 'b1' }, admin)).rejects.toMatchObject({ code: 'TANDEM_ERR_PRECONDITION' });
  });
});

describe('ha epoch promise - the follower', () => {
  /** Primaries at `epochs` (host name: its epoch); each serves the replication link at once, stating its epoch. */
  function primaries(epochs: Record<string, number>, serving: Set<string>) {
    const hellos: Array<Record<string, unknown>> = [];
    const abandoned: string[] = [];
    const dialer: PeerDialer = {
      dial: (o, events) => {
        setImmediate(() => events.opened({}));
        return {
          openReceiver: (r, link) => {
            hellos.push(r.properties);
            setImmediate(() => {
              if (serving.has(o.host)) link.attached({ source: { address: '$ha.replication' }, properties: { 'tandem.epoch': epochs[o.host] } });
              else {
                link.attached({ source: undefined, properties: {} });
                link.detached({ condition: 'tandem:ha:not-primary', description: 'not the primary' });
              }
            });
            return { addCredit: () => undefined };
          },
          abandon: () => void abandoned.push(o.host),
        };
      },
    };
    return { dialer, hellos, abandoned };
  }

  it('ha epoch promise - a follower with a promise lets an older primary go, says the promise in its hello, and follows the promised one when it answers', async () => {
    const serving = new Set(['old']);
    const net = primaries({ old: 3, new: 4 }, serving);
    const followed: string[] = [];
    const follower = new Follower({
      endpoints: [
        { host: 'old', port: 1 },
        { host: 'new', port: 2 },
      ],
      user: undefined,
      password: undefined,
      mechanism: 'ANONYMOUS',
      tls: undefined,
      brokerId: 'backup',
      instanceId: 'backup-instance',
      replicate: 'all',
      heartbeatMs: 400,
      log: pino({ level: 'silent' }),
      position: () => ({ lsn: 0, epoch: 3, journalLsn: 0, promisedEpoch: 4 }),
      refusesPrimary: (epoch) => (epoch < 4 ? `promised epoch 4, not following epoch ${epoch}` : undefined),
      handle: async () => ({ safe: Promise.resolve() }),
      onFollowing: (address) => followed.push(address),
      onLost: () => undefined,
      onFatal: () => undefined,
      dialer: net.dialer,
    });
    try {
      follower.start();
      const until = async (cond: () => boolean, what: string) => {
        for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
        if (!cond()) throw new Error(`timed out: ${what}`);
      };
      await until(() => net.abandoned.filter((h) => h === 'old').length >= 2, 'the old primary let go twice');
      expect(followed).toEqual([]);
      expect(follower.lastError).toMatch(/promised epoch 4, not following epoch 3/);
      expect(net.hellos.every((h) => h[PROMISED_EPOCH_PROPERTY] === 4)).toBe(true);
      serving.add('new');
      await until(() => followed.length > 0, 'the new primary followed');
      expect(followed).toEqual(['new:2']);
      expect(follower.primaryEpoch).toBe(4);
    } finally {
      await follower.stop();
    }
  });
});

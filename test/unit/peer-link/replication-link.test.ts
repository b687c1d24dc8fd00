// HA replication over the scripted link: a real ReplicationSource on a real broker
// model serves a real Follower through the peer-link seam, while the wire drops
// and partitions. Whatever the faults, the backup applies every change exactly
// once and in LSN order, and every change the primary settled to its publisher
// is one the backup had applied (the acknowledgement that let it settle).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { EpochHistory } from '../../../src/ha/epoch-history.js';
import { Follower } from '../../../src/replication/follower.js';
import { Props, REPLICATION_ADDRESS, type StreamMessage } from '../../../src/replication/protocol.js';
import { ReplicationSource } from '../../../src/replication/source.js';
import { msg, newBroker, prng, qs } from '../broker/helpers.js';
import { ScriptedNetwork, type Frame } from '../../helpers/scripted-link.js';

const HEARTBEAT_MS = 100;
const PRIMARY = { host: 'primary', port: 5672 };
const ADDRESS = 'primary:5672';
const log = pino({ level: 'silent' });

let dir: string;
beforeEach(() => {
  vi.useFakeTimers();
  dir = mkdtempSync(join(tmpdir(), 'tandem-peerlink-'));
});
afterEach(() => {
  vi.useRealTimers();
  rmSync(dir, { recursive: true, force: true });
});

/** A primary and one backup on a scripted network; `fault` scripts the wire. */
function cluster(seed: number, neighbours = false) {
  const rnd = prng(seed);
  const net = new ScriptedNetwork(seed, 5);
  const { broker, logged } = newBroker();
  broker.declareQueue('q', qs({ durable: true }));
  const source = new ReplicationSource({
    broker,
    defaultLevel: 'all',
    history: new EpochHistory(dir),
    heartbeatMs: HEARTBEAT_MS,
    log,
    retainCount: 100_000,
    retainBytes: 1 << 28,
    minReadyBackups: 1,
  });
  broker.log.attach(source);
  net.listen(ADDRESS, {
    properties: { [Props.instance]: 'primary' },
    // As the daemon and ha-manager serve the replication address.
    attach: (link) => {
      link.accept(REPLICATION_ADDRESS, { [Props.epoch]: broker.epoch });
      const h = link.hello;
      const stream = source.attach(link, { brokerId: String(h[Props.brokerId]), address: 'backup', lsn: Number(h[Props.lsn]), epoch: Number(h[Props.epoch]), journalLsn: Number(h[Props.journalLsn]) });
      return { flow: () => stream.pump(), closed: () => source.onLinkGone(stream) };
    },
  });

  // ha-brokers-url lists this backup itself, and another backup, which refuses the link.
  const endpoints = neighbours ? [{ host: 'self', port: 5672 }, { host: 'other', port: 5672 }, PRIMARY] : [PRIMARY];
  let refusals = 0;
  let selfAttaches = 0;
  net.listen('self:5672', { properties: { [Props.instance]: 'backup' }, attach: () => void selfAttaches++ });
  net.listen('other:5672', {
    properties: { [Props.instance]: 'other' },
    attach: (link) => {
      refusals++;
      link.refuse({ condition: 'tandem:ha:not-primary', description: 'this broker is catchup, not the primary' });
      return undefined;
    },
  });

  // The backup: applies in order, journals (a random sync delay), and tells its position.
  const applied: number[] = [];
  /** LSNs the backup's journal holds (its sync done): what an acknowledgement may cover. */
  const journaled = new Set<number>();
  const problems: string[] = [];
  let appliedThrough = broker.log.lsn;
  let ready = false;
  const follower = new Follower({
    endpoints,
    user: undefined,
    password: undefined,
    mechanism: 'ANONYMOUS',
    tls: undefined,
    brokerId: 'backup',
    instanceId: 'backup',
    replicate: 'all',
    heartbeatMs: HEARTBEAT_MS,
    log,
    dialer: net,
    position: () => ({ lsn: appliedThrough, epoch: 0, journalLsn: appliedThrough }),
    handle: (m: StreamMessage) => {
      if (m.kind === 'changes') {
        for (const e of m.entries ?? []) {
          if (e.lsn <= appliedThrough) problems.push(`LSN ${e.lsn} applied again or out of order (after ${appliedThrough})`);
          applied.push(e.lsn);
          appliedThrough = Math.max(appliedThrough, e.lsn);
        }
      }
      if (m.kind === 'snapshot-begin') problems.push(`a snapshot was sent (${m.reason}): a diff was expected`);
      if (m.kind === 'ready') ready = true;
      // Syncs overlap and finish in any order; acknowledgements follow them.
      const sync = Math.floor(rnd() * 3);
      const lsns = (m.entries ?? []).map((e) => e.lsn);
      const safe = new Promise<void>((resolve) =>
        setTimeout(() => {
          for (const l of lsns) journaled.add(l);
          resolve();
        }, sync),
      );
      return Promise.resolve({ safe });
    },
    onFollowing: () => undefined,
    onLost: () => {
      ready = false;
    },
    onFatal: (reason) => problems.push(`fatal: ${reason}`),
  });

  const published: number[] = [];
  const settled: number[] = [];
  const publish = () => {
    broker.publish('q', msg(`m${published.length}`, { durable: true }));
    const lsn = logged.at(-1)!.lsn;
    published.push(lsn);
    source.whenSafe(lsn, true, (err) => {
      if (err) problems.push(`settlement of ${lsn} failed: ${err.message}`);
      // Settled to the publisher: the backup's journal must hold it.
      else if (!journaled.has(lsn)) problems.push(`LSN ${lsn} settled before the backup journaled it`);
      settled.push(lsn);
    });
  };

  /** Publish `count` messages a few at a time while time passes; then let everything settle. */
  const run = async (count: number) => {
    follower.start();
    for (let step = 0; step < 10_000 && published.length < count; step++) {
      const burst = 1 + Math.floor(rnd() * 8);
      for (let i = 0; i < burst && published.length < count; i++) publish();
      await vi.advanceTimersByTimeAsync(Math.floor(rnd() * 20));
    }
    for (let step = 0; step < 2_000 && (settled.length < count || !ready); step++) await vi.advanceTimersByTimeAsync(50);
    await follower.stop();
    source.close();
  };

  return {
    net,
    run,
    applied,
    published,
    settled,
    problems,
    get selfAttaches() {
      return selfAttaches;
    },
    get refusals() {
      return refusals;
    },
    get ready() {
      return ready;
    },
  };
}

function expectNothingLostDuplicatedOrReordered(c: ReturnType<typeof cluster>): void {
  expect(c.problems).toEqual([]);
  // Every change, once, in order.
  expect(c.applied).toEqual(c.published);
  expect([...c.settled].sort((a, b) => a - b)).toEqual(c.published);
}

describe('HA replication over the scripted peer link', () => {
  it('with delays only: every change once, in order, settled after the backup has it', async () => {
    const c = cluster(1);
    await c.run(300);
    expectNothingLostDuplicatedOrReordered(c);
  });

  it('searching a brokers-url: skips itself, retries a refusing backup, follows the primary', async () => {
    const c = cluster(9, true);
    let drops = 0;
    c.net.onArrived = (f: Frame) => {
      // The primary goes twice mid-stream: each time the search starts over among all three.
      if (f.address === ADDRESS && f.dir === 's2c' && f.streamKind === 'changes' && Math.floor(c.applied.length / 100) > drops && drops < 2) {
        drops++;
        c.net.drop(ADDRESS);
      }
    };
    await c.run(300);
    expect(drops).toBe(2);
    expect(c.refusals).toBeGreaterThan(0);
    expect(c.selfAttaches).toBe(0);
    expectNothingLostDuplicatedOrReordered(c);
  });

  for (const seed of [2, 3, 4]) {
    it(`a partition during a batch: the backup refollows from its position (seed ${seed})`, async () => {
      const c = cluster(seed);
      // The primary is in the middle of sending the changes: nothing crosses for ten heartbeats.
      const partition = c.net.partitionAt(ADDRESS, 'changes', 3, 10 * HEARTBEAT_MS);
      await c.run(400);
      expect(partition.happened()).toBe(true);
      // The backup gave up on the silent link and followed again on a new connection.
      expect(c.net.dialled).toBeGreaterThan(1);
      expectNothingLostDuplicatedOrReordered(c);
    });
  }

  for (const [seed, when] of [
    [5, 'lost'],
    [6, 'delivered'],
    [7, 'lost'],
    [8, 'delivered'],
  ] as const) {
    it(`a drop just after an acknowledgement (${when} on the way) neither loses nor repeats (seed ${seed})`, async () => {
      const c = cluster(seed);
      // The ack never arrives (dropped as it is sent), or arrives and the connection goes right after.
      const drops = c.net.dropOn(ADDRESS, (f) => f.dir === 'c2s' && f.kind === 'disposition' && f.accepted === true, { every: 10, times: 3, when });
      await c.run(400);
      expect(drops.count()).toBe(3);
      expect(c.net.dialled).toBeGreaterThanOrEqual(4);
      expectNothingLostDuplicatedOrReordered(c);
    });
  }
});

// TandemAgent's decisions with fake brokers, processes and cluster: what monitor
// reports, when promote refuses and where it sends the score, what notify publishes.
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { TandemAgent, type AgentDeps } from '../../../src/agent/agent.js';
import type { BrokerProcess } from '../../../src/agent/broker-process.js';
import type { HaSnapshot, LocalStatus } from '../../../src/agent/brokers.js';
import { lagScore, type BrokerView } from '../../../src/agent/election.js';
import type { Cluster } from '../../../src/agent/pacemaker.js';
import { readParams } from '../../../src/agent/params.js';
import { brokerDir } from '../../cluster/helpers.js';

class FakeCluster implements Cluster {
  scores = new Map<string, number>();
  /** Private attributes by name, then node. */
  attrsByName = new Map<string, Map<string, string>>();
  pin: string | undefined;
  constructor(readonly me = 'node1') {}
  async promotedPin() {
    return this.pin;
  }
  totem: { tokenMs: number; consensusMs: number } | undefined;
  async totemTiming() {
    return this.totem;
  }
  attrs(name = 'tandem-position-broker'): Map<string, string> {
    let m = this.attrsByName.get(name);
    if (!m) this.attrsByName.set(name, (m = new Map()));
    return m;
  }
  async localNode() {
    return this.me;
  }
  async getScore(node = this.me) {
    return this.scores.get(node);
  }
  async setScore(score: number, node = this.me) {
    this.scores.set(node, score);
  }
  async deleteScore(node = this.me) {
    this.scores.delete(node);
  }
  async allScores() {
    return new Map(this.scores);
  }
  async awaitScore(node: string, score: number | undefined) {
    return this.scores.get(node) === score;
  }
  async publish(name: string, value: string) {
    this.attrs(name).set(this.me, value);
    return new Map(this.attrs(name));
  }
  async setPrivate(name: string, value: string) {
    this.attrs(name).set(this.me, value);
  }
  async published(name: string) {
    return new Map(this.attrs(name));
  }
  async unpublish(name: string) {
    this.attrs(name).delete(this.me);
  }
}

interface World {
  local: LocalStatus;
  pid: number | undefined;
  stale?: number;
  wasPrimary?: boolean;
  peers: BrokerView[];
  promoted: number;
  /** The probe timeout promote/monitor gave each peer address (undefined: the default). */
  timeouts?: Record<string, number | undefined>;
}

const b = brokerDir(5672);
// Three brokers (heartbeat 500 ms, from brokerDir), and the same settling alone.
const three = brokerDir(5672, [5672, 5673, 5674]);
const alone = brokerDir(5672, [5672, 5673, 5674], 'ha-min-ready-backups=0');
afterAll(() => {
  for (const d of [b, three, alone]) rmSync(d.dir, { recursive: true, force: true });
});
/** What the agents logged at warn. */
const warned: string[] = [];

function agentFor(world: World, cluster: FakeCluster, env: Record<string, string> = {}) {
  const fullEnv = {
    OCF_RESOURCE_INSTANCE: 'broker:0',
    OCF_RESKEY_config: b.conf,
    OCF_RESKEY_binary: '/bin/true',
    OCF_RESKEY_user: 'root',
    OCF_RESKEY_pidfile: b.pidfile,
    OCF_RESKEY_CRM_meta_clone_max: '3',
    OCF_RESKEY_CRM_meta_promoted_max: '1',
    OCF_RESKEY_CRM_meta_notify: 'true',
    ...env,
  };
  const proc = {
    pid: () => world.pid,
    stalePid: () => world.stale,
    wasPrimary: () => world.wasPrimary ?? false,
    markPrimary: (p: boolean) => (world.wasPrimary = p),
    forget: () => (world.stale = undefined),
    lastLogLine: () => 'last words',
  } as unknown as BrokerProcess;
  const deps: AgentDeps = {
    params: readParams(fullEnv),
    process: proc,
    cluster,
    log: { debug: () => undefined, info: () => undefined, warn: (m: string) => void warned.push(m), err: () => undefined },
    statusOf: async () => world.local,
    statusOfAll: async (_url, _credentials, _timeoutMs, timeoutFor) => {
      world.timeouts = Object.fromEntries(world.peers.map((p) => [p.address, timeoutFor?.(p.address)]));
      return world.peers;
    },
    promote: async (): Promise<HaSnapshot> => {
      world.promoted++;
      world.local = { kind: 'up', status: { state: 'recovering', epoch: 2, lsn: 10 } };
      return { state: 'recovering', epoch: 2, lsn: 10 };
    },
    lookupAccount: async () => ({ name: 'root', uid: 0, gid: 0, home: '/root' }),
    env: fullEnv,
  };
  return new TandemAgent(deps);
}

const up = (state: string, epoch: number, lsn: number): LocalStatus => ({ kind: 'up', status: { state, epoch, lsn } });
const v = (address: string, state: string, epoch: number, lsn: number): BrokerView => ({ address, state, epoch, lsn });

describe('agent logic - validate-all', () => {
  const world = (): World => ({ local: up('ready', 1, 5), pid: 10, peers: [], promoted: 0 });
  const validate = async (conf: string, totem: FakeCluster['totem']) => {
    const c = new FakeCluster();
    c.totem = totem;
    warned.length = 0;
    const r = await agentFor(world(), c, { OCF_RESKEY_config: conf }).validateAll();
    return { code: r.code, warned: [...warned] };
  };

  it('warns, with the reason, when backups give up on a silent primary later than corosync does', async () => {
    // 2 x 500 ms of heartbeats against token 300 + consensus 360.
    const slow = await validate(three.conf, { tokenMs: 300, consensusMs: 360 });
    expect(slow.code).toBe(0);
    expect(slow.warned).toHaveLength(1);
    expect(slow.warned[0]).toMatch(/2 x ha-heartbeat-interval \(1000 ms\) is longer than corosync's token \+ consensus \(300 \+ 360 ms\).*at most 330ms/);
    expect((await validate(three.conf, { tokenMs: 1000, consensusMs: 1200 })).warned).toEqual([]);
    // Without corosync (a node being set up) there is nothing to compare with.
    expect((await validate(three.conf, undefined)).warned).toEqual([]);
  });

  it('warns that ha-min-ready-backups=0 settles alone', async () => {
    const r = await validate(alone.conf, { tokenMs: 1000, consensusMs: 1200 });
    expect(r.code).toBe(0);
    expect(r.warned.join('\n')).toMatch(/ha-min-ready-backups = 0: the primary settles alone/);
  });
});

describe('agent logic - monitor', () => {
  it('maps broker states and process states to OCF codes', async () => {
    const c = new FakeCluster();
    const cases: Array<[Partial<World>, number, number?]> = [
      [{ local: up('ready', 1, 5), pid: 10 }, 0],
      [{ local: up('joining', 1, 5), pid: 10 }, 0],
      [{ local: up('catchup', 1, 5), pid: 10 }, 0],
      [{ local: up('active', 1, 5), pid: 10 }, 8],
      [{ local: up('recovering', 1, 5), pid: 10 }, 8],
      [{ local: { kind: 'down', why: 'refused' }, pid: undefined }, 7],
      [{ local: { kind: 'down', why: 'refused' }, pid: undefined, stale: 10 }, 1, 10_000],
      [{ local: { kind: 'down', why: 'refused' }, pid: undefined, stale: 10, wasPrimary: true }, 9, 10_000],
      [{ local: { kind: 'down', why: 'refused' }, pid: undefined, stale: 10, wasPrimary: true }, 7, 0],
      [{ local: { kind: 'down', why: 'timeout' }, pid: 10 }, 1],
      [{ local: { kind: 'down', why: 'timeout' }, pid: 10, wasPrimary: true }, 9],
      [{ local: up('standalone', 0, 0), pid: 10 }, 6],
      [{ local: { kind: 'no-ha', why: 'unknown operation' }, pid: 10 }, 6],
      [{ local: up('active', 1, 5), pid: undefined }, 1],
    ];
    for (const [w, code, interval] of cases) {
      const world = { peers: [], promoted: 0, local: up('ready', 1, 1), pid: 1, ...w } as World;
      const r = await agentFor(world, c, { OCF_RESKEY_CRM_meta_interval: String(interval ?? 10_000) }).run('monitor');
      expect(r.code, JSON.stringify(w)).toBe(code);
    }
  });

  it('keeps the score: primary 1001, ready by rank, catchup none, failed none', async () => {
    const c = new FakeCluster();
    const world: World = { local: up('active', 2, 50), pid: 10, peers: [], promoted: 0 };
    await agentFor(world, c).run('monitor');
    expect(c.scores.get('node1')).toBe(1001);
    world.local = up('ready', 2, 40);
    world.peers = [v('a', 'ready', 2, 40), v('b', 'ready', 2, 45), v('c', 'unreachable', 0, 0)];
    await agentFor(world, c).run('monitor');
    expect(c.scores.get('node1')).toBe(900);
    world.local = up('catchup', 2, 40);
    await agentFor(world, c).run('monitor');
    expect(c.scores.has('node1')).toBe(false);
    c.scores.set('node1', 1000);
    world.local = { kind: 'down', why: 'timeout' };
    await agentFor(world, c).run('monitor');
    expect(c.scores.has('node1'), 'an unhealthy instance drops its score').toBe(false);
  });
});

describe('agent logic - the primary scores its backups', () => {
  const primaryStatus = (backups: Array<{ id: string; state: string; lag: number }>): LocalStatus => ({
    kind: 'up',
    status: { state: 'active', epoch: 2, lsn: 5000, 'broker-id': 'b1', instance: 'i1', backups: backups.map((x) => ({ ...x, address: '10.0.0.9:40000', lsn: 0 })) },
  });

  it('sets each ready backup’s score from the lag it counts, removes a catchup one’s, leaves nodes without an identity alone', async () => {
    const c = new FakeCluster('node1');
    c.attrs('tandem-broker-broker').set('node1', 'b1 10.0.0.1:5672');
    c.attrs('tandem-broker-broker').set('node2', 'b2 10.0.0.2:5672');
    c.attrs('tandem-broker-broker').set('node3', 'b3 10.0.0.3:5672');
    c.scores.set('node3', 1000);
    c.scores.set('node4', 555); // no identity published: not the primary's to judge
    const world: World = { local: primaryStatus([{ id: 'b2', state: 'ready', lag: 5000 }, { id: 'b3', state: 'catchup', lag: 10 }]), pid: 10, peers: [], promoted: 0 };
    expect((await agentFor(world, c).run('monitor')).code).toBe(8);
    expect(c.scores.get('node1')).toBe(1001);
    expect(c.scores.get('node2')).toBe(lagScore(5000));
    expect(c.scores.has('node3'), 'a backup in catchup has no score').toBe(false);
    expect(c.scores.get('node4')).toBe(555);
    // It caught up: the next monitor raises it.
    world.local = primaryStatus([{ id: 'b2', state: 'ready', lag: 3 }, { id: 'b3', state: 'ready', lag: 0 }]);
    await agentFor(world, c).run('monitor');
    expect(c.scores.get('node2')).toBe(1000);
    expect(c.scores.get('node3')).toBe(1000);
    // Just promoted (recovering), the backups have not come back yet: their scores stay.
    world.local = { kind: 'up', status: { ...(primaryStatus([]) as { status: HaSnapshot }).status, state: 'recovering' } };
    await agentFor(world, c).run('monitor');
    expect(c.scores.get('node2')).toBe(1000);
    // A backup that left the primary (restarted, another data dir) loses its score.
    world.local = primaryStatus([{ id: 'b3', state: 'ready', lag: 0 }]);
    await agentFor(world, c).run('monitor');
    expect(c.scores.has('node2')).toBe(false);
  });

  it('each instance publishes its broker id and its own address in ha-brokers-url; stop clears it', async () => {
    const c = new FakeCluster('node2');
    const self: LocalStatus = { kind: 'up', status: { state: 'ready', epoch: 2, lsn: 40, 'broker-id': 'b2', instance: 'i2' } };
    const peers = [{ ...v('10.0.0.1:5672', 'active', 2, 40), instance: 'i1' }, { ...v('10.0.0.2:5672', 'ready', 2, 40), instance: 'i2' }];
    const world: World = { local: self, pid: 10, peers, promoted: 0 };
    await agentFor(world, c).run('monitor');
    expect(c.attrs('tandem-broker-broker').get('node2')).toBe('b2 10.0.0.2:5672');
    // In catchup the peers are not asked: the id is published alone until the address is known.
    const c2 = new FakeCluster('node2');
    await agentFor({ ...world, local: { kind: 'up', status: { ...self.status, state: 'catchup' } } }, c2).run('monitor');
    expect(c2.attrs('tandem-broker-broker').get('node2')).toBe('b2');
    await agentFor({ ...world, pid: undefined, local: { kind: 'down', why: 'refused' } }, c).run('stop');
    expect(c.attrs('tandem-broker-broker').has('node2')).toBe(false);
  });
});

describe('agent logic - promote', () => {
  it('promotes a ready backup that nobody is ahead of', async () => {
    const c = new FakeCluster();
    c.attrs().set('node2', 'ready:2:40');
    const world: World = { local: up('ready', 2, 40), pid: 10, peers: [v('a', 'ready', 2, 40), v('b', 'unreachable', 0, 0)], promoted: 0 };
    const r = await agentFor(world, c).run('promote');
    expect(r).toEqual({ code: 0 });
    expect(world.promoted).toBe(1);
    expect(c.scores.get('node1')).toBe(1001);
  });

  it('refuses, and hands the score over, when another node published a better position', async () => {
    const c = new FakeCluster();
    c.attrs().set('node1', 'ready:2:40');
    c.attrs().set('node3', 'ready:2:41');
    const world: World = { local: up('ready', 2, 40), pid: 10, peers: [], promoted: 0 };
    const r = await agentFor(world, c).run('promote');
    expect(r.code).toBe(1);
    expect(r.reason).toMatch(/node3 is further ahead/);
    expect(world.promoted).toBe(0);
    expect(c.scores.get('node3')).toBe(1000);
    expect(c.scores.get('node1')).toBe(1);
  });

  it('gives brokers no node claims (a lost node’s) a short probe timeout, the others the normal one', async () => {
    const c = new FakeCluster('node2');
    c.attrs('tandem-broker-broker').set('node2', 'b2 10.0.0.2:5672');
    c.attrs('tandem-broker-broker').set('node3', 'b3 10.0.0.3:5672');
    const world: World = { local: up('ready', 2, 40), pid: 10, peers: [v('10.0.0.1:5672', 'unreachable', 0, 0), v('10.0.0.2:5672', 'ready', 2, 40), v('10.0.0.3:5672', 'ready', 2, 40)], promoted: 0 };
    expect((await agentFor(world, c).run('promote')).code).toBe(0);
    expect(world.timeouts).toEqual({ '10.0.0.1:5672': 300, '10.0.0.2:5672': undefined, '10.0.0.3:5672': undefined });
    // Nothing published (a cold start before any monitor): nobody's timeout is shortened.
    const cold: World = { ...world, local: up('ready', 2, 40), promoted: 0 };
    await agentFor(cold, new FakeCluster('node2')).run('promote');
    expect(Object.values(cold.timeouts ?? {})).toEqual([undefined, undefined, undefined]);
  });

  it('promotes a ready backup that a location constraint pins the Promoted role to, even with another one ahead', async () => {
    const c = new FakeCluster('node1');
    c.attrs().set('node3', 'ready:2:41');
    c.pin = 'node1';
    const world: World = { local: up('ready', 2, 40), pid: 10, peers: [v('x:5672', 'ready', 2, 41)], promoted: 0 };
    expect(await agentFor(world, c).run('promote')).toEqual({ code: 0 });
    expect(world.promoted).toBe(1);
    // Pinned elsewhere, or pinned here but not ready: the usual rules.
    c.pin = 'node3';
    const world2: World = { local: up('ready', 2, 40), pid: 10, peers: [], promoted: 0 };
    expect((await agentFor(world2, c).run('promote')).code).toBe(1);
    c.pin = 'node1';
    const world3: World = { local: up('joining', 2, 40), pid: 10, peers: [v('x:5672', 'ready', 2, 41)], promoted: 0 };
    expect((await agentFor(world3, c).run('promote')).code).toBe(1);
    expect(world2.promoted + world3.promoted).toBe(0);
  });

  it('refuses when a broker it can reach is further ahead, even if nothing was published', async () => {
    const world: World = { local: up('ready', 2, 40), pid: 10, peers: [v('x:5672', 'ready', 2, 90)], promoted: 0 };
    const r = await agentFor(world, new FakeCluster()).run('promote');
    expect(r.code).toBe(1);
    expect(r.reason).toMatch(/x:5672 is further ahead/);
  });

  it('refuses while another primary is alive, a catchup broker, and a joining one beside a ready one', async () => {
    let world: World = { local: up('ready', 2, 40), pid: 10, peers: [v('p:5672', 'active', 2, 40)], promoted: 0 };
    let r = await agentFor(world, new FakeCluster()).run('promote');
    expect(r.code).toBe(1);
    expect(r.reason).toMatch(/live primary/);
    world = { local: up('catchup', 2, 40), pid: 10, peers: [], promoted: 0 };
    expect((await agentFor(world, new FakeCluster()).run('promote')).code).toBe(1);
    world = { local: up('joining', 2, 90), pid: 10, peers: [v('r:5672', 'ready', 2, 40)], promoted: 0 };
    r = await agentFor(world, new FakeCluster()).run('promote');
    expect(r.code).toBe(1);
    expect(r.reason).toMatch(/joining/);
    expect(world.promoted).toBe(0);
  });

  it('a cold start promotes the joining broker with the most data', async () => {
    const peers = [v('a', 'joining', 1, 70), v('b', 'joining', 1, 50), v('c', 'unreachable', 0, 0)];
    const best: World = { local: up('joining', 1, 70), pid: 10, peers, promoted: 0 };
    expect((await agentFor(best, new FakeCluster()).run('promote')).code).toBe(0);
    const worse: World = { local: up('joining', 1, 50), pid: 10, peers, promoted: 0 };
    expect((await agentFor(worse, new FakeCluster()).run('promote')).code).toBe(1);
  });
});

describe('agent logic - the promotion guard (issue 21)', () => {
  // Broker b was killed at LSN 11; a and c took 1,000 messages more and are down now.
  const stale = () => [v('a:5672', 'unreachable', 0, 0), v('b:5672', 'joining', 1, 11), v('c:5672', 'unreachable', 0, 0)];

  it('a stale joining broker whose peers do not answer is neither scored nor promoted, and the reason says what was seen', async () => {
    const c = new FakeCluster();
    c.scores.set('node1', 1000);
    const world: World = { local: up('joining', 1, 11), pid: 10, peers: stale(), promoted: 0 };
    expect((await agentFor(world, c).run('monitor')).code).toBe(0);
    expect(c.scores.get('node1'), 'no score while the brokers ahead may be down').toBeUndefined();
    const r = await agentFor(world, c).run('promote');
    expect(r.code).toBe(1);
    expect(r.reason).toMatch(/no majority of ha-brokers-url answered/);
    expect(r.reason).toMatch(/1 of 3 brokers/);
    expect(world.promoted).toBe(0);
  });

  it('nor while an answering broker is further ahead; that one is', async () => {
    const peers = [v('a:5672', 'unreachable', 0, 0), v('b:5672', 'joining', 1, 11), v('c:5672', 'joining', 1, 1018)];
    const behind: World = { local: up('joining', 1, 11), pid: 10, peers, promoted: 0 };
    const r = await agentFor(behind, new FakeCluster()).run('promote');
    expect(r.code).toBe(1);
    expect(r.reason).toMatch(/c:5672 shows a newer position/);
    const ahead: World = { local: up('joining', 1, 1018), pid: 10, peers, promoted: 0 };
    expect((await agentFor(ahead, new FakeCluster()).run('promote')).code).toBe(0);
  });
});

describe('agent logic - pre-promote steering', () => {
  const pre = (target: string) => ({
    OCF_RESKEY_CRM_meta_notify_type: 'pre',
    OCF_RESKEY_CRM_meta_notify_operation: 'promote',
    OCF_RESKEY_CRM_meta_notify_promote_uname: `${target} `,
    OCF_RESKEY_CRM_meta_notify_unpromoted_uname: 'node2 node3 ',
  });

  it('the last node to publish moves the score off a target that another candidate is ahead of', async () => {
    const c = new FakeCluster('node3');
    c.attrs().set('node2', 'ready:1:421');
    c.scores.set('node2', 1000);
    c.scores.set('node3', 1000);
    const world: World = { local: up('ready', 1, 434), pid: 10, peers: [], promoted: 0 };
    expect((await agentFor(world, c, pre('node2')).run('notify')).code).toBe(0);
    expect(c.attrs().get('node3')).toBe('ready:1:434');
    expect(c.scores.get('node2')).toBe(1);
    expect(c.scores.get('node3')).toBe(1000);
  });

  it('does not steer away from a target a location constraint pins the Promoted role to', async () => {
    const c = new FakeCluster('node3');
    c.attrs().set('node2', 'ready:1:421');
    c.scores.set('node2', 1000);
    c.pin = 'node2';
    await agentFor({ local: up('ready', 1, 434), pid: 10, peers: [], promoted: 0 }, c, pre('node2')).run('notify');
    expect(c.scores.get('node2')).toBe(1000);
  });

  it('waits briefly for the other candidates, which publish at the same moment', async () => {
    const c = new FakeCluster('node3');
    c.scores.set('node2', 1000);
    c.scores.set('node3', 1000);
    setTimeout(() => c.attrs().set('node2', 'ready:1:421'), 60);
    await agentFor({ local: up('ready', 1, 434), pid: 10, peers: [], promoted: 0 }, c, pre('node2')).run('notify');
    expect(c.scores.get('node2')).toBe(1);
  });

  it('leaves the scores alone when the target is level or ahead, or its position is not known yet', async () => {
    for (const [other, target] of [['ready:1:434', 'node2'], ['ready:1:500', 'node2']] as const) {
      const c = new FakeCluster('node3');
      c.attrs().set('node2', other);
      c.scores.set('node2', 1000);
      await agentFor({ local: up('ready', 1, 434), pid: 10, peers: [], promoted: 0 }, c, pre(target)).run('notify');
      expect(c.scores.get('node2')).toBe(1000);
    }
    const c = new FakeCluster('node3');
    c.scores.set('node2', 1000);
    await agentFor({ local: up('ready', 1, 434), pid: 10, peers: [], promoted: 0 }, c, pre('node2')).run('notify');
    expect(c.scores.get('node2')).toBe(1000);
  });
});

describe('agent logic - notify', () => {
  it('pre-promote publishes state, epoch and lsn; post-promote clears; a stopped broker clears', async () => {
    const c = new FakeCluster();
    const world: World = { local: up('ready', 3, 77), pid: 10, peers: [], promoted: 0 };
    const pre = { OCF_RESKEY_CRM_meta_notify_type: 'pre', OCF_RESKEY_CRM_meta_notify_operation: 'promote' };
    expect((await agentFor(world, c, pre).run('notify')).code).toBe(0);
    expect(c.attrs().get('node1')).toBe('ready:3:77');
    expect((await agentFor(world, c, { OCF_RESKEY_CRM_meta_notify_type: 'post', OCF_RESKEY_CRM_meta_notify_operation: 'promote' }).run('notify')).code).toBe(0);
    expect(c.attrs().has('node1')).toBe(false);
    c.attrs().set('node1', 'ready:1:1');
    world.local = { kind: 'down', why: 'refused' };
    world.pid = undefined;
    expect((await agentFor(world, c, pre).run('notify')).code).toBe(0);
    expect(c.attrs().has('node1')).toBe(false);
  });
});

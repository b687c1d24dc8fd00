// The resource agent's actions, as the OCF contract defines them. The shell
// agent (resource-agents/tandemd) only passes Pacemaker's call here; every
// action reads the real state first (pidfile and HA-STATUS, two independent
// probes), acts, and confirms the result before reporting success.
import { accessSync, constants, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  ConfigError,
  haIdentity,
  haLinkTls,
  hostPort,
  loadSettings,
  localAdminAddress,
  LOCK_FILE_NAME,
  readEpochHistory,
  type BrokerAddress,
  type LinkTls,
  type Settings,
} from './broker-facts.js';
import { isTandemd, type BrokerProcess, type Account } from './broker-process.js';
import type { HaSnapshot, LocalStatus } from './brokers.js';
import {
  aheadOfTarget,
  backupScores,
  betterCandidate,
  formatIdentity,
  formatPublished,
  parseIdentity,
  isPrimary,
  promotionVerdict,
  parsePublished,
  PRIMARY_SCORE,
  BEST_SCORE,
  promotionScore,
  type BrokerView,
  type Published,
} from './election.js';
import { fail, ok, Ocf, OcfError, type OcfResult } from './ocf.js';
import type { Cluster } from './pacemaker.js';
import { timingWarnings } from './timing.js';
import { actionBudgetMs, readNotification, type AgentParams, type Notification, type StartWait } from './params.js';

export interface AgentLog {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  err(msg: string): void;
}

/** What the agent needs from the outside world; unit tests pass fakes. */
export interface AgentDeps {
  params: AgentParams;
  process: BrokerProcess;
  cluster: Cluster;
  log: AgentLog;
  statusOf(address: BrokerAddress, timeoutMs: number): Promise<LocalStatus>;
  statusOfAll(
    brokersUrl: string,
    /** tls: for an amqps: URL, the CA (and client certificate) of ha-tls-*. */
    credentials: { user?: string; password?: string; external?: boolean; tls?: LinkTls },
    timeoutMs: number,
    timeoutFor?: (address: string) => number | undefined,
  ): Promise<BrokerView[]>;
  promote(address: BrokerAddress, timeoutMs: number): Promise<HaSnapshot>;
  lookupAccount(name: string): Promise<Account | undefined>;
  env: Record<string, string | undefined>;
}

/** The broker as both probes see it. */
export type Observation =
  | { role: 'stopped' }
  | { role: 'crashed'; pid: number; wasPrimary: boolean } // pidfile left behind, process gone
  | { role: 'foreign'; status: LocalStatus } // something answers, but not our process
  | { role: 'hung'; pid: number; wasPrimary: boolean; why: string } // our process, no answer
  | { role: 'no-ha'; pid: number; why: string }
  | { role: 'error'; pid: number; why: string }
  | { role: 'standalone' | 'backup' | 'primary'; pid: number; status: HaSnapshot };

interface Validated {
  settings: Settings;
  address: BrokerAddress;
  args: string[];
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const BACKUP_STATES = ['joining', 'catchup', 'ready'];
const reached: Record<StartWait, string[]> = { joining: BACKUP_STATES, catchup: ['catchup', 'ready'], ready: ['ready'] };
const PEER_TIMEOUT_MS = 2000;
const PROMOTE_PEER_TIMEOUT_MS = 1000;
/**
 * In promote, for a broker of ha-brokers-url that no node of the cluster claims as its
 * own (its node is gone: attrd drops a lost node's attributes): enough for a live broker
 * on a LAN to answer, without waiting a second for a host that has lost power.
 */
const UNCLAIMED_PEER_TIMEOUT_MS = 300;
/** How long pre-promote waits for the other candidates' positions (they publish at the same moment). */
const STEER_GATHER_MS = 250;
/** How long pre-promote waits for a score it moved to reach the CIB (so Pacemaker sees it before it promotes). */
const STEER_WAIT_MS = 2000;

/**
 * Per-address probe timeouts for promote: a broker whose address a node of the cluster
 * published keeps the normal timeout, any other gets UNCLAIMED_PEER_TIMEOUT_MS. With no
 * published address at all (a cold start before the first monitors, or no cluster) none is shortened.
 */
function unclaimedTimeouts(identities: Map<string, string> | undefined): ((address: string) => number | undefined) | undefined {
  const claimed = new Set<string>();
  for (const value of identities?.values() ?? []) {
    const address = parseIdentity(value)?.address;
    if (address) claimed.add(address);
  }
  if (claimed.size === 0) return undefined;
  return (address) => (claimed.has(address) ? undefined : UNCLAIMED_PEER_TIMEOUT_MS);
}

const brokerIdOf = (s: HaSnapshot): string | undefined => (typeof s['broker-id'] === 'string' && s['broker-id'] ? s['broker-id'] : undefined);
const LOCAL_TIMEOUT_MS = 3000;

export class TandemAgent {
  private readonly p: AgentParams;
  private readonly log: AgentLog;
  // Deadlines on the monotonic clock (performance.now()): a wall-clock step during an action
  // must not spend or lengthen its budget. Not util/monotonic-clock.ts: the agent's room has one door.
  private readonly started = performance.now();

  constructor(private readonly deps: AgentDeps) {
    this.p = deps.params;
    this.log = deps.log;
  }

  private get positionAttribute(): string {
    return `tandem-position-${this.p.resource}`;
  }

  /** Private node attribute naming the broker each node runs: "<broker-id> <host:port in ha-brokers-url>". */
  private get identityAttribute(): string {
    return `tandem-broker-${this.p.resource}`;
  }

  /** Time left of this action's own budget (its timeout minus a margin). */
  private remainingMs(): number {
    return Math.max(0, actionBudgetMs(this.p) - (performance.now() - this.started));
  }

  // ------------------------------------------------------------ validate-all

  /** Missing pieces are OCF_ERR_INSTALLED (this node), wrong settings OCF_ERR_CONFIGURED (everywhere). */
  async validate(): Promise<Validated> {
    const p = this.p;
    try {
      accessSync(p.binary, constants.X_OK);
    } catch {
      throw new OcfError(Ocf.errInstalled, `${p.binary} is missing or not executable (parameter binary)`);
    }
    if (!existsSync(p.config)) throw new OcfError(Ocf.errInstalled, `config file ${p.config} not found (parameter config)`);
    const overrides: Record<string, unknown> = {};
    if (p.dataDir) overrides.dataDir = p.dataDir;
    if (p.port !== undefined) overrides.port = String(p.port);
    if (p.brokersUrl) overrides.haBrokersUrl = p.brokersUrl;
    let settings: Settings;
    try {
      settings = loadSettings(overrides, p.config);
    } catch (err) {
      if (err instanceof ConfigError) throw new OcfError(Ocf.errConfigured, err.message);
      throw err;
    }
    if (!settings.haCluster) throw new OcfError(Ocf.errConfigured, `${p.config} lacks ha-cluster=yes: Pacemaker manages clustered brokers only`);
    if (settings.listenPlain && settings.port === 0) throw new OcfError(Ocf.errConfigured, 'port 0 (any free port) cannot be used in a cluster: set port');
    if (!settings.listenPlain && settings.tlsPort === 0) throw new OcfError(Ocf.errConfigured, 'tls-port 0 (any free port) cannot be used in a cluster: set tls-port');
    const c = p.clone;
    if (c.isClone && !c.promotable) throw new OcfError(Ocf.errConfigured, 'the resource must be a promotable clone (pcs resource create ... promotable)');
    if (c.promotable && !c.notify) throw new OcfError(Ocf.errConfigured, 'the promotable clone needs notify=true: promotion re-checks positions published in pre-promote');
    if (c.promotable && c.promotedMax !== undefined && c.promotedMax > 1) throw new OcfError(Ocf.errConfigured, 'promoted-max must be 1: a cluster has one primary');
    let address: BrokerAddress;
    try {
      address = localAdminAddress(settings);
    } catch (err) {
      if (err instanceof ConfigError) throw new OcfError(Ocf.errConfigured, err.message);
      throw err;
    }
    const args = ['--config', p.config];
    if (p.dataDir) args.push('--data-dir', p.dataDir);
    if (p.port !== undefined) args.push('--port', String(p.port));
    if (p.brokersUrl) args.push('--ha-brokers-url', p.brokersUrl);
    return { settings, address, args };
  }

  /** The account tandemd runs as; looked up only by the actions that start it (getent costs a process). */
  private async account(): Promise<Account> {
    const p = this.p;
    const account = await this.deps.lookupAccount(p.user);
    if (!account) throw new OcfError(Ocf.errInstalled, `user ${p.user} does not exist (parameter user)`);
    const uid = process.getuid?.();
    if (uid !== undefined && uid !== 0 && uid !== account.uid) throw new OcfError(Ocf.errPerm, `only root can run tandemd as ${p.user}`);
    return account;
  }

  async validateAll(): Promise<OcfResult> {
    const v = await this.validate();
    await this.account();
    // Here only, not in every action's validate(): it runs corosync's tools.
    for (const warning of timingWarnings(v.settings, await this.deps.cluster.totemTiming())) this.log.warn(`validate-all: ${warning}`);
    return ok();
  }

  // ------------------------------------------------------------ observation

  async observe(v: Validated): Promise<Observation> {
    const proc = this.deps.process;
    const pid = proc.pid();
    const status = await this.deps.statusOf(v.address, Math.min(LOCAL_TIMEOUT_MS, Math.max(500, this.remainingMs())));
    if (pid === undefined) {
      if (status.kind !== 'down') return { role: 'foreign', status };
      const stale = proc.stalePid();
      return stale !== undefined ? { role: 'crashed', pid: stale, wasPrimary: proc.wasPrimary() } : { role: 'stopped' };
    }
    switch (status.kind) {
      case 'down':
        return { role: 'hung', pid, wasPrimary: proc.wasPrimary(), why: status.why };
      case 'no-ha':
        return { role: 'no-ha', pid, why: status.why };
      case 'error':
        return { role: 'error', pid, why: status.why };
      case 'up': {
        const s = status.status.state;
        const role = isPrimary(s) ? 'primary' : BACKUP_STATES.includes(s) ? 'backup' : s === 'standalone' ? 'standalone' : 'error';
        if (role === 'error') return { role, pid, why: `unknown HA state '${s}'` };
        return { role, pid, status: status.status };
      }
    }
  }

  /** The OCF code monitor reports for an observation. */
  monitorCode(o: Observation, probe: boolean, v: Validated): OcfResult {
    const where = hostPort(v.address.host, v.address.port);
    switch (o.role) {
      case 'stopped':
        return { code: Ocf.notRunning };
      case 'crashed':
        // A probe after a reboot or a cleanup finds nothing running: that is "stopped".
        if (probe) return { code: Ocf.notRunning };
        return fail(o.wasPrimary ? Ocf.failedPromoted : Ocf.errGeneric, `tandemd (pid ${o.pid}) died${o.wasPrimary ? ' while primary' : ''}: ${this.deps.process.lastLogLine()}`);
      case 'foreign':
        return fail(Ocf.errGeneric, `a broker not started by this agent answers on ${where} (no live pid in ${this.p.pidfile})`);
      case 'hung':
        return fail(o.wasPrimary ? Ocf.failedPromoted : Ocf.errGeneric, `tandemd (pid ${o.pid}) runs but does not answer on ${where}: ${o.why}`);
      case 'no-ha':
        return fail(Ocf.errConfigured, `tandemd on ${where} has no HA (HA-STATUS: ${o.why})`);
      case 'error':
        return fail(Ocf.errGeneric, `tandemd on ${where}: ${o.why}`);
      case 'standalone':
        return fail(Ocf.errConfigured, `tandemd on ${where} runs standalone: set ha-cluster=yes in ${this.p.config}`);
      case 'backup':
        return { code: Ocf.success };
      case 'primary':
        return { code: Ocf.runningPromoted };
    }
  }

  // ------------------------------------------------------------ scores

  private async bestEffort(what: string, fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (err) {
      this.log.warn(`${what}: ${(err as Error).message}`);
    }
  }

  private async applyScore(score: number | null): Promise<void> {
    const c = this.deps.cluster;
    await this.bestEffort('promotion score', async () => {
      const current = await c.getScore();
      if (score === null) {
        if (current !== undefined) {
          await c.deleteScore();
          this.log.info(`promotion score ${current} removed`);
        }
      } else if (current !== score) {
        await c.setScore(score);
        this.log.info(`promotion score ${current ?? 'none'} -> ${score}`);
      }
    });
  }

  private async peers(v: Validated, timeoutMs = PEER_TIMEOUT_MS, timeoutFor?: (address: string) => number | undefined): Promise<BrokerView[] | undefined> {
    try {
      const s = v.settings;
      const credentials = { ...haIdentity(s), tls: haLinkTls(s) };
      return await this.deps.statusOfAll(s.haBrokersUrl!, credentials, timeoutMs, timeoutFor);
    } catch (err) {
      this.log.warn(`cannot ask the brokers of ha-brokers-url: ${(err as Error).message}`);
      return undefined;
    }
  }

  /**
   * Keep promotion scores in step with what monitor saw: this instance's own and, on
   * the primary, those of the backups it streams to (it counts their lag itself).
   */
  private async score(o: Observation, v: Validated): Promise<void> {
    if (o.role === 'primary') {
      await Promise.all([this.applyScore(PRIMARY_SCORE), this.scoreBackups(o.status, v)]);
      return;
    }
    if (o.role !== 'backup') return this.applyScore(null);
    const s = o.status;
    const [peers, me, identities] = await Promise.all([
      s.state === 'ready' || s.state === 'joining' ? this.peers(v) : undefined,
      this.deps.cluster.localNode().catch(() => undefined),
      this.identities(),
    ]);
    await Promise.all([
      this.applyScore(promotionScore({ state: s.state, epoch: s.epoch, lsn: s.lsn, id: brokerIdOf(s), history: readEpochHistory(s['epoch-history']) }, peers)),
      me !== undefined && identities !== undefined ? this.publishIdentity(s, identities.get(me), async () => peers) : undefined,
    ]);
  }

  /** Every node's published identity (raw values), or undefined when attrd cannot be asked. */
  private async identities(): Promise<Map<string, string> | undefined> {
    try {
      return await this.deps.cluster.published(this.identityAttribute);
    } catch (err) {
      this.log.warn(`cannot read the brokers' identities: ${(err as Error).message}`);
      return undefined;
    }
  }

  /**
   * Publish this broker's id and its address in ha-brokers-url (found by asking every
   * broker: the one answering with our process instance is us) unless attrd has them.
   * The primary maps the backups it lists (by broker id) to nodes with it; promote
   * tells brokers on nodes still in the cluster from those on lost nodes.
   */
  private async publishIdentity(s: HaSnapshot, current: string | undefined, peers: () => Promise<BrokerView[] | undefined>): Promise<void> {
    const id = brokerIdOf(s);
    if (!id) return;
    const known = current !== undefined ? parseIdentity(current) : undefined;
    if (known?.id === id && known.address) return;
    const instance = typeof s.instance === 'string' ? s.instance : undefined;
    const address = instance ? (await peers())?.find((b) => b.instance === instance)?.address : undefined;
    const value = formatIdentity({ id, address: address ?? (known?.id === id ? known.address : undefined) });
    if (value === current) return;
    await this.bestEffort('publishing the broker identity', async () => {
      await this.deps.cluster.setPrivate(this.identityAttribute, value);
      this.log.info(`published broker identity ${value}`);
    });
  }

  /**
   * The primary's monitor scores the backups it knows (like PAF's pgsqlms does for its
   * standbys): each node whose published broker id is one of its ready streams gets the
   * score of the lag the primary counts for it; a node whose broker is in catchup, or
   * not attached, loses its score. Only changed scores are written.
   */
  private async scoreBackups(s: HaSnapshot, v: Validated): Promise<void> {
    // Just promoted, the primary waits for the backups that were ready to come back: their
    // scores stay as they were rather than be dropped now and written again a monitor later.
    if (s.state === 'recovering') return;
    const c = this.deps.cluster;
    await this.bestEffort('scoring the backups', async () => {
      const [me, identities, current] = await Promise.all([c.localNode(), c.published(this.identityAttribute), c.allScores()]);
      const ids = new Map<string, string>();
      for (const [node, value] of identities) {
        const identity = node === me ? undefined : parseIdentity(value);
        if (identity) ids.set(node, identity.id);
      }
      const streams = (s.backups ?? []).flatMap((b) => (typeof b.id === 'string' ? [{ id: b.id, state: String(b.state), lag: Number(b.lag) }] : []));
      const wanted = backupScores(streams, ids);
      await Promise.all([
        this.publishIdentity(s, identities.get(me), () => this.peers(v)),
        ...[...wanted].map(async ([node, score]) => {
          const now = current.get(node);
          if (score === null && now !== undefined) {
            await c.deleteScore(node);
            this.log.info(`promotion score of ${node} ${now} removed: its broker is not a ready backup of this primary`);
          } else if (score !== null && now !== score) {
            await c.setScore(score, node);
            this.log.info(`promotion score of ${node} ${now ?? 'none'} -> ${score}`);
          }
        }),
      ]);
    });
  }

  // ------------------------------------------------------------ monitor

  async monitor(): Promise<OcfResult> {
    const probe = this.p.intervalMs === 0;
    let v: Validated;
    try {
      v = await this.validate();
    } catch (err) {
      // A probe on a node without tandem (or its config) finds it "not running" there.
      if (err instanceof OcfError && probe && this.deps.process.pid() === undefined) return { code: Ocf.notRunning };
      throw err;
    }
    const o = await this.observe(v);
    const r = this.monitorCode(o, probe, v);
    if (o.role === 'primary') this.deps.process.markPrimary(true);
    if (r.code === Ocf.notRunning && o.role === 'crashed') this.deps.process.forget();
    await this.score(o, v);
    const state = 'status' in o && o.role !== 'foreign' ? o.status.state : o.role;
    this.log.debug(`${probe ? 'probe' : 'monitor'}: ${state} (pid ${'pid' in o ? o.pid : '-'})`);
    return r;
  }

  // ------------------------------------------------------------ start

  async start(): Promise<OcfResult> {
    const v = await this.validate();
    const o = await this.observe(v);
    switch (o.role) {
      case 'backup':
        this.log.info(`already running as a backup (${o.status.state}, pid ${o.pid})`);
        return ok();
      case 'primary':
        return fail(Ocf.errGeneric, `tandemd (pid ${o.pid}) already runs as the primary; start only makes backups`);
      case 'crashed':
        this.log.warn(`tandemd (pid ${o.pid}) had died; starting it again`);
        this.deps.process.forget();
        break;
      case 'stopped':
        break;
      default:
        return this.monitorCode(o, false, v);
    }
    return this.startBackup(v);
  }

  /** Run tandemd (which always starts as a backup in a cluster) and wait for the start_wait state. */
  private async startBackup(v: Validated): Promise<OcfResult> {
    const proc = this.deps.process;
    await this.bestEffort('promotion score', () => this.deps.cluster.deleteScore());
    const account = await this.account();
    this.clearStaleLock(v.settings.dataDir);
    const pid = await proc.start(this.p.binary, v.args, account, v.settings.dataDir);
    this.log.info(`started tandemd (pid ${pid}) as ${account.name}: ${this.p.binary} ${v.args.join(' ')}`);
    let last = 'no answer yet';
    while (this.remainingMs() > 0) {
      const o = await this.observe(v);
      if (o.role === 'backup' && reached[this.p.startWait].includes(o.status.state)) {
        this.log.info(`tandemd (pid ${pid}) is ${o.status.state}`);
        return ok();
      }
      if ((o.role === 'crashed' || o.role === 'stopped') && !proc.childRunning()) {
        proc.forget();
        return fail(Ocf.errGeneric, `tandemd exited during start (${proc.childExit ?? 'gone'}): ${proc.lastLogLine()}`);
      }
      if (o.role === 'standalone' || o.role === 'no-ha') {
        await proc.stop(pid, this.remainingMs(), (m) => this.log.warn(m));
        proc.forget();
        return this.monitorCode(o, false, v);
      }
      if (o.role === 'primary') return fail(Ocf.errGeneric, `tandemd (pid ${pid}) came up as the primary; it must start as a backup`);
      last = o.role === 'backup' ? o.status.state : o.role === 'hung' ? 'not answering' : o.role;
      await sleep(250);
    }
    return fail(Ocf.errGeneric, `tandemd (pid ${pid}) did not reach ${this.p.startWait} within ${Math.round(actionBudgetMs(this.p) / 1000)}s (last: ${last})`);
  }

  /**
   * tandemd's data-dir lock names its owner by PID. After a power loss the node boots
   * with other processes on those PIDs, and tandemd would take the lock for held. No
   * tandemd of ours runs (start checked), so a lock whose PID is not a live tandemd is stale.
   */
  private clearStaleLock(dataDir: string): void {
    const file = join(dataDir, LOCK_FILE_NAME);
    let pid: number;
    try {
      pid = Number.parseInt(readFileSync(file, 'utf8').trim(), 10);
    } catch {
      return;
    }
    if (Number.isInteger(pid) && pid > 0 && isTandemd(pid)) return;
    this.log.warn(`removing the stale data directory lock ${file} (pid ${pid} is not a running tandemd)`);
    rmSync(file, { force: true });
  }

  // ------------------------------------------------------------ stop

  async stop(): Promise<OcfResult> {
    const proc = this.deps.process;
    await this.bestEffort('promotion score', () => this.deps.cluster.deleteScore());
    await Promise.all([
      this.bestEffort('clearing the published position', () => this.deps.cluster.unpublish(this.positionAttribute)),
      this.bestEffort('clearing the broker identity', () => this.deps.cluster.unpublish(this.identityAttribute)),
    ]);
    const pid = proc.pid();
    if (pid === undefined) {
      proc.forget();
      this.log.info('not running');
      return ok();
    }
    await this.stopProcess(pid, this.remainingMs());
    return ok();
  }

  private async stopProcess(pid: number, budgetMs: number): Promise<void> {
    const grace = Math.min(this.p.stopWaitMs ?? budgetMs, budgetMs);
    const how = await this.deps.process.stop(pid, Math.max(0, grace - 1000), (m) => this.log.warn(m));
    this.deps.process.forget();
    this.log.info(`tandemd (pid ${pid}) stopped${how === 'killed' ? ' with SIGKILL' : ''}`);
  }

  // ------------------------------------------------------------ promote

  async promote(): Promise<OcfResult> {
    const v = await this.validate();
    const o = await this.observe(v);
    if (o.role === 'primary') {
      this.log.info(`already the primary (${o.status.state})`);
      this.deps.process.markPrimary(true);
      await this.applyScore(PRIMARY_SCORE);
      return ok();
    }
    if (o.role !== 'backup') {
      const r = this.monitorCode(o, false, v);
      return fail(r.code === Ocf.notRunning || r.code === Ocf.success ? Ocf.errGeneric : r.code, r.reason ?? `cannot promote: tandemd is ${o.role}`);
    }
    const self = o.status;
    if (self.state === 'catchup') return fail(Ocf.errGeneric, 'refusing to promote a broker in catchup: its copy of the primary is incomplete');
    // Short timeouts: the node that just died is among them, and failover time counts.
    const [peers, published, pinnedHere] = await Promise.all([
      this.identities().then((ids) => this.peers(v, PROMOTE_PEER_TIMEOUT_MS, unclaimedTimeouts(ids))),
      this.publishedPositions(self),
      this.pinnedTo().then(async (node) => node !== undefined && node === (await this.deps.cluster.localNode().catch(() => undefined))),
    ]);
    const primary = peers?.find((b) => isPrimary(b.state));
    if (primary) return fail(Ocf.errGeneric, `refusing to promote: ${primary.address} is a live primary (${primary.state}); that would be a split brain`);
    const verdict = promotionVerdict({ state: self.state, epoch: self.epoch, lsn: self.lsn, history: readEpochHistory(self['epoch-history']) }, peers);
    if (!verdict.allowed) return fail(Ocf.errGeneric, `refusing to promote: ${verdict.checked}`);
    this.log.info(`promotion guard: ${verdict.checked}`);
    // A constraint requires the Promoted role here (a planned move): refusing could only
    // repeat until the operator gives up, with no primary meanwhile. A ready backup has
    // every change a client was told is done, so it is promoted even if another is ahead.
    if (pinnedHere && self.state === 'ready') {
      this.log.info('a location constraint requires the Promoted role on this node: not comparing positions with the other backups');
      return this.promoteNow(v, self);
    }
    // Two sources: what every node published in pre-promote (names the node, so the
    // score can follow) and what the brokers say now.
    const better = betterCandidate(self, published);
    const reachable = (peers ?? []).filter((b) => b.state !== 'unreachable').map((b) => ({ ...b, node: b.address }));
    const ahead = better ?? betterCandidate(self, reachable);
    if (ahead) {
      // The node to hand the score to: the one named, or one that published the same position.
      const node = better?.node ?? published.find((p) => p.epoch === ahead.epoch && p.lsn === ahead.lsn)?.node;
      if (node) {
        await this.bestEffort('moving the promotion score', async () => {
          await Promise.all([this.deps.cluster.setScore(BEST_SCORE, node), this.deps.cluster.setScore(1)]);
        });
      }
      return fail(
        Ocf.errGeneric,
        `refusing to promote: ${node ?? `broker ${ahead.node}`} is further ahead (${ahead.state}, epoch ${ahead.epoch} lsn ${ahead.lsn} > epoch ${self.epoch} lsn ${self.lsn})${node ? '; promotion score moved there' : ''}`,
      );
    }
    return this.promoteNow(v, self);
  }

  /** The node a location constraint pins the Promoted role to, if any (undefined also when the CIB cannot be read). */
  private async pinnedTo(): Promise<string | undefined> {
    try {
      return await this.deps.cluster.promotedPin();
    } catch (err) {
      this.log.debug(`cannot read the location constraints: ${(err as Error).message}`);
      return undefined;
    }
  }

  /** HA-PROMOTE, then wait until the broker reports itself primary. */
  private async promoteNow(v: Validated, self: HaSnapshot): Promise<OcfResult> {
    let result: HaSnapshot;
    try {
      result = await this.deps.promote(v.address, Math.max(1000, this.remainingMs()));
    } catch (err) {
      return fail(Ocf.errGeneric, `the broker refused promotion: ${(err as Error).message}`);
    }
    this.log.info(`promoted at epoch ${self.epoch} lsn ${self.lsn}: now ${result.state}`);
    while (this.remainingMs() > 0) {
      const now = await this.observe(v);
      if (now.role === 'primary') {
        this.deps.process.markPrimary(true);
        // A backup's score is never PRIMARY_SCORE: set it without reading it first.
        await this.bestEffort('promotion score', () => this.deps.cluster.setScore(PRIMARY_SCORE));
        return ok();
      }
      if (now.role !== 'backup') return this.monitorCode(now, false, v);
      await sleep(50);
    }
    return fail(Ocf.errGeneric, 'the broker accepted promotion but never reported itself primary');
  }

  /** Under Pacemaker (notify=true): the positions the other nodes published in pre-promote. */
  private async publishedPositions(self: HaSnapshot): Promise<Published[]> {
    if (!this.p.clone.notify) {
      this.log.info('not a notify-enabled clone: no published positions to compare');
      return [];
    }
    const c = this.deps.cluster;
    let me: string;
    let values: Map<string, string>;
    try {
      me = await c.localNode();
      values = await c.published(this.positionAttribute);
    } catch (err) {
      // No cluster to ask (crm_resource --force-promote by hand): the brokers were compared directly.
      this.log.warn(`cannot read the positions published for promotion: ${(err as Error).message}`);
      return [];
    }
    const published: Published[] = [];
    for (const [node, value] of values) {
      if (node === me) continue;
      const pos = parsePublished(node, value);
      if (pos) published.push(pos);
    }
    this.log.debug(`positions: self ${self.state}:${self.epoch}:${self.lsn}; ${published.map((x) => `${x.node}=${x.state}:${x.epoch}:${x.lsn}`).join(' ') || 'none published'}`);
    return published;
  }

  // ------------------------------------------------------------ demote

  /** A primary cannot become a backup in place: stop it and start it again as a backup. */
  async demote(): Promise<OcfResult> {
    const v = await this.validate();
    const o = await this.observe(v);
    switch (o.role) {
      case 'backup':
        this.log.info(`already a backup (${o.status.state})`);
        this.deps.process.markPrimary(false);
        return ok();
      case 'stopped':
      case 'crashed':
        this.deps.process.forget();
        return this.startBackup(v);
      case 'foreign':
        return this.monitorCode(o, false, v);
      default:
        await this.bestEffort('promotion score', () => this.deps.cluster.deleteScore());
        this.log.info(`demoting: restarting tandemd (pid ${o.pid}) as a backup`);
        await this.stopProcess(o.pid, Math.floor(this.remainingMs() * 0.6));
        return this.startBackup(v);
    }
  }

  // ------------------------------------------------------------ notify

  async notify(): Promise<OcfResult> {
    const n = readNotification(this.deps.env);
    this.log.debug(`notify: ${n.type}-${n.operation} (promote: ${n.promoteNodes.join(' ') || '-'})`);
    if (n.operation !== 'promote') return ok();
    if (n.type === 'pre') {
      let v: Validated;
      try {
        v = await this.validate();
      } catch (err) {
        this.log.warn(`pre-promote: ${(err as Error).message}`);
        return ok();
      }
      const o = await this.observe(v);
      if (o.role !== 'backup' && o.role !== 'primary') {
        // Nothing to offer: make sure no position from an earlier round speaks for this node.
        await this.bestEffort('clearing the published position', () => this.deps.cluster.unpublish(this.positionAttribute));
        return ok();
      }
      const value = formatPublished(o.status.state, o.status);
      let positions: Map<string, string> | undefined;
      await this.bestEffort('publishing the position', async () => {
        positions = await this.deps.cluster.publish(this.positionAttribute, value, Math.max(1000, this.remainingMs()));
        this.log.info(`published position ${value}`);
      });
      if (positions) await this.steerPromotion(positions, n);
    } else if (n.type === 'post') {
      await this.bestEffort('clearing the published position', () => this.deps.cluster.unpublish(this.positionAttribute));
    }
    return ok();
  }

  /**
   * Pre-promote, after publishing: if the positions published so far show a candidate
   * strictly ahead of the node Pacemaker is about to promote, move the promotion score
   * to it now, and return only once the CIB has the change. Pacemaker then aborts the
   * transition before it runs the promote and plans the better node's promotion; a
   * refused promote would instead count as a failure and restart the refusing broker
   * (Pacemaker's recovery of a failed promote), which cost about 2 s of failover in the
   * lab. The notifications run at once on every node, so each waits briefly for the
   * other candidates' positions (when Pacemaker runs them one after another, under
   * load, the last one sees them all); should Pacemaker promote the old target
   * anyway, promote still re-checks and refuses.
   */
  private async steerPromotion(positions: Map<string, string>, n: Notification): Promise<void> {
    const target = n.promoteNodes[0];
    if (!target || n.promoteNodes.length !== 1) return;
    const candidates = new Set([...n.unpromotedNodes, ...n.startNodes, target].filter((x) => !n.stopNodes.includes(x)));
    const deadline = performance.now() + Math.min(STEER_GATHER_MS, this.remainingMs());
    while ([...candidates].some((node) => !positions.has(node)) && performance.now() < deadline) {
      await sleep(25);
      try {
        positions = await this.deps.cluster.published(this.positionAttribute);
      } catch {
        break;
      }
    }
    const published = [...positions].flatMap(([node, value]) => parsePublished(node, value) ?? []);
    const ahead = aheadOfTarget(target, published, candidates);
    this.log.info(
      `pre-promote of ${target}: candidates ${[...candidates].join(' ')}; positions ${published.map((p) => `${p.node}=${formatPublished(p.state, p)}`).join(' ')}${ahead ? '' : '; nobody ahead of the target'}`,
    );
    if (!ahead) return;
    if ((await this.pinnedTo()) === target) {
      this.log.info(`pre-promote: a location constraint requires the Promoted role on ${target}: leaving the scores alone`);
      return;
    }
    const t = published.find((p) => p.node === target)!;
    this.log.info(
      `pre-promote: ${ahead.node} (${formatPublished(ahead.state, ahead)}) is ahead of ${target} (${formatPublished(t.state, t)}): moving the promotion score to ${ahead.node}`,
    );
    const c = this.deps.cluster;
    await this.bestEffort('moving the promotion score', async () => {
      await Promise.all([c.setScore(BEST_SCORE, ahead.node), c.setScore(1, target)]);
      if (!(await c.awaitScore(target, 1, Math.min(STEER_WAIT_MS, this.remainingMs())))) this.log.warn(`the score of ${target} did not reach the CIB within ${STEER_WAIT_MS} ms`);
    });
  }

  // ------------------------------------------------------------ dispatch

  async run(action: string): Promise<OcfResult> {
    try {
      switch (action) {
        case 'start':
          return await this.start();
        case 'stop':
          return await this.stop();
        case 'monitor':
          return await this.monitor();
        case 'promote':
          return await this.promote();
        case 'demote':
          return await this.demote();
        case 'notify':
          return await this.notify();
        case 'validate-all':
          return await this.validateAll();
        default:
          return fail(Ocf.errUnimplemented, `action ${action} is not implemented`);
      }
    } catch (err) {
      if (err instanceof OcfError) return fail(err.ocfCode, err.message);
      return fail(Ocf.errGeneric, `${action}: ${(err as Error).message}`);
    }
  }
}

// DR on this broker: the configuration (journaled as dr-role changes, so it
// survives restarts and travels to our HA backups), one bridge per source
// cluster where this broker serves clients, the guard on client links,
// activation, the round trip (switchover.ts), and the DR-* management operations.
import type { BrokerEndpoint } from '../ha/brokers-url.js';
import { randomUUID } from 'node:crypto';
import { drRoleChange, type Broker, type DrQueueConfig } from '../broker/broker.js';
import type { DrMode, DrQueueState, LoggedChange } from '../broker/changes.js';
import { TandemError, notFound } from '../broker/errors.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import type { LinkTls } from '../admin/link-tls.js';
import { DrBridge } from './bridge.js';
import { displaySource, listOf, parseDrMode, parseSource, type DrQueueSpec } from './config.js';
import type { DrCredentials } from './credentials.js';
import { DR_ROLES, FRESH_ROLE, drRefusal, epochOf, quarantineOf, roleOf, type DrRole } from './roles.js';
import { DrFailback } from './failback.js';
import { DrSwitchover } from './switchover.js';
import { normaliseExchangeFilter } from './topology.js';

/** A client connection, as far as DR needs it: its links to a queue can be detached. */
export interface DrClient {
  detachQueueLinks(queue: string, err: unknown, publishers: boolean): void;
}

export interface DrManagerHost {
  broker: Broker;
  gate: SettlementGate;
  log: Logger;
  autoCreate: boolean;
  /** The [dr] section of the config file. */
  configured: DrQueueSpec[];
  /** Client connections (a queue that stops serving detaches their links). */
  clients(): Iterable<DrClient>;
  /** Queues a bridge of another site follows here now (this broker is their source). */
  followed(): Set<string>;
  /** Per message id of `queue` in the journal (synced), the LSN of its enqueue. */
  enqueueLsns(queue: string): Map<number, number>;
  /** Source passwords (never in the journal). */
  credentials: DrCredentials;
  /** TLS of links to amqps: sources (dr-tls-*). */
  tls: LinkTls;
  /**
   * Whether this site would let `user`/`password` in as an admin (what the other site's
   * bridge and its requests need here): undefined if so, else why not. Always
   * undefined when this site does not require credentials.
   */
  refusesLogin(user: string | undefined, password: string | undefined): Promise<string | undefined>;
  /** The brokers of this site (ha-brokers-url) when it is an HA cluster; empty otherwise. */
  siteBrokers: readonly BrokerEndpoint[];
}

export type Attributes = Record<string, unknown>;
export interface ManagementRegistry {
  register(op: string, h: (type: string | undefined, name: unknown, body: Attributes) => Attributes | Promise<Attributes>): void;
}

export interface DrQueueStatus {
  queue: string;
  source: string;
  mode: DrMode | null;
  state: DrQueueState | 'source';
  role: DrRole;
  epoch: number;
  /** On an activated side: the other site's last change applied before activation. */
  'divergence-point': number | null;
  /** Messages in the quarantine queue (QUEUE.dr-diverged) of a reattached queue. */
  quarantined: number;
  /** Passive copy: log changes and copied messages its bridge applied since it started here. */
  'received-changes': number;
  'received-copies': number;
  link: string;
  'connected-to': string | null;
  'source-position': number;
  'applied-position': number;
  'lag-changes': number;
  'lag-seconds': number | null;
  'last-error': string | null;
  depth: number;
}

export class DrManager {
  private readonly bridges = new Map<string, DrBridge>();
  /** Sources of passive queues that do not parse (no bridge), with why: shown as those queues' last-error. */
  private readonly unreadable = new Map<string, string>();
  private readonly instanceId = randomUUID();
  private serving = false;
  private timer: NodeJS.Timeout | undefined;
  readonly switchovers: DrSwitchover;
  readonly failback: DrFailback;

  constructor(readonly host: DrManagerHost) {
    this.switchovers = new DrSwitchover(this);
    this.failback = new DrFailback(this);
  }

  get isServing(): boolean {
    return this.serving;
  }

  /** This broker serves clients (standalone, or promoted HA primary): run the bridges. */
  start(): void {
    if (this.serving) return;
    this.serving = true;
    this.moveJournaledPasswords();
    this.applyConfigFile();
    this.syncBridges();
    this.timer = setInterval(() => {
      for (const b of this.bridges.values()) b.tick();
      this.switchovers.tick();
      this.failback.tick();
    }, 2000);
    this.timer.unref();
  }

  stop(): void {
    this.serving = false;
    clearInterval(this.timer);
    for (const b of this.bridges.values()) b.stop();
    this.bridges.clear();
  }

  // ---- operations ----------------------------------------------------------

  add(queue: string, sourceText: string, modeText: unknown, exchangesText?: unknown, passwordValue?: unknown): DrQueueStatus {
    if (typeof queue !== 'string' || queue === '') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'dr add needs a queue name');
    const { source, password: inUrl } = parseSource(sourceText);
    if (passwordValue !== undefined && typeof passwordValue !== 'string') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'the DR source password must be a string');
    if (passwordValue !== undefined && inUrl !== undefined) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'give the DR source password in the URL or apart, not both');
    const mode = parseDrMode(modeText ?? 'enqueue-and-dequeue');
    this.configure(queue, source, mode, normaliseExchangeFilter(exchangesText), 'runtime', passwordValue ?? inUrl);
    this.syncBridges();
    return this.statusOf(queue);
  }

  del(queue: string): { queue: string; removed: true } {
    const c = this.host.broker.drQueues.get(queue);
    if (!c) throw notFound('DR queue', queue, 'tandem dr list shows the DR queues');
    this.notMoving(queue);
    this.host.broker.recordDr(drRoleChange(queue, { ...c, state: 'removed' }));
    this.host.log.info({ queue }, 'DR: queue removed from DR (it stays as a normal queue)');
    this.syncBridges();
    return { queue, removed: true };
  }

  /**
   * Open queues to clients: the bridge stops feeding them at once. The old source is
   * told (DR-DEMOTE, until it answers) that it serves them no more, unless
   * `keepSourceServing`: a drill, or a split the operator chose. A source whose link
   * still shows `connected` is not proof it is alive: one that just died, hung or was
   * cut off shows it until heartbeats notice, and left untold it serves again when back.
   */
  activate(queues: string[], keepSourceServing = false): { activated: string[]; already: string[]; 'source-told': boolean; 'old-sources': string[] } {
    const broker = this.host.broker;
    const names = queues.length > 0 ? queues : [...broker.drQueues].filter(([, c]) => c.state === 'passive' || c.state === 'active').map(([q]) => q);
    for (const q of names) if (!broker.drQueues.has(q)) throw notFound('DR queue', q, 'tandem dr list shows the DR queues');
    const activated: string[] = [];
    const already: string[] = [];
    for (const q of names) {
      const c = broker.drQueues.get(q)!;
      if (c.state === 'active') {
        already.push(q);
        continue;
      }
      if (c.state !== 'passive') throw new TandemError('TANDEM_ERR_PRECONDITION', `DR queue '${q}' is ${roleOf(c, false)} here, not a passive copy: nothing to activate (tandem dr status ${q})`);
      this.notMoving(q);
    }
    const oldSources = new Set<string>();
    let lastLsn = 0;
    for (const q of names) {
      const c = broker.drQueues.get(q)!;
      if (c.state === 'active') continue;
      // Kept serving only when the operator says so: 'tandem dr demote' it when no longer meant.
      lastLsn = this.activateOne(q, c, !keepSourceServing).lsn;
      activated.push(q);
      if (c.source !== '') oldSources.add(displaySource(c.source));
    }
    const sources = [...oldSources];
    if (activated.length > 0) {
      if (keepSourceServing) {
        this.host.log.warn({ queues: activated, sources }, 'DR: queues activated; they serve clients and no longer follow the source, which is NOT told (keep-source-serving: a drill, or a split chosen): both sites may serve them');
      } else {
        this.host.log.warn({ queues: activated, sources }, 'DR: queues activated; they serve clients and no longer follow the source, which is told to stop serving them as soon as it answers');
      }
    }
    this.syncBridges();
    // Tell once the activation is safe, rather than at the next check: a source that answers serves no longer than needed.
    if (activated.length > 0 && !keepSourceServing) {
      this.whenSafe(lastLsn).then(
        () => this.failback.tick(),
        () => undefined,
      );
    }
    return { activated, already, 'source-told': activated.length > 0 && !keepSourceServing, 'old-sources': sources };
  }

  /**
   * A queue a switchover run here is moving changes only through it: activated or
   * removed behind its back, the switchover abandoned at its timeout unfenced the
   * source, and both sites served the queue.
   */
  private notMoving(queue: string): void {
    if (this.switchovers.isMoving(queue)) {
      throw new TandemError(
        'TANDEM_ERR_PRECONDITION',
        `DR queue '${queue}' is being switched over here: the switchover activates it, or leaves both sites as they were within its --timeout; nothing was changed (tandem dr status ${queue})`,
      );
    }
  }

  /**
   * Open a passive copy to clients (disaster activation, or the last step of a
   * switchover): one dr-role change raises the pair's epoch and records where the
   * copy stood (`divergence`, the other site's position) and where this site's own
   * changes begin (`since`, `idFloor`), so the other site can later follow from
   * here; `tell`: the old source is told, once it is back, that it serves the queue no more.
   */
  activateOne(queue: string, c: DrQueueConfig, tell: boolean): LoggedChange {
    const broker = this.host.broker;
    const divergence = this.bridges.get(c.source)?.queueStatus(queue).pos ?? broker.drPositions.get(queue)?.lsn ?? 0;
    const logged = broker.recordDr(
      drRoleChange(queue, { ...c, state: 'active', epoch: c.epoch + 1, divergence, since: broker.log.lsn, idFloor: broker.peekNextMessageId(), fill: false, tell }),
    );
    // Consumers may attach now: hand them what the queue holds.
    const local = broker.queues.get(queue);
    if (local) broker.events.queueReady?.(local);
    return logged;
  }

  /** Record a queue's new DR role (every state change goes through here). */
  setRole(queue: string, role: Omit<DrQueueConfig, 'state'> & { state: DrQueueState }): LoggedChange {
    return this.host.broker.recordDr(drRoleChange(queue, role));
  }

  /** Resolves once `lsn` is journaled and held by our ready HA backups. */
  whenSafe(lsn: number): Promise<void> {
    return new Promise((resolve, reject) => this.host.gate.whenSafe(lsn, true, (err) => (err ? reject(err) : resolve())));
  }

  /** Detach clients of a queue that stops serving here; publishers with it too when `publishers`. */
  detachClients(queue: string, publishers: boolean): void {
    const c = this.host.broker.drQueues.get(queue);
    if (!c || c.state === 'active') return;
    const err = drRefusal(queue, c);
    for (const client of this.host.clients()) client.detachQueueLinks(queue, err, publishers);
  }

  /** Where the bridge of `source` stands for `queue` (source position applied), or undefined without a bridge. */
  appliedOf(source: string, queue: string): number | undefined {
    return this.bridges.get(source)?.queueStatus(queue).pos;
  }

  list(): Array<{ queue: string; source: string; mode: DrMode; state: string; role: DrRole; epoch: number; exchanges: string }> {
    const followed = this.host.followed();
    return [...this.host.broker.drQueues].map(([queue, c]) => ({ queue, source: displaySource(c.source), mode: c.mode, state: c.state, role: roleOf(c, followed.has(queue)), epoch: c.epoch, exchanges: c.exchanges }));
  }

  /** Every DR queue here, and every queue a bridge of another site follows here. */
  status(): DrQueueStatus[] {
    const names = new Set([...this.host.broker.drQueues.keys(), ...this.host.followed()]);
    return [...names].sort().map((q) => this.statusOf(q));
  }

  /** For an activated queue whose old source has not answered its demote yet: that it may still serve it. */
  private untold(c: DrQueueConfig): string | null {
    if (c.state !== 'active' || !c.tell || c.source === '') return null;
    return `the old source ${displaySource(c.source)} has not yet answered that it stops serving this queue (told every 2 s): until it does, clients it reaches may still use it there`;
  }

  statusOf(queue: string): DrQueueStatus {
    const broker = this.host.broker;
    const c = broker.drQueues.get(queue);
    const followed = this.host.followed().has(queue);
    if (!c && !followed) throw notFound('DR queue', queue);
    const role = roleOf(c, followed);
    const common = {
      queue,
      role,
      epoch: epochOf(c),
      'divergence-point': c && c.divergence > 0 ? c.divergence : null,
      quarantined: broker.queues.get(quarantineOf(queue))?.depth ?? 0,
      'received-changes': 0,
      'received-copies': 0,
      depth: broker.queues.get(queue)?.depth ?? 0,
    };
    if (!c || c.state !== 'passive') {
      // This site serves the queue (or hands it over): its own log is the position.
      return {
        ...common,
        source: c ? displaySource(c.source) : '',
        mode: c?.mode ?? null,
        state: c?.state ?? 'source',
        link: c?.state === 'active' || !c ? (followed ? 'followed' : 'activated') : c.state,
        'connected-to': null,
        'source-position': broker.log.lsn,
        'applied-position': broker.log.lsn,
        'lag-changes': 0,
        'lag-seconds': 0,
        'last-error': c ? (this.switchovers.errorOf(queue) ?? this.untold(c)) : null,
      };
    }
    const bridge = this.bridges.get(c.source);
    const st = bridge?.queueStatus(queue);
    const persisted = broker.drPositions.get(queue)?.lsn ?? 0;
    let link: string;
    if (!this.serving) link = 'stopped (this broker does not serve clients)';
    else if (bridge?.queueErrors.has(queue)) link = 'skipped';
    else if (!bridge) link = 'stopped';
    else if (bridge.state === 'connected' && st && !st.streaming) link = 'copying';
    else link = bridge.state;
    const applied = st?.pos ?? persisted;
    const head = Math.max(bridge?.sourceHead ?? 0, applied);
    return {
      ...common,
      source: displaySource(c.source),
      mode: c.mode,
      state: c.state,
      link,
      'connected-to': bridge?.connectedTo ?? null,
      'source-position': head,
      'applied-position': applied,
      'lag-changes': st?.lagChanges ?? head - applied,
      'lag-seconds': st?.lagSeconds ?? null,
      'last-error': bridge?.queueErrors.get(queue) ?? bridge?.lastError ?? this.unreadable.get(c.source) ?? null,
      'received-changes': bridge?.appliedChanges ?? 0,
      'received-copies': bridge?.appliedCopies ?? 0,
    };
  }

  /** DR queues that do not serve here refuse client links; admins may browse them. */
  checkLink(conn: { admin: boolean }, address: string, direction: 'in' | 'out', browse: boolean): void {
    const c = this.host.broker.drQueues.get(address);
    if (!c || c.state === 'active') return;
    if (direction === 'out' && browse && conn.admin) return;
    const err = drRefusal(address, c);
    if (direction === 'out') err.message += ' (admins may browse it meanwhile)';
    throw err;
  }

  /** Gauges for the metrics `extra()` hook. */
  metrics(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const s of this.status()) {
      out[`dr.${s.queue}.epoch`] = s.epoch;
      out[`dr.${s.queue}.role`] = DR_ROLES.indexOf(s.role);
      out[`dr.${s.queue}.divergence_point`] = s['divergence-point'] ?? 0;
      out[`dr.${s.queue}.quarantined`] = s.quarantined;
      out[`dr.${s.queue}.source_position`] = s['source-position'];
      out[`dr.${s.queue}.applied_position`] = s['applied-position'];
      out[`dr.${s.queue}.lag_changes`] = s['lag-changes'];
      out[`dr.${s.queue}.lag_seconds`] = s['lag-seconds'] ?? -1;
      out[`dr.${s.queue}.connected`] = s.link === 'connected' ? 1 : 0;
      out[`dr.${s.queue}.active`] = s.state === 'active' ? 1 : 0;
    }
    for (const [source, b] of this.bridges) out[`dr.bridge.${displaySource(source)}.applied_changes`] = b.appliedChanges;
    return out;
  }

  /** DR-ADD, DR-DEL, DR-LIST, DR-STATUS, DR-ACTIVATE {queues?, keep-source-serving?} on the $management node. */
  register(m: ManagementRegistry): void {
    const queueOf = (name: unknown, body: Attributes): string => {
      const q = body.queue ?? name;
      if (typeof q !== 'string' || q === '' || q === 'broker') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'name the queue');
      return q;
    };
    m.register('DR-ADD', (_t, name, body) => ({ ...this.add(queueOf(name, body), body.source as string, body.mode, body.exchanges, body.password ?? undefined) }));
    m.register('DR-DEL', (_t, name, body) => ({ ...this.del(queueOf(name, body)) }));
    m.register('DR-LIST', () => ({ queues: this.list() }));
    m.register('DR-STATUS', (_t, _name, body) => {
      const only = listOf(body.queues);
      return { queues: (only.length > 0 ? only.map((q) => this.statusOf(q)) : this.status()) as unknown as Attributes[] };
    });
    m.register('DR-ACTIVATE', (_t, _name, body) => ({ ...this.activate(listOf(body.queues), flagOf(body['keep-source-serving'], 'keep-source-serving')) }));
    this.switchovers.register(m);
    this.failback.register(m);
  }

  // ---- internals -----------------------------------------------------------

  private configure(queue: string, source: string, mode: DrMode, exchanges: string, origin: 'runtime' | 'config', password?: string): void {
    const broker = this.host.broker;
    // Before the journal names the source, so a crash between leaves no source without its password.
    if (password !== undefined) this.host.credentials.set(source, password);
    const existing = broker.drQueues.get(queue);
    if (existing && origin === 'runtime') this.notMoving(queue);
    if (existing && existing.state !== 'passive' && existing.state !== 'active') {
      throw new TandemError('TANDEM_ERR_PRECONDITION', `DR queue '${queue}' is ${roleOf(existing, false)} here (tandem dr status ${queue}): finish the switchover or reattach it first`);
    }
    if (existing?.state === 'active') {
      if (origin === 'config') {
        this.host.log.info({ queue }, 'DR: [dr] lists a queue that was activated; leaving it active (tandem dr del it, and remove the line)');
        return;
      }
      throw new TandemError('TANDEM_ERR_PRECONDITION', `DR queue '${queue}' was activated and serves clients; 'tandem dr del ${queue}' first to replicate it again`);
    }
    if (existing && existing.source === source && existing.mode === mode && existing.exchanges === exchanges) return;
    if (!existing || existing.source !== source) {
      // A new source: positions of another cluster's log mean nothing here (first, so a crash between leaves no stale position).
      broker.recordDr({ kind: 'dr-transaction', queues: [queue], lsn: 0, time: 0, changes: [] });
    }
    broker.recordDr(drRoleChange(queue, { ...FRESH_ROLE, ...(existing ?? {}), source, mode, exchanges, state: 'passive' }));
    this.host.log.info({ queue, source: displaySource(source), mode, exchanges, origin }, 'DR: queue configured for replication');
  }

  private applyConfigFile(): void {
    for (const spec of this.host.configured) {
      try {
        this.configure(spec.queue, spec.source, spec.mode, spec.exchanges, 'config', spec.password);
      } catch (err) {
        this.host.log.error({ queue: spec.queue, err: (err as Error).message }, 'DR: [dr] entry not applied');
      }
    }
  }

  /**
   * A journal written before passwords were kept apart names sources as user/password@:
   * move each password to the credentials file and journal the source without it.
   * Positions stay: it is the same source.
   */
  private moveJournaledPasswords(): void {
    const broker = this.host.broker;
    for (const [queue, c] of [...broker.drQueues]) {
      // Only a URL with credentials can hold one (a queue between roles may have no source at all).
      if (!c.source.includes('@')) continue;
      const { source, password } = parseSource(c.source);
      if (password === undefined) continue;
      this.host.credentials.set(source, password);
      broker.recordDr(drRoleChange(queue, { ...FRESH_ROLE, ...c, source }));
      this.host.log.info({ queue, source }, 'DR: moved the source password out of the journal into dr-credentials');
    }
  }

  /** One bridge per source with passive queues; each restarted to carry the current set. */
  syncBridges(): void {
    if (!this.serving) return;
    const sources = new Set<string>();
    for (const c of this.host.broker.drQueues.values()) if (c.state === 'passive') sources.add(c.source);
    for (const [source, b] of this.bridges) {
      if (!sources.has(source)) {
        b.stop();
        this.bridges.delete(source);
      }
    }
    for (const source of this.unreadable.keys()) if (!sources.has(source)) this.unreadable.delete(source);
    for (const source of sources) {
      let b = this.bridges.get(source);
      const wanted = JSON.stringify(this.wantedOf(source));
      const password = this.host.credentials.get(source);
      if (b && b.carries === wanted && b.password === password) continue;
      if (b && b.password !== password) {
        b.stop();
        b = undefined;
      }
      if (!b) {
        try {
          b = new DrBridge(source, { broker: this.host.broker, gate: this.host.gate, log: this.host.log.child({ dr: displaySource(source) }), autoCreate: this.host.autoCreate, instanceId: this.instanceId, password, tls: this.host.tls });
        } catch (err) {
          // A source the journal holds but that does not read (written by an older version,
          // say): its queues are not copied, and say why; the broker and every other DR
          // queue go on (it stopped the broker at start before).
          const reason = `the source ${JSON.stringify(source)} cannot be read: ${(err as Error).message}; tandem dr del and dr add the queue with a valid source`;
          if (this.unreadable.get(source) !== reason) this.host.log.error({ queues: this.wantedOf(source) }, `DR: ${reason}`);
          this.unreadable.set(source, reason);
          continue;
        }
        this.unreadable.delete(source);
        this.bridges.set(source, b);
      }
      b.carries = wanted;
      b.restart();
    }
  }

  private wantedOf(source: string): string[] {
    const out: string[] = [];
    for (const [q, c] of this.host.broker.drQueues) if (c.source === source && c.state === 'passive') out.push(`${q}:${c.mode}`);
    return out.sort();
  }
}

/** A boolean management argument (absent: false). */
function flagOf(v: unknown, name: string): boolean {
  if (v === undefined || v === null || v === false || v === 'false') return false;
  if (v === true || v === 'true') return true;
  throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${name} must be true or false, not ${JSON.stringify(v)}`);
}

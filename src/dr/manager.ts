// DR on the secondary: the configuration (journaled as dr-queue changes, so it
// survives restarts and travels to our HA backups), one bridge per source
// cluster where this broker serves clients, the passive guard on client links,
// activation, and the DR-* management operations.
import { randomUUID } from 'node:crypto';
import type { Broker } from '../broker/broker.js';
import type { DrMode } from '../broker/changes.js';
import { TandemError, notFound } from '../broker/errors.js';
import type { SettlementGate } from '../broker/settlement.js';
import type { Logger } from '../ops/log.js';
import { DrBridge } from './bridge.js';
import { displaySource, normaliseSource, parseDrMode, type DrQueueSpec } from './config.js';

export interface DrManagerHost {
  broker: Broker;
  gate: SettlementGate;
  log: Logger;
  autoCreate: boolean;
  /** The [dr] section of the config file. */
  configured: DrQueueSpec[];
}

type Attributes = Record<string, unknown>;

export interface DrQueueStatus {
  queue: string;
  source: string;
  mode: DrMode;
  state: 'passive' | 'active';
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
  private readonly instanceId = randomUUID();
  private serving = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly host: DrManagerHost) {}

  /** This broker serves clients (standalone, or promoted HA primary): run the bridges. */
  start(): void {
    if (this.serving) return;
    this.serving = true;
    this.applyConfigFile();
    this.syncBridges();
    this.timer = setInterval(() => {
      for (const b of this.bridges.values()) b.tick();
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

  add(queue: string, sourceText: string, modeText: unknown): DrQueueStatus {
    if (typeof queue !== 'string' || queue === '') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'dr add needs a queue name');
    const source = normaliseSource(sourceText);
    const mode = parseDrMode(modeText ?? 'enqueue-and-dequeue');
    this.configure(queue, source, mode, 'runtime');
    this.syncBridges();
    return this.statusOf(queue);
  }

  del(queue: string): { queue: string; removed: true } {
    const c = this.host.broker.drQueues.get(queue);
    if (!c) throw notFound('DR queue', queue, 'tandem dr list shows the DR queues');
    this.host.broker.recordDr({ kind: 'dr-queue', queue, source: c.source, mode: c.mode, state: 'removed' });
    this.host.log.info({ queue }, 'DR: queue removed from DR (it stays as a normal queue)');
    this.syncBridges();
    return { queue, removed: true };
  }

  /** Open queues to clients: the bridge stops feeding them at once. */
  activate(queues: string[]): { activated: string[]; already: string[] } {
    const broker = this.host.broker;
    const names = queues.length > 0 ? queues : [...broker.drQueues.keys()];
    for (const q of names) if (!broker.drQueues.has(q)) throw notFound('DR queue', q, 'tandem dr list shows the DR queues');
    const activated: string[] = [];
    const already: string[] = [];
    for (const q of names) {
      const c = broker.drQueues.get(q)!;
      if (c.state === 'active') {
        already.push(q);
        continue;
      }
      broker.recordDr({ kind: 'dr-queue', queue: q, source: c.source, mode: c.mode, state: 'active' });
      activated.push(q);
      // Consumers may attach now: hand them what the queue holds.
      const queue = broker.queues.get(q);
      if (queue) broker.events.queueReady?.(queue);
    }
    if (activated.length > 0) this.host.log.warn({ queues: activated }, 'DR: queues activated; they serve clients and no longer follow the source');
    this.syncBridges();
    return { activated, already };
  }

  list(): Array<{ queue: string; source: string; mode: DrMode; state: string }> {
    return [...this.host.broker.drQueues].map(([queue, c]) => ({ queue, source: displaySource(c.source), mode: c.mode, state: c.state }));
  }

  status(): DrQueueStatus[] {
    return [...this.host.broker.drQueues.keys()].map((q) => this.statusOf(q));
  }

  statusOf(queue: string): DrQueueStatus {
    const broker = this.host.broker;
    const c = broker.drQueues.get(queue);
    if (!c) throw notFound('DR queue', queue);
    const bridge = this.bridges.get(c.source);
    const st = bridge?.queueStatus(queue);
    const persisted = broker.drPositions.get(queue)?.lsn ?? 0;
    let link: string;
    if (c.state === 'active') link = 'activated';
    else if (!this.serving) link = 'stopped (this broker does not serve clients)';
    else if (bridge?.queueErrors.has(queue)) link = 'skipped';
    else if (!bridge) link = 'stopped';
    else if (bridge.state === 'connected' && st && !st.streaming) link = 'copying';
    else link = bridge.state;
    const applied = st?.pos ?? persisted;
    const head = Math.max(bridge?.sourceHead ?? 0, applied);
    return {
      queue,
      source: displaySource(c.source),
      mode: c.mode,
      state: c.state,
      link,
      'connected-to': bridge?.connectedTo ?? null,
      'source-position': head,
      'applied-position': applied,
      'lag-changes': c.state === 'active' ? 0 : (st?.lagChanges ?? head - applied),
      'lag-seconds': c.state === 'active' ? 0 : (st?.lagSeconds ?? null),
      'last-error': bridge?.queueErrors.get(queue) ?? (c.state === 'passive' ? (bridge?.lastError ?? null) : null),
      depth: broker.queues.get(queue)?.depth ?? 0,
    };
  }

  /** Passive DR queues refuse client links; admins may browse them. */
  checkLink(conn: { admin: boolean }, address: string, direction: 'in' | 'out', browse: boolean): void {
    const c = this.host.broker.drQueues.get(address);
    if (!c || c.state !== 'passive') return;
    if (direction === 'out' && browse && conn.admin) return;
    throw new TandemError(
      'TANDEM_ERR_PRECONDITION',
      `queue '${address}' is a passive DR replica of ${displaySource(c.source)}: it serves clients only after 'tandem dr activate ${address}'${direction === 'out' ? ' (admins may browse it meanwhile)' : ''}`,
    );
  }

  /** Gauges for the metrics `extra()` hook. */
  metrics(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const s of this.status()) {
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

  /** DR-ADD, DR-DEL, DR-LIST, DR-STATUS, DR-ACTIVATE on the $management node. */
  register(m: { register(op: string, h: (type: string | undefined, name: unknown, body: Attributes) => Attributes | Promise<Attributes>): void }): void {
    const queueOf = (name: unknown, body: Attributes): string => {
      const q = body.queue ?? name;
      if (typeof q !== 'string' || q === '' || q === 'broker') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'name the queue');
      return q;
    };
    m.register('DR-ADD', (_t, name, body) => ({ ...this.add(queueOf(name, body), body.source as string, body.mode) }));
    m.register('DR-DEL', (_t, name, body) => ({ ...this.del(queueOf(name, body)) }));
    m.register('DR-LIST', () => ({ queues: this.list() }));
    m.register('DR-STATUS', (_t, _name, body) => {
      const only = listOf(body.queues);
      return { queues: (only.length > 0 ? only.map((q) => this.statusOf(q)) : this.status()) as unknown as Attributes[] };
    });
    m.register('DR-ACTIVATE', (_t, _name, body) => ({ ...this.activate(listOf(body.queues)) }));
  }

  // ---- internals -----------------------------------------------------------

  private configure(queue: string, source: string, mode: DrMode, origin: 'runtime' | 'config'): void {
    const broker = this.host.broker;
    const existing = broker.drQueues.get(queue);
    if (existing?.state === 'active') {
      if (origin === 'config') {
        this.host.log.info({ queue }, 'DR: [dr] lists a queue that was activated; leaving it active (tandem dr del it, and remove the line)');
        return;
      }
      throw new TandemError('TANDEM_ERR_PRECONDITION', `DR queue '${queue}' was activated and serves clients; 'tandem dr del ${queue}' first to replicate it again`);
    }
    if (existing && existing.source === source && existing.mode === mode) return;
    if (!existing || existing.source !== source) {
      // A new source: positions of another cluster's log mean nothing here (first, so a crash between leaves no stale position).
      broker.recordDr({ kind: 'dr-transaction', queues: [queue], lsn: 0, time: 0, changes: [] });
    }
    broker.recordDr({ kind: 'dr-queue', queue, source, mode, state: 'passive' });
    this.host.log.info({ queue, source: displaySource(source), mode, origin }, 'DR: queue configured for replication');
  }

  private applyConfigFile(): void {
    for (const spec of this.host.configured) {
      try {
        this.configure(spec.queue, spec.source, spec.mode, 'config');
      } catch (err) {
        this.host.log.error({ queue: spec.queue, err: (err as Error).message }, 'DR: [dr] entry not applied');
      }
    }
  }

  /** One bridge per source with passive queues; each restarted to carry the current set. */
  private syncBridges(): void {
    if (!this.serving) return;
    const sources = new Set<string>();
    for (const c of this.host.broker.drQueues.values()) if (c.state === 'passive') sources.add(c.source);
    for (const [source, b] of this.bridges) {
      if (!sources.has(source)) {
        b.stop();
        this.bridges.delete(source);
      }
    }
    for (const source of sources) {
      let b = this.bridges.get(source);
      const wanted = JSON.stringify(this.wantedOf(source));
      if (b && b.carries === wanted) continue;
      if (!b) {
        b = new DrBridge(source, { broker: this.host.broker, gate: this.host.gate, log: this.host.log.child({ dr: displaySource(source) }), autoCreate: this.host.autoCreate, instanceId: this.instanceId });
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

function listOf(v: unknown): string[] {
  if (Array.isArray(v)) return v.map(String).filter((s) => s !== '');
  if (typeof v === 'string') return v.split(',').map((s) => s.trim()).filter((s) => s !== '');
  return [];
}

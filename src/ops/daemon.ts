// tandemd's composition root: recovers the journal into the broker model, opens
// the AMQP listener, metrics and systemd notification, and stops them in
// reverse order on shutdown.
import { mkdirSync } from 'node:fs';
import { Broker } from '../broker/broker.js';
import type { Queue } from '../broker/queue.js';
import type { SettlementGate } from '../broker/settlement.js';
import { UserDirectory } from '../admin/users.js';
import { AmqpServer } from '../amqp/server.js';
import { Journal } from '../store/journal.js';
import type { Settings } from './config.js';
import { logger, type Logger } from './log.js';
import { Metrics } from './metrics.js';
import { notifyReady, notifyStatus, notifyStopping, startWatchdog } from './systemd.js';

export { VERSION } from '../version.js';
import { VERSION } from '../version.js';

export interface DaemonOptions {
  repair?: boolean;
}

export class Daemon {
  readonly broker: Broker;
  private server: AmqpServer | undefined;
  private journal: Journal | undefined;
  private metrics: Metrics | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly autoDeleteTimers = new Map<Queue, NodeJS.Timeout>();
  private stopWatchdog: (() => void) | undefined;
  private stopping: Promise<void> | undefined;
  private readonly log: Logger;
  private readonly startedAt = Date.now();
  port = 0;
  tlsPort: number | undefined;
  metricsPort: number | undefined;

  constructor(readonly settings: Settings) {
    this.log = logger('broker');
    this.broker = new Broker({
      defaultReplicate: settings.haReplicate,
      events: {
        queueReady: (q) => this.server?.schedule(q),
        queueUnused: (q) => this.scheduleAutoDelete(q),
        queueDeleted: (q) => this.cancelAutoDelete(q),
      },
    });
  }

  async start(options: DaemonOptions = {}): Promise<void> {
    const s = this.settings;
    mkdirSync(s.dataDir, { recursive: true });
    notifyStatus('recovering journal');
    const storeLog = logger('store');
    const { journal, recovered } = await Journal.open({ dataDir: s.dataDir, repair: options.repair, logger: storeLog });
    this.journal = journal;
    for (const entry of recovered.changes) this.broker.apply(entry, { adopt: false });
    this.broker.log.resumeAfter(recovered.lastLsn);
    if (recovered.epoch > this.broker.epoch) this.broker.epoch = recovered.epoch;
    this.broker.log.attach(journal);
    storeLog.info({ changes: recovered.changes.length, lsn: recovered.lastLsn, queues: this.broker.queues.size }, 'journal recovered');

    const gate: SettlementGate = {
      whenSafe: (lsn, durable, cb) => (durable ? journal.whenDurable(lsn, cb) : cb()),
    };
    const users = new UserDirectory(s.usersFile);
    if (s.auth && users.size === 0) {
      this.log.warn({ usersFile: s.usersFile }, 'authentication is on but there are no users: add one with `tandem user add NAME --admin`');
    }
    this.server = new AmqpServer(
      this.broker,
      gate,
      {
        host: s.host,
        port: s.port,
        tls: s.tlsCert && s.tlsKey ? { port: s.tlsPort ?? 5671, cert: s.tlsCert, key: s.tlsKey, ca: s.tlsCa, requireClientCert: s.tlsRequireClientCert } : undefined,
        auth: s.auth,
        users,
        maxFrameSize: s.maxFrameSize,
        maxMessageSize: s.maxMessageSize,
        idleTimeoutMs: s.idleTimeoutMs,
        maxConnections: s.maxConnections,
        autoCreate: s.autoCreate,
      },
      logger('amqp'),
      () => this.status(),
    );
    // Queues recovered with messages wait for consumers like any others.
    const expiry = setInterval(() => this.broker.expire(), 1000);
    expiry.unref();
    this.timers.push(expiry);

    const bound = await this.server.listen();
    this.port = bound.port;
    this.tlsPort = bound.tlsPort;
    if (s.metricsPort !== undefined) {
      this.metrics = new Metrics({ broker: this.broker, connections: () => this.server?.connectionCount ?? 0 });
      this.metricsPort = await this.metrics.listen(s.metricsHost, s.metricsPort);
    }
    // One write, so a reader that waits for "listening on" sees the other ports too.
    const lines = [`listening on ${s.host}:${this.port}`];
    if (this.tlsPort !== undefined) lines.push(`listening (tls) on ${s.host}:${this.tlsPort}`);
    if (this.metricsPort !== undefined) lines.push(`metrics on http://${s.metricsHost}:${this.metricsPort}/metrics`);
    process.stdout.write(`${lines.join('\n')}\n`);
    this.log.info({ host: s.host, port: this.port, tlsPort: this.tlsPort, dataDir: s.dataDir, auth: s.auth }, 'broker ready');
    notifyReady(`serving on ${s.host}:${this.port}`);
    this.stopWatchdog = startWatchdog();
  }

  status(): Record<string, unknown> {
    return {
      name: 'broker',
      version: VERSION,
      'ha-state': 'standalone',
      epoch: this.broker.epoch,
      lsn: this.broker.log.lsn,
      queues: this.broker.queues.size,
      exchanges: this.broker.exchanges.size,
      connections: this.server?.connectionCount ?? 0,
      'uptime-seconds': Math.round((Date.now() - this.startedAt) / 1000),
      'data-dir': this.settings.dataDir,
    };
  }

  /**
   * Clean shutdown: stop accepting, give consumers and pending settlements up to
   * shutdown-timeout to finish, close clients, flush and sync the journal.
   */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    notifyStopping();
    this.stopWatchdog?.();
    for (const t of this.timers) clearInterval(t);
    for (const t of this.autoDeleteTimers.values()) clearTimeout(t);
    const server = this.server;
    if (server) {
      const listening = server.stopListening();
      const deadline = Date.now() + this.settings.shutdownTimeoutMs;
      // Let unsettled deliveries finish (bounded), then close everyone.
      while (server.unsettledOut > 0 && Date.now() < deadline) await sleep(50);
      server.closeAll();
      await Promise.race([listening, sleep(Math.max(100, deadline - Date.now()))]);
      server.destroy();
    }
    await this.metrics?.close();
    await this.journal?.close();
    this.log.info('broker stopped');
  }

  private scheduleAutoDelete(queue: Queue): void {
    this.cancelAutoDelete(queue);
    const timer = setTimeout(() => {
      this.autoDeleteTimers.delete(queue);
      if (this.broker.queues.get(queue.name) !== queue || queue.consumerCount > 0) return;
      try {
        this.broker.deleteQueue(queue.name);
        this.log.debug({ queue: queue.name }, 'auto-delete queue deleted');
      } catch (err) {
        this.log.warn({ queue: queue.name, err: (err as Error).message }, 'auto-delete failed');
      }
    }, queue.settings.autoDeleteDelayMs);
    timer.unref();
    this.autoDeleteTimers.set(queue, timer);
  }

  private cancelAutoDelete(queue: Queue): void {
    const t = this.autoDeleteTimers.get(queue);
    if (t) clearTimeout(t);
    this.autoDeleteTimers.delete(queue);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

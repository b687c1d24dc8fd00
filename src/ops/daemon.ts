// tandemd's composition root: recovers the journal into the broker model, opens
// the AMQP listener, metrics and systemd notification, and stops them in
// reverse order on shutdown.
import { drLinkTls } from '../admin/peer-addresses.js';
import { redact } from './secrets.js';
import { join } from 'node:path';
import v8 from 'node:v8';
import { randomUUID } from 'node:crypto';
import { Broker } from '../broker/broker.js';
import { AutoDeleteTimers } from '../broker/auto-delete.js';
import { BORROWED_BODY_TICK_MS, BorrowedBodySweep } from '../broker/borrowed-bodies.js';
import { AllGates, type SettlementGate } from '../broker/settlement.js';
import { HaManager } from '../ha/ha-manager.js';
import { haMetrics } from '../ha/ha-metrics.js';
import { openReplicationLink } from '../ha/replication-link.js';
import { registerHaOperations } from '../ha/ha-operations.js';
import { REPLICATION_ADDRESS } from '../replication/protocol.js';
import { DrManager } from '../dr/manager.js';
import { DR_ADDRESS } from '../dr/protocol.js';
import { DR_ROLES, drRefusal } from '../dr/roles.js';
import { DrSource } from '../dr/source.js';
import { DrWindowFeed } from '../dr/window-feed.js';
import { openDrSourceLink } from '../dr/source-link.js';
import { DrCredentials } from '../dr/credentials.js';
import { UserDirectory, refusesAdminLogin } from '../admin/users.js';
import { PasswordHasher } from '../admin/password-hasher.js';
import { Acl } from '../admin/acl.js';
import { AmqpServer } from '../amqp/server.js';
import { prepareDataDir } from '../store/data-dir.js';
import { filesBytes } from '../store/disk-usage.js';
import { JOURNAL_DIR_NAME, type Journal } from '../store/journal.js';
import { Pager } from '../store/pager.js';
import { pagingMetrics, pagingStatus } from '../store/paging-figures.js';
import { restoreBroker } from '../store/restore.js';
import { continueLog } from '../store/log-position.js';
import { SwappableJournal } from '../store/swappable-journal.js';
import { readDedupKey } from '../amqp/dedup-key-reader.js';
import { readGroupKey } from '../amqp/group-key-reader.js';
import { readDeliveryTime } from '../amqp/delivery-time-reader.js';
import { RELEASE_SLICE } from '../broker/scheduled.js';
import { compileSelector } from '../amqp/selector-filter.js';
import { deadLetterWriter } from '../amqp/message-codec.js';
import { defaultQueueSettings } from '../broker/settings.js';
import { plainPasswordWarning, type Settings } from './config.js';
import { logger, type Logger } from './log.js';
import { LogThrottle, suppressedField } from './log-throttle.js';
import { MemoryAlarm } from './memory-alarm.js';
import { Metrics } from './metrics.js';
import { ConsoleServer } from '../console/server.js';
import { ClusterWatch, standaloneView, type HaAnswer } from '../console/cluster-view.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { endpointAddress, haIdentity, haLinkTls, reloadLinkCrls } from '../admin/peer-addresses.js';
import { hostPort } from '../util/host-port.js';
import { notifyExtendTimeout, notifyReady, notifyStatus, notifyStopping, startWatchdog } from './systemd.js';

export { VERSION } from '../version.js';
import { VERSION } from '../version.js';
import { monotonicNow } from '../util/monotonic-clock.js';
import { ClockStepWatch } from './clock-step-watch.js';

/** Expired messages dropped between two turns of the event loop (expireInSlices): ~10-25 ms of work. */
const EXPIRY_SLICE = 5000;

export interface DaemonOptions {
  repair?: boolean;
}

export class Daemon {
  readonly broker: Broker;
  private server: AmqpServer | undefined;
  ha: HaManager | undefined;
  /** DR: this broker as a source (window + links) and as a secondary (bridges). */
  private drSource: DrSource | undefined;
  /** Takes the DR window off the change log while an HA backup loads a snapshot. */
  private drWindowFeed: DrWindowFeed | undefined;
  dr: DrManager | undefined;
  /** The journal in use: a backup loading a snapshot swaps it for an empty one. */
  private readonly store: SwappableJournal;
  /** Keeps queued message bodies in memory under max-memory (the rest stay in the journal). */
  readonly pager: Pager;
  private metrics: Metrics | undefined;
  private console: ConsoleServer | undefined;
  private clusterWatch: ClusterWatch | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  /** An expiry run is under way (expireInSlices). */
  private expiring = false;
  private readonly autoDelete: AutoDeleteTimers;
  private stopWatchdog: (() => void) | undefined;
  private readonly memoryAlarm: MemoryAlarm;
  /** Logins hash passwords here, never on libuv's pool (the journal's writes use that). */
  private readonly hasher = new PasswordHasher();
  private stopping: Promise<void> | undefined;
  /** Set once a clean stop began: no local change is taken any more (see doStop). */
  private stoppingReason: string | undefined;
  private readonly log: Logger;
  private readonly deadLetterLog = new LogThrottle();
  private readonly startedAt = monotonicNow();
  /** Identifies this process to other brokers (a broker skips itself in ha-brokers-url). */
  readonly instanceId = randomUUID();
  /** undefined with listen-plain=no. */
  port: number | undefined;
  tlsPort: number | undefined;
  metricsPort: number | undefined;
  consolePort: number | undefined;

  constructor(readonly settings: Settings) {
    this.log = logger('broker');
    this.broker = new Broker({
      defaultReplicate: settings.haReplicate,
      dedupKeys: readDedupKey,
      groupKeys: readGroupKey,
      deliveryTimes: readDeliveryTime,
      selectors: (text) => compileSelector(text).selects,
      deadLetters: deadLetterWriter,
      queueDefaults: { ...defaultQueueSettings, ...settings.dedupDefaults },
      events: {
        queueReady: (q) => this.server?.schedule(q),
        // Not on a broker that takes no local changes (an HA backup): its queues change by
        // its primary's log alone. A browse of a replicated auto-delete queue there had the
        // backup delete it, messages and all, under an LSN of its own.
        queueUnused: (q) => {
          if (!this.server?.readOnly?.()) this.autoDelete.schedule(q);
        },
        queueDeleted: (q) => this.autoDelete.cancel(q),
        dedupKeyInvalid: (q, reason, count) => {
          // Counted always; logged for the first and then every thousandth, so a bad sender cannot flood the log.
          if (count === 1 || count % 1000 === 0) this.log.warn({ queue: q.name, reason, count }, 'message passed without duplicate detection: its key cannot be compared');
        },
        deadLetterLost: (q, id, reason, total) => {
          // One line per queue every 10 s at most (a damaged segment can hold thousands), with the count it stands for.
          const held = this.deadLetterLog.admit(q.name);
          if (held !== undefined) this.log.warn({ queue: q.name, id, reason, total, ...suppressedField(held) }, 'a message could not go on to the alternate exchange and was dropped');
        },
      },
    });
    this.memoryAlarm = new MemoryAlarm({
      memoryLimit: settings.memoryLimit,
      onChange: (reason, r) => {
        this.broker.memoryAlarm = reason;
        const MiB = 2 ** 20;
        const figures = { heapUsedMiB: Math.round(r.used / MiB), heapLimitMiB: Math.round(r.limit / MiB), liveMiB: Math.round((r.live ?? 0) / MiB), memoryLimitMiB: Math.round(settings.memoryLimit / MiB) };
        if (reason) this.log.warn(figures, `MEMORY ALARM: ${reason}`);
        else this.log.info(figures, 'memory alarm cleared: accepting messages again');
      },
    });
    this.autoDelete = new AutoDeleteTimers(this.broker, this.log);
    this.pager = new Pager({ broker: this.broker, journal: () => this.store.current, maxMemory: settings.maxMemory, log: logger('store') });
    this.store = new SwappableJournal({ dataDir: settings.dataDir, checkpointBytes: settings.checkpointBytes, broker: this.broker, pager: this.pager, log: logger('store'), brokerLog: this.log });
  }

  /** The journal in use now (a backup loading a snapshot replaces it). */
  private get journal(): Journal | undefined {
    return this.store.current;
  }

  async start(options: DaemonOptions = {}): Promise<void> {
    const s = this.settings;
    prepareDataDir(s.dataDir);
    notifyStatus('recovering journal');
    const storeLog = logger('store');
    const recovered = await this.store.open(options.repair);
    const journal = this.journal!;
    // Recovered bodies stay on disk until a consumer reaches them: restart time and memory do not grow with them.
    restoreBroker(this.broker, journal, recovered, this.pager);
    // The newest change is always kept live (it is the journal's position).
    const recoveredLsn = recovered.lastChangeLsn;
    const resumeLsn = continueLog(this.broker, journal, recovered, s);
    this.broker.log.attach(journal);
    this.broker.log.attach(this.pager);
    this.memoryAlarm.start();
    if (s.maxMemory >= s.memoryLimit) {
      this.log.warn(
        { maxMemoryMiB: Math.round(s.maxMemory / 2 ** 20), memoryLimitMiB: Math.round(s.memoryLimit / 2 ** 20) },
        'max-memory is not below memory-limit: message bodies in memory alone can raise the memory alarm before any is paged out; set max-memory lower',
      );
    }
    const paging = setInterval(() => this.pager.pass(), 250);
    paging.unref();
    this.timers.push(paging);
    const clockSteps = new ClockStepWatch(this.log);
    const stepCheck = setInterval(() => clockSteps.check(), 1000);
    stepCheck.unref();
    this.timers.push(stepCheck);
    // On every broker, whatever its role: a backup's bodies borrow its HA batches' memory.
    const borrowed = new BorrowedBodySweep(() => this.broker.queues.values());
    const owning = setInterval(() => borrowed.tick().catch((err: unknown) => this.log.error({ err }, 'giving queued message bodies memory of their own failed')), BORROWED_BODY_TICK_MS);
    owning.unref();
    this.timers.push(owning);
    storeLog.info({ changes: recovered.config.length, messages: recovered.messages, lsn: recovered.lastLsn, queues: this.broker.queues.size }, 'journal recovered');

    const journalGate: SettlementGate = {
      // this.journal, not `journal`: a backup loading a snapshot replaces it.
      whenSafe: (lsn, durable, cb) => (durable ? this.journal!.whenDurable(lsn, cb) : cb()),
      safeNow: (_lsn, durable) => !durable,
    };
    // Before HA: a backup keeps the DR passwords its primary hands it in the same store.
    const drCredentials = new DrCredentials(s.dataDir).activate();
    if (s.haCluster) {
      this.ha = new HaManager({
        drCredentials,
        broker: this.broker,
        settings: s,
        log: logger('ha'),
        resetStore: (diverged) => {
          this.drWindowFeed?.pause();
          return this.store.setAsideForSnapshot(diverged);
        },
        snapshotComplete: () => {
          this.store.dropSetAside();
          this.drWindowFeed?.resume();
        },
        whenDurable: (lsn, cb) => this.journal!.whenDurable(lsn, cb),
        recoveredLsn,
        resumeLsn,
        instanceId: this.instanceId,
        onPrimary: () => this.startPrimaryTimers(),
        fatal: (reason) => this.fatal(reason),
      });
    }
    const gate: SettlementGate = this.ha ? new AllGates([journalGate, this.ha.gate]) : journalGate;
    if (s.drRetainChanges > 0) {
      // Continued above the reservation: a DR copy current before the restart crosses the gap by the log (src/dr/restart-gap.ts).
      const restart = resumeLsn === undefined ? { after: recoveredLsn, lsn: this.broker.log.lsn, floor: this.broker.peekNextMessageId() } : undefined;
      this.drSource = new DrSource({ broker: this.broker, gate, log: logger('dr'), retainCount: s.drRetainChanges, retainBytes: s.drRetainBytes, heartbeatMs: 500, journal: () => this.journal, restart });
      this.broker.log.attach(this.drSource);
    }
    this.drWindowFeed = new DrWindowFeed(this.broker.log, this.drSource);
    const users = new UserDirectory(s.usersFile, { scrypt: this.hasher.scrypt, log: logger('admin') });
    this.dr = new DrManager({
      refusesLogin: (user, password) => refusesAdminLogin(s.auth, users, user, password),
      siteBrokers: s.haCluster && s.haBrokersUrl ? parseBrokersUrl(s.haBrokersUrl).endpoints : [],
      broker: this.broker,
      gate,
      log: logger('dr'),
      autoCreate: s.autoCreate,
      configured: s.drQueues,
      credentials: drCredentials,
      tls: drLinkTls(s),
      clients: () => this.server?.clients ?? [],
      followed: () => new Set([...(this.drSource?.streams ?? [])].flatMap((st) => st.queueNames)),
      enqueueLsns: (queue) => {
        const out = new Map<number, number>();
        this.journal?.forEachRecovered(queue, (fields, lsn) => out.set(fields.id, lsn));
        return out;
      },
    });
    this.broker.drRefusal = drRefusal;
    for (const warning of s.warnings) this.log.warn(warning);
    if (s.auth && users.size === 0) {
      this.log.warn({ usersFile: s.usersFile }, 'authentication is on but there are no users: add one with `tandem user add NAME --admin`');
    }
    this.server = new AmqpServer(
      this.broker,
      gate,
      {
        host: s.host,
        port: s.listenPlain ? s.port : undefined,
        tls: s.tlsCert && s.tlsKey ? { port: s.tlsPort ?? 5671, cert: s.tlsCert, key: s.tlsKey, ca: s.tlsCa, crl: s.tlsCrl, requireClientCert: s.tlsRequireClientCert, externalUser: s.tlsExternalUser } : undefined,
        auth: s.auth,
        users,
        maxFrameSize: s.maxFrameSize,
        maxMessageSize: s.maxMessageSize,
        transactionLimits: s.transactionLimits,
        idleTimeoutMs: s.idleTimeoutMs,
        handshakeTimeoutMs: s.handshakeTimeoutMs,
        maxConnections: s.maxConnections,
        maxHandshakesPerAddress: s.maxHandshakesPerAddress,
        maxLinksPerConnection: s.maxLinksPerConnection,
        autoCreate: s.autoCreate,
        acl: new Acl(s.aclFile, logger('admin')),
        openProperties: { 'tandem.instance': this.instanceId },
      },
      logger('amqp'),
      () => this.status(),
    );
    registerHaOperations(this.server.management, this.ha, () => this.haStatus());
    if (this.ha) {
      const ha = this.ha;
      this.server.admission = (conn) => ha.admission(conn);
      // A backup's state is the primary's: nothing local may change it (that would also take LSNs).
      const readOnly = () => this.stoppingReason ?? (ha.isPrimary ? undefined : `this broker is an HA backup (${ha.state}); make changes on the primary`);
      this.server.readOnly = readOnly;
      this.server.management.readOnlyReason = readOnly;
      this.broker.localChangesRefused = readOnly;
    } else {
      const readOnly = () => this.stoppingReason;
      this.server.readOnly = readOnly;
      this.server.management.readOnlyReason = readOnly;
      this.broker.localChangesRefused = readOnly;
      this.startPrimaryTimers();
    }
    this.installDr();
    this.installPeerLinks();

    const bound = await this.server.listen();
    this.port = bound.port;
    this.tlsPort = bound.tlsPort;
    // Here, not with the other warnings: the port is known only now when it was 0.
    const clearText = this.port !== undefined ? plainPasswordWarning(s, this.port) : undefined;
    if (clearText !== undefined) this.log.warn(clearText);
    if (s.metricsPort !== undefined) {
      const journalDir = join(s.dataDir, JOURNAL_DIR_NAME);
      this.metrics = new Metrics({
        broker: this.broker,
        connections: () => this.server?.connectionCount ?? 0,
        handshakesRefused: () => this.server?.handshakesRefused ?? 0,
        extra: () => ({ ...haMetrics(this.ha), ...(this.dr?.metrics() ?? {}), ...pagingMetrics(this.pager, this.broker) }),
        ha: () => (this.ha ? { state: this.ha.state, settlementsHeld: this.ha.settlementsHeld, backups: this.ha.backupLags() } : { state: 'standalone', settlementsHeld: false, backups: [] }),
        dr: () => (this.dr?.status() ?? []).map((c) => ({ queue: c.queue, lagChanges: c['lag-changes'], lagSeconds: c['lag-seconds'], linkUp: c.link === 'connected', role: c.role, epoch: c.epoch, quarantined: c.quarantined })),
        drRoles: DR_ROLES,
        paging: () => pagingStatus(this.pager, this.broker),
        journalBytes: () => filesBytes(journalDir),
        memoryAlarm: () => this.memoryAlarm.active,
        drWindow: this.drSource ? () => ({ kept: this.drSource!.keepsWindow, changes: this.drSource!.window.size, bytes: this.drSource!.window.byteSize }) : undefined,
      });
      this.metricsPort = await this.metrics.listen(s.metricsHost, s.metricsPort);
    }
    if (s.consolePort !== undefined) await this.startConsole(users);
    // One write, so a reader that waits for "listening on" sees the other ports too.
    const lines: string[] = [];
    if (this.port !== undefined) lines.push(`listening on ${hostPort(s.host, this.port)}`);
    if (this.tlsPort !== undefined) lines.push(`listening (tls) on ${hostPort(s.host, this.tlsPort)}`);
    if (this.metricsPort !== undefined) lines.push(`metrics on http://${hostPort(s.metricsHost, this.metricsPort)}/metrics`);
    if (this.consolePort !== undefined) lines.push(`console on ${s.tlsCert ? 'https' : 'http'}://${hostPort(s.consoleHost, this.consolePort)}/`);
    process.stdout.write(`${lines.join('\n')}\n`);
    this.log.info({ host: s.host, port: this.port, tlsPort: this.tlsPort, dataDir: s.dataDir, auth: s.auth }, 'broker ready');
    this.ha?.start();
    const where = this.port !== undefined ? hostPort(s.host, this.port) : `${hostPort(s.host, this.tlsPort!)} (tls)`;
    notifyReady(this.ha ? `HA ${this.ha.state} on ${where}` : `serving on ${where}`);
    this.ha?.sm.onChange((e) => notifyStatus(`HA ${e.to} on ${where}`));
    this.stopWatchdog = startWatchdog();
  }

  /**
   * The web console (src/console): its API runs the $management node's own operations.
   * In a cluster it also watches every broker of ha-brokers-url, once a second.
   */
  private async startConsole(users: UserDirectory): Promise<void> {
    const s = this.settings;
    const server = this.server!;
    if (this.ha) {
      const url = parseBrokersUrl(s.haBrokersUrl!);
      const watch = new ClusterWatch({
        endpoints: url.endpoints,
        own: () => this.haStatus() as unknown as HaAnswer,
        instanceId: this.instanceId,
        addressOf: (e) => endpointAddress(e, url, haIdentity(s), haLinkTls(s)),
      });
      this.clusterWatch = watch;
      watch.refreshEvery(1000);
    }
    const address = hostPort(s.host, (this.port ?? this.tlsPort)!);
    this.console = new ConsoleServer({
      host: s.consoleHost,
      port: s.consolePort!,
      tls: s.tlsCert && s.tlsKey ? { cert: s.tlsCert, key: s.tlsKey } : undefined,
      auth: s.auth,
      users,
      throttle: server.loginThrottle,
      ops: server.management.operations,
      cluster: () => (this.clusterWatch ? this.clusterWatch.view() : standaloneView(this.haStatus() as unknown as HaAnswer, address)),
      log: logger('console'),
    });
    this.consolePort = await this.console.listen();
    if (this.ha) this.ha.console = { port: this.consolePort, tls: this.console.secure };
    if (!s.auth) this.log.warn({ consoleHost: s.consoleHost }, 'the web console has no login (auth=no): whoever reaches its port on this machine may manage the broker');
  }

  /** HA-STATUS: this broker's role and position (standalone outside a cluster). */
  private haStatus(): Record<string, unknown> {
    if (this.ha) return { ...this.ha.status() };
    return { state: 'standalone', epoch: this.broker.epoch, lsn: this.broker.log.lsn, 'brokers-url': '', replicate: this.settings.haReplicate, primary: null, backups: [], instance: this.instanceId, console: this.consolePort !== undefined ? { port: this.consolePort, tls: this.console?.secure ?? false } : null };
  }

  /** Timers only the broker serving clients runs (a backup's queues follow the primary). */
  /** This broker serves publishers from here on (a standalone start, an HA promotion). */
  private startPrimaryTimers(): void {
    // Windows the journal or the primary's log fed are kept unindexed until now (dedup-window.ts).
    const started = performance.now();
    const keys = this.broker.indexDedupWindows();
    if (keys > 0) this.log.info({ keys, ms: Math.round(performance.now() - started) }, 'duplicate-detection windows indexed');
    this.drWindowFeed?.resumeIfPaused();
    // Their consumers were on the old primary, or went with the restart: none of them left
    // here. Only queues the log says had a consumer: one that never had any waits for its first.
    const scheduled = this.autoDelete.scheduleUnused(this.broker.queues.values());
    if (scheduled > 0) this.log.info({ queues: scheduled }, 'auto-delete queues that had a consumer and have none now are deleted after their auto-delete-delay unless one attaches');
    const expiry = setInterval(() => void this.expireInSlices(), 1000);
    expiry.unref();
    this.timers.push(expiry);
    this.dr?.start();
  }

  /**
   * Drop expired messages in slices of EXPIRY_SLICE, the event loop free between them
   * (1M messages expiring at once held it 2.3 s: no client served, no heartbeat sent,
   * docs/stalls.md). One run at a time; a run ends when a slice comes back short, or
   * when this broker stops taking local changes (stopping, or no longer primary). Then
   * held messages whose delivery time came are made available (scheduled.ts), likewise
   * in slices of RELEASE_SLICE.
   */
  private async expireInSlices(): Promise<void> {
    if (this.expiring) return;
    this.expiring = true;
    const nextTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));
    try {
      // Bounded: each slice removes EXPIRY_SLICE messages, or ends the run.
      while (this.broker.expire(EXPIRY_SLICE) === EXPIRY_SLICE) {
        await nextTurn();
        if (this.broker.localChangesRefused?.() !== undefined) break;
      }
      // Bounded likewise: each slice moves RELEASE_SLICE held messages into their queues' rows, or ends the run.
      while (this.broker.releaseDue(RELEASE_SLICE) === RELEASE_SLICE) await nextTurn();
    } finally {
      this.expiring = false;
    }
  }

  /** DR hooks on the AMQP server: the passive-queue guard, DR-* operations. */
  private installDr(): void {
    const server = this.server!;
    const dr = this.dr!;
    dr.register(server.management);
    server.checkLink = (conn, address, direction, browse) => dr.checkLink(conn, address, direction, browse);
  }

  /** The links only brokers open: a backup's replication, another site's DR bridge. */
  private installPeerLinks(): void {
    this.server!.openSpecialSender = (conn, address, sender) => {
      if (address === REPLICATION_ADDRESS && this.ha) return openReplicationLink(this.ha, conn, sender);
      if (address === DR_ADDRESS) return openDrSourceLink({ ha: this.ha, source: this.drSource }, conn, sender);
      return undefined;
    };
  }

  /** Stop at once: a stale primary or a fatal HA condition must not keep serving. */
  private fatal(reason: string): void {
    this.log.fatal({ reason }, 'stopping the broker');
    process.stderr.write(`tandemd: ${redact(reason)}\n`);
    this.server?.destroy();
    const exit = () => process.exit(75);
    const t = setTimeout(exit, 2000);
    t.unref();
    this.journal?.close().then(exit, exit);
  }

  status(): Record<string, unknown> {
    const heap = v8.getHeapStatistics();
    return {
      name: 'broker',
      version: VERSION,
      'ha-state': this.ha?.state ?? 'standalone',
      epoch: this.broker.epoch,
      lsn: this.broker.log.lsn,
      queues: this.broker.queues.size,
      exchanges: this.broker.exchanges.size,
      connections: this.server?.connectionCount ?? 0,
      'uptime-seconds': Math.round((monotonicNow() - this.startedAt) / 1000),
      'data-dir': this.settings.dataDir,
      ...pagingStatus(this.pager, this.broker),
      'memory-alarm': this.memoryAlarm.active,
      'memory-limit-bytes': this.settings.memoryLimit,
      'heap-used-bytes': heap.used_heap_size,
      'heap-limit-bytes': heap.heap_size_limit,
    };
  }

  /**
   * SIGHUP: read the TLS files that are refreshed while the broker runs again (cron
   * fetching CRLs, a renewed certificate): the AMQPS listener's, and the CRLs of HA and
   * DR links. New handshakes use them; established connections are left alone. What
   * does not read is logged and the copy read before stays in force. The line logged
   * names what was read, and says so when there was nothing: the users and ACL files are
   * not among them (they are re-read whenever they change, SIGHUP or not).
   */
  reloadTls(): void {
    if (this.stopping) return;
    const s = this.settings;
    const listenerFiles = s.tlsCert && s.tlsKey ? ['tls-cert', 'tls-key', ...(s.tlsCa ? ['tls-ca'] : []), ...(s.tlsCrl ? ['tls-crl'] : [])] : [];
    const listenerRead = this.server?.reloadTls() ?? true;
    const links = reloadLinkCrls();
    for (const warning of links.warnings) this.log.warn(warning);
    for (const error of links.errors) this.log.error(error);
    const reloaded = [...(listenerRead ? listenerFiles : []), ...links.reloaded];
    const failed = [...(listenerRead ? [] : listenerFiles), ...links.failed];
    const fields = { reloaded, failed };
    if (failed.length > 0) {
      this.log.error(fields, `SIGHUP: not reloaded (see above; the copies read before stay in force): ${failed.join(', ')}${reloaded.length > 0 ? `; reloaded: ${reloaded.join(', ')}` : ''}`);
    } else if (reloaded.length > 0) {
      this.log.info(fields, `SIGHUP: reloaded ${reloaded.join(', ')}; new TLS handshakes use them`);
    } else {
      this.log.info(fields, 'SIGHUP: no TLS files are configured, nothing to reload (the users and ACL files are re-read whenever they change)');
    }
  }

  /**
   * Clean shutdown: stop accepting, give consumers and pending settlements up to
   * shutdown-timeout to finish, close clients, flush and sync the journal.
   */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  /**
   * The order is what keeps a stopping primary (SIGTERM, demote, a planned move) from
   * losing messages: it takes nothing more first, settles what it took only once the
   * journal and the ready backups have it, and stops replicating last. (Stopping HA
   * first, with clients still connected, settled every publish of the shutdown-timeout
   * unreplicated: issue #21 lost 1,002 of 4,246 in a planned move.)
   */
  private async doStop(): Promise<void> {
    notifyStopping();
    // systemd's TimeoutStopSec (30 s in our units) would SIGKILL a clean stop that a longer
    // shutdown-timeout allows, mid-way: ask for as long as the steps below may take (this
    // never shortens the unit's own timeout).
    notifyExtendTimeout(stopBudgetMs(this.settings));
    this.stopWatchdog?.();
    // The console first: no page acts on a broker that is going away, no peer is asked about.
    this.clusterWatch?.close();
    this.clusterWatch = undefined;
    await this.console?.close();
    for (const t of this.timers) clearInterval(t);
    this.memoryAlarm.stop();
    this.autoDelete.stop();
    // DR bridges here publish what they pull: they stop with the other publishers.
    this.dr?.stop();
    const deadline = monotonicNow() + this.settings.shutdownTimeoutMs;
    const server = this.server;
    if (server) {
      // 1. Take nothing more: no connection, link or local change; what publishers
      //    still send is released (they send it again where they fail over to).
      this.stoppingReason = 'this broker is shutting down';
      const listening = server.stopListening();
      // 2. What was taken is settled as usual (journal, ready backups): HA still runs.
      await until(() => server.publishesPending === 0, deadline);
      // 3. Consumers settle what they hold (their acknowledgements replicate too),
      //    then every client is dropped.
      await until(() => server.unsettledOut === 0, deadline);
      // DR copies are told they have everything before their links go: after the restart they
      // resume across its LSN gap by the log, not with a snapshot (src/dr/restart-gap.ts).
      if (this.drSource && this.drSource.streams.size > 0) {
        await until(() => this.drSource!.flushStreams(), Math.min(deadline, monotonicNow() + 2000));
        const current = this.drSource.flushStreams();
        this.log[current ? 'info' : 'warn']({ lsn: this.broker.log.lsn, safe: this.drSource.safeLsn }, current ? 'DR copies are told they have every change' : 'DR copies could not be told they have every change: after the restart they may get a snapshot');
      }
      server.closeAll();
      await Promise.race([listening, sleep(Math.max(100, deadline - monotonicNow()))]);
      server.destroy();
    }
    // 4. Replication stops only once the ready backups have every change (a backup that
    //    stalls is dropped within two heartbeat intervals, so this is bounded).
    if (this.ha) await until(() => this.ha!.replicated(), Math.max(deadline, monotonicNow() + 2 * this.settings.haHeartbeatIntervalMs));
    this.drSource?.close();
    await this.ha?.stop();
    await this.metrics?.close();
    await this.hasher.close();
    await this.journal?.close();
    this.log.info('broker stopped');
  }
}

/** Margin for closing the listeners, the journal's last sync and the exit. */
const STOP_MARGIN_MS = 10_000;

/** The longest a clean stop (doStop) may take: shutdown-timeout, then the backups catching up. */
export function stopBudgetMs(s: Pick<Settings, 'shutdownTimeoutMs' | 'haCluster' | 'haHeartbeatIntervalMs'>): number {
  return s.shutdownTimeoutMs + (s.haCluster ? 2 * s.haHeartbeatIntervalMs : 0) + STOP_MARGIN_MS;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Poll `done` until it holds or the deadline (monotonicNow()) passes. */
async function until(done: () => boolean, deadline: number): Promise<void> {
  while (!done() && monotonicNow() < deadline) await sleep(20);
}

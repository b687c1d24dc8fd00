// Prometheus metrics over HTTP (prom-client). Gauges are read from the broker
// when scraped; settlement latency arrives on a diagnostics channel, so the hot
// path pays for it only while metrics are on.
import { boundHttpServer, connectionGone } from '../util/http-bounds.js';
import diagnostics_channel from 'node:diagnostics_channel';
import { redact } from './secrets.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Broker } from '../broker/broker.js';
import { haStates } from '../ha/states.js';
import { PacedPage } from './paced-page.js';
import { JOURNAL_SYNC_CHANNEL } from '../store/writer.js';
import type { PagingStatus } from '../store/paging-figures.js';

/** What the HA manager knows, read at scrape time (a broker without HA is `standalone`). */
export interface HaFigures {
  state: string;
  /** On the primary: publishers' settlements wait for ready backups (ha-min-ready-backups). */
  settlementsHeld: boolean;
  backups: Array<{ id: string; state: string; changes: number; seconds: number; bytes: number | null }>;
}

/** One DR copy on this broker; `lagSeconds` null when the copy cannot tell. */
export interface DrFigures {
  queue: string;
  lagChanges: number;
  lagSeconds: number | null;
  linkUp: boolean;
  /** Its role here (DR_ROLES: source, passive copy, activated, fenced, diverged). */
  role: string;
  epoch: number;
  /** Messages in its quarantine queue (QUEUE.dr-diverged). */
  quarantined: number;
}

export interface MetricsSources {
  broker: Broker;
  connections(): number;
  /** Sockets closed at accept because their address held its share of handshakes (max-handshakes-per-address). */
  handshakesRefused?(): number;
  /** Deprecated catch-all gauges (tandem_subsystem), kept one release. */
  extra?(): Record<string, number>;
  ha?(): HaFigures;
  dr?(): DrFigures[];
  journalBytes?(): Promise<number>;
  memoryAlarm?(): boolean;
  /** The DR source's window of recent changes (absent: not a DR source). */
  drWindow?(): { kept: boolean; changes: number; bytes: number };
  /** DR roles a copy can have, each a series of tandem_dr_role. */
  drRoles?: readonly string[];
  /** What paging does, as the broker's status says it. */
  paging?(): PagingStatus;
}

/**
 * A gauge with one label: at scrape time one series per item, labelled `key(item)`;
 * an item whose figure is null (unknown) gets none. A name ending in `_total` is a
 * running count, so it is typed a counter (Prometheus' convention; rate() and
 * promtool expect one), set from the count the broker keeps.
 */
function labelledGauge<T>(
  registry: Registry,
  spec: { name: string; help: string; label: string },
  items: () => Iterable<T>,
  key: (item: T) => string,
  read: (item: T) => number | null,
): Gauge | Counter {
  const each = (put: (labels: Record<string, string>, v: number) => void) => {
    for (const item of items()) {
      const v = read(item);
      if (v !== null) put({ [spec.label]: key(item) }, v);
    }
  };
  const config = { name: spec.name, help: spec.help, labelNames: [spec.label], registers: [registry] };
  if (isCounterName(spec.name)) {
    return new Counter({
      ...config,
      collect() {
        this.reset();
        each((labels, v) => this.inc(labels, v));
      },
    });
  }
  return new Gauge({
    ...config,
    collect() {
      this.reset();
      each((labels, v) => this.set(labels, v));
    },
  });
}

const isCounterName = (name: string): boolean => name.endsWith('_total');

/** A figure without labels, read at scrape time: a counter when named `_total` (set from the count kept), else a gauge. */
function figure(registry: Registry, name: string, help: string, read: () => number): void {
  const config = { name, help, registers: [registry] };
  if (isCounterName(name)) {
    new Counter({
      ...config,
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  } else {
    new Gauge({
      ...config,
      collect() {
        this.set(read());
      },
    });
  }
}

/** Sockets the metrics listener holds at once; more are closed as they come. */
export const MAX_CONNECTIONS = 16;

export class Metrics {
  readonly registry = new Registry();
  /** The page being made (perPage). */
  private pageNumber = 0;
  readonly settlementLatency: Histogram;
  readonly published: Counter;
  private server: Server | undefined;
  private readonly unsubscribe: () => void;

  constructor(sources: MetricsSources) {
    const r = this.registry;
    collectDefaultMetrics({ register: r, prefix: 'tandem_process_' });
    this.settlementLatency = new Histogram({
      name: 'tandem_settlement_latency_seconds',
      help: 'Time from a message arriving to its sender being told accepted',
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
      registers: [r],
    });
    this.published = new Counter({ name: 'tandem_messages_accepted_total', help: 'Messages whose senders were told accepted', registers: [r] });
    const onAccepted = (m: unknown) => {
      this.settlementLatency.observe((m as { seconds: number }).seconds);
      this.published.inc();
    };
    diagnostics_channel.subscribe('tandem:amqp:accepted', onAccepted);
    const journalSync = new Histogram({
      name: 'tandem_journal_sync_seconds',
      help: 'Duration of each journal write and sync (one per segment a flush touches)',
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [r],
    });
    const onSynced = (m: unknown) => journalSync.observe((m as { seconds: number }).seconds);
    diagnostics_channel.subscribe(JOURNAL_SYNC_CHANNEL, onSynced);
    this.unsubscribe = () => {
      diagnostics_channel.unsubscribe('tandem:amqp:accepted', onAccepted);
      diagnostics_channel.unsubscribe(JOURNAL_SYNC_CHANNEL, onSynced);
    };
    this.registerSubsystems(sources);
    new Gauge({
      name: 'tandem_connections',
      help: 'Open client connections',
      registers: [r],
      collect() {
        this.set(sources.connections());
      },
    });
    const refused = sources.handshakesRefused;
    if (refused) figure(r, 'tandem_connections_refused_handshakes_total', 'Sockets closed at accept because their client address already held its share of connections that had not opened (max-handshakes-per-address)', refused);
    new Gauge({
      name: 'tandem_log_lsn',
      help: 'Last log sequence number recorded or applied',
      registers: [r],
      collect() {
        this.set(sources.broker.log.lsn);
      },
    });
    // A connection's own queues (temporary reply queues: every tandem command, console
    // page and JMS requester makes one, named by a new uuid) are summed, not labelled:
    // a series each would grow the scraper's series without bound.
    const named = function* () {
      for (const q of sources.broker.queues.values()) if (q.owner === undefined) yield q;
    };
    const temporary = function* () {
      for (const q of sources.broker.queues.values()) if (q.owner !== undefined) yield q;
    };
    const perQueue = (name: string, help: string, read: (q: import('../broker/queue.js').Queue) => number, queues = named) =>
      labelledGauge(r, { name, help, label: 'queue' }, queues, (q) => q.name, read);
    const summed = (name: string, help: string, read: (q: import('../broker/queue.js').Queue) => number) =>
      new Gauge({
        name,
        help,
        registers: [r],
        collect() {
          let total = 0;
          for (const q of temporary()) total += read(q);
          this.set(total);
        },
      });
    summed('tandem_temporary_queues', "Queues a connection owns (temporary reply queues), which have no series of their own", () => 1);
    summed('tandem_temporary_queue_depth', 'Messages on all temporary queues together', (q) => q.depth);
    summed('tandem_temporary_queue_bytes', 'Bytes of message data on all temporary queues together', (q) => q.byteDepth);
    perQueue('tandem_queue_depth', 'Messages on the queue (available and acquired)', (q) => q.depth);
    perQueue('tandem_queue_bytes', 'Bytes of message data on the queue', (q) => q.byteDepth);
    perQueue('tandem_queue_unreadable_messages', 'Messages set aside because their body cannot be read back from the journal (a damaged record): queued, not delivered', (q) => q.unreadableDepth);
    perQueue('tandem_queue_scheduled_messages', 'Messages held until the delivery time their sender asked for (JMS delivery delay): queued, not delivered yet', (q) => q.scheduledDepth);
    perQueue('tandem_queue_consumers', 'Consumers of the queue', (q) => q.consumerCount);
    perQueue('tandem_queue_enqueued_total', 'Messages enqueued since start (rate() of it is the enqueue rate)', (q) => q.enqueued);
    perQueue('tandem_queue_dequeued_total', 'Messages dequeued since start', (q) => q.dequeued);
    perQueue('tandem_queue_dedup_duplicates_total', 'Messages settled accepted as duplicates (their key was in the window) and not enqueued again', (q) => q.dedupCounts.duplicates);
    perQueue('tandem_queue_dedup_without_key_total', 'Messages passed without duplicate detection: no key', (q) => q.dedupCounts.withoutKey);
    perQueue('tandem_queue_dedup_invalid_key_total', 'Messages passed without duplicate detection: a key of a type that is not compared', (q) => q.dedupCounts.invalidKey);
    perQueue('tandem_queue_dedup_keys', 'Keys in the duplicate-detection window', (q) => q.dedup?.size ?? 0);
    // Message groups: series only for the queues that have them (qpid.message-groups).
    const grouped = function* () {
      for (const q of named()) if (q.groupCount !== undefined) yield q;
    };
    perQueue('tandem_queue_message_groups_owned', 'Message groups a consumer holds now (it has unsettled messages of each); on queues with message groups only', (q) => q.ownedGroupCount ?? 0, grouped);
    perQueue(
      'tandem_queue_message_group_rows_skipped_total',
      'Messages dispatch passed over because another consumer owns their group, counted per pass since start; on queues with message groups only',
      (q) => q.groupRowsSkipped,
      grouped,
    );
    perQueue('tandem_queue_ring_overflow_total', 'New messages a full ring queue lost because its available messages could not make way (the rest were out with consumers or held until their delivery time)', (q) => q.ringOverflow);
    figure(r, 'tandem_dead_letters_lost_total', 'Messages that left a queue for its alternate exchange and could not go on (their body unreadable, or the queues it routes to full): dropped, each logged', () => sources.broker.deadLettersLost);
    if (sources.extra) {
      const extra = sources.extra;
      new Gauge({
        name: 'tandem_subsystem',
        help: 'DEPRECATED, removed in the next release: use tandem_ha_*, tandem_dr_*, tandem_log_lsn and tandem_store_* instead. Journal, HA and DR figures by name',
        labelNames: ['name'],
        registers: [r],
        collect() {
          this.reset();
          for (const [k, v] of Object.entries(extra())) this.set({ name: k }, v);
        },
      });
    }
  }

  /**
   * HA, DR, journal and memory gauges, each read from its subsystem when scraped. The HA,
   * DR and paging figures are read once a page (perPage), though several families show them.
   */
  private registerSubsystems(sources: MetricsSources): void {
    const r = this.registry;
    const { journalBytes, memoryAlarm } = sources;
    const ha = sources.ha && this.perPage(sources.ha);
    const dr = sources.dr && this.perPage(sources.dr);
    const paging = sources.paging && this.perPage(sources.paging);
    if (ha) {
      new Gauge({
        name: 'tandem_ha_state',
        help: 'HA state of this broker: 1 for the current state, 0 for the others (active is the primary)',
        labelNames: ['state'],
        registers: [r],
        collect() {
          const now = ha().state;
          for (const st of haStates) this.set({ state: st }, st === now ? 1 : 0);
        },
      });
      new Gauge({
        name: 'tandem_ha_settlements_held',
        help: "1 while this primary holds publishers' settlements for want of the ready backups ha-min-ready-backups asks for (0 otherwise)",
        registers: [r],
        collect() {
          this.set(ha().settlementsHeld ? 1 : 0);
        },
      });
      new Gauge({
        name: 'tandem_ha_epoch',
        help: 'The epoch this broker is at: each promotion makes a new one, higher than every broker of the cluster had (0 before the first)',
        registers: [r],
        collect() {
          this.set(sources.broker.epoch);
        },
      });
      new Gauge({
        name: 'tandem_ha_backups_ready',
        help: 'Backups in state ready that this broker serves as primary (0 unless primary)',
        registers: [r],
        collect() {
          this.set(ha().backups.filter((b) => b.state === 'ready').length);
        },
      });
      const perBackup = (name: string, help: string, read: (b: HaFigures['backups'][number]) => number | null) =>
        labelledGauge(r, { name, help, label: 'backup' }, () => ha().backups, (b) => b.id, read);
      perBackup('tandem_ha_backup_lag_changes', 'Changes the primary logged that the backup has not acknowledged', (b) => b.changes);
      perBackup('tandem_ha_backup_lag_seconds', 'Age of the oldest change sent to the backup and not acknowledged (0 when it owes none)', (b) => b.seconds);
      perBackup('tandem_ha_backup_lag_bytes', 'Bytes of the encoded changes the backup has not acknowledged (absent while it loads a snapshot)', (b) => b.bytes);
    }
    if (dr) {
      const perCopy = (name: string, help: string, read: (c: DrFigures) => number | null) =>
        labelledGauge(r, { name, help, label: 'queue' }, dr, (c) => c.queue, read);
      perCopy('tandem_dr_lag_changes', 'Source changes the DR copy has not applied yet', (c) => c.lagChanges);
      perCopy('tandem_dr_lag_seconds', 'How far behind its source the DR copy is, in seconds (absent while unknown)', (c) => c.lagSeconds);
      perCopy('tandem_dr_link_up', '1 while the DR copy is connected to its source', (c) => (c.linkUp ? 1 : 0));
      perCopy('tandem_dr_epoch', 'The DR epoch of the queue here: each activation or switchover makes a new one', (c) => c.epoch);
      perCopy('tandem_dr_quarantined_messages', "Messages in the queue's quarantine (QUEUE.dr-diverged) after a reattach", (c) => c.quarantined);
      const roles = sources.drRoles ?? [];
      new Gauge({
        name: 'tandem_dr_role',
        help: `DR role of each DR queue here: 1 for its current role, 0 for the others (${roles.join(', ')})`,
        labelNames: ['queue', 'role'],
        registers: [r],
        collect() {
          this.reset();
          for (const c of dr()) for (const role of roles) this.set({ queue: c.queue, role }, role === c.role ? 1 : 0);
        },
      });
    }
    if (paging) {
      const pagingFigure = (name: string, help: string, read: (p: PagingStatus) => number) => figure(r, name, help, () => read(paging()));
      pagingFigure('tandem_store_max_memory_bytes', 'max-memory: message bodies held in memory past this are paged to the journal (0: no paging)', (p) => p['max-memory']);
      pagingFigure('tandem_store_resident_bytes', 'Bytes of message bodies held in memory', (p) => p['resident-bytes']);
      pagingFigure('tandem_store_paged_messages', 'Messages whose bodies are in the journal only (paged)', (p) => p['paged-messages']);
      pagingFigure('tandem_store_paged_bytes', 'Bytes of the paged bodies', (p) => p['paged-bytes']);
      pagingFigure('tandem_store_paged_out_total', 'Bodies paged out of memory, ever', (p) => p['paged-out-total']);
      pagingFigure('tandem_store_read_back_total', 'Paged bodies read back from the journal, ever', (p) => p['read-back-total']);
    }
    if (journalBytes) {
      new Gauge({
        name: 'tandem_journal_bytes',
        help: 'Bytes of the journal directory on disk (segments and checkpoint)',
        registers: [r],
        async collect() {
          this.set(await journalBytes());
        },
      });
    }
    if (sources.drWindow) {
      const drWindow = sources.drWindow;
      const gauge = (name: string, help: string, read: (w: ReturnType<typeof drWindow>) => number) =>
        new Gauge({ name, help, registers: [r], collect() { this.set(read(drWindow())); } });
      gauge('tandem_dr_window_kept', '1 once a DR copy follows this cluster and the DR window of recent changes is kept, 0 before (nothing is kept)', (w) => (w.kept ? 1 : 0));
      gauge('tandem_dr_window_changes', 'Changes held in the DR window', (w) => w.changes);
      gauge('tandem_dr_window_bytes', 'Bytes of encoded changes held in the DR window', (w) => w.bytes);
    }
    if (memoryAlarm) {
      new Gauge({
        name: 'tandem_memory_alarm',
        help: '1 while the memory alarm blocks publishers',
        registers: [r],
        collect() {
          this.set(memoryAlarm() ? 1 : 0);
        },
      });
    }
  }

  /** `read`, asked once for each page made however many families show what it gives. */
  private perPage<T>(read: () => T): () => T {
    let page = -1;
    let value: T;
    return () => {
      if (page !== this.pageNumber) {
        value = read();
        page = this.pageNumber;
      }
      return value;
    };
  }

  async listen(host: string, port: number): Promise<number> {
    // With Node's defaults every socket was accepted and one that never finished its
    // headers was held 60-90 s (a client connecting then got a bare close). A scraper
    // needs one connection; headers are checked every second.
    const pages = new PacedPage(async () => {
      this.pageNumber++;
      return redact(await this.registry.metrics());
    });
    this.server = createServer({ connectionsCheckingInterval: 1_000 }, (req, res) => {
      // Closed for pipelining too many requests (http-bounds.ts): no page is made for the rest.
      if (connectionGone(req)) return;
      if (req.url !== '/metrics') {
        res.writeHead(404).end('metrics are at /metrics\n');
        return;
      }
      pages.page().then(
        (page) => res.writeHead(200, { 'content-type': this.registry.contentType, 'content-length': page.length }).end(page),
        (err: Error) => res.writeHead(500).end(`${redact(err.message)}\n`),
      );
    });
    boundHttpServer(this.server, MAX_CONNECTIONS);
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(port, host, () => resolve());
    });
    return (this.server.address() as AddressInfo).port;
  }

  close(): Promise<void> {
    this.unsubscribe();
    const s = this.server;
    this.server = undefined;
    return s ? new Promise((r) => s.close(() => r())) : Promise.resolve();
  }
}

// Prometheus metrics over HTTP (prom-client). Gauges are read from the broker
// when scraped; settlement latency arrives on a diagnostics channel, so the hot
// path pays for it only while metrics are on.
import diagnostics_channel from 'node:diagnostics_channel';
import { redact } from './secrets.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Broker } from '../broker/broker.js';

export interface MetricsSources {
  broker: Broker;
  connections(): number;
  /** Extra gauges from other subsystems (journal, HA, DR), read at scrape time. */
  extra?(): Record<string, number>;
}

export class Metrics {
  readonly registry = new Registry();
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
    this.unsubscribe = () => diagnostics_channel.unsubscribe('tandem:amqp:accepted', onAccepted);
    new Gauge({
      name: 'tandem_connections',
      help: 'Open client connections',
      registers: [r],
      collect() {
        this.set(sources.connections());
      },
    });
    new Gauge({
      name: 'tandem_log_lsn',
      help: 'Last log sequence number recorded or applied',
      registers: [r],
      collect() {
        this.set(sources.broker.log.lsn);
      },
    });
    const perQueue = (name: string, help: string, read: (q: import('../broker/queue.js').Queue) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['queue'],
        registers: [r],
        collect() {
          this.reset();
          for (const q of sources.broker.queues.values()) this.set({ queue: q.name }, read(q));
        },
      });
    perQueue('tandem_queue_depth', 'Messages on the queue (available and acquired)', (q) => q.depth);
    perQueue('tandem_queue_bytes', 'Bytes of message data on the queue', (q) => q.byteDepth);
    perQueue('tandem_queue_consumers', 'Consumers of the queue', (q) => q.consumerCount);
    perQueue('tandem_queue_enqueued_total', 'Messages enqueued since start (rate() of it is the enqueue rate)', (q) => q.enqueued);
    perQueue('tandem_queue_dequeued_total', 'Messages dequeued since start', (q) => q.dequeued);
    perQueue('tandem_queue_dedup_duplicates_total', 'Messages settled accepted as duplicates (their key was in the window) and not enqueued again', (q) => q.dedupCounts.duplicates);
    perQueue('tandem_queue_dedup_without_key_total', 'Messages passed without duplicate detection: no key', (q) => q.dedupCounts.withoutKey);
    perQueue('tandem_queue_dedup_invalid_key_total', 'Messages passed without duplicate detection: a key of a type that is not compared', (q) => q.dedupCounts.invalidKey);
    perQueue('tandem_queue_dedup_keys', 'Keys in the duplicate-detection window', (q) => q.dedup?.size ?? 0);
    if (sources.extra) {
      const extra = sources.extra;
      new Gauge({
        name: 'tandem_subsystem',
        help: 'Journal, HA and DR figures by name',
        labelNames: ['name'],
        registers: [r],
        collect() {
          this.reset();
          for (const [k, v] of Object.entries(extra())) this.set({ name: k }, v);
        },
      });
    }
  }

  async listen(host: string, port: number): Promise<number> {
    this.server = createServer((req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end('metrics are at /metrics\n');
        return;
      }
      this.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(redact(text)),
        (err: Error) => res.writeHead(500).end(`${err.message}\n`),
      );
    });
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

// What the console pages show, sampled once a second: the overview (broker, cluster,
// queues with rates, connections, DR copies) pushed to every open page as a
// server-sent event, and short histories (queue rates, DR lag) for the charts.
// Every figure comes from the same management operations the CLI uses.
import type { ServerResponse } from 'node:http';
import type { AdminOperations, Requester } from '../admin/dispatcher.js';
import { isTemporaryQueue, type Attributes } from '../admin/operations.js';
import type { Logger } from '../ops/log.js';
import { redactValue } from '../ops/secrets.js';
import type { ClusterView } from './cluster-view.js';
import { monotonicNow } from '../util/monotonic-clock.js';

export const TICK_MS = 1000;
/** Samples kept per chart: five minutes at one a second. */
export const HISTORY_SAMPLES = 300;
/** Queues listed in the overview and charted at most (the API lists them all). */
export const MAX_LISTED_QUEUES = 1000;
/** Pages watching at once; more are refused, each holds a connection. */
export const MAX_WATCHERS = 64;
/**
 * Of those, what users who are not admins may hold together, and each of them: else
 * one reader opening streams (a script, not pages) took every slot and the admins'
 * pages got 503 when they were needed.
 */
export const MAX_READER_WATCHERS = 48;
export const MAX_WATCHERS_PER_READER = 16;
/**
 * A page that has not taken the last overview is not sent another (the next one
 * supersedes it); one that has taken none for this many ticks is dropped. So a page
 * that never reads holds one overview, not a buffer of them: 64 such pages once held
 * 4 MiB each, and the broker's memory with them (its memory alarm stops producers).
 */
export const MAX_STALLED_TICKS = 30;

export interface QueueSample {
  t: number;
  depth: number;
  'in-rate': number;
  'out-rate': number;
}

export interface DrSample {
  t: number;
  'lag-changes': number;
  'lag-seconds': number | null;
}

export interface Overview {
  at: number;
  broker: Attributes;
  cluster: ClusterView;
  queues: Attributes[];
  'queues-total': number;
  /** Of queues-total, the temporary queues (a connection's own, named by a uuid). */
  'temporary-queues': number;
  connections: Attributes[];
  dr: Attributes[];
}

/**
 * The overview as a user who is not an admin sees it: no temporary queue. Its name is
 * the capability to write to it (operations.ts, isTemporaryQueue), so only admins are
 * shown it, as QUERY queue shows it only to them (dispatcher.ts).
 */
export function readerOverview(o: Overview): Overview {
  return { ...o, queues: o.queues.filter((q) => !isTemporaryQueue(q)), 'queues-total': o['queues-total'] - o['temporary-queues'], 'temporary-queues': 0 };
}

/** Appends to a bounded list, the oldest dropped. */
class Ring<T> {
  readonly items: T[] = [];
  push(item: T): void {
    this.items.push(item);
    if (this.items.length > HISTORY_SAMPLES) this.items.shift();
  }
}

/** Who opens a stream, as far as the limits above are concerned. */
export interface Viewer {
  user: string;
  admin: boolean;
}

interface Watcher {
  res: ServerResponse;
  viewer: Viewer;
  /** Ticks in a row at which the previous overview was still unsent. */
  stalled: number;
  /** Still allowed to watch (the session is live); checked at each tick. */
  allowed(): boolean;
  /** Whether it is an admin's page (else it is sent readerOverview); checked at each tick. */
  admin(): boolean;
}

const SAMPLER: Requester = { user: 'console', admin: true, connectionId: 'console-sampler', via: 'console' };

export class LiveOverview {
  private timer: NodeJS.Timeout | undefined;
  private last: Overview | undefined;
  private previousCounts = new Map<string, { t: number; enqueued: number; dequeued: number }>();
  private readonly queueHistory = new Map<string, Ring<QueueSample>>();
  private readonly drHistory = new Map<string, Ring<DrSample>>();
  private readonly watchers = new Set<Watcher>();
  private ticking = false;
  /** readerOverview of `last`, made once per tick for every reader's page. */
  private readerView: { of: Overview; view: Overview } | undefined;
  /**
   * `last` as JSON and as an event, for admins and for readers: serialised once per
   * tick, and the same bytes handed to every page (a socket keeps a reference, not a
   * copy), so pages cost neither a JSON.stringify each nor a copy each.
   */
  private encoded: { of: Overview; json: Map<boolean, Buffer>; event: Map<boolean, Buffer> } | undefined;

  constructor(
    private readonly ops: AdminOperations,
    private readonly cluster: () => ClusterView,
    private readonly log: Logger,
  ) {}

  start(): void {
    void this.tick();
    this.timer = setInterval(() => void this.tick(), TICK_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  /** The latest overview (built now if none yet) as JSON, as an admin (else a reader) sees it: GET /api/overview. */
  async currentJson(admin: boolean): Promise<Buffer> {
    const overview = this.last ?? (await this.sample());
    return this.encode(overview, admin).json;
  }

  private encode(overview: Overview, admin: boolean): { json: Buffer; event: Buffer } {
    if (this.encoded?.of !== overview) this.encoded = { of: overview, json: new Map(), event: new Map() };
    const { json, event } = this.encoded;
    let j = json.get(admin);
    if (!j) json.set(admin, (j = Buffer.from(JSON.stringify(redactValue(this.shown(overview, admin))))));
    let e = event.get(admin);
    if (!e) event.set(admin, (e = Buffer.concat([Buffer.from('event: overview\ndata: '), j, Buffer.from('\n\n')])));
    return { json: j, event: e };
  }

  private shown(overview: Overview, admin: boolean): Overview {
    if (admin) return overview;
    if (this.readerView?.of !== overview) this.readerView = { of: overview, view: readerOverview(overview) };
    return this.readerView.view;
  }

  queueSamples(name: string): QueueSample[] {
    return this.queueHistory.get(name)?.items ?? [];
  }

  drSamples(queue: string): DrSample[] {
    return this.drHistory.get(queue)?.items ?? [];
  }

  /**
   * Start streaming overviews to this response (an EventSource); false when too many
   * watch (in all, or of readers, or of this reader).
   */
  watch(res: ServerResponse, viewer: Viewer, allowed: () => boolean, admin: () => boolean): boolean {
    if (this.watchers.size >= MAX_WATCHERS) return false;
    if (!viewer.admin) {
      let readers = 0;
      let own = 0;
      for (const w of this.watchers) {
        if (w.viewer.admin) continue;
        readers++;
        if (w.viewer.user === viewer.user) own++;
      }
      if (readers >= MAX_READER_WATCHERS || own >= MAX_WATCHERS_PER_READER) return false;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-store', Connection: 'keep-alive' });
    // The browser reconnects by itself a second after a drop (a broker restart, say).
    res.write('retry: 1000\n\n');
    const watcher: Watcher = { res, viewer, stalled: 0, allowed, admin };
    this.watchers.add(watcher);
    res.on('close', () => this.watchers.delete(watcher));
    if (this.last) res.write(this.encode(this.last, admin()).event);
    return true;
  }

  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      const overview = await this.sample();
      this.last = overview;
      for (const w of [...this.watchers]) {
        if (!w.allowed()) {
          this.watchers.delete(w);
          w.res.end('event: logged-out\ndata: {}\n\n');
          continue;
        }
        this.send(w, overview);
      }
    } catch (err) {
      this.log.error({ err }, 'console: sampling failed');
    } finally {
      this.ticking = false;
    }
  }

  private send(w: Watcher, overview: Overview): void {
    // Bytes still in the response's buffer: the client has not taken the last overview.
    if (w.res.writableLength > 0) {
      if (++w.stalled >= MAX_STALLED_TICKS) {
        this.watchers.delete(w);
        w.res.destroy();
      }
      return;
    }
    w.stalled = 0;
    w.res.write(this.encode(overview, w.admin()).event);
  }

  private async sample(): Promise<Overview> {
    const now = Date.now();
    const [broker, queues, connections, dr] = await Promise.all([
      this.ops.perform('READ', 'broker', 'broker', {}, SAMPLER) as Promise<Attributes>,
      this.ops.perform('QUERY', 'queue', undefined, {}, SAMPLER) as Promise<Attributes[]>,
      this.ops.perform('QUERY', 'connection', undefined, {}, SAMPLER) as Promise<Attributes[]>,
      (this.ops.perform('DR-STATUS', 'broker', 'broker', {}, SAMPLER) as Promise<{ queues: Attributes[] }>).then(
        (r) => r.queues,
        () => [] as Attributes[],
      ),
    ]);
    queues.sort((a, b) => String(a.name).localeCompare(String(b.name)));
    const listed = queues.slice(0, MAX_LISTED_QUEUES).map((q) => this.withRates(q, now));
    this.forgetGone(this.queueHistory, new Set(listed.map((q) => String(q.name))));
    this.forgetGoneCounts(new Set(listed.map((q) => String(q.name))));
    for (const d of dr) {
      const name = String(d.queue);
      let ring = this.drHistory.get(name);
      if (!ring) this.drHistory.set(name, (ring = new Ring()));
      ring.push({ t: now, 'lag-changes': Number(d['lag-changes'] ?? 0), 'lag-seconds': d['lag-seconds'] === null ? null : Number(d['lag-seconds']) });
    }
    this.forgetGone(this.drHistory, new Set(dr.map((d) => String(d.queue))));
    return { at: now, broker, cluster: this.cluster(), queues: listed, 'queues-total': queues.length, 'temporary-queues': queues.filter(isTemporaryQueue).length, connections, dr };
  }

  /** The queue's attributes plus in/out rates (messages a second since the last sample). */
  private withRates(q: Attributes, now: number): Attributes {
    const name = String(q.name);
    const enqueued = Number(q.enqueued ?? 0);
    const dequeued = Number(q.dequeued ?? 0);
    const before = this.previousCounts.get(name);
    // Rates over the monotonic time between samples: a wall-clock step made one sample's a
    // thousand times too small (or nothing) though the queue's pace did not change.
    const t = monotonicNow();
    this.previousCounts.set(name, { t, enqueued, dequeued });
    const seconds = before ? (t - before.t) / 1000 : 0;
    const rate = (a: number, b: number) => (seconds > 0 ? Math.max(0, a - b) / seconds : 0);
    const inRate = before ? rate(enqueued, before.enqueued) : 0;
    const outRate = before ? rate(dequeued, before.dequeued) : 0;
    let ring = this.queueHistory.get(name);
    if (!ring) this.queueHistory.set(name, (ring = new Ring()));
    ring.push({ t: now, depth: Number(q.depth ?? 0), 'in-rate': inRate, 'out-rate': outRate });
    return { ...q, 'in-rate': inRate, 'out-rate': outRate };
  }

  private forgetGone<T>(map: Map<string, T>, live: Set<string>): void {
    for (const k of map.keys()) if (!live.has(k)) map.delete(k);
  }

  private forgetGoneCounts(live: Set<string>): void {
    for (const k of this.previousCounts.keys()) if (!live.has(k)) this.previousCounts.delete(k);
  }
}

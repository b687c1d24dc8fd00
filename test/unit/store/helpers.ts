// Shared test helpers for the journal: temp dirs, a seeded PRNG, sample changes
// and a reference model of broker state to compare recoveries against.

import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Change, ExchangeSettings, LoggedChange, MessageRecord, QueueSettings } from '../../../src/broker/changes.js';
import { dedupDigestAt } from '../../../src/broker/dedup-key.js';
import { Broker, type BrokerOptions } from '../../../src/broker/broker.js';
import { defaultQueueSettings } from '../../../src/broker/settings.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal } from '../../../src/store/journal.js';
import { Pager } from '../../../src/store/pager.js';
import { restoreBroker } from '../../../src/store/restore.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { encodeFrame, segmentPath } from '../../../src/store/segment.js';
import { prng as mulberry32 } from '../../../src/util/prng.js';

/** A fresh directory, on tmpfs when there is one (fdatasync there is cheap). */
export async function tempDir(prefix = 'tandem-store-'): Promise<string> {
  const base = existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
  return mkdtemp(path.join(base, prefix));
}

/**
 * A broker on the journal in `dataDir` (restored from what it holds), whose pager keeps
 * at most `maxMemory` bytes of bodies in memory, reading back 16 at a time: as tandemd
 * wires them. The caller closes the journal.
 */
export async function openPagedBroker(dataDir: string, maxMemory: number, options: { segmentBytes?: number; broker?: BrokerOptions } = {}): Promise<{ broker: Broker; journal: Journal; pager: Pager }> {
  const broker = new Broker(options.broker);
  let journal: Journal | undefined;
  const pager = new Pager({ broker, journal: () => journal, maxMemory, log: { warn() {} }, readAheadCount: 16 });
  const opened = await Journal.open({ dataDir, segmentBytes: options.segmentBytes });
  journal = opened.journal;
  restoreBroker(broker, journal, opened.recovered, pager);
  broker.log.resumeAfter(opened.recovered.lastLsn);
  broker.log.attach(journal);
  broker.log.attach(pager);
  return { broker, journal, pager };
}

/**
 * A new data dir whose journal is these segments, frame by frame, in this order: a
 * file order as compaction may leave it (a copy with an older LSN in a later segment).
 */
export async function journalDirOf(segments: LoggedChange[][]): Promise<string> {
  const dataDir = await tempDir();
  const dir = path.join(dataDir, 'journal');
  await mkdir(dir);
  for (const [i, records] of segments.entries()) await writeFile(segmentPath(dir, i + 1), Buffer.concat(records.map((r) => encodeFrame(encodeChange(r), 0))));
  return dataDir;
}

export async function removeDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

/** mulberry32: small, seeded, good enough to drive property tests reproducibly. */
export function prng(seed: number): { next(): number; int(n: number): number; pick<T>(xs: readonly T[]): T; chance(p: number): boolean } {
  const next = mulberry32(seed);
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (xs) => xs[Math.floor(next() * xs.length)]!,
    chance: (p) => next() < p,
  };
}

/** Settings of a durable queue (the broker's defaults otherwise), for the journal's sample changes. */
export const queueSettings = (over: Partial<QueueSettings> = {}): QueueSettings => ({ ...defaultQueueSettings, durable: true, ...over });

export const exchangeSettings = (over: Partial<ExchangeSettings> = {}): ExchangeSettings => ({
  durable: true,
  alternateExchange: '',
  replicate: 'all',
  ...over,
});

export const message = (id: number, body = `m${id}`, over: Partial<MessageRecord> = {}): MessageRecord => ({
  id,
  bytes: Buffer.from(body),
  headerLength: 0,
  durable: true,
  priority: 4,
  expiresAt: 0,
  deliveryCount: 0,
  subject: undefined,
  ...over,
});

/** One change of every kind (and both sides of every optional field). */
export function sampleChanges(): Change[] {
  return [
    { kind: 'queue-declare', name: 'orders', settings: queueSettings() },
    {
      kind: 'queue-declare',
      name: 'ünïcode-q',
      settings: queueSettings({ limitPolicy: 'ring', maxCount: 10, maxSize: 2 ** 40, replicate: 'configuration', priorities: 10, alternateExchange: 'alt', autoDeleteDelayMs: 5000, exclusive: true, autoDelete: true, defaultTtlMs: 60_000 }),
    },
    { kind: 'queue-declare', name: 'deduped', settings: queueSettings({ dedupWindow: 1_000_000, dedupTtlMs: 600_000, dedupKey: '_AMQ_DUPL_ID' }) },
    { kind: 'queue-declare', name: 'sub:app:s1', settings: queueSettings({ subscription: 'unshared' }) },
    { kind: 'queue-declare', name: 'sub:app:s2', settings: queueSettings({ subscription: 'shared' }) },
    { kind: 'enqueue', queue: 'deduped', message: message(3), dedup: { key: dedupDigestAt(Buffer.alloc(16, 0xab)), at: 1_700_000_000_123 } },
    { kind: 'dedup-keys', queue: 'deduped', rows: Buffer.alloc(64, 7) },
    { kind: 'dedup-forget', queue: 'deduped', keys: Buffer.alloc(32, 9) },
    { kind: 'queue-dedup', name: 'deduped', dedupWindow: 10, dedupTtlMs: 0, dedupKey: '' },
    { kind: 'queue-consumed', name: 'ünïcode-q' },
    { kind: 'queue-delete', name: 'orders' },
    { kind: 'exchange-declare', name: 'amq.topic', type: 'topic', settings: exchangeSettings() },
    { kind: 'exchange-declare', name: 'fan', type: 'fanout', settings: exchangeSettings({ replicate: undefined, durable: false }) },
    // Marked as made by a DR bridge (record code 27), with a source of two brokers and a non-ASCII name.
    { kind: 'exchange-declare', name: 'dr.made', type: 'direct', settings: exchangeSettings({ madeByDr: 'amqps:sïte-a:5671,site-b:5671' }) },
    { kind: 'exchange-delete', name: 'fan' },
    { kind: 'bind', exchange: 'amq.topic', queue: 'orders', key: 'a.#' },
    { kind: 'unbind', exchange: 'amq.topic', queue: 'orders', key: '' },
    { kind: 'enqueue', queue: 'orders', message: message(1) },
    {
      kind: 'enqueue',
      queue: 'orders',
      message: message(Number.MAX_SAFE_INTEGER, '', { bytes: Buffer.from([0, 1, 2, 255]), headerLength: 2, durable: false, priority: 9, expiresAt: 1_700_000_000_000, deliveryCount: 3, subject: 'sübject' }),
    },
    { kind: 'dequeue', queue: 'orders', id: 1 },
    { kind: 'transaction', changes: [] },
    {
      kind: 'transaction',
      changes: [
        { kind: 'enqueue', queue: 'orders', message: message(7) },
        { kind: 'dequeue', queue: 'orders', id: 1 },
        { kind: 'enqueue', queue: 'other', message: message(8, 'x'.repeat(1000)) },
        { kind: 'enqueue', queue: 'deduped', message: message(9), dedup: { key: dedupDigestAt(Buffer.alloc(16, 1)), at: 5 } },
      ],
    },
    { kind: 'epoch', epoch: 42 },
    { kind: 'dr-followed', since: 1_796_000_000_000 },
  ];
}

// ---- reference model ------------------------------------------------------

export interface ModelState {
  /** `consumed` only when a queue-consumed was applied to the queue (it is absent otherwise). */
  queues: Record<string, { settings: string; messages: Record<number, string>; consumed?: true }>;
  exchanges: Record<string, string>;
  bindings: string[];
  epoch: number;
}

/** Apply changes the way a broker would and return a comparable snapshot. */
export function modelState(changes: readonly Change[]): ModelState {
  const queues = new Map<string, { settings: string; messages: Map<number, string>; consumed?: true }>();
  const exchanges = new Map<string, string>();
  const bindings = new Set<string>();
  let epoch = 0;
  const q = (name: string) => {
    let s = queues.get(name);
    if (!s) queues.set(name, (s = { settings: '(undeclared)', messages: new Map() }));
    return s;
  };
  const one = (c: Change): void => {
    switch (c.kind) {
      case 'queue-declare':
        q(c.name).settings = JSON.stringify(c.settings);
        break;
      case 'queue-delete':
        queues.delete(c.name);
        for (const b of [...bindings]) if (b.split('|')[1] === c.name) bindings.delete(b);
        break;
      case 'queue-dedup': {
        // As the broker applies it: the queue's settings change; an unknown queue, nothing.
        const s = queues.get(c.name);
        if (s) s.settings = JSON.stringify({ ...JSON.parse(s.settings), dedupWindow: c.dedupWindow, dedupTtlMs: c.dedupTtlMs, dedupKey: c.dedupKey });
        break;
      }
      case 'queue-consumed': {
        const s = queues.get(c.name);
        if (s) s.consumed = true;
        break;
      }
      case 'exchange-declare':
        exchanges.set(c.name, `${c.type} ${JSON.stringify(c.settings)}`);
        break;
      case 'exchange-delete':
        exchanges.delete(c.name);
        for (const b of [...bindings]) if (b.split('|')[0] === c.name) bindings.delete(b);
        break;
      case 'bind':
        bindings.add(`${c.exchange}|${c.queue}|${c.key}`);
        break;
      case 'unbind':
        bindings.delete(`${c.exchange}|${c.queue}|${c.key}`);
        break;
      case 'enqueue':
        q(c.queue).messages.set(c.message.id, c.message.bytes.toString('hex'));
        break;
      case 'dequeue':
        queues.get(c.queue)?.messages.delete(c.id);
        break;
      case 'transaction':
        c.changes.forEach(one);
        break;
      case 'epoch':
        epoch = Math.max(epoch, c.epoch);
        break;
    }
  };
  changes.forEach(one);
  const out: ModelState = { queues: {}, exchanges: Object.fromEntries([...exchanges].sort()), bindings: [...bindings].sort(), epoch };
  for (const [name, s] of [...queues].sort()) {
    out.queues[name] = { settings: s.settings, messages: Object.fromEntries([...s.messages].sort((a, b) => a[0] - b[0])) };
    if (s.consumed) out.queues[name]!.consumed = true;
  }
  return out;
}

/** What the journal must keep of a log: durable entries, and epochs always. */
export function journaled(log: readonly LoggedChange[]): Change[] {
  return log.filter((e) => e.durable || e.change.kind === 'epoch').map((e) => e.change);
}

export function durable(journal: { whenDurable(lsn: number, cb: (err?: Error) => void): void }, lsn: number): Promise<void> {
  return new Promise((resolve, reject) => journal.whenDurable(lsn, (err) => (err ? reject(err) : resolve())));
}

/** Settles with the error (or undefined) instead of rejecting. */
export function durableResult(journal: { whenDurable(lsn: number, cb: (err?: Error) => void): void }, lsn: number): Promise<Error | undefined> {
  return new Promise((resolve) => journal.whenDurable(lsn, (err) => resolve(err)));
}

/**
 * A random broker workload that only makes changes a broker could make. With
 * `queueChanges`, also queue-dedup (`tandem queue set`) and queue-consumed (an
 * auto-delete queue's first consumer, once per queue); without, the same seed
 * gives the same log as before they existed.
 */
export class Workload {
  private readonly queues = new Map<string, number[]>();
  /** Queues that logged their queue-consumed (queueChanges). */
  private readonly consumed = new Set<string>();
  private readonly exchanges = new Set<string>();
  private readonly bindings = new Set<string>();
  private nextId = 1;
  private epoch = 0;
  readonly log: LoggedChange[] = [];

  constructor(
    private readonly rnd: ReturnType<typeof prng>,
    public lsn: number,
    private readonly options: { queueChanges?: boolean } = {},
  ) {}

  /** Produce one change (or null if the chosen op had nothing to act on). */
  step(): LoggedChange | null {
    const r = this.rnd;
    const qnames = [...this.queues.keys()];
    if (this.options.queueChanges && qnames.length > 0 && r.chance(0.08)) return this.queueChange(r.pick(qnames));
    const op = r.int(100);
    let change: Change | null = null;
    let isDurable = true;
    if (op < 6 || qnames.length === 0) {
      const name = `q${r.int(6)}`;
      if (!this.queues.has(name)) {
        this.queues.set(name, []);
        this.consumed.delete(name);
        const settings = this.options.queueChanges ? { dedupWindow: r.pick([0, 0, 10, 1000]), autoDelete: r.chance(0.3) } : {};
        change = { kind: 'queue-declare', name, settings: queueSettings({ maxCount: r.int(100), ...settings }) };
      }
    } else if (op < 9) {
      const name = r.pick(qnames);
      this.queues.delete(name);
      for (const b of [...this.bindings]) if (b.split('|')[1] === name) this.bindings.delete(b);
      change = { kind: 'queue-delete', name };
    } else if (op < 12) {
      const name = `e${r.int(3)}`;
      if (this.exchanges.has(name)) {
        this.exchanges.delete(name);
        for (const b of [...this.bindings]) if (b.split('|')[0] === name) this.bindings.delete(b);
        change = { kind: 'exchange-delete', name };
      } else {
        this.exchanges.add(name);
        change = { kind: 'exchange-declare', name, type: r.pick(['direct', 'topic', 'fanout'] as const), settings: exchangeSettings() };
      }
    } else if (op < 17 && this.exchanges.size > 0) {
      const exchange = r.pick([...this.exchanges]);
      const queue = r.pick(qnames);
      const key = `k${r.int(3)}`;
      const b = `${exchange}|${queue}|${key}`;
      if (this.bindings.has(b)) {
        this.bindings.delete(b);
        change = { kind: 'unbind', exchange, queue, key };
      } else {
        this.bindings.add(b);
        change = { kind: 'bind', exchange, queue, key };
      }
    } else if (op < 55) {
      const queue = r.pick(qnames);
      const id = this.nextId++;
      this.queues.get(queue)!.push(id);
      isDurable = r.chance(0.85);
      change = { kind: 'enqueue', queue, message: message(id, 'x'.repeat(r.int(40)), { durable: isDurable }) };
    } else if (op < 85) {
      const queue = r.pick(qnames);
      const ids = this.queues.get(queue)!;
      if (ids.length > 0) change = { kind: 'dequeue', queue, id: ids.splice(r.int(ids.length), 1)[0]! };
    } else if (op < 97) {
      const changes: Array<Extract<Change, { kind: 'enqueue' | 'dequeue' }>> = [];
      for (let i = 0, n = 1 + r.int(4); i < n; i++) {
        const queue = r.pick(qnames);
        const ids = this.queues.get(queue)!;
        if (r.chance(0.5) && ids.length > 0) changes.push({ kind: 'dequeue', queue, id: ids.splice(r.int(ids.length), 1)[0]! });
        else {
          const id = this.nextId++;
          ids.push(id);
          changes.push({ kind: 'enqueue', queue, message: message(id, 't'.repeat(r.int(20))) });
        }
      }
      change = { kind: 'transaction', changes };
    } else {
      change = { kind: 'epoch', epoch: ++this.epoch };
      isDurable = r.chance(0.5); // the journal must keep epochs anyway
    }
    if (!change) return null;
    const entry: LoggedChange = { lsn: ++this.lsn, change, durable: isDurable };
    this.log.push(entry);
    return entry;
  }

  /** A queue's duplicate-detection settings changed, or (once per queue) its first consumer. */
  private queueChange(name: string): LoggedChange {
    const r = this.rnd;
    let change: Change;
    if (!this.consumed.has(name) && r.chance(0.3)) {
      this.consumed.add(name);
      change = { kind: 'queue-consumed', name };
    } else {
      change = { kind: 'queue-dedup', name, dedupWindow: r.pick([0, 10, 100, 1000]), dedupTtlMs: r.pick([0, 60_000]), dedupKey: r.pick(['', 'k']) };
    }
    const entry: LoggedChange = { lsn: ++this.lsn, change, durable: true };
    this.log.push(entry);
    return entry;
  }
}

/**
 * A JournalIo that writes and then calls fdatasync (not O_DSYNC), counts both, and can
 * hold fdatasync until released: records appended meanwhile stay unsynced.
 */
export function holdableSyncIo() {
  const counts = { fdatasync: 0, write: 0 };
  let gate: Promise<void> | undefined;
  let open: (() => void) | undefined;
  const io: JournalIo = {
    ...nodeIo,
    syncedWrites: false,
    write: (...a) => {
      counts.write++;
      return nodeIo.write(...a);
    },
    fdatasync: async (fd) => {
      counts.fdatasync++;
      if (gate) await gate;
      return nodeIo.fdatasync(fd);
    },
  };
  return {
    io,
    counts,
    hold() {
      gate = new Promise((r) => (open = r));
    },
    release() {
      gate = undefined;
      open?.();
    },
  };
}

/** `p`, or a rejection naming `what` as a hang once `ms` pass (the fuzzes' guard against a stall). */
export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`hang: ${what} took over ${ms} ms`)), ms)));
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

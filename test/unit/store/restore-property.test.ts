// Property test of what a restart hands the broker, end to end: a random log of
// every change kind (queues declared again over themselves, fan-out of one
// message id to several queues, priority queues, TTL, delivery counts, subjects,
// transactions, DR transactions with source positions, DR queue records, epochs,
// queues' changed dedup settings and auto-delete queues' first consumers)
// goes through the journal with compaction and checkpoints running while it is
// written (automatic ones too, so they overlap). Crash images are taken at every
// step of a checkpoint write, before each segment unlink and at quiet moments,
// also as the directory may look after a crash that lost the rename or unlink not
// yet fsynced, and with the unsynced tail cut at a random byte.
//
// Each image is restored into a Broker (restoreBroker: configuration, then the
// queue rows straight from the journal's index) and compared with a Broker that
// applied the surviving records in LSN order: every queue's messages with all
// their fields and their delivery order, exchanges, bindings, epoch, DR state,
// and the journal's position (an HA backup resumes there). With the checkpoint
// and without it (a full replay in file order); then compacted, checkpointed and
// restarted once more, with that checkpoint and without.
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { Change, LoggedChange, MessageRecord } from '../../../src/broker/changes.js';
import type { BodyLoader } from '../../../src/broker/paged-message.js';
import { CHECKPOINT_FILE } from '../../../src/store/checkpoint.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal } from '../../../src/store/journal.js';
import { restoreBroker } from '../../../src/store/restore.js';
import { listSegments, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, exchangeSettings, message, prng, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await removeDir(d);
});

type Rnd = ReturnType<typeof prng>;
type TxOp = Extract<Change, { kind: 'enqueue' | 'dequeue' }>;

/** A random log a broker (primary, HA backup or DR secondary) could journal. */
class RichWorkload {
  private readonly queues = new Map<string, Set<number>>();
  /** Queues that logged their first consumer (queue-consumed, once per queue). */
  private readonly consumed = new Set<string>();
  private readonly exchanges = new Set<string>();
  private readonly bindings = new Set<string>();
  private nextId = 1;
  private sourceLsn = 0;
  private epoch = 0;
  readonly log: LoggedChange[] = [];

  constructor(
    private readonly rnd: Rnd,
    public lsn: number,
  ) {}

  /** One broker operation: one or more changes (a fan-out is one enqueue per queue). */
  step(): LoggedChange[] {
    const r = this.rnd;
    const names = [...this.queues.keys()];
    const op = r.int(100);
    const out: Array<{ change: Change; durable: boolean }> = [];
    const dropBindings = (pos: 0 | 1, name: string) => {
      for (const b of [...this.bindings]) if (b.split('|')[pos] === name) this.bindings.delete(b);
    };
    const dedupSettings = () => ({ dedupWindow: r.pick([0, 0, 10, 1000]), autoDelete: r.chance(0.3) });
    if (names.length > 0 && r.chance(0.05)) {
      // A queue's dedup settings changed (`tandem queue set`), or its first consumer (once per queue).
      const name = r.pick(names);
      if (!this.consumed.has(name) && r.chance(0.3)) {
        this.consumed.add(name);
        out.push({ change: { kind: 'queue-consumed', name }, durable: true });
      } else {
        out.push({ change: { kind: 'queue-dedup', name, dedupWindow: r.pick([0, 10, 100, 1000]), dedupTtlMs: r.pick([0, 60_000]), dedupKey: r.pick(['', 'k']) }, durable: true });
      }
    } else if (op < 6 || names.length === 0) {
      const name = `q${r.int(6)}`;
      if (!this.queues.has(name)) {
        this.queues.set(name, new Set());
        this.consumed.delete(name);
        out.push({ change: { kind: 'queue-declare', name, settings: queueSettings({ priorities: r.pick([1, 1, 3, 10]), ...dedupSettings() }) }, durable: true });
      }
    } else if (op < 8) {
      // Declared again over itself (an HA backup or DR secondary applies this): a new, empty queue.
      const name = r.pick(names);
      this.queues.set(name, new Set());
      this.consumed.delete(name);
      dropBindings(1, name);
      out.push({ change: { kind: 'queue-declare', name, settings: queueSettings({ priorities: r.pick([1, 3, 10]), ...dedupSettings() }) }, durable: true });
    } else if (op < 11) {
      const name = r.pick(names);
      this.queues.delete(name);
      dropBindings(1, name);
      out.push({ change: { kind: 'queue-delete', name }, durable: true });
    } else if (op < 14) {
      const name = `e${r.int(3)}`;
      if (this.exchanges.has(name) && r.chance(0.3)) {
        // Declared again over itself (as a backup may apply it): a new exchange, no bindings.
        dropBindings(0, name);
        out.push({ change: { kind: 'exchange-declare', name, type: r.pick(['direct', 'topic', 'fanout'] as const), settings: exchangeSettings() }, durable: true });
      } else if (this.exchanges.delete(name)) {
        dropBindings(0, name);
        out.push({ change: { kind: 'exchange-delete', name }, durable: true });
      } else {
        this.exchanges.add(name);
        out.push({ change: { kind: 'exchange-declare', name, type: r.pick(['direct', 'topic', 'fanout'] as const), settings: exchangeSettings() }, durable: true });
      }
    } else if (op < 19) {
      const exchange = r.pick([...this.exchanges, 'amq.direct']);
      const queue = r.pick(names);
      const key = `k${r.int(3)}`;
      const b = `${exchange}|${queue}|${key}`;
      if (this.bindings.delete(b)) out.push({ change: { kind: 'unbind', exchange, queue, key }, durable: true });
      else {
        this.bindings.add(b);
        out.push({ change: { kind: 'bind', exchange, queue, key }, durable: true });
      }
    } else if (op < 52) {
      const id = this.nextId++;
      const msg = this.message(id);
      const isDurable = r.chance(0.9);
      for (const queue of this.fanOut(names)) out.push({ change: { kind: 'enqueue', queue, message: msg }, durable: isDurable });
    } else if (op < 76) {
      const d = this.dequeue(names);
      if (d) out.push({ change: d, durable: true });
    } else if (op < 88) {
      out.push({ change: { kind: 'transaction', changes: this.ops(names, 1 + r.int(5)) }, durable: true });
    } else if (op < 95) {
      const queues = names.filter(() => r.chance(0.4));
      this.sourceLsn += 1 + r.int(50);
      out.push({ change: { kind: 'dr-transaction', queues, lsn: this.sourceLsn, time: 1_700_000_000_000 + this.sourceLsn, changes: this.ops(names, r.int(4)) }, durable: true });
    } else if (op < 97) {
      const queue = r.pick(names);
      const source = `site${r.int(2)}`;
      const mode = r.pick(['enqueue-and-dequeue', 'enqueue-only'] as const);
      // Older journals hold dr-queue records, newer ones dr-role records; the newest of either counts.
      if (r.chance(0.5)) out.push({ change: { kind: 'dr-queue', queue, source, mode, state: r.pick(['passive', 'active', 'removed'] as const) }, durable: true });
      else {
        const state = r.pick(['passive', 'active', 'removed', 'fenced', 'diverged'] as const);
        out.push({ change: { kind: 'dr-role', queue, source, mode, state, epoch: 1 + r.int(5), divergence: r.int(100), since: r.int(100), idFloor: r.int(100), fill: r.chance(0.5), exchanges: r.pick(['*', '', 'x.*']), tell: r.chance(0.5) }, durable: true });
      }
    } else {
      out.push({ change: { kind: 'epoch', epoch: ++this.epoch }, durable: r.chance(0.5) });
    }
    return out.map(({ change, durable }) => {
      const e: LoggedChange = { lsn: ++this.lsn, change, durable };
      this.log.push(e);
      return e;
    });
  }

  private message(id: number): MessageRecord {
    const r = this.rnd;
    const body = `${id}:${'b'.repeat(r.int(60))}`;
    return message(id, body, {
      headerLength: r.int(Math.min(body.length, 6)),
      durable: r.chance(0.8),
      priority: r.int(10),
      expiresAt: r.chance(0.3) ? 1_900_000_000_000 + r.int(1e9) : 0,
      deliveryCount: r.chance(0.3) ? 1 + r.int(5) : 0,
      subject: r.chance(0.4) ? `s.${r.int(100)}` : undefined,
    });
  }

  /** The queues one message goes to (like an exchange routing it): one to three. */
  private fanOut(names: string[]): string[] {
    const n = Math.min(names.length, 1 + (this.rnd.chance(0.25) ? this.rnd.int(3) : 0));
    const pool = [...names];
    const out: string[] = [];
    for (let i = 0; i < n; i++) out.push(pool.splice(this.rnd.int(pool.length), 1)[0]!);
    for (const q of out) this.queues.get(q)!.add(this.nextId - 1);
    return out;
  }

  private dequeue(names: string[]): TxOp | undefined {
    const queue = this.rnd.pick(names);
    const ids = [...this.queues.get(queue)!];
    if (ids.length === 0) return undefined;
    const id = ids[this.rnd.int(ids.length)]!;
    this.queues.get(queue)!.delete(id);
    return { kind: 'dequeue', queue, id };
  }

  private ops(names: string[], n: number): TxOp[] {
    const out: TxOp[] = [];
    for (let i = 0; i < n; i++) {
      const d = this.rnd.chance(0.45) ? this.dequeue(names) : undefined;
      if (d) out.push(d);
      else {
        const id = this.nextId++;
        const msg = this.message(id);
        for (const queue of this.fanOut(names)) out.push({ kind: 'enqueue', queue, message: msg });
      }
    }
    return out;
  }
}

/** Everything a restart must give back, comparable with toEqual. */
function brokerView(b: Broker) {
  const byName = <T extends { name: string }>(xs: Iterable<T>) => [...xs].sort((x, y) => (x.name < y.name ? -1 : 1));
  return {
    queues: byName(b.queues.values()).map((q) => ({
      name: q.name,
      settings: q.settings,
      consumed: q.consumed,
      dedupLimit: q.dedup?.limit,
      messages: q.entries().map((e) => ({
        id: e.msg.id,
        body: e.msg.bytes.toString(),
        headerLength: e.msg.headerLength,
        durable: e.msg.durable,
        priority: e.msg.priority,
        expiresAt: e.msg.expiresAt,
        deliveryCount: e.deliveryCount,
        recordDeliveryCount: e.msg.deliveryCount,
        subject: e.msg.subject,
      })),
      deliveryOrder: [...q.availableEntries()].map((e) => e.msg.id),
    })),
    exchanges: byName(b.exchanges.values()).map((e) => ({ name: e.name, type: e.type, settings: e.settings, bindings: e.bindings.map((x) => `${x.queue}|${x.key}`).sort() })),
    epoch: b.epoch,
    drQueues: [...b.drQueues].sort(),
    drPositions: [...b.drPositions].sort(),
  };
}

/** The broker a log gives when applied in LSN order (what the journal must give back). */
function modelView(entries: readonly LoggedChange[]) {
  const b = new Broker();
  for (const e of entries) if (e.durable || e.change.kind === 'epoch') b.apply(withoutNonDurableTxMessages(e), { adopt: false });
  return brokerView(b);
}

/** A transaction keeps only its durable messages in the journal (their dequeues are never journaled). */
function withoutNonDurableTxMessages(e: LoggedChange): LoggedChange {
  if (e.change.kind !== 'transaction') return e;
  return { ...e, change: { kind: 'transaction', changes: e.change.changes.filter((c) => c.kind !== 'enqueue' || c.message.durable) } };
}

/** Restore a journal directory into a fresh broker, as tandemd does at start. */
async function restored(dataDir: string, logger?: { info(o: unknown, msg?: string): void; warn(o: unknown): void; error(): void }) {
  const { journal, recovered } = await Journal.open({ dataDir, autoCompact: false, logger });
  const loader: BodyLoader = {
    load: (m) => journal.readMessages([{ queue: m.queue, id: m.id }])[0]!,
    loadSubject: (m) => journal.readRecords([{ queue: m.queue, id: m.id }])[0]!.subject,
  };
  const broker = new Broker();
  restoreBroker(broker, journal, recovered, loader);
  return { journal, recovered, view: brokerView(broker), nextId: broker.peekNextMessageId() };
}

/** The highest message id in the changes up to `lsn`. */
function maxIdUpTo(log: readonly LoggedChange[], lsn: number): number {
  let max = 0;
  for (const e of log) {
    if (e.lsn > lsn) break;
    const c = e.change;
    const ops = c.kind === 'enqueue' ? [c] : c.kind === 'transaction' || c.kind === 'dr-transaction' ? c.changes : [];
    for (const op of ops) if (op.kind === 'enqueue' && op.message.id > max) max = op.message.id;
  }
  return max;
}

/** LSNs of the changes whose records are whole in a journal directory. */
async function presentLsns(journalDir: string): Promise<Set<number>> {
  const present = new Set<number>();
  for (const id of await listSegments(journalDir)) {
    for (const r of scanSegment(await readFile(segmentPath(journalDir, id))).records) if (r.entry.change.kind !== 'lsn-reservation') present.add(r.entry.lsn);
  }
  return present;
}

interface Image {
  dir: string;
  where: string;
  /** Every change up to this LSN was confirmed durable when the image was taken. */
  confirmed: number;
}

/** A directory operation not yet covered by a directory fsync: a crash may undo it. */
interface PendingDirOp {
  seq: number;
  what: string;
  undo(journalDir: string): void;
}


/**
 * A copy of the journal directory as a crash image. The journal's own file
 * operations run on libuv's thread pool, so one in flight (a checkpoint's rename, a
 * segment's unlink) can take a file away between the copy's listing and its read of
 * that file: then the copy is made again, as the directory is a moment later.
 */
function copyImage(from: string, to: string): void {
  for (let attempt = 1; ; attempt++) {
    try {
      cpSync(from, to, { recursive: true });
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || attempt === 5) throw err;
      rmSync(to, { recursive: true, force: true });
    }
  }
}
describe('journal restore property', () => {
  for (const seed of [11, 12, 13, 14, 15, 16]) {
    it(`restore property - seed ${seed}: crash images around checkpoints and compaction restore the broker the surviving log describes`, async () => {
      const dataDir = await tempDir();
      const imagesDir = await tempDir();
      dirs.push(dataDir, imagesDir);
      const journalDir = path.join(dataDir, 'journal');
      const rnd = prng(seed);
      const work = new RichWorkload(rnd, 0);
      const images: Image[] = [];
      let current: Journal | undefined;
      let seq = 0;
      let pending: PendingDirOp[] = [];
      const take = (where: string, p = 0.35) => {
        if (images.length >= 60 || !current || !rnd.chance(p)) return;
        const dir = path.join(imagesDir, String(images.length));
        const jdir = path.join(dir, 'journal');
        copyImage(journalDir, jdir);
        const notes: string[] = [];
        // A crash may lose any of the directory operations no fsync covered yet.
        for (const op of pending) {
          if (!rnd.chance(0.5)) continue;
          op.undo(jdir);
          notes.push(`undone: ${op.what}`);
        }
        // ... and any part of what was written but not synced yet.
        if (rnd.chance(0.4)) notes.push(cutUnsynced(jdir, (current as unknown as { appliedEnd: { seg: number; offset: number } }).appliedEnd, rnd));
        images.push({ dir, where: [where, ...notes].join('; '), confirmed: current.durableLsn });
      };
      let checkpointTmpFd = -1;
      let renamed: PendingDirOp | undefined;
      const dirFds = new Map<number, number>();
      const io: JournalIo = {
        ...nodeIo,
        syncedWrites: false, // writes then fdatasync, which this io holds or watches
        open: async (p, flags) => {
          if (p === journalDir) take('before a directory sync');
          if (p.endsWith('checkpoint.tmp')) {
            // The rename to come replaces this one (or none).
            const file = path.join(journalDir, CHECKPOINT_FILE);
            const before = existsSync(file) ? readFileSync(file) : undefined;
            renamed = {
              seq: 0,
              what: `rename of a new checkpoint${before ? ' over the old one' : ''}`,
              undo: (jdir) => (before ? writeFileSync(path.join(jdir, CHECKPOINT_FILE), before) : rmSync(path.join(jdir, CHECKPOINT_FILE), { force: true })),
            };
          }
          const fd = await nodeIo.open(p, flags);
          if (p === journalDir) dirFds.set(fd, ++seq);
          if (p.endsWith('checkpoint.tmp')) checkpointTmpFd = fd;
          return fd;
        },
        write: (fd, ...rest) => {
          if (fd === checkpointTmpFd) take('before a checkpoint write', 0.15);
          return nodeIo.write(fd, ...rest);
        },
        fdatasync: (fd) => {
          if (fd === checkpointTmpFd) take('before the checkpoint sync');
          return nodeIo.fdatasync(fd);
        },
        fsync: async (fd) => {
          await nodeIo.fsync(fd);
          const at = dirFds.get(fd);
          // Synced: what happened in the directory before this sync began is durable.
          if (at !== undefined) pending = pending.filter((op) => op.seq > at);
        },
        close: async (fd) => {
          if (fd === checkpointTmpFd) {
            checkpointTmpFd = -1;
            // Closed after its sync: the rename follows now (or the write failed and the tmp is removed).
            if (renamed) pending.push({ ...renamed, seq: ++seq });
            renamed = undefined;
          }
          dirFds.delete(fd);
          return nodeIo.close(fd);
        },
      };
      const beforeDelete = (file: string) => {
        take(`before unlinking ${path.basename(file)}`);
        const content = readFileSync(file);
        const name = path.basename(file);
        pending.push({ seq: ++seq, what: `unlink of ${name}`, undo: (jdir) => writeFileSync(path.join(jdir, name), content) });
      };

      for (let session = 0; session < 3; session++) {
        const { journal, recovered } = await Journal.open({
          dataDir,
          io,
          autoCompact: rnd.chance(0.7),
          segmentBytes: 1024 + rnd.int(2048),
          reserveLsnBlock: 100,
          checkpointBytes: 2048 + rnd.int(6144),
          checkpointWriteBytes: 64 + rnd.int(512),
          compactionHooks: { beforeDelete },
        });
        current = journal;
        work.lsn = Math.max(work.lsn, recovered.lastLsn);
        const background: Array<Promise<unknown>> = [];
        for (let round = 0; round < 20; round++) {
          for (let i = 0; i < 20; i++) {
            for (const e of work.step()) journal.append(e);
            // Checkpoints and compaction while the log is written (and while each other runs).
            if (rnd.chance(0.03)) background.push(journal.checkpoint());
            if (rnd.chance(0.03)) background.push(journal.compact());
            if (rnd.chance(0.1)) await new Promise((r) => setImmediate(r));
          }
          await durable(journal, work.lsn);
          if (rnd.chance(0.3)) await Promise.all(background.splice(0));
          take(`session ${session}, round ${round}`, 0.2);
        }
        await Promise.all(background.splice(0));
        if (rnd.chance(0.5)) await journal.close();
        else {
          journal.destroy(); // kill -9
          await journal.close();
        }
        current = undefined;
        pending = [];
        // Every session ends with everything confirmed: the restart gives the whole log.
        const again = await restored(dataDir);
        await again.journal.close({ checkpoint: false });
        expect(again.view, `restart after session ${session}`).toEqual(modelView(work.log));
      }

      expect(images.length).toBeGreaterThan(8);
      let fromCheckpoint = 0;
      for (const image of images) {
        const jdir = path.join(image.dir, 'journal');
        const present = await presentLsns(jdir);
        const survivors = work.log.filter((e) => e.lsn <= image.confirmed || present.has(e.lsn));
        const expected = modelView(survivors);
        const newest = Math.max(0, ...survivors.filter((e) => e.durable || e.change.kind === 'epoch').map((e) => e.lsn));
        const hasCheckpoint = existsSync(path.join(jdir, CHECKPOINT_FILE));
        for (const variant of hasCheckpoint ? ['with its checkpoint', 'without its checkpoint'] : ['as it is']) {
          const dir = `${image.dir}-${variant.split(' ')[0]}`;
          cpSync(image.dir, dir, { recursive: true });
          if (variant === 'without its checkpoint') rmSync(path.join(dir, 'journal', CHECKPOINT_FILE));
          const what = `${image.where} (${variant})`;
          const warnings: unknown[] = [];
          let usedCheckpoint = false;
          const logger = { info: (_o: unknown, msg?: string) => void (msg?.includes('from its checkpoint') && (usedCheckpoint = true)), warn: (o: unknown) => void warnings.push(o), error() {} };
          const r = await restored(dir, logger);
          expect(r.view, what).toEqual(expected);
          // The journal's position: a restarted HA backup resumes the primary's log right after it.
          expect(r.recovered.lastChangeLsn, what).toBe(newest);
          expect(r.recovered.lastLsn, what).toBeGreaterThanOrEqual(Math.max(0, ...present));
          // No id a confirmed change carried (durable or not, consumed or not) is handed out again.
          expect(r.nextId, what).toBeGreaterThan(maxIdUpTo(work.log, image.confirmed));
          if (variant === 'with its checkpoint') {
            // An intact checkpoint always fits its journal (compaction kept what it needs).
            expect(warnings.filter((w) => (w as { keptAs?: string }).keptAs), what).toEqual([]);
            if (usedCheckpoint) fromCheckpoint++;
          }
          // Compacted and checkpointed after the restart, then restarted again: the same.
          await r.journal.compact();
          await r.journal.checkpoint();
          await r.journal.compact();
          await r.journal.close();
          const second = await restored(dir);
          await second.journal.close({ checkpoint: false });
          expect(second.view, `${what}, compacted and restarted`).toEqual(expected);
          expect(second.recovered.lastChangeLsn, `${what}, compacted and restarted`).toBe(newest);
          // What compaction left must still replay whole without a checkpoint (one may be set aside later).
          rmSync(path.join(dir, 'journal', CHECKPOINT_FILE), { force: true });
          const third = await restored(dir);
          await third.journal.close({ checkpoint: false });
          expect(third.view, `${what}, compacted, restarted without a checkpoint`).toEqual(expected);
        }
      }
      expect(fromCheckpoint).toBeGreaterThan(0);
    }, 90_000);
  }
});

/**
 * Cut a crash image's journal somewhere after `synced` (the end of what was
 * synced when it was taken): the writer writes segments in order, so what a crash
 * loses is a tail of the unsynced bytes, perhaps in the middle of a frame.
 */
function cutUnsynced(journalDir: string, synced: { seg: number; offset: number }, rnd: Rnd): string {
  const segs = readdirSegments(journalDir).filter((s) => s.id >= synced.seg);
  if (segs.length === 0) return 'nothing unsynced to cut';
  const at = segs[rnd.int(segs.length)]!;
  const from = at.id === synced.seg ? synced.offset : 0;
  if (at.size <= from) return 'nothing unsynced to cut';
  const cut = from + rnd.int(at.size - from + 1);
  truncateSync(path.join(journalDir, at.name), cut);
  for (const later of segs) if (later.id > at.id) truncateSync(path.join(journalDir, later.name), 0);
  return `unsynced tail cut at segment ${at.id} offset ${cut}`;
}

function readdirSegments(journalDir: string): Array<{ id: number; name: string; size: number }> {
  const out: Array<{ id: number; name: string; size: number }> = [];
  for (const name of readdirSync(journalDir)) {
    const m = /^(\d{8,})\.seg$/.exec(name);
    if (m) out.push({ id: Number(m[1]), name, size: statSync(path.join(journalDir, name)).size });
  }
  return out.sort((a, b) => a.id - b.id);
}

// File order as real compaction leaves it, then a restart: a queue's changed
// duplicate-detection settings (queue-dedup) and its window's keys must come back
// as they were whatever compaction copied past what. file-order.test.ts lays the
// same orderings out frame by frame for every record kind; these run the journal.
import { cp, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { dedupDigestAt } from '../../../src/broker/dedup-key.js';
import { DEDUP_ROW_BYTES, DedupWindow } from '../../../src/broker/dedup-window.js';
import type { BodyLoader } from '../../../src/broker/paged-message.js';
import { nodeIo, type JournalIo } from '../../../src/store/io.js';
import { Journal, type JournalOptions } from '../../../src/store/journal.js';
import { restoreBroker } from '../../../src/store/restore.js';
import { listSegments, scanSegment, segmentPath } from '../../../src/store/segment.js';
import { durable, holdableSyncIo, message, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const rec = (lsn: number, change: Change): LoggedChange => ({ lsn, change, durable: true });
const declare = (lsn: number, dedupWindow: number) => rec(lsn, { kind: 'queue-declare', name: 'q', settings: queueSettings({ dedupWindow }) });
const dedup = (lsn: number, dedupWindow: number) => rec(lsn, { kind: 'queue-dedup', name: 'q', dedupWindow, dedupTtlMs: 0, dedupKey: '' });
const del = (lsn: number) => rec(lsn, { kind: 'queue-delete', name: 'q' });
const epoch = (lsn: number, e: number) => rec(lsn, { kind: 'epoch', epoch: e });
const key = (n: number) => dedupDigestAt(Buffer.alloc(16, n));
const keyed = (lsn: number, id: number, k: number) => rec(lsn, { kind: 'enqueue', queue: 'q', message: message(id), dedup: { key: key(k), at: 1000 + k } });
const dequeue = (lsn: number, id: number) => rec(lsn, { kind: 'dequeue', queue: 'q', id });
const lsnsOf = (rows: Buffer | undefined): number[] => Array.from({ length: (rows?.length ?? 0) / DEDUP_ROW_BYTES }, (_, i) => rows!.readDoubleLE(i * DEDUP_ROW_BYTES + 24));

async function freshDir(): Promise<string> {
  const d = await tempDir();
  dirs.push(d);
  return d;
}

/** Dead records (only the newest epoch lives), so the segments they fill are mostly dead and roll. */
function filler(journal: Journal, from: number, n: number): number {
  let lsn = from;
  for (let i = 0; i < n; i++) journal.append(epoch(++lsn, lsn));
  return lsn;
}

/** Restart the journal into a broker, as tandemd does. */
async function restartedBroker(dataDir: string, opts: Partial<JournalOptions> = {}) {
  const { journal, recovered } = await Journal.open({ dataDir, autoCompact: false, checkpoint: false, ...opts });
  const loader: BodyLoader = { load: (m) => journal.readMessages([{ queue: m.queue, id: m.id }])[0]!, loadSubject: () => undefined };
  const broker = new Broker();
  restoreBroker(broker, journal, recovered, loader);
  await journal.close({ checkpoint: false });
  return { broker, recovered };
}

/** LSNs of the changes in the journal's files, in file order. */
async function fileOrder(dataDir: string): Promise<number[]> {
  const jdir = path.join(dataDir, 'journal');
  const out: number[] = [];
  for (const id of await listSegments(jdir)) for (const r of scanSegment(await readFile(segmentPath(jdir, id))).records) if (r.entry.change.kind !== 'lsn-reservation') out.push(r.entry.lsn);
  return out;
}

describe('compaction order - queue-dedup', () => {
  for (const [from, to] of [
    [0, 100],
    [100, 0],
  ] as const) {
    it(`queue-dedup - a window set from ${from} to ${to} stays so after compaction copies the queue's declare past it and a restart`, async () => {
      const dataDir = await freshDir();
      const { journal } = await Journal.open({ dataDir, autoCompact: false, checkpoint: false, segmentBytes: 512 });
      journal.append(declare(1, from));
      let lsn = 1;
      // Dead records until the next segment is open, then the change and a live message
      // there: that segment is mostly live, so compaction leaves it where it is.
      for (let i = 0; journal.currentSegment === 1 && i < 100; i++) lsn = filler(journal, lsn, 1);
      expect(journal.currentSegment).toBe(2);
      journal.append(dedup(++lsn, to));
      journal.append(rec(++lsn, { kind: 'enqueue', queue: 'q', message: message(1, 'x'.repeat(300)) }));
      await durable(journal, lsn);
      expect((await journal.compact()).deletedSegments).toContain(1);
      await journal.close({ checkpoint: false });
      // The declare (LSN 1) was copied into the open segment, after the queue-dedup.
      const order = await fileOrder(dataDir);
      expect(order.indexOf(1)).toBeGreaterThan(order.indexOf(lsn - 1));
      const { broker, recovered } = await restartedBroker(dataDir);
      expect(recovered.config.map((c) => c.change.kind).filter((k) => k !== 'epoch')).toEqual(['queue-declare', 'queue-dedup']);
      expect(broker.queues.get('q')?.settings.dedupWindow).toBe(to);
      expect(broker.queues.get('q')?.dedup?.limit).toBe(to === 0 ? undefined : to);
    });
  }

  it('queue-dedup - compaction does not copy one whose queue is being deleted (the copy would land after the delete, alive again at a restart)', async () => {
    const dataDir = await freshDir();
    // fdatasync can be held, so the delete stays unsynced while compaction runs.
    const { io, hold, release } = holdableSyncIo();
    const { journal } = await Journal.open({ dataDir, io, autoCompact: false, checkpoint: false, segmentBytes: 512, compactLiveRatio: 1 });
    journal.append(declare(1, 0));
    journal.append(dedup(2, 100));
    let lsn = filler(journal, 2, 30);
    await durable(journal, lsn);
    hold();
    journal.append(del(++lsn));
    const compacted = journal.compact();
    // Compaction either finishes (it copied nothing it waits on) or waits on a copy
    // behind the held sync; a bounded wait, then the sync goes on either way.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([compacted, new Promise((r) => (timer = setTimeout(r, 1000)))]);
    clearTimeout(timer);
    release();
    await durable(journal, lsn);
    await compacted;
    await journal.compact();
    await journal.close({ checkpoint: false });
    // Nothing about the deleted queue was copied after its delete.
    const order = await fileOrder(dataDir);
    expect(order.slice(order.indexOf(lsn))).not.toContain(2);
    const { broker, recovered } = await restartedBroker(dataDir);
    expect(recovered.config.map((c) => c.change.kind).filter((k) => k !== 'epoch')).toEqual([]);
    expect(broker.queues.has('q')).toBe(false);
  });
});

describe('compaction order - duplicate-detection windows', () => {
  it('dedup window - a checkpoint\'s keys survive compaction copying the queue\'s declare past the checkpoint, and a crash', async () => {
    const dataDir = await freshDir();
    const { journal } = await Journal.open({ dataDir, autoCompact: false, segmentBytes: 512 });
    // The broker's window, as a checkpoint asks for it.
    const window = new DedupWindow(10, 0);
    journal.windowSource = (upToLsn) => [{ queue: 'q', rows: window.rows({ upToLsn }) }];
    journal.append(declare(1, 10));
    journal.append(keyed(2, 1, 1));
    window.add(key(1), 1001, 2, true);
    journal.append(dequeue(3, 1)); // consumed: its key outlives it
    let lsn = filler(journal, 3, 30);
    await durable(journal, lsn);
    expect(await journal.checkpoint()).toBeDefined();
    // Segments before the checkpoint's are compacted: the declare is copied past it.
    expect((await journal.compact()).deletedSegments).toContain(1);
    journal.destroy(); // kill -9: no checkpoint at close
    await journal.close();
    const { broker, recovered } = await restartedBroker(dataDir, { checkpoint: true });
    expect(lsnsOf(recovered.dedupWindows.get('q')?.checkpointRows)).toEqual([2]);
    broker.queues.get('q')!.dedup!.ensureIndexed();
    // A resend of the consumed message is still known.
    expect(broker.queues.get('q')!.dedup!.size).toBe(1);
  });

  it('dedup window - an HA backup\'s delete and declare after a restart (below the reservation the open wrote) forget the old queue\'s keys', async () => {
    const dataDir = await freshDir();
    const a = await Journal.open({ dataDir, autoCompact: false, checkpoint: false, reserveLsnBlock: 100 });
    a.journal.append(declare(1, 10));
    a.journal.append(keyed(2, 1, 1));
    await durable(a.journal, 2);
    await a.journal.close();
    const b = await Journal.open({ dataDir, autoCompact: false, checkpoint: false, reserveLsnBlock: 100 });
    expect(b.recovered.lastLsn).toBeGreaterThan(2);
    // A backup resumes its primary's log after its newest change, below the reservation.
    b.journal.rewindTo(b.recovered.lastChangeLsn);
    b.journal.append(del(3));
    b.journal.append(declare(4, 10));
    await durable(b.journal, 4);
    await b.journal.close();
    const { broker, recovered } = await restartedBroker(dataDir);
    expect(recovered.dedupWindows.get('q')?.rows.length ?? 0).toBe(0);
    expect(broker.queues.get('q')!.dedup!.size).toBe(0);
  });

  it('dedup window - a keyed enqueue read twice (a crash between compaction\'s copy and its unlink) gives its key once', async () => {
    const dataDir = await freshDir();
    const image = await freshDir();
    let taken = false;
    const { journal } = await Journal.open({
      dataDir,
      autoCompact: false,
      checkpoint: false,
      segmentBytes: 512,
      compactLiveRatio: 1,
      compactionHooks: {
        async beforeDelete() {
          if (taken) return;
          taken = true;
          await cp(path.join(dataDir, 'journal'), path.join(image, 'journal'), { recursive: true });
        },
      },
    });
    journal.append(declare(1, 10));
    journal.append(keyed(2, 1, 1));
    const lsn = filler(journal, 2, 30);
    await durable(journal, lsn);
    await journal.compact();
    await journal.close({ checkpoint: false });
    expect(taken).toBe(true);
    // The image holds the enqueue twice: in its first segment and as the copy.
    expect((await fileOrder(image)).filter((l) => l === 2)).toHaveLength(2);
    const { broker, recovered } = await restartedBroker(image);
    expect(lsnsOf(recovered.dedupWindows.get('q')?.rows)).toEqual([2]);
    expect(broker.queues.get('q')!.dedup!.size).toBe(1);
  });
});

describe('compaction order - a checkpoint being written', () => {
  it('checkpoint - compaction while it is written leaves the segment of its position, so the next start uses it', async () => {
    const dataDir = await freshDir();
    // The checkpoint's writes wait for the gate: compaction runs meanwhile.
    let gate: Promise<void> | undefined;
    let open: (() => void) | undefined;
    let tmpFd = -1;
    let held = 0;
    const io: JournalIo = {
      ...nodeIo,
      open: async (p, flags) => {
        const fd = await nodeIo.open(p, flags);
        if (p.endsWith('checkpoint.tmp')) tmpFd = fd;
        return fd;
      },
      write: async (fd, ...rest) => {
        if (fd === tmpFd && gate) {
          held++;
          await gate;
        }
        return nodeIo.write(fd, ...rest);
      },
    };
    const { journal } = await Journal.open({ dataDir, io, autoCompact: false, segmentBytes: 512, compactLiveRatio: 1 });
    journal.append(declare(1, 0));
    let lsn = filler(journal, 1, 20);
    await durable(journal, lsn);
    const position = journal.currentSegment;
    gate = new Promise((r) => (open = r));
    const written = journal.checkpoint();
    // Dead records past the position's segment, then compaction: the first checkpoint is not on disk yet.
    for (let i = 0; journal.currentSegment <= position + 1 && i < 200; i++) lsn = filler(journal, lsn, 1);
    await durable(journal, lsn);
    await journal.compact();
    const segments = await listSegments(path.join(dataDir, 'journal'));
    gate = undefined;
    open!();
    expect(await written).toBeDefined();
    expect(held).toBeGreaterThan(0);
    expect(segments).toContain(position);
    journal.destroy(); // a crash: the start must use the checkpoint written
    await journal.close();
    const warned: unknown[] = [];
    let fromCheckpoint = false;
    const logger = { info: (_o: unknown, msg?: string) => void (fromCheckpoint ||= msg?.includes('from its checkpoint') ?? false), warn: (o: unknown) => void warned.push(o), error() {} };
    const again = await Journal.open({ dataDir, autoCompact: false, logger });
    await again.journal.close({ checkpoint: false });
    expect(warned).toEqual([]);
    expect(fromCheckpoint).toBe(true);
    expect(again.recovered.config.map((c) => c.change.kind).filter((k) => k !== 'epoch')).toEqual(['queue-declare']);
  });
});

import { cp, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { Journal } from '../../../src/store/journal.js';
import { durable, journaled, message, modelState, prng, queueSettings, removeDir, tempDir, Workload } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});
async function fresh(): Promise<string> {
  const d = await tempDir();
  dirs.push(d);
  return d;
}

async function journalBytes(dataDir: string): Promise<{ files: number; bytes: number }> {
  const dir = path.join(dataDir, 'journal');
  const names = (await readdir(dir)).filter((n) => n.endsWith('.seg'));
  let bytes = 0;
  // Background compaction may remove a file between readdir and stat.
  for (const n of names) bytes += (await stat(path.join(dir, n)).catch(() => ({ size: 0 }))).size;
  return { files: names.length, bytes };
}

/** A log where most messages are consumed: old segments become mostly or wholly dead. */
async function writeChurn(dataDir: string): Promise<LoggedChange[]> {
  const log: LoggedChange[] = [];
  const { journal } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 1024 });
  let lsn = 0;
  const add = (e: Omit<LoggedChange, 'lsn'>) => {
    const entry = { ...e, lsn: ++lsn } as LoggedChange;
    log.push(entry);
    journal.append(entry);
  };
  add({ change: { kind: 'queue-declare', name: 'keep', settings: queueSettings() }, durable: true });
  add({ change: { kind: 'queue-declare', name: 'drop', settings: queueSettings() }, durable: true });
  add({ change: { kind: 'exchange-declare', name: 'x', type: 'direct', settings: { durable: true, alternateExchange: '', replicate: undefined } }, durable: true });
  add({ change: { kind: 'bind', exchange: 'x', queue: 'keep', key: 'k' }, durable: true });
  add({ change: { kind: 'epoch', epoch: 1 }, durable: true });
  // One record that must outlive compaction however old it gets (the DR window stays on).
  add({ change: { kind: 'dr-followed', since: 1_796_000_000_000 }, durable: true });
  for (let id = 1; id <= 300; id++) {
    const queue = id % 7 === 0 ? 'drop' : 'keep';
    if (id % 20 === 0) {
      add({ change: { kind: 'transaction', changes: [{ kind: 'enqueue', queue, message: message(id, 'payload-'.repeat(4)) }, { kind: 'enqueue', queue: 'keep', message: message(10_000 + id) }] }, durable: true });
    } else {
      add({ change: { kind: 'enqueue', queue, message: message(id, 'payload-'.repeat(4)) }, durable: true });
    }
    // Consume most messages soon after; every 25th stays.
    if (id > 3 && (id - 3) % 25 !== 0) add({ change: { kind: 'dequeue', queue: (id - 3) % 7 === 0 ? 'drop' : 'keep', id: id - 3 }, durable: true });
  }
  add({ change: { kind: 'epoch', epoch: 2 }, durable: true });
  add({ change: { kind: 'queue-delete', name: 'drop' }, durable: true });
  await durable(journal, lsn);
  await journal.close();
  return log;
}

describe('journal compaction', () => {
  it('journal compaction - reclaims dead segments; recovery after equals recovery before', async () => {
    const dataDir = await fresh();
    const log = await writeChurn(dataDir);
    const sizeBefore = await journalBytes(dataDir);
    const a = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 1024 });
    const before = a.recovered;
    expect(modelState(before.changes.map((c) => c.change))).toEqual(modelState(journaled(log)));
    const report = await a.journal.compact();
    await a.journal.close();
    expect(report.deletedSegments.length).toBeGreaterThan(sizeBefore.files / 2);
    const sizeAfter = await journalBytes(dataDir);
    expect(sizeAfter.bytes).toBeLessThan(sizeBefore.bytes / 2);

    const b = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 1024 });
    await b.journal.close();
    expect(b.recovered.changes).toEqual(before.changes);
    expect(b.recovered.epoch).toBe(2);
    expect(b.recovered.lastLsn).toBeGreaterThanOrEqual(before.lastLsn);
  });

  it('journal compaction - a crash at any step of compaction loses and duplicates nothing', async () => {
    const dataDir = await fresh();
    await writeChurn(dataDir);
    const reference = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 1024 });
    await reference.journal.close();
    const snapshots: string[] = [];
    const a = await Journal.open({
      materialize: true,
      dataDir,
      autoCompact: false,
      segmentBytes: 1024,
      compactionHooks: {
        // Just before each unlink: copies are synced, the old segment still exists.
        async beforeDelete() {
          const snap = await fresh();
          await cp(path.join(dataDir, 'journal'), path.join(snap, 'journal'), { recursive: true });
          snapshots.push(snap);
        },
      },
    });
    const report = await a.journal.compact();
    await a.journal.close();
    expect(report.copiedRecords).toBeGreaterThan(0);
    expect(snapshots.length).toBe(report.deletedSegments.length);
    for (const snap of snapshots) {
      const r = await Journal.open({ materialize: true, dataDir: snap, autoCompact: false });
      await r.journal.close();
      expect(r.recovered.changes).toEqual(reference.recovered.changes);
    }
  });

  it('journal compaction - background compaction keeps disk use bounded under churn, across restarts', async () => {
    const dataDir = await fresh();
    const work = new Workload(prng(11), 0);
    let maxFiles = 0;
    for (let session = 0; session < 3; session++) {
      // Compaction keeps what the durable checkpoint needs: checkpoint often, so disk use stays close to live data.
      const { journal, recovered } = await Journal.open({ materialize: true, dataDir, segmentBytes: 2048, checkpointBytes: 4096 });
      expect(modelState(recovered.changes.map((c) => c.change))).toEqual(modelState(journaled(work.log)));
      work.lsn = recovered.lastLsn;
      for (let round = 0; round < 40; round++) {
        for (let i = 0; i < 30; i++) {
          const e = work.step();
          if (e) journal.append(e);
        }
        await durable(journal, work.lsn);
        // Drain the queues now and then, as consumers would.
        if (round % 5 === 4) await journal.compact();
        maxFiles = Math.max(maxFiles, (await journalBytes(dataDir)).files);
      }
      await journal.compact();
      await journal.close();
    }
    const live = modelState(journaled(work.log));
    const { journal, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    await journal.close();
    expect(modelState(recovered.changes.map((c) => c.change))).toEqual(live);
    const liveMessages = Object.values(live.queues).reduce((n, q) => n + Object.keys(q.messages).length, 0);
    const total = (await journalBytes(dataDir)).bytes;
    // Each live message is well under 200 bytes on disk; allow a few segments of slack.
    expect(total).toBeLessThan(liveMessages * 200 + 6 * 2048);
  });

  it('journal compaction - keeps the newest change on disk, so a restart knows how far the log went', async () => {
    const dataDir = await fresh();
    let lsn = 0;
    {
      const { journal } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 512 });
      journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
      // Everything after the declare dies: each enqueue is dequeued; the last change is a dequeue.
      for (let id = 1; id <= 40; id++) {
        journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, 'x'.repeat(64)) } });
        journal.append({ lsn: ++lsn, durable: true, change: { kind: 'dequeue', queue: 'q', id } });
      }
      await durable(journal, lsn);
      await journal.close();
    }
    {
      const { journal, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 512 });
      expect(recovered.lastChangeLsn).toBe(lsn);
      const report = await journal.compact();
      expect(report.deletedSegments.length).toBeGreaterThan(0);
      await journal.close();
    }
    const { journal, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    // Without the newest change kept, every segment after the declare's would be gone and this would be 1.
    expect(recovered.lastChangeLsn).toBe(lsn);
    expect(recovered.lastLsn).toBeGreaterThan(lsn); // the LSN reservations are above it
    expect(recovered.changes.map((c) => c.change.kind)).toEqual(['queue-declare']);
    await journal.close();
  });

  it('journal compaction - a dequeue outlives every stale copy of what it killed, not just the newest copy', async () => {
    // m is copied forward out of a segment that cannot go yet (its own tombstone
    // waits on an older segment). Then m is dequeued. The dequeue must stay as long
    // as that stale original does, even once m's copy is gone, or a replay of the
    // journal would bring m back.
    const dataDir = await fresh();
    const { journal } = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 400 });
    let lsn = 0;
    const put = (id: number) => journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: 'q', message: message(id, 'x'.repeat(60)) } });
    const take = (id: number) => journal.append({ lsn: ++lsn, durable: true, change: { kind: 'dequeue', queue: 'q', id } });
    const roll = async () => {
      const seg = journal.currentSegment;
      // Bounded: each filler adds about 100 bytes to a 400-byte segment.
      for (let i = 0; i < 10 && journal.currentSegment === seg; i++) {
        const id = 10_000 + lsn;
        put(id);
        take(id);
      }
      await durable(journal, lsn);
    };
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() } });
    put(1); // stays: keeps the first segment alive
    put(2);
    await roll();
    take(2); // a tombstone on the first segment: this segment cannot go while that one lives
    put(3); // m
    for (const id of [4, 5, 6]) put(id);
    await roll();
    for (const id of [4, 5, 6]) take(id);
    // A fresh segment, holding only fillers alive until later, receives m's copy.
    await roll();
    for (const id of [7, 8]) put(id);
    await durable(journal, lsn);
    await journal.compact();
    await roll();
    take(3);
    take(7);
    take(8);
    for (let k = 0; k < 4; k++) await roll();
    await journal.compact();
    await journal.compact();
    await journal.close();
    const { journal: again, recovered } = await Journal.open({ materialize: true, dataDir, autoCompact: false });
    await again.close();
    expect(recovered.changes.filter((c) => c.change.kind === 'enqueue').map((c) => (c.change as { message: { id: number } }).message.id)).toEqual([1]);
  });
});

// Compaction copies a segment's live records forward in slices (src/store/compactor.ts,
// docs/stalls.md): a segment can hold a million live frames, and copying them in one go
// kept the event loop for seconds. Between slices the broker goes on: messages not
// copied yet are consumed, and those must not be copied (or recovery would bring them
// back), while those already copied are killed at their new home.
import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { Journal } from '../../../src/store/journal.js';
import { durable, journaled, message, modelState, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const N = 100_000;

describe('journal compaction - in slices', () => {
  it('journal compaction - copies a big segment in slices, the event loop turning between them, and consumes meanwhile are kept', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const log: LoggedChange[] = [];
    const { journal } = await Journal.open({ dataDir, autoCompact: false, segmentBytes: 32 * 1024 * 1024 });
    let lsn = 0;
    const add = (e: Omit<LoggedChange, 'lsn'>): void => {
      const entry = { ...e, lsn: ++lsn } as LoggedChange;
      log.push(entry);
      journal.append(entry);
    };
    add({ change: { kind: 'queue-declare', name: 'q', settings: queueSettings() }, durable: true });
    for (let id = 1; id <= N; id++) add({ change: { kind: 'enqueue', queue: 'q', message: message(id) }, durable: true });
    // 3 of 5 consumed: the first segment is under half live, so compaction copies the rest.
    for (let id = 1; id <= N; id++) if (id % 5 < 3) add({ change: { kind: 'dequeue', queue: 'q', id }, durable: true });
    await durable(journal, lsn);
    // Roll on past the first segment, so it is closed and can be compacted.
    for (let id = N + 1; journal.index.segments.size < 3 && id < N + 10_000; id++) {
      add({ change: { kind: 'enqueue', queue: 'q', message: message(id, 'x'.repeat(64 * 1024)) }, durable: true });
      add({ change: { kind: 'dequeue', queue: 'q', id }, durable: true });
    }
    await durable(journal, lsn);
    const first = Math.min(...journal.index.segments.keys());
    const liveAtStart = journal.index.liveIn(first).length;
    expect(liveAtStart).toBeGreaterThan(3 * 8192);

    // While it runs: each turn of the event loop notes how many live frames the first
    // segment still holds, and consumes one of the messages still live (from the end,
    // where the copy has not got to yet, and from the start, copied already).
    const running = journal.compact();
    let done = false;
    void running.finally(() => (done = true));
    const seen: number[] = [];
    const left = [];
    for (let id = N; id >= 1; id--) if (id % 5 >= 3) left.push(id);
    // Bounded: stops with the compaction, or after 100,000 turns.
    for (let turn = 0; !done && turn < 100_000; turn++) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (!journal.index.segments.has(first)) continue;
      seen.push(journal.index.liveIn(first).length);
      const id = turn % 2 === 0 ? left.shift() : left.pop();
      if (id !== undefined) add({ change: { kind: 'dequeue', queue: 'q', id }, durable: true });
    }
    const report = await running;
    await durable(journal, lsn);
    await journal.close();

    // In slices: some turn saw the segment partly copied (in one go it is all or nothing).
    expect(seen.some((n) => n > 1 && n < liveAtStart - 1000)).toBe(true);
    expect(report.copiedRecords).toBeGreaterThan(0);
    // Recovery after it equals the log: nothing consumed came back, nothing kept was lost.
    const again = await Journal.open({ materialize: true, dataDir, autoCompact: false, segmentBytes: 32 * 1024 * 1024 });
    await again.journal.close();
    expect(modelState(again.recovered.changes.map((c) => c.change))).toEqual(modelState(journaled(log)));
  }, 120_000);
});

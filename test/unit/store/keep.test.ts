// Journal.keepMessage: a reader that must still see a message after its dequeue
// (a DR copy that has not reached it) keeps its record readable; compaction
// leaves that segment on disk until the keep is released, then removes it.
import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { Journal } from '../../../src/store/journal.js';
import { durable, message, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  for (const d of dirs.splice(0)) await removeDir(d);
});

const big = (id: number) => message(id, `m${id}:`.padEnd(2048, 'x'));

describe('journal keeps', () => {
  it('journal - a kept record stays readable after its dequeue and compaction until released', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { journal } = await Journal.open({ dataDir, autoCompact: false, segmentBytes: 16 * 1024 });
    journals.push(journal);
    let lsn = 0;
    const append = (change: LoggedChange['change']) => journal.append({ lsn: ++lsn, change, durable: true });
    append({ kind: 'queue-declare', name: 'q', settings: queueSettings() });
    for (let id = 1; id <= 20; id++) append({ kind: 'enqueue', queue: 'q', message: big(id) });
    await durable(journal, lsn);
    expect(journal.keepMessage('q', 999)).toBeUndefined();
    const loc = journal.keepMessage('q', 3)!;
    expect(loc).toBeDefined();
    // Everything dies; later records fill more segments.
    for (let id = 1; id <= 20; id++) append({ kind: 'dequeue', queue: 'q', id });
    for (let id = 21; id <= 60; id++) append({ kind: 'enqueue', queue: 'q', message: big(id) });
    await durable(journal, lsn);
    expect(journal.holds('q', 3)).toBe(false);
    const first = await journal.compact();
    expect(first.deletedSegments).not.toContain(loc.seg);
    expect(journal.readKept([{ queue: 'q', id: 3 }], [loc])[0]!.bytes.toString()).toBe(big(3).bytes.toString());
    journal.releaseKept(loc.seg);
    const second = await journal.compact();
    expect([...first.deletedSegments, ...second.deletedSegments]).toContain(loc.seg);
  });
});

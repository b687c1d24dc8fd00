// An enqueue-only DR copy of a queue whose bodies are paged out to the journal,
// with a consumer overtaking the reading: the messages it takes first are kept
// by their journal records, which compaction must leave on disk until the copy
// has read them (and may remove once it has). Real Journal, Pager and broker
// model; the AMQP side is covered by test/dr/snapshot.test.ts.
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { LoggedChange } from '../../../src/broker/changes.js';
import { PagedMessage } from '../../../src/broker/paged-message.js';
import { DrSnapshotReader } from '../../../src/dr/snapshot.js';
import { Journal, JOURNAL_DIR_NAME } from '../../../src/store/journal.js';
import { Pager } from '../../../src/store/pager.js';
import { listSegments } from '../../../src/store/segment.js';
import { FakeConsumer, msg, qs } from '../broker/helpers.js';
import { removeDir, tempDir } from '../store/helpers.js';

const KiB = 1024;
const dirs: string[] = [];
const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close().catch(() => undefined);
  for (const d of dirs.splice(0)) await removeDir(d);
});

const body = (n: number) => `m${n}:`.padEnd(KiB, String.fromCharCode(97 + (n % 26)));

async function synced(journal: Journal, broker: Broker): Promise<void> {
  await new Promise<void>((resolve, reject) => journal.whenDurable(broker.log.lsn, (err) => (err ? reject(err) : resolve())));
}

describe('DR snapshot reader with the journal', () => {
  it('DR snapshot reader - messages consumed before an enqueue-only copy reaches them are read from journal records compaction leaves until the copy is done', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const broker = new Broker();
    let journal: Journal | undefined;
    const pager = new Pager({ broker, journal: () => journal, maxMemory: 16 * KiB, log: { warn() {} }, readAheadCount: 16 });
    const opened = await Journal.open({ dataDir, segmentBytes: 32 * KiB, autoCompact: false });
    journal = opened.journal;
    journals.push(journal);
    broker.log.attach(journal);
    broker.log.attach(pager);
    const { queue } = broker.declareQueue('q', qs({ durable: true }));
    const n = 300;
    for (let i = 0; i < n; i++) broker.publish('q', msg(body(i), { durable: true }));
    await synced(journal, broker);
    pager.pass();
    expect(queue.pagedDepth).toBeGreaterThan(n - 30);

    const reader = new DrSnapshotReader(broker, ['q'], broker.log.lsn, { keepDequeued: new Set(['q']), journal });
    const copied: LoggedChange[] = [...reader.next(10, 1 << 20)];
    // A consumer takes the first 250 (paged ones read back for delivery): 240 ahead of the copy.
    const consumer = new FakeConsumer('c', 250);
    queue.addConsumer(consumer);
    queue.dispatch(broker.now());
    expect(consumer.deliveries.some((e) => e.msg instanceof PagedMessage)).toBe(true);
    for (const e of consumer.deliveries) broker.accept(queue, e);
    expect(reader.keptOnLeaving).toBe(240);
    // Later messages (not part of the copy) fill new segments; the old ones are dead but for the copy.
    for (let i = n; i < n + 100; i++) broker.publish('q', msg(body(i), { durable: true }));
    await synced(journal, broker);
    const segmentsDir = `${dataDir}/${JOURNAL_DIR_NAME}`;
    const before = await listSegments(segmentsDir);
    const whileKept = await journal.compact();
    expect(whileKept.deletedSegments).toEqual([]);
    expect(await listSegments(segmentsDir)).toEqual(before);

    for (let guard = 0; guard < 100 && !reader.done; guard++) copied.push(...reader.next(7, 1 << 20));
    expect(reader.done).toBe(true);
    const got = copied.map((e) => (e.change.kind === 'enqueue' ? e.change.message.bytes.toString() : ''));
    expect(got).toEqual(Array.from({ length: n }, (_, i) => body(i)));
    expect(broker.removalWatchers.size).toBe(0);

    // Read and let go: compaction may now remove what only the copy held.
    const after = await journal.compact();
    expect(after.deletedSegments.length).toBeGreaterThan(0);
  });

  it('DR snapshot reader - a copy closed before it is done lets go of what it kept', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const broker = new Broker();
    const opened = await Journal.open({ dataDir, segmentBytes: 32 * KiB, autoCompact: false });
    const journal = opened.journal;
    journals.push(journal);
    broker.log.attach(journal);
    const { queue } = broker.declareQueue('q', qs({ durable: true }));
    for (let i = 0; i < 200; i++) broker.publish('q', msg(body(i), { durable: true }));
    await synced(journal, broker);
    const reader = new DrSnapshotReader(broker, ['q'], broker.log.lsn, { keepDequeued: new Set(['q']), journal });
    const consumer = new FakeConsumer('c', 150);
    queue.addConsumer(consumer);
    queue.dispatch(broker.now());
    for (const e of consumer.deliveries) broker.accept(queue, e);
    for (let i = 0; i < 100; i++) broker.publish('q', msg(body(i), { durable: true }));
    await synced(journal, broker);
    expect((await journal.compact()).deletedSegments).toEqual([]);
    // The bridge went away: the stream ends its copy.
    reader.close();
    expect(broker.removalWatchers.size).toBe(0);
    expect((await journal.compact()).deletedSegments.length).toBeGreaterThan(0);
  });
});

// Paging message bodies out of memory: the Pager with a real Journal and the
// broker model. Bodies beyond max-memory must leave memory once synced, come
// back intact and in order when consumers reach them (also after compaction
// moved their records), and a restart must bring every queued message back as a
// paged stand-in that reads its body from disk.
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import { PagedMessage } from '../../../src/broker/paged-message.js';
import type { Queue, QueueEntry } from '../../../src/broker/queue.js';
import { Journal } from '../../../src/store/journal.js';
import { Pager } from '../../../src/store/pager.js';
import { restoreBroker } from '../../../src/store/restore.js';
import { FakeConsumer, msg, qs } from '../broker/helpers.js';
import { removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close().catch(() => undefined);
  for (const d of dirs.splice(0)) await removeDir(d);
});

const KiB = 1024;
const silent = { warn() {} };

async function open(dataDir: string, maxMemory: number, segmentBytes = 256 * KiB) {
  const broker = new Broker();
  let journal: Journal | undefined;
  const pager = new Pager({ broker, journal: () => journal, maxMemory, log: silent, readAheadCount: 16 });
  const opened = await Journal.open({ dataDir, segmentBytes });
  journal = opened.journal;
  journals.push(journal);
  restoreBroker(broker, journal, opened.recovered, pager);
  broker.log.resumeAfter(opened.recovered.lastLsn);
  broker.log.attach(journal);
  broker.log.attach(pager);
  return { broker, journal, pager };
}

/** Body of message n: recognisable, and `size` bytes long. */
function body(n: number, size = 4 * KiB): string {
  return `m${n}:`.padEnd(size, String.fromCharCode(97 + (n % 26)));
}

async function synced(journal: Journal, broker: Broker): Promise<void> {
  await new Promise<void>((resolve, reject) => journal.whenDurable(broker.log.lsn, (err) => (err ? reject(err) : resolve())));
}

/** Reads each body as it is delivered, as the AMQP link does (read-ahead depends on it). */
class ReadingConsumer extends FakeConsumer {
  readonly seen: string[] = [];
  override deliver(entry: QueueEntry, queue: Queue): void {
    this.seen.push(entry.msg.bytes.toString());
    super.deliver(entry, queue);
  }
  override get bodies(): string[] {
    return this.seen;
  }
}

function drain(broker: Broker, queue: Queue, credit: number): ReadingConsumer {
  const c = new ReadingConsumer('c', credit);
  queue.addConsumer(c);
  queue.dispatch(broker.now());
  return c;
}

describe('paging message bodies to the journal', () => {
  it('paging - keeps resident bodies under max-memory, newest out first, and delivers all intact in order', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { broker, journal, pager } = await open(dataDir, 64 * KiB);
    const { queue } = broker.declareQueue('q', qs({ durable: true }));
    const n = 200; // 800 KiB of bodies against a 64 KiB budget
    for (let i = 0; i < n; i++) broker.publish('q', msg(body(i), { durable: true }));
    await synced(journal, broker);
    pager.pass();
    expect(pager.residentBytes()).toBeLessThanOrEqual(64 * KiB);
    expect(queue.pagedDepth).toBeGreaterThan(n - 20);
    // Newest first: the head of the queue is still in memory, the tail is paged.
    const entries = queue.entries();
    expect(entries[0]!.msg).not.toBeInstanceOf(PagedMessage);
    expect(entries.at(-1)!.msg).toBeInstanceOf(PagedMessage);

    const c = drain(broker, queue, n);
    expect(c.bodies).toEqual(Array.from({ length: n }, (_, i) => body(i)));
    // Read-ahead: far fewer reads than paged messages.
    expect(pager.stats.reads).toBeLessThan(queue.pagedDepth / 4 + 5);
    for (const e of c.deliveries) broker.accept(queue, e);
    expect(queue.depth).toBe(0);
    expect(queue.pagedDepth).toBe(0);
    expect(queue.residentBytes).toBe(0);
  });

  it('paging - non-durable messages stay in memory; a released paged message is read back again', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { broker, journal, pager } = await open(dataDir, 16 * KiB);
    const { queue } = broker.declareQueue('q', qs({ durable: true }));
    for (let i = 0; i < 20; i++) broker.publish('q', msg(body(i), { durable: i % 2 === 0 }));
    await synced(journal, broker);
    pager.pass();
    for (const e of queue.entries()) {
      if (e.msg instanceof PagedMessage) expect(e.msg.durable).toBe(true);
    }
    expect(queue.pagedDepth).toBeGreaterThan(0);
    const c = drain(broker, queue, 20);
    expect(c.bodies).toEqual(Array.from({ length: 20 }, (_, i) => body(i)));
    // Released back: a paged one must be readable again on redelivery.
    const paged = c.deliveries.filter((e) => e.msg instanceof PagedMessage);
    expect(paged.length).toBeGreaterThan(0);
    queue.removeConsumer(c);
    const again = drain(broker, queue, 20);
    expect(again.bodies).toEqual(Array.from({ length: 20 }, (_, i) => body(i)));
    expect(again.deliveries.every((e) => e.deliveryCount === 1)).toBe(true);
  });

  it('paging - bodies are read from compaction copies once the original segment is gone', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { broker, journal, pager } = await open(dataDir, 16 * KiB, 32 * KiB);
    const { queue } = broker.declareQueue('q', qs({ durable: true }));
    // Every 10th message stays; the rest are consumed so their segments become mostly dead.
    for (let i = 0; i < 300; i++) broker.publish('q', msg(body(i, KiB), { durable: true }));
    await synced(journal, broker);
    const c = drain(broker, queue, 300);
    for (const e of c.deliveries) if (e.msg.id % 10 !== 0) broker.accept(queue, e);
    queue.removeConsumer(c); // the kept ones go back
    await synced(journal, broker);
    pager.pass();
    expect(queue.pagedDepth).toBeGreaterThan(0);
    const report = await journal.compact();
    expect(report.copiedRecords).toBeGreaterThan(0);
    expect(report.deletedSegments.length).toBeGreaterThan(0);
    const after = drain(broker, queue, 300);
    // Message i has id i + 1: the kept ones are i = 9, 19, ..., 299.
    expect(after.bodies).toEqual(Array.from({ length: 30 }, (_, k) => body(k * 10 + 9, KiB)));
  });

  it('paging - a restart brings every queued message back paged; bodies read from disk on delivery', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    {
      const { broker, journal } = await open(dataDir, 1024 * KiB);
      broker.declareQueue('q', qs({ durable: true }));
      for (let i = 0; i < 100; i++) broker.publish('q', msg(body(i), { durable: true }));
      broker.log.record({ kind: 'transaction', changes: [{ kind: 'enqueue', queue: 'q', message: { id: 1000, bytes: Buffer.from('in a transaction'), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: 's' } }] }, true);
      await synced(journal, broker);
      await journal.close();
      journals.length = 0;
    }
    const { broker, pager } = await open(dataDir, 1024 * KiB);
    const queue = broker.queue('q');
    expect(queue.depth).toBe(101);
    expect(queue.pagedDepth).toBe(101);
    expect(pager.residentBytes()).toBe(0);
    const c = drain(broker, queue, 200);
    expect(c.bodies).toEqual([...Array.from({ length: 100 }, (_, i) => body(i)), 'in a transaction']);
    expect(c.deliveries.at(-1)!.msg.subject).toBe('s');
  });

  it('paging - messages of one big transaction record are read back with one decode per read-ahead batch', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    {
      const { broker, journal } = await open(dataDir, 1024 * KiB);
      broker.declareQueue('q', qs({ durable: true }));
      const changes = Array.from({ length: 300 }, (_, i) => ({
        kind: 'enqueue' as const,
        queue: 'q',
        message: { id: i + 1, bytes: Buffer.from(body(i, 100)), headerLength: 0, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined },
      }));
      broker.log.record({ kind: 'transaction', changes }, true);
      await synced(journal, broker);
      await journal.close();
      journals.length = 0;
    }
    const { broker, journal, pager } = await open(dataDir, 1024 * KiB);
    const c = drain(broker, broker.queue('q'), 300);
    expect(c.bodies).toEqual(Array.from({ length: 300 }, (_, i) => body(i, 100)));
    // Read-ahead of 16 (see open()): about 300 / 16 reads, each decoding the one record once.
    expect(pager.stats.reads).toBeLessThanOrEqual(Math.ceil(300 / 16) + 1);
    expect(journal.readStats.decodes).toBe(pager.stats.reads);
  });
});

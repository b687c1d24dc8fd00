// A few messages left queued among many consumed ones must hold about their own size
// in memory, on the primary and on its backup. Their bodies arrive as views into larger
// buffers (a socket read holding hundreds of small messages for several queues; an HA
// batch of up to 256 records) and each view kept its whole buffer alive: a 100-byte
// message left in a slow queue held tens of KiB, outside what max-memory counts
// (src/broker/borrowed-bodies.ts). Measured as the broker's external memory after a
// full garbage collection (which a heap snapshot forces: --heapsnapshot-signal).
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import rhea from 'rhea';
import { afterEach, describe, expect, it } from 'vitest';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { TestCluster } from '../helpers/cluster.js';
import { scrape } from '../helpers/scrape.js';
import { manage } from '../helpers/tandem-cli.js';
import { depthOf, receive } from '../dr/helpers.js';

let cluster: TestCluster | undefined;
let broker: TestBroker | undefined;
afterEach(async () => {
  await cluster?.stopAll();
  await broker?.stop();
  cluster = undefined;
  broker = undefined;
});

/** Brokers started meanwhile write a heap snapshot (a full GC first) on SIGUSR2. */
async function withGcSignal<T>(start: () => Promise<T>): Promise<T> {
  const before = process.env.NODE_OPTIONS;
  process.env.NODE_OPTIONS = `${before ?? ''} --heapsnapshot-signal=SIGUSR2`.trim();
  try {
    return await start();
  } finally {
    if (before === undefined) delete process.env.NODE_OPTIONS;
    else process.env.NODE_OPTIONS = before;
  }
}

const snapshots = (b: TestBroker) => readdirSync(b.dir).filter((f) => f.endsWith('.heapsnapshot'));

/** The broker's external (off-heap) memory after a full garbage collection, in bytes. */
async function externalAfterGc(b: TestBroker): Promise<number> {
  const had = snapshots(b).length;
  b.signal('SIGUSR2');
  await waitFor(() => snapshots(b).length > had, { timeout: 30_000, interval: 50, name: 'heap snapshot written' });
  // The snapshot is written on the event loop: a scrape answered after it began is after it ended.
  const s = await scrape(b.metricsPort!);
  for (const f of snapshots(b)) rmSync(join(b.dir, f), { force: true });
  return s.samples.get('tandem_process_nodejs_external_memory_bytes')!;
}

const BODY = 'x'.repeat(100);
/** One message in SLOW_EVERY goes to the slow queue, the others to the busy one, all from one sender. */
const SLOW_EVERY = 100;
const TOTAL = 300_000;
const STRAGGLERS = TOTAL / SLOW_EVERY;
const WARM_UP = 30_000;

/** Publish `total` small messages over one connection (one anonymous sender), message i to `to(i)`. */
function publish(port: number, total: number, to: (i: number) => string, properties: (i: number) => Record<string, unknown> | undefined = () => undefined): Promise<void> {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false } as never);
  return new Promise<void>((resolve, reject) => {
    const sender = conn.open_sender({ target: {} } as never);
    let next = 0;
    let accepted = 0;
    const pump = () => {
      for (; next < total && sender.sendable() && next - accepted < 5000; next++) {
        sender.send({ to: to(next), body: BODY, durable: false, application_properties: properties(next) } as never);
      }
    };
    sender.on('sendable', pump);
    sender.on('accepted', () => {
      if (++accepted === total) {
        conn.close();
        resolve();
      } else pump();
    });
    sender.on('rejected', () => reject(new Error('a message was rejected')));
    conn.on('disconnected', () => reject(new Error('disconnected while publishing')));
  });
}

/** Consume (accept) `n` messages of `address` that `selector` selects. */
function takeSelected(port: number, address: string, selector: string, n: number): Promise<void> {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false } as never);
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fewer than ${n} messages selected within 120 s`)), 120_000);
    let got = 0;
    conn.open_receiver({ source: { address, filter: rhea.filter.selector(selector) }, credit_window: 1000 } as never);
    conn.on('message', () => {
      if (++got < n) return;
      clearTimeout(timer);
      conn.close();
      resolve();
    });
    conn.on('disconnected', () => reject(new Error('disconnected while consuming')));
  });
}

/**
 * External memory a straggler holds on each broker: publish, drain the busy queue, let the
 * sweep run, measure. `slow`: where the stragglers go (an exchange: every queue bound to it).
 */
async function perStraggler(publishTo: number, brokers: TestBroker[], caughtUp: () => Promise<void> = async () => undefined, slow = 'slow', slowQueues = ['slow']): Promise<number[]> {
  // A warm-up first, so that what every broker keeps of recent changes (the HA window
  // of retained changes, full at its smallest size) is in the baseline too.
  await publish(publishTo, WARM_UP, () => 'busy');
  await receive(publishTo, 'busy', WARM_UP, { timeoutMs: 60_000 });
  await caughtUp();
  const base = await Promise.all(brokers.map((b) => externalAfterGc(b)));
  await publish(publishTo, TOTAL, (i) => (i % SLOW_EVERY === SLOW_EVERY - 1 ? slow : 'busy'));
  await receive(publishTo, 'busy', TOTAL - STRAGGLERS, { timeoutMs: 120_000 });
  for (const q of slowQueues) expect(await depthOf(publishTo, q)).toBe(STRAGGLERS);
  await caughtUp();
  // Two ticks of the sweep and then some.
  await new Promise((r) => setTimeout(r, 3500));
  const after = await Promise.all(brokers.map((b) => externalAfterGc(b)));
  return after.map((a, i) => Math.round((a - base[i]!) / STRAGGLERS));
}

// A straggler's own share: its 100-byte body, plus what malloc keeps beside it. Before,
// the socket reads and HA batches behind them held 5-40 KiB each.
const MAX_BYTES_PER_STRAGGLER = 1024;

describe('message bodies left queued hold their own size', () => {
  it('borrowed bodies - a standalone broker: 3,000 stragglers among 297,000 consumed messages from one connection', async () => {
    broker = await withGcSignal(() => TestBroker.start({ args: ['--metrics-port', '0'] }));
    const [held] = await perStraggler(broker.port, [broker]);
    expect(held, `external bytes per straggler: ${held}`).toBeLessThan(MAX_BYTES_PER_STRAGGLER);
  });

  it('borrowed bodies - an HA primary and its backup: the backup holds no more per straggler than the primary', async () => {
    // The smallest window of retained changes: it keeps recent changes (copies) on both brokers.
    cluster = await withGcSignal(() => TestCluster.ready(2, ['--metrics-port', '0', '--ha-retain-changes', '10000', '--ha-retain-size', '16MiB']));
    await cluster.backupsCaughtUp(0);
    const brokers = cluster.brokers.map((b) => b!);
    const held = await perStraggler(cluster.ports[0]!, brokers, () => cluster!.backupsCaughtUp(0));
    expect(held[0], `primary: external bytes per straggler: ${held[0]}`).toBeLessThan(MAX_BYTES_PER_STRAGGLER);
    expect(held[1], `backup: external bytes per straggler: ${held[1]}`).toBeLessThan(MAX_BYTES_PER_STRAGGLER);
  });

  it('borrowed bodies - stragglers published through a fanout to 10 queues hold one copy of their body, not one per queue', async () => {
    broker = await withGcSignal(() => TestBroker.start({ args: ['--metrics-port', '0'] }));
    const fanned = Array.from({ length: 10 }, (_, i) => `fanned.${i}`);
    for (const q of fanned) {
      await manage(broker.port, 'CREATE', 'queue', q);
      await manage(broker.port, 'CREATE', 'binding', undefined, { exchange: 'amq.fanout', queue: q });
    }
    // Each queue's record of a straggler shares its one body: each queue copying it for
    // itself held 10 copies (more than the socket read they came in, before any copying).
    const [held] = await perStraggler(broker.port, [broker], undefined, 'amq.fanout', fanned);
    expect(held, `external bytes per straggler: ${held}`).toBeLessThan(MAX_BYTES_PER_STRAGGLER);
  });

  it('borrowed bodies - a backlog left whole at first, then consumed but for a few: those few are copied at a later look', async () => {
    broker = await withGcSignal(() => TestBroker.start({ args: ['--metrics-port', '0'] }));
    const b = broker;
    await publish(b.port, WARM_UP, () => 'backlog');
    await receive(b.port, 'backlog', WARM_UP, { timeoutMs: 60_000 });
    const base = await externalAfterGc(b);
    // Nobody consumes while the sweep first looks: every message of each read is still
    // there, so the reads are left as they are (copying them would gain nothing).
    await publish(b.port, TOTAL, () => 'backlog', (i) => (i % SLOW_EVERY === SLOW_EVERY - 1 ? { keep: true } : undefined));
    await new Promise((r) => setTimeout(r, 3500));
    // Then a consumer takes all but the marked ones.
    await takeSelected(b.port, 'backlog', 'keep IS NULL', TOTAL - STRAGGLERS);
    expect(await depthOf(b.port, 'backlog')).toBe(STRAGGLERS);
    // The later look (RECHECK_TICKS ticks) finds each read mostly gone and copies the rest.
    let held = Infinity;
    for (let tries = 0; tries < 12 && held >= MAX_BYTES_PER_STRAGGLER; tries++) {
      await new Promise((r) => setTimeout(r, 3000));
      held = Math.round(((await externalAfterGc(b)) - base) / STRAGGLERS);
    }
    expect(held, `external bytes per straggler: ${held}`).toBeLessThan(MAX_BYTES_PER_STRAGGLER);
  });
});

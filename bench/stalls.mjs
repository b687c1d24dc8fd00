#!/usr/bin/env node
// Event-loop stalls at scale: the longest time a real tandemd answers nothing while it
// runs one operation whose work grows with the data (purge, delete, expire, QUERY).
//
// For each scenario: start tandemd (built dist/), fill it over AMQP (BENCH_STALL_N small
// non-durable messages, default 1,000,000; or BENCH_STALL_QUEUES queues, default 10,000),
// then run the operation while a probe connection sends `READ broker` over AMQP
// management one after another. The probe's longest round trip during the operation is
// the longest stall a client (and the HA heartbeat, and the systemd watchdog ping) met.
//
//   node bench/stalls.mjs                 (1M: a few minutes on 2 cores)
//   BENCH_STALL_ONLY=purge,delete-ae node bench/stalls.mjs
// expire-deliver: N messages expire at once and a consumer is given credit just after,
// before the expiry timer met them; expire-scan: 10 s idle with N rows whose ttl is an hour
// ahead (the timer's look for expired rows each second); expire-tick-model: that tick
// timed in-process, with nothing due and with one message due. detach-held: a consumer
// holding all N unsettled (a session window of N) detaches; until every one is back.
// Raw numbers: bench/results/stalls-<time>.json.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { envNumber, killPid, log, machineInfo, onCleanup, repoRoot, startTandem, tempDir, tmpBase, writeResults } from './lib.mjs';

const require = createRequire(import.meta.url);
const rhea = require('rhea');
const { ManagementClient } = await import(pathToFileURL(join(repoRoot, 'dist', 'admin', 'client.js')).href);
const entry = join(repoRoot, 'dist', 'cli', 'tandemd.js');
const N = envNumber('BENCH_STALL_N', 1_000_000, 1, 5_000_000);
const QUEUES = envNumber('BENCH_STALL_QUEUES', 10_000, 1, 100_000);
// BENCH_STALL_DURABLE=1: durable queues and messages, bodies paged out beyond --max-memory 8MiB.
const DURABLE = process.env.BENCH_STALL_DURABLE === '1';
const brokerArgs = DURABLE ? ['--max-memory', '8MiB'] : [];
const qAttrs = DURABLE ? { durable: true } : {};
const msgExtra = DURABLE ? { durable: true } : {};
const only = process.env.BENCH_STALL_ONLY ? new Set(process.env.BENCH_STALL_ONLY.split(',')) : undefined;

/** Send `n` small messages to `address` (unsettled, a window of 5000); resolves when all are settled. */
function fill(port, address, n, extra = {}) {
  return new Promise((resolve, reject) => {
    const c = rhea.create_container();
    const conn = c.connect({ host: '127.0.0.1', port, reconnect: false, max_frame_size: 65536 });
    const sender = conn.open_sender({ target: { address } });
    let sent = 0;
    let settled = 0;
    const pump = () => {
      while (sent < n && sender.sendable() && sent - settled < 5000) {
        sender.send({ body: `m${sent}`, ...extra });
        sent++;
      }
    };
    sender.on('sendable', pump);
    sender.on('accepted', () => {
      if (++settled === n) {
        conn.close();
        resolve();
      } else pump();
    });
    sender.on('rejected', (ctx) => reject(new Error(`rejected: ${JSON.stringify(ctx.delivery.remote_state?.error)}`)));
    conn.on('disconnected', (ctx) => settled < n && reject(new Error(`disconnected: ${ctx.error?.message}`)));
  });
}

/** Probe: READ broker one after another until stop(); reports the longest round trip. */
async function probe(port) {
  const client = await ManagementClient.connect({ host: '127.0.0.1', port }, { timeoutMs: 600_000 });
  let running = true;
  let maxMs = 0;
  let maxAt = 0;
  let count = 0;
  const t0 = performance.now();
  const loop = (async () => {
    while (running) {
      const t = performance.now();
      await client.request('READ', 'broker', 'broker');
      const took = performance.now() - t;
      if (took > maxMs) [maxMs, maxAt] = [took, t - t0];
      count++;
      await new Promise((r) => setTimeout(r, 2));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      client.close();
      return { maxStallMs: Math.round(maxMs), maxStallStartedMs: Math.round(maxAt), probes: count };
    },
  };
}

async function timed(port, fn) {
  const p = await probe(port);
  await new Promise((r) => setTimeout(r, 100));
  const t = performance.now();
  const result = await fn();
  const opMs = Math.round(performance.now() - t);
  await new Promise((r) => setTimeout(r, 100));
  return { opMs, ...(await p.stop()), result };
}

async function withBroker(name, args, fn) {
  const dir = tempDir(tmpBase(), 'stall-');
  // BENCH_STALL_NODE_ARGS: e.g. --trace-gc (its lines over 100 ms are reported).
  const nodeArgs = process.env.BENCH_STALL_NODE_ARGS ? process.env.BENCH_STALL_NODE_ARGS.split(' ') : [];
  const extraArgs = process.env.BENCH_STALL_ARGS ? process.env.BENCH_STALL_ARGS.split(' ') : [];
  const b = await startTandem({ entry, dataDir: join(dir, 'data'), args: [...args, ...extraArgs], nodeArgs });
  const un = onCleanup(() => killPid(b.pid));
  const mgmt = await ManagementClient.connect({ host: '127.0.0.1', port: b.port }, { timeoutMs: 600_000 });
  try {
    const r = await fn(b, (op, type, n, body) => mgmt.request(op, type, n, body));
    log(name, JSON.stringify(r));
    if (process.env.BENCH_STALL_GREP) for (const line of b.stderr().split('\n')) if (line.includes(process.env.BENCH_STALL_GREP)) log(line.slice(0, 400));
    return r;
  } finally {
    mgmt.close();
    killPid(b.pid);
    un?.();
  }
}

const scenarios = {
  purge: () => withBroker('purge', brokerArgs, async (b, m) => {
    await m('CREATE', 'queue', 'q', qAttrs);
    await fill(b.port, 'q', N, msgExtra);
    return timed(b.port, () => m('PURGE', 'queue', 'q', {}));
  }),
  delete: () => withBroker('delete', brokerArgs, async (b, m) => {
    await m('CREATE', 'queue', 'q', qAttrs);
    await fill(b.port, 'q', N, msgExtra);
    return timed(b.port, () => m('DELETE', 'queue', 'q', {}));
  }),
  'delete-ae': () => withBroker('delete-ae', brokerArgs, async (b, m) => {
    await m('CREATE', 'exchange', 'dlx', { ...qAttrs, type: 'fanout' });
    await m('CREATE', 'queue', 'dlq', qAttrs);
    await m('CREATE', 'binding', 'dlx/dlq/', {}).catch(async () => m('CREATE', 'binding', undefined, { exchange: 'dlx', queue: 'dlq', key: '' }));
    await m('CREATE', 'queue', 'q', { ...qAttrs, 'alternate-exchange': 'dlx' });
    await fill(b.port, 'q', N, msgExtra);
    const r = await timed(b.port, () => m('DELETE', 'queue', 'q', {}));
    return { ...r, dlqDepth: (await m('READ', 'queue', 'dlq')).depth };
  }),
  expire: () => withBroker('expire', brokerArgs, async (b, m) => {
    await m('CREATE', 'queue', 'q', qAttrs);
    const at = Date.now() + 60_000;
    await fill(b.port, 'q', N, { ...msgExtra, absolute_expiry_time: at });
    const p = await probe(b.port);
    // Bounded: until the queue is empty or 90 s after the expiry time.
    while ((await m('READ', 'queue', 'q')).depth > 0 && Date.now() < at + 90_000) await new Promise((r) => setTimeout(r, 200));
    return { ...(await p.stop()), depth: (await m('READ', 'queue', 'q')).depth };
  }),
  // A consumer given credit just after N messages expired, before the 1 s expiry timer
  // met them: the dispatch meets the whole expired run, then the live message behind it.
  'expire-deliver': () => withBroker('expire-deliver', brokerArgs, async (b, m) => {
    await m('CREATE', 'queue', 'q', qAttrs);
    const at = Date.now() + envNumber('BENCH_STALL_TTL_MS', 60_000, 1000, 600_000);
    await fill(b.port, 'q', N, { ...msgExtra, absolute_expiry_time: at });
    await fill(b.port, 'q', 1, { ...msgExtra, body: 'live' });
    if (Date.now() >= at) throw new Error('the fill took longer than BENCH_STALL_TTL_MS: raise it');
    const c = rhea.create_container();
    const conn = c.connect({ host: '127.0.0.1', port: b.port, reconnect: false });
    const receiver = conn.open_receiver({ source: { address: 'q' }, credit_window: 0, autoaccept: true });
    const got = [];
    receiver.on('message', (ctx) => got.push(String(ctx.message.body)));
    await new Promise((r) => receiver.once('receiver_open', r));
    const p = await probe(b.port);
    await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now()) + 5));
    const t = performance.now();
    receiver.add_credit(10);
    // Bounded: until the live message came, or 120 s.
    while (got.length === 0 && performance.now() - t < 120_000) await new Promise((r) => setTimeout(r, 5));
    const untilLiveMs = Math.round(performance.now() - t);
    const r = await p.stop();
    conn.close();
    return { ...r, untilLiveMs, got, depth: (await m('READ', 'queue', 'q')).depth };
  }),
  // The 1 s expiry timer with N rows that have a ttl and none expired: what each tick costs.
  'expire-scan': () => withBroker('expire-scan', brokerArgs, async (b, m) => {
    await m('CREATE', 'queue', 'q', qAttrs);
    await fill(b.port, 'q', N, { ...msgExtra, absolute_expiry_time: Date.now() + 3_600_000 });
    return timed(b.port, () => new Promise((r) => setTimeout(r, 10_000)));
  }),
  // In-process, no tandemd: the timer's tick (Broker.expire(5000)) over N rows whose ttl is
  // an hour ahead, ten times with nothing due, then ten times with one message due each.
  'expire-tick-model': async () => {
    const d = (p) => import(pathToFileURL(join(repoRoot, 'dist', p)).href);
    const { Broker } = await d('broker/broker.js');
    const { defaultQueueSettings } = await d('broker/settings.js');
    let clock = Date.now();
    const broker = new Broker({ now: () => clock });
    broker.log.attach({ append: () => {} });
    broker.declareQueue('q', { ...defaultQueueSettings });
    const publish = (i, ttlMs) => broker.publish('q', { bytes: Buffer.from(`m${i}`), headerLength: 0, durable: false, priority: 4, ttlMs, absoluteExpiry: undefined, deliveryCount: 0, subject: undefined });
    for (let i = 0; i < N; i++) publish(i, 3_600_000);
    const tick = () => {
      clock += 1000;
      const t = performance.now();
      const expired = broker.expire(5000);
      return { ms: +(performance.now() - t).toFixed(2), expired };
    };
    const nothingDue = Array.from({ length: 10 }, tick);
    const oneDue = Array.from({ length: 10 }, (_, k) => (publish(N + k, 500), tick()));
    const r = { nothingDueMs: nothingDue.map((x) => x.ms), oneDueMs: oneDue.map((x) => x.ms), expired: oneDue.reduce((a, x) => a + x.expired, 0) };
    log('expire-tick-model', JSON.stringify(r));
    return r;
  },
  'detach-held': () => withBroker('detach-held', brokerArgs, async (b, m) => {
    await m('CREATE', 'queue', 'q', qAttrs);
    await fill(b.port, 'q', N, msgExtra);
    const conn = rhea.create_container().connect({ host: '127.0.0.1', port: b.port, reconnect: false, session_buffer_size: N + 10 });
    const receiver = conn.open_receiver({ source: { address: 'q' }, credit_window: N, autoaccept: false });
    let taken = 0;
    receiver.on('message', () => taken++);
    // Bounded: until it holds all N, or 300 s.
    for (const t = performance.now(); taken < N && performance.now() - t < 300_000; ) await new Promise((r) => setTimeout(r, 50));
    const r = await timed(b.port, async () => {
      receiver.close();
      // Bounded: until none is out with the detached consumer, or 120 s.
      for (const t = performance.now(); (await m('READ', 'queue', 'q')).acquired > 0 && performance.now() - t < 120_000; ) await new Promise((r) => setTimeout(r, 5));
    });
    conn.close();
    const q = await m('READ', 'queue', 'q');
    return { ...r, held: taken, available: q.depth - q.acquired };
  }),
  query: () => withBroker('query', [], async (b, m) => {
    for (let i = 0; i < QUEUES; i += 100) await Promise.all(Array.from({ length: Math.min(100, QUEUES - i) }, (_, k) => m('CREATE', 'queue', `q${i + k}`, {})));
    return timed(b.port, async () => (await m('QUERY', 'queue', undefined, {})).length);
  }),
};

const report = { startedAt: new Date().toISOString(), machine: machineInfo(), n: N, queues: QUEUES, durable: DURABLE, results: {} };
for (const [name, run] of Object.entries(scenarios)) {
  if (only && !only.has(name)) continue;
  log(`scenario ${name}`);
  report.results[name] = await run();
}
writeResults('stalls', report, `${JSON.stringify(report.results, null, 2)}\n`);

process.exit(0);

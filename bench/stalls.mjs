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

#!/usr/bin/env node
// Duplicate-detection benchmark (issue 16), one run, tandem only, on 127.0.0.1:
//  1. throughput with a 1M-key window on against off: non-durable and durable 1 KiB,
//     1 sender / 1 receiver, every message with its own message-id, on a standalone
//     broker and on the primary of a 3-broker cluster (2 ready backups). "on" brokers
//     start with --dedup-window 1000000 --dedup-ttl 1h and their queue's window is
//     filled with BENCH_DEDUP_PREFILL keys first (not measured), so lookups and
//     evictions run against a full window; the "off" brokers take the same prefill
//     messages, so both have the same history; ratio on / off;
//  2. memory per key: a DedupWindow of 1M keys in this process (its typed arrays'
//     bytes, and how much the V8 heap and the process's RSS grew), and what a restart
//     does with 1M keys, timed: load the checkpoint's rows into a window, and put 1M
//     keys read from journal records in LSN order and load them (dedup-recovery.ts);
//  3. restart time end to end: a standalone broker takes BENCH_DEDUP_RESTART_KEYS
//     (default 1M; fewer on a busy machine) durable messages with
//     message-ids (sent and consumed, so the keys outlive them), then is stopped
//     cleanly (checkpoint) and with kill -9; time to "listening" on its journal, with
//     the window and, for comparison, a broker that did the same without one.
//
//   node bench/dedup.mjs > dedup-report.md      (progress on stderr; ~8-12 minutes)
//
// Same tandem build as run.mjs (committed HEAD into bench/.build; BENCH_TANDEM=worktree
// for dist/). Every process is started here and killed by PID on exit. Raw numbers:
// bench/results/dedup-<time>.json.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { benchDir, buildTandem, pinCpus, envNumber, freePort, log, machineInfo, median, onCleanup, procCpu, run, runLoad, sleep, startTandem, tempDir, tmpBase, waitQuiet } from './lib.mjs';
import { runProtonLoad } from './loadgen-c.mjs';
import { renderDedupReport } from './dedup-report.mjs';

const num = envNumber;
const DURATION = num('BENCH_DURATION', 8, 1, 20);
const ROUNDS = num('BENCH_ROUNDS', 2, 1, 7);
// Generations of fresh brokers per target, each ROUNDS rounds; an even number balances the start order.
const GENERATIONS = num('BENCH_DEDUP_GENERATIONS', 2, 1, 6);
const PREFILL = num('BENCH_DEDUP_PREFILL', 1_000_000, 0, 1_000_000);
const RESTART_KEYS = num('BENCH_DEDUP_RESTART_KEYS', 1_000_000, 1000, 1_000_000);
const WITH_HA = process.env.BENCH_DEDUP_HA !== 'no';
// BENCH_DEDUP_STANDALONE=no: the cluster alone (a profile of its primary, say).
const WITH_STANDALONE = process.env.BENCH_DEDUP_STANDALONE !== 'no';
// The client of the throughput loads: rhea's load.mjs (the default; it tops out near
// 35-40k msgs/s here, so the broker is rarely the bottleneck and a window's CPU shows
// little in msgs/s) or the Proton C load generator (proton-c: the broker saturates, so
// msgs/s carries the window's whole cost).
const CLIENT = process.env.BENCH_DEDUP_CLIENT ?? 'rhea';
if (!['rhea', 'proton-c'].includes(CLIENT)) throw new Error(`BENCH_DEDUP_CLIENT must be rhea or proton-c, not ${CLIENT}`);
const throughputLoad = (b, args, opts) => (CLIENT === 'proton-c' ? runProtonLoad({ ...b, loadArgs: b.loadArgs ?? [] }, args, opts) : runLoad(b, args, opts));
// BENCH_DEDUP_AA=yes: an A/A run, the "on" side without a window too. What it reports
// as on / off is then the protocol's own bias and noise (the "on" side always starts second).
const AA = process.env.BENCH_DEDUP_AA === 'yes';
// BENCH_DEDUP_PIN=no: leave the brokers and the client wherever the scheduler puts them.
// Pinned (the default, on 2 cores or more), the standalone broker has CPU 0 and the
// client CPU 1; a cluster's primary shares CPU 0 with one backup, the other backup the
// client's CPU 1 (about even loads). Unpinned, four busy processes on two cores moved
// a side's throughput by 30% from one load to the next, with the same CPU spent: who
// shared a core with whom changed how much each turn of the event loop carried.
// BENCH_DEDUP_PIN=primary-alone: the cluster's primary alone on CPU 0, both backups
// and the client on CPU 1 (which then limits msgs/s: read the primary's CPU per message).
const PIN_LAYOUT = process.env.BENCH_DEDUP_PIN ?? 'shared';
if (!['shared', 'primary-alone', 'no'].includes(PIN_LAYOUT)) throw new Error(`BENCH_DEDUP_PIN must be shared, primary-alone or no, not ${PIN_LAYOUT}`);
const PIN = PIN_LAYOUT !== 'no' && cpus().length >= 2;
const dedupWindowArgs = (keys) => ['--dedup-window', String(keys), '--dedup-ttl', '1h'];
const WINDOW_ARGS = AA ? [] : dedupWindowArgs(1_000_000);
// BENCH_DEDUP_SMALL_WINDOW=yes: a third side in the throughput part, its window 1,000
// keys (all in cache): what a window costs that is not its size.
const SMALL_SIDE = process.env.BENCH_DEDUP_SMALL_WINDOW === 'yes';
const sideArgs = (window) => (window === 'on' ? WINDOW_ARGS : window === 'small' ? dedupWindowArgs(1000) : []);

// BENCH_DEDUP_BROKER_ARGS="--checkpoint-bytes 0": tandemd options for every broker, both sides alike.
const brokerArgs = (process.env.BENCH_DEDUP_BROKER_ARGS ?? '').split(' ').filter(Boolean);

const report = { startedAt: new Date().toISOString(), settings: { DURATION, ROUNDS, GENERATIONS, PREFILL, RESTART_KEYS, WITH_HA, WITH_STANDALONE, AA, CLIENT, SMALL_SIDE, PIN: PIN ? PIN_LAYOUT : 'no', BROKER_ARGS: brokerArgs.join(' ') }, throughput: [], memory: undefined, restart: [] };
report.machine = { ...machineInfo(), uptimeBefore: await run('uptime') };
const build = await buildTandem();
report.versions = { node: process.version, tandem: build.label };
const tandemJs = join(dirname(build.entry), 'tandem.js');
const base = tempDir(tmpBase(), 'tandem-dedup-bench-');
let dirN = 0;
// BENCH_DEDUP_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/p": node options for every broker (profiles).
const nodeArgs = (process.env.BENCH_DEDUP_NODE_ARGS ?? '').split(' ').filter(Boolean);
const start = (args = [], opts = {}) => startTandem({ entry: build.entry, dataDir: opts.dataDir ?? join(base, `data-${dirN++}`), port: opts.port ?? 0, args: [...brokerArgs, ...args], nodeArgs, listenTimeoutMs: 120_000 });

async function cli(args) {
  return new Promise((resolveP) => {
    const p = spawn(process.execPath, [tandemJs, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const unregister = onCleanup(() => p.kill('SIGKILL'));
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.once('exit', (code) => (unregister(), resolveP({ code, out })));
  });
}

async function startCluster(windowArgs) {
  const ports = [await freePort(), await freePort(), await freePort()];
  const clusterArgs = ['--ha-cluster', 'yes', '--ha-brokers-url', ports.map((p) => `127.0.0.1:${p}`).join(','), '--ha-replicate', 'all', ...windowArgs];
  const brokers = [];
  for (const port of ports) brokers.push(await start(clusterArgs, { port }));
  const pr = await cli(['ha', 'promote', '-b', `127.0.0.1:${ports[0]}`, '--cluster-manager']);
  if (pr.code !== 0) throw new Error(`promote failed: ${pr.out}`);
  for (const port of ports.slice(1)) {
    const end = Date.now() + 60_000;
    while ((await cli(['ha', 'status', '-b', `127.0.0.1:${port}`])).out.trim() !== 'ready') {
      if (Date.now() > end) throw new Error(`backup ${port} not ready within 60 s`);
      await sleep(200);
    }
  }
  const cpuOf = (i) => (i === 0 ? '0' : PIN_LAYOUT === 'primary-alone' || i === 2 ? '1' : '0');
  if (PIN) for (const [i, b] of brokers.entries()) await pinCpus(b.pid, cpuOf(i));
  return { primary: brokers[0], all: brokers };
}

// BENCH_DEDUP_LOADS=key,key: only those loads, which may name the extra ones (not run
// by default): a sender window of 4,000 instead of 1,000, and messages without ids.
const allLoads = [
  { key: 'nd-1x1-w4000', extra: true, args: ['--message-id', '--window', '4000', '--credit', '4000', '--duration', String(DURATION)] },
  { key: 'nd-1x1-no-id', extra: true, args: ['--duration', String(DURATION)] },
  { key: 'nd-1x1', args: ['--message-id', '--duration', String(DURATION)] },
  { key: 'd-1x1', args: ['--message-id', '--durable', '--terminus-durable', '--duration', String(DURATION)] },
  // qpid-jms's ids (62-character strings): a key over 14 bytes is hashed (SHA-256), not written out (dedup-key.ts).
  ...(CLIENT === 'proton-c' ? [{ key: 'nd-1x1-jms-id', args: ['--message-id-string', '--duration', String(DURATION)] }] : []),
  // The cluster at a fixed rate well below what either side reaches: its msgs/s are the
  // rate, and the figure is CPU per message. A saturated 2-core machine running four
  // busy processes moved a side's primary CPU per message by up to 60% from one load to
  // the next (how much each turn of the event loop carried); below saturation that swing
  // is smaller, so the window's own CPU shows through it.
  ...(CLIENT === 'proton-c'
    ? [
        // The standalone broker likewise, at about half what it reaches.
        { key: 'nd-1x1-at-50k', only: 'standalone', args: ['--message-id', '--rate', '50000', '--duration', String(DURATION)] },
        { key: 'd-1x1-at-20k', only: 'standalone', args: ['--message-id', '--durable', '--terminus-durable', '--rate', '20000', '--duration', String(DURATION)] },
        { key: 'nd-1x1-at-15k', only: 'ha-3', args: ['--message-id', '--rate', '15000', '--duration', String(DURATION)] },
        { key: 'd-1x1-at-8k', only: 'ha-3', args: ['--message-id', '--durable', '--terminus-durable', '--rate', '8000', '--duration', String(DURATION)] },
        // Extra: the cluster nearer its saturation (~50k msgs/s off, ~43k on here), to see
        // whether the window's CPU per message grows with the rate or stays what it is at 15k.
        { key: 'nd-1x1-at-30k', extra: true, only: 'ha-3', args: ['--message-id', '--rate', '30000', '--duration', String(DURATION)] },
        { key: 'nd-1x1-at-40k', extra: true, only: 'ha-3', args: ['--message-id', '--rate', '40000', '--duration', String(DURATION)] },
      ]
    : []),
];
const chosenLoads = process.env.BENCH_DEDUP_LOADS?.split(',').filter(Boolean);
const loads = chosenLoads ? allLoads.filter((l) => chosenLoads.includes(l.key)) : allLoads.filter((l) => !l.extra);
if (chosenLoads && loads.length !== chosenLoads.length) throw new Error(`BENCH_DEDUP_LOADS: not all of ${chosenLoads} are loads (${allLoads.map((l) => l.key)}), or the Proton C client's only`);
report.settings.LOADS = loads.map((l) => l.key);

try {
  // ---- 1. throughput --------------------------------------------------------------------
  // The window-off and window-on brokers of a target run side by side and take turns,
  // load by load (the side that goes first alternates by round), so a change in the
  // machine's state during the run falls on both sides alike. That does not cancel what
  // comes with the order the sides were started in: an A/A run (no window on either
  // side) of 3-broker clusters built once gave the second-started one 0.87-0.93 of the
  // first's msgs/s in every round, with more CPU per message (results/dedup-2026-12-04T03-31-14-412Z.json).
  // So each generation builds fresh brokers, started in the other order from the last
  // one's, and the ratio reported is balanced over the generations.
  const targets = [
    ...(WITH_STANDALONE ? [{ name: 'standalone', make: async (windowArgs) => {
      const primary = await start(windowArgs);
      if (PIN) await pinCpus(primary.pid, '0');
      return { primary, all: [] };
    } }] : []),
    ...(WITH_HA ? [{ name: 'ha-3', make: (windowArgs) => startCluster(windowArgs) }] : []),
  ];
  for (const tg of targets) {
    for (let generation = 1; generation <= GENERATIONS; generation++) {
      // Fresh brokers each generation, started in the other order from the last one's.
      const windows = SMALL_SIDE ? ['off', 'on', 'small'] : ['off', 'on'];
      const startOrder = generation % 2 === 1 ? windows : [...windows].reverse();
      const sides = [];
      for (const window of startOrder) {
        const t = await tg.make(sideArgs(window));
        const queue = `dedup-bench-${randomBytes(3).toString('hex')}`;
        const b = { ...t.primary, name: `${tg.name}-${window}`, backupPids: t.all.slice(1).map((x) => x.pid), ...(PIN && { clientCpus: '1' }) };
        if (PREFILL > 0) {
          // Not measured: fills the queue's window so the rounds run against a full one. The
          // "off" broker takes the same messages, so both sides have the same history (heap,
          // GC, journal) and the ratio is the window's alone.
          log(`generation ${generation}, ${b.name}: prefilling ${window === 'off' ? 'as the window side does: ' : 'the window with '}${PREFILL} keyed messages (non-durable, 4 senders)`);
          await throughputLoad(b, ['--queue', queue, '--message-id', '--senders', '4', '--count', String(Math.ceil(PREFILL / 4))], { timeoutMs: 600_000 });
        }
        sides.push({ window, t, queue, b });
      }
      for (let round = 1; round <= ROUNDS; round++) {
        for (const load of loads) {
          if (load.only && load.only !== tg.name) continue;
          for (const { window, queue, b } of round % 2 === 1 ? sides : [...sides].reverse()) {
            await waitQuiet({ cores: 0.3, maxSeconds: 3 });
            log(`generation ${generation} round ${round} ${load.key} on ${b.name}`);
            const r = await throughputLoad(b, ['--queue', queue, ...load.args], { timeoutMs: (DURATION + 90) * 1000 });
            report.throughput.push({ target: tg.name, window, load: load.key, generation, startedFirst: startOrder[0], round, throughput: r.throughput, p50: r.latencyMs?.p50, p99: r.latencyMs?.p99, lost: r.lost, duplicates: r.duplicates, brokerCores: r.brokerCores, msgsPerBrokerCpuSecond: r.msgsPerBrokerCpuSecond, otherCores: r.otherCores, backupCores: r.backupCores, msgsPerClusterCpuSecond: r.msgsPerClusterCpuSecond });
            log(`  ${r.throughput} msgs/s p50 ${r.latencyMs?.p50 ?? '-'} ms, lost ${r.lost}, dup ${r.duplicates}, broker cores ${r.brokerCores}`);
          }
        }
      }
      for (const { window, queue, t } of sides) {
        const shown = await cli(['queue', 'show', queue, '-b', `127.0.0.1:${t.primary.port}`, '--json']);
        if (window === 'on') {
          const q = JSON.parse(shown.out);
          report.throughput.push({ target: tg.name, window: 'on', load: 'window-after', generation, keys: q['dedup-keys'], memoryBytes: q['dedup-memory-bytes'], duplicates: q['dedup-duplicates'] });
        }
        for (const x of [t.primary, ...t.all.slice(1)]) await x.stop();
      }
    }
  }

  // ---- 2. memory per key ----------------------------------------------------------------
  {
    const { DedupWindow } = await import(pathToFileURL(join(dirname(build.entry), '..', 'broker', 'dedup-window.js')).href);
    const { dedupDigest, dedupDigestAt, DedupKeyType } = await import(pathToFileURL(join(dirname(build.entry), '..', 'broker', 'dedup-key.js')).href);
    globalThis.gc?.();
    const heap0 = process.memoryUsage();
    const w = new DedupWindow(1_000_000, 0);
    for (let i = 0; i < 1_000_000; i++) w.add(dedupDigest(DedupKeyType.string, Buffer.from(`order-${i}`)), Date.now(), i + 1, true);
    globalThis.gc?.();
    const heap1 = process.memoryUsage();
    report.memory = {
      keys: w.size,
      windowBytes: w.memoryBytes,
      bytesPerKey: Math.round((w.memoryBytes / w.size) * 10) / 10,
      heapUsedGrowthPerKey: Math.round(((heap1.heapUsed - heap0.heapUsed) / w.size) * 10) / 10,
      arrayBuffersGrowthPerKey: Math.round(((heap1.arrayBuffers - heap0.arrayBuffers) / w.size) * 10) / 10,
      rssGrowthPerKey: Math.round(((heap1.rss - heap0.rss) / w.size) * 10) / 10,
    };
    // A restart's share: the checkpoint's rows into a fresh window, and 1M replayed keys sorted and loaded, each then indexed.
    const { DedupRecovery } = await import(pathToFileURL(join(dirname(build.entry), '..', 'store', 'dedup-recovery.js')).href);
    const rows = w.rows();
    const cpuMs = (c0) => Math.round(process.cpuUsage(c0).user / 1000);
    let t = performance.now();
    let c = process.cpuUsage();
    const fromCheckpoint = new DedupWindow(1_000_000, 0);
    fromCheckpoint.addRows(rows, Date.now());
    // Loaded rows are appended; the index is built when the broker starts serving (ensureIndexed, absent before c3fb8a5).
    fromCheckpoint.ensureIndexed?.();
    report.memory.loadCheckpointRowsMs = Math.round(performance.now() - t);
    report.memory.loadCheckpointRowsCpuMs = cpuMs(c);
    t = performance.now();
    c = process.cpuUsage();
    const rec = new DedupRecovery();
    // A record's key as the journal's decoder hands it over: four words (a Buffer before 2026-12-03's DedupDigest).
    const keyAt = (i) => (dedupDigestAt ? dedupDigestAt(rows, i * 32) : rows.subarray(i * 32, i * 32 + 16));
    const body = (i) => ({ kind: 'enqueue', queue: 'q', message: {}, dedup: { key: keyAt(i), at: Date.now() } });
    for (let i = 0; i < 1_000_000; i++) rec.onRecord(i + 1, body(i));
    const replayed = rec.result().get('q');
    const fromJournal = new DedupWindow(1_000_000, 0);
    fromJournal.addRows(replayed.rows, Date.now());
    fromJournal.ensureIndexed?.();
    report.memory.replayedKeysToWindowMs = Math.round(performance.now() - t);
    report.memory.replayedKeysToWindowCpuMs = cpuMs(c);
    report.memory.windowsEqual = fromCheckpoint.size === fromJournal.size && fromJournal.size === w.size;
    log(`memory: ${JSON.stringify(report.memory)}`);
  }

  // ---- 3. restart time with 1M keys -----------------------------------------------------
  for (const window of ['off', 'on']) {
    const args = window === 'on' ? WINDOW_ARGS : [];
    let b = await start(args);
    const dataDir = b.dataDir;
    const queue = 'restart-q';
    log(`restart (${window}): ${RESTART_KEYS} durable messages with message-ids in and out`);
    await runLoad({ ...b, name: `restart-${window}` }, ['--queue', queue, '--message-id', '--durable', '--terminus-durable', '--senders', '4', '--count', String(Math.ceil(RESTART_KEYS / 4)), '--size', '64'], { timeoutMs: 900_000 });
    const keys = window === 'on' ? JSON.parse((await cli(['queue', 'show', queue, '-b', `127.0.0.1:${b.port}`, '--json'])).out)['dedup-keys'] : 0;
    await b.stop();
    // Wall time, and the broker's own CPU time until it listened (what a busy machine's other tenants do not inflate).
    b = await start(args, { dataDir });
    const clean = Math.round(b.listenMs);
    const cleanCpu = Math.round(procCpu(b.pid) * 1000);
    await b.kill9();
    b = await start(args, { dataDir });
    const afterKill = Math.round(b.listenMs);
    const afterKillCpu = Math.round(procCpu(b.pid) * 1000);
    const keysAfter = window === 'on' ? JSON.parse((await cli(['queue', 'show', queue, '-b', `127.0.0.1:${b.port}`, '--json'])).out)['dedup-keys'] : 0;
    await b.stop();
    report.restart.push({ window, keys, keysAfterRestart: keysAfter, cleanStopToListeningMs: clean, cleanStopCpuMs: cleanCpu, killToListeningMs: afterKill, killCpuMs: afterKillCpu });
    log(`restart (${window}): ${keys} keys; listening ${clean} ms (${cleanCpu} ms CPU) after a clean stop, ${afterKill} ms (${afterKillCpu} ms CPU) after kill -9 (keys then: ${keysAfter})`);
  }
} finally {
  report.finishedAt = new Date().toISOString();
  mkdirSync(join(benchDir, 'results'), { recursive: true });
  const file = join(benchDir, 'results', `dedup-${report.startedAt.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  log(`raw results: ${file}`);
}

process.stdout.write(renderDedupReport(report));
process.exit(0);

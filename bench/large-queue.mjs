#!/usr/bin/env node
// Very large queues (issue 3): restart time and memory with millions of queued
// durable 1 KiB messages.
//
// For each size N (BENCH_LQ_SIZES, default 1000000):
//  1. fill a data dir with one durable queue holding N durable 1 KiB messages. The
//     filler writes with tandem's own Journal and record codec, the exact records a
//     broker writes for accepted durable sends (AMQP-encoded by rhea, body = the
//     sequence number padded to 1 KiB), only without AMQP in between, so 10M
//     messages take minutes instead of a quarter of an hour;
//     The filler's journal writes checkpoints as a broker's does (every 256 MiB of
//     journal, or the last checkpoint's size) and then, by default, crashes
//     (BENCH_LQ_END=crash: no checkpoint at the end, so a restart loads the last
//     periodic one and replays what follows it); BENCH_LQ_END=clean closes it, as
//     a clean broker stop does (a checkpoint of everything);
//  2. start tandemd on it (default max-memory, 1 GiB) and measure: time to
//     "listening", time to the first message at a fresh consumer, the broker's
//     resident memory then (VmRSS) and its peak (VmHWM);
//  3. drain BENCH_LQ_DRAIN messages (default 200000) with a consumer accepting each,
//     checking order, and report the rate (bodies now come back from disk).
// Optional BENCH_LQ_BASELINE=<dir of another build's dist/cli/tandemd.js> also runs
// step 2 against that build on the same data, as the same-run peer.
//
//   node bench/large-queue.mjs > lq-report.md     (1M: ~3 minutes)
//   BENCH_LQ_SIZES=1000000,10000000 BENCH_TMP=/dir/with/12GiB node bench/large-queue.mjs
// A baseline that cannot start (an older build running out of heap) is reported, not fatal.
//
// Every process is started here and killed by PID on exit. Raw numbers:
// bench/results/large-queue-<time>.json.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { benchDir, buildTandem, killPid, log, machineInfo, onCleanup, startTandem, tempDir, tmpBase } from './lib.mjs';

const require = createRequire(import.meta.url);
const rhea = require('rhea');
const QUEUE = 'big';
const BODY_BYTES = 1024;

// ---- child mode: the filler ----------------------------------------------------------
if (process.argv[2] === '--fill') {
  const [, , , entry, dataDir, nText, end] = process.argv;
  const dist = dirname(dirname(entry));
  const { Journal } = await import(pathToFileURL(join(dist, 'store', 'journal.js')).href);
  const { parseIncoming } = await import(pathToFileURL(join(dist, 'amqp', 'message-codec.js')).href);
  const { defaultQueueSettings } = await import(pathToFileURL(join(dist, 'broker', 'settings.js')).href);
  const n = Number(nText);
  const { journal } = await Journal.open({ dataDir, autoCompact: false });
  let lsn = 1_000_000; // past the first LSN reservation, as a broker's first change would be
  const synced = (upTo) => new Promise((res, rej) => journal.whenDurable(upTo, (err) => (err ? rej(err) : res())));
  journal.append({ lsn: ++lsn, durable: true, change: { kind: 'queue-declare', name: QUEUE, settings: { ...defaultQueueSettings, durable: true } } });
  const pad = Buffer.alloc(BODY_BYTES, 'x');
  for (let i = 0; i < n; i++) {
    const body = Buffer.from(pad);
    body.write(String(i));
    const bytes = rhea.message.encode({ durable: true, body: rhea.message.data_section(body) });
    const p = parseIncoming(bytes);
    const message = { id: i + 1, bytes, headerLength: p.headerLength, durable: true, priority: p.priority, expiresAt: 0, deliveryCount: 0, subject: undefined };
    journal.append({ lsn: ++lsn, durable: true, change: { kind: 'enqueue', queue: QUEUE, message } });
    // Bounded memory: wait for the disk every 20k records.
    if (i % 20_000 === 19_999) await synced(lsn);
  }
  await synced(lsn);
  if (end === 'crash') journal.destroy(); // like kill -9: nothing more is written
  await journal.close();
  process.exit(0);
}

// ---- measurement -----------------------------------------------------------------------
function procStatus(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { rssMiB: Math.round(kib('VmRSS') / 1024), peakMiB: Math.round(kib('VmHWM') / 1024) };
}

/** Connect a consumer; resolve with the time of the first message and, after `drain` messages, the drain rate. */
function consume(broker, drain) {
  return new Promise((resolve, reject) => {
    const container = rhea.create_container({ id: 'lq-consumer' });
    const conn = container.connect({ host: '127.0.0.1', port: broker.port, reconnect: false });
    let firstMs;
    let got = 0;
    let drainStart;
    let expected;
    const timer = setTimeout(() => reject(new Error(`consumer: ${got} of ${drain} within 10 minutes`)), 10 * 60_000);
    conn.on('connection_error', (ctx) => reject(new Error(`consumer: ${ctx.connection.error?.description}`)));
    const r = conn.open_receiver({ source: QUEUE, autoaccept: false, credit_window: 1000 });
    r.on('message', (ctx) => {
      // Deliveries already in flight when we had enough: leave them unsettled (they go back).
      if (got >= drain) return;
      if (got === 0) {
        firstMs = performance.now() - broker.t0;
        drainStart = performance.now();
      }
      const seq = Number(String(Buffer.from(ctx.message.body.content ?? ctx.message.body)).replace(/x+$/, ''));
      expected ??= seq; // the head of the queue (an earlier reader may have taken some)
      if (seq !== expected) {
        clearTimeout(timer);
        reject(new Error(`out of order: expected ${expected}, got ${seq}`));
        return;
      }
      expected++;
      ctx.delivery.accept();
      if (++got === drain) {
        clearTimeout(timer);
        const drainMs = performance.now() - drainStart;
        conn.close();
        resolve({ firstMs, drainRate: Math.round((drain - 1) / (drainMs / 1000)) });
      }
    });
  });
}

async function measure(entry, dataDir, drain, label) {
  const broker = await startTandem({ entry, dataDir, listenTimeoutMs: 15 * 60_000 });
  log(`${label}: listening after ${(broker.listenMs / 1000).toFixed(1)} s`);
  const atListen = procStatus(broker.pid);
  try {
    const c = await consume(broker, drain);
    const after = procStatus(broker.pid);
    log(`${label}: first message after ${(c.firstMs / 1000).toFixed(1)} s; RSS ${after.rssMiB} MiB (peak ${after.peakMiB} MiB); drain ${c.drainRate} msgs/s`);
    return { listenMs: Math.round(broker.listenMs), firstMessageMs: Math.round(c.firstMs), rssAtListenMiB: atListen.rssMiB, rssMiB: after.rssMiB, peakRssMiB: after.peakMiB, drainRate: c.drainRate };
  } finally {
    await broker.stop();
  }
}

// ---- main ----------------------------------------------------------------------------------
const sizes = (process.env.BENCH_LQ_SIZES || '1000000').split(',').map(Number);
const drainWanted = Number(process.env.BENCH_LQ_DRAIN || 200_000);
const baseline = process.env.BENCH_LQ_BASELINE;
const endMode = process.env.BENCH_LQ_END === 'clean' ? 'clean' : 'crash';
const build = await buildTandem();
const results = { started: new Date().toISOString(), tandem: build.label, baseline: baseline ?? null, end: endMode, machine: machineInfo(), sizes: [] };
const work = tempDir(tmpBase(), 'tandem-lq-');


for (const n of sizes) {
  const dataDir = join(work, `data-${n}`);
  mkdirSync(dataDir, { recursive: true });
  log(`filling ${n} durable 1 KiB messages`);
  const f0 = performance.now();
  await new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [new URL(import.meta.url).pathname, '--fill', build.entry, dataDir, String(n), endMode], { stdio: ['ignore', 'inherit', 'inherit'] });
    onCleanup(() => killPid(p.pid));
    p.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`filler exited ${code}`))));
  });
  const fillSeconds = Math.round((performance.now() - f0) / 100) / 10;
  const journalBytes = Number((await import('node:child_process')).execFileSync('du', ['-sb', join(dataDir, 'journal')]).toString().split('\t')[0]);
  log(`filled in ${fillSeconds} s; journal ${(journalBytes / 2 ** 20).toFixed(0)} MiB`);
  const checkpointFile = join(dataDir, 'journal', 'checkpoint');
  const checkpointMiB = existsSync(checkpointFile) ? Math.round(statSync(checkpointFile).size / 2 ** 20) : 0;
  const row = { messages: n, journalMiB: Math.round(journalBytes / 2 ** 20), checkpointMiB, fillSeconds, load: loadavg().map((x) => x.toFixed(2)).join(' ') };
  // The drain changes the data (it dequeues): the baseline goes first, then tandem, each reading only.
  // (The baseline knows no checkpoint and replays everything; its clean stop then adds records after the
  // filler's checkpoint, which tandem replays.)
  if (baseline) {
    try {
      row.baseline = await measure(baseline, dataDir, 1, 'baseline');
    } catch (err) {
      log(`baseline failed: ${String(err.message).slice(0, 300)}`);
      const text = String(err.message);
      row.baseline = { error: /heap out of memory|Last few GCs/.test(text) ? 'ran out of heap (JavaScript heap out of memory) while recovering' : text.split('\n')[0].slice(0, 200) };
    }
  }
  row.tandem = await measure(build.entry, dataDir, Math.min(drainWanted, n), 'tandem');
  results.sizes.push(row);
  rmSync(dataDir, { recursive: true, force: true });
}

mkdirSync(join(benchDir, 'results'), { recursive: true });
const file = join(benchDir, 'results', `large-queue-${results.started.replace(/[:.]/g, '-')}.json`);
writeFileSync(file, JSON.stringify(results, null, 2));
const lines = [
  `### Large queues, ${results.started}`,
  '',
  `- tandem ${results.tandem}; machine ${JSON.stringify(results.machine)}`,
  '',
  `- end of fill: ${endMode}; load average at each restart in the table`,
  '',
  '| messages | journal MiB | checkpoint MiB | listening after s | first message after s | RSS at first message MiB | peak RSS MiB | drain msgs/s | load |' + (baseline ? ' baseline: listening s / first message s / peak RSS MiB |' : ''),
  '|---:|---:|---:|---:|---:|---:|---:|---:|---|' + (baseline ? '---|' : ''),
  ...results.sizes.map((r) => {
    const t = r.tandem;
    const b = r.baseline;
    const peer = !b ? '' : b.error ? ` failed: ${b.error} |` : ` ${(b.listenMs / 1000).toFixed(1)} / ${(b.firstMessageMs / 1000).toFixed(1)} / ${b.peakRssMiB} |`;
    return `| ${r.messages.toLocaleString('en')} | ${r.journalMiB} | ${r.checkpointMiB} | ${(t.listenMs / 1000).toFixed(1)} | ${(t.firstMessageMs / 1000).toFixed(1)} | ${t.rssMiB} | ${t.peakRssMiB} | ${t.drainRate.toLocaleString('en')} | ${r.load} |` + peer;
  }),
  '',
  `raw: ${file}`,
];
process.stdout.write(`${lines.join('\n')}\n`);
process.exit(0);

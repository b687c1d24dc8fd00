#!/usr/bin/env node
// Broker CPU per message (issue 20): tandem and the peer brokers driven by the Proton C
// load generator (bench/proton-c/), whose own cost is small enough not to hide the
// broker (rhea's client tops out near 35k msgs/s here). Four loads, 1 KiB bodies,
// window 1000, credit 1000: non-durable 1/1 and 4/4, durable 1/1 and 4/4, BENCH_ROUNDS
// rounds each, every broker in the same run. Reports msgs/s, the broker's CPU µs per
// message (utime+stime of its process over the load / messages received), ratios
// tandem / peer, and with BENCH_PROFILE=1 a CPU profile of tandemd under each load.
//
//   node bench/engine.mjs > engine-report.md      (env: see README.md)
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ensureArtemis } from './artemis.mjs';
import { formatTop, topSelf } from './cpuprofile-top.mjs';
import { benchDir, buildTandem, ensureRabbitInstalled, envNumber as num, log, machineInfo, median, quietGate, run, runTimeLimit, startTandem, tempDir, tmpBase, tryRun, writeResults } from './lib.mjs';
import { buildLoadgen, runProtonLoad } from './loadgen-c.mjs';
import { startPeers } from './peers.mjs';

const DURATION = num('BENCH_DURATION', 10, 1, 60);
const ROUNDS = num('BENCH_ROUNDS', 5, 1, 20);
const WARMUP = num('BENCH_BROKER_WARMUP', 5, 0, 60);
const THREADS = num('BENCH_LOADGEN_THREADS', 1, 1, 16);
const TIME_LIMIT = num('BENCH_TIME_LIMIT', 2400, 60, 7200);
const QUIET_CORES = num('BENCH_QUIET_CORES', 0.3, 0, 64);
const QUIET_WAIT = num('BENCH_QUIET_WAIT', 20, 0, 120);
const QUIET_BUDGET = num('BENCH_QUIET_BUDGET', 300, 0, 1200);
const WITH_RABBIT = process.env.BENCH_RABBITMQ !== 'no';
const WITH_ARTEMIS = process.env.BENCH_ARTEMIS !== 'no';
const PROFILE = process.env.BENCH_PROFILE === '1';
const PROFILE_DURATION = num('BENCH_PROFILE_DURATION', DURATION, 1, 60);
// More tandemd options for every tandem broker of the run, e.g. "--dr-retain-changes 0".
const TANDEM_ARGS = (process.env.BENCH_TANDEM_ARGS ?? '').split(/\s+/).filter(Boolean);

const allLoads = [
  { key: 'nd-1x1', title: 'non-durable 1/1', args: ['--senders', '1'] },
  { key: 'nd-4x4', title: 'non-durable 4/4', args: ['--senders', '4'] },
  { key: 'd-1x1', title: 'durable 1/1', args: ['--durable', '--terminus-durable', '--senders', '1'] },
  { key: 'd-4x4', title: 'durable 4/4', args: ['--durable', '--terminus-durable', '--senders', '4'] },
];
const only = (process.env.BENCH_ENGINE_LOADS ?? '').split(',').filter(Boolean);
const unknown = only.filter((k) => !allLoads.some((l) => l.key === k));
if (unknown.length) throw new Error(`BENCH_ENGINE_LOADS: unknown load(s) ${unknown.join(', ')}; known: ${allLoads.map((l) => l.key).join(', ')}`);
const loads = only.length ? allLoads.filter((l) => only.includes(l.key)) : allLoads;

const loadArgs = (load, duration) => [...load.args, '--duration', duration, '--size', 1024, '--window', 1000, '--credit', 1000, '--threads', THREADS].map(String);
// The generator's own deadlines (connect 20 s, settle 30 s, drain 20 s, close 10 s) fit in this.
const loadTimeoutMs = (duration) => (duration + 100) * 1000;

async function main() {
  const report = { startedAt: new Date().toISOString(), settings: { DURATION, ROUNDS, WARMUP, THREADS, QUIET_CORES, QUIET_WAIT, QUIET_BUDGET, TANDEM_ARGS, loads: loads.map((l) => l.key) }, runs: [], profiles: [] };
  report.machine = { ...machineInfo(), uptimeBefore: await run('uptime'), kernel: await run('uname', ['-r']) };
  log(`machine: ${report.machine.uptimeBefore}`);
  const quietMoment = quietGate({ cores: QUIET_CORES, wait: QUIET_WAIT, budget: QUIET_BUDGET });

  const tandemBuild = await buildTandem();
  const loadgen = await buildLoadgen();
  if (WITH_RABBIT) await ensureRabbitInstalled();
  const artemisHome = WITH_ARTEMIS ? await ensureArtemis() : undefined;
  const base = tempDir(tmpBase(), 'tandem-engine-');
  report.versions = {
    node: process.version,
    tandem: tandemBuild.label,
    proton: await tryRun('dpkg-query', ['-W', '-f', '${Version}', 'libqpid-proton11']),
    erlang: WITH_RABBIT ? await tryRun('dpkg-query', ['-W', '-f', '${Version}', 'erlang-base']) : undefined,
    java: WITH_ARTEMIS ? await tryRun('sh', ['-c', 'java -version 2>&1 | head -1']) : undefined,
  };
  log(`load generator: ${loadgen}`);

  const cancelTimeLimit = runTimeLimit(TIME_LIMIT);

  const tandem = await startTandem({ entry: tandemBuild.entry, dataDir: join(base, 'tandem-data'), args: TANDEM_ARGS });
  log(`tandemd pid ${tandem.pid} on port ${tandem.port}`);
  const brokers = [tandem];
  try {
    brokers.push(...(await startPeers(base, report, { rabbit: WITH_RABBIT, artemisHome })));
    for (const b of brokers) {
      if (WARMUP <= 0) break;
      log(`warm-up: ${WARMUP} s of non-durable 1/1 on ${b.name}, not measured`);
      await runProtonLoad(b, loadArgs(allLoads[0], WARMUP), { timeoutMs: loadTimeoutMs(WARMUP) });
    }
    for (let round = 1; round <= ROUNDS; round++) {
      // Alternate who goes first, so drift in the machine's load hits every broker alike.
      const order = round % 2 ? brokers : [...brokers].reverse();
      for (const load of loads) {
        for (const b of order) {
          const quiet = await quietMoment();
          log(`round ${round} ${load.key} on ${b.name}`);
          const r = await runProtonLoad(b, loadArgs(load, DURATION), { timeoutMs: loadTimeoutMs(DURATION) });
          report.runs.push({ ...r, load: load.key, broker: b.name, round, quietWait: quiet.waited, busyBefore: quiet.busyCores });
          log(`  ${r.throughput} msgs/s, broker ${r.brokerUsPerMessage} µs/msg (${r.brokerCores} cores), client ${r.clientCores} cores, others ${r.otherCores}; sent ${r.sent} accepted ${r.accepted} received ${r.received}${r.errorCount ? `; ERRORS: ${r.errors.join(' | ')}` : ''}`);
        }
      }
    }
  } finally {
    for (const b of brokers) await b.stop();
  }
  if (PROFILE) await profileTandem(report, tandemBuild, base, quietMoment);
  cancelTimeLimit();
  report.machine.uptimeAfter = await run('uptime');
  report.finishedAt = new Date().toISOString();

  writeResults('engine', report, markdown(report));
  process.exit(0);
}

/**
 * A fresh tandemd per load with --cpu-prof (profiling slows it, so these are not the
 * headline numbers), stopped with SIGTERM so V8 writes the profile; its top self-time
 * functions go into the report, the .cpuprofile files stay in results/profile-engine-*.
 */
async function profileTandem(report, build, base, quietMoment) {
  const dir = join(benchDir, 'results', `profile-engine-${report.startedAt.replace(/[:.]/g, '-')}`);
  for (const load of loads) {
    const profDir = join(dir, load.key);
    mkdirSync(profDir, { recursive: true });
    const broker = await startTandem({ entry: build.entry, dataDir: join(base, `profile-${load.key}`), nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profDir], args: TANDEM_ARGS });
    let r;
    try {
      await quietMoment();
      log(`profile ${load.key} on tandemd pid ${broker.pid}`);
      r = await runProtonLoad(broker, loadArgs(load, PROFILE_DURATION), { timeoutMs: loadTimeoutMs(PROFILE_DURATION) });
    } finally {
      await broker.stop();
    }
    const f = readdirSync(profDir).find((n) => n.endsWith('.cpuprofile'));
    if (!f) {
      log(`  no .cpuprofile in ${profDir} (did tandemd exit cleanly on SIGTERM?)`);
      continue;
    }
    const top = topSelf(JSON.parse(readFileSync(join(profDir, f), 'utf8')), 20);
    report.profiles.push({ load: load.key, file: join(profDir, f), throughput: r.throughput, brokerUsPerMessage: r.brokerUsPerMessage, errors: r.errors, top });
    log(`  ${r.throughput} msgs/s under the profiler; ${join(profDir, f)}`);
  }
}

const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '–');
const label = (b) => ({ tandem: 'tandem', rabbitmq: 'RabbitMQ', artemis: 'Artemis' })[b] ?? b;

/**
 * Over the rounds without errors: best msgs/s (a neighbour's load only ever slows a
 * round), median CPU µs per message (the figure least disturbed by neighbours).
 */
function aggregate(runs) {
  const clean = runs.filter((r) => !r.errorCount);
  if (!clean.length) return runs.length ? { failed: runs.length } : undefined;
  return {
    throughput: Math.max(...clean.map((r) => r.throughput)),
    usPerMessage: median(clean.map((r) => r.brokerUsPerMessage)),
    brokerCores: median(clean.map((r) => r.brokerCores)),
    clientCores: median(clean.map((r) => r.clientCores)),
    otherCores: median(clean.map((r) => r.otherCores)),
    failed: runs.length - clean.length,
  };
}

function markdown(report) {
  const v = report.versions;
  const all = [...new Set(report.runs.map((r) => r.broker))];
  const peers = all.filter((b) => b !== 'tandem');
  const per = (f) => all.map(f).join(' / ');
  const lines = [`### Engine run ${report.startedAt} (Proton C load generator)`, ''];
  lines.push(`- tandem ${v.tandem}${report.settings.TANDEM_ARGS.length ? ` with \`${report.settings.TANDEM_ARGS.join(' ')}\`` : ''}, RabbitMQ ${v.rabbitmq ?? '(not run)'}, Artemis ${v.artemis ?? '(not run)'}, Proton C ${v.proton ?? '?'} (tandem-loadgen, ${report.settings.THREADS} thread(s)), node ${v.node}`);
  lines.push(`- machine: ${report.machine.cores} × ${report.machine.model}, kernel ${report.machine.kernel}; load before \`${report.machine.uptimeBefore}\`, after \`${report.machine.uptimeAfter}\``);
  lines.push(`- 1 KiB bodies, window 1000 unsettled per sender, credit 1000 per receiver, one queue; ${report.settings.ROUNDS} round(s) of ${report.settings.DURATION} s per load and broker, ${report.settings.WARMUP} s warm-up per broker first; msgs/s = best round, CPU = median of rounds (rounds with errors left out)`);
  lines.push(`- broker CPU µs/msg: utime+stime of the broker's process (/proc/PID/stat) over the load, per message received`, '');
  const row = (cells) => `| ${cells.join(' | ')} |`;
  const header = [
    'load',
    ...all.map((b) => `${label(b)} msgs/s`),
    ...peers.map((b) => `tandem / ${label(b)}`),
    `broker CPU µs/msg (${per(label)})`,
    ...peers.map((b) => `CPU tandem / ${label(b)}`),
    `broker cores (${per(label)})`,
    `client cores (${per(label)})`,
    `others' cores (${per(label)})`,
    'rounds with errors',
  ];
  const numeric = 1 + all.length + 2 * peers.length; // right-aligned: msgs/s, ratios, CPU
  lines.push(row(header), row(header.map((_, i) => (i > 0 && i <= numeric ? '---:' : '---'))));
  for (const load of allLoads) {
    const agg = Object.fromEntries(all.map((b) => [b, aggregate(report.runs.filter((r) => r.load === load.key && r.broker === b))]));
    if (!Object.values(agg).some(Boolean)) continue;
    const cell = (b, f, d = 0) => (agg[b]?.throughput !== undefined ? fmt(f(agg[b]), d) : '–');
    const t = agg.tandem;
    const ratio = (f) => (b) => (t?.throughput !== undefined && agg[b]?.throughput !== undefined ? `**${fmt(f(t) / f(agg[b]), 2)}×**` : '–');
    lines.push(
      row([
        load.title,
        ...all.map((b) => cell(b, (a) => a.throughput)),
        ...peers.map(ratio((a) => a.throughput)),
        per((b) => cell(b, (a) => a.usPerMessage, 1)),
        ...peers.map(ratio((a) => a.usPerMessage)),
        per((b) => cell(b, (a) => a.brokerCores, 2)),
        per((b) => cell(b, (a) => a.clientCores, 2)),
        per((b) => cell(b, (a) => a.otherCores, 2)),
        per((b) => String(agg[b]?.failed ?? '–')),
      ]),
    );
  }
  lines.push('', '<details><summary>every run</summary>', '', '| round | load | broker | msgs/s | sent | accepted | received | lost / dup | broker µs/msg | cores broker / client / others | busy cores before | errors |', '|---|---|---|---:|---:|---:|---:|---|---:|---|---|---|');
  for (const r of report.runs) {
    lines.push(`| ${r.round} | ${r.load} | ${r.broker} | ${fmt(r.throughput)} | ${r.sent} | ${r.accepted} | ${r.received} | ${r.lost} / ${r.duplicates} | ${fmt(r.brokerUsPerMessage, 1)} | ${r.brokerCores} / ${r.clientCores} / ${r.otherCores} | ${r.busyBefore} | ${r.errorCount ? r.errors.join('; ').replaceAll('|', '\\|') : ''} |`);
  }
  lines.push('', '</details>', '');
  for (const p of report.profiles) {
    lines.push(`#### tandemd CPU profile, ${p.load} (${fmt(p.throughput)} msgs/s, ${fmt(p.brokerUsPerMessage, 1)} µs/msg under the profiler)`, '', `\`${p.file}\``, '', formatTop(p.top));
  }
  return `${lines.join('\n')}\n`;
}

// `node engine.mjs --report results/engine-X.json` re-renders the markdown of a past run.
if (process.argv[2] === '--report') {
  process.stdout.write(markdown(JSON.parse(readFileSync(process.argv[3], 'utf8'))));
} else {
  main().catch((err) => {
    log(`engine run failed: ${err.stack ?? err}`);
    process.exit(1);
  });
}

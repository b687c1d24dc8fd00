#!/usr/bin/env node
// The benchmark run: tandem, a private RabbitMQ node and a private ActiveMQ Artemis
// instance started side by side, the same loads against each in one run, results as
// ratios tandem/peer.
//
//   node bench/run.mjs            (env: see README.md; prints a markdown report)
//
// Loads (each ≤ 20 s): non-durable 1 KiB 1/1 at peak, the same at half of tandem's
// peak rate (latency), durable 1 KiB 1/1 and 4/4; then the durable loads again,
// shorter, with strace attached to each broker to count fsync/fdatasync calls (and
// tandem's O_DSYNC journal writes)
// (strace slows a traced process, so those throughputs are not the headline ones).
import { join } from 'node:path';
import {
  envNumber, benchDir, buildTandem, ensureRabbitInstalled, fdatasyncRate, log, machineInfo, median, quietGate, run, runLoad,
  runTimeLimit, startTandem, straceSyncs, tempDir, tmpBase, tryRun, writeResults,
} from './lib.mjs';
import { ensureArtemis } from './artemis.mjs';
import { startPeers } from './peers.mjs';

const num = envNumber;
const DURATION = num('BENCH_DURATION', 10, 1, 20);
const ROUNDS = num('BENCH_ROUNDS', 2, 1, 3);
const STRACE_DURATION = num('BENCH_STRACE_DURATION', 5, 1, 20);
const TIME_LIMIT = num('BENCH_TIME_LIMIT', process.env.BENCH_ARTEMIS === 'no' ? 600 : 900, 60, 3600);
const WITH_RABBIT = process.env.BENCH_RABBITMQ !== 'no';
const WITH_ARTEMIS = process.env.BENCH_ARTEMIS !== 'no';
// Seconds of non-durable load on every broker before round 1, not measured: the JVM
// (Artemis) and V8 (tandem) compile their hot paths during the first seconds.
const WARMUP = num('BENCH_BROKER_WARMUP', 5, 0, 60);
const WITH_STRACE = process.env.BENCH_STRACE !== 'no';
const QUIET_CORES = num('BENCH_QUIET_CORES', 0.3, 0, 64);
const QUIET_WAIT = num('BENCH_QUIET_WAIT', 20, 0, 120); // per load
const QUIET_BUDGET = num('BENCH_QUIET_BUDGET', 150, 0, 600); // whole run

const loads = [
  { key: 'nd-1x1-peak', title: 'non-durable 1 KiB, 1 sender / 1 receiver, peak', args: () => ['--duration', DURATION] },
  { key: 'nd-1x1-half', title: "non-durable 1 KiB, 1/1, at half of tandem's peak", args: (ctx) => ['--duration', DURATION, '--rate', ctx.halfRate] },
  { key: 'd-1x1', title: 'durable 1 KiB, 1 sender / 1 receiver', durable: true, args: () => ['--durable', '--terminus-durable', '--duration', DURATION] },
  { key: 'd-4x4', title: 'durable 1 KiB, 4 senders / 4 receivers, one queue', durable: true, args: () => ['--durable', '--terminus-durable', '--duration', DURATION, '--senders', 4] },
];

async function main() {
  const quietMoment = quietGate({ cores: QUIET_CORES, wait: QUIET_WAIT, budget: QUIET_BUDGET });
  const report = { startedAt: new Date().toISOString(), settings: { DURATION, ROUNDS, STRACE_DURATION, QUIET_CORES, QUIET_WAIT, QUIET_BUDGET }, runs: [], syncs: [] };
  report.machine = { ...machineInfo(), uptimeBefore: await run('uptime'), kernel: await run('uname', ['-r']) };
  log(`machine: ${report.machine.uptimeBefore}`);

  const tandemBuild = await buildTandem();
  if (WITH_RABBIT) await ensureRabbitInstalled();
  const artemisHome = WITH_ARTEMIS ? await ensureArtemis() : undefined;
  const base = tempDir(tmpBase(), 'tandem-bench-');
  report.versions = {
    node: process.version,
    tandem: tandemBuild.label,
    rhea: JSON.parse(await run('node', ['-p', "JSON.stringify(require('rhea/package.json').version)"], { cwd: benchDir })),
    erlang: WITH_RABBIT ? await tryRun('dpkg-query', ['-W', '-f', '${Version}', 'erlang-base']) : undefined,
    java: WITH_ARTEMIS ? await tryRun('sh', ['-c', 'java -version 2>&1 | head -1']) : undefined,
  };
  report.disk = { dir: base, df: await tryRun('df', ['-T', base]) };
  report.fdatasyncPerSecond = fdatasyncRate(base, 3);
  log(`fdatasync rate in ${base}: ${report.fdatasyncPerSecond}/s`);

  const cancelTimeLimit = runTimeLimit(TIME_LIMIT);

  const brokers = [];
  const tandem = await startTandem({ entry: tandemBuild.entry, dataDir: join(base, 'tandem-data') });
  brokers.push(tandem);
  log(`tandemd pid ${tandem.pid} on port ${tandem.port}`);
  brokers.push(...(await startPeers(base, report, { rabbit: WITH_RABBIT, artemisHome })));
  report.settings.WARMUP = WARMUP;

  try {
    if (WARMUP > 0) {
      for (const b of brokers) {
        log(`warm-up: ${WARMUP} s of non-durable load on ${b.name}, not measured`);
        await runLoad(b, ['--duration', String(WARMUP)], { timeoutMs: (WARMUP + 90) * 1000 });
      }
    }
    const ctx = { halfRate: 0 };
    for (let round = 1; round <= ROUNDS; round++) {
      // Alternate who goes first, so drift in the machine's load hits both alike.
      const order = round % 2 ? brokers : [...brokers].reverse();
      for (const load of loads) {
        for (const b of order) {
          const args = load.args(ctx).map(String);
          const quiet = await quietMoment();
          log(`round ${round} ${load.key} on ${b.name}: ${args.join(' ')}`);
          const r = await runLoad(b, args, { timeoutMs: (DURATION + 90) * 1000 });
          report.runs.push({ ...r, load: load.key, broker: b.name, round, quietWait: quiet.waited, busyBefore: quiet.busyCores });
          log(`  ${summaryLine(r)}`);
          if (load.key === 'nd-1x1-peak' && b === tandem) ctx.halfRate = Math.max(ctx.halfRate, Math.round(r.throughput / 2));
        }
      }
    }
    if (WITH_STRACE) {
      for (const load of loads.filter((l) => l.durable)) {
        for (const b of brokers) {
          const args = load.args(ctx).map(String);
          args[args.indexOf('--duration') + 1] = String(STRACE_DURATION);
          await quietMoment();
          log(`strace pass ${load.key} on ${b.name}`);
          const tracer = await straceSyncs(b.pid, join(base, `strace-${b.name}-${load.key}.txt`));
          const r = await runLoad(b, args, { timeoutMs: (STRACE_DURATION + 90) * 1000 });
          const counts = await tracer.stop();
          // Tandem's journal writes are O_DSYNC (each one a sync); RabbitMQ's and Artemis' pwrite64s are not.
          const syncedWrites = b.name === 'tandem' ? counts.pwrite64 : 0;
          const syncs = counts.fsync + counts.fdatasync + syncedWrites;
          report.syncs.push({ load: load.key, broker: b.name, fsync: counts.fsync, fdatasync: counts.fdatasync, syncedWrites, accepted: r.accepted, syncsPerMessage: r.accepted ? syncs / r.accepted : NaN, throughputUnderStrace: r.throughput, lost: r.lost, duplicates: r.duplicates });
          log(`  fdatasync ${counts.fdatasync} fsync ${counts.fsync} O_DSYNC writes ${syncedWrites} for ${r.accepted} msgs; ${r.throughput} msgs/s under strace`);
        }
      }
    }
  } finally {
    cancelTimeLimit();
    for (const b of brokers) await b.stop();
  }
  report.machine.uptimeAfter = await run('uptime');
  report.machine.loadavgAfter = machineInfo().loadavg;
  report.finishedAt = new Date().toISOString();

  writeResults('run', report, markdown(report));
  process.exit(0);
}

function summaryLine(r) {
  return (
    `${r.throughput} msgs/s, p50 ${r.latencyMs.p50} ms p99 ${r.latencyMs.p99} ms, lost ${r.lost} dup ${r.duplicates}` +
    ` rej ${r.rejected} unsettled ${r.unsettledAtEnd}; cores: broker ${r.brokerCores} client ${r.clientCores} others ${r.otherCores}`
  );
}

const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '–');

/** Best throughput over rounds (interference only ever slows a run), median latency, summed loss. */
function aggregate(runs) {
  if (!runs.length) return undefined;
  return {
    throughput: Math.max(...runs.map((r) => r.throughput)),
    all: runs.map((r) => r.throughput),
    p50: median(runs.map((r) => r.latencyMs.p50)),
    p99: median(runs.map((r) => r.latencyMs.p99)),
    lost: runs.reduce((a, r) => a + r.lost, 0),
    dup: runs.reduce((a, r) => a + r.duplicates, 0),
    brokerCores: median(runs.map((r) => r.brokerCores)),
    efficiency: median(runs.map((r) => r.msgsPerBrokerCpuSecond)),
    otherCores: median(runs.map((r) => r.otherCores)),
    // Each round's half-rate load runs at half of the best tandem peak so far, so rounds may differ.
    rates: [...new Set(runs.map((r) => r.rateLimit))].sort((a, b) => a - b),
  };
}

function markdown(report) {
  const lines = [];
  const v = report.versions;
  lines.push(`### Run ${report.startedAt}`, '');
  const peers = [...new Set(report.runs.map((r) => r.broker))].filter((b) => b !== 'tandem');
  const label = (b) => ({ tandem: 'tandem', rabbitmq: 'RabbitMQ', artemis: 'Artemis' })[b] ?? b;
  lines.push(`- tandem ${v.tandem}, RabbitMQ ${v.rabbitmq ?? '(not run)'} (Erlang ${v.erlang ?? '-'}), Artemis ${v.artemis ?? '(not run)'}${v.java ? ` (${v.java})` : ''}, node ${v.node}, rhea ${v.rhea}`);
  if (report.artemisJournal) {
    const j = report.artemisJournal;
    lines.push(`- Artemis instance: \`artemis create\` defaults but loopback acceptors, user/password (SASL PLAIN), ANYCAST for auto-created addresses; journal ${j.type}, journal-datasync true, journal-buffer-timeout ${fmt(j.bufferTimeoutNs)} ns (${j.autotune ?? 'not auto-tuned'})`);
  }
  lines.push(`- machine: ${report.machine.cores} × ${report.machine.model}, kernel ${report.machine.kernel}`);
  lines.push(`- load before: \`${report.machine.uptimeBefore}\``);
  lines.push(`- load after: \`${report.machine.uptimeAfter}\``);
  lines.push(`- fdatasync rate (1 KiB append + fdatasync, 3 s, data dir's filesystem): ${fmt(report.fdatasyncPerSecond)}/s`);
  const waits = report.runs.map((r) => r.quietWait ?? 0);
  lines.push(`- shared machine: before each load the run waited for busy CPU < ${report.settings.QUIET_CORES} cores (waited ${fmt(waits.reduce((a, b) => a + b, 0), 1)} s in all); "others' CPU" below is what other processes used during each load`);
  lines.push(`- ${report.settings.ROUNDS} round(s) of ${report.settings.DURATION} s per load and broker; throughput = best round, latency = median of rounds${report.settings.WARMUP ? `; ${report.settings.WARMUP} s of non-durable load on each broker first, not measured` : ''}`, '');
  const all = ['tandem', ...peers];
  const per = (f) => all.map(f).join('; ');
  lines.push(`| load | ${all.map((b) => `${label(b)} msgs/s`).join(' | ')} | ${peers.map((b) => `tandem / ${label(b)}`).join(' | ')} | p50 / p99 ms (${per(label)}) | lost / dup (${per(label)}) | broker CPU cores (${per(label)}) | msgs per broker CPU-second (${per(label)}) | others' CPU cores during load (${per(label)}) |`);
  lines.push(`|---|${all.map(() => '---:|').join('')}${peers.map(() => '---:|').join('')}---|---|---|---|---|`);
  for (const load of loads) {
    const agg = Object.fromEntries(all.map((b) => [b, aggregate(report.runs.filter((r) => r.load === load.key && r.broker === b))]));
    const t = agg.tandem;
    if (!t) continue;
    const cell = (b, f) => (agg[b] ? f(agg[b]) : '–');
    const title = load.key === 'nd-1x1-half' ? `${load.title} (${t.rates.map((x) => fmt(x)).join(', ')} msgs/s)` : load.title;
    lines.push(
      `| ${title} | ${all.map((b) => cell(b, (a) => fmt(a.throughput))).join(' | ')} | ${peers.map((b) => cell(b, (a) => `**${fmt(t.throughput / a.throughput, 2)}×**`)).join(' | ')} | ${per((b) => cell(b, (a) => `${fmt(a.p50, 2)} / ${fmt(a.p99, 2)}`))} | ${per((b) => cell(b, (a) => `${a.lost} / ${a.dup}`))} | ${per((b) => cell(b, (a) => fmt(a.brokerCores, 2)))} | ${per((b) => cell(b, (a) => fmt(a.efficiency)))} | ${per((b) => cell(b, (a) => fmt(a.otherCores, 2)))} |`,
    );
  }
  if (report.syncs.length) {
    lines.push('', '| durable load (strace attached) | broker | fdatasync | fsync | O_DSYNC writes (tandem\'s journal) | messages accepted | syncs / message | msgs/s under strace |', '|---|---|---:|---:|---:|---:|---:|---:|');
    for (const s of report.syncs) {
      lines.push(`| ${s.load} | ${s.broker} | ${fmt(s.fdatasync)} | ${fmt(s.fsync)} | ${s.broker === 'tandem' ? fmt(s.syncedWrites ?? 0) : '–'} | ${fmt(s.accepted)} | ${fmt(s.syncsPerMessage, 4)} | ${fmt(s.throughputUnderStrace)} |`);
    }
  }
  lines.push('', '<details><summary>every run</summary>', '', '| round | load | broker | msgs/s | sent | received | p50 / p90 / p99 / max ms | lost / dup / rejected | cores broker / client / others | busy cores just before | client ELU senders; receivers |', '|---|---|---|---:|---:|---:|---|---|---|---|---|');
  for (const r of report.runs) {
    lines.push(
      `| ${r.round} | ${r.load} | ${r.broker} | ${fmt(r.throughput)} | ${r.sent} | ${r.received} | ${r.latencyMs.p50} / ${r.latencyMs.p90} / ${r.latencyMs.p99} / ${r.latencyMs.max} | ${r.lost} / ${r.duplicates} / ${r.rejected} | ${r.brokerCores} / ${r.clientCores} / ${r.otherCores} | ${r.busyBefore} | ${r.clientElu.senders.join(' ')}; ${r.clientElu.receivers.join(' ')} |`,
    );
  }
  lines.push('', '</details>', '');
  return `${lines.join('\n')}\n`;
}

// `node run.mjs --report results/run-X.json` re-renders the markdown of a past run.
if (process.argv[2] === '--report') {
  const { readFileSync } = await import('node:fs');
  process.stdout.write(markdown(JSON.parse(readFileSync(process.argv[3], 'utf8'))));
  process.exit(0);
}

main().catch((err) => {
  log(`bench failed: ${err.stack ?? err}`);
  process.exit(1);
});

#!/usr/bin/env node
// Two tandem builds against each other, standalone, with the Proton C load generator:
// broker CPU per message at fixed rates (what a change costs or saves where the broker
// has CPU to spare) and msgs/s at peak. Every load gets a fresh broker of each build,
// the two taking turns at going first; the broker is pinned to CPU 0 and the client to
// CPU 1. Ratios are test / base, the geometric mean over rounds with its 95% interval.
//
//   node bench/builds-ab.mjs                    base HEAD~1, test HEAD
//   BENCH_AB_BASE=<rev> BENCH_AB_TEST=<rev|worktree> BENCH_AB_ROUNDS=4
//   BENCH_AB_LOADS=nd-at-20k,nd-peak,d-at-8k (any of the keys below; jms-*: messages shaped as qpid-jms sends them)
//
// Not a test: npm test never runs it. Raw results: bench/results/builds-ab-<time>.json.
import { cpus } from 'node:os';
import { join } from 'node:path';
import { buildTandem, envNumber, geoMeanText, log, machineInfo, median, pinCpus, run, startTandem, tempDir, tmpBase, waitQuiet, writeResults } from './lib.mjs';
import { runProtonLoad } from './loadgen-c.mjs';

const DURATION = envNumber('BENCH_DURATION', 8, 2, 20);
const ROUNDS = envNumber('BENCH_AB_ROUNDS', 4, 1, 10);
const DURABLE = ['--durable', '--terminus-durable'];
// What qpid-jms sends: its string message-id, annotations, to/content-type/creation-time, three application properties.
const JMS = ['--message-id-string', '--jms-shape'];
// Each 1 KiB, 1 sender and 1 receiver, every message with a message-id.
const allLoads = {
  'nd-at-5k': ['--rate', '5000'],
  'nd-at-20k': ['--rate', '20000'],
  'nd-at-50k': ['--rate', '50000'],
  'nd-peak': [],
  'd-at-2k': [...DURABLE, '--rate', '2000'],
  'd-at-8k': [...DURABLE, '--rate', '8000'],
  'd-peak': DURABLE,
  'jms-at-20k': [...JMS, '--rate', '20000'],
  'jms-peak': JMS,
};
const loads = (process.env.BENCH_AB_LOADS ?? 'nd-at-5k,nd-at-20k,nd-peak,d-at-8k').split(',');
for (const l of loads) if (!allLoads[l]) throw new Error(`BENCH_AB_LOADS: no load ${l} (${Object.keys(allLoads).join(', ')})`);

const baseRev = process.env.BENCH_AB_BASE ?? 'HEAD~1';
const testRev = process.env.BENCH_AB_TEST ?? 'HEAD';
const builds = [
  { side: 'base', ...(await buildTandem(baseRev)) },
  { side: 'test', ...(await buildTandem(testRev)) },
];
const pin = cpus().length >= 2;
const report = { startedAt: new Date().toISOString(), settings: { DURATION, ROUNDS, loads, pin }, builds: builds.map((b) => ({ side: b.side, label: b.label })), machine: { ...machineInfo(), uptimeBefore: await run('uptime') }, rows: [] };
const base = tempDir(tmpBase(), 'tandem-builds-ab-');
let dirN = 0;

for (let round = 1; round <= ROUNDS; round++) {
  for (const load of loads) {
    const order = (round + loads.indexOf(load)) % 2 ? builds : [...builds].reverse();
    for (const build of order) {
      const broker = await startTandem({ entry: build.entry, dataDir: join(base, `d${dirN++}`) });
      try {
        if (pin) await pinCpus(broker.pid, '0');
        await waitQuiet({ maxSeconds: 10 });
        const r = await runProtonLoad({ ...broker, clientCpus: pin ? '1' : undefined, loadArgs: [] }, ['--duration', String(DURATION), '--message-id', ...allLoads[load]], { timeoutMs: (DURATION + 60) * 1000 });
        report.rows.push({ side: build.side, load, round, throughput: r.throughput, brokerUsPerMessage: r.brokerUsPerMessage, brokerCores: r.brokerCores, lost: r.lost, duplicates: r.duplicates });
        log(`round ${round} ${load} ${build.side}: ${r.throughput} msgs/s, broker ${r.brokerUsPerMessage} µs/msg (${r.brokerCores} cores)`);
      } finally {
        await broker.stop();
      }
    }
  }
}
report.finishedAt = new Date().toISOString();

const lines = [
  `# Two tandem builds: ${builds.map((b) => `${b.side} ${b.label}`).join(', ')}`,
  '',
  `${ROUNDS} rounds of ${DURATION} s per load, a fresh broker per load and build, 1 KiB, 1 sender / 1 receiver, proton-c; ${pin ? 'broker on CPU 0, client on CPU 1' : 'unpinned'}. Ratios test / base: geometric mean over rounds [95% interval].`,
  '',
  '| load | broker µs/msg base → test (median) | ratio | msgs/s base → test (median) | ratio |',
  '|---|---|---|---|---|',
];
for (const load of loads) {
  const of = (side) => report.rows.filter((r) => r.load === load && r.side === side);
  const logs = (key) => of('test').flatMap((t) => of('base').filter((b) => b.round === t.round).map((b) => Math.log(t[key] / b[key])));
  const med = (side, key) => Math.round(median(of(side).map((r) => r[key])) * 10) / 10;
  lines.push(`| ${load} | ${med('base', 'brokerUsPerMessage')} → ${med('test', 'brokerUsPerMessage')} | ${geoMeanText(logs('brokerUsPerMessage'))} | ${med('base', 'throughput')} → ${med('test', 'throughput')} | ${geoMeanText(logs('throughput'))} |`);
}
writeResults('builds-ab', report, `${lines.join('\n')}\n`);

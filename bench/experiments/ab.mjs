#!/usr/bin/env node
// A/B of candidate tandem optimisations without editing src/: the same tandemd build
// started plain and with preloads from this folder, loads alternated between them.
//
//   node bench/experiments/ab.mjs        env: AB_ROUNDS (2), AB_DURATION (8), AB_RATE (2000),
//                                        AB_VARIANTS / AB_LOADS (indices, e.g. 0,1)
//
// Prints one markdown row per variant and load: best msgs/s, median p50/p99, median
// messages per broker CPU-second.
import { join } from 'node:path';
import { buildTandem, log, runLoad, startTandem, tempDir, tmpBase, waitQuiet } from '../lib.mjs';

const here = new URL('.', import.meta.url).pathname;
const rounds = Number(process.env.AB_ROUNDS ?? 2);
const duration = String(process.env.AB_DURATION ?? 8);
const rate = String(process.env.AB_RATE ?? 2000);
const pick = (list, env) => (process.env[env] ? process.env[env].split(',').map(Number).map((i) => list[i]) : list);
const allVariants = [
  { name: 'as is', pre: [] },
  { name: 'TCP_NODELAY', pre: ['-r', join(here, 'nodelay-preload.cjs')] },
  { name: 'corked writes', pre: ['-r', join(here, 'cork-preload.cjs')] },
  { name: 'TCP_NODELAY + corked writes', pre: ['-r', join(here, 'nodelay-preload.cjs'), '-r', join(here, 'cork-preload.cjs')] },
];
const allLoads = [
  { key: 'nd 1/1 peak', args: ['--duration', duration] },
  { key: `nd 1/1 at ${rate}/s`, args: ['--duration', duration, '--rate', rate] },
  { key: 'durable 4/4 peak', args: ['--duration', duration, '--durable', '--senders', '4'] },
];
// AB_VARIANTS=0,1 / AB_LOADS=1: indices into the lists above.
const variants = pick(allVariants, 'AB_VARIANTS');
const loads = pick(allLoads, 'AB_LOADS');

const build = await buildTandem();
const base = tempDir(tmpBase(), 'tandem-ab-');
const results = [];
const brokers = [];
for (const [i, v] of variants.entries()) brokers.push(await startTandem({ entry: build.entry, dataDir: join(base, `d${i}`), nodeArgs: v.pre }));
try {
  for (let round = 1; round <= rounds; round++) {
    for (const load of loads) {
      const order = round % 2 ? variants.map((_, i) => i) : variants.map((_, i) => i).reverse();
      for (const i of order) {
        const q = await waitQuiet({ maxSeconds: 10 });
        const r = await runLoad(brokers[i], load.args);
        results.push({ variant: variants[i].name, load: load.key, round, ...r, busyBefore: q.busyCores });
        log(`${round} ${load.key} ${variants[i].name}: ${r.throughput}/s p50 ${r.latencyMs.p50} p99 ${r.latencyMs.p99} msgs/cpu-s ${r.msgsPerBrokerCpuSecond} cores b/c/o ${r.brokerCores}/${r.clientCores}/${r.otherCores}`);
      }
    }
  }
} finally {
  for (const b of brokers) await b.stop();
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fix = (x) => Math.round(x * 100) / 100;
process.stdout.write(`tandem ${build.label}, ${rounds} rounds of ${duration} s\n\n| load | variant | best msgs/s | p50 / p99 ms (median) | msgs per broker CPU-second (median) | others' cores (median) |\n|---|---|---:|---|---:|---:|\n`);
for (const load of loads) {
  for (const v of variants) {
    const rs = results.filter((r) => r.load === load.key && r.variant === v.name);
    process.stdout.write(
      `| ${load.key} | ${v.name} | ${Math.max(...rs.map((r) => r.throughput))} | ${fix(median(rs.map((r) => r.latencyMs.p50)))} / ${fix(median(rs.map((r) => r.latencyMs.p99)))} | ${Math.round(median(rs.map((r) => r.msgsPerBrokerCpuSecond)))} | ${fix(median(rs.map((r) => r.otherCores)))} |\n`,
    );
  }
}
process.exit(0);

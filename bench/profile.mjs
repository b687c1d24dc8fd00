#!/usr/bin/env node
// CPU profile of tandemd under a load: runs dist/cli/tandemd.js with --cpu-prof,
// drives it with bench/load.mjs, stops it with SIGTERM (so V8 writes the profile)
// and prints the top self-time functions.
//
//   node bench/profile.mjs [load.mjs options...]    default: non-durable 1/1, 10 s
//   env BENCH_PROFILE_DIR: where the .cpuprofile goes (default bench/results/profile-<time>)
//   env BENCH_CLIENT=proton-c: drive it with the Proton C generator (bench/proton-c/;
//     its options instead, e.g. --senders 4 --durable), which leaves more CPU to the broker
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { formatTop, topSelf } from './cpuprofile-top.mjs';
import { benchDir, buildTandem, log, runLoad, startTandem, tempDir, tmpBase, waitQuiet } from './lib.mjs';
import { runProtonLoad } from './loadgen-c.mjs';

const protonClient = process.env.BENCH_CLIENT === 'proton-c';

const args = process.argv.slice(2);
const loadArgs = args.length ? args : ['--duration', '10'];
const build = await buildTandem();
const base = tempDir(tmpBase(), 'tandem-profile-');
const profDir = process.env.BENCH_PROFILE_DIR || join(benchDir, 'results', `profile-${new Date().toISOString().replace(/[:.]/g, '-')}`);
mkdirSync(profDir, { recursive: true });
const tandem = await startTandem({ entry: build.entry, dataDir: join(base, 'data'), nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profDir] });
log(`tandemd ${build.label} pid ${tandem.pid} port ${tandem.port}, profiling into ${profDir}`);
let r;
try {
  const q = await waitQuiet({ maxSeconds: Number(process.env.BENCH_QUIET_WAIT ?? 60) });
  log(`machine busy ${q.busyCores} cores before the load (waited ${q.waited} s)`);
  r = protonClient ? await runProtonLoad(tandem, loadArgs) : await runLoad(tandem, loadArgs);
  log(`load: ${summary(r)}; cores broker ${r.brokerCores} client ${r.clientCores} others ${r.otherCores}${r.errorCount ? `; errors: ${r.errors.join(' | ')}` : ''}`);
} finally {
  const exit = await tandem.stop();
  log(`tandemd stopped: ${JSON.stringify(exit)}`);
}
function summary(r) {
  // The C generator measures no latency; it gives the broker's CPU per message instead.
  return r.latencyMs ? `${r.throughput} msgs/s, p50 ${r.latencyMs.p50} ms p99 ${r.latencyMs.p99} ms` : `${r.throughput} msgs/s, broker ${r.brokerUsPerMessage} µs/msg`;
}

const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
if (!file) throw new Error(`no .cpuprofile in ${profDir} (did tandemd exit cleanly on SIGTERM?)`);
const top = topSelf(JSON.parse(readFileSync(join(profDir, file), 'utf8')), 30);
process.stdout.write(`profile: ${join(profDir, file)}\ntandem ${build.label}; load (${protonClient ? 'proton-c' : 'rhea'}) ${loadArgs.join(' ')}: ${summary(r)}; cores broker ${r.brokerCores} client ${r.clientCores} others ${r.otherCores}\n\n`);
process.stdout.write(formatTop(top));
process.exit(0);

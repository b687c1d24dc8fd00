#!/usr/bin/env node
// Where a 3-broker cluster (ha-replicate=all) spends its CPU under the standalone
// benchmark's load, per process: CPU-seconds per message of the primary, of each
// backup and of the client, against a standalone tandemd in the same run, and
// (BENCH_HA_PROF=1) a --cpu-prof of every broker with its top functions.
// CPU per message is what to compare across runs on a shared machine; msgs/s is
// printed too, for what it is worth.
//
//   node bench/ha-profile.mjs [load.mjs options]     default: non-durable 1/1, 8 s
//   BENCH_HA_BUILDS="a=/path/to/dist/cli/tandemd.js,b=..."  A/B builds, alternated;
//                      "b=/path/tandemd.js@--opt-a@--opt-b": node options for that build only
//   BENCH_HA_ROUNDS=2  rounds (each runs every build, standalone and cluster)
//   BENCH_HA_PROF=1    profile the cluster brokers (round 1 of the first build only)
//   BENCH_HA_BROKER_ARGS="--ha-retain-size 16MiB"  more tandemd options, for every broker
//   BENCH_HA_VARIANTS="off=;on=--dedup-window 1000000 --dedup-ttl 1h"  each build runs once per
//                      variant, with that variant's tandemd options (A/B of a setting, same build)
//   BENCH_HA_NODE_ARGS="--perf-basic-prof"  more node options, for every broker
//   BENCH_HA_PERF=/tmp/perf.data  perf record the cluster's brokers during the measured load
//   BENCH_HA_OUT_DIR=/tmp/logs  keep every broker's stdout and stderr there (with --trace-gc, say)
//   BENCH_HA_STRACE=1  count every broker's system calls during the measured load
//                      (strace -c -f; slows them down, so CPU per message is not comparable)
//   BENCH_HA_TARGETS=cluster  only these targets (standalone,cluster: the default)
//   BENCH_HA_WARMUP=30 seconds of the same load first, not measured: the brokers' windows
//                      of recent changes (HA 1M changes, DR 200k) fill in the first
//                      ~30 s, and a full one costs less per change (no fresh memory)
//
// Every process is started here, registered, and killed by PID on exit.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { formatTop, topSelf } from './cpuprofile-top.mjs';
import { benchDir, buildTandem, freePort, launcherNodeOptions, log, onCleanup, procCpu, runLoad, sleep, tempDir, tmpBase, waitQuiet } from './lib.mjs';

const loadArgs = process.argv.slice(2).length ? process.argv.slice(2) : ['--duration', '8'];
const ROUNDS = Number(process.env.BENCH_HA_ROUNDS ?? 2);
const PROF = process.env.BENCH_HA_PROF === '1';
const TARGETS = (process.env.BENCH_HA_TARGETS ?? 'standalone,cluster').split(',');
const WARMUP = Number(process.env.BENCH_HA_WARMUP ?? 0);
const STRACE = process.env.BENCH_HA_STRACE === '1';
const OUT_DIR = process.env.BENCH_HA_OUT_DIR; // keep each broker's stdout and stderr there (e.g. with --trace-gc)
const builds = process.env.BENCH_HA_BUILDS
  ? process.env.BENCH_HA_BUILDS.split(',').map((s) => {
      const [label, spec] = [s.slice(0, s.indexOf('=')), s.slice(s.indexOf('=') + 1)];
      const [entry, ...nodeArgs] = spec.split('@');
      return { label, entry, nodeArgs };
    })
  : [await buildTandem()];
const variants = process.env.BENCH_HA_VARIANTS
  ? process.env.BENCH_HA_VARIANTS.split(';').map((v) => ({ label: v.slice(0, v.indexOf('=')), args: v.slice(v.indexOf('=') + 1).split(' ').filter(Boolean) }))
  : [{ label: '', args: [] }];
const runs = builds.flatMap((b) => variants.map((v) => ({ ...b, label: v.label ? `${b.label}/${v.label}` : b.label, brokerArgs: v.args })));
const base = tempDir(tmpBase(), 'tandem-ha-profile-');
const profDir = join(benchDir, 'results', `ha-profile-${new Date().toISOString().replace(/[:.]/g, '-')}`);
const load1 = () => Math.round(loadavg()[0] * 100) / 100;

let n = 0;
async function startBroker({ entry, nodeArgs: buildArgs = [], brokerArgs = [] }, port, args, profile) {
  const id = n++;
  const dataDir = join(base, `data-${id}`);
  const nodeArgs = [...launcherNodeOptions(entry), ...buildArgs, ...(process.env.BENCH_HA_NODE_ARGS ?? '').split(' ').filter(Boolean), ...(profile ? ['--cpu-prof', '--cpu-prof-dir', profDir, '--cpu-prof-name', `${profile}.cpuprofile`] : [])];
  const proc = spawn(process.execPath, [...nodeArgs, entry, '--port', String(port), '--host', '127.0.0.1', '--data-dir', dataDir, '--log-level', 'warn', ...args, ...brokerArgs, ...(process.env.BENCH_HA_BROKER_ARGS ?? '').split(' ').filter(Boolean)], {
    cwd: base, env: { ...process.env, NOTIFY_SOCKET: '' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  const unregister = onCleanup(() => proc.kill('SIGKILL'));
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (err += d).length > 1e5 && (err = err.slice(-5e4)));
  const exited = new Promise((r) => proc.once('exit', () => r()));
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`tandemd did not listen: ${err.slice(-2000)}`)), 30_000);
    proc.stdout.on('data', () => /listening on/.test(out) && (clearTimeout(timer), resolve()));
  });
  return {
    pid: proc.pid, port, loadArgs: [],
    async stop() {
      proc.kill('SIGTERM');
      await Promise.race([exited, sleep(20_000)]);
      proc.kill('SIGKILL');
      await exited;
      unregister();
      if (OUT_DIR) writeFileSync(join(OUT_DIR, `broker-${id}-${port}.log`), out + err);
    },
  };
}

async function haRun(entry, args) {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(entry, '..', 'tandem.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.once('exit', (code) => resolve({ code, out }));
  });
}

async function cluster(build, profile) {
  // profile: a name prefix for this cluster's profiles, or undefined
  const entry = build.entry;
  const ports = [await freePort(), await freePort(), await freePort()];
  const url = ports.map((p) => `127.0.0.1:${p}`).join(',');
  const args = ['--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-replicate', 'all'];
  const brokers = [];
  for (let i = 0; i < 3; i++) brokers.push(await startBroker(build, ports[i], args, profile ? `${profile}-${i === 0 ? 'primary' : `backup${i}`}` : undefined));
  const pr = await haRun(entry, ['ha', 'promote', '-b', `127.0.0.1:${ports[0]}`, '--cluster-manager']);
  if (pr.code !== 0) throw new Error(`promote failed: ${pr.out}`);
  for (let k = 0; k < 300; k++) {
    const st = await haRun(entry, ['ha', 'query', '-b', `127.0.0.1:${ports[0]}`, '--json']);
    try {
      if ((JSON.parse(st.out).backups ?? []).filter((b) => b.state === 'ready').length === 2) return brokers;
    } catch {
      // not yet
    }
    await sleep(200);
  }
  throw new Error('backups not ready');
}

/** strace -c -f attached to a running broker until stop(); its summary table. */
function traceSyscalls(pid) {
  const p = spawn('strace', ['-c', '-f', '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
  const unregister = onCleanup(() => p.kill('SIGKILL'));
  let out = '';
  p.stderr.on('data', (d) => (out += d));
  const exited = new Promise((r) => p.once('exit', () => r()));
  return {
    async stop() {
      p.kill('SIGINT');
      await Promise.race([exited, sleep(10_000)]);
      unregister();
      return out.split('\n').filter((l) => /^\s*[\d.]+\s+[\d.]+\s+\d+\s+\d+/.test(l) || /total/.test(l)).slice(0, 12).join('\n');
    },
  };
}

const rows = [];
const perMsg = (cpu, msgs) => (msgs > 0 ? Math.round((cpu / msgs) * 1e7) / 10 : NaN); // µs per message
for (let round = 1; round <= ROUNDS; round++) {
  const order = round % 2 ? runs : [...runs].reverse();
  for (const b of order) {
    // Every variant of the first build is profiled, so an A/B of a setting has both profiles.
    const profile = PROF && round === 1 && b.entry === builds[0].entry ? b.label.replace(/[^\w.-]+/g, '_') : undefined;
    if (profile) mkdirSync(profDir, { recursive: true });
    for (const target of (round % 2 ? ['standalone', 'cluster'] : ['cluster', 'standalone']).filter((t) => TARGETS.includes(t))) {
      const brokers = target === 'standalone' ? [await startBroker(b, await freePort(), [], undefined)] : await cluster(b, profile);
      // The same load (same queue, if it names one), so a window it fills is the measured load's.
      if (WARMUP > 0) await runLoad({ ...brokers[0], name: target }, [...loadArgs.map(String), '--duration', String(WARMUP)]);
      await waitQuiet({ cores: 0.3, maxSeconds: 5 });
      const c0 = brokers.map((x) => procCpu(x.pid));
      const before = load1();
      const straces = STRACE ? brokers.map((x) => traceSyscalls(x.pid)) : [];
      const perf = process.env.BENCH_HA_PERF && target === 'cluster' ? spawn('perf', ['record', '-F', '499', '-g', '-o', process.env.BENCH_HA_PERF, '-p', brokers.map((x) => x.pid).join(',')], { stdio: 'ignore' }) : undefined;
      const r = await runLoad({ ...brokers[0], name: target }, loadArgs.map(String));
      if (perf) {
        perf.kill('SIGINT');
        await new Promise((r) => perf.once('exit', r));
      }
      for (const [i, t] of straces.entries()) log(`${target} broker ${i} (${i === 0 ? 'primary' : 'backup'}), ${r.received} messages:\n${await t.stop()}`);
      const cpu = brokers.map((x, i) => procCpu(x.pid) - c0[i]);
      const row = {
        round, build: b.label, target, load: `${before} → ${load1()}`, msgs: r.received, msgsPerS: r.throughput, p50Ms: r.latencyMs.p50, p99Ms: r.latencyMs.p99, lost: r.lost, dup: r.duplicates,
        usPerMsg: { primary: perMsg(cpu[0], r.received), backups: cpu.slice(1).map((c) => perMsg(c, r.received)), client: perMsg(r.clientCpuSeconds, r.received) },
      };
      rows.push(row);
      log(JSON.stringify(row));
      for (const x of brokers) await x.stop();
    }
  }
}

process.stdout.write(`load: ${loadArgs.join(' ')}\n\n| round | build | target | load avg | msgs/s | µs CPU per msg: primary | backups | client |\n|---|---|---|---|---:|---:|---|---:|\n`);
for (const r of rows) process.stdout.write(`| ${r.round} | ${r.build} | ${r.target} | ${r.load} | ${r.msgsPerS} | ${r.usPerMsg.primary} | ${r.usPerMsg.backups.join(', ')} | ${r.usPerMsg.client} |\n`);
if (PROF) {
  for (const f of readdirSync(profDir).filter((x) => x.endsWith('.cpuprofile')).sort()) {
    process.stdout.write(`\n## ${f} (${join(profDir, f)})\n\n${formatTop(topSelf(JSON.parse(readFileSync(join(profDir, f), 'utf8')), 30))}`);
  }
}
process.exit(0);

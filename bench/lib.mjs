// Helpers for bench drivers: build tandem, start/stop the brokers (each in its own
// process, waited for), run one load in a child process, sample CPU, count syncs.
// Everything started here is registered and killed by PID on exit, even on failure.
import { execFile, spawn } from 'node:child_process';
import { closeSync, existsSync, fdatasyncSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { createHash } from 'node:crypto';

export const benchDir = dirname(new URL(import.meta.url).pathname);
export const repoRoot = resolve(benchDir, '..');
const execFileP = promisify(execFile);

export const log = (...a) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${a.join(' ')}\n`);
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The median of the finite numbers among `xs` (NaN if there are none). */
export function median(xs) {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** Student's t, two-sided 95%, by degrees of freedom 1-30 (1.96 beyond). */
const T975 = [12.71, 4.3, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.2, 2.18, 2.16, 2.14, 2.13, 2.12, 2.11, 2.1, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04];

/**
 * The geometric mean of paired ratios, given as their logs, and from two pairs on its
 * 95% interval, as text ("0.91 [0.86, 0.96]"): a single pair here moves by 10-20%.
 */
export function geoMeanText(logs) {
  const n = logs.length;
  if (n === 0) return '-';
  const mean = logs.reduce((sum, x) => sum + x, 0) / n;
  if (n === 1) return Math.exp(mean).toFixed(2);
  const sd = Math.sqrt(logs.reduce((sum, x) => sum + (x - mean) ** 2, 0) / (n - 1));
  const half = ((T975[n - 2] ?? 1.96) * sd) / Math.sqrt(n);
  return `${Math.exp(mean).toFixed(2)} [${Math.exp(mean - half).toFixed(2)}, ${Math.exp(mean + half).toFixed(2)}]`;
}

/** A number from the environment (or `def`), refused unless within [min, max]. */
export function envNumber(name, def, min, max) {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v < min || v > max) throw new Error(`${name} must be between ${min} and ${max}`);
  return v;
}

// ---- cleanup registry ----------------------------------------------------------------
const cleanups = [];
/** Register a synchronous last-resort cleanup (runs on exit, signals, crashes). */
export function onCleanup(fn) {
  cleanups.push(fn);
  return () => {
    const i = cleanups.indexOf(fn);
    if (i >= 0) cleanups.splice(i, 1);
  };
}
function runCleanups() {
  while (cleanups.length) {
    try {
      cleanups.pop()();
    } catch {
      // best effort
    }
  }
}
process.on('exit', runCleanups);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`${sig}: stopping everything this run started`);
    runCleanups();
    process.exit(130);
  });
}

export function killPid(pid, sig = 'SIGKILL') {
  try {
    process.kill(pid, sig);
  } catch {
    // gone already
  }
}
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function waitGone(pid, ms) {
  const deadline = Date.now() + ms;
  while (alive(pid) && Date.now() < deadline) await sleep(50);
  return !alive(pid);
}

export async function run(cmd, args, opts = {}) {
  const { stdout } = await execFileP(cmd, args, { timeout: 120_000, maxBuffer: 64 << 20, ...opts });
  return stdout.trim();
}

export async function tryRun(cmd, args, opts = {}) {
  try {
    return await run(cmd, args, opts);
  } catch (err) {
    return undefined;
  }
}

import { freePort } from '../test/helpers/ports.mjs';

export { freePort };

export function tempDir(base, prefix) {
  mkdirSync(base, { recursive: true });
  const d = mkdtempSync(join(base, prefix));
  if (process.env.BENCH_KEEP !== '1') onCleanup(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** Where data dirs go: BENCH_TMP or the OS temp dir (should be a real disk, not tmpfs). */
export const tmpBase = () => process.env.BENCH_TMP || tmpdir();

/**
 * Stops the whole run after `seconds` (exit runs every registered cleanup, so brokers
 * go too); returns what cancels it.
 */
export function runTimeLimit(seconds, name = 'BENCH_TIME_LIMIT') {
  const t = setTimeout(() => {
    log(`run exceeded ${name}=${seconds} s; stopping`);
    process.exit(3);
  }, seconds * 1000);
  onCleanup(() => clearTimeout(t));
  return () => clearTimeout(t);
}

/**
 * A run's raw numbers to bench/results/PREFIX-<startedAt>.json, its markdown report
 * beside it as .md and on stdout; returns the JSON file's path.
 */
export function writeResults(prefix, report, markdownText) {
  const resultsDir = join(benchDir, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `${prefix}-${report.startedAt.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(file.replace(/\.json$/, '.md'), markdownText);
  process.stdout.write(markdownText);
  log(`raw results: ${file}`);
  return file;
}

// ---- building tandem -----------------------------------------------------------------
/**
 * Which tandem to run. BENCH_TANDEM=head (default): the committed HEAD, built once per
 * sha into bench/.build/<sha> so others' uncommitted edits neither break nor blur the
 * measurement; =worktree: the repo's own dist/ (rebuilt if any src file is newer).
 * `rev`: a revision to build instead, or 'worktree' (an A/B of two builds names both).
 */
export async function buildTandem(rev = undefined) {
  const mode = rev === 'worktree' ? 'worktree' : rev ? 'rev' : process.env.BENCH_TANDEM || 'head';
  if (!rev || mode === 'worktree') rev = 'HEAD';
  const sha = await run('git', ['-C', repoRoot, 'rev-parse', '--verify', `${rev}^{commit}`]);
  if (mode === 'worktree') {
    const entry = join(repoRoot, 'dist', 'cli', 'tandemd.js');
    const dirty = (await run('git', ['-C', repoRoot, 'status', '--porcelain', '--', 'src'])).split('\n').filter(Boolean).length;
    if (!existsSync(entry) || newestMtime(join(repoRoot, 'src')) > statSync(entry).mtimeMs) {
      log('building tandem (worktree) with tsc');
      await run('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: repoRoot, timeout: 300_000 });
    }
    return { entry, sha, label: `${sha.slice(0, 10)}${dirty ? ` + ${dirty} uncommitted src files` : ''} (worktree)` };
  }
  // Keyed by the src and bin trees (bin/tandemd holds the broker's node options), so
  // commits that touch only bench/ or tests reuse the build.
  const trees = await run('git', ['-C', repoRoot, 'rev-parse', `${sha}:src`, `${sha}:bin`]);
  const tree = createHash('sha1').update(trees).digest('hex');
  const buildRoot = join(benchDir, '.build');
  const dir = join(buildRoot, tree);
  const entry = join(dir, 'dist', 'cli', 'tandemd.js');
  const note = join(dir, 'build-note.txt');
  if (!existsSync(entry)) {
    log(`building tandem ${sha.slice(0, 10)} (${rev}, src tree ${tree.slice(0, 10)}) into bench/.build`);
    // Keep the two newest other builds (an A/B of two revisions needs both): drop the rest.
    if (existsSync(buildRoot)) {
      const builds = readdirSync(buildRoot).filter((d) => /^[0-9a-f]{40}$/.test(d));
      builds.sort((a, b) => statSync(join(buildRoot, b)).mtimeMs - statSync(join(buildRoot, a)).mtimeMs);
      for (const d of builds.slice(2)) rmSync(join(buildRoot, d), { recursive: true, force: true });
    }
    mkdirSync(dir, { recursive: true });
    await run('sh', ['-c', `git -C "${repoRoot}" archive ${sha} src tsconfig.json package.json bin | tar -x -C "${dir}"`]);
    symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'));
    try {
      await run('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: dir, timeout: 300_000 });
      writeFileSync(note, '');
    } catch (err) {
      // tsc still emits JavaScript on type errors (noEmitOnError is off); benchmark
      // what was emitted, and say so, rather than refuse to run.
      if (!existsSync(entry)) throw new Error(`tsc emitted no dist/cli/tandemd.js: ${err.stdout || err.message}`);
      const errors = String(err.stdout ?? '').split('\n').filter((l) => /error TS/.test(l)).length;
      writeFileSync(note, `built with ${errors} type errors in src at that commit`);
      log(`warning: tsc reported ${errors} type errors at ${sha.slice(0, 10)}; benchmarking the emitted JavaScript`);
    }
  }
  const warning = existsSync(note) ? readFileSync(note, 'utf8') : '';
  return { entry, sha, label: `${sha.slice(0, 10)} (${rev}${warning ? `; ${warning}` : ''})` };
}

function newestMtime(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestMtime(p) : statSync(p).mtimeMs);
  }
  return newest;
}

// ---- tandemd ---------------------------------------------------------------------------
/**
 * The node options the broker's launcher gives it (the first line of bin/tandemd, next
 * to the build's dist/), for spawning `node dist/cli/tandemd.js` as users run it.
 */
export function launcherNodeOptions(entry) {
  const launcher = resolve(dirname(entry), '..', '..', 'bin', 'tandemd');
  if (!existsSync(launcher)) return [];
  const m = /^#!\/usr\/bin\/env -S node (.*)$/.exec(readFileSync(launcher, 'utf8').split('\n', 1)[0]);
  return m ? m[1].trim().split(/\s+/) : [];
}

/**
 * A broker process the bench started: killed at exit if still running (onCleanup), and
 * how it ends: `exited` ({code, signal}), kill9(), and stop() (SIGTERM, then SIGKILL after
 * `graceMs`; resolves with the exit, or undefined if it had to be killed).
 */
export function watchedProcess(proc, graceMs) {
  const unregister = onCleanup(() => killPid(proc.pid));
  const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  return {
    exited,
    async kill9() {
      killPid(proc.pid);
      await exited;
      unregister();
    },
    async stop() {
      killPid(proc.pid, 'SIGTERM');
      const done = await Promise.race([exited, sleep(graceMs).then(() => undefined)]);
      if (!done) killPid(proc.pid);
      await exited;
      unregister();
      return done;
    },
  };
}

/** `port`: 0 picks one; `args`: more tandemd options (cluster, dedup defaults). */
export async function startTandem({ entry, dataDir, nodeArgs = [], cwd, listenTimeoutMs = 20_000, port: fixedPort = 0, args = [] }) {
  const t0 = performance.now();
  const proc = spawn(process.execPath, [...launcherNodeOptions(entry), ...nodeArgs, entry, '--port', String(fixedPort), '--host', '127.0.0.1', '--data-dir', dataDir, '--log-level', 'warn', ...args], {
    cwd: cwd ?? dirname(dataDir),
    env: { ...process.env, NOTIFY_SOCKET: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const { exited, kill9, stop } = watchedProcess(proc, 20_000);
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (err += d).length > 1e5 && (err = err.slice(-5e4)));
  const port = await new Promise((resolvePort, reject) => {
    const t = setTimeout(() => reject(new Error(`tandemd did not listen within ${listenTimeoutMs / 1000} s: ${err}`)), listenTimeoutMs);
    const check = () => {
      const m = /listening on [^\s]+:(\d+)/.exec(out);
      if (m) {
        clearTimeout(t);
        resolvePort(Number(m[1]));
      }
    };
    proc.stdout.on('data', check);
    exited.then(({ code }) => reject(new Error(`tandemd exited (${code}) before listening: ${err}`)));
  });
  return {
    name: 'tandem',
    pid: proc.pid,
    port,
    /** performance.now() at spawn, and how long until it listened. */
    t0,
    listenMs: performance.now() - t0,
    loadArgs: [],
    stderr: () => err,
    dataDir,
    kill9,
    stop,
  };
}

// ---- RabbitMQ (private node; the system's default node is never touched) --------------------
const RMQ_BIN = '/usr/lib/rabbitmq/bin';

export async function ensureRabbitInstalled() {
  if (existsSync(join(RMQ_BIN, 'rabbitmq-server'))) return;
  if (process.env.BENCH_INSTALL_RABBITMQ === 'no') throw new Error('RabbitMQ is not installed and BENCH_INSTALL_RABBITMQ=no');
  // Without a policy-rc.d that refuses, the package would start the system's own node.
  const policy = '/usr/sbin/policy-rc.d';
  if (!existsSync(policy) || !/exit\s+101/.test(readFileSync(policy, 'utf8'))) {
    throw new Error(`${policy} that exits 101 is missing, so installing rabbitmq-server would start a system node; create it or install rabbitmq-server yourself`);
  }
  log('installing rabbitmq-server with apt-get');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () => run('apt-get', ['install', '-y', '--no-install-recommends', 'rabbitmq-server'], { env, timeout: 600_000 });
  try {
    await install();
  } catch {
    await run('apt-get', ['update'], { env, timeout: 300_000 });
    await install();
  }
}

export async function startRabbit(dir) {
  const node = 'tandembench@localhost';
  const [nodePort, distPort, epmdPort] = [await freePort(), await freePort(), await freePort()];
  writeFileSync(join(dir, 'enabled_plugins'), '[rabbitmq_amqp1_0].\n');
  // Only on loopback; guest may log in from loopback, which is what the AMQP 1.0 adapter defaults to.
  writeFileSync(join(dir, 'rabbitmq.conf'), 'loopback_users.guest = true\n');
  const env = {
    ...process.env,
    HOME: dir, // its own Erlang cookie, not root's
    RABBITMQ_NODENAME: node,
    RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
    RABBITMQ_NODE_PORT: String(nodePort),
    RABBITMQ_DIST_PORT: String(distPort),
    ERL_EPMD_PORT: String(epmdPort), // a private epmd, stopped at the end
    RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
    RABBITMQ_LOG_BASE: join(dir, 'log'),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
    RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq'),
    RABBITMQ_PID_FILE: join(dir, 'rabbitmq.pid'),
    RABBITMQ_PLUGINS_EXPAND_DIR: join(dir, 'plugins-expand'),
  };
  const ctl = (args, timeout = 60_000) => run(join(RMQ_BIN, 'rabbitmqctl'), ['-n', node, ...args], { env, timeout });
  const out = openSync(join(dir, 'server.out'), 'w');
  // Own process group, so the whole tree (sh -> beam.smp -> erl_child_setup) can be killed by it.
  const proc = spawn(join(RMQ_BIN, 'rabbitmq-server'), [], { env, cwd: dir, detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  const exited = new Promise((r) => proc.once('exit', r));
  const epmdKill = () => execFile('epmd', ['-kill'], { env: { ...process.env, ERL_EPMD_PORT: String(epmdPort) } }, () => {});
  const unregister = onCleanup(() => {
    killPid(-proc.pid);
    epmdKill();
  });
  let beamPid;
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      await ctl(['await_startup', '--timeout', '30'], 40_000);
      beamPid = Number(readFileSync(env.RABBITMQ_PID_FILE, 'utf8').trim());
      break;
    } catch (err) {
      if (proc.exitCode !== null || Date.now() > deadline) {
        throw new Error(`RabbitMQ did not start: ${String(err.message).slice(0, 300)}; see ${join(dir, 'server.out')} and ${join(dir, 'log')}`);
      }
      await sleep(1000);
    }
  }
  const version = await ctl(['version']);
  return {
    name: 'rabbitmq',
    pid: beamPid,
    port: nodePort,
    version,
    // Verified on 3.10.8: '/queue/Q' declares Q on attach (durable iff the terminus is
    // durable), '/amq/queue/Q' needs Q to exist. Receivers attach first and declare.
    loadArgs: ['--user', 'guest', '--password', 'guest', '--recv-address', '/queue/{q}', '--send-address', '/amq/queue/{q}'],
    ctl,
    async stop() {
      await ctl(['stop'], 60_000).catch((err) => log(`rabbitmqctl stop failed: ${err.message}`));
      const done = await Promise.race([exited, sleep(20_000).then(() => 'timeout')]);
      if (done === 'timeout') killPid(-proc.pid);
      await Promise.race([exited, sleep(5000)]);
      killPid(-proc.pid); // leftovers in its group (erl_child_setup)
      epmdKill();
      unregister();
    },
  };
}

// ---- measurements -------------------------------------------------------------------------
/** Machine fdatasync rate: append 1 KiB + fdatasync in a loop for `seconds` in `dir`. */
export function fdatasyncRate(dir, seconds = 3) {
  const file = join(dir, 'fdatasync-probe');
  const fd = openSync(file, 'w');
  const buf = Buffer.alloc(1024, 7);
  const start = process.hrtime.bigint();
  const limit = BigInt(Math.round(seconds * 1e9));
  let n = 0;
  try {
    while (n < 1_000_000 && process.hrtime.bigint() - start < limit) {
      writeSync(fd, buf);
      fdatasyncSync(fd);
      n++;
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  return Math.round(n / (Number(process.hrtime.bigint() - start) / 1e9));
}

const TICK = 100; // USER_HZ; Linux reports /proc times in these
/** CPU seconds used so far by a process (all threads). */
export function procCpu(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / TICK;
  } catch {
    return NaN;
  }
}
/**
 * Pin a running process, every thread of it, to `cpus` ('0', '0,1'). A benchmark that
 * runs more busy processes than there are cores pins them, so that which of them share
 * a core is the same from load to load and not the scheduler's choice of the moment.
 */
export function pinCpus(pid, cpus) {
  return run('taskset', ['-a', '-p', '-c', cpus, String(pid)]);
}

/** Machine-wide busy and total CPU seconds so far (all cores). */
export function machineCpu() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = f[3] + f[4];
  return { busy: (total - idle) / TICK, total: total / TICK };
}

export const machineInfo = () => ({ cores: cpus().length, model: cpus()[0]?.model, loadavg: loadavg().map((x) => Math.round(x * 100) / 100) });

/**
 * Run a load client (`cmd args`) in a child process whose last stdout line is one JSON
 * object, and account the CPU around it: the broker's (from /proc/PID/stat), the
 * machine's, and the client's own (`clientCpuSeconds` in its JSON). Killed after
 * `timeoutMs`. Resolves with the JSON plus those figures.
 */
export async function measuredClient(broker, cmd, args, { timeoutMs = 120_000, what = 'load' } = {}) {
  const cpu0 = procCpu(broker.pid);
  // A cluster's backups (broker.backupPids), measured apart: on a shared machine they
  // compete with the primary for the same cores, so their CPU is part of the cost.
  const backupPids = broker.backupPids ?? [];
  const backup0 = backupPids.map(procCpu);
  const m0 = machineCpu();
  const t0 = Date.now();
  // broker.clientCpus ('1'): the client pinned to those CPUs, as the brokers may be (pinCpus).
  const [file, argv] = broker.clientCpus ? ['taskset', ['-c', broker.clientCpus, cmd, ...args]] : [cmd, args];
  const proc = spawn(file, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  const unregister = onCleanup(() => killPid(proc.pid));
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (err += d).length > 1e5 && (err = err.slice(-5e4)));
  const timer = setTimeout(() => killPid(proc.pid), timeoutMs);
  const code = await new Promise((r) => proc.once('exit', (c) => r(c)));
  clearTimeout(timer);
  unregister();
  const wall = (Date.now() - t0) / 1000;
  const m1 = machineCpu();
  const brokerCpuSeconds = procCpu(broker.pid) - cpu0;
  const brokerCores = brokerCpuSeconds / wall;
  const backupCpuSeconds = backupPids.map((pid, i) => procCpu(pid) - backup0[i]);
  const backupsCpuSeconds = backupCpuSeconds.reduce((a, b) => a + b, 0);
  const line = out.trim().split('\n').pop();
  let result;
  try {
    result = JSON.parse(line);
  } catch {
    throw new Error(`${what} against ${broker.name} failed (exit ${code}): ${err.trim() || out.trim()}`);
  }
  const machineBusyCores = ((m1.busy - m0.busy) / (m1.total - m0.total)) * cpus().length;
  const clientCores = result.clientCpuSeconds / wall;
  return {
    ...result,
    exitCode: code,
    wallSeconds: Math.round(wall * 10) / 10,
    brokerCpuSeconds: Math.round(brokerCpuSeconds * 1000) / 1000,
    brokerCores: round2(brokerCores),
    // Messages moved per second of broker CPU: less sensitive than msgs/s to how much
    // CPU the other tenants of a shared machine left us.
    msgsPerBrokerCpuSecond: Math.round(result.received / brokerCpuSeconds),
    clientCores: round2(clientCores),
    machineBusyCores: round2(machineBusyCores),
    // Cores busy with neither the broker, its backups, nor the client: other tenants.
    otherCores: round2(Math.max(0, machineBusyCores - brokerCores - clientCores - backupsCpuSeconds / wall)),
    ...(backupPids.length > 0 && {
      backupCores: backupCpuSeconds.map((c) => round2(c / wall)),
      // Messages per second of all the cluster's brokers' CPU together.
      msgsPerClusterCpuSecond: Math.round(result.received / (brokerCpuSeconds + backupsCpuSeconds)),
    }),
  };
}

/** Run bench/load.mjs (rhea) in a child process; resolves with its JSON result plus CPU accounting. */
export function runLoad(broker, args, opts = {}) {
  return measuredClient(broker, process.execPath, [join(benchDir, 'load.mjs'), '--json', '--port', String(broker.port), ...broker.loadArgs, ...args], opts);
}

/**
 * A gate to pass before each load: wait (bounded) for a quiet moment on the machine,
 * at most `wait` seconds per load and `budget` seconds in all.
 */
export function quietGate({ cores, wait, budget }) {
  let left = budget;
  return async function quietMoment() {
    const maxSeconds = Math.min(wait, left);
    if (maxSeconds <= 0) return { waited: 0, busyCores: NaN };
    const q = await waitQuiet({ cores, maxSeconds });
    left -= q.waited;
    if (q.busyCores >= cores) log(`  machine still busy (${q.busyCores} cores) after ${q.waited} s; running anyway`);
    return q;
  };
}

const round2 = (x) => Math.round(x * 100) / 100;

/** Attach strace to a process (all threads) counting sync calls; stop() returns the counts. */
export async function straceSyncs(pid, outFile) {
  // pwrite64 too: tandem opens its journal segments O_DSYNC (src/store/io.ts), so each
  // of its pwrite64 calls is a sync; the caller decides whose pwrite64 counts.
  const proc = spawn('strace', ['-f', '-c', '-e', 'trace=fsync,fdatasync,pwrite64', '-o', outFile, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
  const unregister = onCleanup(() => killPid(proc.pid, 'SIGINT'));
  let err = '';
  proc.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => proc.once('exit', r));
  // Attached once it says so (one line per thread); give it a moment for the rest.
  const deadline = Date.now() + 5000;
  while (!/attached/.test(err) && Date.now() < deadline && proc.exitCode === null) await sleep(20);
  await sleep(300);
  if (proc.exitCode !== null) throw new Error(`strace failed: ${err}`);
  return {
    async stop() {
      killPid(proc.pid, 'SIGINT');
      await Promise.race([exited, sleep(10_000)]);
      killPid(proc.pid);
      unregister();
      const counts = { fsync: 0, fdatasync: 0, pwrite64: 0 };
      for (const l of readFileSync(outFile, 'utf8').split('\n')) {
        const cols = l.trim().split(/\s+/);
        const name = cols[cols.length - 1];
        if (name in counts && /^\d/.test(cols[0])) counts[name] = Number(cols[3]);
      }
      return counts;
    },
  };
}

/**
 * Wait (bounded) until the machine is quiet: busy CPU over a 0.5 s sample below
 * `cores`. Other people's test runs share this machine; starting a load in a
 * quiet moment makes runs comparable. Returns seconds waited and the last sample.
 */
export async function waitQuiet({ cores = 0.3, maxSeconds = 20 } = {}) {
  const start = Date.now();
  let busy = NaN;
  for (;;) {
    const a = machineCpu();
    await sleep(500);
    const b = machineCpu();
    busy = ((b.busy - a.busy) / (b.total - a.total)) * cpus().length;
    if (busy < cores || Date.now() - start >= maxSeconds * 1000) break;
  }
  return { waited: Math.round((Date.now() - start) / 100) / 10, busyCores: round2(busy) };
}

// DR benchmark (not a test): tandemd processes on 127.0.0.1 (primary,
// secondary) from this tree's dist/ (or DR_BENCH_ROOT's).
//  1. Catch-up from the retained log: the secondary is stopped while N 1 KiB
//     messages are sent to an enqueue-only DR queue; on restart it catches up from
//     the source's retained window; changes/s = N / catch-up time.
//  2. Mirror catch-up: the same with an enqueue-and-dequeue queue where a consumer
//     on the primary took half of the messages while the secondary was down
//     (1.5 N changes: enqueues and dequeues).
//  3. Snapshot: a queue holding S 1 KiB durable messages on a primary whose
//     max-memory (16 MiB) keeps most bodies paged out to its journal is added on
//     the secondary, which copies it; messages/s and the primary's memory.
//  4. Lag under steady load: the primary's own throughput is measured first
//     (blast of at-least-once sends); then messages carrying their send time are
//     sent at half that rate for DURATION s while an admin browser on the
//     secondary sees them arrive; lag = arrival - send time (same clock).
//  5. Switchover under load (issue 17): the source's own rate is measured first (a
//     blast of at-least-once sends); then a python-proton publisher
//     (test/dr/py/switch_publisher.py, which moves to the other site when refused)
//     publishes at half that rate while `tandem dr switchover` moves the queue
//     DR_BENCH_SWITCHES times, both directions; per move: the command's run time and
//     the publisher's unavailability (longest gap between two accepts around it).
//     Target: under 2 s.
//  6. Reattach against a full copy (issue 17): a source of DR_BENCH_REATTACH_QUEUE
//     messages copied to a secondary, the source killed -9, the copy activated and
//     DR_BENCH_REATTACH_CHANGES changes made there (half publishes, half consumes),
//     the old source restarted and `DR-REATTACH`ed: time until it holds what the new
//     site holds, and how many changes and copied messages crossed; side by side, the
//     same queue copied in full from the new site to an empty broker (what rebuilding
//     the old site would take). Target: under 5 s, changes sent near the changes made.
// CPU seconds (user + system, /proc/PID/stat) are reported beside every rate: on
// a shared machine they say more than the wall clock.
// Usage: node bench/dr.mjs [N=100000] [DURATION=20] [S=300000]
// DR_BENCH_SCENARIOS: which to run, comma-separated (default
// catchup,mirror,lag,snapshot,switchover,reattach). DR_BENCH_SWITCHES (4),
// DR_BENCH_REATTACH_QUEUE (100000; the figure is 1000000),
// DR_BENCH_REATTACH_CHANGES (10000). The report also goes to bench/results/dr-<time>.json.
// DR_BENCH_SNAPSHOT_MODE=enqueue-only: the snapshot scenario's queue in that mode.
// DR_BENCH_LOG=info: the brokers log at that level (default warn) to stderr.
// DR_BENCH_STRACE=DIR: run the brokers under strace -c, counting fdatasync/fsync
// calls into DIR/NAME-TIME.txt (written when each broker exits).
// DR_BENCH_PROF=DIR: run the brokers with --cpu-prof into DIR (stopped with
// SIGTERM so their profiles are written); aggregate with bench/cpuprofile-top.mjs.
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { launcherNodeOptions } from './lib.mjs';

const require = createRequire(import.meta.url);
const root = resolve(process.env.DR_BENCH_ROOT ?? resolve(import.meta.dirname, '..'));
const rhea = require(join(root, 'node_modules', 'rhea'));
const N = Number(process.argv[2] ?? 100_000);
const DURATION = Number(process.argv[3] ?? 20);
const S = Number(process.argv[4] ?? 300_000);
const BODY = Buffer.alloc(1024, 'x');
const PROF = process.env.DR_BENCH_PROF;
/** DR mode of the snapshot scenario's queue (an enqueue-only copy watches the queue for consumers). */
const SNAPSHOT_MODE = process.env.DR_BENCH_SNAPSHOT_MODE ?? 'enqueue-and-dequeue';
const SCENARIOS = new Set((process.env.DR_BENCH_SCENARIOS ?? 'catchup,mirror,lag,snapshot,switchover,reattach').split(',').map((x) => x.trim()));
const envInt = (name, def, min, max) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isInteger(v) || v < min || v > max) throw new Error(`${name} must be an integer between ${min} and ${max}`);
  return v;
};
const SWITCHES = envInt('DR_BENCH_SWITCHES', 4, 1, 50);
const REATTACH_QUEUE = envInt('DR_BENCH_REATTACH_QUEUE', 100_000, 1000, 10_000_000);
const REATTACH_CHANGES = envInt('DR_BENCH_REATTACH_CHANGES', 10_000, 2, 1_000_000);
const PY = '/usr/bin/python3'; // Debian's, which has the proton package
const tandemCli = join(root, 'dist', 'cli', 'tandem.js');
const procs = new Set();
const dirs = [];
process.on('exit', () => {
  for (const p of procs) p.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const log = (...a) => process.stderr.write(`[dr-bench] ${a.join(' ')}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const load = () => loadavg().map((x) => Math.round(x * 100) / 100);
const round2 = (x) => Math.round(x * 100) / 100;

/** CPU seconds (user + system) a process has used so far. */
function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** Resident and peak resident memory of a process, MiB. */
function memory(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { rssMiB: Math.round(kib('VmRSS') / 1024), peakMiB: Math.round(kib('VmHWM') / 1024) };
}

const STRACE = process.env.DR_BENCH_STRACE;

function start(dataDir, name, args = []) {
  return new Promise((resolveP, reject) => {
    const prof = PROF ? ['--cpu-prof', `--cpu-prof-dir=${PROF}`, `--cpu-prof-name=${name}-${Date.now()}.cpuprofile`] : [];
    const argv = [...launcherNodeOptions(join(root, 'dist', 'cli', 'tandemd.js')), ...prof, join(root, 'bin', 'tandemd'), '--port', '0', '--data-dir', dataDir, '--log-level', process.env.DR_BENCH_LOG ?? 'warn', ...args];
    // strace writes its count of sync calls when the broker exits.
    const [cmd, cmdArgs] = STRACE ? ['strace', ['-f', '-qq', '-c', '-e', 'trace=fdatasync,fsync', '-o', join(STRACE, `${name}-${Date.now()}.txt`), process.execPath, ...argv]] : [process.execPath, argv];
    const p = spawn(cmd, cmdArgs, { stdio: ['ignore', 'pipe', 'inherit'] });
    procs.add(p);
    p.on('exit', () => procs.delete(p));
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /listening on [^\s]+:(\d+)\n/.exec(out);
      if (!m) return;
      const pid = STRACE ? Number(readFileSync(`/proc/${p.pid}/task/${p.pid}/children`, 'utf8').trim().split(/\s+/)[0]) : p.pid;
      resolveP({ proc: p, pid, port: Number(m[1]), dataDir });
    });
    p.once('exit', (c) => reject(new Error(`tandemd exited ${c}`)));
  });
}

/** Stop a broker (SIGTERM when a profile or a sync count must be written) and wait for the exit. */
async function stop(b) {
  if (b.proc.exitCode !== null) return;
  const gone = new Promise((r) => b.proc.once('exit', r));
  process.kill(b.pid, PROF || STRACE ? 'SIGTERM' : 'SIGKILL');
  await gone;
}

function tempDir(prefix) {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

function connect(port, props = {}) {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false, properties: props });
  conn.on('error', () => undefined);
  conn.on('disconnected', () => undefined);
  return new Promise((r) => conn.once('connection_open', () => r(conn)));
}

async function mgmt(port, op, body = {}, type = 'broker', name = 'broker') {
  const conn = await connect(port, { 'qpid.ha-admin': true });
  const recv = conn.open_receiver({ source: { dynamic: true } });
  const reply = await new Promise((r) => recv.once('receiver_open', () => r(recv.source.address)));
  const sender = conn.open_sender('$management');
  const res = new Promise((r) => recv.once('message', (ctx) => r(ctx.message)));
  sender.send({ reply_to: reply, application_properties: { operation: op, type, name }, body });
  const m = await res;
  conn.close();
  if (m.application_properties.statusCode >= 300) throw new Error(`${op}: ${m.application_properties.statusDescription}`);
  return m.body;
}

/** Send `count` messages at-least-once (window 1000); `bodyOf(i)` or the 1 KiB body; optional rate per second. */
async function send(port, address, count, { rate, bodyOf } = {}) {
  const conn = await connect(port);
  const sender = conn.open_sender({ target: { address } });
  const t0 = Date.now();
  let sent = 0;
  let acked = 0;
  await new Promise((done) => {
    const pump = () => {
      while (sent < count && sender.sendable() && sent - acked < 1000) {
        if (rate && sent >= ((Date.now() - t0) / 1000) * rate) return setTimeout(pump, 2);
        sender.send({ body: bodyOf ? bodyOf(sent) : BODY, durable: true });
        sent++;
      }
    };
    sender.on('sendable', pump);
    sender.on('accepted', () => {
      if (++acked === count) done();
      else pump();
    });
  });
  conn.close();
  return Date.now() - t0;
}

/** Take (accept) `count` messages from a queue. */
async function consume(port, address, count) {
  const conn = await connect(port);
  await new Promise((done) => {
    let got = 0;
    const r = conn.open_receiver({ source: { address }, credit_window: 500, autoaccept: false });
    r.on('message', (ctx) => {
      if (got >= count) return;
      ctx.delivery.accept();
      if (++got === count) {
        r.close();
        done();
      }
    });
  });
  conn.close();
}

async function drRow(port, queue) {
  return (await mgmt(port, 'DR-STATUS')).queues.find((r) => r.queue === queue);
}

async function waitConnected(port, queue) {
  for (let i = 0; i < 200; i++) {
    const row = await drRow(port, queue);
    if (row?.link === 'connected') return;
    await sleep(50);
  }
  throw new Error(`DR queue ${queue} never connected`);
}

/** Until the secondary's DR queue has applied `head` with `depth` messages; bounded. */
async function waitApplied(port, queue, head, depth, timeoutMs = 600_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const row = await drRow(port, queue);
    if (row && row.link === 'connected' && row['applied-position'] >= head && row.depth === depth) return row;
    if (Date.now() > deadline) throw new Error(`DR queue ${queue} did not reach ${head}/${depth}: ${JSON.stringify(row)}`);
    await sleep(20);
  }
}

const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

/** Scenarios 1 and 2: the secondary down while the primary works, then its catch-up. */
async function catchUp(primary, secondaryDir, queue, mode, consumeHalf) {
  let secondary = await start(secondaryDir, `secondary-${queue}`);
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', queue);
  await mgmt(secondary.port, 'DR-ADD', { queue, source: `127.0.0.1:${primary.port}`, mode });
  await waitConnected(secondary.port, queue);
  await stop(secondary);
  const sendMs = await send(primary.port, queue, N);
  if (consumeHalf) await consume(primary.port, queue, N / 2);
  const changes = consumeHalf ? N * 1.5 : N;
  log(`${queue}: ${changes} changes made on the primary in ${sendMs} ms of sending (${Math.round(N / (sendMs / 1000))} msg/s), secondary down`);
  const head = Number((await mgmt(primary.port, 'READ')).lsn);
  const primaryCpu0 = cpuSeconds(primary.pid);
  const c0 = Date.now();
  secondary = await start(secondaryDir, `secondary-${queue}-catchup`);
  const started = Date.now();
  const cpu0 = cpuSeconds(secondary.pid);
  await waitApplied(secondary.port, queue, head, consumeHalf ? N / 2 : N);
  const ms = Date.now() - started;
  const cpu = cpuSeconds(secondary.pid) - cpu0;
  const primaryCpu = cpuSeconds(primary.pid) - primaryCpu0;
  const r = {
    mode,
    changes,
    msInclProcessStart: Date.now() - c0,
    ms,
    changesPerSecond: Math.round(changes / (ms / 1000)),
    secondaryCpuSeconds: round2(cpu),
    primaryCpuSeconds: round2(primaryCpu),
    changesPerSecondaryCpuSecond: Math.round(changes / cpu),
    loadavg: load(),
  };
  log(`${queue}: caught up ${changes} changes in ${ms} ms after listening: ${r.changesPerSecond} changes/s; CPU secondary ${r.secondaryCpuSeconds} s, primary ${r.primaryCpuSeconds} s`);
  return { result: r, secondary };
}

/** Scenario 3: a new DR queue copies a large source queue whose bodies are mostly paged out. */
async function snapshot() {
  const primary = await start(tempDir('dr-bench-sp-'), 'snapshot-primary', ['--max-memory', '16MiB']);
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', 'snap');
  const sendMs = await send(primary.port, 'snap', S);
  log(`snap: ${S} x 1 KiB on the primary in ${sendMs} ms`);
  const st = await mgmt(primary.port, 'READ');
  const secondary = await start(tempDir('dr-bench-ss-'), 'snapshot-secondary');
  const before = memory(primary.pid);
  const cpuP = cpuSeconds(primary.pid);
  const cpuS = cpuSeconds(secondary.pid);
  let maxRss = before.rssMiB;
  const t0 = Date.now();
  await mgmt(secondary.port, 'DR-ADD', { queue: 'snap', source: `127.0.0.1:${primary.port}`, mode: SNAPSHOT_MODE });
  const head = Number(st.lsn);
  const deadline = Date.now() + 600_000;
  for (;;) {
    maxRss = Math.max(maxRss, memory(primary.pid).rssMiB);
    const row = await drRow(secondary.port, 'snap');
    if (row && row.link === 'connected' && row['applied-position'] >= head && row.depth === S) break;
    if (Date.now() > deadline) throw new Error(`snapshot did not finish: ${JSON.stringify(row)}`);
    await sleep(50);
  }
  const ms = Date.now() - t0;
  const r = {
    messages: S,
    primaryPagedMessages: st['paged-messages'],
    ms,
    messagesPerSecond: Math.round(S / (ms / 1000)),
    primaryCpuSeconds: round2(cpuSeconds(primary.pid) - cpuP),
    secondaryCpuSeconds: round2(cpuSeconds(secondary.pid) - cpuS),
    primaryRssMiB: { before: before.rssMiB, maxDuring: maxRss },
    loadavg: load(),
  };
  log(`snap: copied ${S} messages (${st['paged-messages']} paged out at the source) in ${ms} ms: ${r.messagesPerSecond} msg/s; primary RSS ${before.rssMiB} -> max ${maxRss} MiB`);
  await stop(secondary);
  await stop(primary);
  return r;
}

/** Scenario 4: lag at half the primary's rate. */
async function lag(primary, secondary) {
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', 'blast');
  const blastN = Math.max(20_000, Math.round(N / 2));
  const blastMs = await send(primary.port, 'blast', blastN);
  const primaryRate = blastN / (blastMs / 1000);
  const rate = Math.round(primaryRate / 2);
  await mgmt(secondary.port, 'DR-ADD', { queue: 'lag', source: `127.0.0.1:${primary.port}`, mode: 'enqueue-only' });
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', 'lag');
  await waitConnected(secondary.port, 'lag');
  const lags = [];
  const bconn = await connect(secondary.port, { 'qpid.ha-admin': true });
  const browser = bconn.open_receiver({ source: { address: 'lag', distribution_mode: 'copy' }, credit_window: 500, autoaccept: false });
  browser.on('message', (ctx) => {
    lags.push(Date.now() - Number(ctx.message.body.slice(0, 13)));
    ctx.delivery.update(true);
  });
  const total = rate * DURATION;
  const pad = 'x'.repeat(1024 - 14);
  const cpuP = cpuSeconds(primary.pid);
  const cpuS = cpuSeconds(secondary.pid);
  await send(primary.port, 'lag', total, { rate, bodyOf: () => `${Date.now()} ${pad}` });
  for (let i = 0; i < 200 && lags.length < total; i++) await sleep(50);
  bconn.close();
  lags.sort((a, b) => a - b);
  return {
    primaryMsgPerSec: Math.round(primaryRate),
    offeredMsgPerSec: rate,
    seconds: DURATION,
    seen: lags.length,
    lagMs: { p50: pct(lags, 50), p90: pct(lags, 90), p99: pct(lags, 99), max: lags.at(-1) },
    primaryCores: round2((cpuSeconds(primary.pid) - cpuP) / DURATION),
    secondaryCores: round2((cpuSeconds(secondary.pid) - cpuS) / DURATION),
    loadavg: load(),
  };
}

/** `tandem ARGS` (the CLI of the build measured); exit code, output and wall time. */
function cli(args, timeoutMs = 60_000) {
  const t0 = Date.now();
  return new Promise((resolveP) => {
    execFile(process.execPath, [tandemCli, ...args], { timeout: timeoutMs }, (err, stdout, stderr) => {
      resolveP({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, ms: Date.now() - t0, out: `${stdout}${stderr}`.trim() });
    });
  });
}

/** Scenario 5: DR switchovers under a publisher at half the source's own rate. */
async function switchover() {
  const dir = tempDir('dr-bench-sw-');
  const a = await start(join(dir, 'a'), 'switch-a');
  const b = await start(join(dir, 'b'), 'switch-b');
  await mgmt(a.port, 'CREATE', { durable: true }, 'queue', 'blast');
  const blastN = Math.max(20_000, Math.round(N / 5));
  const blastMs = await send(a.port, 'blast', blastN);
  const standalone = blastN / (blastMs / 1000);
  const rate = Math.round(standalone / 2);
  await mgmt(a.port, 'CREATE', { durable: true }, 'queue', 'moving');
  await mgmt(b.port, 'DR-ADD', { queue: 'moving', source: `127.0.0.1:${a.port}`, mode: 'enqueue-and-dequeue' });
  await waitConnected(b.port, 'moving');
  const seconds = 4 + SWITCHES * 6;
  const logFile = join(dir, 'publisher.log');
  const pub = spawn(PY, [join(root, 'test', 'dr', 'py', 'switch_publisher.py'), `127.0.0.1:${a.port},127.0.0.1:${b.port}`, 'moving', String(Math.round(rate * seconds)), String(rate), logFile, '200'], { stdio: ['ignore', 'pipe', 'inherit'] });
  procs.add(pub);
  let pubOut = '';
  pub.stdout.on('data', (d) => (pubOut += d));
  const pubExit = new Promise((r) => pub.once('exit', r));
  const t0 = Date.now();
  await sleep(3000);
  const moves = [];
  let [from, to] = [a, b];
  for (let k = 1; k <= SWITCHES; k++) {
    const tStart = Date.now();
    const r = await cli(['dr', 'switchover', 'moving', '-b', `127.0.0.1:${to.port}`, '--timeout', '20', '--json']);
    moves.push({ k, to: to === a ? 'a' : 'b', tStart, tEnd: Date.now(), commandMs: r.ms, code: r.code, out: r.code === 0 ? undefined : r.out.slice(0, 300) });
    log(`switchover ${k} to ${to === a ? 'a' : 'b'}: exit ${r.code} in ${r.ms} ms`);
    if (r.code === 0) [from, to] = [to, from];
    await sleep(5000);
  }
  await Promise.race([pubExit, sleep((seconds + 60) * 1000)]);
  pub.kill('SIGKILL');
  const accepts = readFileSync(logFile, 'utf8').split('\n').filter((l) => l.startsWith('A ')).map((l) => Number(l.split(' ')[2]) * 1000).sort((x, y) => x - y);
  // Per move: the longest gap between two accepts from just before the command until the next move.
  for (let i = 0; i < moves.length; i++) {
    const m = moves[i];
    const from = m.tStart - 1000;
    const until = i + 1 < moves.length ? moves[i + 1].tStart - 1000 : accepts.at(-1) ?? m.tEnd;
    let gap = 0;
    let prev;
    for (const t of accepts) {
      if (t < from) continue;
      if (t > until) break;
      if (prev !== undefined) gap = Math.max(gap, t - prev);
      prev = t;
    }
    m.unavailableMs = Math.round(gap);
    m.firstAcceptAfterCommandMs = Math.round((accepts.find((t) => t > m.tEnd) ?? NaN) - m.tEnd);
    delete m.tStart;
    delete m.tEnd;
  }
  const wall = (accepts.at(-1) - accepts[0]) / 1000;
  let published;
  try {
    published = JSON.parse(pubOut.trim().split('\n').pop());
  } catch {
    published = { error: pubOut.slice(0, 300) };
  }
  await stop(a);
  await stop(b);
  return {
    standaloneMsgPerSec: Math.round(standalone),
    offeredMsgPerSec: rate,
    achievedMsgPerSec: Math.round(accepts.length / wall),
    seconds: Math.round((Date.now() - t0) / 1000),
    accepted: published.accepted,
    refusals: published.refusals?.length,
    moves,
    maxUnavailableMs: Math.max(...moves.map((m) => m.unavailableMs)),
    loadavg: load(),
  };
}

/** Until `port`'s DR row for `queue` is connected, at `lsn` or beyond, holding `depth`; resolves with it. */
async function waitCopy(port, queue, lsn, depth, timeoutMs = 900_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const row = await drRow(port, queue).catch(() => undefined);
    if (row && row.link === 'connected' && row['applied-position'] >= lsn && row.depth === depth) return row;
    if (Date.now() > deadline) throw new Error(`${queue} on ${port} did not reach ${lsn}/${depth}: ${JSON.stringify(row)}`);
    await sleep(20);
  }
}

/** Scenario 6: reattach of the old source after a disaster, against a full copy of the same queue. */
async function reattach() {
  const M = REATTACH_QUEUE;
  const K = REATTACH_CHANGES;
  const dir = tempDir('dr-bench-ra-');
  let a = await start(join(dir, 'a'), 'reattach-a');
  const b = await start(join(dir, 'b'), 'reattach-b', ['--dr-retain-changes', String(Math.max(200_000, 4 * K))]);
  await mgmt(a.port, 'CREATE', { durable: true }, 'queue', 'big');
  await mgmt(b.port, 'DR-ADD', { queue: 'big', source: `127.0.0.1:${a.port}`, mode: 'enqueue-and-dequeue' });
  await waitConnected(b.port, 'big');
  const fillMs = await send(a.port, 'big', M);
  await waitCopy(b.port, 'big', Number((await mgmt(a.port, 'READ')).lsn), M);
  log(`reattach: ${M} messages on the source (${Math.round(M / (fillMs / 1000))} msg/s), copied`);
  await stop(a); // SIGKILL: the disaster
  for (let i = 0; i < 300 && (await drRow(b.port, 'big'))?.link === 'connected'; i++) await sleep(50);
  await mgmt(b.port, 'DR-ACTIVATE', { queues: 'big' });
  await send(b.port, 'big', K / 2);
  await consume(b.port, 'big', K / 2);
  const bLsn = Number((await mgmt(b.port, 'READ')).lsn);
  a = await start(join(dir, 'a'), 'reattach-a-again');
  // The activated site tells the old one within about 2 s; demote it here so as not to wait.
  await mgmt(a.port, 'DR-DEMOTE', { queues: 'big', peer: `127.0.0.1:${b.port}` });
  const cpuA = cpuSeconds(a.pid);
  const cpuB = cpuSeconds(b.pid);
  const t0 = Date.now();
  const reply = await mgmt(a.port, 'DR-REATTACH', { queues: 'big', source: `127.0.0.1:${b.port}` });
  const row = await waitCopy(a.port, 'big', bLsn, M);
  const reattachMs = Date.now() - t0;
  const reattachCpu = { old: round2(cpuSeconds(a.pid) - cpuA), new: round2(cpuSeconds(b.pid) - cpuB) };
  log(`reattach: caught up in ${reattachMs} ms: ${row['received-changes']} changes and ${row['received-copies']} copied messages crossed`);
  // The peer: the same queue copied whole from the new site to an empty broker.
  const c = await start(join(dir, 'c'), 'full-copy');
  const cpuC = cpuSeconds(c.pid);
  const cpuB2 = cpuSeconds(b.pid);
  const t1 = Date.now();
  await mgmt(c.port, 'DR-ADD', { queue: 'big', source: `127.0.0.1:${b.port}`, mode: 'enqueue-and-dequeue' });
  const full = await waitCopy(c.port, 'big', bLsn, M);
  const fullMs = Date.now() - t1;
  const fullCpu = { copy: round2(cpuSeconds(c.pid) - cpuC), new: round2(cpuSeconds(b.pid) - cpuB2) };
  log(`full copy: ${fullMs} ms: ${full['received-changes']} changes and ${full['received-copies']} copied messages crossed`);
  await stop(c);
  await stop(a);
  await stop(b);
  return {
    queueMessages: M,
    changesSinceDivergence: K,
    quarantined: reply.quarantined?.big ?? 0,
    reattach: { ms: reattachMs, changesSent: row['received-changes'], messagesCopied: row['received-copies'], cpuSeconds: reattachCpu },
    fullCopy: { ms: fullMs, changesSent: full['received-changes'], messagesCopied: full['received-copies'], cpuSeconds: fullCpu },
    reattachOverFullCopy: round2(reattachMs / fullMs),
    loadavg: load(),
  };
}

async function main() {
  const result = { root, startedAt: new Date().toISOString(), messageBytes: 1024, scenarios: [...SCENARIOS], loadavgBefore: load() };
  if (SCENARIOS.has('catchup') || SCENARIOS.has('mirror') || SCENARIOS.has('lag')) {
    // A window that holds every change of the catch-up runs (the defaults hold 200,000 or 128 MiB).
    const primary = await start(tempDir('dr-bench-p-'), 'primary', ['--dr-retain-changes', String(4 * N), '--dr-retain-size', '1GiB']);
    if (SCENARIOS.has('catchup')) {
      const one = await catchUp(primary, tempDir('dr-bench-s1-'), 'only', 'enqueue-only', false);
      result.catchUp = one.result;
      await stop(one.secondary);
    }
    if (SCENARIOS.has('mirror') || SCENARIOS.has('lag')) {
      const two = await catchUp(primary, tempDir('dr-bench-s2-'), 'mirror', 'enqueue-and-dequeue', true);
      result.mirrorCatchUp = two.result;
      if (SCENARIOS.has('lag')) {
        result.steady = await lag(primary, two.secondary);
        log(`lag: ${JSON.stringify(result.steady.lagMs)} at ${result.steady.offeredMsgPerSec} msg/s`);
      }
      await stop(two.secondary);
    }
    await stop(primary);
  }
  if (S > 0 && SCENARIOS.has('snapshot')) result.snapshot = await snapshot();
  if (SCENARIOS.has('switchover')) {
    result.switchover = await switchover();
    log(`switchover: longest publisher unavailability ${result.switchover.maxUnavailableMs} ms at ${result.switchover.achievedMsgPerSec} msg/s (offered ${result.switchover.offeredMsgPerSec}, half of the source's ${result.switchover.standaloneMsgPerSec})`);
  }
  if (SCENARIOS.has('reattach')) result.reattach = await reattach();
  result.loadavgAfter = load();
  const text = `${JSON.stringify(result, null, 2)}\n`;
  const resultsDir = join(import.meta.dirname, 'results');
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, `dr-${result.startedAt.replace(/[:.]/g, '-')}.json`), text);
  process.stdout.write(text);
  process.exit(0);
}

main().catch((err) => {
  log(err.stack ?? String(err));
  process.exit(1);
});

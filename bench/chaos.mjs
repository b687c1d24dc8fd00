#!/usr/bin/env node
// Chaos benchmark (issue 21), not a test. Three tandemd brokers as an HA cluster on
// 127.0.0.1, python-proton publishers and consumers (bench/py: durable, at-least-once,
// every broker address, reconnect), and round after round of faults, this script being
// the cluster manager:
//   primary-kill             kill -9 the primary, `tandem ha promote --cluster-manager` on
//                            the most advanced ready backup, restart the old one as backup
//   backup-kill              kill -9 a backup, restart it 0.5-2 s later
//   backup-stop              SIGSTOP a backup for 2-4 s
//   primary-stop             SIGSTOP the primary for 2-4 s (nothing is promoted)
//   double-kill              kill -9 the primary and a backup at once, promote the other
//                            backup, restart both
//   primary-kill+backup-stop SIGSTOP a backup, kill -9 the primary, promote the other
//                            backup, SIGCONT the stopped one 2-3 s after it stopped
// Each round waits for a whole cluster (primary active, 2 ready backups) and a little
// steady traffic first. At the end: the history check message by message (lost,
// phantom, duplicates with their cause, reordering per sender: chaos-history.mjs), per
// round the publishers' longest silence after service is back (after the new primary is
// active, for a promotion), and the throughput of the whole chaos phase against the same
// load without faults, run before and after it on the same cluster.
//
//   node bench/chaos.mjs > chaos-report.md     (progress on stderr)
//
// Env: BENCH_CHAOS_ROUNDS (50), BENCH_CHAOS_SEED (1), BENCH_CHAOS_FAULTS (all kinds,
// comma-separated), BENCH_CHAOS_BASELINE_SECONDS (30, each side), BENCH_CHAOS_STEADY_SECONDS
// (8: steady traffic before each fault, ±50%), BENCH_CHAOS_CLIENT_BACKOFF (restarting; proton:
// proton's own Backoff, whose delays never restart), BENCH_CHAOS_SENDERS / _RECEIVERS (2 / 2),
// BENCH_CHAOS_INFLIGHT (50 unanswered per sender), BENCH_CHAOS_BODY (1024 bytes),
// BENCH_CHAOS_HEARTBEAT / _BACKUP_TIMEOUT (brokers' ha-heartbeat-interval and
// ha-backup-timeout: 1s / 3s), BENCH_CHAOS_CLIENT_HEARTBEAT (2 s), BENCH_CHAOS_DEDUP_WINDOW
// (0: off; N: each queue gets a dedup window of N keys and every publisher sets a
// message-id, the same on each attempt, so exactly-once publishing is what is checked:
// not one copy from a resend), BENCH_TANDEM, BENCH_TMP, BENCH_KEEP, BENCH_TIME_LIMIT
// (3600 s). Raw: bench/results/chaos-<time>.json.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as lib from './lib.mjs';
import { clusterArgs, haStatus, management, promote, readyBackups, waitFor, wallMs } from './cluster.mjs';
import { acceptRate, checkHistory, parseHead, parseReceiverLog, parseSenderLog, readLog, silences } from './chaos-history.mjs';

const { benchDir, killPid, log, onCleanup, repoRoot, sleep } = lib;
const num = lib.envNumber;
const KINDS = ['primary-kill', 'backup-kill', 'backup-stop', 'primary-stop', 'double-kill', 'primary-kill+backup-stop'];
const S = {
  rounds: num('BENCH_CHAOS_ROUNDS', 50, 1, 2000),
  seed: num('BENCH_CHAOS_SEED', 1, 0, 2 ** 31),
  kinds: (process.env.BENCH_CHAOS_FAULTS ?? KINDS.join(',')).split(',').map((k) => k.trim()).filter(Boolean),
  baselineSeconds: num('BENCH_CHAOS_BASELINE_SECONDS', 30, 3, 600),
  steadySeconds: num('BENCH_CHAOS_STEADY_SECONDS', 8, 0.2, 120),
  senders: num('BENCH_CHAOS_SENDERS', 2, 1, 8),
  receivers: num('BENCH_CHAOS_RECEIVERS', 2, 1, 8),
  inflight: num('BENCH_CHAOS_INFLIGHT', 50, 1, 2000),
  body: num('BENCH_CHAOS_BODY', 1024, 16, 1 << 20),
  heartbeat: process.env.BENCH_CHAOS_HEARTBEAT ?? '1s',
  backupTimeout: process.env.BENCH_CHAOS_BACKUP_TIMEOUT ?? '3s',
  clientHeartbeat: num('BENCH_CHAOS_CLIENT_HEARTBEAT', 2, 0, 60),
  dedupWindow: num('BENCH_CHAOS_DEDUP_WINDOW', 0, 0, 10_000_000),
  // restarting: bench/py's clients restart their reconnect delays after each open; proton: proton 0.37's Backoff, which never does.
  clientBackoff: process.env.BENCH_CHAOS_CLIENT_BACKOFF ?? 'restarting',
  timeLimit: num('BENCH_TIME_LIMIT', 3600, 60, 6 * 3600),
  silenceTargetMs: 1000,
  throughputTarget: 0.8,
};
if (!['restarting', 'proton'].includes(S.clientBackoff)) throw new Error('BENCH_CHAOS_CLIENT_BACKOFF must be restarting or proton');
for (const k of S.kinds) if (!KINDS.includes(k)) throw new Error(`BENCH_CHAOS_FAULTS: unknown fault ${k} (known: ${KINDS.join(', ')})`);
const PY = '/usr/bin/python3'; // Debian's, which has the proton package
const QUEUE = 'chaos';

// The suite's seeded PRNG (mulberry32), so a seed replays the same schedule.
const { prng } = await import(new URL('../dist/util/prng.js', import.meta.url).href);
const random = prng(S.seed);
const between = (a, b) => a + random() * (b - a);
const pick = (xs) => xs[Math.floor(random() * xs.length)];

/** Every kind once per cycle, in a shuffled order, so a short run still mixes them. */
function schedule(n) {
  const out = [];
  while (out.length < n) {
    const cycle = [...S.kinds];
    for (let i = cycle.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [cycle[i], cycle[j]] = [cycle[j], cycle[i]];
    }
    out.push(...cycle);
  }
  return out.slice(0, n);
}

// ---- the cluster ------------------------------------------------------------------------
class Cluster {
  constructor(entry, base, ports) {
    this.entry = entry;
    this.ports = ports;
    this.dataDirs = ports.map((_, i) => join(base, `broker-${i}`));
    for (const d of this.dataDirs) mkdirSync(d, { recursive: true });
    this.brokers = ports.map(() => undefined);
    this.stopped = new Set(); // SIGSTOPped indices
    this.primary = 0;
    this.restarts = 0;
  }

  async start(i) {
    this.brokers[i] = await lib.startTandem({
      entry: this.entry,
      dataDir: this.dataDirs[i],
      port: this.ports[i],
      listenTimeoutMs: 60_000,
      args: clusterArgs(this.ports, ['--ha-heartbeat-interval', S.heartbeat, '--ha-backup-timeout', S.backupTimeout]),
    });
    return this.brokers[i];
  }

  async restart(i) {
    this.restarts++;
    return this.start(i);
  }

  async kill9(i) {
    const b = this.brokers[i];
    this.brokers[i] = undefined;
    this.stopped.delete(i);
    await b?.kill9();
  }

  sigstop(i) {
    killPid(this.brokers[i].pid, 'SIGSTOP');
    this.stopped.add(i);
  }

  sigcont(i) {
    if (this.brokers[i]) killPid(this.brokers[i].pid, 'SIGCONT');
    this.stopped.delete(i);
  }

  backups() {
    return this.ports.map((_, i) => i).filter((i) => i !== this.primary);
  }

  status(i, timeoutMs = 2000) {
    return this.brokers[i] && !this.stopped.has(i) ? haStatus(this.ports[i], timeoutMs) : Promise.resolve(undefined);
  }

  /** The ready backup (of `among`) with the highest applied LSN, polled until one is ready. */
  async mostAdvancedReady(among, timeoutMs = 15_000) {
    return waitFor('a ready backup to promote', async () => {
      const sts = await Promise.all(among.map(async (i) => ({ i, st: await this.status(i) })));
      const ready = sts.filter((x) => x.st?.state === 'ready').sort((a, b) => b.st.lsn - a.st.lsn || a.i - b.i);
      return ready.length ? { i: ready[0].i, lsns: Object.fromEntries(sts.map((x) => [x.i, x.st ? `${x.st.state}@${x.st.lsn}` : 'no answer'])) } : undefined;
    }, timeoutMs, 50);
  }

  /** Promote broker i as a cluster manager would (retried while it is still refused); when it went active and when it settled again. */
  async promote(i, tandemJs) {
    const tries = [];
    const end = Date.now() + 30_000;
    for (;;) {
      const pr = await promote(tandemJs, this.ports[i]);
      tries.push({ code: pr.code, ms: Math.round(pr.ms), out: pr.code === 0 ? undefined : pr.out.slice(0, 300) });
      if (pr.code === 0) break;
      if (Date.now() > end) throw new Error(`promote of broker ${i} refused for 30 s: ${pr.out}`);
      await sleep(200);
    }
    this.primary = i;
    const activeAt = await waitFor(`broker ${i} active`, async () => ((await this.status(i))?.state === 'active' ? wallMs() : 0), 60_000, 20);
    // Active, and settling: not holding settlements for want of a ready backup (ha-min-ready-backups).
    const servingAt = await waitFor(`broker ${i} settling`, async () => ((await this.status(i))?.settlement?.held === false ? wallMs() : 0), 60_000, 20);
    return { tries, activeAt, servingAt };
  }

  /**
   * After a round that went wrong (a promotion refused for too long, a broker that would
   * not start): every broker running again, and if no broker is primary, the most
   * advanced one promoted, so the next round starts from a whole cluster.
   */
  async repair(tandemJs) {
    for (const i of [...this.stopped]) this.sigcont(i);
    for (let i = 0; i < this.ports.length; i++) if (!this.brokers[i]) await this.restart(i);
    const sts = await Promise.all(this.ports.map(async (_, i) => ({ i, st: await this.status(i, 5000) })));
    const primary = sts.find((x) => x.st?.state === 'active' || x.st?.state === 'recovering');
    if (primary) {
      this.primary = primary.i;
      return;
    }
    const best = sts.filter((x) => x.st).sort((a, b) => b.st.epoch - a.st.epoch || b.st.lsn - a.st.lsn)[0];
    if (best) await this.promote(best.i, tandemJs);
  }

  /** Primary active, every other broker a ready backup of it. */
  async whole(timeoutMs = 120_000) {
    return waitFor('a whole cluster (primary active, 2 ready backups)', async () => {
      const st = await this.status(this.primary);
      return st?.state === 'active' && readyBackups(st) === this.ports.length - 1;
    }, timeoutMs, 100);
  }
}

// ---- clients ----------------------------------------------------------------------------
/** A python client in bench/py; `progress` is its latest stdout line, `exit` its last. */
function client(script, args, name) {
  const p = spawn(PY, [join(benchDir, 'py', script), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FAILOVER_CLIENT_BACKOFF: S.clientBackoff } });
  const unregister = onCleanup(() => killPid(p.pid));
  const c = { name, pid: p.pid, progress: {}, final: undefined, stderr: '' };
  let buf = '';
  p.stdout.on('data', (d) => {
    buf += d;
    let k;
    while ((k = buf.indexOf('\n')) >= 0) {
      try {
        const o = JSON.parse(buf.slice(0, k));
        if (o.done) c.final = o;
        else c.progress = o;
      } catch {
        // not ours
      }
      buf = buf.slice(k + 1);
    }
  });
  p.stderr.on('data', (d) => (c.stderr = (c.stderr + d).slice(-4000)));
  c.exited = new Promise((r) => p.once('exit', (code) => (unregister(), r(code))));
  c.kill = () => killPid(p.pid);
  return c;
}

/** Run one load phase on `queue`: clients up, `during()` (the faults, or a fixed wait), clients drained. */
async function phase(cluster, dir, queue, label, during) {
  mkdirSync(dir, { recursive: true });
  const urls = cluster.ports.map((p) => `127.0.0.1:${p}`).join(',');
  const dedup = S.dedupWindow > 0 ? { 'qpid.dedup-window': S.dedupWindow, 'qpid.dedup-ttl': '1h' } : {};
  const created = await management(cluster.ports[cluster.primary], 'CREATE', { type: 'queue', name: queue, body: { durable: true, ...dedup }, timeoutMs: 10_000 });
  if (!created || (created.status >= 300 && created.status !== 409)) throw new Error(`${label}: creating queue ${queue} failed: ${JSON.stringify(created)}`);
  const stopSenders = join(dir, 'stop-senders');
  const stopReceivers = join(dir, 'stop-receivers');
  const receivers = Array.from({ length: S.receivers }, (_, i) =>
    client('chaos_receive.py', [urls, queue, stopReceivers, join(dir, `r${i}.log`), '3', '100', String(S.clientHeartbeat)], `r${i}`));
  const senders = Array.from({ length: S.senders }, (_, i) =>
    client('chaos_send.py', [urls, queue, `s${i}`, stopSenders, join(dir, `s${i}.log`), '60', String(S.inflight), String(S.body), String(S.clientHeartbeat), S.dedupWindow > 0 ? 'ids' : 'no-ids'], `s${i}`));
  try {
    await waitFor(`${label}: every sender accepted`, async () => senders.every((s) => s.progress.accepted > 0), 60_000, 100);
    const t0 = wallMs();
    const extra = await during(senders);
    const t1 = wallMs();
    log(`${label}: stopping the senders (unanswered messages are still resent for up to 60 s)`);
    writeFileSync(stopSenders, '');
    await Promise.race([Promise.all(senders.map((s) => s.exited)), sleep(90_000)]);
    writeFileSync(stopReceivers, '');
    await Promise.race([Promise.all(receivers.map((r) => r.exited)), sleep(60_000)]);
    for (const c of [...senders, ...receivers]) if (!c.final) log(`${label}: client ${c.name} did not finish cleanly: ${c.stderr.slice(-500)}`);
    // What is still in the queue is not lost: read it (and take it) from the primary.
    await cluster.whole(60_000).catch((err) => log(`${label}: ${err.message}`));
    const read = await management(cluster.ports[cluster.primary], 'READ', { type: 'queue', name: queue, timeoutMs: 10_000 });
    const depth = read?.body?.depth ?? NaN;
    let leftover = [];
    if (depth > 0) {
      log(`${label}: ${depth} messages left in the queue; draining them`);
      const bodies = await lib.run(PY, [join(repoRoot, 'test', 'interop', 'py', 'drain.py'), `amqp://127.0.0.1:${cluster.ports[cluster.primary]}`, queue], { timeout: 300_000 });
      leftover = JSON.parse(bodies.split('\n').pop()).map(parseHead);
    }
    const sendersH = Object.fromEntries(senders.map((s, i) => [s.name, readLog(join(dir, `s${i}.log`), parseSenderLog)]));
    const receiversH = receivers.map((r, i) => readLog(join(dir, `r${i}.log`), parseReceiverLog));
    return {
      t0, t1, extra, sendersH, receiversH, leftover, depthAtEnd: depth,
      clients: [...senders, ...receivers].map((c) => ({ name: c.name, final: c.final && { ...c.final, unanswered: c.final.unanswered?.length } })),
    };
  } finally {
    for (const c of [...senders, ...receivers]) c.kill();
  }
}

/** Await a promise made with .catch((err) => err), throwing what it caught. */
async function rethrow(p) {
  const v = await p;
  if (v instanceof Error) throw v;
}

// ---- faults -----------------------------------------------------------------------------
// Each returns what it did and `refMs`, when the publishers should be served again.
async function fault(kind, c, tandemJs) {
  const p = c.primary;
  const r = { kind, primaryBefore: p };
  const t = wallMs();
  r.tFault = t;
  switch (kind) {
    case 'primary-kill': {
      await c.kill9(p);
      // A cluster manager restarts the failed broker while it promotes another.
      const restarting = c.restart(p).catch((err) => err);
      const best = await c.mostAdvancedReady(c.backups());
      r.candidates = best.lsns;
      const pr = await c.promote(best.i, tandemJs);
      Object.assign(r, { promoted: best.i, promoteTries: pr.tries, refMs: pr.activeAt, servingMs: pr.servingAt, ref: 'new primary active' });
      await rethrow(restarting);
      break;
    }
    case 'backup-kill': {
      const b = pick(c.backups());
      await c.kill9(b);
      await sleep(between(500, 2000));
      await c.restart(b);
      Object.assign(r, { broker: b, refMs: t, ref: 'the kill' });
      break;
    }
    case 'backup-stop': {
      const b = pick(c.backups());
      c.sigstop(b);
      const ms = between(2000, 4000);
      await sleep(ms);
      c.sigcont(b);
      Object.assign(r, { broker: b, stoppedMs: Math.round(ms), refMs: t, ref: 'the SIGSTOP' });
      break;
    }
    case 'primary-stop': {
      c.sigstop(p);
      const ms = between(2000, 4000);
      await sleep(ms);
      c.sigcont(p);
      Object.assign(r, { stoppedMs: Math.round(ms), refMs: wallMs(), ref: 'the SIGCONT' });
      break;
    }
    case 'double-kill': {
      const b = pick(c.backups());
      const s = c.backups().find((i) => i !== b);
      await Promise.all([c.kill9(p), c.kill9(b)]);
      const restarting = Promise.all([c.restart(b), c.restart(p)]).catch((err) => err);
      const best = await c.mostAdvancedReady([s]);
      r.candidates = best.lsns;
      const pr = await c.promote(s, tandemJs);
      Object.assign(r, { broker: b, promoted: s, promoteTries: pr.tries, refMs: pr.activeAt, servingMs: pr.servingAt, ref: 'new primary active' });
      await rethrow(restarting);
      break;
    }
    case 'primary-kill+backup-stop': {
      const b = pick(c.backups());
      const s = c.backups().find((i) => i !== b);
      c.sigstop(b);
      const stopFor = between(2000, 3000);
      await c.kill9(p);
      const restarting = c.restart(p).catch((err) => err);
      const best = await c.mostAdvancedReady([s]);
      r.candidates = best.lsns;
      const pr = await c.promote(s, tandemJs);
      Object.assign(r, { broker: b, promoted: s, promoteTries: pr.tries, refMs: pr.activeAt, servingMs: pr.servingAt, ref: 'new primary active' });
      const left = t + stopFor - wallMs();
      if (left > 0) await sleep(left);
      c.sigcont(b);
      r.stoppedMs = Math.round(wallMs() - t);
      await rethrow(restarting);
      break;
    }
    default:
      throw new Error(`unknown fault ${kind}`);
  }
  r.faultMs = Math.round(wallMs() - t);
  return r;
}

// ---- run --------------------------------------------------------------------------------
async function main() {
  const report = { startedAt: new Date().toISOString(), settings: S, machine: { ...lib.machineInfo(), uptimeBefore: await lib.run('uptime') } };
  log(`machine: ${report.machine.uptimeBefore}`);
  if (!existsSync(PY)) throw new Error(`${PY} is missing (test/setup.sh installs python3-qpid-proton)`);
  const build = await lib.buildTandem();
  const tandemJs = join(dirname(build.entry), 'tandem.js');
  report.versions = { node: process.version, tandem: build.label, proton: await lib.run(PY, ['-c', 'import proton; print(".".join(map(str, proton.VERSION)))']) };
  const base = lib.tempDir(lib.tmpBase(), 'tandem-chaos-bench-');
  const tStart = Date.now();
  const deadline = setTimeout(() => {
    log(`run exceeded BENCH_TIME_LIMIT=${S.timeLimit} s; stopping (everything started is killed)`);
    process.exit(3);
  }, S.timeLimit * 1000);
  onCleanup(() => clearTimeout(deadline));

  const ports = [await lib.freePort(), await lib.freePort(), await lib.freePort()];
  const c = new Cluster(build.entry, base, ports);
  for (let i = 0; i < 3; i++) await c.start(i);
  const first = await c.promote(0, tandemJs);
  if (!first) throw new Error('first promotion failed');
  await c.whole();
  log(`cluster on ${ports.join(',')}, pids ${c.brokers.map((b) => b.pid).join(',')}: primary 0, 2 ready backups`);

  const steadyWait = (seconds) => async () => {
    await sleep(seconds * 1000);
  };
  const summarize = (ph, label, faults = []) => {
    const history = checkHistory({ senders: ph.sendersH, receivers: ph.receiversH, leftover: ph.leftover, faults });
    const rate = acceptRate(ph.sendersH, ph.t0, ph.t1);
    log(`${label}: ${rate.accepted} accepted in ${rate.seconds.toFixed(1)} s = ${rate.perSecond} msgs/s; lost ${history.lost.count}, phantom ${history.phantom.count}, duplicates ${history.duplicates.total} (unexplained ${history.duplicates.other + history.duplicates.resendAfterRefusal}), inversions ${history.reordering.inversions} (unexplained ${history.reordering.unexplained})`);
    return { label, rate, history, leftInQueue: ph.leftover.length, clients: ph.clients };
  };

  // 1. the load without faults
  log(`baseline before: ${S.baselineSeconds} s without faults`);
  const before = await phase(c, join(base, 'baseline-before'), 'chaos-baseline-before', 'baseline before', steadyWait(S.baselineSeconds));
  report.baselineBefore = summarize(before, 'baseline before');

  // 2. the chaos rounds
  const kinds = schedule(S.rounds);
  const rounds = [];
  const chaos = await phase(c, join(base, 'chaos'), QUEUE, 'chaos', async (senders) => {
    const accepted = () => senders.reduce((n, s) => n + (s.progress.accepted ?? 0), 0);
    for (let k = 0; k < kinds.length; k++) {
      if ((Date.now() - tStart) / 1000 > S.timeLimit - 300) {
        log(`round ${k + 1}: stopping early, BENCH_TIME_LIMIT is near`);
        break;
      }
      const tWait = wallMs();
      await c.whole();
      const wholeAfterMs = Math.round(wallMs() - tWait);
      const a0 = accepted();
      await sleep(between(0.5, 1.5) * S.steadySeconds * 1000);
      await waitFor(`traffic before round ${k + 1}`, async () => accepted() > a0, 30_000, 50).catch((err) => log(err.message));
      let r;
      try {
        r = await fault(kinds[k], c, tandemJs);
      } catch (err) {
        // Recorded and repaired, so one refused step does not end the run; the report lists it.
        log(`round ${k + 1} ${kinds[k]} failed: ${err.message}; repairing the cluster`);
        r = { kind: kinds[k], primaryBefore: c.primary, tFault: wallMs(), error: err.message.slice(0, 500), ref: 'failed' };
        await c.repair(tandemJs);
        r.refMs = wallMs();
        r.faultMs = 0;
      }
      const tRecovered = await c.whole().then(() => wallMs(), (err) => (log(`round ${k + 1}: ${err.message}`), wallMs()));
      Object.assign(r, { round: k + 1, wholeBeforeMs: wholeAfterMs, tRecovered, recoveredMs: Math.round(tRecovered - r.tFault), primaryAfter: c.primary });
      rounds.push(r);
      if (k === kinds.length - 1) await sleep(S.steadySeconds * 1000); // so the last round's silence is seen too
      log(`round ${k + 1}/${kinds.length} ${r.kind}${r.broker !== undefined ? ` (backup ${r.broker})` : ''}: primary ${r.primaryBefore} -> ${r.primaryAfter}, fault ${r.faultMs} ms, whole again ${r.recoveredMs} ms after it`);
    }
    return undefined;
  });
  // The window of each fault: from the fault until the cluster was whole again.
  const faultWindows = rounds.map((r) => [r.tFault, r.tRecovered]);
  report.chaos = summarize(chaos, 'chaos', faultWindows);
  report.rounds = rounds.map((r, i) => {
    const endMs = i + 1 < rounds.length ? rounds[i + 1].tFault : chaos.t1;
    const sil = silences(chaos.sendersH, { refMs: r.refMs, fromMs: r.tFault, endMs });
    const firstAccept = silences(chaos.sendersH, { refMs: r.tFault, fromMs: r.tFault, endMs });
    return {
      ...r,
      refAfterFaultMs: Math.round(r.refMs - r.tFault),
      silence: sil,
      // For a promotion: also from when the new primary settled again (its hold for a ready backup over).
      silenceAfterServing: r.servingMs ? silences(chaos.sendersH, { refMs: r.servingMs, fromMs: r.tFault, endMs }) : undefined,
      activeToServingMs: r.servingMs ? Math.round(r.servingMs - r.refMs) : undefined,
      faultToFirstAcceptMs: firstAccept.longestAfterRefMs,
      promotion: r.ref === 'new primary active',
    };
  });

  // 3. the load without faults again (the machine may have changed meanwhile)
  log(`baseline after: ${S.baselineSeconds} s without faults`);
  const after = await phase(c, join(base, 'baseline-after'), 'chaos-baseline-after', 'baseline after', steadyWait(S.baselineSeconds));
  report.baselineAfter = summarize(after, 'baseline after');

  const baseRate = (report.baselineBefore.rate.perSecond + report.baselineAfter.rate.perSecond) / 2;
  const promos = report.rounds.filter((r) => r.promotion);
  report.verdict = {
    lost: report.chaos.history.lost.count + report.baselineBefore.history.lost.count + report.baselineAfter.history.lost.count,
    phantom: report.chaos.history.phantom.count + report.baselineBefore.history.phantom.count + report.baselineAfter.history.phantom.count,
    unexplainedDuplicates: report.chaos.history.duplicates.other + report.chaos.history.duplicates.resendAfterRefusal,
    // With a dedup window a resend must never make a second copy, in any phase.
    resendDuplicates: [report.baselineBefore, report.chaos, report.baselineAfter].reduce((n, p) => n + p.history.duplicates.resendAfterFailover, 0),
    unexplainedReordering: report.chaos.history.reordering.unexplained,
    longestSilenceAfterActiveMs: promos.length ? Math.max(...promos.map((r) => r.silence.longestAfterRefMs)) : null,
    longestSilenceAfterServingMs: promos.length ? Math.max(...promos.map((r) => r.silenceAfterServing?.longestAfterRefMs ?? 0)) : null,
    roundsOverSilenceTarget: promos.filter((r) => r.silence.longestAfterRefMs > S.silenceTargetMs).map((r) => r.round),
    throughputRatio: Math.round((report.chaos.rate.perSecond / baseRate) * 1000) / 1000,
  };
  report.machine.uptimeAfter = await lib.run('uptime');
  report.seconds = Math.round((Date.now() - tStart) / 1000);
  clearTimeout(deadline);
  for (let i = 0; i < 3; i++) if (c.brokers[i]) await c.kill9(i);

  const resultsDir = join(benchDir, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `chaos-${report.startedAt.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 1)}\n`);
  const md = markdown(report);
  writeFileSync(file.replace(/\.json$/, '.md'), md);
  process.stdout.write(md);
  log(`raw results: ${file}`);
  process.exit(0);
}

function markdown(r) {
  const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '–');
  const v = r.verdict;
  const ok = (b) => (b ? 'met' : '**missed**');
  const L = [];
  L.push(`### Chaos run ${r.startedAt} (${r.seconds} s, ${r.rounds.length} rounds)`, '');
  L.push(`- tandem ${r.versions.tandem}, node ${r.versions.node}, python-proton ${r.versions.proton}; ${r.machine.cores} × ${r.machine.model}`);
  L.push(`- **shared machine?** load before \`${r.machine.uptimeBefore}\`; after \`${r.machine.uptimeAfter}\``);
  L.push(`- 3 tandemd on 127.0.0.1, ha-replicate=all, ha-heartbeat-interval ${r.settings.heartbeat}, ha-backup-timeout ${r.settings.backupTimeout}; ${r.settings.senders} senders (durable ${r.settings.body} B, at-least-once, ${r.settings.inflight} unanswered at most) and ${r.settings.receivers} receivers (prefetch 100), python-proton over all three addresses, reconnect delays 0, 0.1 ×1.5 up to 1 s (${r.settings.clientBackoff === 'proton' ? "proton's Backoff, never restarted" : 'restarted after each open'}), connect timeout 2 s, heartbeat ${r.settings.clientHeartbeat} s; seed ${r.settings.seed}`, '');
  L.push('| target | result | |', '|---|---|---|');
  L.push(`| 0 lost | ${v.lost} | ${ok(v.lost === 0)} |`);
  L.push(`| 0 phantom | ${v.phantom} | ${ok(v.phantom === 0)} |`);
  L.push(`| no publisher silent > ${r.settings.silenceTargetMs} ms after the new primary is active | longest ${fmt(v.longestSilenceAfterActiveMs)} ms${v.roundsOverSilenceTarget.length ? `; over in rounds ${v.roundsOverSilenceTarget.join(', ')}` : ''} | ${ok(v.roundsOverSilenceTarget.length === 0)} |`);
  L.push(`| (the same, from when the new primary settled again: no hold for want of a ready backup) | longest ${fmt(v.longestSilenceAfterServingMs)} ms | |`);
  L.push(`| throughput across the chaos ≥ ${r.settings.throughputTarget * 100}% of the same load without faults | ${fmt(v.throughputRatio * 100, 1)}% | ${ok(v.throughputRatio >= r.settings.throughputTarget)} |`);
  if (r.settings.dedupWindow > 0) L.push(`| exactly-once publishing (dedup window of ${fmt(r.settings.dedupWindow)} keys): no copy from a resend | ${v.resendDuplicates} | ${ok(v.resendDuplicates === 0)} |`);
  L.push(`| duplicates only from ${r.settings.dedupWindow > 0 ? '' : 'resends or '}redeliveries after a failover | ${v.unexplainedDuplicates} otherwise | ${ok(v.unexplainedDuplicates === 0)} |`);
  L.push(`| per-sender order kept but for resends, redeliveries and faults | ${v.unexplainedReordering} otherwise | ${ok(v.unexplainedReordering === 0)} |`, '');
  L.push('| phase | seconds | accepted | msgs/s | sent | deliveries | left in queue | lost | phantom | duplicates: resend after failover / redelivery after failover / other | inversions: after resend / after redelivery / near a fault / unexplained |');
  L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|');
  for (const p of [r.baselineBefore, r.chaos, r.baselineAfter]) {
    const h = p.history;
    const d = h.duplicates;
    const o = h.reordering;
    L.push(`| ${p.label} | ${fmt(p.rate.seconds, 1)} | ${fmt(p.rate.accepted)} | ${fmt(p.rate.perSecond)} | ${fmt(h.sent)} | ${fmt(h.deliveries)} | ${h.leftInQueue} | ${h.lost.count} | ${h.phantom.count} | ${d.resendAfterFailover} / ${d.redeliveryAfterFailover} / ${d.other + d.resendAfterRefusal} | ${o.afterResend} / ${o.afterRedelivery} / ${o.nearFault} / ${o.unexplained} |`);
  }
  const samples = [['lost', r.chaos.history.lost.sample], ['phantom', r.chaos.history.phantom.sample], ['unexplained duplicates', r.chaos.history.duplicates.sampleOther], ['unexplained inversions', r.chaos.history.reordering.sample]].filter(([, s]) => s.length);
  if (samples.length) L.push('', ...samples.map(([k, s]) => `- ${k} (first ${s.length}): ${s.join(', ')}`));
  L.push('', 'Per kind of fault: rounds; publishers\' longest silence after service was back (median / max ms); fault → first accept of every publisher (median / max ms); fault → cluster whole again (median ms):', '');
  L.push('| fault | rounds | silence after reference | fault → every publisher accepted | → whole again | reference |', '|---|---:|---|---|---:|---|');
  const med = (xs) => {
    const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
    return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
  };
  for (const kind of [...new Set(r.rounds.map((x) => x.kind))]) {
    const xs = r.rounds.filter((x) => x.kind === kind);
    const sil = xs.map((x) => x.silence.longestAfterRefMs);
    const fa = xs.map((x) => x.faultToFirstAcceptMs);
    L.push(`| ${kind} | ${xs.length} | ${fmt(med(sil))} / ${fmt(Math.max(...sil))} | ${fmt(med(fa))} / ${fmt(Math.max(...fa))} | ${fmt(med(xs.map((x) => x.recoveredMs)))} | ${xs[0].ref} |`);
  }
  L.push('', '<details><summary>every round</summary>', '', '| round | fault | primary | promote tries (exit:ms) | fault → reference ms | longest silence after it ms | active → settling ms | longest silence after settling ms | longest gap between accepts ms | whole again ms |', '|---:|---|---|---|---:|---:|---:|---:|---:|---:|');
  for (const x of r.rounds) {
    const tries = x.promoteTries ? x.promoteTries.map((t) => `${t.code}:${t.ms}`).join(' ') : '';
    L.push(`| ${x.round} | ${x.kind}${x.broker !== undefined ? ` (${x.broker})` : ''} | ${x.primaryBefore} → ${x.primaryAfter} | ${tries} | ${fmt(x.refAfterFaultMs)} | ${fmt(x.silence.longestAfterRefMs)}${x.silence.anyNone ? ' (none)' : ''} | ${fmt(x.activeToServingMs)} | ${fmt(x.silenceAfterServing?.longestAfterRefMs)} | ${fmt(x.silence.longestGapMs)} | ${fmt(x.recoveredMs)} |`);
  }
  L.push('', '</details>', '');
  const failed = r.rounds.filter((x) => x.error);
  if (failed.length) L.push(`**${failed.length} round(s) failed and were repaired**: ${failed.map((x) => `${x.round} ${x.kind}: ${x.error}`).join('; ')}`, '');
  return `${L.join('\n')}\n`;
}

main().catch((err) => {
  log(err.stack ?? String(err));
  process.exit(1);
});

#!/usr/bin/env node
// HA benchmark (issue 4), one run, everything on 127.0.0.1:
//  1. throughput of the standalone loads (non-durable 1/1, durable 1/1, durable 4/4)
//     against a standalone tandemd, against the primary of a 3-broker cluster
//     (ha-replicate=all, 2 ready backups), and (BENCH_ARTEMIS=no to skip) against an
//     ActiveMQ Artemis primary/backup replication pair; ratios cluster / standalone
//     and cluster / Artemis pair;
//  2. failover: a durable sender (all three addresses, reconnect) runs against the
//     cluster; the primary is killed with SIGKILL and `tandem ha promote
//     --cluster-manager` is run at once on a ready backup; time from the kill to the
//     first message accepted by the new primary, promote's own run time, and the
//     CLI's bare node start-up, and what the new primary lost or duplicated of what was
//     accepted; repeated BENCH_HA_FAILOVERS times; then the same against fresh Artemis
//     pairs (its backup activates by itself), BENCH_HA_ARTEMIS_FAILOVERS times;
//  3. catch-up: a primary holding N durable 1 KiB messages (up to BENCH_HA_CATCHUP_N,
//     or what 2 minutes of loading gives), a new backup started on an empty data dir,
//     time until it is `ready`.
//
//   node bench/ha.mjs > ha-report.md      (progress on stderr; ~6-9 minutes)
//
// Same tandem build as run.mjs (committed HEAD into bench/.build; BENCH_TANDEM=worktree
// for dist/). Every process is started by this script, registered and killed by PID
// on exit, failure or signal. Raw numbers: bench/results/ha-<time>.json.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';

const require = createRequire(import.meta.url);
const wallMs = () => performance.timeOrigin + performance.now(); // comparable across processes
const BODY = Buffer.alloc(1024, 'x');

// ---- child modes: a failover sender and a filler (plain rhea, no lib.mjs) ---------------
if (process.argv[2] === '--failover-sender') await failoverSender(JSON.parse(process.argv[3]));
else if (process.argv[2] === '--fill') await filler(JSON.parse(process.argv[3]));
else await Promise.all([import('./lib.mjs'), import('./cluster.mjs')]).then(([lib, cluster]) => main(lib, cluster));

/**
 * Durable 1 KiB messages to a durable queue, at `rate`/s, window `window`, reconnecting
 * over all `ports` (10-50 ms back-off), SASL PLAIN if `user` is given. Each message
 * carries a sequence number (application property `n`). Prints JSON lines: every
 * connection opened, and the first accept of each connection generation (wall-clock
 * ms). On "stop" on stdin (or after `seconds`) it stops sending, waits up to 5 s for
 * what is in flight, and prints `done` with the accepted sequence numbers as ranges, so
 * the driver can count what the broker lost or duplicated. Deliveries in flight on a
 * connection that died are in doubt: neither accepted nor sent again.
 */
async function failoverSender({ ports, queue, rate, window, seconds, user, password }) {
  const rhea = require('rhea');
  let next = 0;
  let gen = 0;
  const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  const conn = rhea.create_container({ id: `ha-failover-${process.pid}` }).connect({
    connection_details: () => ({ host: '127.0.0.1', port: ports[next++ % ports.length] }),
    reconnect: true, initial_reconnect_delay: 10, max_reconnect_delay: 50, reconnect_limit: 100_000,
    idle_time_out: 0, tcp_no_delay: true,
    ...(user ? { username: user, password } : {}),
  });
  conn.on('error', () => {});
  conn.on('connection_error', () => {});
  conn.on('disconnected', () => out({ type: 'disconnected', t: wallMs() }));
  conn.on('connection_open', (ctx) => {
    gen++;
    out({ type: 'open', gen, t: wallMs(), port: ctx.connection.socket?.remotePort });
  });
  const sender = conn.open_sender({ target: { address: queue, durable: 2 }, autosettle: true });
  sender.on('sender_error', () => {});
  const firstOf = new Set();
  const acceptedSeqs = [];
  let sent = 0;
  let inflight = 0;
  let accepted = 0;
  let stopping = false;
  const t0 = Date.now();
  const pump = () => {
    if (stopping) return;
    const allowed = Math.floor(((Date.now() - t0) / 1000) * rate) + 1;
    while (inflight < window && sender.sendable() && sent < allowed) {
      const d = sender.send({ durable: true, application_properties: { n: sent }, body: BODY });
      d.ha_gen = gen;
      d.ha_port = conn.socket?.remotePort;
      d.ha_seq = sent;
      sent++;
      inflight++;
    }
  };
  sender.on('accepted', (ctx) => {
    inflight--;
    accepted++;
    acceptedSeqs.push(ctx.delivery.ha_seq);
    const g = ctx.delivery.ha_gen;
    if (!firstOf.has(g)) {
      firstOf.add(g);
      out({ type: 'accepted', gen: g, t: wallMs(), port: ctx.delivery.ha_port });
    }
  });
  for (const ev of ['rejected', 'released', 'modified']) sender.on(ev, () => inflight--);
  // Deliveries in flight on a dead connection never settle: forget them on reconnect.
  conn.on('disconnected', () => (inflight = 0));
  sender.on('sendable', pump);
  const pumping = setInterval(pump, 2);
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    clearInterval(pumping);
    for (const end = Date.now() + 5000; inflight > 0 && Date.now() < end; ) await new Promise((r) => setTimeout(r, 20));
    out({ type: 'done', sent, accepted, unsettled: inflight, acceptedRanges: toRanges(acceptedSeqs) });
    process.exit(0);
  };
  process.stdin.on('data', (d) => /stop/.test(String(d)) && stop());
  setTimeout(stop, seconds * 1000);
}

/** Sorted, disjoint [first, last] ranges of a list of integers. */
function toRanges(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const ranges = [];
  for (const x of s) {
    const last = ranges.at(-1);
    if (last && x <= last[1] + 1) last[1] = Math.max(last[1], x);
    else ranges.push([x, x]);
  }
  return ranges;
}

/** Send durable 1 KiB messages at-least-once until `count` are accepted or `seconds` pass. */
async function filler({ port, queue, count, seconds }) {
  const rhea = require('rhea');
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false, idle_time_out: 0, tcp_no_delay: true });
  conn.on('error', () => {});
  const sender = conn.open_sender({ target: { address: queue, durable: 2 }, autosettle: true });
  let sent = 0;
  let accepted = 0;
  let stop = false;
  const t0 = Date.now();
  const finish = () => {
    process.stdout.write(`${JSON.stringify({ sent, accepted, seconds: (Date.now() - t0) / 1000 })}\n`);
    process.exit(0);
  };
  const pump = () => {
    while (!stop && sent < count && sent - accepted < 1000 && sender.sendable()) {
      sender.send({ durable: true, body: BODY });
      sent++;
    }
  };
  sender.on('sendable', pump);
  sender.on('accepted', () => {
    accepted++;
    if (accepted === count || (stop && accepted === sent)) finish();
    else pump();
  });
  conn.on('disconnected', finish);
  setTimeout(() => {
    stop = true;
    setTimeout(finish, 15_000); // whatever is left unsettled by then is not counted
    if (accepted === sent) finish();
  }, seconds * 1000);
}

// ---- driver -----------------------------------------------------------------------------------
async function main(lib, cluster_) {
  const { benchDir, buildTandem, freePort, launcherNodeOptions, log, machineInfo, onCleanup, procCpu, run, runLoad, sleep, tempDir, tmpBase, waitQuiet } = lib;
  const num = lib.envNumber;
  const DURATION = num('BENCH_DURATION', 8, 1, 20);
  const ROUNDS = num('BENCH_ROUNDS', 2, 1, 3);
  const FAILOVERS = num('BENCH_HA_FAILOVERS', 4, 1, 5);
  const CATCHUP_N = num('BENCH_HA_CATCHUP_N', 1_000_000, 1000, 1_000_000);
  const FILL_SECONDS = num('BENCH_HA_FILL_SECONDS', 120, 5, 150);
  // An ActiveMQ Artemis primary/backup replication pair (bench/artemis.mjs) beside the
  // tandem cluster: the same loads, and the same kill -9 failover measurement.
  const WITH_ARTEMIS = process.env.BENCH_ARTEMIS !== 'no';
  const ARTEMIS_FAILOVERS = num('BENCH_HA_ARTEMIS_FAILOVERS', 3, 1, 5);
  const TIME_LIMIT = num('BENCH_TIME_LIMIT', WITH_ARTEMIS ? 1200 : 600, 60, 1800);
  const WITH_4X4 = process.env.BENCH_HA_4X4 !== 'no';
  // Seconds of non-durable load on each target before the measured rounds, not measured.
  // Every clustered broker keeps a window of recent changes (HA 512 MiB, DR 128 MiB by
  // default) off the heap; until it is full each change is copied into memory the
  // process has never touched, and on this VM a first touch costs ~1.8 µs per 4 KiB
  // page: 5-7 µs per message on the primary and each backup. 40 s fills both windows at
  // ~20,000 msgs/s, so the rounds measure a broker that has run a while (0 = measure the
  // fresh brokers, first-touch included).
  const WARMUP = num('BENCH_HA_WARMUP', 40, 0, 120);
  const PROFILE = process.env.BENCH_HA_PROFILE === '1'; // --cpu-prof on the cluster primary and the catch-up brokers

  const report = { startedAt: new Date().toISOString(), settings: { DURATION, ROUNDS, WARMUP, FAILOVERS, CATCHUP_N, FILL_SECONDS, WITH_4X4, WITH_ARTEMIS, ARTEMIS_FAILOVERS }, throughput: [], failovers: [], artemisFailovers: [], cliStartMs: [] };
  report.machine = { ...machineInfo(), uptimeBefore: await run('uptime'), kernel: await run('uname', ['-r']) };
  log(`machine: ${report.machine.uptimeBefore}`);
  const build = await buildTandem();
  const tandemdJs = build.entry;
  const tandemJs = join(dirname(tandemdJs), 'tandem.js');
  report.versions = { node: process.version, tandem: build.label };
  const artemis = WITH_ARTEMIS ? await import('./artemis.mjs') : undefined;
  const artemisHome = WITH_ARTEMIS ? await artemis.ensureArtemis() : undefined;
  const base = tempDir(tmpBase(), 'tandem-ha-bench-');
  const t0 = Date.now();
  const deadline = setTimeout(() => {
    log(`run exceeded BENCH_TIME_LIMIT=${TIME_LIMIT} s; stopping (everything started is killed)`);
    process.exit(3);
  }, TIME_LIMIT * 1000);
  onCleanup(() => clearTimeout(deadline));
  const elapsed = () => (Date.now() - t0) / 1000;

  // ---- brokers --------------------------------------------------------------------------------
  const kill = (pid, sig = 'SIGKILL') => {
    try {
      process.kill(pid, sig);
    } catch {
      // gone
    }
  };
  let dirN = 0;
  /** tandemd on a fixed port; resolves once it prints "listening on". */
  async function startBroker({ port, dataDir, args = [], name, profile = false }) {
    dataDir ??= join(base, `data-${name}-${dirN++}`);
    const nodeArgs = profile ? ['--cpu-prof', '--cpu-prof-dir', join(base, 'profiles'), '--cpu-prof-name', `${name}-${dirN++}.cpuprofile`] : [];
    const t = Date.now();
    const proc = spawn(process.execPath, [...launcherNodeOptions(tandemdJs), ...nodeArgs, tandemdJs, '--port', String(port), '--host', '127.0.0.1', '--data-dir', dataDir, '--log-level', 'warn', ...args], {
      cwd: base, env: { ...process.env, NOTIFY_SOCKET: '' }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    const unregister = onCleanup(() => kill(proc.pid));
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d).length > 1e5 && (err = err.slice(-5e4)));
    const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
    await new Promise((resolveP, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name} did not listen within 30 s: ${err.slice(-2000)}`)), 30_000);
      proc.stdout.on('data', () => /listening on/.test(out) && (clearTimeout(timer), resolveP()));
      exited.then(({ code, signal }) => (clearTimeout(timer), reject(new Error(`${name} exited (${code ?? signal}) before listening: ${err.slice(-2000)}`))));
    });
    return {
      name, port, dataDir, pid: proc.pid, loadArgs: [], startMs: Date.now() - t, exited, stderr: () => err,
      kill9() {
        kill(proc.pid);
        return exited.then(() => unregister());
      },
      async stop() {
        kill(proc.pid, 'SIGTERM');
        const done = await Promise.race([exited, sleep(15_000).then(() => undefined)]);
        if (!done) kill(proc.pid);
        await exited;
        unregister();
      },
    };
  }

  // In-process HA-STATUS and the cluster manager's promote (bench/cluster.mjs).
  const { haStatus, waitFor, readyBackups, clusterArgs } = cluster_;
  const promote = (port, extra = []) => cluster_.promote(tandemJs, port, extra);
  const rhea = require('rhea');

  /**
   * The failover sender in a child process. `until` waits for one of its events; `stop`
   * asks it to finish and resolves with its `done` line (accepted sequence numbers).
   */
  function startFailoverSender(opts, what) {
    const child = spawn(process.execPath, [new URL(import.meta.url).pathname, '--failover-sender', JSON.stringify(opts)], { stdio: ['pipe', 'pipe', 'inherit'] });
    const unregister = onCleanup(() => kill(child.pid));
    const events = [];
    const waiters = new Set();
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) {
        events.push(JSON.parse(buf.slice(0, i)));
        for (const w of waiters) w();
      }
    });
    const exited = new Promise((r) => child.once('exit', r));
    return {
      events,
      lastGen: () => Math.max(0, ...events.filter((e) => e.type === 'open').map((e) => e.gen)),
      until: (pred, ms, waitingFor) =>
        new Promise((resolveP, reject) => {
          const check = () => {
            const e = events.find(pred);
            if (!e) return;
            clearTimeout(timer);
            waiters.delete(check);
            resolveP(e);
          };
          const timer = setTimeout(() => {
            waiters.delete(check);
            reject(new Error(`${what}: timed out waiting for ${waitingFor}`));
          }, ms);
          waiters.add(check);
          check();
        }),
      async stop() {
        child.stdin.end('stop\n');
        await Promise.race([exited, sleep(15_000)]);
        return events.find((e) => e.type === 'done');
      },
      kill() {
        kill(child.pid);
        unregister();
      },
    };
  }

  /** Receive and accept everything on `queue` until 3 s pass without a message (at most `maxMs`): arrivals per sequence number. */
  function drainSeqs(port, queue, { user, password } = {}, maxMs = 90_000) {
    return new Promise((resolveP) => {
      const counts = new Map();
      const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false, idle_time_out: 0, ...(user ? { username: user, password } : {}) });
      let idle;
      let finished = false;
      const finish = (why) => {
        if (finished) return;
        finished = true;
        clearTimeout(idle);
        clearTimeout(cap);
        conn.close();
        resolveP({ counts, why });
      };
      const cap = setTimeout(() => finish('time limit'), maxMs);
      const bump = () => {
        clearTimeout(idle);
        idle = setTimeout(() => finish('idle'), 3000);
      };
      conn.on('error', () => finish('error'));
      conn.on('connection_error', () => finish('connection error'));
      conn.on('disconnected', () => finish('disconnected'));
      const r = conn.open_receiver({ source: { address: queue, durable: 2 }, credit_window: 500, autoaccept: true });
      r.on('receiver_open', bump);
      r.on('receiver_error', () => finish('receiver error'));
      r.on('message', (ctx) => {
        const n = ctx.message.application_properties?.n;
        counts.set(n, (counts.get(n) ?? 0) + 1);
        bump();
      });
    });
  }

  /** Accepted but never received (lost), and received more than once (duplicates). */
  function lossAndDuplicates(done, counts) {
    if (!done) return { accepted: NaN, lost: NaN, duplicates: NaN, received: NaN };
    let accepted = 0;
    let lost = 0;
    for (const [a, b] of done.acceptedRanges) {
      for (let n = a; n <= b; n++) {
        accepted++;
        if (!counts.has(n)) lost++;
      }
    }
    let received = 0;
    let duplicates = 0;
    for (const c of counts.values()) {
      received += c;
      duplicates += c - 1;
    }
    return { accepted, lost, duplicates, received, inDoubt: done.sent - accepted };
  }

  async function startCluster(n, { profilePrimary = false } = {}) {
    const ports = [];
    for (let i = 0; i < n; i++) ports.push(await freePort());
    const brokers = [];
    for (let i = 0; i < n; i++) brokers.push(await startBroker({ port: ports[i], args: clusterArgs(ports), name: `ha${i}`, profile: profilePrimary && i === 0 }));
    const pr = await promote(ports[0]);
    if (pr.code !== 0) throw new Error(`promote failed: ${pr.out}`);
    await waitFor(`${n - 1} ready backups`, async () => readyBackups(await haStatus(ports[0])) === n - 1, 60_000, 100);
    return { ports, brokers, primary: 0 };
  }

  const stopAll = async (list) => {
    for (const b of list) if (b) await b.stop();
  };

  try {
    // ---- 0. CLI start-up alone ------------------------------------------------------------
    for (let i = 0; i < 3; i++) {
      const t = wallMs();
      await run(process.execPath, [tandemJs, '--version']).catch(() => run(process.execPath, [tandemJs, '--help']));
      report.cliStartMs.push(Math.round(wallMs() - t));
    }
    log(`CLI start-up (tandem --version): ${report.cliStartMs.join(', ')} ms`);

    // ---- 1. throughput: standalone vs cluster ---------------------------------------------
    const loads = [
      { key: 'nd-1x1', title: 'non-durable 1 KiB, 1/1', args: ['--duration', DURATION] },
      { key: 'd-1x1', title: 'durable 1 KiB, 1/1', args: ['--durable', '--terminus-durable', '--duration', DURATION] },
      ...(WITH_4X4 ? [{ key: 'd-4x4', title: 'durable 1 KiB, 4/4, one queue', args: ['--durable', '--terminus-durable', '--duration', DURATION, '--senders', 4] }] : []),
    ];
    const standalone = await startBroker({ port: await freePort(), name: 'standalone' });
    log(`standalone tandemd pid ${standalone.pid} port ${standalone.port}`);
    let cluster = await startCluster(3, { profilePrimary: PROFILE });
    log(`cluster ports ${cluster.ports.join(',')} pids ${cluster.brokers.map((b) => b.pid).join(',')}; primary ${cluster.ports[0]}, 2 backups ready`);
    const targets = [
      { name: 'standalone', broker: () => standalone, others: () => [] },
      { name: 'cluster', broker: () => cluster.brokers[cluster.primary], others: () => cluster.brokers.filter((_, i) => i !== cluster.primary) },
    ];
    let pair;
    if (WITH_ARTEMIS) {
      pair = await artemis.startArtemisPair(artemisHome, tempDir(base, 'artemis-pair-'));
      report.versions.artemis = pair.primary.version;
      report.artemisJournal = pair.primary.inst.journal;
      log(`Artemis ${pair.primary.version} pair: primary pid ${pair.primary.pid} AMQP ${pair.ports[0]}, backup pid ${pair.backup.pid} (in sync); journal ${JSON.stringify(pair.primary.inst.journal)}`);
      targets.push({ name: 'artemis-pair', broker: () => pair.primary, others: () => [pair.backup] });
    }
    if (WARMUP > 0) {
      for (const tg of targets) {
        log(`warm-up: ${WARMUP} s of non-durable load on ${tg.name}, not measured (fills the change windows)`);
        await runLoad({ ...tg.broker(), name: tg.name }, ['--duration', String(WARMUP)], { timeoutMs: (WARMUP + 90) * 1000 });
      }
    }
    for (let round = 1; round <= ROUNDS; round++) {
      const order = round % 2 ? targets : [...targets].reverse();
      for (const load of loads) {
        for (const tg of order) {
          const q = await waitQuiet({ cores: 0.3, maxSeconds: 3 });
          const b = tg.broker();
          const others = tg.others();
          const c0 = others.map((o) => procCpu(o.pid));
          const w0 = Date.now();
          log(`round ${round} ${load.key} on ${tg.name}`);
          const r = await runLoad({ ...b, name: tg.name }, load.args.map(String), { timeoutMs: (DURATION + 90) * 1000 });
          const backupCores = others.map((o, i) => Math.round(((procCpu(o.pid) - c0[i]) / ((Date.now() - w0) / 1000)) * 100) / 100);
          report.throughput.push({ ...r, load: load.key, target: tg.name, round, backupCores, busyBefore: q.busyCores });
          log(`  ${r.throughput} msgs/s p50 ${r.latencyMs.p50} p99 ${r.latencyMs.p99} ms lost ${r.lost} dup ${r.duplicates}; cores: broker ${r.brokerCores} backups ${backupCores.join('/')} client ${r.clientCores} others ${r.otherCores}`);
        }
      }
    }
    await standalone.stop();
    if (pair) {
      await pair.backup.kill9();
      await pair.primary.kill9();
    }
    if (PROFILE) {
      // Stop the profiled primary with SIGTERM (V8 writes the profile), then start over.
      await stopAll(cluster.brokers);
      cluster = await startCluster(3);
    }

    // ---- 2. failover --------------------------------------------------------------------
    for (let k = 1; k <= FAILOVERS && elapsed() < TIME_LIMIT - 240 - (WITH_ARTEMIS ? 150 : 0); k++) {
      const { ports, brokers } = cluster;
      const p = cluster.primary;
      const queue = `ha-failover-${k}`;
      const sender = startFailoverSender({ ports, queue, rate: 1000, window: 200, seconds: 40 }, `failover ${k}`);
      try {
        await sender.until((e) => e.type === 'accepted' && e.port === ports[p], 15_000, 'steady sending to the primary');
        await sleep(1500);
        const np = brokers.findIndex((b, i) => b && i !== p); // a ready backup (checked below)
        const stBefore = await haStatus(ports[np]);
        if (stBefore?.state !== 'ready') throw new Error(`failover ${k}: broker ${np} is ${stBefore?.state}, not ready`);
        const lastGen = sender.lastGen();
        const tKill = wallMs();
        kill(brokers[p].pid);
        const pr = await promote(ports[np]);
        const first = await sender.until((e) => e.type === 'accepted' && e.gen > lastGen && e.port === ports[np], 20_000, 'the first accept from the new primary');
        const st = await waitFor('new primary active', async () => ((await haStatus(ports[np]))?.state === 'active' ? wallMs() : 0), 20_000, 20);
        await sleep(1000); // some sending on the new primary, then count what it holds
        const done = await sender.stop();
        const { counts, why } = await drainSeqs(ports[np], queue);
        const row = {
          k,
          killedPort: ports[p],
          newPrimaryPort: ports[np],
          failoverMs: Math.round(first.t - tKill),
          promoteMs: Math.round(pr.ms),
          promoteExit: pr.code,
          promoteOut: pr.out.slice(0, 200),
          promoteEndToFirstAcceptMs: Math.round(first.t - pr.endT),
          killToActiveMs: Math.round(st - tKill), // upper bound: polled every ~20 ms
          reconnects: sender.events.filter((e) => e.type === 'open' && e.gen > lastGen).length,
          ...lossAndDuplicates(done, counts),
          drainEnded: why,
        };
        report.failovers.push(row);
        log(`failover ${k}: kill -> first accept ${row.failoverMs} ms (promote ran ${row.promoteMs} ms, exit ${pr.code}; first accept ${row.promoteEndToFirstAcceptMs} ms after promote returned; active within ${row.killToActiveMs} ms); accepted ${row.accepted}, lost ${row.lost}, duplicated ${row.duplicates}`);
        await brokers[p].kill9();
        // The killed broker rejoins as a backup on its data dir and port.
        cluster.primary = np;
        try {
          brokers[p] = await startBroker({ port: ports[p], dataDir: brokers[p].dataDir, args: clusterArgs(ports), name: `ha${p}` });
        } catch (err) {
          log(`restart of the old primary on its data dir failed (${err.message.slice(0, 200)}); starting it on an empty one`);
          brokers[p] = await startBroker({ port: ports[p], args: clusterArgs(ports), name: `ha${p}` });
        }
      } finally {
        sender.kill();
      }
      await waitFor('2 ready backups after failover', async () => readyBackups(await haStatus(ports[cluster.primary])) === 2, 60_000, 100);
    }
    await stopAll(cluster.brokers);

    // ---- 2b. Artemis failover: a fresh pair each time (its backup activates by itself) --
    for (let k = 1; WITH_ARTEMIS && k <= ARTEMIS_FAILOVERS && elapsed() < TIME_LIMIT - 200; k++) {
      const ap = await artemis.startArtemisPair(artemisHome, tempDir(base, 'artemis-failover-'));
      const auth = { user: 'bench', password: ap.password };
      const [pp, bp] = ap.ports;
      const queue = `ha-failover-artemis-${k}`;
      const sender = startFailoverSender({ ports: ap.ports, queue, rate: 1000, window: 200, seconds: 90, ...auth }, `Artemis failover ${k}`);
      try {
        await sender.until((e) => e.type === 'accepted' && e.port === pp, 30_000, 'steady sending to the Artemis primary');
        await sleep(1500);
        const lastGen = sender.lastGen();
        const tKill = wallMs();
        kill(ap.primary.pid);
        const first = await sender.until((e) => e.type === 'accepted' && e.gen > lastGen && e.port === bp, 60_000, 'the first accept from the Artemis backup');
        await sleep(1000);
        const done = await sender.stop();
        const { counts, why } = await drainSeqs(bp, queue, auth);
        const row = {
          k,
          failoverMs: Math.round(first.t - tKill),
          reconnects: sender.events.filter((e) => e.type === 'open' && e.gen > lastGen).length,
          ...lossAndDuplicates(done, counts),
          drainEnded: why,
        };
        report.artemisFailovers.push(row);
        log(`Artemis failover ${k}: kill -> first accept by the backup ${row.failoverMs} ms; accepted ${row.accepted}, lost ${row.lost}, duplicated ${row.duplicates}`);
      } finally {
        sender.kill();
        await ap.primary.kill9();
        await ap.backup.kill9();
      }
    }

    // ---- 3. catch-up --------------------------------------------------------------------
    {
      const ports = [await freePort(), await freePort()];
      // Alone until the new backup starts: it settles without a ready backup, and its
      // first promotion, with the other broker of ha-brokers-url not running, is the
      // operator's explicit choice (an empty broker has nothing to lose).
      const a = await startBroker({ port: ports[0], args: [...clusterArgs(ports), '--ha-min-ready-backups', '0'], name: 'catchup-primary', profile: PROFILE });
      const pr = await promote(ports[0], ['--accept-data-loss']);
      if (pr.code !== 0) throw new Error(`promote failed: ${pr.out}`);
      await waitFor('catch-up primary active', async () => (await haStatus(ports[0]))?.state === 'active', 20_000);
      const fillSeconds = Math.max(5, Math.min(FILL_SECONDS, TIME_LIMIT - elapsed() - 150));
      log(`filling the primary: up to ${CATCHUP_N} durable 1 KiB messages or ${Math.round(fillSeconds)} s, 4 senders`);
      const fills = await Promise.all(
        Array.from({ length: 4 }, (_, i) =>
          new Promise((resolveP) => {
            const c = spawn(process.execPath, [new URL(import.meta.url).pathname, '--fill', JSON.stringify({ port: ports[0], queue: 'ha-catchup', count: Math.ceil(CATCHUP_N / 4), seconds: fillSeconds })], { stdio: ['ignore', 'pipe', 'inherit'] });
            const unregister = onCleanup(() => kill(c.pid));
            let out = '';
            c.stdout.on('data', (d) => (out += d));
            const timer = setTimeout(() => kill(c.pid), (fillSeconds + 30) * 1000);
            c.once('exit', () => {
              clearTimeout(timer);
              unregister();
              try {
                resolveP(JSON.parse(out.trim().split('\n').pop()));
              } catch {
                resolveP({ sent: 0, accepted: 0, seconds: 0, error: out.slice(0, 200) });
              }
            });
          })),
      );
      const n = fills.reduce((s, f) => s + f.accepted, 0);
      const fillS = Math.max(...fills.map((f) => f.seconds));
      const stA = await haStatus(ports[0]);
      const aRss = (() => {
        try {
          return Math.round(Number(/VmRSS:\s+(\d+)/.exec(require('node:fs').readFileSync(`/proc/${a.pid}/status`, 'utf8'))[1]) / 1024);
        } catch {
          return NaN;
        }
      })();
      log(`primary holds ${n} accepted messages (filled at ${Math.round(n / fillS)}/s in ${fillS.toFixed(1)} s); lsn ${stA?.lsn}; rss ${aRss} MiB`);
      await sleep(1000);
      const cpuA0 = procCpu(a.pid);
      const tStart = wallMs();
      const b = await startBroker({ port: ports[1], args: clusterArgs(ports), name: 'catchup-backup', profile: PROFILE });
      const tListen = wallMs();
      const states = [];
      let tReady = 0;
      const end = Date.now() + Math.max(30_000, (TIME_LIMIT - elapsed() - 50) * 1000);
      let last;
      while (Date.now() < end) {
        const st = await haStatus(ports[1], 5000);
        if (st) last = { state: st.state, lsn: st.lsn, lastError: st['last-error'], atMs: Math.round(wallMs() - tStart) };
        if (st && states.at(-1)?.state !== st.state) states.push({ state: st.state, atMs: Math.round(wallMs() - tStart) });
        if (st?.state === 'ready') {
          tReady = wallMs();
          break;
        }
        await sleep(50);
      }
      const cpuB = procCpu(b.pid);
      const cpuA = procCpu(a.pid) - cpuA0;
      report.catchUp = {
        messages: n,
        target: CATCHUP_N,
        fillSeconds: Math.round(fillS * 10) / 10,
        fillRate: Math.round(n / fillS),
        primaryLsn: stA?.lsn,
        primaryRssMiB: aRss,
        readyMs: tReady ? Math.round(tReady - tStart) : null,
        readyAfterListenMs: tReady ? Math.round(tReady - tListen) : null,
        backupStartMs: Math.round(tListen - tStart),
        msgsPerSecond: tReady ? Math.round(n / ((tReady - tStart) / 1000)) : null,
        msgsPerSecondAfterListen: tReady ? Math.round(n / ((tReady - tListen) / 1000)) : null,
        states,
        lastBackupStatus: last,
        gaveUpAfterMs: tReady ? null : Math.round(wallMs() - tStart),
        cpuSeconds: { primary: Math.round(cpuA * 10) / 10, backup: Math.round(cpuB * 10) / 10 },
      };
      log(`catch-up: ${JSON.stringify(report.catchUp)}`);
      // Profiles need SIGTERM; otherwise SIGKILL (a primary busy building snapshots can take long to stop).
      if (PROFILE) {
        await b.stop();
        await a.stop();
      } else {
        await b.kill9();
        await a.kill9();
      }
    }
  } finally {
    clearTimeout(deadline);
  }
  report.machine.uptimeAfter = await run('uptime');
  report.finishedAt = new Date().toISOString();
  report.seconds = Math.round(elapsed());
  const resultsDir = join(benchDir, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `ha-${report.startedAt.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  const md = markdown(report);
  writeFileSync(file.replace(/\.json$/, '.md'), md);
  process.stdout.write(md);
  log(`raw results: ${file}${PROFILE ? `; profiles in ${join(base, 'profiles')} (set BENCH_KEEP=1 to keep them)` : ''}`);
  process.exit(0);
}

function markdown(r) {
  const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '–');
  const med = (xs) => {
    const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
    return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
  };
  const L = [];
  L.push(`### HA run ${r.startedAt} (${r.seconds} s)`, '');
  L.push(`- tandem ${r.versions.tandem}, node ${r.versions.node}; machine ${r.machine.cores} × ${r.machine.model}, kernel ${r.machine.kernel}`);
  L.push(`- **shared machine**: load before \`${r.machine.uptimeBefore}\`; after \`${r.machine.uptimeAfter}\``);
  L.push(`- cluster: 3 tandemd on 127.0.0.1, ha-replicate=all, default heartbeat/backup-timeout; ${r.settings.ROUNDS} round(s) × ${r.settings.DURATION} s per load; throughput = best round; warm-up ${r.settings.WARMUP ?? 0} s of non-durable load on each target first, not measured`);
  L.push('- µs CPU per message: every process of the target (broker or primary + backups, and the load generator), CPU-seconds from /proc over messages received, median of the rounds. On 2 cores with all of them busy, standalone ÷ cluster of it is the throughput ratio the CPU allows', '');
  L.push('| load | standalone msgs/s | cluster msgs/s | cluster / standalone | p50 / p99 ms (standalone; cluster) | lost / dup (cluster) | primary cores (standalone; cluster) | backups\' cores | msgs per broker CPU-s (standalone; cluster primary) | others\' cores (standalone; cluster) | µs CPU per message, all processes (standalone; cluster) |');
  L.push('|---|---:|---:|---:|---|---|---|---|---|---|---|');
  const usPerMsg = (t) => ((t.brokerCores + t.backupCores.reduce((a, x) => a + x, 0) + t.clientCores) / t.throughput) * 1e6;
  for (const key of [...new Set(r.throughput.map((t) => t.load))]) {
    const rows = (tg) => r.throughput.filter((t) => t.load === key && t.target === tg);
    const best = (xs) => Math.max(...xs.map((x) => x.throughput));
    const s = rows('standalone');
    const c = rows('cluster');
    const p = (xs, q) => med(xs.map((x) => x.latencyMs[q]));
    L.push(`| ${key} | ${fmt(best(s))} | ${fmt(best(c))} | **${fmt((100 * best(c)) / best(s))}%** | ${fmt(p(s, 'p50'), 1)} / ${fmt(p(s, 'p99'), 1)}; ${fmt(p(c, 'p50'), 1)} / ${fmt(p(c, 'p99'), 1)} | ${c.reduce((a, x) => a + x.lost, 0)} / ${c.reduce((a, x) => a + x.duplicates, 0)} | ${fmt(med(s.map((x) => x.brokerCores)), 2)}; ${fmt(med(c.map((x) => x.brokerCores)), 2)} | ${c.map((x) => x.backupCores.join(' + ')).join('; ')} | ${fmt(med(s.map((x) => x.msgsPerBrokerCpuSecond)))}; ${fmt(med(c.map((x) => x.msgsPerBrokerCpuSecond)))} | ${fmt(med(s.map((x) => x.otherCores)), 2)}; ${fmt(med(c.map((x) => x.otherCores)), 2)} | ${fmt(med(s.map(usPerMsg)), 1)}; ${fmt(med(c.map(usPerMsg)), 1)} |`);
  }
  const pairRows = r.throughput.filter((t) => t.target === 'artemis-pair');
  if (pairRows.length) {
    const j = r.artemisJournal ?? {};
    L.push('', `tandem's 3-broker cluster against an **ActiveMQ Artemis ${r.versions.artemis} primary/backup replication pair** (ha-policy replication, both on 127.0.0.1; journal ${j.type}, journal-datasync true, journal-buffer-timeout ${fmt(j.bufferTimeoutNs)} ns auto-tuned), same loads in the same rounds:`, '');
    L.push('| load | tandem cluster msgs/s | Artemis pair msgs/s | tandem cluster / Artemis pair | p50 / p99 ms (tandem; Artemis) | lost / dup (tandem; Artemis) | primary cores (tandem; Artemis) | backups\' cores (tandem; Artemis) | µs CPU per message, all processes (tandem; Artemis) |');
    L.push('|---|---:|---:|---:|---|---|---|---|---|');
    for (const key of [...new Set(r.throughput.map((t) => t.load))]) {
      const c = r.throughput.filter((t) => t.load === key && t.target === 'cluster');
      const a = pairRows.filter((t) => t.load === key);
      if (!c.length || !a.length) continue;
      const best = (xs) => Math.max(...xs.map((x) => x.throughput));
      const p = (xs, q) => med(xs.map((x) => x.latencyMs[q]));
      const backups = (xs) => med(xs.map((x) => x.backupCores.reduce((s2, v) => s2 + v, 0)));
      L.push(`| ${key} | ${fmt(best(c))} | ${fmt(best(a))} | **${fmt(best(c) / best(a), 2)}×** | ${fmt(p(c, 'p50'), 1)} / ${fmt(p(c, 'p99'), 1)}; ${fmt(p(a, 'p50'), 1)} / ${fmt(p(a, 'p99'), 1)} | ${c.reduce((s2, x) => s2 + x.lost, 0)} / ${c.reduce((s2, x) => s2 + x.duplicates, 0)}; ${a.reduce((s2, x) => s2 + x.lost, 0)} / ${a.reduce((s2, x) => s2 + x.duplicates, 0)} | ${fmt(med(c.map((x) => x.brokerCores)), 2)}; ${fmt(med(a.map((x) => x.brokerCores)), 2)} | ${fmt(backups(c), 2)}; ${fmt(backups(a), 2)} | ${fmt(med(c.map(usPerMsg)), 1)}; ${fmt(med(a.map(usPerMsg)), 1)} |`);
    }
  }
  L.push('', '<details><summary>every throughput run</summary>', '', '| round | load | target | msgs/s | p50 / p99 ms | lost / dup | cores primary / backups / client / others |', '|---|---|---|---:|---|---|---|');
  for (const t of r.throughput) L.push(`| ${t.round} | ${t.load} | ${t.target} | ${fmt(t.throughput)} | ${t.latencyMs.p50} / ${t.latencyMs.p99} | ${t.lost} / ${t.duplicates} | ${t.brokerCores} / ${t.backupCores.join('+') || '-'} / ${t.clientCores} / ${t.otherCores} |`);
  L.push('', '</details>', '');
  const f = r.failovers;
  if (f.length) {
    const stat = (k) => { const xs = f.map((x) => x[k]); return `${fmt(Math.min(...xs))} / ${fmt(med(xs))} / ${fmt(Math.max(...xs))}`; };
    L.push(`Failover (durable sender at 1,000 msgs/s, all three addresses, reconnect 10-50 ms; kill -9 the primary, then \`tandem ha promote --cluster-manager\` on a ready backup), ${f.length} times:`, '');
    L.push('| measure | min / median / max ms |', '|---|---|');
    L.push(`| kill → first message accepted by the new primary (promote included) | **${stat('failoverMs')}** |`);
    L.push(`| \`tandem ha promote\` run time (node start-up included) | ${stat('promoteMs')} |`);
    L.push(`| CLI start-up alone (\`node tandem.js --version\`, ${r.cliStartMs.length}×) | ${fmt(Math.min(...r.cliStartMs))} / ${fmt(med(r.cliStartMs))} / ${fmt(Math.max(...r.cliStartMs))} |`);
    L.push(`| promote returned → first accept | ${stat('promoteEndToFirstAcceptMs')} |`);
    L.push(`| kill → new primary \`active\` (polled every ~20 ms) | ${stat('killToActiveMs')} |`);
    if (f.some((x) => Number.isFinite(x.lost))) L.push(`| accepted / lost / duplicated (drained from the new primary), in all | ${fmt(f.reduce((a, x) => a + x.accepted, 0))} / ${f.reduce((a, x) => a + x.lost, 0)} / ${f.reduce((a, x) => a + x.duplicates, 0)} |`);
    L.push('', `each: ${f.map((x) => `${x.failoverMs} ms (promote ${x.promoteMs} ms, exit ${x.promoteExit}, ${x.reconnects} connection(s))`).join('; ')}`, '');
  }
  const af = r.artemisFailovers ?? [];
  if (af.length) {
    const xs = af.map((x) => x.failoverMs);
    L.push(`Artemis failover (the same sender with SASL PLAIN over the pair's two AMQP ports; kill -9 the primary; the backup activates by itself, no cluster manager), a fresh pair each time, ${af.length} times:`, '');
    L.push('| measure | min / median / max ms |', '|---|---|');
    L.push(`| kill → first message accepted by the backup | **${fmt(Math.min(...xs))} / ${fmt(med(xs))} / ${fmt(Math.max(...xs))}** |`);
    L.push(`| accepted / lost / duplicated (drained from the backup), in all | ${fmt(af.reduce((a, x) => a + x.accepted, 0))} / ${af.reduce((a, x) => a + x.lost, 0)} / ${af.reduce((a, x) => a + x.duplicates, 0)} |`);
    L.push('', `each: ${af.map((x) => `${x.failoverMs} ms (${x.reconnects} connection(s), lost ${x.lost}, dup ${x.duplicates})`).join('; ')}`, '');
  }
  const c = r.catchUp;
  if (c) {
    if (!c.readyMs) L.push(`**Catch-up did not finish**: the new backup was not \`ready\` ${fmt(c.gaveUpAfterMs)} ms after it was spawned (last status: ${JSON.stringify(c.lastBackupStatus)}).`, '');
    L.push(`Catch-up: the primary held **${fmt(c.messages)}** durable 1 KiB messages (${c.messages >= c.target ? 'the full target' : `what ${c.fillSeconds} s of loading gave, at ${fmt(c.fillRate)}/s; the ${fmt(c.target)} target did not fit`}; primary RSS ${fmt(c.primaryRssMiB)} MiB). A new backup on an empty data dir was \`ready\` **${fmt(c.readyMs)} ms** after its process was spawned (${fmt(c.readyAfterListenMs)} ms after it listened): **${fmt(c.msgsPerSecond)} msgs/s** (${fmt(c.msgsPerSecondAfterListen)} msgs/s from listening). CPU during catch-up: primary ${c.cpuSeconds.primary} s, backup ${c.cpuSeconds.backup} s. States seen: ${c.states.map((s) => `${s.state} @${s.atMs} ms`).join(', ')}.`, '');
  }
  return `${L.join('\n')}\n`;
}

// The HA cluster pieces bench drivers share (ha.mjs, chaos.mjs): the options that make
// a tandemd a cluster member, HA-STATUS and other management requests made in process
// (a node start-up per poll would be most of a round on a loaded machine), and
// `tandem ha promote --cluster-manager` run as a cluster manager runs it.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { killPid, onCleanup, sleep } from './lib.mjs';

const require = createRequire(import.meta.url);
const rhea = require('rhea');

/** Wall-clock ms with sub-ms precision, comparable across processes (and with python's time.time()). */
export const wallMs = () => performance.timeOrigin + performance.now();

/** tandemd options of one member of a cluster of `ports` on 127.0.0.1. */
export const clusterArgs = (ports, extra = []) => ['--ha-cluster', 'yes', '--ha-brokers-url', ports.map((p) => `127.0.0.1:${p}`).join(','), '--ha-replicate', 'all', ...extra];

/**
 * One AMQP management request over an admin connection (`qpid.ha-admin`, which backups
 * accept too). Resolves with { status, description, body }, or undefined when the broker
 * does not answer within `timeoutMs` (stopped, killed, starting).
 */
export function management(port, operation, { type = 'broker', name = 'broker', body = {}, timeoutMs = 3000 } = {}) {
  return new Promise((resolveP) => {
    const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false, idle_time_out: 0, properties: { 'qpid.ha-admin': true } });
    const done = (v) => {
      clearTimeout(timer);
      conn.close();
      conn.socket?.destroy?.();
      resolveP(v);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    conn.on('error', () => done(undefined));
    conn.on('disconnected', () => done(undefined));
    const recv = conn.open_receiver({ source: { dynamic: true } });
    recv.once('receiver_open', () => {
      conn.open_sender('$management').send({ reply_to: recv.source.address, application_properties: { operation, type, name }, body });
    });
    recv.once('message', (ctx) => {
      const p = ctx.message.application_properties ?? {};
      done({ status: p.statusCode, description: p.statusDescription, body: ctx.message.body });
    });
  });
}

/** HA-STATUS of one broker (state, epoch, lsn, backups), or undefined. */
export async function haStatus(port, timeoutMs = 3000) {
  const r = await management(port, 'HA-STATUS', { timeoutMs });
  return r && r.status < 300 ? r.body : undefined;
}

export const readyBackups = (st) => (st?.backups ?? []).filter((b) => b.state === 'ready').length;

/** Poll `fn` until it returns a truthy value (returned), bounded by `timeoutMs`. */
export async function waitFor(what, fn, timeoutMs, intervalMs = 50) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** `tandem ha promote --cluster-manager` (tandemJs: the CLI's entry); its exit code, output and wall time. */
export function promote(tandemJs, port, extraArgs = []) {
  return new Promise((resolveP) => {
    const t = wallMs();
    const p = spawn(process.execPath, [tandemJs, 'ha', 'promote', '-b', `127.0.0.1:${port}`, '--cluster-manager', '--timeout', '10', ...extraArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
    const unregister = onCleanup(() => killPid(p.pid));
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => killPid(p.pid), 20_000);
    p.once('exit', (code) => {
      clearTimeout(timer);
      unregister();
      resolveP({ code, ms: wallMs() - t, out: out.trim(), endT: wallMs() });
    });
  });
}

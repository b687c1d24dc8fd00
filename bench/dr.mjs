// DR benchmark (not a test): two tandemd processes on 127.0.0.1 (primary,
// secondary) from this tree's dist/.
//  1. Apply throughput: the secondary is stopped while N 1 KiB messages are sent
//     to an enqueue-only DR queue; on restart it catches up from the source's
//     retained window; changes/s = N / catch-up time.
//  2. Lag under steady load: the primary's own throughput is measured first
//     (blast of at-least-once sends); then messages carrying their send time are
//     sent at half that rate for DURATION s while an admin browser on the
//     secondary sees them arrive; lag = arrival - send time (same clock).
// Usage: node bench/dr.mjs [N=50000] [DURATION=20]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const require = createRequire(import.meta.url);
const rhea = require('../node_modules/rhea');
const root = resolve(import.meta.dirname, '..');
const N = Number(process.argv[2] ?? 50_000);
const DURATION = Number(process.argv[3] ?? 20);
const BODY = Buffer.alloc(1024, 'x');
const procs = new Set();
const dirs = [];
process.on('exit', () => {
  for (const p of procs) p.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const log = (...a) => process.stderr.write(`[dr-bench] ${a.join(' ')}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start(dataDir) {
  return new Promise((resolveP, reject) => {
    const p = spawn(process.execPath, [join(root, 'bin', 'tandemd'), '--port', '0', '--data-dir', dataDir, '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'inherit'] });
    procs.add(p);
    p.on('exit', () => procs.delete(p));
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /listening on [^\s]+:(\d+)\n/.exec(out);
      if (m) resolveP({ proc: p, port: Number(m[1]), dataDir });
    });
    p.once('exit', (c) => reject(new Error(`tandemd exited ${c}`)));
  });
}

function connect(port, props = {}) {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false, properties: props });
  conn.on('error', () => undefined);
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

async function drRow(port) {
  return (await mgmt(port, 'DR-STATUS')).queues[0];
}

const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

async function main() {
  const d1 = mkdtempSync(join(tmpdir(), 'dr-bench-p-'));
  const d2 = mkdtempSync(join(tmpdir(), 'dr-bench-s-'));
  dirs.push(d1, d2);
  const primary = await start(d1);
  let secondary = await start(d2);
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', 'bench');
  await mgmt(secondary.port, 'DR-ADD', { queue: 'bench', source: `127.0.0.1:${primary.port}`, mode: 'enqueue-only' });
  for (let i = 0; i < 100 && (await drRow(secondary.port)).link !== 'connected'; i++) await sleep(100);

  // 1. catch-up throughput from the retained window
  secondary.proc.kill('SIGKILL');
  await sleep(200);
  const sendMs = await send(primary.port, 'bench', N);
  log(`sent ${N} x 1 KiB to the primary in ${sendMs} ms (${Math.round(N / (sendMs / 1000))} msg/s, secondary down)`);
  const head = Number((await mgmt(primary.port, 'READ')).lsn);
  const c0 = Date.now();
  secondary = await start(d2);
  let row;
  for (;;) {
    row = await drRow(secondary.port);
    if (row['applied-position'] >= head - 5 && row.depth >= N) break;
    await sleep(20);
  }
  const catchMs = Date.now() - c0;
  const applyRate = Math.round(N / (catchMs / 1000));
  log(`secondary restarted and caught up ${N} changes in ${catchMs} ms (process start included): ${applyRate} changes/s`);

  // 2. lag under steady load at half the primary's throughput
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', 'blast');
  const blastN = Math.max(20_000, Math.round(N / 2));
  const blastMs = await send(primary.port, 'blast', blastN);
  const primaryRate = blastN / (blastMs / 1000);
  const rate = Math.round(primaryRate / 2);
  await mgmt(secondary.port, 'DR-ADD', { queue: 'lag', source: `127.0.0.1:${primary.port}`, mode: 'enqueue-only' });
  await mgmt(primary.port, 'CREATE', { durable: true }, 'queue', 'lag');
  await sleep(1500);
  const lags = [];
  const bconn = await connect(secondary.port, { 'qpid.ha-admin': true });
  const browser = bconn.open_receiver({ source: { address: 'lag', distribution_mode: 'copy' }, credit_window: 500, autoaccept: false });
  browser.on('message', (ctx) => {
    lags.push(Date.now() - Number(ctx.message.body.slice(0, 13)));
    ctx.delivery.update(true);
  });
  const total = rate * DURATION;
  const pad = 'x'.repeat(1024 - 14);
  await send(primary.port, 'lag', total, { rate, bodyOf: () => `${Date.now()} ${pad}` });
  for (let i = 0; i < 200 && lags.length < total; i++) await sleep(50);
  bconn.close();
  lags.sort((a, b) => a - b);
  const result = {
    messageBytes: 1024,
    catchUp: { changes: N, ms: catchMs, changesPerSecond: applyRate },
    steady: { primaryMsgPerSec: Math.round(primaryRate), offeredMsgPerSec: rate, seconds: DURATION, seen: lags.length, lagMs: { p50: pct(lags, 50), p90: pct(lags, 90), p99: pct(lags, 99), max: lags.at(-1) } },
  };
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  process.exit(0);
}

main().catch((err) => {
  log(err.stack ?? String(err));
  process.exit(1);
});

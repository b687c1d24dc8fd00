#!/usr/bin/env node
// AMQP 1.0 load generator: N senders and N receivers on one queue, each in its own
// worker thread (own event loop and connection), at-least-once with a window of
// unsettled sends. Measures received msgs/s, end-to-end latency (monotonic send
// time in each message), loss and duplicates (per-sender sequence numbers).
//
//   node bench/load.mjs --port 5672 [--durable] [--senders 1] [--duration 10] ...
//   node bench/load.mjs --help
//
// Every option also reads from an env variable (BENCH_<OPTION>, dashes as
// underscores); the command line wins. With --json the last stdout line is one
// JSON object (what run.mjs parses).
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

const nowUs = () => Number(process.hrtime.bigint()) / 1000;
/** Unique per thread and run: message-ids never repeat across loads on one broker. */
const runId = randomBytes(6).toString('hex');

// ---- latency histogram: log buckets, 1% wide, 1 µs .. ~100 s; mergeable ---------
const H_BASE = Math.log(1.01);
const H_SIZE = 1900;
const bucketOf = (us) => (us <= 1 ? 0 : Math.min(H_SIZE - 1, Math.ceil(Math.log(us) / H_BASE)));
const bucketValue = (b) => Math.exp(b * H_BASE); // upper edge, µs

function percentile(hist, total, p) {
  if (total === 0) return NaN;
  const rank = Math.ceil((p / 100) * total);
  let seen = 0;
  for (let b = 0; b < H_SIZE; b++) {
    seen += hist[b];
    if (seen >= rank) return bucketValue(b);
  }
  return bucketValue(H_SIZE - 1);
}

// ---- options -------------------------------------------------------------------
const optionSpecs = {
  host: { type: 'string', default: '127.0.0.1', help: 'broker host' },
  port: { type: 'string', default: '5672', help: 'broker port' },
  user: { type: 'string', default: '', help: 'SASL PLAIN user (empty: no SASL, anonymous)' },
  password: { type: 'string', default: '', help: 'SASL PLAIN password' },
  queue: { type: 'string', default: '', help: 'queue name (default: bench-<random>)' },
  'send-address': { type: 'string', default: '{q}', help: 'sender target address; {q} is the queue (RabbitMQ 3.10: /amq/queue/{q})' },
  'recv-address': { type: 'string', default: '{q}', help: 'receiver source address; {q} is the queue (RabbitMQ 3.10: /queue/{q})' },
  'terminus-durable': { type: 'boolean', default: false, help: 'ask for a durable terminus (durable=2); RabbitMQ then declares a durable queue' },
  durable: { type: 'boolean', default: false, help: 'send messages with header durable=true' },
  'message-id': { type: 'boolean', default: false, help: 'give every message a unique message-id (what a broker-side duplicate-detection window keys on)' },
  senders: { type: 'string', default: '1', help: 'sender threads (one connection each)' },
  receivers: { type: 'string', default: '', help: 'receiver threads (default: same as --senders)' },
  duration: { type: 'string', default: '10', help: 'seconds of sending (bounded; ignored if --count is set)' },
  warmup: { type: 'string', default: '0', help: 'seconds of the same load before --duration whose latencies are not counted (JIT warm-up of client and broker)' },
  count: { type: 'string', default: '0', help: 'messages per sender (0: use --duration)' },
  rate: { type: 'string', default: '0', help: 'total target send rate in msgs/s over all senders (0: as fast as the window allows)' },
  window: { type: 'string', default: '1000', help: 'unsettled sends per sender' },
  prefetch: { type: 'string', default: '1000', help: 'receiver credit window' },
  size: { type: 'string', default: '1024', help: 'body bytes' },
  'settle-timeout': { type: 'string', default: '30', help: 'seconds to wait for outstanding settlements after sending stops' },
  'drain-timeout': { type: 'string', default: '20', help: 'seconds to wait for receivers after senders finish' },
  json: { type: 'boolean', default: false, help: 'print the result as one JSON line' },
  help: { type: 'boolean', default: false, help: 'this text' },
};

function readOptions() {
  const { values } = parseArgs({
    options: Object.fromEntries(Object.entries(optionSpecs).map(([k, s]) => [k, { type: s.type }])),
    allowPositionals: false,
  });
  const o = {};
  for (const [k, s] of Object.entries(optionSpecs)) {
    const env = process.env[`BENCH_${k.toUpperCase().replaceAll('-', '_')}`];
    let v = values[k];
    if (v === undefined && env !== undefined && env !== '') v = s.type === 'boolean' ? /^(1|yes|true|on)$/i.test(env) : env;
    o[k] = v ?? s.default;
  }
  if (o.help) {
    process.stdout.write('node bench/load.mjs [options]\n\n');
    for (const [k, s] of Object.entries(optionSpecs)) {
      process.stdout.write(`  --${k}${s.type === 'string' ? ' V' : ''}`.padEnd(24) + `${s.help} [${s.default === '' ? '-' : s.default}] (env BENCH_${k.toUpperCase().replaceAll('-', '_')})\n`);
    }
    process.exit(0);
  }
  const int = (k, min) => {
    const n = Number(o[k]);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${k} must be a number >= ${min}, got '${o[k]}'`);
    return n;
  };
  const senders = int('senders', 1);
  return {
    host: o.host,
    port: int('port', 1),
    user: o.user,
    password: o.password,
    queue: o.queue || `bench-${randomBytes(4).toString('hex')}`,
    sendAddress: o['send-address'],
    recvAddress: o['recv-address'],
    terminusDurable: o['terminus-durable'],
    durable: o.durable,
    messageId: o['message-id'],
    senders,
    receivers: o.receivers === '' ? senders : int('receivers', 1),
    duration: Math.min(int('duration', 0.1), 600),
    warmup: Math.min(int('warmup', 0), 60),
    count: int('count', 0),
    rate: int('rate', 0),
    window: int('window', 1),
    prefetch: int('prefetch', 1),
    size: int('size', 0),
    settleTimeout: int('settle-timeout', 1),
    drainTimeout: int('drain-timeout', 1),
    json: o.json,
  };
}

// ---- worker side -------------------------------------------------------------------
async function connect(rhea, o, id) {
  const container = rhea.create_container({ id: `bench-${id}-${process.pid}` });
  // tcp_no_delay: rhea only sets TCP_NODELAY when a receiver attaches; a sender's
  // small transfers would otherwise wait on Nagle + delayed ACK (~40 ms).
  const opts = { host: o.host, port: o.port, reconnect: false, idle_time_out: 0, max_frame_size: 65536, tcp_no_delay: true };
  if (o.user) Object.assign(opts, { username: o.user, password: o.password });
  const conn = container.connect(opts);
  const fail = (what) => (ctx) => {
    const err = ctx?.error ?? ctx?.connection?.error ?? ctx?.sender?.error ?? ctx?.receiver?.error;
    parentPort.postMessage({ type: 'error', id, error: `${what}: ${err?.description ?? err?.message ?? String(err)}` });
  };
  conn.on('connection_error', fail('connection error'));
  conn.on('disconnected', (ctx) => {
    if (!conn.bench_closing) fail('disconnected')(ctx);
  });
  conn.on('error', fail('error'));
  conn.on('sender_error', fail('sender error'));
  conn.on('receiver_error', fail('receiver error'));
  return conn;
}

function terminus(o, template) {
  const address = template.replaceAll('{q}', o.queue);
  return o.terminusDurable ? { address, durable: 2 } : address;
}

async function runSender(rhea, o, id) {
  const conn = await connect(rhea, o, id);
  const body = rhea.message.data_section(randomBytes(o.size));
  const sender = conn.open_sender({ target: terminus(o, o.sendAddress), autosettle: true });
  const perSenderRate = o.rate / o.senders;
  let seq = 0;
  let inflight = 0;
  let running = false;
  let startUs = 0;
  let endUs = Infinity;
  let timer;
  let accepted = 0;
  let rejected = 0;
  let released = 0;
  let firstSettleUs = 0;
  let lastSettleUs = 0;
  let acceptedMap = new Uint8Array(1 << 16);
  let elu0;
  let finished = false;

  const markAccepted = (n) => {
    if (n >= acceptedMap.length) {
      const bigger = new Uint8Array(Math.max(acceptedMap.length * 2, n + 1));
      bigger.set(acceptedMap);
      acceptedMap = bigger;
    }
    acceptedMap[n] = 1;
  };

  const finish = (why) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    const elu = performance.eventLoopUtilization(elu0);
    conn.bench_closing = true;
    conn.close();
    parentPort.postMessage({
      type: 'done', role: 'sender', id, why, sent: seq, accepted, rejected, released, unsettled: inflight,
      startUs, stopUs: Math.min(endUs, nowUs()), firstSettleUs, lastSettleUs, elu: elu.utilization,
      acceptedMap: acceptedMap.slice(0, seq),
    });
  };

  const pump = () => {
    if (!running) return;
    const t = nowUs();
    if (t >= endUs || (o.count > 0 && seq >= o.count)) {
      if (t < endUs) endUs = t;
      running = false;
      if (inflight === 0) finish('complete');
      else timer = setTimeout(() => finish('settle timeout'), o.settleTimeout * 1000);
      return;
    }
    let allowed = Infinity;
    if (perSenderRate > 0) allowed = Math.floor(((t - startUs) / 1e6) * perSenderRate) + 1;
    while (inflight < o.window && sender.sendable() && seq < allowed && (o.count === 0 || seq < o.count)) {
      const d = sender.send({ durable: o.durable, ...(o.messageId ? { message_id: `${runId}:${id}:${seq}` } : {}), application_properties: { s: id, n: seq, t: nowUs() }, body });
      d.bench_seq = seq;
      seq++;
      inflight++;
    }
    // Rate-limited and ahead of schedule: come back when the next message is due (>= 1 ms).
    if (perSenderRate > 0 && seq >= allowed && inflight < o.window) {
      clearTimeout(timer);
      timer = setTimeout(pump, Math.max(1, (seq / perSenderRate) * 1000 - (t - startUs) / 1000));
    } else if (o.count === 0 && inflight < o.window) {
      // No credit: the next 'sendable' calls pump; this only re-checks the deadline.
      clearTimeout(timer);
      timer = setTimeout(pump, Math.max(1, (endUs - t) / 1000));
    }
  };

  const settled = (ctx, kind) => {
    inflight--;
    const t = nowUs();
    if (firstSettleUs === 0) firstSettleUs = t;
    lastSettleUs = t;
    if (kind === 'accepted') {
      accepted++;
      markAccepted(ctx.delivery.bench_seq);
    } else if (kind === 'rejected') rejected++;
    else released++;
    if (running) pump();
    else if (inflight === 0) finish('complete');
  };
  sender.on('accepted', (ctx) => settled(ctx, 'accepted'));
  sender.on('rejected', (ctx) => settled(ctx, 'rejected'));
  sender.on('released', (ctx) => settled(ctx, 'released'));
  sender.on('modified', (ctx) => settled(ctx, 'released'));
  sender.on('sendable', pump);

  await new Promise((resolve) => sender.once('sender_open', resolve));
  parentPort.postMessage({ type: 'ready', id });
  parentPort.on('message', (m) => {
    if (m.type === 'start') {
      elu0 = performance.eventLoopUtilization();
      startUs = nowUs();
      endUs = o.count > 0 ? startUs + 600e6 : startUs + (o.warmup + o.duration) * 1e6;
      running = true;
      pump();
    } else if (m.type === 'abort') finish('aborted');
  });
}

async function runReceiver(rhea, o, id) {
  const conn = await connect(rhea, o, id);
  const hist = new Float64Array(H_SIZE);
  let received = 0;
  let firstUs = 0;
  let lastUs = 0;
  let seen = new Map(); // sender id -> Uint8Array of times seen (saturating)
  let elu0 = performance.eventLoopUtilization();
  let bad = 0;
  /** Messages sent before this (the warm-up) do not count in the latency histogram. */
  let measureFromUs = 0;
  const receiver = conn.open_receiver({ source: terminus(o, o.recvAddress), credit_window: o.prefetch, autoaccept: true });
  receiver.on('message', (ctx) => {
    const t = nowUs();
    const p = ctx.message.application_properties;
    if (!p || typeof p.n !== 'number') {
      bad++;
      return;
    }
    received++;
    if (firstUs === 0) firstUs = t;
    lastUs = t;
    if (p.t >= measureFromUs) hist[bucketOf(t - p.t)]++;
    let m = seen.get(p.s);
    if (!m || p.n >= m.length) {
      const bigger = new Uint8Array(Math.max((m?.length ?? 0) * 2, p.n + 1, 1 << 16));
      if (m) bigger.set(m);
      seen.set(p.s, (m = bigger));
    }
    if (m[p.n] < 255) m[p.n]++;
  });
  await new Promise((resolve) => receiver.once('receiver_open', resolve));
  parentPort.postMessage({ type: 'ready', id });
  const progress = setInterval(() => parentPort.postMessage({ type: 'progress', id, received }), 100);
  parentPort.on('message', (m) => {
    if (m.type === 'start') {
      elu0 = performance.eventLoopUtilization();
      measureFromUs = m.measureFromUs ?? 0;
    }
    if (m.type !== 'stop' && m.type !== 'abort') return;
    clearInterval(progress);
    const elu = performance.eventLoopUtilization(elu0);
    conn.bench_closing = true;
    conn.close();
    parentPort.postMessage({
      type: 'done', role: 'receiver', id, received, bad, firstUs, lastUs, elu: elu.utilization, hist,
      seen: Object.fromEntries([...seen].map(([s, arr]) => [s, arr])),
    });
  });
}

if (!isMainThread) {
  const { default: rhea } = await import('rhea');
  const { role, id, options } = workerData;
  const run = role === 'sender' ? runSender : runReceiver;
  run(rhea, options, id).catch((err) => parentPort.postMessage({ type: 'error', id, error: String(err?.stack ?? err) }));
}

// ---- main side --------------------------------------------------------------------
function startWorker(role, id, options, onMessage) {
  const w = new Worker(new URL(import.meta.url), { workerData: { role, id, options } });
  w.on('message', (m) => onMessage(w, m));
  w.on('error', (err) => onMessage(w, { type: 'error', id, error: String(err?.stack ?? err) }));
  return w;
}

/** Run one load; resolves with the result object (throws on client/broker errors). */
export async function runLoad(o) {
  const workers = [];
  let rejectRun;
  const failed = new Promise((_, reject) => (rejectRun = reject));
  failed.catch(() => {});
  const waiters = new Map(); // key -> resolve
  const progress = new Map();
  const results = { sender: [], receiver: [] };
  const onMessage = (w, m) => {
    if (m.type === 'error') rejectRun(new Error(`worker ${m.id}: ${m.error}`));
    else if (m.type === 'progress') progress.set(m.id, m.received);
    else if (m.type === 'ready' || m.type === 'done') {
      if (m.type === 'done') results[m.role].push(m);
      waiters.get(`${m.type}:${m.id}`)?.();
    }
  };
  const waitFor = (key, ms, what) =>
    Promise.race([
      failed,
      new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`${what} timed out after ${ms / 1000} s`)), ms);
        waiters.set(key, () => {
          clearTimeout(t);
          resolve();
        });
      }),
    ]);
  const hardStop = setTimeout(() => rejectRun(new Error('load exceeded its hard time limit')), (o.count > 0 ? 600 : o.warmup + o.duration + o.settleTimeout + o.drainTimeout + 30) * 1000);
  try {
    // Receivers first: on RabbitMQ the receiver's /queue/ address declares the queue.
    const receivers = [];
    for (let i = 0; i < o.receivers; i++) {
      const id = `r${i}`;
      receivers.push(startWorker('receiver', id, o, onMessage));
      await waitFor(`ready:${id}`, 15_000, `receiver ${id} attach`);
    }
    workers.push(...receivers);
    const senders = [];
    const ready = [];
    for (let i = 0; i < o.senders; i++) {
      senders.push(startWorker('sender', i, o, onMessage));
      ready.push(waitFor(`ready:${i}`, 15_000, `sender ${i} attach`));
    }
    workers.push(...senders);
    await Promise.all(ready);
    const done = senders.map((_, i) => waitFor(`done:${i}`, (o.count > 0 ? 590 : o.warmup + o.duration + o.settleTimeout + 10) * 1000, `sender ${i}`));
    const startUs = nowUs();
    for (const w of workers) w.postMessage({ type: 'start', measureFromUs: startUs + o.warmup * 1e6 });
    await Promise.all(done);
    const sendersDoneUs = nowUs();
    const acceptedTotal = results.sender.reduce((a, r) => a + r.accepted, 0);
    // Wait until the receivers have as many as were accepted, or stop making progress.
    let last = -1;
    let lastChange = Date.now();
    const drainDeadline = Date.now() + o.drainTimeout * 1000;
    for (;;) {
      const got = [...progress.values()].reduce((a, b) => a + b, 0);
      if (got >= acceptedTotal) break;
      if (got !== last) {
        last = got;
        lastChange = Date.now();
      }
      if (Date.now() > drainDeadline || Date.now() - lastChange > 3000) break;
      await Promise.race([failed, new Promise((r) => setTimeout(r, 50))]);
    }
    const rdone = receivers.map((_, i) => waitFor(`done:r${i}`, 10_000, `receiver r${i} report`));
    for (const w of receivers) w.postMessage({ type: 'stop' });
    await Promise.all(rdone);
    return summarize(o, results, startUs, sendersDoneUs);
  } finally {
    clearTimeout(hardStop);
    rejectRun(new Error('finished'));
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

function summarize(o, results, startUs, sendersDoneUs) {
  const hist = new Float64Array(H_SIZE);
  let received = 0;
  let firstUs = Infinity;
  let lastUs = 0;
  const counts = new Map();
  for (const r of results.receiver) {
    received += r.received;
    for (let b = 0; b < H_SIZE; b++) hist[b] += r.hist[b];
    if (r.firstUs) firstUs = Math.min(firstUs, r.firstUs);
    lastUs = Math.max(lastUs, r.lastUs);
    for (const [s, arr] of Object.entries(r.seen)) {
      const c = counts.get(String(s));
      if (!c) counts.set(String(s), Uint16Array.from(arr));
      else {
        const merged = c.length >= arr.length ? c : Uint16Array.from({ length: arr.length }, (_, i) => c[i] ?? 0);
        for (let i = 0; i < arr.length; i++) merged[i] += arr[i];
        counts.set(String(s), merged);
      }
    }
  }
  let unique = 0;
  let duplicates = 0;
  let lost = 0;
  let unexpected = 0;
  for (const s of results.sender) {
    const c = counts.get(String(s.id)) ?? new Uint16Array(0);
    for (let n = 0; n < Math.max(c.length, s.sent); n++) {
      const k = c[n] ?? 0;
      if (k > 0) {
        unique++;
        duplicates += k - 1;
        if (n >= s.sent) unexpected++;
      } else if (n < s.sent && s.acceptedMap[n]) lost++;
    }
  }
  const sent = results.sender.reduce((a, r) => a + r.sent, 0);
  const accepted = results.sender.reduce((a, r) => a + r.accepted, 0);
  const sendUs = Math.max(...results.sender.map((r) => r.stopUs)) - startUs;
  const elapsedUs = (lastUs > 0 ? lastUs : sendersDoneUs) - startUs;
  const total = hist.reduce((a, b) => a + b, 0);
  const round = (x) => Math.round(x * 10) / 10;
  const ms = (us) => Math.round(us / 10) / 100;
  const cpu = process.cpuUsage(); // this process: main + every worker thread
  return {
    broker: `${o.host}:${o.port}`,
    queue: o.queue,
    durable: o.durable,
    senders: o.senders,
    receivers: o.receivers,
    size: o.size,
    window: o.window,
    rateLimit: o.rate,
    sent,
    accepted,
    rejected: results.sender.reduce((a, r) => a + r.rejected, 0),
    released: results.sender.reduce((a, r) => a + r.released, 0),
    unsettledAtEnd: results.sender.reduce((a, r) => a + r.unsettled, 0),
    received,
    unique,
    duplicates,
    lost,
    unexpected,
    sendSeconds: Math.round(sendUs / 1e4) / 100,
    elapsedSeconds: Math.round(elapsedUs / 1e4) / 100,
    sendRate: Math.round(sent / (sendUs / 1e6)),
    throughput: Math.round(received / (elapsedUs / 1e6)),
    latencyMs: {
      p50: ms(percentile(hist, total, 50)),
      p90: ms(percentile(hist, total, 90)),
      p99: ms(percentile(hist, total, 99)),
      max: ms(percentile(hist, total, 100)),
    },
    clientCpuSeconds: Math.round((cpu.user + cpu.system) / 1e4) / 100,
    clientElu: {
      senders: results.sender.map((r) => Math.round(r.elu * 100) / 100),
      receivers: results.receiver.map((r) => Math.round(r.elu * 100) / 100),
    },
  };
}

export function describe(r) {
  return (
    `${r.throughput} msgs/s received (${r.received} in ${r.elapsedSeconds} s; sent ${r.sent} at ${r.sendRate}/s), ` +
    `latency p50 ${r.latencyMs.p50} ms p99 ${r.latencyMs.p99} ms max ${r.latencyMs.max} ms, ` +
    `lost ${r.lost} dup ${r.duplicates} rejected ${r.rejected} released ${r.released} unsettled ${r.unsettledAtEnd}, ` +
    `client ELU s=${r.clientElu.senders.join('/')} r=${r.clientElu.receivers.join('/')}`
  );
}

const invokedDirectly = isMainThread && process.argv[1] && new URL(import.meta.url).pathname === (await import('node:fs')).realpathSync(process.argv[1]);
if (invokedDirectly) {
  try {
    const o = readOptions();
    const r = await runLoad(o);
    process.stdout.write(o.json ? `${JSON.stringify(r)}\n` : `${describe(r)}\n`);
    process.exit(r.lost > 0 || r.unexpected > 0 ? 1 : 0);
  } catch (err) {
    process.stderr.write(`load: ${err.message}\n`);
    process.exit(2);
  }
}

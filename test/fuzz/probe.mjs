// The fuzz test's stall probe, in a process of its own so that the fuzzer's work does
// not delay it: one rhea connection sends a message to itself through the broker every
// PROBE_INTERVAL_MS and times the round trip. A round trip over STALL_MS during which
// the broker's main thread also spent over STALL_MS on a CPU is a stall of its event
// loop: one task (or work it cannot get through) held every connection up that long.
// Wall time alone is not the measure: on two cores shared by many tenants a broker
// that is not scheduled answers late through no fault of its own (such round trips
// are counted apart, as `slow`). One that never comes back is `lost`. Prints "ready" after its first round trip, and one JSON line with the
// figures when its stdin closes.
//
// usage: node probe.mjs PORT BROKER_PID
import { readFileSync } from 'node:fs';
import rhea from 'rhea';

const port = Number(process.argv[2]);
const brokerPid = Number(process.argv[3]);
/** Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

/** CPU milliseconds the broker's main thread has used (its thread id is its pid). */
function brokerCpuMs() {
  try {
    const stat = readFileSync(`/proc/${brokerPid}/task/${brokerPid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / USER_HZ;
  } catch {
    return 0;
  }
}
const PROBE_INTERVAL_MS = 20;
const STALL_MS = 100;
/** A round trip not back this long after the run is over is lost. */
const LOST_MS = 15_000;

const container = rhea.create_container({ id: `fuzz-probe-${process.pid}` });
const conn = container.connect({ host: '127.0.0.1', port, reconnect: false, idle_time_out: 0 });
const sentAt = new Map();
const figures = { sent: 0, roundTrips: 0, maxMs: 0, stalls: 0, stallMs: [], slow: 0, maxCpuMs: 0, slowest: [], errors: [], lost: 0 };
let seq = 0;
const startedAt = performance.now();

conn.on('error', (e) => figures.errors.push(String(e?.message ?? e)));
conn.on('disconnected', () => figures.errors.push('disconnected'));
conn.on('connection_close', () => figures.errors.push('connection closed'));
const receiver = conn.open_receiver({ source: { address: 'fuzz.probe' }, credit_window: 100 });
const sender = conn.open_sender({ target: { address: 'fuzz.probe' } });
receiver.on('message', (ctx) => {
  const at = sentAt.get(ctx.message.body);
  if (at === undefined) return;
  sentAt.delete(ctx.message.body);
  const ms = performance.now() - at.time;
  if (figures.roundTrips++ === 0) process.stdout.write('ready\n');
  figures.maxMs = Math.max(figures.maxMs, ms);
  if (ms > 1000 && figures.slowest.length < 20) figures.slowest.push([Math.round(at.time - startedAt), Math.round(ms)]);
  const onCpu = brokerCpuMs() - at.cpu;
  figures.maxCpuMs = Math.max(figures.maxCpuMs, onCpu);
  if (ms > STALL_MS && onCpu > STALL_MS) {
    figures.stalls++;
    if (figures.stallMs.length < 20) figures.stallMs.push(Math.round(onCpu));
  } else if (ms > STALL_MS) {
    figures.slow++;
  }
});

const timer = setInterval(() => {
  const now = performance.now();
  if (!sender.sendable()) return;
  const body = `probe-${++seq}`;
  sentAt.set(body, { time: now, cpu: brokerCpuMs() });
  sender.send({ body });
  figures.sent++;
}, PROBE_INTERVAL_MS);

process.stdin.resume();
process.stdin.on('end', () => {
  clearInterval(timer);
  // Let the round trips still out come back (and be judged) before reporting.
  const since = performance.now();
  const report = setInterval(() => {
    if (sentAt.size > 0 && performance.now() - since < LOST_MS) return;
    clearInterval(report);
    figures.lost = sentAt.size;
    process.stdout.write(`${JSON.stringify(figures)}\n`);
    conn.close();
    setTimeout(() => process.exit(0), 200).unref();
  }, 20);
});

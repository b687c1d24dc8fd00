// Preloaded into tandemd by bench/stalls.mjs (node --import): notes every event-loop
// stall over STALL_PROBE_MS (default 100), the CPU time the process used meanwhile, and the GC pauses inside it, one JSON line
// each in STALL_PROBE_FILE. Not part of the broker.
import { appendFileSync } from 'node:fs';
import { PerformanceObserver, performance } from 'node:perf_hooks';

const file = process.env.STALL_PROBE_FILE;
const over = Number(process.env.STALL_PROBE_MS ?? 100);
if (file) {
  const gcs = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (e.duration > 20) gcs.push({ at: e.startTime, ms: Math.round(e.duration), kind: e.detail?.kind });
    if (gcs.length > 1000) gcs.splice(0, 500);
  }).observe({ entryTypes: ['gc'] });
  let last = performance.now();
  let lastCpu = process.cpuUsage();
  setInterval(() => {
    const now = performance.now();
    const lag = now - last - 10;
    const cpu = process.cpuUsage();
    // CPU the process used in the gap (all threads: GC helpers, libuv): far below the gap is the machine, not the broker.
    const cpuMs = Math.round((cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000);
    lastCpu = cpu;
    if (lag > over) {
      const inside = gcs.filter((g) => g.at >= last && g.at <= now);
      appendFileSync(file, `${JSON.stringify({ at: Math.round(last), epochMs: Math.round(performance.timeOrigin + last), lagMs: Math.round(lag), cpuMs, gc: inside })}\n`);
    }
    last = now;
  }, 10).unref();
}

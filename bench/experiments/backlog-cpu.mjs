#!/usr/bin/env node
// Broker CPU per message published into a queue nobody consumes (every body stays
// queued: the case where giving bodies memory of their own would cost most,
// src/broker/borrowed-bodies.ts), two builds alternated, each round on a fresh broker
// after a warm-up. rhea publishes 1 KiB non-durable messages, 2,000 unsettled at most;
// the broker is not saturated, so the figure is CPU per message, not throughput.
//   BENCH_AB_BASE=<rev> BENCH_AB_TEST=<rev|worktree> N=150000 ROUNDS=3 node bench/experiments/backlog-cpu.mjs
// Not a test. Raw results: bench/results/backlog-cpu-<time>.json.
import rhea from 'rhea';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildTandem, machineInfo, median, startTandem, tempDir, tmpBase, writeResults } from '../lib.mjs';

const N = Number(process.env.N ?? 200_000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const body = Buffer.alloc(1024, 7);
const cpuOf = (pid) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100; };

async function publish(port) {
  const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false });
  await new Promise((resolve, reject) => {
    const sender = conn.open_sender({ target: { address: 'backlog' } });
    let next = 0, accepted = 0;
    const pump = () => { while (next < N && sender.sendable() && next - accepted < 2000) { sender.send({ body, durable: false }); next++; } };
    sender.on('sendable', pump);
    sender.on('accepted', () => { if (++accepted === N) resolve(); else pump(); });
    sender.on('rejected', () => reject(new Error('rejected')));
  });
  conn.close();
}

const builds = [{ side: 'base', ...(await buildTandem(process.env.BENCH_AB_BASE ?? 'HEAD')) }, { side: 'test', ...(await buildTandem(process.env.BENCH_AB_TEST ?? 'worktree')) }];
const out = { base: [], test: [] };
const startedAt = new Date().toISOString();
for (let r = 0; r < ROUNDS; r++) {
  for (const b of r % 2 ? builds : [...builds].reverse()) {
    const dir = tempDir(tmpBase(), 'backlog-');
    const t = await startTandem({ entry: b.entry, dataDir: join(dir, 'data') });
    await publish(t.port); // warm-up, and the sweep's ticks after it
    await new Promise((res) => setTimeout(res, 3000));
    const c0 = cpuOf(t.pid);
    await publish(t.port);
    await new Promise((res) => setTimeout(res, 3000)); // the sweep's two ticks
    const us = ((cpuOf(t.pid) - c0) * 1e6) / N;
    out[b.side].push(us);
    console.log(b.side, b.label, 'broker µs/msg', us.toFixed(2));
    await t.stop();
  }
}
const summary = `backlog-cpu: broker µs per message, median of ${ROUNDS}: base ${median(out.base).toFixed(2)} (${builds[0].label}), test ${median(out.test).toFixed(2)} (${builds[1].label})\n`;
writeResults('backlog-cpu', { startedAt, settings: { N, ROUNDS }, builds: builds.map((b) => ({ side: b.side, label: b.label })), machine: machineInfo(), usPerMessage: out }, summary);

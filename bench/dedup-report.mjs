#!/usr/bin/env node
// The dedup benchmark's report (markdown) from its raw results: dedup.mjs prints it at the
// end of a run; `node bench/dedup-report.mjs results/dedup-<time>.json` prints it again
// from a run's file (older files, without generations, pair by round alone).
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { geoMeanText, median } from './lib.mjs';

// A side's figures against the off side's, round by round (the same generation and round, so
// the machine's state was alike), summarised as the geometric mean of the pairs' ratios with
// its 95% interval: an A/A run here moves single pairs by 10-20%, so one ratio says little.
/** log(side / off) of `valueOf` for each round both ran. */
const pairLogs = (side, off, valueOf) =>
  side.flatMap((r) => {
    const o = off.find((x) => x.generation === r.generation && x.round === r.round);
    const a = valueOf(r);
    const b = o ? valueOf(o) : NaN;
    return a > 0 && b > 0 ? [{ generation: r.generation, startedFirst: r.startedFirst, log: Math.log(a / b) }] : [];
  });
/** The geometric mean of the pairs' ratios and, from two pairs on, its 95% interval, as text. */
const geoMeanOfPairs = (pairs) => geoMeanText(pairs.map((p) => p.log));
/** Each generation's geometric mean (2-3 pairs: no interval), with the side its brokers started first: whether the start order shows. */
const byGenerationText = (pairs) =>
  [...new Set(pairs.map((p) => p.generation))]
    .map((g) => {
      const own = pairs.filter((p) => p.generation === g);
      const mean = own.reduce((sum, p) => sum + p.log, 0) / own.length;
      return `${Math.exp(mean).toFixed(2)}${own[0].startedFirst ? ` (${own[0].startedFirst} first)` : ''}`;
    })
    .join(', ');
const throughputOf = (r) => r.throughput;
const primaryCpuPerMsg = (r) => (r.msgsPerBrokerCpuSecond > 0 ? 1 / r.msgsPerBrokerCpuSecond : NaN);
// A cluster's three brokers together: on one shared machine the backups' CPU is the primary's loss.
const clusterCpuPerMsg = (r) => (r.msgsPerClusterCpuSecond > 0 ? 1 / r.msgsPerClusterCpuSecond : NaN);
const medianText = (rows, valueOf, scale = 1, digits = 0) => {
  const m = median(rows.map(valueOf)) * scale;
  return Number.isFinite(m) ? m.toFixed(digits) : '-';
};
/** The report of one run (dedup.mjs's `report` object) as markdown. */
export function renderDedupReport(report) {
  const s = report.settings;
  const rowsOf = (target, window, load) => report.throughput.filter((r) => r.target === target && r.window === window && r.load === load && r.round !== undefined);
  const sideNames = s.AA ? { on: 'none (A/A)', small: '1,000 keys' } : { on: '1M keys', small: '1,000 keys' };
  const lines = [
    '# Duplicate detection: window on / off',
    '',
    `tandem ${report.versions.tandem}, node ${report.versions.node}, ${report.machine.cores} cores; client ${s.CLIENT}; ${s.DURATION} s loads; ${s.GENERATIONS ? `${s.GENERATIONS} generations of fresh brokers, started in alternating order, each ${s.ROUNDS} rounds` : `brokers built once (off first), ${s.ROUNDS} rounds`} with the sides taking turns; window prefilled with ${s.PREFILL} keys; ${s.PIN && s.PIN !== 'no' ? `brokers and client pinned to CPUs (${s.PIN})` : 'not pinned'}${s.AA ? '; **A/A: no window on either side**' : ''}${s.BROKER_ARGS ? `; every broker started with \`${s.BROKER_ARGS}\`` : ''}`,
    // A note added to a run's JSON afterwards (what a throwaway build changed, say).
    ...(report.annotation ? ['', `**Note on this run:** ${report.annotation}`] : []),
    '',
    'Ratios are window side / off side, paired by round: the geometric mean over all pairs [95% interval].',
    '',
    "| target | load | window | msgs/s off → window (median) | msgs/s ratio | by generation | primary CPU µs/msg off → window (median) | primary CPU per msg ratio | all brokers' CPU µs/msg off → window | all brokers' CPU per msg ratio |",
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const target of [...new Set(report.throughput.map((r) => r.target))]) {
    for (const load of s.LOADS ?? [...new Set(report.throughput.map((r) => r.load))]) {
      const off = rowsOf(target, 'off', load);
      for (const window of ['on', 'small']) {
        const side = rowsOf(target, window, load);
        if (side.length === 0) continue;
        const shown = (valueOf, scale, digits) => `${medianText(off, valueOf, scale, digits)} → ${medianText(side, valueOf, scale, digits)}`;
        const cluster = target !== 'standalone';
        lines.push(
          `| ${target} | ${load} | ${sideNames[window]} | ${shown(throughputOf)} | ${geoMeanOfPairs(pairLogs(side, off, throughputOf))} | ${byGenerationText(pairLogs(side, off, throughputOf))} | ${shown(primaryCpuPerMsg, 1e6, 1)} | ${geoMeanOfPairs(pairLogs(side, off, primaryCpuPerMsg))} | ${cluster ? shown(clusterCpuPerMsg, 1e6, 1) : ''} | ${cluster ? geoMeanOfPairs(pairLogs(side, off, clusterCpuPerMsg)) : ''} |`,
        );
      }
    }
  }
  lines.push('', `Memory per key (1M keys): ${report.memory?.bytesPerKey} bytes in the window's typed arrays; V8 heap grew ${report.memory?.heapUsedGrowthPerKey} bytes/key, RSS ${report.memory?.rssGrowthPerKey} bytes/key. A restart's share for 1M keys: ${report.memory?.loadCheckpointRowsMs} ms (${report.memory?.loadCheckpointRowsCpuMs} ms CPU) from the checkpoint's rows, ${report.memory?.replayedKeysToWindowMs} ms (${report.memory?.replayedKeysToWindowCpuMs} ms CPU) from 1M replayed records`, '');
  lines.push('| window | keys | listening after clean stop, ms (CPU ms) | after kill -9, ms (CPU ms) |', '|---|---|---|---|');
  for (const r of report.restart) lines.push(`| ${r.window} | ${r.keys} (${r.keysAfterRestart} after) | ${r.cleanStopToListeningMs} (${r.cleanStopCpuMs}) | ${r.killToListeningMs} (${r.killCpuMs}) |`);
  return `${lines.join('\n')}\n`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  if (!process.argv[2]) throw new Error('usage: node dedup-report.mjs results/dedup-<time>.json');
  process.stdout.write(renderDedupReport(JSON.parse(readFileSync(process.argv[2], 'utf8'))));
}

#!/usr/bin/env node
// Top self-time functions of a V8 .cpuprofile (node --cpu-prof), aggregated by
// function name + url + line, with totals per url group (tandem src, rhea, node).
//
//   node bench/cpuprofile-top.mjs FILE.cpuprofile [TOP=30]
import { readFileSync } from 'node:fs';

export function topSelf(profile, top = 30) {
  const { nodes, samples, timeDeltas } = profile;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const parentOf = new Map();
  for (const n of nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);
  const selfUs = new Map();
  // Sample i is charged timeDeltas[i+1] (the time until the next sample), as DevTools does.
  for (let i = 0; i < samples.length; i++) {
    const dt = timeDeltas[i + 1] ?? 0;
    selfUs.set(samples[i], (selfUs.get(samples[i]) ?? 0) + dt);
  }
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  const rows = new Map();
  const groups = new Map();
  const callers = new Map(); // key -> Map(caller key -> us)
  const keyOf = (f) => `${f.functionName || '(anonymous)'}\t${shortUrl(f.url)}${f.url ? `:${f.lineNumber + 1}` : ''}`;
  let idleUs = 0;
  for (const [id, us] of selfUs) {
    const f = byId.get(id).callFrame;
    const name = f.functionName || '(anonymous)';
    const key = keyOf(f);
    if (name === '(idle)') idleUs += us;
    rows.set(key, (rows.get(key) ?? 0) + us);
    const p = parentOf.get(id);
    if (p !== undefined) {
      const ck = keyOf(byId.get(p).callFrame);
      const m = callers.get(key) ?? new Map();
      m.set(ck, (m.get(ck) ?? 0) + us);
      callers.set(key, m);
    }
    const g = groupOf(f.url, name);
    groups.set(g, (groups.get(g) ?? 0) + us);
  }
  const pct = (us) => Math.round((us / total) * 1000) / 10;
  const busy = total - idleUs;
  const busyPct = (us) => Math.round((us / busy) * 1000) / 10;
  return {
    totalMs: Math.round(total / 1000),
    busyMs: Math.round(busy / 1000),
    groups: [...groups].sort((a, b) => b[1] - a[1]).map(([group, us]) => ({ group, pct: pct(us), busyPct: group === '(idle)' ? NaN : busyPct(us) })),
    top: [...rows]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([key, us]) => {
        const [fn, where] = key.split('\t');
        const topCallers = fn === '(idle)' ? [] : [...(callers.get(key) ?? [])].sort((a, b) => b[1] - a[1]).slice(0, 2).map(([k, cus]) => `${k.replace('\t', ' ')} (${busyPct(cus)}%)`);
        return { fn, where, selfMs: Math.round(us / 1000), pct: pct(us), busyPct: fn === '(idle)' ? NaN : busyPct(us), callers: topCallers };
      }),
  };
}

/** Markdown: groups, then the top functions with % of all samples and % of busy (non-idle) time. */
export function formatTop(r) {
  const out = [`${r.totalMs} ms of samples, ${r.busyMs} ms busy (not idle)`, '', '| group | % of samples | % of busy |', '|---|---:|---:|'];
  for (const g of r.groups) out.push(`| ${g.group} | ${g.pct} | ${Number.isNaN(g.busyPct) ? '–' : g.busyPct} |`);
  out.push('', '| self % of busy | self % of samples | self ms | function | where | main callers (% of busy) |', '|---:|---:|---:|---|---|---|');
  for (const t of r.top) out.push(`| ${Number.isNaN(t.busyPct) ? '–' : t.busyPct} | ${t.pct} | ${t.selfMs} | \`${t.fn}\` | ${t.where} | ${t.callers.join('<br>')} |`);
  return `${out.join('\n')}\n`;
}

function shortUrl(url) {
  if (!url) return '';
  return url
    .replace(/^file:\/\//, '')
    .replace(/^.*\/node_modules\//, '')
    .replace(/^.*\/dist\//, 'dist/');
}

function groupOf(url, name) {
  if (!url) return name.startsWith('(') ? name : '(native / builtins)';
  if (url.includes('/node_modules/rhea/')) return 'rhea';
  if (url.includes('/node_modules/')) return `node_modules/${url.split('/node_modules/')[1].split('/')[0]}`;
  if (url.includes('/dist/')) return `tandem ${url.split('/dist/')[1].split('/')[0]}/`;
  if (url.startsWith('node:')) return 'node core';
  return url;
}

const invokedDirectly = process.argv[1] && new URL(import.meta.url).pathname === process.argv[1];
if (invokedDirectly) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: node bench/cpuprofile-top.mjs FILE.cpuprofile [TOP]\n');
    process.exit(2);
  }
  process.stdout.write(formatTop(topSelf(JSON.parse(readFileSync(file, 'utf8')), Number(process.argv[3] ?? 30))));
}

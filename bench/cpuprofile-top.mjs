#!/usr/bin/env node
// Top self-time functions of a V8 .cpuprofile (node --cpu-prof), aggregated by
// function name + url + line, with totals per url group (tandem src, rhea, node).
//
//   node bench/cpuprofile-top.mjs FILE.cpuprofile [TOP=30]
import { readFileSync } from 'node:fs';

export function topSelf(profile, top = 30) {
  const { nodes, samples, timeDeltas } = profile;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const selfUs = new Map();
  // Sample i is charged timeDeltas[i+1] (the time until the next sample), as DevTools does.
  for (let i = 0; i < samples.length; i++) {
    const dt = timeDeltas[i + 1] ?? 0;
    selfUs.set(samples[i], (selfUs.get(samples[i]) ?? 0) + dt);
  }
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  const rows = new Map();
  const groups = new Map();
  for (const [id, us] of selfUs) {
    const f = byId.get(id).callFrame;
    const url = shortUrl(f.url);
    const name = f.functionName || '(anonymous)';
    const key = `${name}\t${url}${f.url ? `:${f.lineNumber + 1}` : ''}`;
    rows.set(key, (rows.get(key) ?? 0) + us);
    const g = groupOf(f.url, name);
    groups.set(g, (groups.get(g) ?? 0) + us);
  }
  const pct = (us) => Math.round((us / total) * 1000) / 10;
  return {
    totalMs: Math.round(total / 1000),
    groups: [...groups].sort((a, b) => b[1] - a[1]).map(([group, us]) => ({ group, pct: pct(us) })),
    top: [...rows]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([key, us]) => {
        const [fn, where] = key.split('\t');
        return { fn, where, selfMs: Math.round(us / 1000), pct: pct(us) };
      }),
  };
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
  const r = topSelf(JSON.parse(readFileSync(file, 'utf8')), Number(process.argv[3] ?? 30));
  process.stdout.write(`${r.totalMs} ms of samples\n\nby group:\n`);
  for (const g of r.groups) process.stdout.write(`  ${String(g.pct).padStart(5)} %  ${g.group}\n`);
  process.stdout.write('\n| self % | self ms | function | where |\n|---:|---:|---|---|\n');
  for (const t of r.top) process.stdout.write(`| ${t.pct} | ${t.selfMs} | \`${t.fn}\` | ${t.where} |\n`);
}

// Scrape a broker's /metrics and read it as Prometheus' text format: HELP lines
// by metric name and samples by series (`name{label="v"}` as the broker wrote it).
export interface Scrape {
  text: string;
  help: Map<string, string>;
  samples: Map<string, number>;
}

export async function scrape(metricsPort: number): Promise<Scrape> {
  const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  const text = await res.text();
  const help = new Map<string, string>();
  const samples = new Map<string, number>();
  for (const line of text.split('\n')) {
    const h = /^# HELP (\S+) (.*)$/.exec(line);
    if (h) help.set(h[1]!, h[2]!);
    if (line === '' || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    samples.set(line.slice(0, cut), Number(line.slice(cut + 1)));
  }
  return { text, help, samples };
}

/** Names of the metric families a scrape holds (histograms also as name_bucket, _sum, _count). */
export function metricNames(s: Scrape): Set<string> {
  return new Set([...s.samples.keys()].map((k) => k.replace(/\{.*$/, '')));
}

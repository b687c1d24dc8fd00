// How figures read on the pages.

export function num(v: unknown): string {
  if (v === null || v === undefined || v === '') return '–';
  const n = Number(v);
  if (!Number.isFinite(n)) return String(v);
  return Number.isInteger(n) ? n.toLocaleString('en') : n.toLocaleString('en', { maximumFractionDigits: 1 });
}

export function bytes(v: unknown): string {
  if (v === null || v === undefined) return '–';
  let n = Number(v);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

export function seconds(v: unknown): string {
  if (v === null || v === undefined) return '–';
  const n = Number(v);
  return n < 10 ? `${n.toFixed(1)} s` : `${Math.round(n)} s`;
}

export function agoMs(v: unknown): string {
  if (v === null || v === undefined) return '–';
  const n = Number(v);
  return n < 1000 ? `${Math.round(n)} ms ago` : `${(n / 1000).toFixed(1)} s ago`;
}

export function yesNo(v: unknown): string {
  return v === true ? 'yes' : v === false ? 'no' : '–';
}

/** A class for a state word, e.g. state-active. */
export function stateClass(state: unknown): string {
  return `state state-${String(state ?? 'unknown').split(/\s/)[0]!.replace(/[^a-z-]/gi, '')}`;
}

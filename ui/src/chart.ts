// A small SVG line chart: a few series over the same time axis, scaled to their
// largest value. Enough for rates and lag over the last minutes, with no library.
import { svg } from './dom.js';

export interface Series {
  label: string;
  values: number[];
}

export function lineChart(series: Series[], options: { width?: number; height?: number; id?: string } = {}): SVGElement {
  const width = options.width ?? 480;
  const height = options.height ?? 120;
  const pad = 4;
  const top = 14;
  const n = Math.max(2, ...series.map((s) => s.values.length));
  const max = Math.max(1, ...series.flatMap((s) => s.values.filter(Number.isFinite)));
  const x = (i: number) => pad + (i * (width - 2 * pad)) / (n - 1);
  const y = (v: number) => height - pad - (Math.max(0, v) * (height - pad - top)) / max;
  const last = series[0]?.values[series[0].values.length - 1];
  return svg(
    'svg',
    { class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', id: options.id, 'data-last': last ?? '', 'data-max': max, 'data-samples': series[0]?.values.length ?? 0 },
    svg('text', { x: pad, y: 10 }, `max ${max.toLocaleString('en', { maximumFractionDigits: 1 })}`),
    series.map((s, k) => {
      const offset = n - s.values.length;
      const points = s.values.map((v, i) => `${x(i + offset).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
      return svg('polyline', { class: `s${k}`, points }, svg('title', {}, s.label));
    }),
  );
}

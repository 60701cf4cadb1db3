/**
 * The latency-versus-throughput plot of a batching sweep as a self-contained SVG (hand-written,
 * no dependency): x = throughput (requests/s), y = p99 latency (ms), one line per series (with and
 * without batching; the SLO search's recommended and unbatched candidates when there was a search)
 * and the p99 target as a dashed line, drawn with report/svg-plot's pieces. Pure function of the
 * result. May import: report/svg-plot, serve (types, describeSetting).
 */
import type { LoadMeasurement } from '../serve/load-generator.js';
import { describeSetting } from '../serve/slo-search.js';
import type { BatchingSweepResult } from '../serve/sweep.js';
import { axes, coordinate as f, escapeXml, horizontalGridLine, niceTicks, plotArea, referenceLine, svgEnd, svgStart } from './svg-plot.js';

export { niceTicks } from './svg-plot.js';

export interface PlotSeries {
  label: string;
  /** In load order (rising rate or concurrency), as perf_analyzer plots them; `load` labels the point. */
  points: { throughput: number; p99: number; load?: string }[];
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];

function tickLabel(v: number): string {
  if (v === 0) return '0';
  if (Math.abs(v) >= 1000) return `${Number((v / 1000).toPrecision(3))}k`;
  return String(Number(v.toPrecision(3)));
}

const pointsOf = (ms: LoadMeasurement[]): PlotSeries['points'] =>
  ms
    .filter((m) => Number.isFinite(m.throughput) && Number.isFinite(m.latencyMs.p99))
    .map((m) => ({ throughput: m.throughput, p99: m.latencyMs.p99, load: shortLoad(m.load) }));

/** 'c=8' or '400/s': short enough to sit beside a point. */
function shortLoad(load: LoadMeasurement['load']): string {
  return load.kind === 'concurrency' ? `c=${load.concurrency}` : `${load.rate}/s`;
}

/** The series a sweep result plots. */
export function sweepSeries(result: BatchingSweepResult): PlotSeries[] {
  const series: PlotSeries[] = [];
  if (result.rows.length) {
    series.push({ label: 'dynamic batching', points: pointsOf(result.rows.map((r) => r.batched)) });
    const unb = result.rows.flatMap((r) => (r.unbatched ? [r.unbatched] : []));
    if (unb.length) series.push({ label: 'no batching', points: pointsOf(unb) });
  }
  const slo = result.slo;
  if (slo) {
    if (slo.best) {
      const c = slo.candidates.find((x) => x.setting === slo.best!.setting);
      if (c) series.push({ label: `recommended: ${describeSetting(c.setting)}`, points: pointsOf(c.points) });
    }
    const unbatched = slo.candidates.filter((c) => c.setting.maxBatchSize <= 1);
    for (const c of unbatched.slice(0, 2)) series.push({ label: `search: ${describeSetting(c.setting)}`, points: pointsOf(c.points) });
  }
  return series.filter((s) => s.points.length > 0);
}

export function renderLatencyThroughputSvg(series: PlotSeries[], options: { title?: string; sloP99Ms?: number; width?: number; height?: number } = {}): string {
  const area = plotArea(options.width ?? 720, options.height ?? 460, { left: 70, right: 20, top: 40, bottom: 60 });
  const { margin: m, w, h } = area;
  const all = series.flatMap((s) => s.points);
  const maxX = Math.max(1, ...all.map((p) => p.throughput));
  // Keep the plot readable when an overloaded point's latency explodes: cap at 4x the target.
  const cap = options.sloP99Ms ? options.sloP99Ms * 4 : Infinity;
  const maxY = Math.max(options.sloP99Ms ?? 0, ...all.map((p) => Math.min(p.p99, cap)), 1e-3);
  const xt = niceTicks(maxX);
  const yt = niceTicks(maxY);
  const xMax = xt[xt.length - 1]!;
  const yMax = yt[yt.length - 1]!;
  const X = (v: number): number => m.left + (v / xMax) * w;
  const Y = (v: number): number => m.top + h - (Math.min(v, yMax) / yMax) * h;
  const out = svgStart(area, options.title);
  for (const v of xt) {
    out.push(`<line x1="${f(X(v))}" y1="${m.top}" x2="${f(X(v))}" y2="${m.top + h}" stroke="#eee"/>`);
    out.push(`<text x="${f(X(v))}" y="${m.top + h + 18}" text-anchor="middle">${tickLabel(v)}</text>`);
  }
  for (const v of yt) out.push(...horizontalGridLine(area, Y(v), tickLabel(v)));
  out.push(...axes(area, 'throughput (requests/s)', 'p99 latency (ms)'));
  if (options.sloP99Ms !== undefined) out.push(...referenceLine(area, Y(options.sloP99Ms), `p99 target ${options.sloP99Ms} ms`));
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length]!;
    // Load order, not throughput order: past saturation throughput can fall as load rises, and the
    // curve should show that rather than zigzag.
    const pts = s.points;
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map((p) => `${f(X(p.throughput))},${f(Y(p.p99))}`).join(' ')}"/>`);
    for (const p of pts) {
      out.push(
        `<circle cx="${f(X(p.throughput))}" cy="${f(Y(p.p99))}" r="3.5" fill="${color}"><title>${escapeXml(`${s.label}${p.load ? ` at ${p.load}` : ''}: ${p.throughput.toFixed(1)} req/s, p99 ${p.p99.toFixed(3)} ms`)}</title></circle>`,
      );
      if (p.load) out.push(`<text x="${f(X(p.throughput) + 6)}" y="${f(Y(p.p99) - 6)}" font-size="11" fill="${color}">${escapeXml(p.load)}</text>`);
    }
    const ly = m.top + 8 + i * 18;
    out.push(`<rect x="${m.left + 12}" y="${ly - 8}" width="14" height="4" fill="${color}"/>`);
    out.push(`<text x="${m.left + 32}" y="${ly}">${escapeXml(s.label)}</text>`);
  });
  return svgEnd(out);
}

/** The plot for a sweep result. */
export function renderBatchingPlot(result: BatchingSweepResult): string {
  return renderLatencyThroughputSvg(sweepSeries(result), { title: `${result.model}: p99 latency vs throughput`, sloP99Ms: result.slo?.sloP99Ms });
}

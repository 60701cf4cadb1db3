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
import {
  axes,
  coordinate as f,
  escapeXml,
  horizontalGridLine,
  legend,
  legendHeight,
  niceScale,
  placeLabels,
  plotArea,
  referenceLabelBox,
  referenceLine,
  svgEnd,
  svgStart,
  tickText,
  verticalGridLines,
  type PointLabel,
} from './svg-plot.js';

export { niceTicks } from './svg-plot.js';

export interface PlotSeries {
  label: string;
  /** In load order (rising rate or concurrency), as perf_analyzer plots them; `load` labels the point. */
  points: { throughput: number; p99: number; load?: string }[];
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];

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
  const width = options.width ?? 720;
  const entries = series.map((s, i) => ({ label: s.label, color: COLORS[i % COLORS.length]! }));
  const area = plotArea(width, options.height ?? 460, { left: 70, right: 20, top: 40, bottom: 66 + legendHeight(width, 70, entries) });
  const { margin: m, w, h } = area;
  const all = series.flatMap((s) => s.points);
  const maxX = Math.max(1, ...all.map((p) => p.throughput));
  // Keep the plot readable when an overloaded point's latency explodes: cap at 4x the target.
  const cap = options.sloP99Ms ? options.sloP99Ms * 4 : Infinity;
  const maxY = Math.max(options.sloP99Ms ?? 0, ...all.map((p) => Math.min(p.p99, cap)), 1e-3);
  const xs = niceScale(0, maxX);
  const ys = niceScale(0, maxY);
  const X = (v: number): number => m.left + (v / xs.max) * w;
  const Y = (v: number): number => m.top + h - (Math.min(v, ys.max) / ys.max) * h;
  const out = svgStart(area, options.title);
  out.push(
    ...verticalGridLines(
      area,
      xs.ticks.map((v) => ({ x: X(v), label: tickText(v, xs.step) })),
    ),
  );
  for (const v of ys.ticks) out.push(...horizontalGridLine(area, Y(v), tickText(v, ys.step)));
  out.push(...axes(area, 'throughput (requests/s)', 'p99 latency (ms)'));
  if (options.sloP99Ms !== undefined) out.push(...referenceLine(area, Y(options.sloP99Ms), `p99 target ${options.sloP99Ms} ms`));
  const labels: PointLabel[] = [];
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length]!;
    // Load order, not throughput order: past saturation throughput can fall as load rises, and the
    // curve should show that rather than zigzag.
    const pts = s.points;
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map((p) => `${f(X(p.throughput))},${f(Y(p.p99))}`).join(' ')}"/>`);
    for (const p of pts) {
      out.push(
        `<circle cx="${f(X(p.throughput))}" cy="${f(Y(p.p99))}" r="3.5" fill="${color}" data-series="${escapeXml(s.label)}" data-throughput="${p.throughput}" data-p99="${p.p99}"><title>${escapeXml(`${s.label}${p.load ? ` at ${p.load}` : ''}: ${p.throughput.toFixed(1)} req/s, p99 ${p.p99.toFixed(3)} ms`)}</title></circle>`,
      );
      if (p.load) labels.push({ x: X(p.throughput), y: Y(p.p99), text: p.load, color });
    }
  });
  const avoid = options.sloP99Ms !== undefined ? [referenceLabelBox(area, Y(options.sloP99Ms), `p99 target ${options.sloP99Ms} ms`)] : [];
  const placed = placeLabels(labels, { x0: m.left + 2, y0: m.top + 2, x1: m.left + w - 2, y1: m.top + h - 2 }, { pointRadius: 3.5, avoid });
  out.push(...placed.svg);
  out.push(...legend(area, placed.hidden > 0 ? [...entries, { label: `${placed.hidden} load label(s) hidden: hover a point`, color: 'none' }] : entries));
  return svgEnd(out);
}

/** The plot for a sweep result. */
export function renderBatchingPlot(result: BatchingSweepResult): string {
  return renderLatencyThroughputSvg(sweepSeries(result), { title: `${result.model}: p99 latency vs throughput`, sloP99Ms: result.slo?.sloP99Ms });
}

/**
 * The speed-up versus fidelity plot of `model-opt optimize` as a self-contained SVG (the style of
 * report/batching-plot.ts): x = fidelity (accuracy drop in points when the data has labels, else
 * the worst SQNR in dB, capped), y = median speed-up over FP32 with its 95% interval as a bar, one
 * point per measured candidate, FP32 at (0 or the cap, 1.0), the Pareto front (no other candidate
 * both faster and closer to FP32) as a line, and the chosen candidate ringed. Pure.
 * May import: report/svg-plot (the plot's frame), app result types.
 */
import type { OptimizeResult } from '../app/optimize.js';
import {
  axes,
  coordinate as f,
  escapeXml as esc,
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
} from './svg-plot.js';

/** SQNR above this reads as 'as good as FP32' on the plot. */
const SQNR_CAP_DB = 60;

export interface PlotPoint {
  name: string;
  /** Higher is better on both axes: fidelity (minus the drop, or SQNR) and speed-up. */
  fidelity: number;
  speedup: number;
  low: number;
  high: number;
  chosen: boolean;
}

/** The points of the plot; `fidelity` is -drop (pt) with labels, else min(SQNR, cap). */
export function plotPoints(result: OptimizeResult): { points: PlotPoint[]; axis: string; unit: 'pt' | 'dB' } {
  const labels = result.candidates.some((c) => c.fidelity?.accuracyDropPoints !== null && c.fidelity?.accuracyDropPoints !== undefined);
  const points: PlotPoint[] = [{ name: 'fp32', fidelity: labels ? 0 : SQNR_CAP_DB, speedup: 1, low: 1, high: 1, chosen: result.chosen === 'fp32' }];
  for (const c of result.candidates) {
    // A candidate timed but not scored (it could not be chosen) has no fidelity to place it by.
    if (!c.speedup || !c.fidelity || c.fidelity.samples === 0) continue;
    const f = labels ? -(c.fidelity.accuracyDropPoints ?? 0) : Math.min(SQNR_CAP_DB, c.fidelity.sqnrDb ?? SQNR_CAP_DB);
    points.push({ name: c.name, fidelity: f, speedup: c.speedup.estimate, low: c.speedup.low, high: c.speedup.high, chosen: c.status === 'chosen' });
  }
  return { points, axis: labels ? 'accuracy change vs FP32 (pt)' : `worst-output SQNR vs FP32 (dB, capped at ${SQNR_CAP_DB})`, unit: labels ? 'pt' : 'dB' };
}

/** Points no other point dominates (at least as good on both axes, better on one), by fidelity. */
export function paretoFront(points: readonly PlotPoint[]): PlotPoint[] {
  const front = points.filter(
    (p) => !points.some((q) => q !== p && q.fidelity >= p.fidelity && q.speedup >= p.speedup && (q.fidelity > p.fidelity || q.speedup > p.speedup)),
  );
  return front.sort((a, b) => a.fidelity - b.fidelity);
}

const FRONT = '#2ca02c';
const CHOSEN = '#d62728';
const OTHER = '#1f77b4';

export function renderOptimizePlot(result: OptimizeResult, options: { width?: number; height?: number } = {}): string {
  const width = options.width ?? 720;
  const entries = [
    { label: 'Pareto front', color: FRONT },
    { label: 'candidate (95% interval)', color: OTHER },
    { label: 'written', color: CHOSEN, ring: true },
  ];
  const area = plotArea(width, options.height ?? 480, { left: 78, right: 30, top: 40, bottom: 66 + legendHeight(width, 78, entries) });
  const { margin: m, w, h } = area;
  const { points, axis, unit } = plotPoints(result);
  // A little room past the outermost points, so no mark sits on an edge and labels have space.
  const padded = (lo: number, hi: number, share: number): [number, number] => [lo - (hi - lo) * share, hi + (hi - lo) * share];
  const xs = niceScale(...padded(Math.min(...points.map((p) => p.fidelity)), Math.max(...points.map((p) => p.fidelity)), 0.08));
  const ys = niceScale(...padded(Math.min(1, ...points.map((p) => p.low)), Math.max(1, ...points.map((p) => p.high)), 0.04));
  const X = (v: number): number => m.left + ((v - xs.min) / (xs.max - xs.min)) * w;
  const Y = (v: number): number => m.top + h - ((Math.min(Math.max(v, ys.min), ys.max) - ys.min) / (ys.max - ys.min)) * h;
  const out = svgStart(area, `${result.input.path}: speed-up vs fidelity (batch ${result.settings.batchSize ?? '-'}, ${result.settings.threads} thread(s))`);
  for (const v of ys.ticks) out.push(...horizontalGridLine(area, Y(v), tickText(v, ys.step, 'x')));
  out.push(
    ...verticalGridLines(
      area,
      xs.ticks.map((v) => ({ x: X(v), label: tickText(v, xs.step, ` ${unit}`) })),
    ),
  );
  out.push(...referenceLine(area, Y(1), 'FP32 (1.0x)'));
  out.push(...axes(area, `${esc(axis)}: right is ${unit === 'pt' ? 'more accurate' : 'closer to FP32'}`, 'speed-up over FP32 (median, 95% interval)'));
  const front = paretoFront(points);
  out.push(`<polyline fill="none" stroke="${FRONT}" stroke-width="2" points="${front.map((p) => `${f(X(p.fidelity))},${f(Y(p.speedup))}`).join(' ')}"/>`);
  for (const p of points) {
    const color = p.chosen ? CHOSEN : OTHER;
    const data = `data-name="${esc(p.name)}" data-speedup="${p.speedup}" data-low="${p.low}" data-high="${p.high}" data-fidelity="${p.fidelity}"`;
    out.push(`<line x1="${f(X(p.fidelity))}" y1="${f(Y(p.low))}" x2="${f(X(p.fidelity))}" y2="${f(Y(p.high))}" stroke="${color}"/>`);
    out.push(
      `<circle cx="${f(X(p.fidelity))}" cy="${f(Y(p.speedup))}" r="4" fill="${color}" ${data}><title>${esc(`${p.name}: ${p.speedup.toFixed(2)}x [${p.low.toFixed(2)}, ${p.high.toFixed(2)}], ${axis} ${p.fidelity.toFixed(2)} ${unit}`)}</title></circle>`,
    );
    if (p.chosen) out.push(`<circle cx="${f(X(p.fidelity))}" cy="${f(Y(p.speedup))}" r="8" fill="none" stroke="${color}" stroke-width="2"/>`);
  }
  const labels = placeLabels(
    points.map((p) => ({ x: X(p.fidelity), y: Y(p.speedup), text: p.name, color: p.chosen ? CHOSEN : OTHER })),
    { x0: m.left + 2, y0: m.top + 2, x1: m.left + w - 2, y1: m.top + h - 2 },
    { pointRadius: 8, avoid: [referenceLabelBox(area, Y(1), 'FP32 (1.0x)')] },
  );
  out.push(...labels.svg);
  out.push(...legend(area, labels.hidden > 0 ? [...entries, { label: `${labels.hidden} label(s) hidden: hover a point`, color: 'none' }] : entries));
  return svgEnd(out);
}

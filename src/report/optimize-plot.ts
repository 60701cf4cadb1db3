/**
 * The speed-up versus fidelity plot of `model-opt optimize` as a self-contained SVG (the style of
 * report/batching-plot.ts): x = fidelity (accuracy drop in points when the data has labels, else
 * the worst SQNR in dB, capped), y = median speed-up over FP32 with its 95% interval as a bar, one
 * point per measured candidate, FP32 at (0 or the cap, 1.0), the Pareto front (no other candidate
 * both faster and closer to FP32) as a line, and the chosen candidate ringed. Pure.
 * May import: report/svg-plot (the plot's frame), app result types.
 */
import type { OptimizeResult } from '../app/optimize.js';
import { axes, coordinate as f, escapeXml as esc, horizontalGridLine, niceTicks, plotArea, referenceLine, svgEnd, svgStart } from './svg-plot.js';

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
export function plotPoints(result: OptimizeResult): { points: PlotPoint[]; axis: string } {
  const labels = result.candidates.some((c) => c.fidelity?.accuracyDropPoints !== null && c.fidelity?.accuracyDropPoints !== undefined);
  const points: PlotPoint[] = [{ name: 'fp32', fidelity: labels ? 0 : SQNR_CAP_DB, speedup: 1, low: 1, high: 1, chosen: result.chosen === 'fp32' }];
  for (const c of result.candidates) {
    if (!c.speedup || !c.fidelity) continue;
    const f = labels ? -(c.fidelity.accuracyDropPoints ?? 0) : Math.min(SQNR_CAP_DB, c.fidelity.sqnrDb ?? SQNR_CAP_DB);
    points.push({ name: c.name, fidelity: f, speedup: c.speedup.estimate, low: c.speedup.low, high: c.speedup.high, chosen: c.status === 'chosen' });
  }
  return { points, axis: labels ? 'accuracy change vs FP32 (points)' : `worst-output SQNR vs FP32 (dB, capped at ${SQNR_CAP_DB})` };
}

/** Points no other point dominates (at least as good on both axes, better on one), by fidelity. */
export function paretoFront(points: readonly PlotPoint[]): PlotPoint[] {
  const front = points.filter(
    (p) => !points.some((q) => q !== p && q.fidelity >= p.fidelity && q.speedup >= p.speedup && (q.fidelity > p.fidelity || q.speedup > p.speedup)),
  );
  return front.sort((a, b) => a.fidelity - b.fidelity);
}

export function renderOptimizePlot(result: OptimizeResult, options: { width?: number; height?: number } = {}): string {
  const area = plotArea(options.width ?? 720, options.height ?? 460, { left: 70, right: 30, top: 40, bottom: 60 });
  const { margin: m, w, h } = area;
  const { points, axis } = plotPoints(result);
  const fs = points.map((p) => p.fidelity);
  let minX = Math.min(...fs);
  let maxX = Math.max(...fs);
  if (maxX - minX < 1e-9) [minX, maxX] = [minX - 1, maxX + 1];
  const pad = (maxX - minX) * 0.08;
  [minX, maxX] = [minX - pad, maxX + pad];
  const yt = niceTicks(Math.max(1.2, ...points.map((p) => p.high)));
  const yMax = yt[yt.length - 1]!;
  const X = (v: number): number => m.left + ((v - minX) / (maxX - minX)) * w;
  const Y = (v: number): number => m.top + h - (Math.min(v, yMax) / yMax) * h;
  const out = svgStart(area, `${result.input.path}: speed-up vs fidelity (batch ${result.settings.batchSize ?? '-'}, ${result.settings.threads} thread(s))`);
  for (const v of yt) out.push(...horizontalGridLine(area, Y(v), `${Number(v.toPrecision(3))}x`));
  for (let i = 0; i <= 5; i++) {
    const v = minX + ((maxX - minX) * i) / 5;
    out.push(`<text x="${f(X(v))}" y="${m.top + h + 18}" text-anchor="middle">${Number(v.toPrecision(3))}</text>`);
  }
  out.push(...referenceLine(area, Y(1), 'FP32 (1.0x)'));
  out.push(...axes(area, `${esc(axis)} (right is closer to FP32)`, 'speed-up over FP32 (median, 95% interval)'));
  const front = paretoFront(points);
  out.push(`<polyline fill="none" stroke="#2ca02c" stroke-width="2" points="${front.map((p) => `${f(X(p.fidelity))},${f(Y(p.speedup))}`).join(' ')}"/>`);
  for (const p of points) {
    const color = p.chosen ? '#d62728' : '#1f77b4';
    out.push(`<line x1="${f(X(p.fidelity))}" y1="${f(Y(p.low))}" x2="${f(X(p.fidelity))}" y2="${f(Y(p.high))}" stroke="${color}"/>`);
    out.push(
      `<circle cx="${f(X(p.fidelity))}" cy="${f(Y(p.speedup))}" r="4" fill="${color}"><title>${esc(`${p.name}: ${p.speedup.toFixed(2)}x [${p.low.toFixed(2)}, ${p.high.toFixed(2)}], ${axis} ${p.fidelity.toFixed(2)}`)}</title></circle>`,
    );
    if (p.chosen) out.push(`<circle cx="${f(X(p.fidelity))}" cy="${f(Y(p.speedup))}" r="8" fill="none" stroke="${color}" stroke-width="2"/>`);
    out.push(`<text x="${f(X(p.fidelity) + 7)}" y="${f(Y(p.speedup) - 7)}" font-size="11" fill="${color}">${esc(p.name)}</text>`);
  }
  out.push(`<rect x="${m.left + 12}" y="${m.top + 4}" width="14" height="4" fill="#2ca02c"/><text x="${m.left + 32}" y="${m.top + 10}">Pareto front</text>`);
  out.push(
    `<circle cx="${m.left + 19}" cy="${m.top + 24}" r="6" fill="none" stroke="#d62728" stroke-width="2"/><text x="${m.left + 32}" y="${m.top + 28}">written</text>`,
  );
  return svgEnd(out);
}

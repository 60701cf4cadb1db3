/**
 * Plots with one row per item and a value axis along x, as self-contained SVG drawn with
 * report/svg-plot's pieces: horizontal bars (per-node sensitivity, per-layer sparsity), intervals
 * around an estimate with a reference line (speed-ups with their 95% intervals), and box plots
 * (latency distributions: quartile box, median, whiskers from min to p99, the max as a dot). Row
 * labels sit left of the axis, truncated with an ellipsis past `MAX_LABEL` characters (the full
 * name in the row's tooltip). Every mark carries its numbers as data-* attributes, so a test (or a
 * script) can read the values a plot shows. Pure.
 * May import: report/svg-plot.
 */
import {
  coordinate as f,
  escapeXml as esc,
  legend,
  legendHeight,
  logScale,
  logTickText,
  niceScale,
  plotArea,
  svgEnd,
  svgStart,
  textWidth,
  tickText,
  verticalGridLines,
  type NiceScale,
  type PlotArea,
} from './svg-plot.js';

/** Characters of a row label shown before it is cut with '…'. */
const MAX_LABEL = 32;
const ROW = 26;
const BLUE = '#1f77b4';
const RED = '#d62728';
const GREY = '#555';
/** The legend's first baseline under the row plot's area (the x title sits at 38). */
const LEGEND_BELOW = 58;

const shortLabel = (s: string): string => ([...s].length > MAX_LABEL ? `${[...s].slice(0, MAX_LABEL - 1).join('')}…` : s);

interface Frame {
  area: PlotArea;
  scale: NiceScale;
  X: (v: number) => number;
  /** The centre line of row i. */
  rowY: (i: number) => number;
  out: string[];
}

/**
 * The drawing for `labels.length` rows over [lo, hi]: the width given, the left margin sized to
 * the longest label, a title, vertical grid lines with unit ticks, the axis line and its title,
 * and room below for the legend.
 */
function frame(
  labels: readonly string[],
  lo: number,
  hi: number,
  options: { title: string; xTitle: string; unit: string; width?: number; legend?: readonly { label: string }[]; rightMargin?: number; log?: boolean },
): Frame {
  const width = options.width ?? 720;
  const left = Math.min(280, Math.max(60, ...labels.map((l) => textWidth(shortLabel(l), 12) + 16)));
  const bottom = 52 + (options.legend?.length ? legendHeight(width, left, options.legend) + 10 : 0);
  const height = 40 + labels.length * ROW + bottom;
  const area = plotArea(width, height, { left, right: options.rightMargin ?? 24, top: 40, bottom });
  const count = Math.max(3, Math.min(8, Math.floor(area.w / 90)));
  const scale = options.log ? logScale(lo, hi, count) : niceScale(lo, hi, count);
  const at = options.log ? Math.log10 : (v: number) => v;
  const X = (v: number): number => left + ((at(Math.min(Math.max(v, scale.min), scale.max)) - at(scale.min)) / (at(scale.max) - at(scale.min))) * area.w;
  const { margin: m, w, h } = area;
  const out = svgStart(area, options.title);
  out.push(
    ...verticalGridLines(
      area,
      scale.ticks.map((v) => ({ x: X(v), label: options.log ? logTickText(v, options.unit) : tickText(v, scale.step, options.unit) })),
    ),
  );
  out.push(`<line x1="${m.left}" y1="${m.top + h}" x2="${m.left + w}" y2="${m.top + h}" stroke="black"/>`);
  out.push(`<text x="${m.left + w / 2}" y="${m.top + h + 38}" text-anchor="middle">${esc(options.xTitle)}</text>`);
  labels.forEach((label, i) => {
    out.push(`<text x="${m.left - 8}" y="${f(m.top + i * ROW + ROW / 2 + 4)}" text-anchor="end"><title>${esc(label)}</title>${esc(shortLabel(label))}</text>`);
  });
  return { area, scale, X, rowY: (i) => m.top + i * ROW + ROW / 2, out };
}

export interface BarRow {
  label: string;
  value: number;
  /** The value as printed at the bar's end ('12.3 dB', 'inf'). */
  text: string;
  color?: string;
}

/** Horizontal bars from 0 (or the axis minimum) to each value, the value printed past the bar's end. */
export function renderBarPlot(rows: readonly BarRow[], options: { title: string; xTitle: string; unit: string; width?: number; max?: number }): string {
  const finite = rows.map((r) => r.value).filter(Number.isFinite);
  const hi = options.max ?? Math.max(0, ...finite);
  const lo = Math.min(0, ...finite);
  const fr = frame(
    rows.map((r) => r.label),
    lo,
    hi,
    { ...options, rightMargin: 70 },
  );
  const zero = fr.X(Math.max(0, fr.scale.min));
  rows.forEach((r, i) => {
    const end = fr.X(Number.isFinite(r.value) ? r.value : fr.scale.max);
    const y = fr.rowY(i);
    const [x0, x1] = end >= zero ? [zero, end] : [end, zero];
    fr.out.push(
      `<rect x="${f(x0)}" y="${f(y - 8)}" width="${f(Math.max(1, x1 - x0))}" height="16" fill="${r.color ?? BLUE}" data-label="${esc(r.label)}" data-value="${r.value}"><title>${esc(`${r.label}: ${r.text}`)}</title></rect>`,
    );
    fr.out.push(`<text x="${f(x1 + 5)}" y="${f(y + 4)}" font-size="11">${esc(r.text)}</text>`);
  });
  return svgEnd(fr.out);
}

export interface IntervalRow {
  label: string;
  estimate: number;
  low: number;
  high: number;
  /** Printed right of the plot ('1.62x [1.52, 1.68]'). */
  text: string;
  /** Drawn in red: the interval says worse than the reference. */
  worse?: boolean;
}

/** An estimate with its interval per row, a dashed reference line (1.0x: as fast as the baseline), the numbers right of the plot. */
export function renderIntervalPlot(
  rows: readonly IntervalRow[],
  options: { title: string; xTitle: string; unit: string; reference: number; referenceLabel: string; width?: number },
): string {
  const lo = Math.min(options.reference, ...rows.map((r) => r.low));
  const hi = Math.max(options.reference, ...rows.map((r) => r.high));
  const textW = Math.max(0, ...rows.map((r) => textWidth(r.text, 11))) + 16;
  const fr = frame(
    rows.map((r) => r.label),
    lo,
    hi,
    { ...options, rightMargin: Math.min(260, Math.max(24, textW)), legend: [{ label: options.referenceLabel }] },
  );
  const { margin: m, w, h } = fr.area;
  const ref = fr.X(options.reference);
  fr.out.push(`<line x1="${f(ref)}" y1="${m.top}" x2="${f(ref)}" y2="${m.top + h}" stroke="${GREY}" stroke-dasharray="6 4"/>`);
  rows.forEach((r, i) => {
    const y = fr.rowY(i);
    const color = r.worse ? RED : BLUE;
    const data = `data-label="${esc(r.label)}" data-estimate="${r.estimate}" data-low="${r.low}" data-high="${r.high}"`;
    fr.out.push(`<line x1="${f(fr.X(r.low))}" y1="${f(y)}" x2="${f(fr.X(r.high))}" y2="${f(y)}" stroke="${color}" stroke-width="2"/>`);
    for (const end of [r.low, r.high])
      fr.out.push(`<line x1="${f(fr.X(end))}" y1="${f(y - 5)}" x2="${f(fr.X(end))}" y2="${f(y + 5)}" stroke="${color}" stroke-width="2"/>`);
    fr.out.push(`<circle cx="${f(fr.X(r.estimate))}" cy="${f(y)}" r="4.5" fill="${color}" ${data}><title>${esc(`${r.label}: ${r.text}`)}</title></circle>`);
    fr.out.push(`<text x="${f(m.left + w + 10)}" y="${f(y + 4)}" font-size="11">${esc(r.text)}</text>`);
  });
  fr.out.push(...legend(fr.area, [{ label: options.referenceLabel, color: GREY }], LEGEND_BELOW));
  return svgEnd(fr.out);
}

export interface BoxRow {
  label: string;
  min: number;
  p25?: number;
  p50: number;
  p75?: number;
  p99: number;
  max: number;
}

/** Tails longer than this (largest p99 over the smallest median) put the box plot on a log axis: on a linear one the boxes would be a pixel wide. */
export const LOG_AXIS_RATIO = 20;

/**
 * A box per row: the box from p25 to p75 with the median as a line, whiskers from min to p99, the
 * max as a hollow dot (a triangle at the right edge when beyond the axis, which ends a little past
 * the largest p99 so one slow run does not squash every box). A log axis when the tail is long
 * (LOG_AXIS_RATIO), as on a loaded machine; the x title says so.
 */
export function renderBoxPlot(rows: readonly BoxRow[], options: { title: string; xTitle: string; unit: string; width?: number }): string {
  const hi = Math.max(...rows.map((r) => Math.min(r.max, r.p99 * 1.15)));
  const lo = Math.min(...rows.map((r) => r.min));
  const log = lo > 0 && Math.max(...rows.map((r) => r.p99)) / Math.min(...rows.map((r) => r.p50)) > LOG_AXIS_RATIO;
  const entries = [{ label: 'box p25-p75, line p50, whiskers min-p99, dot max' }];
  const fr = frame(
    rows.map((r) => r.label),
    log ? lo : Math.max(0, lo - (hi - lo) * 0.05),
    hi,
    { ...options, xTitle: log ? `${options.xTitle}, log scale` : options.xTitle, legend: entries, log },
  );
  rows.forEach((r, i) => {
    const y = fr.rowY(i);
    const data = `data-label="${esc(r.label)}" data-min="${r.min}" data-p50="${r.p50}" data-p99="${r.p99}" data-max="${r.max}"`;
    const tip = `<title>${esc(`${r.label}: min ${r.min.toPrecision(4)}, ${r.p25 !== undefined ? `p25 ${r.p25.toPrecision(4)}, ` : ''}p50 ${r.p50.toPrecision(4)}, ${r.p75 !== undefined ? `p75 ${r.p75.toPrecision(4)}, ` : ''}p99 ${r.p99.toPrecision(4)}, max ${r.max.toPrecision(4)}${options.unit}`)}</title>`;
    fr.out.push(`<g ${data}>${tip}`);
    fr.out.push(`<line x1="${f(fr.X(r.min))}" y1="${f(y)}" x2="${f(fr.X(r.p99))}" y2="${f(y)}" stroke="${BLUE}"/>`);
    for (const end of [r.min, r.p99]) fr.out.push(`<line x1="${f(fr.X(end))}" y1="${f(y - 5)}" x2="${f(fr.X(end))}" y2="${f(y + 5)}" stroke="${BLUE}"/>`);
    if (r.p25 !== undefined && r.p75 !== undefined) {
      fr.out.push(
        `<rect x="${f(fr.X(r.p25))}" y="${f(y - 8)}" width="${f(Math.max(1, fr.X(r.p75) - fr.X(r.p25)))}" height="16" fill="#c6dbef" stroke="${BLUE}"/>`,
      );
    }
    fr.out.push(`<line x1="${f(fr.X(r.p50))}" y1="${f(y - 9)}" x2="${f(fr.X(r.p50))}" y2="${f(y + 9)}" stroke="${RED}" stroke-width="2"/>`);
    if (r.max <= fr.scale.max) fr.out.push(`<circle cx="${f(fr.X(r.max))}" cy="${f(y)}" r="3" fill="white" stroke="${BLUE}"/>`);
    else {
      const x = fr.X(fr.scale.max);
      fr.out.push(`<path d="M${f(x - 7)},${f(y - 5)} L${f(x)},${f(y)} L${f(x - 7)},${f(y + 5)} Z" fill="${BLUE}"/>`);
    }
    fr.out.push('</g>');
  });
  fr.out.push(...legend(fr.area, [{ label: entries[0]!.label, color: RED }], LEGEND_BELOW));
  return svgEnd(fr.out);
}

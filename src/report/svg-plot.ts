/**
 * The pieces every SVG plot of model-opt is drawn from (report/batching-plot, report/optimize-plot):
 * the plot area and its margins, the document's start and end, round tick steps, horizontal
 * grid lines with their labels, a dashed reference line, the axes and their titles, XML
 * escaping, rounded scales over any range (niceScale, tickText: 0.05 steps print as 0.05, never
 * -0.0424), point labels placed where they overlap nothing (placeLabels) and a legend below the
 * plot area. Hand-written SVG, no dependency; pure.
 * May import: nothing.
 */

/** The drawing: the whole size, the margins around the plot area and the plot area's size. */
export interface PlotArea {
  width: number;
  height: number;
  margin: { left: number; right: number; top: number; bottom: number };
  /** Width and height inside the margins. */
  w: number;
  h: number;
}

export function plotArea(width: number, height: number, margin: PlotArea['margin']): PlotArea {
  return { width, height, margin, w: width - margin.left - margin.right, h: height - margin.top - margin.bottom };
}

/** A coordinate as written: one decimal. */
export const coordinate = (n: number): string => n.toFixed(1);

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Round tick steps: 1, 2, 5 x 10^k, about `count` ticks over [0, max] (niceScale from 0). */
export function niceTicks(max: number, count = 5): number[] {
  return max > 0 ? niceScale(0, max, count).ticks : [0, 1];
}

/** A rounded axis: ticks every `step` (1, 2 or 5 x 10^k) from `min` to `max`, both ticks, covering the data. */
export interface NiceScale {
  min: number;
  max: number;
  step: number;
  ticks: number[];
}

/** The 1-2-5 step nearest above `raw`. */
function niceStep(raw: number): number {
  const mag = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9))!;
}

/**
 * About `count` round ticks over [lo, hi] (any signs): the range widened outwards to whole steps.
 * A range of one value is widened to one step each side; non-finite ends give [0, 1].
 */
export function niceScale(lo: number, hi: number, count = 5): NiceScale {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return { min: 0, max: 1, step: 0.2, ticks: [0, 0.2, 0.4, 0.6, 0.8, 1] };
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi - lo < 1e-12 * Math.max(1, Math.abs(hi))) {
    const pad = lo === 0 ? 1 : niceStep(Math.abs(lo) / 10);
    [lo, hi] = [lo - pad, hi + pad];
  }
  const step = niceStep((hi - lo) / count);
  const min = Math.floor(lo / step + 1e-9) * step;
  const max = Math.ceil(hi / step - 1e-9) * step;
  const ticks: number[] = [];
  for (let i = 0; min + i * step <= max + step * 1e-9; i++) ticks.push(Number((min + i * step).toPrecision(12)));
  return { min: ticks[0]!, max: ticks[ticks.length - 1]!, step, ticks };
}

/**
 * A logarithmic axis over [lo, hi] (both above 0): from the 1-2-5 value at or below lo to the one
 * at or above hi, ticks at 1, 2 and 5 x 10^k (only 1 x 10^k when that would be more than `count`
 * + 3 ticks). `step` is 0: tick texts take their decimals from each tick (logTickText).
 */
export function logScale(lo: number, hi: number, count = 5): NiceScale {
  const first = Math.floor(Math.log10(lo));
  const last = Math.ceil(Math.log10(hi));
  const all = (mantissas: number[]) => {
    const out: number[] = [];
    for (let k = first; k <= last; k++) for (const m of mantissas) out.push(Number((m * 10 ** k).toPrecision(12)));
    return out;
  };
  const cover = (ticks: number[]) => {
    const below = ticks.filter((t) => t <= lo * (1 + 1e-9));
    const above = ticks.filter((t) => t >= hi * (1 - 1e-9));
    const min = below[below.length - 1] ?? ticks[0]!;
    const max = above[0] ?? ticks[ticks.length - 1]!;
    return ticks.filter((t) => t >= min && t <= max);
  };
  let ticks = cover(all([1, 2, 5]));
  if (ticks.length > count + 3) ticks = cover(all([1]));
  return { min: ticks[0]!, max: ticks[ticks.length - 1]!, step: 0, ticks };
}

/** A tick of a log axis: the decimals its own size needs (0.05, 0.1, 2, 50, 1k). */
export const logTickText = (v: number, unit = ''): string => tickText(v, 10 ** Math.floor(Math.log10(v) + 1e-9), unit);

/**
 * A tick's text with as many decimals as its step needs (step 0.05: '0.05', '-0.10'; step 200:
 * '400'; 1000 and up: '2k', '1.5k'), an optional unit, and never '-0'.
 */
export function tickText(v: number, step: number, unit = ''): string {
  const clean = Math.abs(v) < step * 1e-6 ? 0 : v;
  if (step >= 1000 && Math.abs(clean) >= 1000) return `${Number((clean / 1000).toPrecision(6))}k${unit}`;
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return `${clean.toFixed(decimals)}${unit}`;
}

/** A label to place beside the point (x, y) it names. */
export interface PointLabel {
  x: number;
  y: number;
  text: string;
  color: string;
}

/** Width of `text` at `fontSize` in sans-serif, estimated (no layout engine here): generous, so an estimate never overlaps. */
export const textWidth = (text: string, fontSize: number): number => [...text].length * fontSize * 0.62;

/** A rectangle in drawing coordinates (x0 < x1, y0 < y1). */
export interface Box {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

const overlaps = (a: Box, b: Box): boolean => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;

/**
 * Labels beside their points where they overlap no other label, no point (radius `pointRadius`),
 * nothing in `avoid` (other text on the plot) and stay inside `bounds`: right above, right below, left above, left below, above, below, in
 * that order; a label with no free place is left out (the point's tooltip and the page's tables
 * still name it). Returns the SVG text elements and how many were left out.
 */
export function placeLabels(
  labels: readonly PointLabel[],
  bounds: Box,
  options: { fontSize?: number; pointRadius?: number; avoid?: readonly Box[] } = {},
): { svg: string[]; hidden: number } {
  const size = options.fontSize ?? 11;
  const r = (options.pointRadius ?? 4) + 1;
  const taken: Box[] = [...labels.map((l) => ({ x0: l.x - r, y0: l.y - r, x1: l.x + r, y1: l.y + r })), ...(options.avoid ?? [])];
  const svg: string[] = [];
  let hidden = 0;
  for (const l of labels) {
    const w = textWidth(l.text, size);
    const places: [number, number, 'start' | 'end' | 'middle'][] = [
      [l.x + r + 2, l.y - r - 2, 'start'],
      [l.x + r + 2, l.y + r + size, 'start'],
      [l.x - r - 2, l.y - r - 2, 'end'],
      [l.x - r - 2, l.y + r + size, 'end'],
      [l.x, l.y - r - 4, 'middle'],
      [l.x, l.y + r + size + 2, 'middle'],
    ];
    const fits = places
      .map(([x, y, anchor]) => {
        const x0 = anchor === 'start' ? x : anchor === 'end' ? x - w : x - w / 2;
        return { x, y, anchor, box: { x0, y0: y - size, x1: x0 + w, y1: y + 3 } };
      })
      .find((p) => p.box.x0 >= bounds.x0 && p.box.x1 <= bounds.x1 && p.box.y0 >= bounds.y0 && p.box.y1 <= bounds.y1 && !taken.some((t) => overlaps(t, p.box)));
    if (!fits) {
      hidden++;
      continue;
    }
    taken.push(fits.box);
    svg.push(
      `<text x="${coordinate(fits.x)}" y="${coordinate(fits.y)}" text-anchor="${fits.anchor}" font-size="${size}" fill="${l.color}">${escapeXml(l.text)}</text>`,
    );
  }
  return { svg, hidden };
}

/**
 * A legend below the plot area (under the x axis title), entries side by side and wrapped to the
 * width: a short line or ring in the entry's colour, then its text, the first row's baseline `below`
 * the plot area. The area's bottom margin must leave `legendHeight(...)` under the axis title.
 */
export function legend(area: PlotArea, entries: readonly { label: string; color: string; ring?: boolean }[], below = 62): string[] {
  const out: string[] = [];
  const rows = legendRows(area, entries);
  rows.forEach((row, i) => {
    const y = area.margin.top + area.h + below + i * 18;
    for (const e of row) {
      out.push(
        e.ring
          ? `<circle cx="${coordinate(e.x + 7)}" cy="${y - 4}" r="5" fill="none" stroke="${e.color}" stroke-width="2"/>`
          : `<rect x="${coordinate(e.x)}" y="${y - 6}" width="14" height="4" fill="${e.color}"/>`,
      );
      out.push(`<text x="${coordinate(e.x + 20)}" y="${y}">${escapeXml(e.label)}</text>`);
    }
  });
  return out;
}

/** The legend's entries in rows that fit the drawing's width, each with its x. */
function legendRows(area: PlotArea, entries: readonly { label: string; color: string; ring?: boolean }[]) {
  const rows: { label: string; color: string; ring?: boolean; x: number }[][] = [[]];
  let x = area.margin.left;
  for (const e of entries) {
    const w = 20 + textWidth(e.label, 12) + 16;
    if (x + w > area.width - 8 && rows[rows.length - 1]!.length > 0) {
      rows.push([]);
      x = area.margin.left;
    }
    rows[rows.length - 1]!.push({ ...e, x });
    x += w;
  }
  return rows;
}

/** Rows the legend of `entries` takes at this drawing's width (for the bottom margin: 18 px each). */
export function legendHeight(width: number, marginLeft: number, entries: readonly { label: string }[]): number {
  const area = plotArea(width, 100, { left: marginLeft, right: 0, top: 0, bottom: 0 });
  return (
    legendRows(
      area,
      entries.map((e) => ({ ...e, color: '' })),
    ).length * 18
  );
}

/** The opening tag, a white background and, when given, the title centred above the plot area. */
export function svgStart(area: PlotArea, title?: string): string[] {
  const { width, height } = area;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    ...(title !== undefined ? [`<text x="${width / 2}" y="22" text-anchor="middle" font-size="15">${escapeXml(title)}</text>`] : []),
  ];
}

/** A light horizontal grid line at `y` across the plot area, its label left of the y axis. */
export function horizontalGridLine(area: PlotArea, y: number, label: string): string[] {
  const { margin: m, w } = area;
  return [
    `<line x1="${m.left}" y1="${coordinate(y)}" x2="${m.left + w}" y2="${coordinate(y)}" stroke="#eee"/>`,
    `<text x="${m.left - 8}" y="${coordinate(y + 4)}" text-anchor="end">${label}</text>`,
  ];
}

/** Where referenceLine's label lies (for placeLabels' `avoid`). */
export function referenceLabelBox(area: PlotArea, y: number, label: string): Box {
  const right = area.margin.left + area.w - 4;
  return { x0: right - textWidth(label, 12), y0: y - 5 - 12, x1: right, y1: y - 5 + 3 };
}

/** A dashed horizontal line at `y` (a target, a baseline), its label above its right end. */
export function referenceLine(area: PlotArea, y: number, label: string): string[] {
  const { margin: m, w } = area;
  return [
    `<line x1="${m.left}" y1="${coordinate(y)}" x2="${m.left + w}" y2="${coordinate(y)}" stroke="#555" stroke-dasharray="6 4"/>`,
    `<text x="${m.left + w - 4}" y="${coordinate(y - 5)}" text-anchor="end" fill="#555">${escapeXml(label)}</text>`,
  ];
}

/** Vertical grid lines at the x ticks with their labels under the axis. */
export function verticalGridLines(area: PlotArea, ticks: readonly { x: number; label: string }[]): string[] {
  const { margin: m, h } = area;
  return ticks.flatMap((t) => [
    `<line x1="${coordinate(t.x)}" y1="${m.top}" x2="${coordinate(t.x)}" y2="${m.top + h}" stroke="#eee"/>`,
    `<text x="${coordinate(t.x)}" y="${m.top + h + 18}" text-anchor="middle">${t.label}</text>`,
  ]);
}

/** The x and y axes along the bottom and left of the plot area, and their titles (already escaped): the x title under the tick labels, a legend (if any) under it. */
export function axes(area: PlotArea, xTitle: string, yTitle: string): string[] {
  const { margin: m, w, h } = area;
  return [
    `<line x1="${m.left}" y1="${m.top + h}" x2="${m.left + w}" y2="${m.top + h}" stroke="black"/>`,
    `<line x1="${m.left}" y1="${m.top}" x2="${m.left}" y2="${m.top + h}" stroke="black"/>`,
    `<text x="${m.left + w / 2}" y="${m.top + h + 38}" text-anchor="middle">${xTitle}</text>`,
    `<text x="18" y="${m.top + h / 2}" text-anchor="middle" transform="rotate(-90 18 ${m.top + h / 2})">${yTitle}</text>`,
  ];
}

/** The document: the lines drawn, the closing tag, a final newline. */
export function svgEnd(lines: readonly string[]): string {
  return `${[...lines, '</svg>'].join('\n')}\n`;
}

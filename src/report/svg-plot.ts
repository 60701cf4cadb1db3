/**
 * The pieces every SVG plot of model-opt is drawn from (report/batching-plot, report/optimize-plot):
 * the plot area and its margins, the document's start and end, round tick steps, horizontal
 * grid lines with their labels, a dashed reference line, the axes and their titles, and XML
 * escaping. Hand-written SVG, no dependency; pure.
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

/** Round tick steps: 1, 2, 5 x 10^k, about `count` ticks over [0, max]. */
export function niceTicks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  if (ticks[ticks.length - 1]! < max) ticks.push(Number((ticks[ticks.length - 1]! + step).toPrecision(12)));
  return ticks;
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

/** A dashed horizontal line at `y` (a target, a baseline), its label above its right end. */
export function referenceLine(area: PlotArea, y: number, label: string): string[] {
  const { margin: m, w } = area;
  return [
    `<line x1="${m.left}" y1="${coordinate(y)}" x2="${m.left + w}" y2="${coordinate(y)}" stroke="#555" stroke-dasharray="6 4"/>`,
    `<text x="${m.left + w - 4}" y="${coordinate(y - 5)}" text-anchor="end" fill="#555">${escapeXml(label)}</text>`,
  ];
}

/** The x and y axes along the bottom and left of the plot area, and their titles (already escaped). */
export function axes(area: PlotArea, xTitle: string, yTitle: string): string[] {
  const { height, margin: m, w, h } = area;
  return [
    `<line x1="${m.left}" y1="${m.top + h}" x2="${m.left + w}" y2="${m.top + h}" stroke="black"/>`,
    `<line x1="${m.left}" y1="${m.top}" x2="${m.left}" y2="${m.top + h}" stroke="black"/>`,
    `<text x="${m.left + w / 2}" y="${height - 18}" text-anchor="middle">${xTitle}</text>`,
    `<text x="18" y="${m.top + h / 2}" text-anchor="middle" transform="rotate(-90 18 ${m.top + h / 2})">${yTitle}</text>`,
  ];
}

/** The document: the lines drawn, the closing tag, a final newline. */
export function svgEnd(lines: readonly string[]): string {
  return `${[...lines, '</svg>'].join('\n')}\n`;
}

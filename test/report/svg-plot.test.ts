/**
 * The plot pieces (issue 34: optimize's plot had overlapping labels and ticks like -0.0424):
 * rounded scales over any range, tick texts with the decimals their step needs, labels placed
 * where they overlap nothing, and the row plots' marks at the values given.
 */
import { describe, expect, it } from 'vitest';
import { logScale, logTickText, niceScale, placeLabels, tickText, textWidth } from '../../src/report/svg-plot.js';
import { renderBarPlot, renderBoxPlot, renderIntervalPlot } from '../../src/report/row-plots.js';

describe('rounded scales and tick texts', () => {
  it('covers the data with 1-2-5 steps, ends on ticks, across zero', () => {
    // The optimize plot's case: accuracy changes from -0.0424 to +0.1 points.
    expect(niceScale(-0.0424, 0.1)).toEqual({ min: -0.05, max: 0.1, step: 0.05, ticks: [-0.05, 0, 0.05, 0.1] });
    expect(niceScale(0, 3200).ticks).toEqual([0, 1000, 2000, 3000, 4000]);
    expect(niceScale(0.93, 1.71).ticks).toEqual([0.8, 1, 1.2, 1.4, 1.6, 1.8]);
    expect(niceScale(-7, -3).ticks).toEqual([-7, -6, -5, -4, -3]);
  });

  it('widens a single value to a step each side, and falls back to [0, 1] for non-finite ends', () => {
    expect(niceScale(1, 1)).toMatchObject({ min: 0.9, max: 1.1 });
    expect(niceScale(0, 0)).toMatchObject({ min: -1, max: 1 });
    expect(niceScale(Number.NaN, 1)).toMatchObject({ min: 0, max: 1 });
  });

  it('prints as many decimals as the step needs, never -0, thousands as k, with a unit', () => {
    expect(niceScale(-0.0424, 0.1).ticks.map((v) => tickText(v, 0.05, ' pt'))).toEqual(['-0.05 pt', '0.00 pt', '0.05 pt', '0.10 pt']);
    expect(tickText(-1e-17, 0.2)).toBe('0.0');
    expect(tickText(1.2, 0.2, 'x')).toBe('1.2x');
    expect(tickText(400, 200)).toBe('400');
    expect(tickText(2000, 1000)).toBe('2k');
    expect(tickText(1500, 5000)).toBe('1.5k');
  });
});

describe('log axes (latency with a long tail)', () => {
  it('ticks at 1-2-5 x 10^k covering the range, only decades when those are too many; texts with their own decimals', () => {
    expect(logScale(0.062, 8.3).ticks).toEqual([0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10]);
    expect(logScale(0.3, 4000).ticks).toEqual([0.1, 1, 10, 100, 1000, 10000]);
    expect(logScale(0.062, 8.3).ticks.map((v) => logTickText(v, ' ms'))).toEqual(['0.05 ms', '0.1 ms', '0.2 ms', '0.5 ms', '1 ms', '2 ms', '5 ms', '10 ms']);
    expect(logTickText(2000)).toBe('2k');
  });

  it('the box plot goes logarithmic when the largest p99 is over 20x the smallest median, and says so', () => {
    const quiet = renderBoxPlot([{ label: 'a', min: 1, p25: 1.1, p50: 1.2, p75: 1.3, p99: 2, max: 3 }], { title: 't', xTitle: 'latency (ms)', unit: ' ms' });
    expect(quiet).toContain('>latency (ms)</text>');
    const loaded = renderBoxPlot([{ label: 'a', min: 0.06, p25: 0.07, p50: 0.08, p75: 0.1, p99: 6, max: 9 }], {
      title: 't',
      xTitle: 'latency (ms)',
      unit: ' ms',
    });
    expect(loaded).toContain('>latency (ms), log scale</text>');
    // The median at 0.08 on a 0.05..10 ms log axis: log(0.08/0.05) / log(10/0.05) of the width from the left.
    const ticks = [...loaded.matchAll(/<text x="([\d.]+)" y="[\d.]+" text-anchor="middle">([\d.]+) ms</g)].map((m) => [Number(m[1]), Number(m[2])] as const);
    expect([ticks[0]![1], ticks[ticks.length - 1]![1]]).toEqual([0.05, 10]);
    const median = Number(/<line x1="([\d.]+)" [^>]*stroke="#d62728"/.exec(loaded)![1]);
    const [x0, x1] = [ticks[0]![0], ticks[ticks.length - 1]![0]];
    expect(median).toBeCloseTo(x0 + (Math.log10(0.08 / 0.05) / Math.log10(10 / 0.05)) * (x1 - x0), 0);
  });
});

describe('labels placed where they overlap nothing', () => {
  /** The boxes of the placed labels, from their x, y and anchor (font size 11). */
  const boxes = (svg: string[]) =>
    svg.map((t) => {
      const [, x, y, anchor, text] = /x="([\d.-]+)" y="([\d.-]+)" text-anchor="(\w+)"[^>]*>([^<]*)</.exec(t)!;
      const w = textWidth(text!, 11);
      const x0 = anchor === 'start' ? Number(x) : anchor === 'end' ? Number(x) - w : Number(x) - w / 2;
      return { x0, x1: x0 + w, y0: Number(y) - 11, y1: Number(y) + 3 };
    });
  const overlap = (a: ReturnType<typeof boxes>[number], b: ReturnType<typeof boxes>[number]) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;

  it('three points on one spot get three places (right above, right below, left above)', () => {
    const bounds = { x0: 0, y0: 0, x1: 400, y1: 300 };
    const labels = ['fp32', 'fp32-optimized', 'int8-dynamic'].map((text) => ({ x: 200, y: 150, text, color: '#000' }));
    const placed = placeLabels(labels, bounds);
    expect(placed.hidden).toBe(0);
    const b = boxes(placed.svg);
    expect(placed.svg.map((s) => /text-anchor="(\w+)"/.exec(s)![1])).toEqual(['start', 'start', 'end']);
    for (let i = 0; i < b.length; i++) for (let j = i + 1; j < b.length; j++) expect(overlap(b[i]!, b[j]!)).toBe(false);
  });

  it('a crowd: every label placed overlaps no other, stays inside, and the rest are counted as hidden', () => {
    const bounds = { x0: 0, y0: 0, x1: 300, y1: 200 };
    const labels = Array.from({ length: 40 }, (_, i) => ({ x: 20 + (i % 8) * 35, y: 20 + Math.floor(i / 8) * 40, text: `candidate-${i}`, color: '#000' }));
    const placed = placeLabels(labels, bounds);
    const b = boxes(placed.svg);
    expect(b.length + placed.hidden).toBe(40);
    expect(placed.hidden).toBeGreaterThan(0);
    for (let i = 0; i < b.length; i++) {
      expect(b[i]!.x0).toBeGreaterThanOrEqual(0);
      expect(b[i]!.x1).toBeLessThanOrEqual(300);
      for (let j = i + 1; j < b.length; j++) expect(overlap(b[i]!, b[j]!)).toBe(false);
    }
  });

  it('keeps clear of the boxes it is told to avoid (a reference line label)', () => {
    const placed = placeLabels(
      [{ x: 100, y: 100, text: 'int8', color: '#000' }],
      { x0: 0, y0: 0, x1: 400, y1: 300 },
      { avoid: [{ x0: 100, y0: 80, x1: 200, y1: 99 }] },
    );
    expect(placed.svg[0]).toMatch(/text-anchor="start"/);
    expect(Number(/y="([\d.]+)"/.exec(placed.svg[0]!)![1])).toBeGreaterThan(100);
  });
});

describe('row plots', () => {
  it('bars, intervals and boxes at their values: x of a mark = left + (v - min) / (max - min) * width', () => {
    const bars = renderBarPlot(
      [
        { label: 'conv1', value: 20, text: '20.0 dB' },
        { label: 'fc', value: Number.POSITIVE_INFINITY, text: 'inf' },
      ],
      { title: 't', xTitle: 'dB', unit: ' dB', width: 720 },
    );
    // Scale 0..20 dB in steps of 5 (or 2): the finite bar fills the plot area; inf is drawn to the axis end.
    const widths = [...bars.matchAll(/<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"/g)].map((m) => Number(m[2]));
    expect(widths[0]).toBeCloseTo(widths[1]!, 1);
    expect(bars).toContain('data-value="Infinity"');
    const intervals = renderIntervalPlot([{ label: 'int8', estimate: 1.5, low: 1.4, high: 1.6, text: '1.50x [1.40, 1.60]' }], {
      title: 't',
      xTitle: 'x',
      unit: 'x',
      reference: 1,
      referenceLabel: 'as fast (1.0x)',
    });
    // Ticks 1.0x..1.6x: 1.0x at the left edge, the estimate at 5/6 of the width.
    const ticks = [...intervals.matchAll(/<text x="([\d.]+)" y="[\d.]+" text-anchor="middle">([\d.]+x)</g)].map((m) => [Number(m[1]), m[2]] as const);
    expect(ticks[0]![1]).toBe('1.0x');
    expect(ticks[ticks.length - 1]![1]).toBe('1.6x');
    const [x0, x1] = [ticks[0]![0], ticks[ticks.length - 1]![0]];
    const cx = Number(/<circle cx="([\d.]+)"/.exec(intervals)![1]);
    expect(cx).toBeCloseTo(x0 + ((1.5 - 1) / 0.6) * (x1 - x0), 0);
    const boxes = renderBoxPlot([{ label: 'a', min: 1, p25: 1.1, p50: 1.2, p75: 1.3, p99: 2, max: 10 }], { title: 't', xTitle: 'ms', unit: ' ms' });
    // The max lies past the axis (p99 x 1.15): drawn as a triangle at the edge, not as a dot.
    expect(boxes).toMatch(/<path d="M/);
    expect(boxes).not.toMatch(/<circle/);
  });
});

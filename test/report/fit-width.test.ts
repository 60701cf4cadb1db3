// Tables and prose on a terminal of a given width (report/fit.ts, report/wrap.ts): a table that fits
// stays as it is; a wider one first narrows its free-text columns, then leaves out the columns with
// the highest priority number (and names them), and stacks its rows when even the essential columns
// cannot fit; prose wraps at words with a hanging indent. Without a width nothing changes.
import { describe, expect, it } from 'vitest';
import { type FitColumn, fitTable, hiddenLine } from '../../src/report/fit.js';
import { displayWidth, fitText, wrapLine } from '../../src/report/wrap.js';

const long =
  '10 integer kernel(s), no DequantizeLinear -> float op left: INT8 should be faster here (small, narrow or SiLU-heavy models can still lose: confirm with --measure-speed or model-opt benchmark)';

const KEY_TEXT: FitColumn[] = [
  { head: '', priority: 0 },
  { head: 'int8', priority: 0, wrap: true, minWidth: 24 },
];
const KEY_ROWS = [
  ['nodes quantized', 'Conv 5, Add 2'],
  ['will it be faster?', long],
  ['left in FP32', 'stem.conv (reduction size 9)\nstem.pool (input is not quantized)'],
];

const widths = (s: string): number[] => s.split('\n').map(displayWidth);
/** The words of column `c` of a rendered table, in order. */
const words = (s: string, c: number): string[] =>
  s
    .split('\n')
    .filter((l) => l.startsWith('│'))
    .map((l) => l.split('│')[c + 1]!.trim())
    .join(' ')
    .split(/\s+/)
    .filter(Boolean);

/** A benchmark-like table: 6 columns, 2 rows. */
const GRID: FitColumn[] = [
  { head: 'model', priority: 0 },
  { head: 'accuracy', priority: 1, wrap: true, minWidth: 12 },
  { head: 'p50 ms', priority: 2 },
  { head: 'p90 ms', priority: 5 },
  { head: 'speed-up', priority: 0, wrap: true, minWidth: 10 },
  { head: 'load ms', priority: 4 },
];
const GRID_ROWS = [
  ['fp32.onnx', '91.55%', '0.111', '0.280', 'baseline', '8.36'],
  ['int8.onnx', '91.50% (-0.05 pt [-0.20, +0.10], p=0.75)', '0.069', '0.090', '1.62x [1.52, 1.68]', '4.18'],
];
// Natural widths: model 9, accuracy 40, p50 6, p90 6, speed-up 18, load 7 -> 86 + 6 x 2 padding + 7 borders = 105.

describe('fitTable', () => {
  it('leaves a table that fits, and any table without a width, at its natural widths', () => {
    const natural = fitTable(GRID, GRID_ROWS);
    expect(Math.max(...widths(natural.text))).toBe(105);
    for (const width of [undefined, 0, 105, 200]) {
      const t = fitTable(GRID, GRID_ROWS, { width });
      expect(t.text).toBe(natural.text);
      expect(t.hidden).toEqual([]);
    }
  });

  it('narrows the free text first: at 90 columns every column stays, accuracy wraps at words', () => {
    const t = fitTable(GRID, GRID_ROWS, { width: 90 });
    expect(t.hidden).toEqual([]);
    expect(new Set(widths(t.text))).toEqual(new Set([90]));
    expect(words(t.text, 1)).toEqual(['accuracy', ...'91.55% 91.50% (-0.05 pt [-0.20, +0.10], p=0.75)'.split(' ')]);
  });

  it('leaves out the least important columns when narrowing is not enough, and names them', () => {
    // Minimum: 9 + 12 + 6 + 6 + 10 + 7 + 12 padding + 7 borders = 69 > 56: p90 (priority 5) goes (60),
    // then load ms (4): 9 + 12 + 6 + 10 + 8 + 5 = 50. The 6 columns left go in proportion to what the
    // wrapping columns lack (accuracy 28, speed-up 8): 4 and 1, the odd one to speed-up (priority 0).
    const t = fitTable(GRID, GRID_ROWS, { width: 56 });
    expect(t.text.split('\n')[0]).toBe(`┌${'─'.repeat(11)}┬${'─'.repeat(18)}┬${'─'.repeat(8)}┬${'─'.repeat(14)}┐`);
    expect(t.hidden).toEqual(['p90 ms', 'load ms']);
    expect(new Set(widths(t.text))).toEqual(new Set([56]));
    expect(
      t.text
        .split('\n')[1]!
        .split('│')
        .map((c) => c.trim()),
    ).toEqual(['', 'model', 'accuracy', 'p50 ms', 'speed-up', '']);
    expect(t.text).toContain('│ 1.62x [1.52, │');
    expect(words(t.text, 3).join(' ')).toBe('speed-up baseline 1.62x [1.52, 1.68]');
    expect(hiddenLine(t.hidden, 56)).toEqual(['not shown at 56 columns: p90 ms, load ms (see --json and --markdown, or a wider terminal)']);
    expect(hiddenLine([], 56)).toEqual([]);
  });

  it('stacks the rows when even the priority-0 columns cannot fit', () => {
    // model 9 + speed-up 10 + 4 padding + 3 borders = 26 > 20.
    const t = fitTable(GRID, GRID_ROWS, { width: 20 });
    expect(t.hidden).toEqual([]);
    const lines = t.text.split('\n');
    expect(Math.max(...lines.map(displayWidth))).toBeLessThanOrEqual(20);
    expect(lines[0]).toBe('fp32.onnx');
    expect(lines).toContain('  p50 ms: 0.111');
    expect(t.text).toContain('int8.onnx\n  accuracy: 91.50%\n    (-0.05 pt');
  });

  it('a key/text table wraps its text column into an 80-column terminal: every line 80 wide, no word lost', () => {
    const natural = fitTable(KEY_TEXT, KEY_ROWS);
    // Three borders, the key column (18 + padding), the text and its padding.
    expect(Math.max(...widths(natural.text))).toBe(3 + 20 + long.length + 2);
    const t = fitTable(KEY_TEXT, KEY_ROWS, { width: 80 });
    expect(new Set(widths(t.text))).toEqual(new Set([80]));
    expect(words(t.text, 1)).toEqual(words(natural.text, 1));
  });

  it('without a width, fixed widths wrap the cells as the table always did', () => {
    const t = fitTable(GRID, GRID_ROWS, { fixedWidths: [9, 20, 6, 6, 18, 7] });
    expect(Math.max(...widths(t.text))).toBe(9 + 20 + 6 + 6 + 18 + 7 + 12 + 7);
    expect(words(t.text, 1)).toEqual(['accuracy', ...'91.55% 91.50% (-0.05 pt [-0.20, +0.10], p=0.75)'.split(' ')]);
  });
});

describe('wrapLine and fitText', () => {
  it('wraps at words with a hanging indent under the line own indentation', () => {
    expect(wrapLine('  + a region of nodes kept float', 16)).toEqual(['  + a region of', '    nodes kept', '    float']);
    expect(wrapLine('short', 16)).toEqual(['short']);
    // Spacing inside a line (aligned labels) stays where the line is not broken.
    expect(wrapLine('model      fixtures/m.onnx  (445 KiB on disk)', 32)).toEqual(['model      fixtures/m.onnx  (445', '  KiB on disk)']);
  });
  it('breaks a word longer than a line (a path) rather than overflow', () => {
    const lines = wrapLine('written: /a/very/long/path/to/the/model.int8.onnx', 20);
    expect(lines).toEqual(['written:', '  /a/very/long/path/', '  to/the/model.int8.', '  onnx']);
    expect(Math.max(...lines.map(displayWidth))).toBeLessThanOrEqual(20);
  });
  it('counts wide characters twice and colour codes not at all', () => {
    expect(displayWidth('\x1b[31mred\x1b[39m')).toBe(3);
    expect(displayWidth('層の名前')).toBe(8);
  });
  it('fitText leaves text alone without a width and wraps each long line with one', () => {
    const text = 'one two three four\nfive';
    expect(fitText(text, undefined)).toBe(text);
    expect(fitText(text, 12)).toBe('one two\n  three four\nfive');
  });
});

// Tables on a narrow terminal: fitLastColumn wraps a table's free-text last column at words into
// the columns the terminal has, leaves a table that fits (and any table without a width) as it is,
// and never squeezes the text column below 24 columns.
import Table from 'cli-table3';
import { describe, expect, it } from 'vitest';
import { fitLastColumn, tableStyle } from '../../src/report/format.js';

const long =
  '10 integer kernel(s), no DequantizeLinear -> float op left: INT8 should be faster here (small, narrow or SiLU-heavy models can still lose: confirm with --measure-speed or model-opt benchmark)';

function table(): Table.Table {
  const t = new Table({ head: ['', 'int8'], style: tableStyle() });
  t.push(['nodes quantized', 'Conv 5, Add 2']);
  t.push(['will it be faster?', long]);
  t.push(['left in FP32', 'stem.conv (reduction size 9)\nstem.pool (input is not quantized)']);
  return t;
}

const widths = (s: string): number[] => s.split('\n').map((l) => [...l].length);
/** The words of the text column, in order, from a rendered table. */
const words = (s: string): string[] =>
  s
    .split('\n')
    .filter((l) => l.startsWith('│'))
    .map((l) => l.split('│')[2]!.trim())
    .join(' ')
    .split(/\s+/)
    .filter(Boolean);

describe('fitLastColumn', () => {
  it('wraps the last column into an 80-column terminal: every line exactly 80 wide, no word lost', () => {
    const natural = table().toString();
    // Three borders, the key column (18 + padding), the text and its padding.
    expect(Math.max(...widths(natural))).toBe(3 + 20 + long.length + 2);
    const t = table();
    fitLastColumn(t, 80);
    const out = t.toString();
    expect(new Set(widths(out))).toEqual(new Set([80]));
    expect(words(out)).toEqual(words(natural));
    // Key column: 'will it be faster?' (18) + padding.
    expect(t.options.colWidths).toEqual([20, 80 - 3 - 20]);
  });

  it('leaves a table that fits, and any table without a terminal width, as it is', () => {
    for (const width of [undefined, 0, 1000]) {
      const t = table();
      fitLastColumn(t, width);
      expect(t.toString()).toBe(table().toString());
    }
  });

  it('keeps at least 24 columns for the text on a very narrow terminal', () => {
    const t = table();
    fitLastColumn(t, 30);
    expect(t.options.colWidths).toEqual([20, 24]);
    expect(Math.max(...widths(t.toString()))).toBe(20 + 24 + 3);
  });
});

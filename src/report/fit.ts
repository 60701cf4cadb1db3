/**
 * Terminal output that fits: tables sized to a terminal's width (columns dropped by priority, free
 * text wrapped, a stacked layout when even the essential columns do not fit) and prose wrapped at
 * words. Without a width (a pipe, a file) nothing changes: one line per row, full tables, for grep.
 * The full table is always in --json and --markdown. Pure; imports cli-table3, report/format, report/wrap.
 */
import Table from 'cli-table3';
import { tableStyle } from './format.js';
import { displayWidth, textWidth, wrapLine } from './wrap.js';

export { displayWidth, fitText, wrapLine } from './wrap.js';

/** A column of a table that fits: its header, how readily it goes, whether its text may wrap. */
export interface FitColumn {
  head: string;
  /** 0: never dropped; higher numbers are dropped first on a narrow terminal. */
  priority: number;
  /** Free text that may wrap at words (else the column keeps its natural width). */
  wrap?: boolean;
  /** The narrowest a wrapping column gets before columns are dropped (default 16). */
  minWidth?: number;
}

export interface FitOptions {
  /** Terminal columns; undefined leaves the table at its natural width (pipes, files). */
  width?: number;
  color?: boolean;
  /** Column widths (without padding) to use when no width is given (a table that always wrapped). */
  fixedWidths?: number[];
}

/** The rendered table and the headers of the columns left out to fit. */
export interface FittedTable {
  text: string;
  hidden: string[];
}

/** A cell's text wrapped to `width` columns, line by line. */
function wrapCell(text: string, width: number): string {
  return text
    .split('\n')
    .flatMap((line) => wrapLine(line, width, 0))
    .join('\n');
}

const PADDING = 2;
const DEFAULT_MIN = 16;

/** The widest word of a column's cells and header (the width below which words are broken). */
function longestWord(texts: readonly string[]): number {
  return Math.max(0, ...texts.flatMap((t) => t.split(/\s+/)).map(displayWidth));
}

/**
 * The widths (without padding) of the columns in `keep` on `width` terminal columns, or null when
 * they cannot fit: non-wrapping columns at their natural width, wrapping ones between their minimum
 * and their natural width. The room left over goes, most important column first, to whole words
 * (no column narrower than its longest word while room is left), then to fewer lines.
 */
function layout(
  columns: readonly FitColumn[],
  natural: readonly number[],
  words: readonly number[],
  keep: readonly number[],
  width: number,
): Map<number, number> | null {
  const min = (c: number): number => (columns[c]!.wrap ? Math.min(natural[c]!, columns[c]!.minWidth ?? DEFAULT_MIN) : natural[c]!);
  const borders = keep.length + 1;
  const widths = new Map(keep.map((c) => [c, min(c)]));
  let left = width - borders - keep.reduce((sum, c) => sum + min(c) + PADDING, 0);
  if (left < 0) return null;
  const byPriority = [...keep].sort((a, b) => columns[a]!.priority - columns[b]!.priority || a - b);
  const grow = (c: number, more: number): void => {
    widths.set(c, widths.get(c)! + more);
    left -= more;
  };
  for (const c of byPriority) grow(c, Math.max(0, Math.min(left, Math.min(natural[c]!, words[c]!) - widths.get(c)!)));
  // Then towards their natural widths, in proportion to what each still lacks (the odd columns
  // left over to the most important), so one long column does not take all the room.
  const lacking = byPriority.map((c) => natural[c]! - widths.get(c)!);
  const total = lacking.reduce((a, b) => a + b, 0);
  if (total <= left) byPriority.forEach((c, i) => grow(c, lacking[i]!));
  else {
    const room = left;
    byPriority.forEach((c, i) => grow(c, Math.floor((room * lacking[i]!) / total)));
    for (const c of byPriority) if (left > 0 && widths.get(c)! < natural[c]!) grow(c, 1);
  }
  return widths;
}

function render(head: string[], rows: string[][], colWidths: number[] | undefined, color: boolean | undefined): string {
  const table = new Table({ head, style: tableStyle(color), ...(colWidths ? { colWidths } : {}) });
  for (const row of rows) table.push(row);
  return table.toString();
}

/**
 * A table fitted to `options.width`: all columns at their natural width when they fit; else the
 * wrapping columns narrowed and, while that is not enough, the columns with the highest priority
 * number left out (listed in `hidden`); when even the priority-0 columns do not fit, each row is
 * stacked as 'header: value' lines under its first cell. Without a width: the table as it is.
 */
export function fitTable(columns: readonly FitColumn[], rows: readonly (readonly string[])[], options: FitOptions = {}): FittedTable {
  const width = options.width;
  const head = columns.map((c) => c.head);
  if (width === undefined || !(width > 0)) {
    const fixed = options.fixedWidths;
    const wrapped = fixed ? rows.map((r) => r.map((cell, c) => (fixed[c] ? wrapCell(cell, fixed[c]!) : cell))) : rows.map((r) => [...r]);
    return {
      text: render(
        head,
        wrapped,
        fixed?.map((w) => w + PADDING),
        options.color,
      ),
      hidden: [],
    };
  }
  const natural = columns.map((col, c) => Math.max(textWidth(col.head), ...rows.map((r) => textWidth(r[c] ?? ''))));
  const words = columns.map((col, c) => longestWord([col.head, ...rows.map((r) => r[c] ?? '')]));
  const order = columns.map((_, c) => c);
  let keep = order;
  let widths = layout(columns, natural, words, keep, width);
  // Leave out the least important columns, one at a time, until the rest fit.
  const droppable = order.filter((c) => columns[c]!.priority > 0).sort((a, b) => columns[b]!.priority - columns[a]!.priority || b - a);
  for (const c of droppable) {
    if (widths) break;
    keep = keep.filter((k) => k !== c);
    widths = layout(columns, natural, words, keep, width);
  }
  if (!widths) return { text: stacked(columns, rows, width), hidden: [] };
  const hidden = order.filter((c) => !keep.includes(c)).map((c) => columns[c]!.head);
  const cells = rows.map((r) => keep.map((c) => wrapCell(r[c] ?? '', widths.get(c)!)));
  const text = render(
    keep.map((c) => wrapCell(columns[c]!.head, widths.get(c)!)),
    cells,
    keep.map((c) => widths.get(c)! + PADDING),
    options.color,
  );
  return { text, hidden };
}

/** Each row as its first cell, then '  header: value' lines (wrapped), for a terminal too narrow for any table. */
function stacked(columns: readonly FitColumn[], rows: readonly (readonly string[])[], width: number): string {
  const lines: string[] = [];
  let title = '';
  for (const row of rows) {
    // Continuation rows (an empty first cell, e.g. a further batch size) belong to the row above.
    if (row[0]) title = row[0].replace(/\n/g, ' ');
    lines.push(...wrapLine(row[0] ? title : `${title} (continued)`, width));
    columns.forEach((col, c) => {
      if (c === 0 || !row[c]) return;
      lines.push(...wrapLine(`  ${col.head}: ${row[c]!.replace(/\n/g, '; ')}`, width, 2));
    });
  }
  return lines.join('\n');
}

/** 'not shown at 80 columns: p90 ms, load ms (all of them in --json and --markdown, or a wider terminal)'. */
export function hiddenLine(hidden: readonly string[], width: number | undefined, where = '--json and --markdown'): string[] {
  if (hidden.length === 0) return [];
  return [`not shown at ${width} columns: ${hidden.join(', ')} (see ${where}, or a wider terminal)`];
}

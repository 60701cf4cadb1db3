/**
 * Number formatting shared by the reporters, so the table, Markdown and messages agree.
 * Also printable(): text from files made safe for a terminal.
 * Pure; imports bench types and ../util/format.js only.
 */
import type { AccuracyResult, LatencyPoint } from '../benchmark/types.js';
import { formatP, formatPClause } from '../util/format.js';

export { formatP, formatPClause };

/** Escapes of the control characters that have a short one. */
const SHORT_ESCAPES: Readonly<Record<number, string>> = { 9: '\\t', 10: '\\n', 13: '\\r' };

/** The escape printable() writes for code point `c`, or undefined when it prints as itself. */
function escapeOf(c: number): string | undefined {
  if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) return SHORT_ESCAPES[c] ?? `\\x${c.toString(16).padStart(2, '0')}`;
  if (c === 0x2028 || c === 0x2029 || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)) return `\\u${c.toString(16)}`;
  return undefined;
}

/**
 * Text from a file (tensor, op, producer names) as a terminal report shows it: control characters
 * (C0, DEL, C1: an ESC starts an ANSI sequence that recolours, moves or clears what is on screen),
 * line and paragraph separators and bidirectional overrides are written as escapes (\x1b, \n,
 * \u202e), so a name prints as what it is and nothing it holds acts on the terminal. In text that
 * needs an escape a backslash is doubled too, so the escapes read unambiguously; other text is
 * returned as it is. JSON output keeps names exact.
 */
export function printable(text: string): string {
  const chars = [...text];
  if (!chars.some((ch) => escapeOf(ch.codePointAt(0)!) !== undefined)) return text;
  return chars.map((ch) => (ch === '\\' ? '\\\\' : (escapeOf(ch.codePointAt(0)!) ?? ch))).join('');
}

/**
 * cli-table3's style: its default colours the header red and the borders grey, whatever the output
 * is, so every table takes its style from here: colour only when the caller (the CLI, which knows
 * the stream, --no-color, NO_COLOR and FORCE_COLOR) asks for it.
 */
export function tableStyle(color = false): { head?: string[]; border?: string[] } {
  return color ? {} : { head: [], border: [] };
}

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
  if (ms >= 100) return ms.toFixed(1);
  if (ms >= 1) return ms.toFixed(2);
  return ms.toFixed(3);
}

export function formatBytes(bytes: number | null): string {
  if (bytes === null || !Number.isFinite(bytes)) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let v = bytes;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${u === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${units[u]}`;
}

export function formatPercent(fraction: number, digits = 2): string {
  return Number.isFinite(fraction) ? `${(fraction * 100).toFixed(digits)}%` : '-';
}

/** Signed percentage points: +0.20 pt, -1.35 pt, 0.00 pt. */
export function formatPoints(fraction: number, digits = 2): string {
  if (!Number.isFinite(fraction)) return '-';
  const v = fraction * 100;
  const text = Math.abs(v).toFixed(digits);
  if (Number(text) === 0) return `0.${'0'.repeat(digits)} pt`;
  return `${v > 0 ? '+' : '-'}${text} pt`;
}

export function formatThroughput(samplesPerSecond: number): string {
  if (!Number.isFinite(samplesPerSecond)) return '-';
  return samplesPerSecond >= 100 ? `${Math.round(samplesPerSecond)}/s` : `${samplesPerSecond.toFixed(1)}/s`;
}

export function formatSpeedup(speedup: LatencyPoint['speedup']): string {
  if (!speedup) return 'baseline';
  const main = `${speedup.estimate.toFixed(2)}x [${speedup.low.toFixed(2)}, ${speedup.high.toFixed(2)}]`;
  if (speedup.verdict === 'no significant difference') return `${main} n.s.`;
  if (speedup.verdict === 'within noise') return `${main} ~noise`;
  return main;
}

/**
 * 'top1 91.20%' or with the paired difference: '90.80% (-0.40 pt [-0.9, +0.1], p=0.13)'
 * ('p<0.001' below a thousandth).
 */
export function formatAccuracy(a: AccuracyResult | undefined): string {
  if (!a) return '-';
  const base = formatPercent(a.value);
  // Metrics without a per-sample right/wrong result (CER, F1, mean IoU): the difference alone.
  if (!a.comparison) return a.difference === undefined ? base : `${base} (${formatPoints(a.difference)})`;
  const d = a.comparison.difference;
  const lo = formatPoints(d.low, 2).replace(' pt', '');
  const hi = formatPoints(d.high, 2).replace(' pt', '');
  return `${base} (${formatPoints(d.estimate)} [${lo}, ${hi}], ${formatPClause(a.comparison.pValue)})`;
}

export function formatDb(db: number): string {
  return db === Infinity ? 'inf' : Number.isFinite(db) ? `${db.toFixed(1)} dB` : '-';
}

/**
 * ", worst channel 5: 12.3 dB" when one channel along axis 1 agrees far worse (10 dB or more) than
 * the output as a whole, else "": the overall SQNR can hide a channel that lost its resolution.
 */
export function formatWorstChannel(m: { sqnrDb: number; worstChannel?: { index: number; sqnrDb: number } }): string {
  const w = m.worstChannel;
  if (!w || !(w.sqnrDb < m.sqnrDb - 10)) return '';
  return `, worst channel ${w.index}: ${formatDb(w.sqnrDb)}`;
}

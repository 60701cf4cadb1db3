/**
 * The human report: one comparison table (a row per model and batch size), then agreement with
 * the baseline, gate outcomes and a one-line note on method, after a verdict line per candidate;
 * sized to the terminal when given its width. Pure function of the result.
 * Imports report/format, report/fit, report/verdict and evaluate/label-range (pure).
 */
import type { BenchmarkResult, ModelResult } from '../benchmark/types.js';
import { labelRangeMessage } from '../evaluate/label-range.js';
import { formatAccuracy, formatBytes, formatDb, formatWorstChannel, formatMs, formatPercent, formatSpeedup, formatThroughput } from './format.js';
import { type FitColumn, fitTable, fitText, hiddenLine } from './fit.js';
import { benchmarkNoise, benchmarkVerdicts } from './verdict.js';

export interface TableOptions {
  /** ANSI colours for the header and borders (only on a terminal). */
  color?: boolean;
  /** Terminal columns to fit (report/fit.ts); undefined: the full table, one line per row. */
  width?: number;
}

/** The task metric's column when any model has one (McNemar only for per-sample right/wrong metrics), else top-1 agreement. */
export function accuracyHeader(result: BenchmarkResult): string {
  const scored = result.models.find((m) => m.accuracy)?.accuracy;
  if (!scored) return 'top-1 agreement';
  if (scored.correct !== null) return `${result.settings.metric} (Δ [95% CI], McNemar p)`;
  return `${result.settings.metric} (Δ vs baseline${scored.higherIsBetter === false ? '; lower is better' : ''})`;
}

export function accuracyCell(result: BenchmarkResult, model: ModelResult): string {
  if (result.models.some((m) => m.accuracy)) return formatAccuracy(model.accuracy);
  if (model.role === 'baseline') return 'reference';
  const out = model.agreement?.[result.settings.outputName];
  return out?.top1Agreement != null ? formatPercent(out.top1Agreement) : '-';
}

/** The comparison grid both the table and the Markdown report show: one row per model and batch size. */
export function comparisonGrid(result: BenchmarkResult, label: (model: ModelResult) => string = (m) => m.label): { head: string[]; rows: string[][] } {
  const multiBatch = result.settings.batchSizes.length > 1;
  const head = [
    'model',
    ...(multiBatch ? ['batch'] : []),
    accuracyHeader(result),
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'mean ± std (cv)',
    'throughput',
    'speed-up [95% CI]',
    'size (gzip)',
    'peak mem',
    'load ms',
  ];
  const rows: string[][] = [];
  for (const model of result.models) {
    model.latency.forEach((point, i) => {
      const s = point.stats;
      rows.push([
        i === 0 ? label(model) : '',
        ...(multiBatch ? [String(point.batchSize)] : []),
        i === 0 ? accuracyCell(result, model) : '',
        formatMs(s.p50),
        formatMs(s.p90),
        formatMs(s.p99),
        `${formatMs(s.mean)} ± ${formatMs(s.std)} (${formatPercent(s.cv, 1)})`,
        formatThroughput(point.throughput),
        formatSpeedup(point.speedup),
        i === 0 ? `${formatBytes(model.file.sizeBytes)} (${formatBytes(model.file.gzipBytes)})` : '',
        i === 0 ? formatBytes(model.peakMemoryBytes) : '',
        i === 0 ? formatMs(model.loadMs) : '',
      ]);
    });
  }
  return { head, rows };
}

/**
 * How readily each column of the comparison grid goes on a narrow terminal (0: never); the
 * accuracy and the mean ± std texts may wrap.
 */
const COLUMN_FIT: Readonly<Record<string, Omit<FitColumn, 'head'>>> = {
  model: { priority: 0 },
  batch: { priority: 0 },
  'p50 ms': { priority: 2 },
  'p90 ms': { priority: 8 },
  'p99 ms': { priority: 4 },
  'mean ± std (cv)': { priority: 6, wrap: true, minWidth: 14 },
  throughput: { priority: 5 },
  'speed-up [95% CI]': { priority: 0, wrap: true, minWidth: 18 },
  'size (gzip)': { priority: 3 },
  'peak mem': { priority: 7 },
  'load ms': { priority: 9 },
};

/**
 * The human report: the verdict per candidate and any noise warning first, then the comparison
 * table fitted to `options.width` (columns left out by priority on a narrow terminal, and named),
 * agreement, method, data notes and gates; every line wrapped to the width. No width: full table.
 */
export function renderTable(result: BenchmarkResult, options: TableOptions = {}): string {
  const { head, rows } = comparisonGrid(result);
  const columns = head.map((h) => ({ head: h, ...(COLUMN_FIT[h] ?? { priority: 1, wrap: true, minWidth: 20 }) }));
  const table = fitTable(columns, rows, { width: options.width, color: options.color });
  const lines = [...benchmarkVerdicts(result), ...benchmarkNoise(result), table.text, ...hiddenLine(table.hidden, options.width)];
  lines.push(...agreementLines(result));
  lines.push(methodLine(result));
  for (const n of result.data.notes) lines.push(`data: ${n}`);
  lines.push(...labelRangeLines(result));
  for (const gate of result.gates) lines.push(`${gate.passed ? 'PASS' : 'FAIL'} ${gate.message}`);
  return `${fitText(lines.join('\n'), options.width)}\n`;
}

/**
 * '3 of 100 labels are out of range for the 10 classes of the output (scored as misses)', with
 * '; labels look 1-based (min 1, max 10): subtract 1' when they are: for a stderr warning.
 */
export function labelRangeWarnings(result: BenchmarkResult): string[] {
  const details = result.models.find((m) => m.accuracy?.details?.outOfRangeLabels)?.accuracy;
  const d = details?.details;
  if (!details || !d) return [];
  const message = labelRangeMessage({
    outOfRange: d['outOfRangeLabels'] ?? 0,
    total: details.total,
    classes: d['classes'] ?? 0,
    minLabel: d['minLabel'],
    maxLabel: d['maxLabel'],
  });
  return message ? [message] : [];
}

/** The same as report lines: 'data: 3 of 100 labels are out of range ...'. */
export function labelRangeLines(result: BenchmarkResult): string[] {
  return labelRangeWarnings(result).map((message) => `data: ${message}`);
}

export function agreementLines(result: BenchmarkResult): string[] {
  const lines: string[] = [];
  for (const model of result.models) {
    for (const [name, m] of Object.entries(model.agreement ?? {})) {
      lines.push(
        `${model.label} vs baseline, output '${name}': ` +
          (m.top1Agreement !== null ? `top-1 agreement ${formatPercent(m.top1Agreement)}, ` : '') +
          `max abs error ${m.maxAbsError.toPrecision(3)}, relative L2 ${m.relativeL2.toPrecision(3)}, ` +
          `cosine ${m.cosineSimilarity.toFixed(6)}, SQNR ${formatDb(m.sqnrDb)}${formatWorstChannel(m)}`,
      );
    }
  }
  return lines;
}

/**
 * '120 timed runs per model', or '40-120 timed runs per model' where timing sized by the noise
 * settled some candidates before others (each stops once its speed-up is known).
 */
export function timedRuns(result: BenchmarkResult, batch?: number): string {
  const counts = result.models.map((m) => (batch === undefined ? m.latency[0] : m.latency.find((p) => p.batchSize === batch))?.stats.count ?? 0);
  const low = Math.min(...counts);
  const high = Math.max(...counts);
  return `${low === high ? high : `${low}-${high}`} timed runs per model`;
}

export function methodLine(result: BenchmarkResult): string {
  const s = result.settings;
  const data =
    result.data.source === 'file'
      ? `${result.data.samples} samples from ${result.data.path}${result.data.labels ? '' : ' (no labels)'}`
      : `${result.data.samples} seeded random samples (seed ${s.seed})`;
  return (
    `${data}; ${s.warmup} warm-up + ${timedRuns(result)}, ${s.interleave === 'warm' ? `interleaved, ${s.burst === 1 ? 'each run' : `bursts of ${s.burst}`} after 3 untimed runs` : 'interleaved round-robin (cold caches)'}; ` +
    `threads ${s.threads ?? 'ORT default'}; ${providerText(result)}; throughput = batch size / p50 latency; ` +
    `speed-up = median of paired ratios (bootstrap 95% CI; n.s. = interval spans 1.0, ~noise = interval within ±2%)`
  );
}

/** 'provider cpu', or with what was asked for when some were skipped: 'provider cpu (asked for tensorrt, cpu)'. */
export function providerText(result: BenchmarkResult): string {
  const { providers, requestedProviders } = result.settings;
  const ran = `provider${providers.length > 1 ? 's' : ''} ${providers.join(', ')}`;
  return requestedProviders.join(',') === providers.join(',') ? ran : `${ran} (asked for ${requestedProviders.join(', ')})`;
}

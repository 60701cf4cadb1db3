/**
 * Reporters for a batching sweep (src/serve runBatchingSweep): the human comparison table with
 * the SLO recommendation and its Triton dynamic_batching block, and the JSON document.
 * Pure functions of the result; tables fitted to a terminal's width when given one.
 * Imports report/fit, report/format, report/json, serve (types, pbtxt writer).
 */
import { describeLoad, type LoadMeasurement } from '../serve/load-generator.js';
import { describeSetting, type BatchingSetting } from '../serve/slo-search.js';
import type { BatchingSweepResult } from '../serve/sweep.js';
import { formatTritonConfig } from '../serve/triton-config.js';
import { type FitColumn, fitTable, fitText, hiddenLine } from './fit.js';
import { formatMs, formatThroughput } from './format.js';
import { jsonReplacer } from './json.js';

export interface BatchingTableOptions {
  color?: boolean;
  /** Terminal columns to fit (report/fit.ts); undefined: full tables. */
  width?: number;
}

/** The sweep table's columns: what leaves first on a narrow terminal (0: never). */
const SWEEP_COLUMNS: FitColumn[] = [
  { head: 'load', priority: 0, wrap: true, minWidth: 10 },
  { head: 'batching', priority: 0 },
  { head: 'throughput', priority: 0 },
  { head: 'p50 ms', priority: 2 },
  { head: 'p90 ms', priority: 6 },
  { head: 'p99 ms', priority: 1 },
  { head: 'queue p99', priority: 5 },
  { head: 'compute p50', priority: 7 },
  { head: 'mean batch (sizes)', priority: 4, wrap: true, minWidth: 10 },
  { head: 'rejected', priority: 8 },
  { head: 'stable', priority: 3, wrap: true, minWidth: 8 },
  { head: 'gain', priority: 0 },
];

function batchHistogram(m: LoadMeasurement): string {
  const total = m.batchSizes.reduce((n, [, c]) => n + c, 0);
  if (total === 0) return '-';
  const top = [...m.batchSizes].sort((a, b) => b[1] - a[1]).slice(0, 3);
  return `${Number.isFinite(m.meanBatchSize) ? m.meanBatchSize.toFixed(1) : '-'} (${top.map(([s, c]) => `${s}:${Math.round((100 * c) / total)}%`).join(' ')})`;
}

function row(label: string, mode: string, m: LoadMeasurement, gain: string): string[] {
  return [
    label,
    mode,
    formatThroughput(m.throughput),
    formatMs(m.latencyMs.p50),
    formatMs(m.latencyMs.p90),
    formatMs(m.latencyMs.p99),
    formatMs(m.queueMs.p99),
    formatMs(m.computeMs.p50),
    batchHistogram(m),
    String(m.rejected),
    m.valid === false ? 'INVALID *' : m.stable ? 'yes' : m.limit === 'windows' ? 'no' : m.limit ? `no (${m.limit} limit)` : 'no',
    m.valid === false ? '' : gain,
  ];
}

/** The dynamic_batching (and instance_group) lines to paste into a config.pbtxt. */
export function tritonSnippet(setting: BatchingSetting): string {
  if (setting.maxBatchSize <= 1) {
    return formatTritonConfig({
      maxBatchSize: 0,
      input: [],
      output: [],
      instanceGroup: [{ count: setting.instances, kind: 'KIND_CPU', gpus: [], extra: [] }],
      extra: [],
    });
  }
  return formatTritonConfig({
    maxBatchSize: setting.maxBatchSize,
    input: [],
    output: [],
    dynamicBatching: { preferredBatchSize: setting.preferredBatchSizes, maxQueueDelayMicroseconds: setting.maxQueueDelayUs, extra: [] },
    instanceGroup: [{ count: setting.instances, kind: 'KIND_CPU', gpus: [], extra: [] }],
    extra: [],
  });
}

export function renderBatchingTable(result: BatchingSweepResult, options: BatchingTableOptions = {}): string {
  const parts: string[] = [];
  const b = result.batching;
  for (const n of result.notes ?? []) parts.push(`note: ${n}`);
  parts.push(
    `${result.model}: dynamic batching max batch ${b.maxBatchSize}` +
      `${b.preferredBatchSizes?.length ? `, preferred ${b.preferredBatchSizes.join('/')}` : ''}, delay ${b.maxQueueDelayUs ?? 0} us, ${b.instances} instance(s); ${result.environment.cpus} CPUs`,
  );
  if (result.rows.length) {
    const table: string[][] = [];
    const invalid: string[] = [];
    for (const r of result.rows) {
      table.push(row(describeLoad(r.load), 'dynamic', r.batched, r.throughputGain !== undefined ? `${r.throughputGain.toFixed(2)}x` : ''));
      if (r.unbatched) table.push(row('', 'none', r.unbatched, 'baseline'));
      for (const [mode, m] of [
        ['dynamic', r.batched],
        ['none', r.unbatched],
      ] as const) {
        if (m?.valid === false) invalid.push(`  ${describeLoad(r.load)}, ${mode}: ${m.invalidReason ?? 'invalid'}`);
      }
    }
    const fitted = fitTable(SWEEP_COLUMNS, table, { width: options.width, color: options.color });
    parts.push(fitted.text, ...hiddenLine(fitted.hidden, options.width, '--json'));
    if (invalid.length) parts.push(`* not a measurement of the model:\n${invalid.join('\n')}`);
  }
  const slo = result.slo;
  if (slo) {
    const columns: FitColumn[] = [
      { head: 'setting', priority: 0, wrap: true, minWidth: 16 },
      { head: `best throughput (p99 <= ${slo.sloP99Ms} ms)`, priority: 0, wrap: true, minWidth: 12 },
      { head: 'p99 ms', priority: 1 },
      { head: 'at load', priority: 2, wrap: true, minWidth: 10 },
      { head: 'points', priority: 3 },
    ];
    const table: string[][] = [];
    const sorted = [...slo.candidates].sort((x, y) => (y.best?.throughput ?? -1) - (x.best?.throughput ?? -1));
    for (const c of sorted) {
      table.push([
        describeSetting(c.setting) + (slo.best?.setting === c.setting ? '  <- recommended' : ''),
        c.best ? formatThroughput(c.best.throughput) : 'misses the target',
        c.best ? formatMs(c.best.latencyMs.p99) : '-',
        c.best ? describeLoad(c.best.load) : '-',
        String(c.points.length),
      ]);
    }
    parts.push(`SLO search, p99 <= ${slo.sloP99Ms} ms:`);
    const fitted = fitTable(columns, table, { width: options.width, color: options.color });
    parts.push(fitted.text, ...hiddenLine(fitted.hidden, options.width, '--json'));
    if (slo.best) {
      const unbatched = slo.candidates.filter((c) => c.setting.maxBatchSize <= 1 && c.best).map((c) => c.best!.throughput);
      const base = unbatched.length ? Math.max(...unbatched) : undefined;
      parts.push(
        `recommended: ${describeSetting(slo.best.setting)}: ${formatThroughput(slo.best.point.throughput)} at p99 ${formatMs(slo.best.point.latencyMs.p99)} ms` +
          (base ? ` (${(slo.best.point.throughput / base).toFixed(2)}x the best without batching)` : ''),
      );
      parts.push(`Triton config.pbtxt:\n${tritonSnippet(slo.best.setting).replace(/^/gm, '  ')}`);
    } else parts.push(`no setting met p99 <= ${slo.sloP99Ms} ms; try a larger target, fewer instances or a faster model`);
  }
  return `${fitText(parts.join('\n'), options.width)}\n`;
}

export function renderBatchingJson(result: BatchingSweepResult): string {
  return `${JSON.stringify(result, jsonReplacer, 2)}\n`;
}

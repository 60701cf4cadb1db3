/**
 * Reporters for a batching sweep (src/serve runBatchingSweep): the human comparison table with
 * the SLO recommendation and its Triton dynamic_batching block, and the JSON document.
 * Pure functions of the result. Imports cli-table3, report/format, report/json, serve (types, pbtxt writer).
 */
import Table from 'cli-table3';
import { describeLoad, type LoadMeasurement } from '../serve/load-generator.js';
import { describeSetting, type BatchingSetting } from '../serve/slo-search.js';
import type { BatchingSweepResult } from '../serve/sweep.js';
import { formatTritonConfig } from '../serve/triton-config.js';
import { formatMs, formatThroughput, tableStyle } from './format.js';
import { jsonReplacer } from './json.js';

export interface BatchingTableOptions {
  color?: boolean;
}

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
    const table = new Table({
      head: ['load', 'batching', 'throughput', 'p50 ms', 'p90 ms', 'p99 ms', 'queue p99', 'compute p50', 'mean batch (sizes)', 'rejected', 'stable', 'gain'],
      style: tableStyle(options.color),
    });
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
    parts.push(table.toString());
    if (invalid.length) parts.push(`* not a measurement of the model:\n${invalid.join('\n')}`);
  }
  const slo = result.slo;
  if (slo) {
    const table = new Table({
      head: ['setting', `best throughput (p99 <= ${slo.sloP99Ms} ms)`, 'p99 ms', 'at load', 'points'],
      style: tableStyle(options.color),
    });
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
    parts.push(table.toString());
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
  return `${parts.join('\n')}\n`;
}

export function renderBatchingJson(result: BatchingSweepResult): string {
  return `${JSON.stringify(result, jsonReplacer, 2)}\n`;
}

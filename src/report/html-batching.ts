/**
 * `benchmark --dynamic-batching --html`: the verdict (the recommended setting under the p99
 * target, or the best throughput with and without batching), the sweep table, the
 * throughput/latency curves (report/batching-plot) and the terminal report (with the Triton
 * config block) folded away. Pure function of the result.
 * May import: report/html, report/batching-plot, report/batching-table, report/format, serve types, benchmark types.
 */
import type { Manifest } from '../benchmark/types.js';
import { describeLoad, type LoadMeasurement } from '../serve/load-generator.js';
import { describeSetting } from '../serve/slo-search.js';
import type { BatchingSweepResult } from '../serve/sweep.js';
import { renderBatchingPlot } from './batching-plot.js';
import { renderBatchingTable } from './batching-table.js';
import { formatMs, formatThroughput } from './format.js';
import { figure, folded, htmlTable, list, renderHtmlPage, type HtmlSection, type VerdictLine } from './html.js';

export function batchingVerdict(result: BatchingSweepResult): VerdictLine[] {
  const lines: VerdictLine[] = [];
  const slo = result.slo;
  if (slo?.best) {
    lines.push({
      text: `recommended under p99 ${slo.sloP99Ms} ms: ${describeSetting(slo.best.setting)}: ${formatThroughput(slo.best.point.throughput)} at p99 ${formatMs(slo.best.point.latencyMs.p99)} ms`,
      level: 'good',
    });
  } else if (slo) lines.push({ text: `no batching setting kept p99 under ${slo.sloP99Ms} ms`, level: 'bad' });
  const best = [...result.rows].filter((r) => r.batched.valid !== false).sort((a, b) => b.batched.throughput - a.batched.throughput)[0];
  if (best) {
    const gain = best.throughputGain !== undefined ? ` (${best.throughputGain.toFixed(2)}x without batching at the same load)` : '';
    lines.push({
      text: `dynamic batching: up to ${formatThroughput(best.batched.throughput)} at ${describeLoad(best.load)}, p99 ${formatMs(best.batched.latencyMs.p99)} ms${gain}`,
      level: 'plain',
    });
  }
  const invalid = result.rows.filter((r) => r.batched.valid === false || r.unbatched?.valid === false).length;
  if (invalid) lines.push({ text: `${invalid} load(s) measured the load generator, not the model (see the table)`, level: 'warn' });
  return lines;
}

function row(load: string, mode: string, m: LoadMeasurement, gain: string): string[] {
  return [
    load,
    mode,
    formatThroughput(m.throughput),
    formatMs(m.latencyMs.p50),
    formatMs(m.latencyMs.p99),
    formatMs(m.queueMs.p99),
    Number.isFinite(m.meanBatchSize) ? m.meanBatchSize.toFixed(1) : '-',
    String(m.rejected),
    m.valid === false ? `invalid: ${m.invalidReason ?? ''}` : m.stable ? 'yes' : 'no',
    gain,
  ];
}

export function renderBatchingHtml(result: BatchingSweepResult, manifest: Manifest | null): string {
  const rows = result.rows.flatMap((r) => [
    row(describeLoad(r.load), 'dynamic', r.batched, r.throughputGain !== undefined ? `${r.throughputGain.toFixed(2)}x` : ''),
    ...(r.unbatched ? [row(describeLoad(r.load), 'none', r.unbatched, 'baseline')] : []),
  ]);
  const sections: HtmlSection[] = [
    {
      title: 'Throughput and latency',
      body: figure(
        renderBatchingPlot(result),
        'p99 latency against throughput as the load rises, with and without dynamic batching; the dashed line is the p99 target.',
        'batching',
      ),
    },
  ];
  if (rows.length > 0) {
    sections.push({
      title: 'Sweep',
      body: htmlTable(['load', 'batching', 'throughput (req/s)', 'p50 ms', 'p99 ms', 'queue p99 ms', 'mean batch', 'rejected', 'stable', 'gain'], rows, {
        id: 'sweep',
      }),
    });
  }
  sections.push({
    title: 'Details',
    body: list((result.notes ?? []).map((n) => `note: ${n}`)) + folded('The terminal report (with the Triton config)', renderBatchingTable(result)),
  });
  return renderHtmlPage({
    command: 'benchmark --dynamic-batching',
    subject: result.model,
    verdict: batchingVerdict(result),
    sections,
    manifest,
    settings: { batching: result.batching, environment: result.environment },
  });
}

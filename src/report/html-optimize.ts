/**
 * `optimize --html`: the verdict (what was written, its speed-up with the interval, the fidelity,
 * the size), the candidates table, the Pareto plot of speed-up against fidelity
 * (report/optimize-plot), the speed-up intervals of every measured candidate, the time spent per
 * phase, the terminal report (repair and region search steps) folded away, and the run manifest
 * the CLI gathered. Pure function of the result.
 * May import: report/html, report/row-plots, report/optimize-plot, report/optimize-summary, report/format, app result types, benchmark types.
 */
import type { OptimizeResult } from '../app/optimize.js';
import type { Manifest } from '../benchmark/types.js';
import { formatBytes, formatMs, formatSpeedup } from './format.js';
import { figure, folded, htmlTable, list, paragraph, renderHtmlPage, type HtmlSection, type VerdictLine } from './html.js';
import { renderOptimizePlot } from './optimize-plot.js';
import { formatFidelity, renderOptimizeSummary } from './optimize-summary.js';
import { renderIntervalPlot } from './row-plots.js';

/** The written candidate's speed-up, fidelity and size beside the plain sentence of the result. */
export function optimizeVerdict(result: OptimizeResult): VerdictLine[] {
  const lines: VerdictLine[] = [];
  const chosen = result.candidates.find((c) => c.status === 'chosen');
  if (chosen?.speedup) {
    const ratio = chosen.sizeBytes ? result.input.sizeBytes / chosen.sizeBytes : NaN;
    const size = Number.isFinite(ratio)
      ? `, ${formatBytes(result.input.sizeBytes)} -> ${formatBytes(chosen.sizeBytes)} (${ratio >= 1 ? `${ratio.toFixed(1)}x smaller` : `${(1 / ratio).toFixed(1)}x larger`})`
      : '';
    lines.push({
      text: `${chosen.name}: ${formatSpeedup(chosen.speedup)} over FP32, ${formatFidelity(chosen.fidelity, result.settings.samples)}${size}`,
      level: chosen.speedup.verdict === 'faster' ? 'good' : 'plain',
    });
  }
  lines.push({ text: result.summary, level: result.output ? 'plain' : 'bad' });
  if (result.gateFailure) lines.push({ text: `gate failed: ${result.gateFailure}`, level: 'bad' });
  for (const w of result.warnings) lines.push({ text: `warning: ${w}`, level: 'warn' });
  return lines;
}

function candidatesTable(result: OptimizeResult): string {
  const head = ['candidate', 'what', 'speed-up vs FP32 [95% CI]', 'p50 ms', 'fidelity', 'size', 'time s', 'result'];
  const rows = [
    [
      'fp32',
      'the input',
      'baseline',
      result.baseline.p50Ms === null ? '-' : formatMs(result.baseline.p50Ms),
      result.baseline.accuracy === null ? '-' : `acc ${(result.baseline.accuracy * 100).toFixed(2)}%`,
      formatBytes(result.input.sizeBytes),
      '-',
      result.chosen === 'fp32' ? 'CHOSEN: written unchanged' : '',
    ],
    ...result.candidates.map((c) => [
      c.name,
      c.description,
      c.speedup ? formatSpeedup(c.speedup) : '-',
      c.p50Ms === null ? '-' : formatMs(c.p50Ms),
      formatFidelity(c.fidelity, result.settings.samples),
      formatBytes(c.sizeBytes),
      (c.buildSeconds + c.measureSeconds).toFixed(1),
      c.status === 'chosen' ? `CHOSEN: ${c.reason}` : c.status === 'failed' ? `failed: ${c.reason}` : `rejected: ${c.reason}`,
    ]),
  ];
  return htmlTable(head, rows, { id: 'candidates' });
}

function intervalsFigure(result: OptimizeResult): string {
  const rows = result.candidates.flatMap((c) =>
    c.speedup
      ? [
          {
            label: c.name,
            estimate: c.speedup.estimate,
            low: c.speedup.low,
            high: c.speedup.high,
            text: formatSpeedup(c.speedup),
            worse: c.speedup.verdict === 'slower',
          },
        ]
      : [],
  );
  if (rows.length === 0) return paragraph('No candidate was timed.');
  const svg = renderIntervalPlot(rows, {
    title: 'speed-up over FP32 (median of paired ratios, 95% interval)',
    xTitle: 'speed-up over FP32 (x, right is faster)',
    unit: 'x',
    reference: 1,
    referenceLabel: 'as fast as FP32 (1.0x)',
  });
  return figure(svg, 'A dot is the median paired speed-up, the bar its bootstrap 95% interval; red: measured slower than FP32.', 'speedup');
}

export function renderOptimizeHtml(result: OptimizeResult, manifest: Manifest | null): string {
  const s = result.settings;
  const sections: HtmlSection[] = [
    { title: 'Candidates', body: candidatesTable(result) },
    {
      title: 'Speed-up against fidelity',
      body: figure(
        renderOptimizePlot(result),
        'Each candidate at its fidelity (further right: more accurate, or closer to FP32) and median speed-up with its 95% interval; the green line joins the candidates no other beats on both; the ring marks the model written.',
        'pareto',
      ),
    },
    { title: 'Speed-up intervals', body: intervalsFigure(result) },
    {
      title: 'Where the time went',
      body:
        htmlTable(
          ['phase', 'seconds'],
          result.timings.map((t) => [t.phase, t.seconds.toFixed(1)]),
        ) + paragraph(`total ${result.seconds.toFixed(1)} s`),
    },
    {
      title: 'Details',
      body:
        list([
          `objective ${result.objective}, batch ${s.batchSize ?? '-'}, ${s.threads} thread(s), providers ${s.providers.join(', ')}`,
          `fidelity on ${s.samples} ${s.measuredOn} samples${s.labels ? ` (labelled, metric ${s.metric})` : ''}`,
          result.output ? `written: ${result.output.path} (${formatBytes(result.output.sizeBytes)}, sha256 ${result.output.sha256})` : 'nothing written',
          ...(result.recipe ? [`recipe: ${result.recipe}`] : []),
        ]) + folded('The terminal report (repair and region search steps)', renderOptimizeSummary(result)),
    },
  ];
  return renderHtmlPage({
    command: 'optimize',
    subject: result.input.path,
    verdict: optimizeVerdict(result),
    sections,
    manifest,
    settings: { ...s, budget: result.budget },
  });
}

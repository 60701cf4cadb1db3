/**
 * `quantize --html` and `quantize --analyze --html`: the verdict (what was written and how much
 * smaller, the fidelity guard met or missed with the worst SQNR, the accuracy guard, the measured
 * speed-up), the fidelity table (report/quantize-summary's rows), the fallback's per-node
 * sensitivity when it ran, where the time went and the terminal report folded away; for
 * `--analyze`, the per-node sensitivity as a table and a bar plot of the most sensitive nodes.
 * Pure functions of the results.
 * May import: report/html, report/row-plots, report/quantize-summary, report/speed-check, report/format, app result types, benchmark types.
 */
import type { QuantizeResult, SensitivityResult } from '../app/quantize.js';
import type { Manifest } from '../benchmark/types.js';
import { formatBytes, formatDb } from './format.js';
import { figure, folded, htmlTable, keyValueTable, list, renderHtmlPage, type HtmlSection, type VerdictLine } from './html.js';
import { fidelityRows, renderQuantizeSummary, renderSensitivity } from './quantize-summary.js';
import { renderBarPlot, type BarRow } from './row-plots.js';
import { formatSpeedCheck } from './speed-check.js';

/** Nodes the sensitivity plot shows: the most sensitive ones (the table lists them all). */
export const SENSITIVITY_PLOT_ROWS = 30;

const metricText = (x: number): string => String(+x.toPrecision(4));

export function quantizeVerdict(result: QuantizeResult): VerdictLine[] {
  const lines: VerdictLine[] = [];
  if (result.output) {
    const ratio = result.input.sizeBytes / result.output.sizeBytes;
    lines.push({
      text: `wrote ${result.output.path} (${result.mode}): ${formatBytes(result.input.sizeBytes)} -> ${formatBytes(result.output.sizeBytes)} (${ratio >= 1 ? `${ratio.toFixed(1)}x smaller` : `${(1 / ratio).toFixed(1)}x larger`})`,
      level: result.gateFailure ? 'warn' : 'good',
    });
  } else lines.push({ text: `nothing written (${result.mode}): no setting met the budget`, level: 'bad' });
  const f = result.fidelity;
  if (f.enabled) {
    const float = f.floatNodes.length ? `, ${f.floatNodes.length} node(s) kept float` : '';
    lines.push({
      text: `fidelity guard ${f.met ? 'met' : 'missed'}: worst output SQNR ${formatDb(f.final.worstSqnrDb)} on ${f.heldOut.samples} held-out sample(s)${float}`,
      level: f.met ? 'good' : f.decidedBy === 'fidelity' ? 'bad' : 'warn',
    });
  }
  if (result.guard) {
    const g = result.guard;
    lines.push({
      text: `accuracy: FP32 ${(g.baselineAccuracy * 100).toFixed(2)}%, ${result.mode} ${(g.chosen.accuracy * 100).toFixed(2)}% (drop ${g.chosen.dropPoints.toFixed(2)} pt) ${g.met ? 'within' : 'beyond'} the budget`,
      level: g.met ? 'good' : 'bad',
    });
  }
  if (result.speed)
    lines.push({ text: `measured speed-up: ${formatSpeedCheck(result.speed)}`, level: result.speed.speedup.verdict === 'slower' ? 'bad' : 'plain' });
  if (result.gateFailure) lines.push({ text: `gate failed: ${result.gateFailure}`, level: 'bad' });
  for (const w of result.warnings) lines.push({ text: `warning: ${w}`, level: 'warn' });
  return lines;
}

function fallbackFigure(result: QuantizeResult): string {
  const f = result.fidelity;
  if (!f.enabled || f.sensitivity.length === 0) return '';
  const rows: BarRow[] = [...f.sensitivity]
    .sort((a, b) => a.sqnrDb - b.sqnrDb)
    .slice(0, SENSITIVITY_PLOT_ROWS)
    .map((u) => ({
      label: u.nodes.length === 1 ? u.nodes[0]! : `${u.nodes[0]} (+${u.nodes.length - 1})`,
      value: u.sqnrDb,
      text: formatDb(u.sqnrDb),
      color: u.nodes.some((n) => f.floatNodes.includes(n)) ? '#d62728' : undefined,
    }));
  const svg = renderBarPlot(rows, {
    title: 'output SQNR with only this node quantized (lowest first)',
    xTitle: 'worst output SQNR vs FP32 (dB; lower = more sensitive)',
    unit: ' dB',
  });
  return figure(svg, 'The ranking the fallback used; red: kept float in the written model.', 'fallback-sensitivity');
}

export function renderQuantizeHtml(result: QuantizeResult, manifest: Manifest | null): string {
  const rows: [string, string][] = [['mode', result.mode]];
  if (result.output) rows.push(['size', `${formatBytes(result.input.sizeBytes)} -> ${formatBytes(result.output.sizeBytes)}`]);
  rows.push(...fidelityRows(result.fidelity, result.agreement));
  if (result.speed) rows.push(['measured speed-up', formatSpeedCheck(result.speed)]);
  rows.push(['written', result.output ? `${result.output.path} (${result.checks.ran ? 'loaded and run' : 'loaded, not run,'} in onnxruntime)` : 'nothing']);
  const sections: HtmlSection[] = [{ title: 'Result', body: keyValueTable(rows) }];
  const fallback = fallbackFigure(result);
  if (fallback) sections.push({ title: 'Fallback sensitivity', body: fallback });
  sections.push({
    title: 'Where the time went',
    body: htmlTable(
      ['phase', 'seconds'],
      result.timings.map((t) => [t.phase, t.seconds.toFixed(2)]),
    ),
  });
  sections.push({ title: 'Details', body: list(result.report.notes.map((n) => `note: ${n}`)) + folded('The terminal report', renderQuantizeSummary(result)) });
  return renderHtmlPage({ command: 'quantize', subject: result.input.path, verdict: quantizeVerdict(result), sections, manifest });
}

export function sensitivityVerdict(result: SensitivityResult): VerdictLine[] {
  const rows = result.sensitivity;
  const lines: VerdictLine[] = [];
  const worst = rows[0];
  lines.push({
    text: worst
      ? `${rows.length} node(s) analysed; most sensitive: ${worst.node} (${worst.opType}), output SQNR ${formatDb(worst.sqnrDb)} when only it is quantized`
      : 'no node to analyse',
    level: 'plain',
  });
  const m = result.metric;
  if (m)
    lines.push({
      text: `${m.name} on ${m.samples} samples: FP32 ${m.fp32 === null ? '-' : metricText(m.fp32)}, every node quantized ${metricText(m.int8)}`,
      level: 'plain',
    });
  for (const w of result.warnings) lines.push({ text: `warning: ${w}`, level: 'warn' });
  return lines;
}

export function renderSensitivityHtml(result: SensitivityResult, manifest: Manifest | null): string {
  const m = result.metric;
  const head = ['rank', 'node', 'op', 'output SQNR (dB)', 'top-1 agreement', ...(m ? [m.name] : [])];
  const rows = result.sensitivity.map((r, i) => [
    String(i + 1),
    r.node,
    r.opType,
    Number.isFinite(r.sqnrDb) ? r.sqnrDb.toFixed(1) : 'inf',
    r.top1Agreement === null ? '-' : `${(r.top1Agreement * 100).toFixed(2)}%`,
    ...(m ? [m.perNode[r.node] === undefined ? '-' : metricText(m.perNode[r.node]!)] : []),
  ]);
  const plotted = result.sensitivity.slice(0, SENSITIVITY_PLOT_ROWS);
  const finite = plotted.map((r) => r.sqnrDb).filter(Number.isFinite);
  const bars: BarRow[] = plotted.map((r) => ({ label: `${r.node} (${r.opType})`, value: r.sqnrDb, text: formatDb(r.sqnrDb) }));
  const sections: HtmlSection[] = [];
  if (bars.length > 0) {
    const svg = renderBarPlot(bars, {
      title: `per-node sensitivity: the ${bars.length} most sensitive of ${result.sensitivity.length} node(s)`,
      xTitle: 'output SQNR vs FP32 with only this node quantized (dB; lower = more sensitive)',
      unit: ' dB',
      max: finite.length ? undefined : 1,
    });
    sections.push({
      title: 'Per-node sensitivity',
      body: figure(svg, 'Nodes quantized one at a time; a short bar is a node to keep float first (--exclude-nodes).', 'sensitivity'),
    });
  }
  sections.push({
    title: 'All nodes',
    body: htmlTable(head, rows, { id: 'sensitivity' }) + folded('The terminal report', renderSensitivity(result.sensitivity, result.metric)),
  });
  return renderHtmlPage({ command: 'quantize --analyze', subject: result.model, verdict: sensitivityVerdict(result), sections, manifest });
}

/**
 * `prune --html`: the verdict (sparsity or channels removed, the accuracy before and after, the
 * file sizes, the measured speed-up), the per-layer table and a bar plot per layer (sparsity after
 * pruning, or the share of output channels kept), and the terminal report folded away. Pure.
 * May import: report/html, report/row-plots, report/prune-summary, report/speed-check, report/format, app and passes result types, benchmark types.
 */
import type { PruneWorkflowResult } from '../app/prune.js';
import type { ChannelPruneReport, MagnitudePruneReport } from '../app/prune-passes.js';
import type { Manifest } from '../benchmark/types.js';
import { formatBytes, formatPercent } from './format.js';
import { figure, folded, htmlTable, list, renderHtmlPage, type HtmlSection, type VerdictLine } from './html.js';
import { renderPruneSummary } from './prune-summary.js';
import { renderBarPlot } from './row-plots.js';
import { formatSpeedCheck } from './speed-check.js';

const change = (a: number | undefined, b: number | undefined): string => (a === b ? String(a ?? '-') : `${a ?? '-'} -> ${b ?? '-'}`);

export function pruneVerdict(result: PruneWorkflowResult): VerdictLine[] {
  const r = result.report;
  const what =
    r.pattern === 'channel'
      ? `${(r as ChannelPruneReport).channelsRemoved} of ${(r as ChannelPruneReport).channelsPrunable} prunable channels removed, params ${change((r as ChannelPruneReport).paramsBefore, (r as ChannelPruneReport).paramsAfter)}`
      : `weight sparsity ${formatPercent((r as MagnitudePruneReport).sparsityBefore, 1)} -> ${formatPercent((r as MagnitudePruneReport).sparsityAfter, 1)} (${r.pattern})`;
  const lines: VerdictLine[] = [{ text: `wrote ${result.output}: ${what}`, level: result.gateFailure ? 'warn' : 'good' }];
  lines.push({
    text: `file ${formatBytes(result.size.before.rawBytes)} -> ${formatBytes(result.size.after.rawBytes)}, gzip ${formatBytes(result.size.before.gzipBytes)} -> ${formatBytes(result.size.after.gzipBytes)}`,
    level: 'plain',
  });
  if (result.accuracy) {
    const { before, after } = result.accuracy;
    const drop = (after.top1 - before.top1) * 100;
    lines.push({
      text: `top-1 accuracy ${formatPercent(before.top1)} -> ${formatPercent(after.top1)} (${drop >= 0 ? '+' : ''}${drop.toFixed(2)} pt on ${before.samples} samples, without fine-tuning)`,
      level: 'plain',
    });
  }
  if (result.score) {
    const s = result.score;
    lines.push({
      text: `${s.metric}: ${s.before === null ? '' : `${formatPercent(s.before)} -> `}${formatPercent(s.after)} on ${s.samples} samples`,
      level: 'plain',
    });
  }
  if (result.speed)
    lines.push({ text: `measured speed-up: ${formatSpeedCheck(result.speed)}`, level: result.speed.speedup.verdict === 'slower' ? 'bad' : 'plain' });
  if (result.gateFailure) lines.push({ text: `gate failed: ${result.gateFailure}`, level: 'bad' });
  for (const w of result.warnings) lines.push({ text: `warning: ${w}`, level: 'warn' });
  return lines;
}

function layerSection(result: PruneWorkflowResult): HtmlSection {
  if (result.report.pattern === 'channel') {
    const r = result.report as ChannelPruneReport;
    const table = htmlTable(
      ['layer', 'op', 'in channels', 'out channels', 'params', 'FLOPs'],
      r.layers.map((l) => [
        l.node,
        l.opType,
        change(l.inChannelsBefore, l.inChannelsAfter),
        change(l.outChannelsBefore, l.outChannelsAfter),
        change(l.paramsBefore, l.paramsAfter),
        change(l.flopsBefore, l.flopsAfter),
      ]),
      { id: 'layers' },
    );
    const bars = r.layers
      .filter((l) => l.outChannelsBefore)
      .map((l) => {
        const kept = (l.outChannelsAfter ?? l.outChannelsBefore!) / l.outChannelsBefore!;
        return { label: l.node, value: kept * 100, text: `${l.outChannelsAfter ?? l.outChannelsBefore} of ${l.outChannelsBefore}` };
      });
    const svg = bars.length ? renderBarPlot(bars, { title: 'output channels kept per layer', xTitle: 'output channels kept (%)', unit: '%', max: 100 }) : '';
    return { title: 'Per layer', body: (svg ? figure(svg, 'Share of each layer’s output channels left after pruning.', 'layers') : '') + table };
  }
  const r = result.report as MagnitudePruneReport;
  const table = htmlTable(
    ['layer', 'op', 'shape', 'params', 'sparsity', 'gzip size', 'note'],
    r.layers.map((l) => [
      l.node,
      l.opType,
      l.shape.join('x'),
      String(l.params),
      `${formatPercent(l.sparsityBefore, 1)} -> ${formatPercent(l.sparsityAfter, 1)}`,
      `${formatBytes(l.gzipBytesBefore)} -> ${formatBytes(l.gzipBytesAfter)}`,
      l.skipped ?? '',
    ]),
    { id: 'layers' },
  );
  const svg = r.layers.length
    ? renderBarPlot(
        r.layers.map((l) => ({ label: l.node, value: l.sparsityAfter * 100, text: formatPercent(l.sparsityAfter, 1), color: l.skipped ? '#999' : undefined })),
        { title: 'weight sparsity per layer after pruning', xTitle: 'zero weights (%)', unit: '%', max: 100 },
      )
    : '';
  return {
    title: 'Per layer',
    body: (svg ? figure(svg, 'Share of each layer’s weights that are zero after pruning; grey: left dense.', 'layers') : '') + table,
  };
}

export function renderPruneHtml(result: PruneWorkflowResult, manifest: Manifest | null): string {
  const sections: HtmlSection[] = [
    layerSection(result),
    { title: 'Details', body: list(result.notes.map((n) => `note: ${n}`)) + folded('The terminal report', renderPruneSummary(result)) },
  ];
  return renderHtmlPage({ command: 'prune', subject: result.input, verdict: pruneVerdict(result), sections, manifest });
}

/**
 * The human report of `model-opt prune`: the per-layer table (channels, params and FLOPs, or
 * sparsity and gzip size), then sizes, accuracy, the onnxruntime check and the speed check. Pure
 * function of the typed result.
 * May import: cli-table3, report/format, report/speed-check, result types of app and passes.
 */
import Table from 'cli-table3';
import type { PruneWorkflowResult } from '../app/prune.js';
import type { ChannelPruneReport, MagnitudePruneReport } from '../app/prune-passes.js';
import { fitLastColumn, tableStyle } from './format.js';
import { formatSpeedCheck } from './speed-check.js';

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
const kib = (n: number): string => (n >= 1024 * 1024 ? `${(n / 1024 / 1024).toFixed(2)} MiB` : `${(n / 1024).toFixed(1)} KiB`);
const count = (n: number | undefined): string =>
  n === undefined ? '-' : n >= 1e9 ? `${(n / 1e9).toFixed(2)}G` : n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n);
const change = (a: number | undefined, b: number | undefined, fmt: (x: number | undefined) => string = count): string =>
  a === b ? fmt(a) : `${fmt(a)} -> ${fmt(b)}`;

function channelLines(r: ChannelPruneReport): string[] {
  const table = new Table({ head: ['layer', 'op', 'in channels', 'out channels', 'params', 'FLOPs'], style: tableStyle() });
  for (const l of r.layers) {
    table.push([
      l.node,
      l.opType,
      change(l.inChannelsBefore, l.inChannelsAfter),
      change(l.outChannelsBefore, l.outChannelsAfter),
      change(l.paramsBefore, l.paramsAfter),
      change(l.flopsBefore, l.flopsAfter),
    ]);
  }
  const lines = [table.toString()];
  lines.push(
    `channels removed: ${r.channelsRemoved} of ${r.channelsPrunable} prunable (criterion ${r.criterion}, scope ${r.scope}, sparsity ${r.sparsity}, counts rounded to multiples of ${r.roundTo})`,
  );
  if (r.compensated) {
    const unknown = r.compensated.unknown ? `; ${r.compensated.unknown} dropped as zero (their constant could not be followed)` : '';
    lines.push(
      `removed channels replaced by their ${r.compensation === 'mean' ? 'mean' : r.compensation} output: ${r.compensated.folded} folded into the next layer's bias${unknown}`,
    );
  }
  lines.push(`params: ${change(r.paramsBefore, r.paramsAfter)}   FLOPs (batch 1): ${change(r.flopsBefore, r.flopsAfter)}`);
  for (const g of r.groups.filter((x) => !x.prunable)) lines.push(`kept: ${g.layers.join(', ')}: ${g.reason ?? 'unprunable'}`);
  return lines;
}

function magnitudeLines(r: MagnitudePruneReport, width?: number): string[] {
  const table = new Table({ head: ['layer', 'op', 'shape', 'params', 'sparsity', 'gzip size', 'note'], style: tableStyle() });
  for (const l of r.layers) {
    table.push([
      l.node,
      l.opType,
      l.shape.join('x'),
      count(l.params),
      change(l.sparsityBefore, l.sparsityAfter, (x) => pct(x ?? 0)),
      change(l.gzipBytesBefore, l.gzipBytesAfter, (x) => kib(x ?? 0)),
      l.skipped ?? '',
    ]);
  }
  // The note (why a layer was skipped) is free text: it wraps on a narrow terminal.
  fitLastColumn(table, width);
  const lines = [table.toString()];
  lines.push(`weight sparsity: ${pct(r.sparsityBefore)} -> ${pct(r.sparsityAfter)} (${r.pattern}, scope ${r.scope}, criterion ${r.criterion})`);
  if (r.biasCorrection) {
    const failed = r.layers.filter((l) => typeof l.biasCorrected === 'string');
    lines.push(
      `bias correction: mean contribution of the zeroed weights folded into the bias of ${r.layers.filter((l) => l.biasCorrected === true).length} layers` +
        (failed.length ? `; not possible for ${failed.map((l) => `${l.node} (${l.biasCorrected})`).join(', ')}` : ''),
    );
  }
  if (r.patternVerified !== undefined) lines.push(`${r.pattern} pattern verified element-wise: ${r.patternVerified ? 'yes' : 'NO'}`);
  return lines;
}

export function renderPruneSummary(result: PruneWorkflowResult, options: { width?: number } = {}): string {
  const report = result.report;
  const lines = report.pattern === 'channel' ? channelLines(report as ChannelPruneReport) : magnitudeLines(report as MagnitudePruneReport, options.width);
  lines.push(
    `file: ${kib(result.size.before.rawBytes)} -> ${kib(result.size.after.rawBytes)} raw, ${kib(result.size.before.gzipBytes)} -> ${kib(result.size.after.gzipBytes)} gzip`,
  );
  if (result.accuracy) {
    const { before, after } = result.accuracy;
    lines.push(
      `top-1 accuracy on ${before.samples} samples: ${pct(before.top1)} -> ${pct(after.top1)} (${((after.top1 - before.top1) * 100).toFixed(2)} pt, without fine-tuning)`,
    );
    if (before.outOfRangeLabels) {
      lines.push(`labels: ${before.outOfRangeLabels} of ${before.samples} are out of range for the ${before.classes} classes of the output (scored as misses)`);
    }
  }
  if (result.score) lines.push(scoreLine(result.score));
  lines.push(`checked in onnxruntime (cpu provider): loads and runs, outputs ${result.check.outputs.map((o) => `${o.name} ${o.dims.join('x')}`).join(', ')}`);
  if (result.speed) lines.push(`measured speed-up: ${formatSpeedCheck(result.speed)}`);
  for (const n of result.notes) lines.push(`note: ${n}`);
  lines.push(`wrote ${result.output} (from ${result.input})`);
  return `${lines.join('\n')}\n`;
}

/** `--metric`: "ctc on 64 samples ('y'): 73.4% -> 56.3% (-17.19 pt, without fine-tuning)". */
function scoreLine(s: NonNullable<PruneWorkflowResult['score']>): string {
  const on = `${s.metric} on ${s.samples} samples${s.output ? ` ('${s.output}')` : ''}`;
  if (s.before === null) return `${on}: ${pct(s.after)} (the pruned model against the unpruned one, without fine-tuning)`;
  const delta = s.after - s.before;
  return `${on}: ${pct(s.before)} -> ${pct(s.after)} (${delta >= 0 ? '+' : ''}${(delta * 100).toFixed(2)} pt${s.higherIsBetter ? '' : ', lower is better'}, without fine-tuning)`;
}

/**
 * The human report of `model-opt prune`: the per-layer table (channels, params and FLOPs, or
 * sparsity and gzip size), then sizes, accuracy, the onnxruntime check and the speed check. Pure
 * function of the typed result. It opens with the verdict line and fits the terminal's width when given one.
 * May import: report/fit, report/verdict, report/speed-check, result types of app and passes.
 */
import type { PruneWorkflowResult } from '../app/prune.js';
import type { ChannelPruneReport, MagnitudePruneReport } from '../app/prune-passes.js';
import { type FitColumn, fitTable, fitText, hiddenLine } from './fit.js';
import { formatSpeedCheck } from './speed-check.js';
import { pruneVerdict, speedCheckNoise } from './verdict.js';

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
const kib = (n: number): string => (n >= 1024 * 1024 ? `${(n / 1024 / 1024).toFixed(2)} MiB` : `${(n / 1024).toFixed(1)} KiB`);
const count = (n: number | undefined): string =>
  n === undefined ? '-' : n >= 1e9 ? `${(n / 1e9).toFixed(2)}G` : n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n);
const change = (a: number | undefined, b: number | undefined, fmt: (x: number | undefined) => string = count): string =>
  a === b ? fmt(a) : `${fmt(a)} -> ${fmt(b)}`;

const CHANNEL_COLUMNS: FitColumn[] = [
  { head: 'layer', priority: 0, wrap: true, minWidth: 16 },
  { head: 'op', priority: 3 },
  { head: 'in channels', priority: 2, wrap: true, minWidth: 8 },
  { head: 'out channels', priority: 0, wrap: true, minWidth: 8 },
  { head: 'params', priority: 1, wrap: true, minWidth: 8 },
  { head: 'FLOPs', priority: 1, wrap: true, minWidth: 8 },
];

const MAGNITUDE_COLUMNS: FitColumn[] = [
  { head: 'layer', priority: 0, wrap: true, minWidth: 20 },
  { head: 'op', priority: 5 },
  { head: 'shape', priority: 4 },
  { head: 'params', priority: 3 },
  { head: 'sparsity', priority: 0 },
  { head: 'gzip size', priority: 1 },
  { head: 'note', priority: 2, wrap: true, minWidth: 12 },
];

function channelLines(r: ChannelPruneReport, width?: number): string[] {
  const rows = r.layers.map((l) => [
    l.node,
    l.opType,
    change(l.inChannelsBefore, l.inChannelsAfter),
    change(l.outChannelsBefore, l.outChannelsAfter),
    change(l.paramsBefore, l.paramsAfter),
    change(l.flopsBefore, l.flopsAfter),
  ]);
  const table = fitTable(CHANNEL_COLUMNS, rows, { width });
  const lines = [table.text, ...hiddenLine(table.hidden, width, '--json')];
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
  const rows = r.layers.map((l) => [
    l.node,
    l.opType,
    l.shape.join('x'),
    count(l.params),
    change(l.sparsityBefore, l.sparsityAfter, (x) => pct(x ?? 0)),
    change(l.gzipBytesBefore, l.gzipBytesAfter, (x) => kib(x ?? 0)),
    l.skipped ?? '',
  ]);
  const table = fitTable(MAGNITUDE_COLUMNS, rows, { width });
  const lines = [table.text, ...hiddenLine(table.hidden, width, '--json')];
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
  const lines = [
    pruneVerdict(result),
    ...speedCheckNoise(result.speed),
    ...(report.pattern === 'channel'
      ? channelLines(report as ChannelPruneReport, options.width)
      : magnitudeLines(report as MagnitudePruneReport, options.width)),
  ];
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
  return `${fitText(lines.join('\n'), options.width)}\n`;
}

/** `--metric`: "ctc on 64 samples ('y'): 73.4% -> 56.3% (-17.19 pt, without fine-tuning)". */
function scoreLine(s: NonNullable<PruneWorkflowResult['score']>): string {
  const on = `${s.metric} on ${s.samples} samples${s.output ? ` ('${s.output}')` : ''}`;
  if (s.before === null) return `${on}: ${pct(s.after)} (the pruned model against the unpruned one, without fine-tuning)`;
  const delta = s.after - s.before;
  return `${on}: ${pct(s.before)} -> ${pct(s.after)} (${delta >= 0 ? '+' : ''}${(delta * 100).toFixed(2)} pt${s.higherIsBetter ? '' : ', lower is better'}, without fine-tuning)`;
}

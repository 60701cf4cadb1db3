/**
 * The human and Markdown reports of `model-opt optimize`: one row per candidate (speed-up against
 * FP32 with its 95% interval, fidelity, size, time spent, chosen or why rejected), the region
 * search's steps, and the plain sentence saying what was written. Pure functions of the result.
 * The terminal report opens with the verdict (the chosen candidate's speed-up, fidelity and size)
 * and fits the terminal's width when given one.
 * May import: report/format, report/fit, report/verdict, report/quantize-summary (the simplify line), app result types.
 */
import type { CandidateFidelity, OptimizeCandidate, OptimizeResult } from '../app/optimize.js';
import type { PlanReport } from '../app/optimize-plan.js';
import { formatBytes, formatMs, formatSpeedup } from './format.js';
import { SPEEDUP_NOISE_THRESHOLD } from '../metrics/index.js';
import { type FitColumn, fitTable, fitText, hiddenLine } from './fit.js';
import { optimizeNoise, optimizeVerdict } from './verdict.js';
import { describeBudget } from '../app/quantize-fidelity.js';
import { untilText } from '../app/optimize-measure.js';
import { describeSimplified } from './quantize-summary.js';

const HEAD = ['candidate', 'speed-up vs FP32', 'p50 ms', 'fidelity', 'size', 'time s', 'result'];

/** The table's columns on a terminal: what goes first when it is narrow (0: never), what wraps. */
const COLUMNS: FitColumn[] = [
  { head: 'candidate', priority: 0, wrap: true, minWidth: 14 },
  { head: 'speed-up vs FP32', priority: 0, wrap: true, minWidth: 18 },
  { head: 'p50 ms', priority: 3 },
  { head: 'fidelity', priority: 1, wrap: true, minWidth: 14 },
  { head: 'size', priority: 2 },
  { head: 'time s', priority: 4 },
  { head: 'result', priority: 1, wrap: true, minWidth: 16 },
];
/** Without a terminal width: the widths the table always had (text wraps in them). */
const PIPE_WIDTHS = [22, 22, 7, 28, 8, 6, 42];

/** 'SQNR 34.2 dB, agree 99.5%' or with labels 'acc -0.15pt (SQNR 34.2 dB)'. */
export function formatFidelity(f: CandidateFidelity | null, allSamples?: number): string {
  if (!f) return '-';
  if (f.samples === 0) return 'not scored';
  // Scored on fewer samples than the run's scoring (a result of an older run, a library caller's): say so.
  const on = f.samples !== undefined && allSamples !== undefined && f.samples < allSamples ? `on ${f.samples} samples: ` : '';
  return on + fidelityText(f);
}

function fidelityText(f: CandidateFidelity): string {
  const outputs = Object.entries(f.outputs ?? {});
  const byKind = outputs.some(([, o]) => o.kind !== 'class-scores');
  const sqnr = f.sqnrDb === null ? null : Number.isFinite(f.sqnrDb) ? `SQNR ${f.sqnrDb.toFixed(1)} dB` : 'identical';
  const agree = f.top1Agreement === null ? null : `agree ${(f.top1Agreement * 100).toFixed(1)}%`;
  // Other kinds than class scores: each output's deciding values ('emb: cos 0.9963, nn 100%').
  const label = byKind
    ? outputs.map(([name, o]) => (outputs.length > 1 ? `${name}: ${o.short}` : o.short)).join('; ')
    : [sqnr, agree].filter(Boolean).join(', ');
  if (f.accuracyDropPoints !== null)
    return `acc ${f.accuracyDropPoints <= 0 ? '+' : '-'}${Math.abs(f.accuracyDropPoints).toFixed(2)}pt${label ? ` (${label})` : ''}`;
  return label || '-';
}

function row(c: OptimizeCandidate, allSamples: number): string[] {
  const result = c.status === 'chosen' ? `CHOSEN: ${c.reason}` : c.status === 'failed' ? c.reason : `rejected: ${c.reason}`;
  return [
    c.name === c.description ? c.name : `${c.name}\n${c.description}`,
    c.speedup ? formatSpeedup(c.speedup) : '-',
    c.p50Ms === null ? '-' : formatMs(c.p50Ms),
    formatFidelity(c.fidelity, allSamples),
    formatBytes(c.sizeBytes),
    (c.buildSeconds + c.measureSeconds).toFixed(1),
    result,
  ];
}

function baselineRow(result: OptimizeResult): string[] {
  const acc = result.baseline.accuracy === null ? '-' : `acc ${(result.baseline.accuracy * 100).toFixed(2)}%`;
  const specialized = result.simplify?.reference === 'specialized' ? result.simplify : undefined;
  return [
    specialized ? `fp32 (${specialized.report.specializedInputs.map((i) => `${i.name}=${i.values.join(',')}`).join(', ')})` : 'fp32 (input)',
    'baseline',
    result.baseline.p50Ms === null ? '-' : formatMs(result.baseline.p50Ms),
    acc,
    formatBytes(specialized ? specialized.referenceSizeBytes : result.input.sizeBytes),
    '-',
    result.chosen === 'fp32' ? (specialized ? 'CHOSEN: written (specialized FP32)' : 'CHOSEN: written unchanged') : '',
  ];
}

function settingsLine(result: OptimizeResult): string {
  const s = result.settings;
  const budget =
    result.budget.decidedBy === 'accuracy' && result.budget.maxAccuracyDrop
      ? `accuracy drop <= ${result.budget.maxAccuracyDrop.kind === 'points' ? `${result.budget.maxAccuracyDrop.value}pt` : `${result.budget.maxAccuracyDrop.value * 100}%`} (${s.metric})`
      : describeBudget(result.budget, result.budget.outputKinds);
  const through = result.budget.downstream.length > 0 ? ` (judged on the outputs of ${result.budget.downstream.join(' -> ')})` : '';
  return `objective ${result.objective}, batch ${s.batchSize ?? '-'}, ${s.threads} thread(s), ${s.providers.join(',')}; ${s.precision ? `up to ${s.iterations} paired interleaved runs per model (${untilText(s.precision, s.precisionFor)})` : `${s.iterations} paired interleaved runs per model`}; fidelity on ${s.samples} ${s.measuredOn} samples; budget: ${budget}${through}`;
}

/** The simplification run first, and which FP32 model the candidates were compared with. */
function simplifyLines(result: OptimizeResult): string[] {
  if (!result.simplify) return [];
  const reference =
    result.simplify.reference === 'specialized'
      ? 'every candidate compared with the specialized FP32 model (the FP32 row)'
      : 'the FP32 row is the input; fp32-optimized is made from the simplified model';
  return [`simplified first: ${describeSimplified(result.simplify)}; ${reference}`];
}

function repairLines(result: OptimizeResult): string[] {
  const r = result.repair;
  const lines = [`repair: ${r.ran ? `${r.reason} (judged on ${r.samples} samples, ${r.seconds.toFixed(1)} s)` : r.reason}`];
  for (const a of r.attempts) {
    lines.push(
      `  ${a.added ? '+' : '-'} ${a.candidate} (${formatSpeedup(a.speedup)}; ${a.missed}): ${a.result} (${a.runs} model(s) measured, ${a.seconds.toFixed(1)} s)`,
    );
  }
  return lines;
}

function regionLines(result: OptimizeResult): string[] {
  const r = result.regionSearch;
  const lines = [`region search: ${r.ran ? `${r.reason} (${r.seconds.toFixed(1)} s)` : r.reason}`];
  for (const s of r.steps) {
    lines.push(
      s.speedup
        ? `  ${s.kept ? '+' : '-'} ${s.region} (${s.nodes} node(s)) in float: ${formatSpeedup(s.speedup)} vs the best so far; ${s.kept ? 'kept' : s.speedup.verdict === 'faster' ? `not kept (under the ${SPEEDUP_NOISE_THRESHOLD * 100}% noise threshold)` : 'not kept'} (${s.seconds.toFixed(1)} s)`
        : `  - ${s.region} (${s.nodes} node(s)) in float: not timed: ${s.note ?? 'not built'}`,
    );
  }
  if (result.qat) lines.push(`QAT: ${result.qat.reason}`);
  lines.push(`pruning: ${result.pruning.reason}`);
  if (result.pruning.plan) lines.push(...planLines(result.pruning.plan));
  return lines;
}

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;

/** The trained candidates' plan of the time budget, and what each entry got. */
function planLines(plan: PlanReport): string[] {
  const head =
    `plan: ${plan.seconds.toFixed(0)} s for trained candidates (${plan.reserveSeconds.toFixed(0)} s kept for the most promising), ` +
    `${plan.target !== undefined ? `target ${pct(plan.target)} held-out agreement` : 'no agreement target (not class scores)'}` +
    `${plan.toBeat !== undefined ? `, to beat ${plan.toBeat.toFixed(2)}x` : ''}; took ${plan.spent.toFixed(0)} s`;
  const lines = [head];
  for (const e of plan.entries) {
    const expects = e.expectedSpeedup !== undefined ? `expects ${e.expectedSpeedup.toFixed(2)}x, ` : '';
    const got =
      e.rounds.length > 0
        ? `planned ${e.plannedSeconds.toFixed(0)} s, got ${e.seconds.toFixed(0)} s, ${e.epochs} epoch(s)${e.agreement !== undefined ? `, agreement ${pct(e.agreement)}` : ''}: `
        : '';
    lines.push(`  ${e.name} (${e.kind}): ${expects}${got}${e.result}; ${e.note}`);
  }
  return lines;
}

export function renderOptimizeSummary(result: OptimizeResult, options: { color?: boolean; width?: number } = {}): string {
  const rows = [baselineRow(result), ...result.candidates.map((c) => row(c, result.settings.samples))];
  const table = fitTable(COLUMNS, rows, { width: options.width, color: options.color, fixedWidths: PIPE_WIDTHS });
  const lines = [
    optimizeVerdict(result),
    ...optimizeNoise(result),
    table.text,
    ...hiddenLine(table.hidden, options.width),
    ...simplifyLines(result),
    settingsLine(result),
    ...repairLines(result),
    ...regionLines(result),
  ];
  lines.push('', result.summary);
  if (result.output)
    lines.push(
      `written: ${result.output.path} (${formatBytes(result.output.sizeBytes)}, sha256 ${result.output.sha256.slice(0, 16)})${result.recipe ? `; recipe: ${result.recipe}` : ''}`,
    );
  // Where the time went, the phases that took any (they add up to the total).
  const phases = (result.timings ?? []).filter((t) => t.seconds >= 0.05).map((t) => `${t.phase} ${t.seconds.toFixed(1)} s`);
  lines.push(`took ${result.seconds.toFixed(1)} s${phases.length > 0 ? ` (${phases.join(', ')})` : ''}`);
  if (result.gateFailure) lines.push(`gate failed: ${result.gateFailure}`);
  return `${fitText(lines.join('\n'), options.width)}\n`;
}

const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');

export function renderOptimizeMarkdown(result: OptimizeResult): string {
  const out = ['## model-opt optimize', '', `**${result.summary}**`, ''];
  out.push(
    `| ${HEAD.join(' | ')} |`,
    `| --- | ${HEAD.slice(1)
      .map(() => '---:')
      .join(' | ')} |`,
  );
  for (const r of [baselineRow(result), ...result.candidates.map((c) => row(c, result.settings.samples))]) out.push(`| ${r.map(cell).join(' | ')} |`);
  out.push(
    '',
    ...simplifyLines(result),
    `_${settingsLine(result)}_`,
    '',
    ...[...repairLines(result), ...regionLines(result)].map((l) => (l.startsWith('  ') ? `- ${l.trim()}` : l)),
  );
  if (result.gateFailure) out.push('', `**Gate failed:** ${result.gateFailure}`);
  return `${out.join('\n')}\n`;
}

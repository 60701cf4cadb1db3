/**
 * The one-line answers printed first by every command that compares models (benchmark, optimize,
 * quantize, prune): 'int8: 1.62x faster [1.52, 1.68], accuracy -0.05 pt (n.s.), 3.5x smaller', and
 * the warning when the timing behind them is too noisy to trust, with what to do about it.
 * Pure functions of the results.
 * May import: report/format, result types of bench, app and metrics.
 */
import type { BenchmarkResult, LatencyPoint, ModelResult } from '../benchmark/types.js';
import type { OptimizeResult } from '../app/optimize.js';
import type { PruneWorkflowResult } from '../app/prune.js';
import type { QuantizeResult } from '../app/quantize.js';
import type { SpeedCheck } from '../app/speed-check.js';
import { formatDb, formatPercent, formatPoints } from './format.js';
import { cannotBeFaster } from '../metrics/index.js';

/**
 * Timing too noisy to trust, in any of four ways (docs/benchmark.md, "On a terminal"): the run
 * times of a model vary by more than NOISE_CV_LIMIT (std / mean); a speed-up's 95% interval is
 * wider than +-NOISE_INTERVAL_LIMIT of its estimate; or it crosses 1.0 although its estimate is
 * NOISE_CROSSING_MARGIN or more away from 1 (a difference the noise hides); or a model called
 * faster has a p99 latency above the baseline's.
 */
export const NOISE_CV_LIMIT = 0.2;
export const NOISE_INTERVAL_LIMIT = 0.1;
export const NOISE_CROSSING_MARGIN = 0.03;

type Speedup = NonNullable<LatencyPoint['speedup']>;

const x = (v: number): string => `${v.toFixed(2)}x`;

/** '1.62x faster [1.52, 1.68]', '1.25x slower [1.20, 1.31]', 'no clear speed difference (0.95x [0.90, 1.13])', 'same speed (1.01x [1.00, 1.02])'. */
export function speedPhrase(s: Speedup): string {
  const interval = `[${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`;
  if (s.verdict === 'faster') return `${x(s.estimate)} faster ${interval}`;
  // Slower: as a slow-down factor, so the numbers read the same way round as 'faster'.
  if (s.verdict === 'slower') return `${x(1 / s.estimate)} slower [${(1 / s.high).toFixed(2)}, ${(1 / s.low).toFixed(2)}]`;
  if (s.verdict === 'within noise') return `same speed (${x(s.estimate)} ${interval})`;
  return `no clear speed difference (${x(s.estimate)} ${interval})`;
}

/** '3.50x smaller', '1.20x larger', 'same size' (within 5%). */
export function sizePhrase(before: number, after: number, what = ''): string {
  if (!(before > 0 && after > 0)) return '';
  const ratio = before / after;
  if (ratio >= 1.05) return `${x(ratio)} smaller${what}`;
  if (ratio <= 1 / 1.05) return `${x(1 / ratio)} larger${what}`;
  return `same size${what}`;
}

/** 'accuracy -0.05 pt (n.s.)', 'top1 -0.40 pt (p=0.01)', 'cer +0.20 pt', 'top-1 agreement 99.50%', or '' when nothing was scored. */
function accuracyPhrase(result: BenchmarkResult, model: ModelResult): string {
  const a = model.accuracy;
  const name = a && a.metric !== 'top1' ? a.metric : 'accuracy';
  if (a?.comparison) {
    const p = a.comparison.pValue;
    return `${name} ${formatPoints(a.comparison.difference.estimate)} (${p >= 0.05 ? 'n.s.' : p < 0.001 ? 'p<0.001' : `p=${p.toFixed(3)}`})`;
  }
  if (a?.difference !== undefined) return `${name} ${formatPoints(a.difference)}${a.higherIsBetter === false ? ' (lower is better)' : ''}`;
  const agreement = model.agreement?.[result.settings.outputName]?.top1Agreement;
  return agreement != null ? `top-1 agreement ${formatPercent(agreement)}` : '';
}

/** One line per candidate: its speed-up at each batch size, accuracy against the baseline, size. */
export function benchmarkVerdicts(result: BenchmarkResult): string[] {
  const baseline = result.models.find((m) => m.role === 'baseline');
  const multiBatch = result.settings.batchSizes.length > 1;
  return result.models
    .filter((m) => m.role === 'candidate')
    .map((m) => {
      const speeds = m.latency.filter((p) => p.speedup).map((p) => `${speedPhrase(p.speedup!)}${multiBatch ? ` at batch ${p.batchSize}` : ''}`);
      const parts = [speeds.join(', '), accuracyPhrase(result, m), baseline ? sizePhrase(baseline.file.sizeBytes, m.file.sizeBytes) : ''];
      return `${m.label}: ${parts.filter(Boolean).join(', ')}`;
    });
}

/** What to do about noisy timing, by the flags of the command. */
const REMEDY = {
  benchmark: 'more --iterations or a longer --duration',
  optimize: 'more --iterations (up to 200 by default)',
  speedCheck: 'more runs (--measure-speed 1000)',
};

function noiseLine(problems: string[], more: string): string[] {
  if (problems.length === 0) return [];
  return [
    `warning: the timing is too noisy to trust: ${problems.join('; ')}. Re-run with ${more}, fewer background jobs, and threads pinned (--threads 1; on Linux taskset -c 2)`,
  ];
}

/**
 * What is wrong with a speed-up's interval, or undefined: wider than +-NOISE_INTERVAL_LIMIT of its
 * estimate ('is ±14% wide'), or across 1.0 with an estimate NOISE_CROSSING_MARGIN or more away from
 * it ('crosses 1.0 around 1.06x').
 */
function intervalProblem(s: Speedup): string | undefined {
  const half = (s.high - s.low) / 2 / s.estimate;
  const interval = `speed-up interval [${s.low.toFixed(2)}, ${s.high.toFixed(2)}]`;
  // (A hair over the limit from rounding, e.g. [1.8, 2.2] around 2.0, is at it, not over.)
  if (half > NOISE_INTERVAL_LIMIT + 1e-9) return `${interval} is ±${(half * 100).toFixed(0)}% wide`;
  if (s.low < 1 && s.high > 1 && Math.abs(s.estimate - 1) >= NOISE_CROSSING_MARGIN - 1e-9)
    return `${interval} crosses 1.0 around ${s.estimate.toFixed(2)}x: faster or not cannot be told`;
  return undefined;
}

/** The benchmark's noise warning (empty when the timing looks trustworthy). */
export function benchmarkNoise(result: BenchmarkResult): string[] {
  const problems: string[] = [];
  const multiBatch = result.settings.batchSizes.length > 1;
  const at = (p: LatencyPoint): string => (multiBatch ? ` at batch ${p.batchSize}` : '');
  const noisy = result.models.flatMap((m) =>
    m.latency.filter((p) => p.stats.cv > NOISE_CV_LIMIT).map((p) => `${m.label}${at(p)} ${formatPercent(p.stats.cv, 0)}`),
  );
  if (noisy.length > 0) problems.push(`run-to-run variation (cv) ${noisy.join(', ')}, over the ${formatPercent(NOISE_CV_LIMIT, 0)} limit`);
  const baseline = result.models.find((m) => m.role === 'baseline');
  for (const m of result.models.filter((c) => c.role === 'candidate')) {
    for (const p of m.latency) {
      if (!p.speedup) continue;
      const problem = intervalProblem(p.speedup);
      if (problem) problems.push(`${m.label}${at(p)}: ${problem}`);
      const base = baseline?.latency.find((b) => b.batchSize === p.batchSize);
      if (p.speedup.verdict === 'faster' && base && p.stats.p99 > base.stats.p99)
        problems.push(
          `${m.label}${at(p)} is called faster but its p99 (${p.stats.p99.toFixed(3)} ms) is above the baseline's (${base.stats.p99.toFixed(3)} ms)`,
        );
    }
  }
  return noiseLine(problems, REMEDY.benchmark);
}

/** A speed check's noise warning (quantize or prune --measure-speed). */
export function speedCheckNoise(sp: SpeedCheck | undefined): string[] {
  if (!sp) return [];
  const problems: string[] = [];
  const cvs = [
    ['input', sp.baselineCv],
    ['written', sp.cv],
  ].filter((e): e is [string, number] => typeof e[1] === 'number' && e[1] > NOISE_CV_LIMIT);
  if (cvs.length > 0)
    problems.push(
      `run-to-run variation (cv) ${cvs.map(([w, cv]) => `${w} ${formatPercent(cv, 0)}`).join(', ')}, over the ${formatPercent(NOISE_CV_LIMIT, 0)} limit`,
    );
  const problem = intervalProblem(sp.speedup);
  if (problem) problems.push(problem);
  if (sp.speedup.verdict === 'faster' && sp.p99Ms !== undefined && sp.baselineP99Ms !== undefined && sp.p99Ms > sp.baselineP99Ms)
    problems.push(`called faster but its p99 (${sp.p99Ms.toFixed(3)} ms) is above the input's (${sp.baselineP99Ms.toFixed(3)} ms)`);
  return noiseLine(problems, REMEDY.speedCheck);
}

/**
 * Optimize's noise warning: the candidates whose speed-up intervals stayed too wide, or cross 1.0
 * away from it. Not one whose timing was settled because it could no longer be significantly
 * faster (precisionFor 'faster', cannotBeFaster): it was stopped on purpose, and no choice hangs
 * on its number.
 */
export function optimizeNoise(result: OptimizeResult): string[] {
  const settledSlow = (s: Speedup): boolean => result.settings?.precisionFor === 'faster' && cannotBeFaster(s);
  const problems = result.candidates.flatMap((c) => {
    const problem = c.speedup && !settledSlow(c.speedup) ? intervalProblem(c.speedup) : undefined;
    return problem ? [`${c.name}: ${problem}`] : [];
  });
  return noiseLine(problems, REMEDY.optimize);
}

/** 'int8-static: 1.62x faster [1.52, 1.68], acc -0.05 pt, 3.50x smaller' (the chosen candidate), or what was written instead. */
export function optimizeVerdict(result: OptimizeResult): string {
  const chosen = result.candidates.find((c) => c.status === 'chosen');
  if (!chosen) return `no candidate beat FP32 within the budget: ${result.output ? 'wrote FP32' : 'nothing written'}`;
  const f = chosen.fidelity;
  const fidelity = !f
    ? ''
    : f.accuracyDropPoints !== null
      ? `accuracy ${formatPoints(-f.accuracyDropPoints / 100)}`
      : f.sqnrDb !== null
        ? `SQNR ${formatDb(f.sqnrDb)}`
        : f.top1Agreement !== null
          ? `top-1 agreement ${formatPercent(f.top1Agreement)}`
          : '';
  const parts = [
    chosen.speedup ? speedPhrase(chosen.speedup) : '',
    fidelity,
    chosen.sizeBytes !== null ? sizePhrase(result.input.sizeBytes, chosen.sizeBytes) : '',
  ];
  return `${chosen.name}: ${parts.filter(Boolean).join(', ')}`;
}

/** 'int8: 1.58x faster [1.55, 1.61], SQNR 34.2 dB (budget met), 3.50x smaller' (speed only with --measure-speed). */
export function quantizeVerdict(result: QuantizeResult): string {
  const f = result.fidelity;
  const first = f.enabled ? Object.values(f.final.outputs)[0] : undefined;
  const met = f.enabled && f.met;
  const g = result.guard;
  const quality = g
    ? `accuracy ${formatPoints(-g.chosen.dropPoints / 100)} (budget ${g.met ? 'met' : 'MISSED'})`
    : first
      ? `${first.top1Agreement !== null ? `top-1 agreement ${formatPercent(first.top1Agreement)}` : `SQNR ${formatDb(first.sqnrDb)}`} (budget ${met ? 'met' : 'MISSED'})`
      : '';
  const parts = [
    result.speed ? speedPhrase(result.speed.speedup) : '',
    quality,
    result.output ? sizePhrase(result.input.sizeBytes, result.output.sizeBytes) : 'nothing written',
  ];
  return `${result.mode}: ${parts.filter(Boolean).join(', ')}`;
}

/** '2:4: 1.05x faster [..], accuracy -0.30 pt, 1.20x smaller (gzip)'. */
export function pruneVerdict(result: PruneWorkflowResult): string {
  const r = result.report;
  const what = r.pattern === 'channel' ? 'channel' : r.pattern;
  const accuracy = result.accuracy
    ? `top-1 ${formatPoints(result.accuracy.after.top1 - result.accuracy.before.top1)}`
    : result.score && result.score.before !== null
      ? `${result.score.metric} ${formatPoints(result.score.after - result.score.before)}`
      : '';
  // Unstructured and N:M zeros keep the file's raw size: they shrink it compressed.
  const size =
    r.pattern === 'channel'
      ? sizePhrase(result.size.before.rawBytes, result.size.after.rawBytes)
      : sizePhrase(result.size.before.gzipBytes, result.size.after.gzipBytes, ' (gzip)');
  const parts = [result.speed ? speedPhrase(result.speed.speedup) : '', accuracy, size];
  return `${what}: ${parts.filter(Boolean).join(', ')}`;
}

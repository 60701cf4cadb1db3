/**
 * Measuring optimize's candidates: one paired, interleaved benchmark of every built candidate
 * against the input (speed-up interval, p50, accuracy with labels, agreement with FP32), as the user
 * will run the model (batch, threads, shapes, data), and the budget every candidate is judged by.
 * May import: errors, app/*, metrics, types from below; benchmark (lazily).
 */
import { UsageError } from '../errors.js';
import type { AccuracyBudget, BenchmarkOptions, BenchmarkResult } from '../benchmark/types.js';
import { SPEEDUP_NOISE_THRESHOLD, type AgreementMetrics, type Speedup } from '../metrics/index.js';
import { guardLater, precisionForOf, type Built, type Measured, type OptimizeRun } from './optimize-run.js';
import type { CandidateFidelity, CandidateOutput } from './optimize.js';
import { isRetrained } from './optimize-recipe.js';
import { judgeOutput } from '../metrics/output-kinds.js';

/**
 * Untimed runs of each model before optimize's timings (the benchmark's default is 10): a session's
 * first runs pay for allocation (recognizer stand-in: 4.4, 2.8, then 2.0-2.2 ms from the third, on
 * FP32 and INT8 alike), and the warm interleaving re-warms 3 runs at every switch anyway.
 */
const OPTIMIZE_WARMUP = 3;

/** How every timing here runs: as the user will run the model, on the same data and shapes. */
export function timingOf(run: OptimizeRun): Omit<BenchmarkOptions, 'baseline'> {
  const { options } = run;
  return {
    warmup: OPTIMIZE_WARMUP,
    sessions: run.sessions,
    data: run.measureData,
    threads: run.threads,
    providers: options.providers,
    batchSizes: run.batchSizes,
    shapes: run.shapes,
    constants: run.feedValues,
    feedback: options.feedback,
    measureMemory: false,
    precisionFor: precisionForOf(run),
  };
}

/**
 * How candidates are scored: each output by its kind, a sequence embedding pooled over the mask,
 * after the --downstream models; FP32's outputs kept from one scoring to the next (it is the
 * baseline of every one: run once on all the data).
 */
export function scoringOf(run: OptimizeRun): Pick<BenchmarkOptions, 'outputKinds' | 'maskInput' | 'downstream' | 'referenceCache'> {
  const { downstream } = run.options;
  return {
    referenceCache: run.referenceCache,
    outputKinds: run.inputs.judged.kindOf,
    ...(run.maskInput ? { maskInput: run.maskInput } : {}),
    ...(downstream && downstream.length > 0 ? { downstream } : {}),
  };
}

/**
 * The benchmark; labels score the task metric (top-1 by default). When the default cannot score
 * this model's output (not class scores) and no accuracy budget needs it, fidelity alone decides.
 */
async function benchmarkWithFallback(run: OptimizeRun, options: BenchmarkOptions): Promise<BenchmarkResult> {
  const { benchmark } = await import('../benchmark/index.js');
  const callbacks = { onWarning: run.warn, onProgress: (e: { message: string }) => run.progress(e.message) };
  try {
    return await benchmark({ ...options, metric: run.metric }, callbacks);
  } catch (error) {
    if (!(error instanceof UsageError) || run.metric !== undefined || run.options.maxAccuracyDrop || !/cannot compute top-1/.test(error.message)) throw error;
    run.warn(`no accuracy column: ${error.message.split(';')[0]}; fidelity (SQNR, agreement with FP32) decides`);
    run.metric = 'agreement';
    return benchmark({ ...options, metric: run.metric }, callbacks);
  }
}

/** When the timing stops: '+-3%', or '+-3%, or once it cannot be faster' (precisionFor 'faster'). */
export function untilText(precision: number, precisionFor: 'every' | 'faster'): string {
  const known = `until every speed-up was known to +-${precision * 100}%`;
  return precisionFor === 'faster' ? `${known}, or could no longer be significantly faster` : known;
}

/** Samples the timing reads its inputs from (the screen scores nothing). */
export const SCREEN_SAMPLES = 64;

/**
 * Time the built candidates against the input in one interleaved run (speed only: nothing is
 * scored); then score the ones that could be chosen (faster than FP32; for `--objective size` not
 * slower; every one for `select: first`) on all the data, FP32 with them (scoreContenders). A
 * candidate that cannot win costs its timing, not an evaluation: it is reported 'not scored'.
 */
export async function measure(run: OptimizeRun, list: Built[], scoreAll = run.options.scoreAll === true): Promise<void> {
  const ready = list.filter((b) => b.path);
  if (ready.length === 0) return;
  const runs = run.precision === null ? `${run.iterations}` : `up to ${run.iterations} (${untilText(run.precision, precisionForOf(run))})`;
  run.progress(`timing ${ready.length} candidate(s) against ${run.reference} (${runs} interleaved runs each, ${run.threads} thread(s))`);
  const t0 = performance.now();
  const base = { ...timingOf(run), ...scoringOf(run), baseline: run.reference, outputName: run.options.outputName };
  const timed = await benchmarkWithFallback(run, {
    ...base,
    candidates: ready.map((b) => b.path!),
    iterations: run.iterations,
    ...(run.precision !== null ? { precision: run.precision } : {}),
    maxSamples: SCREEN_SAMPLES,
    score: false,
  });
  run.bench = timed;
  const seconds = (performance.now() - t0) / 1000 / ready.length;
  ready.forEach((b, i) => {
    const m = measuredOf(run, b, timed, i + 1, seconds, 0);
    // Scored on all the data in an earlier comparison (the same file): its values stand.
    run.measured.set(b.name, b.scoredFidelity ? { ...m, fidelity: b.scoredFidelity, scored: true } : m);
  });
  const couldBe = scoreAll ? ready : ready.filter((b) => couldWin(run, run.measured.get(b.name)!.speedup));
  // One that could be chosen with its guard left for later is pre-checked; one whose pre-check missed
  // is guarded first (guardWhereNeeded), then scored: scoring it as the pass made it would only confirm the miss.
  for (const b of couldBe) {
    if (b.fidelityLater && !b.scoredFidelity && b.precheck === undefined && b.quantize?.context) {
      const { precheck } = await import('./quantize-steps.js');
      const found = await precheck(b.quantize.context);
      if (found) b.precheck = found;
    }
  }
  const contenders = couldBe.filter((b) => !b.scoredFidelity && !needsGuard(b));
  for (const b of ready) {
    if (couldBe.includes(b)) continue;
    const s = run.measured.get(b.name)!.speedup;
    run.measured.get(b.name)!.cannotWin =
      run.objective === 'size'
        ? `slower than FP32 (${x(s)}${guarded(b)}); not scored`
        : `not significantly faster (${x(s)}: ${s.verdict}${guarded(b)}); not scored`;
  }
  if (contenders.length > 0) await scoreContenders(run, contenders, base, scoreAll);
  // FP32's own accuracy (with labels) is reported even when no candidate was scored.
  else if (run.scored) return;
  else if (timed.data.labels) run.scored = await benchmarkWithFallback(run, { ...base, candidates: [], time: false });
  else run.scored = timed;
}

const x = (s: Speedup): string => `${s.estimate.toFixed(2)}x, ${s.low.toFixed(2)}-${s.high.toFixed(2)}`;

/** ', after its guard kept 2 node(s) float' for a candidate whose guard kept nodes float, else ''. */
function guarded(b: Built): string {
  const f = b.quantize?.fidelity;
  return f?.enabled && f.floatNodes.length > 0 ? `, after its guard kept ${f.floatNodes.length} node(s) float` : '';
}

/**
 * Score the candidates that could be chosen on all the data, FP32 with them. For the fastest
 * (latency, throughput): the fastest first, with those that may be as fast; once one is within
 * the budget, a candidate whose interval lies below its lower bound cannot be chosen and is not
 * scored (it keeps the screen's values, and says so). `scoreAll`: every one, in one pass.
 */
async function scoreContenders(run: OptimizeRun, contenders: Built[], base: Omit<BenchmarkOptions, 'candidates'>, scoreAll: boolean): Promise<void> {
  const speed = (b: Built): Speedup => run.measured.get(b.name)!.speedup;
  const ordered = run.fastest && !scoreAll;
  let pending = ordered ? [...contenders].sort((a, b) => speed(b).estimate - speed(a).estimate) : contenders;
  while (pending.length > 0) {
    const lead = pending[0]!;
    const batch = ordered ? pending.filter((b) => b === lead || speed(b).high >= speed(lead).low) : pending;
    run.progress(`scoring ${batch.map((b) => b.name).join(', ')} on all the data`);
    // The screen's interleaved runs gave the speed: this pass scores only.
    const scored = await benchmarkWithFallback(run, { ...base, candidates: batch.map((b) => b.path!), time: false });
    run.scored = scored;
    batch.forEach((b, i) => {
      const m = run.measured.get(b.name)!;
      m.fidelity = fidelityOf(run, b, scored, i + 1, scored.data.samples);
      m.scored = true;
      b.scoredFidelity = m.fidelity;
    });
    pending = pending.filter((b) => !batch.includes(b));
    const best = batch.filter((b) => judged(run, b).ok).sort((a, b) => speed(b).low - speed(a).low)[0];
    if (!best) continue;
    for (const b of pending.filter((p) => speed(p).high < speed(best).low)) {
      run.measured.get(b.name)!.cannotWin =
        `not scored on all the data: its interval (${speed(b).low.toFixed(2)}-${speed(b).high.toFixed(2)}x) lies below ${best.name}'s (from ${speed(best).low.toFixed(2)}x), which is within the budget`;
    }
    pending = pending.filter((p) => speed(p).high >= speed(best).low);
  }
}

/**
 * The final comparison, when the searches or the trained candidates added some (`extra`): those,
 * with every built candidate that can still be chosen (significantly faster than FP32 in its
 * measurement and not over the budget; every one for select: first, --objective size and
 * --score-all), timed in one interleaved run, so the choice compares speed-ups of one run; a
 * candidate that could not be chosen keeps its measurement. Returns every candidate, as guarded.
 */
export async function finalComparison(run: OptimizeRun, built: Built[], extra: Built[]): Promise<Built[]> {
  const all = [...built, ...extra];
  if (extra.length === 0) return all;
  const again = [...built.filter((b) => stillContends(run, b)), ...extra];
  await measure(run, again);
  await guardWhereNeeded(run, again);
  const made = new Map(again.map((b) => [b.name, b]));
  return all.map((b) => made.get(b.name) ?? b);
}

function stillContends(run: OptimizeRun, b: Built): boolean {
  const m = run.measured.get(b.name);
  if (!b.path || !m || m.cannotWin) return false;
  if (!run.fastest) return true;
  return couldWin(run, m.speedup) && (!m.scored || judged(run, b).ok);
}

/**
 * Candidates whose guard was left for later (the fidelity guard, or the labelled guard with
 * --max-accuracy-drop), that could be chosen and are over the budget: the guard keeps sensitive
 * nodes float (from the pass's result: no new calibration), and those candidates are measured
 * again against FP32 like any candidate (the others keep their measurements): one the float nodes
 * made no faster than FP32 cannot be chosen, and is not scored again. `list` is updated in place.
 */
export async function guardWhereNeeded(run: OptimizeRun, list: Built[]): Promise<void> {
  const guarded: Built[] = [];
  for (const [i, b] of list.entries()) {
    const m = run.measured.get(b.name);
    if (!(b.labelledLater || b.fidelityLater) || !b.applied || !m) continue;
    // Scored and over the budget (a retrained one, e.g. pruned-1-int8, as the choice judges it: its
    // SQNR against FP32 is reported, not applied); or not scored because its pre-check missed, and it could be chosen.
    const over = m.scored ? !judged(run, b).ok : needsGuard(b) && (run.options.scoreAll === true || couldWin(run, m.speedup));
    if (!over) continue;
    if (!gainLeft(run, m.speedup)) {
      const miss = m.scored ? 'over the budget' : `over the budget on the guard's pre-check (${b.precheck?.failures.join('; ') ?? 'missed'})`;
      m.cannotWin = `${miss}; not guarded: ${(Math.floor(m.speedup.estimate * 1000) / 1000).toFixed(3)}x (${m.speedup.low.toFixed(2)}-${m.speedup.high.toFixed(2)}) as the pass made it, and the nodes its guard keeps float only take from that: no gain above the ${SPEEDUP_NOISE_THRESHOLD * 100}% noise threshold would be left`;
      continue;
    }
    run.passSpeedups.set(b.name, m.speedup);
    list[i] = await guardLater(run, b);
    guarded.push(list[i]!);
  }
  if (guarded.length > 0) await measure(run, guarded);
}

/**
 * Whether guarding a candidate can leave a gain worth its cost: the guard's float nodes never make
 * a model faster, so one measured under 1 + SPEEDUP_NOISE_THRESHOLD as the pass made it would end
 * within the noise at best (for the fastest; --objective size, select: first and --score-all guard any).
 */
function gainLeft(run: OptimizeRun, speedup: Speedup): boolean {
  return !run.fastest || speedup.estimate >= 1 + SPEEDUP_NOISE_THRESHOLD;
}

/** A candidate whose fidelity guard was left for later and whose pre-check missed: the guard will keep nodes float. */
function needsGuard(b: Built): boolean {
  return b.fidelityLater === true && b.precheck?.met === false && b.applied !== undefined;
}

/** Whether a candidate with this speed-up could be the one chosen. */
function couldWin(run: OptimizeRun, speedup: Speedup): boolean {
  if (run.select === 'first') return true;
  return run.objective === 'size' ? speedup.verdict !== 'slower' : speedup.verdict === 'faster';
}

/** Candidate `index` of a benchmark result (0 is the input), with the quantize guard's summary. */
function measuredOf(run: OptimizeRun, b: Built, result: BenchmarkResult, index: number, seconds: number, samples: number): Measured {
  const point = result.models[index]!.latency[0]!;
  return { speedup: point.speedup!, p50Ms: point.stats.p50, seconds, fidelity: fidelityOf(run, b, result, index, samples) };
}

/** Candidate `index`'s fidelity in a benchmark result (scored on `samples`; 0: not scored). */
function fidelityOf(run: OptimizeRun, b: Built, result: BenchmarkResult, index: number, samples: number): CandidateFidelity {
  const base = result.models[0]!;
  const m = result.models[index]!;
  const acc = m.accuracy && base.accuracy ? m.accuracy : undefined;
  const sign = acc?.higherIsBetter === false ? 1 : -1;
  const q = b.quantize?.fidelity;
  return {
    ...agreementFidelity(run, m.agreement ?? {}),
    accuracy: acc ? acc.value : null,
    accuracyDropPoints: acc ? sign * (acc.value - base.accuracy!.value) * 100 : null,
    samples,
    ...(q && q.enabled ? { guard: { met: q.met, worstSqnrDb: q.final.worstSqnrDb, floatNodes: q.floatNodes.length, decidedBy: q.decidedBy } } : {}),
  };
}

/**
 * A candidate's agreement with FP32 as the budget reads it, from the benchmark's per-output
 * agreement: each judged output (not a state) by its kind, the worst SQNR and top-1 agreement.
 */
export function agreementFidelity(
  run: OptimizeRun,
  agreement: Readonly<Record<string, AgreementMetrics>>,
): Pick<CandidateFidelity, 'sqnrDb' | 'top1Agreement' | 'outputs'> {
  const kinds = run.inputs.judged.kindOf;
  const judged = Object.entries(agreement).filter(([name]) => Object.hasOwn(kinds, name) && kinds[name] !== 'state');
  const outputs = Object.create(null) as Record<string, CandidateOutput>;
  for (const [name, a] of judged) {
    const j = judgeOutput(name, kinds[name]!, a, run.kindBudget);
    const sqnrOnly = j.failures.length === 1 && j.failures[0]!.startsWith(`'${name}': SQNR `);
    outputs[name] = { kind: j.kind, judgedOn: j.judgedOn, short: j.short, met: j.met, failures: j.failures, sqnrOnly };
  }
  const values = judged.map(([, a]) => a);
  const agreements = values.map((a) => a.top1Agreement).filter((a): a is number => a !== null);
  return {
    sqnrDb: values.length ? Math.min(...values.map((a) => a.sqnrDb)) : null,
    top1Agreement: agreements.length ? Math.min(...agreements) : null,
    outputs,
  };
}

/** Nothing was built: time the input against itself so the report still has its latency. */
export async function measureInputOnly(run: OptimizeRun): Promise<void> {
  run.bench = run.scored = await benchmarkWithFallback(run, {
    ...timingOf(run),
    ...scoringOf(run),
    baseline: run.reference,
    iterations: 20,
    outputName: run.options.outputName,
  });
}

function dropWithin(budget: AccuracyBudget, baseline: number, drop: number): boolean {
  return budget.kind === 'points' ? drop <= budget.value + 1e-9 : drop / 100 <= budget.value * baseline + 1e-12;
}

/** `within` as the choice judges candidate `b` (a retrained one, pruned or QAT, by its decisions alone): every place that judges a built candidate. */
export function judged(run: OptimizeRun, b: Built): { ok: boolean; why: string } {
  return within(run, run.measured.get(b.name)!.fidelity, isRetrained(b.spec));
}

/**
 * Whether a candidate is within the budget, and why. A pruned + distilled candidate is a retrained
 * model, not FP32 plus quantization noise: where its output is class scores (or a class sequence),
 * top-1 agreement (sequence agreement; or the labelled accuracy) decides and the SQNR floor is reported, not applied (a student that keeps
 * 95.5% of FP32's decisions measured 15.8 dB on the logits, docs/optimize.md).
 */
export function within(run: OptimizeRun, f: CandidateFidelity, retrained = false): { ok: boolean; why: string } {
  const { options } = run;
  if (f.samples === 0) return { ok: false, why: 'not scored (it could not be chosen)' };
  if (options.maxAccuracyDrop && f.accuracyDropPoints !== null) {
    const ok = dropWithin(options.maxAccuracyDrop, run.scored!.models[0]!.accuracy?.value ?? 0, f.accuracyDropPoints);
    return { ok, why: `accuracy drop ${f.accuracyDropPoints.toFixed(2)}pt ${ok ? 'within' : 'over'} the budget` };
  }
  const failures: string[] = [];
  const waived: string[] = [];
  for (const [name, o] of Object.entries(f.outputs ?? {})) {
    if (o.met) continue;
    const decidedByAgreement = retrained && (o.kind === 'class-scores' || o.kind === 'class-sequence');
    if (decidedByAgreement && o.sqnrOnly) waived.push(`'${name}': ${o.judgedOn}`);
    // A retrained model misses on agreement: its SQNR is not a reason (it is reported, not applied).
    else failures.push(...(decidedByAgreement ? o.failures.filter((f) => !f.startsWith(`'${name}': SQNR `)) : o.failures));
  }
  if (failures.length > 0) return { ok: false, why: failures.join('; ') };
  return {
    ok: true,
    why: waived.length > 0 ? `within the fidelity budget (retrained: top-1 / sequence agreement decides; ${waived.join('; ')})` : 'within the fidelity budget',
  };
}

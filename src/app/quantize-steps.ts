/**
 * The quantize workflow's steps over one context (app/quantize-context.ts): plan the held-out
 * check, apply the mode's pass (its descriptor), int8's labelled guard or QAT, choose the check
 * inputs, the fidelity guard (its fallback re-applies the pass from the context, never calibrating
 * again), the gate, then write and check the file in onnxruntime. Each step reads what the earlier
 * ones left in the context and adds its own part; `optimize` runs the same steps per candidate.
 * May import: errors, calibration/defaults, app/*, types from below; data, runtime, evaluate, passes (lazily).
 */
import { NothingToDoError, UsageError } from '../errors.js';
import { CHECK_SAMPLE_COUNT } from '../calibration/defaults.js';
import type { Dataset } from '../data/index.js';
import type { AgreementMetrics } from '../metrics/index.js';
import type { FidelityBudget, FidelityGuardResult, GuardResult } from './quantize-passes.js';
import type { ModeSettings } from './quantize-modes.js';
import type { CheckInputs, QuantizeContext } from './quantize-context.js';
import type { FidelityReport, QuantizeChecks, QuantizeResult } from './quantize.js';
import { randomCheckData } from './quantize-check-data.js';
import { taskMetricBudget } from './quantize-metric.js';

/** The budget and which samples set the ranges and which check the result (app/quantize-fidelity.ts). */
export async function planStep(ctx: QuantizeContext): Promise<void> {
  const { options, calibration, evalData } = ctx;
  const guardOn = options.guard !== false;
  if (options.taskMetric && !guardOn) throw new UsageError('--metric sets a budget of the fidelity guard, which --no-guard turns off');
  // --metric: the metric decides (labelled drop on all of --eval-data, or label-free against FP32).
  ctx.metricBudget = options.taskMetric ? await taskMetricBudget(ctx, options.taskMetric) : options.metric;
  const labelledMetric = ctx.metricBudget?.maxDrop !== undefined && options.taskMetric !== undefined;
  if (!guardOn) return;
  const { planHeldOut } = await import('./quantize-fidelity.js');
  ctx.plan = planHeldOut({
    available: calibration?.count,
    calibrationCount: ctx.calibrationCount,
    evalCount: evalData?.count,
    setsRanges: ctx.mode.setsRanges,
    ...(labelledMetric ? { checkCount: evalData!.count } : {}),
  });
  if (ctx.plan.note && ctx.plan.source === 'calibration-tail') ctx.onWarning(ctx.plan.note);
}

/** The settings a mode's pass reads, from the workflow's options. */
function modeSettings(ctx: QuantizeContext): ModeSettings {
  const { options, plan } = ctx;
  return {
    calibration: ctx.calibration,
    // int8: the first samples set the ranges; the guard checks the held-out rest.
    calibrationCount: plan && plan.source !== 'random' ? plan.calibrationSamples : ctx.calibrationCount,
    batchSize: options.batchSize,
    method: options.method,
    percentile: options.percentile,
    perChannel: options.perChannel ?? true,
    reduceRange: options.reduceRange,
    minConvReduction: options.minConvReduction,
    padChannels: options.padChannels,
    layoutAnchors: options.layoutAnchors,
    activationType: options.activationType,
    biasCorrection: options.biasCorrection,
    crossLayerEqualization: options.crossLayerEqualization,
    opTypes: options.opTypes,
    excludeOpTypes: options.excludeOpTypes,
    excludeNodes: options.excludeNodes,
    keepIoTypes: options.keepIoTypes,
    opBlockList: options.opBlockList,
    int4: options.int4,
    runner: ctx.runner,
    onProgress: ctx.onProgress,
    onWarning: ctx.onWarning,
  };
}

/**
 * Apply the mode's pass (or take `applied`, a result re-made from a shared calibration). A pass
 * that changed nothing is refused (nothing written), unless `--op-types` named what to quantize.
 */
export async function applyStep(ctx: QuantizeContext, applied?: QuantizeContext['applied']): Promise<void> {
  const { mode, options } = ctx;
  const result = applied ?? (await mode.apply(ctx.model, modeSettings(ctx)));
  const nothing = await mode.nothingReason(result.report, ctx.model);
  if (nothing) {
    const reason = `${nothing.why}. ${nothing.advice}`;
    if (mode.nothingIsAlwaysAnError || !options.opTypes || options.opTypes.length === 0) throw new NothingToDoError(`${options.model}: ${reason}`, nothing.why);
    ctx.onWarning(`${options.model}: ${reason.split('. ')[0]} (--op-types ${options.opTypes.join(',')})`);
  }
  ctx.applied = result;
  ctx.written = result.model;
  ctx.report = result.report;
  ctx.fallback = true;
  const timings =
    result.int8 && 'timings' in result.report ? (result.report.timings as { preprocess: number; shapes: number; calibration: number }) : undefined;
  // The int8 pass timed its own parts; what is left (the nothing-quantized check) goes with QDQ.
  if (timings && !applied)
    ctx.lapParts(
      [
        ['preprocess', timings.preprocess],
        ['shapes', timings.shapes],
        ['calibration', timings.calibration],
      ],
      'qdq',
    );
  else ctx.lap('quantize');
}

/** int8: QAT after calibration, or the labelled accuracy guard (--max-accuracy-drop without --metric). */
export async function int8WorkflowsStep(ctx: QuantizeContext): Promise<void> {
  const { options, applied } = ctx;
  const context = applied?.int8;
  if (!context || !ctx.mode.int8Workflows) return;
  if (options.qat) {
    const { qatStep } = await import('./quantize-qat.js');
    const trained = await qatStep(ctx, context, options.qat);
    ctx.written = trained.model;
    ctx.qat = trained.report;
    ctx.fallback = false;
    ctx.lap('qat');
  }
  if (options.maxAccuracyDrop && !options.taskMetric) {
    if (!ctx.evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
    if (ctx.labelledLater) {
      ctx.fallback = false;
      return;
    }
    const { guardAccuracy } = await import('./quantize-guard.js');
    const guard = await guardAccuracy(ctx.model, context, ctx.evalData, options.maxAccuracyDrop, {
      outputName: options.outputName,
      runner: ctx.runner,
      onProgress: (e) => ctx.onProgress(e.message),
    });
    ctx.written = guard.model;
    (ctx.report as { qdq: GuardResult['qdq'] }).qdq = guard.qdq;
    ctx.labelled = guard;
    ctx.fallback = false;
    ctx.lap('accuracy-guard');
  }
}

/**
 * Inputs for the checks, made before anything is written: the held-out samples (guard on), else
 * the first calibration samples as before. Without data a symbolic dim that no --shape sizes
 * fails here: for int8 (always with data) that cannot happen; int8-dynamic and fp16 need no data,
 * so they write the model and only load it (a warning names --shape).
 */
export async function checkInputsStep(ctx: QuantizeContext): Promise<void> {
  const { plan, calibration, evalData } = ctx;
  const { sliceDataset } = await import('./quantize-fidelity.js');
  const { take } = await import('../data/index.js');
  let check: CheckInputs;
  if (plan && plan.source === 'eval-data') check = { data: sliceDataset(evalData!, plan.check.start, plan.check.end), inputs: 'eval-data' };
  else if (plan && plan.source !== 'random') check = { data: sliceDataset(calibration!, plan.check.start, plan.check.end), inputs: 'calibration' };
  else if (!plan && calibration) check = { data: take(calibration, Math.min(ctx.calibrationCount, CHECK_SAMPLE_COUNT)), inputs: 'calibration' };
  else check = await randomCheckData(ctx);
  ctx.check = check;
}

/**
 * The fidelity guard: decides, unless the labelled guard does (then it is measured) or QAT changed
 * the weights (then the distance to FP32 is reported, not enforced).
 */
export async function fidelityStep(ctx: QuantizeContext, memory?: import('./quantize-fidelity.js').JudgeMemory): Promise<void> {
  const { plan, check } = ctx;
  if (!plan) ctx.fidelity = { enabled: false, reason: 'turned off (--no-guard): the model was not held to a fidelity budget' };
  else if (!check?.data) ctx.fidelity = { enabled: false, reason: `no inputs to check the model on: ${check?.skipped}` };
  else {
    const { budget, judge } = await judgeOn(ctx, check.data, memory);
    ctx.judge = judge;
    ctx.cleanups.push(() => judge.close());
    const heldOut = {
      source: plan.source,
      samples: check.data.count,
      start: plan.check.start,
      end: plan.check.start + check.data.count,
      ...(plan.note ? { note: plan.note } : {}),
    };
    if (ctx.fallback) {
      const g = await withFallback(ctx, budget, heldOut);
      ctx.fidelity = g.report;
      // The fallback's ranking and search as their own phases (when it ran), the rest the check's.
      if (g.seconds.ranking + g.seconds.search > 0)
        ctx.lapParts(
          [
            ['fidelity', g.seconds.check],
            ['fallback-ranking', g.seconds.ranking],
          ],
          'fallback-search',
        );
      else ctx.lap('fidelity');
      return;
    }
    ctx.fidelity = await measuredOnly(ctx, budget, heldOut);
  }
  ctx.lap('fidelity');
}

/** The guard's budget from the options, and a judge of it on `data` (the caller closes it), from `memory` when given. */
async function judgeOn(
  ctx: QuantizeContext,
  data: Dataset,
  memory?: import('./quantize-fidelity.js').JudgeMemory,
): Promise<{ budget: FidelityBudget; judge: import('./quantize-fidelity.js').FidelityJudge }> {
  const { options } = ctx;
  const q = await import('./quantize-fidelity.js');
  // A --metric budget replaces the default SQNR / agreement floors (still measured and reported).
  const metricDecides = options.taskMetric !== undefined;
  const floorsGiven = options.minSqnrDb !== undefined || options.minTop1Agreement !== undefined || options.minCosine !== undefined;
  const budget: FidelityBudget = {
    minSqnrDb: options.minSqnrDb ?? (metricDecides ? -Infinity : q.DEFAULT_FIDELITY_BUDGET.minSqnrDb),
    minTop1Agreement: options.minTop1Agreement ?? (metricDecides ? 0 : q.DEFAULT_FIDELITY_BUDGET.minTop1Agreement),
    ...(options.minCosine !== undefined ? { minCosine: options.minCosine } : {}),
    ...(metricDecides && !floorsGiven ? { outputsDecide: false } : {}),
    ...(options.classSqnrReported ? { classSqnrReported: true } : {}),
    ...(ctx.metricBudget ? { metric: ctx.metricBudget } : {}),
  };
  const judge = new q.FidelityJudge(ctx.model, data, budget, {
    runner: ctx.runner,
    batchSize: options.batchSize ?? 16,
    kinds: ctx.judged.kinds,
    downstream: ctx.judged.downstream,
    ...(memory ? { memory } : {}),
  });
  return { budget, judge };
}

/** Held-out samples the guard's pre-check reads (the first of the check's). */
export const PRECHECK_SAMPLES = 16;

/** What the pre-check found: the guard's budget met or not on its first held-out samples. */
export interface Precheck {
  samples: number;
  met: boolean;
  failures: string[];
  /**
   * When the pre-check read every held-out sample: its judge's memory (FP32's outputs, the model's
   * measurement), which the guard's judge starts from (QuantizeStepSettings.judgeMemory).
   */
  memory?: import('./quantize-fidelity.js').JudgeMemory;
}

/**
 * The pre-check of a model written with the guard left to the caller (optimize): the model as the
 * pass made it, judged against the guard's budget on the first PRECHECK_SAMPLES of the guard's
 * held-out samples; undefined without held-out samples. A miss says the guard will run its
 * fallback: the caller guards a candidate it could choose without scoring it first. Called after
 * the steps, only for a candidate that could be chosen (one no faster than FP32 never pays for it).
 */
export async function precheck(ctx: QuantizeContext): Promise<Precheck | undefined> {
  const data = ctx.check?.data;
  if (!data || !ctx.plan || !ctx.written) return undefined;
  const { take } = await import('../data/index.js');
  const { judge } = await judgeOn(ctx, take(data, PRECHECK_SAMPLES));
  try {
    const samples = Math.min(data.count, PRECHECK_SAMPLES);
    ctx.onProgress(`fidelity pre-check on ${samples} held-out samples`);
    const m = await judge.measure(ctx.written);
    return { samples, met: m.met, failures: m.failures, ...(samples === data.count ? { memory: judge.memory() } : {}) };
  } finally {
    await judge.close();
  }
}

type HeldOut = Extract<FidelityReport, { enabled: true }>['heldOut'];

/** The guard decides: the pass's result, then nodes kept float until the budget is met (or it cannot be). */
async function withFallback(
  ctx: QuantizeContext,
  budget: FidelityBudget,
  heldOut: HeldOut,
): Promise<{ report: FidelityReport; seconds: FidelityGuardResult<unknown>['seconds'] }> {
  const g: FidelityGuardResult<unknown> = await ctx.applied!.guard(ctx.judge!, ctx.onProgress);
  ctx.written = g.model;
  ctx.report = ctx.applied!.report;
  if (g.floatNodes.length > 0)
    ctx.onWarning(
      g.met
        ? `fidelity guard: ${g.floatNodes.length} node(s) kept float to meet the budget: ${g.floatNodes.join(', ')}`
        : `fidelity guard: ${g.floatNodes.length} node(s) tried in float, and the budget is still missed: ${g.floatNodes.join(', ')}`,
    );
  const { initial, final, met, floatNodes, sensitivity, ranking, steps, runs } = g;
  return {
    report: {
      enabled: true,
      decidedBy: 'fidelity',
      heldOut,
      budget,
      initial,
      final,
      met,
      floatNodes,
      sensitivity,
      ...(ranking ? { ranking } : {}),
      steps,
      runs,
    },
    seconds: g.seconds,
  };
}

/** The labelled guard or QAT decided: the distance to FP32 is measured and reported, not enforced. */
async function measuredOnly(ctx: QuantizeContext, budget: FidelityBudget, heldOut: HeldOut): Promise<FidelityReport> {
  const judge = ctx.judge!;
  ctx.onProgress(`fidelity check on ${ctx.check!.data!.count} held-out samples`);
  const m = await judge.measure(ctx.written!);
  const step = { floatNodes: ctx.labelled?.chosen.fp32Nodes ?? [], worstSqnrDb: m.worstSqnrDb, met: m.met, failures: m.failures };
  const byLabels = ctx.labelled !== undefined || ctx.labelledLater === true;
  if (!m.met)
    ctx.onWarning(
      `the model misses the fidelity budget (${m.failures.join('; ')}); not enforced: ${byLabels ? '--max-accuracy-drop decides' : 'QAT changes the weights'}`,
    );
  return {
    enabled: true,
    decidedBy: byLabels ? 'labels' : 'reported',
    heldOut,
    budget,
    initial: m,
    final: m,
    met: m.met,
    floatNodes: [],
    sensitivity: [],
    steps: [step],
    runs: judge.runs,
  };
}

const formatDbValue = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(1)} dB` : 'inf dB');

/** Why the command fails (a budget no setting met, with what was tried), or undefined. */
export async function gateFailureOf(ctx: QuantizeContext): Promise<string | undefined> {
  const { options, labelled: guard, fidelity } = ctx;
  const tail = options.force ? 'wrote the best attempt (--force)' : 'nothing written (--force writes the best attempt)';
  if (guard && !guard.met) {
    return `no INT8 setting met --max-accuracy-drop: best drop ${guard.chosen.dropPoints.toFixed(2)}pt with ${guard.chosen.fp32Nodes.length} node(s) in FP32 (${guard.attempts.length} attempt(s)); ${tail}`;
  }
  if (!fidelity?.enabled || fidelity.decidedBy !== 'fidelity' || fidelity.met) return undefined;
  const { describeBudget, kindsOf } = await import('./quantize-fidelity.js');
  const tried = fidelity.steps.slice(1).map((s) => s.floatNodes.length);
  const budget = describeBudget(fidelity.budget, kindsOf(fidelity.final.outputs));
  const what =
    tried.length > 0
      ? `tried ${tried.join(', ')} node(s) in float (of ${fidelity.sensitivity.reduce((n, u) => n + u.nodes.length, 0)} candidates, ranked by sensitivity); best worst-output SQNR ${formatDbValue(fidelity.final.worstSqnrDb)} with ${fidelity.floatNodes.length} node(s) in float`
      : `no fallback: it keeps at most half of the quantized nodes float, and there ${fidelity.sensitivity.length === 0 ? 'are fewer than 2' : 'is no unit small enough'}`;
  const relax = fidelity.budget.metric
    ? fidelity.budget.metric.maxDrop !== undefined
      ? '--max-accuracy-drop'
      : '--metric-budget'
    : '--min-sqnr/--min-agreement';
  const random =
    fidelity.heldOut.source === 'random'
      ? `, or give --calibration-data with real inputs (this check ran on ${fidelity.heldOut.samples} random ones, a weak check)`
      : '';
  return `the ${options.mode} model misses the fidelity budget (${budget}) on ${fidelity.heldOut.samples} held-out samples: ${fidelity.initial.failures.join('; ')}; ${what}; ${tail}${random}, or relax it with ${relax}, or --no-guard`;
}

/**
 * Write the model atomically and check the staged file before it replaces anything: it must load
 * (and, when inputs could be made, run and be compared with FP32: the judge's cached outputs when
 * the guard ran on the same samples). One session of the written file; what onnxruntime made of it
 * is the fusion check's (`fusion`: skip it). `compareWritten: false`: loaded only, the caller compares.
 */
export async function writeStep(
  ctx: QuantizeContext,
  target: string,
  settings: { fusion: boolean; compareWritten?: boolean },
): Promise<Pick<QuantizeResult, 'agreement' | 'checks' | 'fusion'>> {
  const { runner, check } = ctx;
  ctx.onProgress(`writing ${target}`);
  const [runtime, q] = await Promise.all([import('../runtime/index.js'), import('./quantize-passes.js')]);
  let agreement: Record<string, AgreementMetrics> | null = null;
  let checks: QuantizeChecks = { ran: false, inputs: null };
  const fusionFile = settings.fusion && ctx.mode.fusionCheck ? await q.fusionTarget(runner) : undefined;
  if (fusionFile) ctx.cleanups.push(() => fusionFile.remove());
  await runtime.saveModelChecked(ctx.written!, target, {
    runner: { ...runner, ...fusionFile?.runnerOptions },
    onCheck: () => ctx.onProgress('checking the written model in onnxruntime'),
    check: async (session) => {
      if (settings.compareWritten === false) return;
      if (check?.data) {
        agreement = await compareWithFp32(ctx, session, check.data);
        checks = { ran: true, inputs: check.inputs };
      } else {
        const note = `the comparison with FP32 in onnxruntime was skipped (the written model was only loaded): ${check?.skipped}, or give --calibration-data`;
        checks = { ran: false, inputs: null, note };
        ctx.onWarning(note);
      }
    },
  });
  ctx.lap('write-and-check');
  const qdqReport = ctx.applied?.int8 ? (ctx.report as import('./quantize-passes.js').Int8Report).qdq : undefined;
  const keptFloat = qdqReport ? [...qdqReport.skipped, ...qdqReport.floatCompute.map((f) => ({ ...f, weightsDequantized: true }))] : undefined;
  if (!fusionFile) return { agreement, checks, fusion: undefined };
  ctx.onProgress('checking what onnxruntime fuses');
  const fusion = await fusionFile.read(target, { reference: ctx.written!, keptFloat });
  ctx.lap('fusion-check');
  return { agreement, checks, fusion };
}

/**
 * The written model against FP32 on the check data. The data is the FP32 model's: a written model
 * with float16 inputs and outputs (--no-keep-io-types) is fed it converted and compared in float32.
 */
async function compareWithFp32(ctx: QuantizeContext, session: import('../runtime/index.js').Runner, data: Dataset): Promise<Record<string, AgreementMetrics>> {
  if (ctx.judge) return ctx.judge.agreement(session);
  const [{ referenceIo }, evaluate] = await Promise.all([import('./quantize-fidelity.js'), import('../evaluate/index.js')]);
  return evaluate.compareOutputs(ctx.model, referenceIo(session), data, { runner: ctx.runner, batchSize: ctx.options.batchSize ?? 16 });
}

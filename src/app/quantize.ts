/**
 * The quantize workflow (`model-opt quantize` as a function): load the model and data, run INT8
 * static (optionally with QAT or the labelled accuracy guard), INT8 dynamic or FP16, then the
 * fidelity guard (on by default, no labels: the model against FP32 on held-out samples, with the
 * automatic float fallback; app/quantize-fidelity.ts), write the model atomically (never over
 * an input; a model that misses its budget is not written unless `force`: the result then has
 * `output: null` and `gateFailure` says what was tried), load and run the written file in
 * onnxruntime against FP32 (agreement), check what onnxruntime fuses, and optionally time it. `sensitivityWorkflow` is `--analyze`: the per-node sensitivity, nothing written.
 * A pass that quantized nothing is a UsageError (nothing written) unless `opTypes` was given. Modes
 * that need no data (int8-dynamic, fp16) still write their model when the check cannot make inputs
 * (a symbolic dim without `--shape` or data): the written file is then only loaded in onnxruntime,
 * `agreement` is null and `checks` says why (a warning names `--shape`). What can cost speed (the
 * report's speed causes) is a note only when the timing ran and found the model not faster.
 * May import: errors, calibration/defaults, app/*, types from below; onnx, data, runtime, evaluate,
 * passes (lazily).
 */
import { stat } from 'node:fs/promises';
import { UsageError } from '../errors.js';
import type { OutputKind } from '../metrics/output-kinds.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { AgreementMetrics } from '../metrics/index.js';
import type { AccuracyBudget, FidelityGuardResult, FusionReport, GuardResult, HeldOutPlan, MetricBudget, SensitivityRow } from './quantize-passes.js';
import type { Int4Method } from '../passes/quantize/int4.js';
import type { ModeSettings, QuantizeMode, QuantizeReport } from './quantize-modes.js';
import type { TrainingBackend } from '../train/tfjs/backend.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath } from './output-path.js';
import type { QatReport } from './qat.js';
import type { SimplifyReport } from '../passes/simplify/index.js';
import type { VerifySimplifyResult } from './simplify-verify.js';
import { contextFrom, prepareQuantize, type QuantizeContext, type QuantizeInputs } from './quantize-context.js';
import { applyStep, checkInputsStep, fidelityStep, gateFailureOf, int8WorkflowsStep, planStep, writeStep } from './quantize-steps.js';
import { speedAdvice } from './speed-advice.js';
import { speedCheck, type SpeedCheck } from './speed-check.js';

export type { QuantizeMode };
export { fillSymbolicDims } from './quantize-check-data.js';

/** The pass settings a user sets as they are (documented on ModeSettings). */
type PassOptions = Pick<
  ModeSettings,
  | 'method'
  | 'percentile'
  | 'reduceRange'
  | 'minConvReduction'
  | 'padChannels'
  | 'layoutAnchors'
  | 'activationType'
  | 'biasCorrection'
  | 'crossLayerEqualization'
  | 'opTypes'
  | 'excludeOpTypes'
  | 'excludeNodes'
  | 'keepIoTypes'
  | 'opBlockList'
>;

export interface QuantizeWorkflowOptions extends PassOptions {
  /** The FP32 model file (never modified). */
  model: string;
  /** Where to write the result (never over an input). Not needed by sensitivityWorkflow. */
  output?: string;
  mode: QuantizeMode;
  /** Representative inputs (required for int8). */
  calibrationData?: string;
  /** Use the first n calibration samples (default DEFAULT_CALIBRATION_COUNT). */
  calibrationCount?: number;
  /** Samples per calibration run (default 16); also the check's batch. */
  batchSize?: number;
  /** One weight scale per output channel (default true). */
  perChannel?: boolean;
  /** int8: the accuracy guard's budget (needs evalData). */
  maxAccuracyDrop?: AccuracyBudget;
  /** Labelled evaluation data (the guard; QAT's epochs). */
  evalData?: string;
  outputName?: string;
  /** onnxruntime intra-op threads for calibration and checks. */
  threads?: number;
  /** Sizes of symbolic non-batch dims (the check on random inputs, the speed check). */
  shapes?: ShapeOverrides;
  /** `--input` values: inputs given once for all samples (calibration, evaluation and random check data). */
  inputValues?: InputValues;
  /** int4: block-wise weight-only 4-bit settings (defaults: block 32, asymmetric, accuracy level 4, rtn). */
  int4?: { blockSize?: 16 | 32 | 64 | 128 | 256; symmetric?: boolean; accuracyLevel?: 0 | 1 | 2 | 3 | 4; method?: Int4Method };
  /** `--feedback OUTPUT=INPUT`: states made by running the FP32 model over the data in order. */
  feedback?: readonly FeedbackPair[];
  /** Time the input model against the written one, this many runs each. */
  measureSpeedRuns?: number;
  /** The fidelity guard (default true): compare with FP32 on held-out samples, float fallback when the budget fails. */
  guard?: boolean;
  /** Least SQNR (dB) of every float output; default DEFAULT_FIDELITY_BUDGET.minSqnrDb. */
  minSqnrDb?: number;
  /** Least top-1 agreement with FP32 on class-score outputs (fraction); default DEFAULT_FIDELITY_BUDGET.minTop1Agreement. */
  minTop1Agreement?: number;
  /**
   * Class scores and sequences: the SQNR floor reported, not judged (library only: `optimize`
   * quantizing a pruned + distilled model, which it judges by its decisions alone).
   */
  classSqnrReported?: boolean;
  /** Least mean cosine with FP32 of embedding outputs; default DEFAULT_KIND_BUDGET.minCosine. */
  minCosine?: number;
  /** `--output-kind NAME=KIND`: what an output means, over what the graph says (analysis/output-kinds.ts). */
  outputKinds?: Readonly<Record<string, OutputKind>>;
  /** `--downstream`: FP32 models the outputs are fed through (by name, or by position for one input); the budget is judged on the last one's outputs. */
  downstream?: readonly string[];
  /** A task metric with its budget, judged on the held-out samples too. */
  metric?: MetricBudget;
  /**
   * `--metric`: a built-in metric spec (`ctc`, `cer`, `top5`, `f1:threshold=0.3`, ...) or a module
   * path (app/metric-module.ts), scoring `outputName` (default the first output). With
   * `maxAccuracyDrop` and labelled `evalData` the drop is measured on it instead of top-1 (`pt` =
   * 0.01 of the metric's value, `%` = relative to FP32); with `metricBudget`, its label-free form
   * against FP32 must reach that value on the held-out samples. Either way the metric decides (the
   * fidelity guard's fallback chases it): SQNR and top-1 agreement are measured and reported, and
   * enforced only when minSqnrDb/minTop1Agreement are given. `--analyze` scores it per node.
   */
  taskMetric?: string;
  /** `--metric-budget`: least value of the metric's label-free form against FP32 (most, for a lower-is-better metric such as CER). */
  metricBudget?: number;
  /** Write the best attempt even when no setting meets the budget (the result still reports the failure). */
  force?: boolean;
  /** int8: quantization-aware training after calibration. */
  qat?: { data: string; epochs?: number; learningRate?: number; teacher?: boolean; backend?: TrainingBackend | 'auto' };
}

/** What `model-opt quantize --json` prints (less its schema version and command name). */
export interface QuantizeResult {
  mode: QuantizeMode;
  input: { path: string; sizeBytes: number };
  /** The written file; null when nothing was written (a budget was missed without `force`). */
  output: { path: string; sizeBytes: number } | null;
  seconds: number;
  report: QuantizeReport;
  fusion?: FusionReport;
  speed?: SpeedCheck;
  /** Agreement of the written model with FP32, per output (the onnxruntime check); null when it was skipped. */
  agreement: Record<string, AgreementMetrics> | null;
  /** What the onnxruntime check after writing did: compared with FP32, or only loaded the file (and why). */
  checks: QuantizeChecks;
  guard?: Omit<GuardResult, 'model' | 'qdq'>;
  /** The fidelity guard: held-out samples, budget, measured values, fallback. */
  fidelity: FidelityReport;
  /** Why the command must fail (a budget missed), when it must; the model was written only with `force`. */
  gateFailure?: string;
  qat?: QatReport;
  /** `--input` values specialized first (the simplify pass: inputs made constants, Ifs inlined), and its check against the original. */
  simplify?: { report: SimplifyReport; verification: VerifySimplifyResult };
  /** Where the run's time went, phase by phase in order (seconds; see QuantizePhase). */
  timings: QuantizeTiming[];
  warnings: string[];
}

/**
 * The phases of a quantize run: reading the model and data files; the pass (for int8 its parts:
 * pre-processing, shape inference by running, calibration, QDQ insertion; other modes one
 * 'quantize'); the fidelity guard's first measurement and, when it missed, its fallback's ranking
 * and search (or the labelled guard / QAT); writing the file
 * with its onnxruntime check against FP32; the fusion check; the optional speed check.
 */
export type QuantizePhase =
  | 'load'
  | 'preprocess'
  | 'shapes'
  | 'calibration'
  | 'qdq'
  | 'quantize'
  | 'accuracy-guard'
  | 'qat'
  | 'fidelity'
  | 'fallback-ranking'
  | 'fallback-search'
  | 'write-and-check'
  | 'fusion-check'
  | 'speed-check';

export interface QuantizeTiming {
  phase: QuantizePhase;
  seconds: number;
}

/** What the fidelity guard did, for the report and the JSON. */
export type FidelityReport =
  | { enabled: false; reason: string }
  | ({
      enabled: true;
      /** Who decides: the fidelity budget, the labelled `maxAccuracyDrop` guard, or nobody (QAT: reported only). */
      decidedBy: 'fidelity' | 'labels' | 'reported';
      heldOut: { source: HeldOutPlan['source']; samples: number; start: number; end: number; note?: string };
    } & Omit<FidelityGuardResult<unknown>, 'model' | 'extra' | 'seconds'>);

export interface QuantizeChecks {
  /** True: the written model ran in onnxruntime and was compared with FP32; false: it was only loaded (a session created). */
  ran: boolean;
  /** Inputs the comparison ran on: 'calibration' (the data's first samples), 'random' (seeded), or null. */
  inputs: 'calibration' | 'eval-data' | 'random' | null;
  /** Why the comparison was skipped, when it was. */
  note?: string;
}

export interface SensitivityResult {
  model: string;
  sensitivity: SensitivityRow[];
  /** `--metric`: the task metric with only each node quantized (same samples), and of FP32 and the full INT8 model. */
  metric?: SensitivityMetric;
  warnings: string[];
}

export interface SensitivityMetric {
  name: string;
  /** Scored against the data's labels, or label-free against the FP32 model's outputs. */
  target: 'labels' | 'reference';
  higherIsBetter: boolean;
  samples: number;
  /** The FP32 model's value (labels; for a label-free metric, the value of a perfect copy when known). */
  fp32: number | null;
  int8: number;
  perNode: Record<string, number>;
}

async function fileSize(file: string): Promise<number> {
  return (await stat(file)).size;
}

/** `--analyze`: quantize in memory, then the per-node sensitivity (lowest SQNR first). Writes nothing. */
export async function sensitivityWorkflow(options: QuantizeWorkflowOptions, events: WorkflowEvents = {}): Promise<SensitivityResult> {
  const ctx = await prepareQuantize({ ...options, mode: 'int8', guard: false }, events);
  await applyStep(ctx);
  const result = { model: ctx.written!, context: ctx.applied!.int8! };
  const { analyzeSensitivity } = await import('./quantize-guard.js');
  const sensitivity = await analyzeSensitivity(result.context, { runner: ctx.runner, onProgress: (e) => ctx.onProgress(e.message) });
  const { metricPerNode } = await import('./quantize-metric.js');
  const metric = options.taskMetric ? await metricPerNode(ctx, options.taskMetric, result, sensitivity) : undefined;
  return { model: options.model, sensitivity, ...(metric ? { metric } : {}), warnings: ctx.warnings };
}

export async function quantizeWorkflow(options: QuantizeWorkflowOptions, events: WorkflowEvents = {}): Promise<QuantizeResult> {
  if (!options.output) throw new UsageError('missing -o/--output <path> (or use --analyze)');
  const output = checkOutputPath(options.output, [
    options.model,
    ...[options.calibrationData, options.evalData, options.qat?.data].filter((f): f is string => Boolean(f)),
  ]);
  const ctx = await prepareQuantize(options, events);
  return runQuantizeSteps(ctx, output, { fusion: true });
}

/** How a caller runs the steps: the fusion check; a result re-made from its own calibration; the labelled guard left to it. */
export interface QuantizeStepSettings {
  fusion: boolean;
  applied?: QuantizeContext['applied'];
  labelledLater?: boolean;
  /**
   * The fidelity guard left to the caller (optimize: it measures every candidate, and runs the
   * guard from `applied` only on one that could be chosen and misses the budget): the held-out
   * split is planned as with the guard (the same ranges), the model written as the pass made it.
   */
  fidelityLater?: boolean;
  /**
   * false: the written file is loaded in onnxruntime, not run and compared with FP32 (optimize: its
   * benchmark compares every candidate with FP32 on all the data). Default true.
   */
  compareWritten?: boolean;
  /** The fidelity guard's judge starts from this (optimize's pre-check of the same held-out samples). */
  judgeMemory?: import('./quantize-fidelity.js').JudgeMemory;
}

/**
 * The quantize steps over parsed inputs (optimize's candidates: no file read again). `applied`: a
 * result re-made from a calibration the caller holds (int8's region steps), instead of the pass.
 */
export async function quantizeFromInputs(
  options: QuantizeWorkflowOptions & { output: string },
  inputs: QuantizeInputs,
  events: WorkflowEvents,
  settings: QuantizeStepSettings,
): Promise<QuantizeResult & { context: QuantizeContext }> {
  const ctx = await contextFrom(options, inputs, events);
  ctx.labelledLater = settings.labelledLater;
  const result = await runQuantizeSteps(ctx, options.output, settings);
  return { ...result, context: ctx };
}

/** Plan, apply, int8's guards, check inputs, fidelity guard, gate, write and check, time; cleanups however it ends. */
async function runQuantizeSteps(ctx: QuantizeContext, output: string, settings: QuantizeStepSettings): Promise<QuantizeResult> {
  const { options } = ctx;
  try {
    await planStep(ctx);
    ctx.lap('load');
    await applyStep(ctx, settings.applied);
    await int8WorkflowsStep(ctx);
    await checkInputsStep(ctx);
    if (settings.fidelityLater && ctx.plan) ctx.fidelity = { enabled: false, reason: 'left to the caller (measured with every candidate)' };
    else await fidelityStep(ctx, settings.judgeMemory);
    const gateFailure = await gateFailureOf(ctx);
    const common = {
      mode: options.mode,
      input: { path: options.model, sizeBytes: await fileSize(options.model) },
      guard: guardSummary(ctx.labelled),
      fidelity: ctx.fidelity!,
      qat: ctx.qat,
      ...(ctx.specialized ? { simplify: { report: ctx.specialized.report, verification: ctx.specialized.verification } } : {}),
      warnings: ctx.warnings,
    };
    const seconds = (): number => (performance.now() - ctx.startedAt) / 1000;
    if (gateFailure && !options.force) {
      const checks = { ran: false, inputs: null, note: 'nothing written' };
      return { ...common, output: null, seconds: seconds(), report: ctx.report!, agreement: null, checks, gateFailure, timings: ctx.timings };
    }
    const written = await writeStep(ctx, output, settings);
    const speed = await speedStep(ctx, output);
    // Speed causes become notes only beside this run's measurement (./speed-advice.ts).
    const advice = speedAdvice(ctx.report!.speedCauses, speed);
    return {
      ...common,
      output: { path: output, sizeBytes: await fileSize(output) },
      seconds: seconds(),
      report: advice.length > 0 ? { ...ctx.report!, notes: [...ctx.report!.notes, ...advice] } : ctx.report!,
      ...written,
      speed,
      ...(gateFailure ? { gateFailure } : {}),
      timings: ctx.timings,
    };
  } catch (error) {
    // A run on made-up inputs that onnxruntime refuses: name the integer inputs that were made up.
    if (!ctx.randomData) throw error;
    const { withRandomInputsHint } = await import('../data/index.js');
    throw withRandomInputsHint(error, ctx.randomData);
  } finally {
    for (const cleanup of ctx.cleanups.reverse()) await cleanup();
  }
}

/**
 * `--measure-speed`: the input against the written file, paired timing. A model specialized first
 * takes fewer inputs than the input file, so it is timed against the FP32 model specialized the
 * same way (a temp file), and a warning says so.
 */
async function speedStep(ctx: QuantizeContext, target: string): Promise<SpeedCheck | undefined> {
  const { options } = ctx;
  if (!options.measureSpeedRuns) return undefined;
  let baseline = options.model;
  // Simplified without values (a model with sub-graphs): it takes the input file's inputs, timed against it.
  if (ctx.specialized && ctx.specialized.report.specializedInputs.length > 0) {
    const [{ mkdtemp, rm }, { tmpdir }, path, { saveModel }] = await Promise.all([
      import('node:fs/promises'),
      import('node:os'),
      import('node:path'),
      import('../onnx/index.js'),
    ]);
    const dir = await mkdtemp(path.join(tmpdir(), 'model-opt-specialized-'));
    ctx.cleanups.push(() => rm(dir, { recursive: true, force: true }));
    baseline = path.join(dir, 'fp32-specialized.onnx');
    await saveModel(ctx.model, baseline);
    const given = ctx.specialized.report.specializedInputs.map((s) => `${s.name}=${s.values.join(',')}`).join(', ');
    ctx.onWarning(
      `--measure-speed: timed against the FP32 model specialized for ${given} (the input file still takes those inputs; model-opt simplify writes that model)`,
    );
  }
  const speed = await speedCheck(
    baseline,
    target,
    {
      runs: options.measureSpeedRuns,
      threads: options.threads ?? 1,
      shapes: options.shapes,
      data: ctx.calibration ?? ctx.evalData,
      inputValues: options.inputValues,
    },
    { onProgress: ctx.onProgress, onWarning: ctx.onWarning },
  );
  ctx.lap('speed-check');
  return speed;
}

function guardSummary(guard: GuardResult | undefined): QuantizeResult['guard'] {
  if (!guard) return undefined;
  const { budget, baselineAccuracy, evalSamples, met, chosen, attempts, sensitivity, outOfRangeLabels, classes } = guard;
  return { budget, baselineAccuracy, evalSamples, met, chosen, attempts, sensitivity, ...(outOfRangeLabels ? { outOfRangeLabels, classes } : {}) };
}

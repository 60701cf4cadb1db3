/**
 * The quantize workflow (`model-opt quantize` as a function): load the model and data, run INT8
 * static (optionally with QAT or the labelled accuracy guard), INT8 dynamic or FP16, then the
 * fidelity guard (on by default, no labels: the model against FP32 on held-out samples, with the
 * automatic float fallback; passes/quantize/fidelity.ts), write the model atomically (never over
 * an input; a model that misses its budget is not written unless `force`: the result then has
 * `output: null` and `gateFailure` says what was tried), load and run the written file in
 * onnxruntime against FP32 (agreement), check what onnxruntime fuses, and optionally time it. `sensitivityWorkflow` is `--analyze`: the per-node sensitivity, nothing written.
 * A pass that quantized nothing is a UsageError (nothing written) unless `opTypes` was given. Modes
 * that need no data (int8-dynamic, fp16) still write their model when the check cannot make inputs
 * (a symbolic dim without `--shape` or data): the written file is then only loaded in onnxruntime,
 * `agreement` is null and `checks` says why (a warning names `--shape`).
 * May import: errors, calibration/defaults, app/*, types from below; onnx, data, runtime, evaluate,
 * passes (lazily).
 */
import { stat } from 'node:fs/promises';
import { UsageError } from '../errors.js';
import { CHECK_SAMPLE_COUNT, DEFAULT_CALIBRATION_COUNT } from '../calibration/defaults.js';
import type { Model } from '../ir/index.js';
import { SUGGESTED_DIM, batchAxes, checkShapeOverrides, type IoSpec, type ShapeOverrides } from '../ir/io-spec.js';
import type { Dataset, InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import type { AgreementMetrics } from '../metrics/index.js';
import type { CalibrationMethod } from '../passes/quantize/calibrate.js';
import type {
  AccuracyBudget,
  FidelityBudget,
  FidelityGuardResult,
  FusionReport,
  GuardResult,
  HeldOutPlan,
  Int8Context,
  Int8Report,
  MetricBudget,
  SensitivityRow,
} from '../passes/quantize/index.js';
import type { DynamicReport } from '../passes/quantize/dynamic.js';
import type { Int4Method, Int4Report } from '../passes/quantize/int4.js';
import type { Fp16Report } from '../passes/quantize/fp16.js';
import type { TrainingBackend } from '../train/tfjs/backend.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath } from './output-path.js';
import type { QatReport } from './qat.js';
import { speedCheck, type SpeedCheck } from './speed-check.js';

export type QuantizeMode = 'int8' | 'int8-dynamic' | 'int4' | 'q4f16' | 'fp16';

export interface QuantizeWorkflowOptions {
  /** The FP32 model file (never modified). */
  model: string;
  /** Where to write the result (never over an input). Not needed by sensitivityWorkflow. */
  output?: string;
  mode: QuantizeMode;
  /** Representative inputs (required for int8). */
  calibrationData?: string;
  /** Use the first n calibration samples (default DEFAULT_CALIBRATION_COUNT). */
  calibrationCount?: number;
  method?: CalibrationMethod;
  percentile?: number;
  /** Samples per calibration run (default 16); also the check's batch. */
  batchSize?: number;
  /** One weight scale per output channel (default true). */
  perChannel?: boolean;
  reduceRange?: boolean;
  minConvReduction?: number;
  padChannels?: boolean;
  layoutAnchors?: boolean;
  activationType?: 'uint8' | 'int8';
  opTypes?: string[];
  excludeOpTypes?: string[];
  excludeNodes?: string[];
  /** int8: the accuracy guard's budget (needs evalData). */
  maxAccuracyDrop?: AccuracyBudget;
  /** Labelled evaluation data (the guard; QAT's epochs). */
  evalData?: string;
  outputName?: string;
  /** fp16: keep model inputs/outputs float32 (default true). */
  keepIoTypes?: boolean;
  opBlockList?: string[];
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
  report: Int8Report | DynamicReport | Int4Report | Fp16Report;
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
  /** Where the run's time went, phase by phase in order (seconds; see QuantizePhase). */
  timings: QuantizeTiming[];
  warnings: string[];
}

/**
 * The phases of a quantize run: reading the model and data files; the pass (for int8 its parts:
 * pre-processing, shape inference by running, calibration, QDQ insertion; other modes one
 * 'quantize'); the fidelity guard (with its fallback) or the labelled guard / QAT; writing the file
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
    } & Omit<FidelityGuardResult<unknown>, 'model' | 'extra'>);

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

/** Load, refuse an already quantized model, load the data sets; warnings collected as they come. */
/** `--op-types` names only op types the mode quantizes: a typo is exit 2, not a silent no-op. */
async function checkOpTypes(options: QuantizeWorkflowOptions): Promise<void> {
  if (!options.opTypes?.length || options.mode === 'fp16') return;
  const known =
    options.mode === 'int8'
      ? (await import('../passes/quantize/registry.js')).QUANTIZABLE_OP_TYPES
      : options.mode === 'int8-dynamic'
        ? (await import('../passes/quantize/dynamic-ops.js')).DYNAMIC_OP_TYPES
        : (await import('../passes/quantize/int4.js')).INT4_OP_TYPES;
  const unknown = options.opTypes.filter((t) => !known.includes(t));
  if (unknown.length > 0) {
    throw new UsageError(
      `--op-types: ${unknown.join(', ')} ${unknown.length === 1 ? 'is not an op type' : 'are not op types'} --mode ${options.mode} quantizes (it quantizes ${known.join(', ')})`,
    );
  }
}

async function loadInputs(options: QuantizeWorkflowOptions, events: WorkflowEvents) {
  await checkOpTypes(options);
  const warnings: string[] = [];
  const onWarning = (message: string): void => {
    warnings.push(message);
    events.onWarning?.(message);
  };
  const onProgress = (message: string): void => events.onProgress?.(message);
  const [{ loadModel }, runtime, data, q, evaluate] = await Promise.all([
    import('../onnx/index.js'),
    import('../runtime/index.js'),
    import('../data/index.js'),
    import('../passes/quantize/index.js'),
    import('../evaluate/index.js'),
  ]);
  const calibrationCount = options.calibrationCount ?? DEFAULT_CALIBRATION_COUNT;
  // The fidelity guard checks int8 on samples that did not set the ranges: load up to
  // CHECK_SAMPLE_COUNT more than calibration uses (the first calibrationCount still set them).
  const holdOut = options.guard !== false && options.mode === 'int8' && !options.evalData;
  const maxSamples = calibrationCount + (holdOut ? CHECK_SAMPLE_COUNT : 0);
  const runner: RunnerOptions = options.threads ? { intraOpThreads: options.threads } : {};
  onProgress(`loading ${options.model}`);
  const model = await loadModel(options.model, { onWarning });
  if (options.mode !== 'fp16') q.refuseQuantized(model, options.model);
  // An --exclude-nodes typo warns in every mode (int8's pass checks the names after preprocessing).
  const unnamed = options.mode === 'int8-dynamic'; // the dynamic pass names unnamed nodes first
  if (options.mode !== 'int8')
    for (const w of (await import('./exclude-nodes.js')).unmatchedExcludeNodes(model, options.excludeNodes, { unnamed })) onWarning(w);
  const specs = runtime.modelInputSpecs(model);
  checkShapeOverrides(options.shapes, specs);
  const { loadModelData } = await import('./load-data.js');
  const dataOptions = { inputValues: options.inputValues, feedback: options.feedback, runner, onProgress };
  const calibration = options.calibrationData ? await loadModelData(model, options.calibrationData, { ...dataOptions, maxSamples }) : undefined;
  const evalData = options.evalData ? await loadModelData(model, options.evalData, dataOptions) : undefined;
  return { model, specs, calibration, evalData, calibrationCount, runner, warnings, onWarning, onProgress, runtime, data, q, evaluate };
}

/** The INT8 static pass with the workflow's options (the first `calibrationCount` samples set the ranges). */
async function int8(
  model: Model,
  calibration: Dataset | undefined,
  inputs: Awaited<ReturnType<typeof loadInputs>>,
  options: QuantizeWorkflowOptions,
  calibrationCount = inputs.calibrationCount,
) {
  if (!calibration) throw new UsageError('--mode int8 needs --calibration-data (representative inputs); without data use --mode int8-dynamic');
  const result = await inputs.q.quantizeInt8(model, {
    calibration,
    calibrationCount,
    batchSize: options.batchSize,
    method: options.method,
    percentile: options.percentile,
    perChannel: options.perChannel ?? true,
    minConvReduction: options.minConvReduction,
    padChannels: options.padChannels,
    layoutAnchors: options.layoutAnchors,
    activationType: options.activationType,
    opTypes: options.opTypes,
    excludeOpTypes: options.excludeOpTypes,
    excludeNodes: options.excludeNodes,
    runner: inputs.runner,
    onProgress: (e) => inputs.onProgress(e.message),
    onWarning: inputs.onWarning,
  });
  await refuseNothingQuantized(result.report, model, options, inputs.onWarning);
  return result;
}

/**
 * A pass that quantized nothing: a UsageError saying why (nothing is written), or with an explicit
 * `opTypes` list (the user asked for exactly those) a warning.
 */
async function refuseNothingQuantized(
  report: Int8Report | DynamicReport | Int4Report,
  model: Model,
  options: QuantizeWorkflowOptions,
  onWarning: (message: string) => void,
): Promise<void> {
  const { nothingQuantizedReason } = await import('../passes/quantize/nothing-quantized.js');
  const reason = nothingQuantizedReason(report, model);
  if (!reason) return;
  if (!options.opTypes || options.opTypes.length === 0) throw new UsageError(`${options.model}: ${reason}`);
  onWarning(`${options.model}: ${reason.split('. ')[0]} (--op-types ${options.opTypes.join(',')})`);
}

/** `--analyze`: quantize in memory, then the per-node sensitivity (lowest SQNR first). Writes nothing. */
export async function sensitivityWorkflow(options: QuantizeWorkflowOptions, events: WorkflowEvents = {}): Promise<SensitivityResult> {
  const inputs = await loadInputs({ ...options, mode: 'int8', guard: false }, events);
  const result = await int8(inputs.model, inputs.calibration, inputs, options);
  const sensitivity = await inputs.q.analyzeSensitivity(result.context, { runner: inputs.runner, onProgress: (e) => inputs.onProgress(e.message) });
  const metric = options.taskMetric ? await metricPerNode(options, options.taskMetric, inputs, result, sensitivity) : undefined;
  return { model: options.model, sensitivity, ...(metric ? { metric } : {}), warnings: inputs.warnings };
}

/**
 * `--analyze --metric`: the task metric of the model with only each node quantized (the models the
 * SQNR ranking used), on --eval-data or else the first CHECK_SAMPLE_COUNT calibration samples:
 * the labelled form when that data has labels, else the label-free form against FP32. One run per node.
 */
async function metricPerNode(
  options: QuantizeWorkflowOptions,
  spec: string,
  inputs: Awaited<ReturnType<typeof loadInputs>>,
  result: Awaited<ReturnType<typeof int8>>,
  rows: readonly SensitivityRow[],
): Promise<SensitivityMetric> {
  const { resolveMetric } = await import('./metric-module.js');
  const factory = await resolveMetric(spec, { output: options.outputName, hint: ' (pick another with --output-name)' });
  const data = inputs.evalData ?? inputs.data.take(inputs.calibration!, Math.min(inputs.calibration!.count, CHECK_SAMPLE_COUNT));
  const labelled = Boolean(data.labels) && factory.needsLabels;
  const form = labelled ? factory : factory.labelFree;
  if (!form) throw new UsageError(`--metric ${spec}: the metric needs labels and has no label-free form; give --eval-data with labels`);
  const run = { runner: inputs.runner, batchSize: options.batchSize ?? 16 };
  const score = async (model: Model): Promise<number> => {
    const [, r] = await inputs.evaluate.evaluateMany(
      [
        { model: result.context.preprocessed, metrics: {}, label: 'FP32 model' },
        { model, metrics: { task: form.create() }, label: 'quantized model' },
      ],
      data,
      run,
    );
    return (r!.task as { value: number }).value;
  };
  const fp32 = labelled
    ? (await inputs.evaluate.evaluate(result.context.preprocessed, data, { task: factory.create() }, run)).task.value
    : factory.labelFree!.best;
  const space = await inputs.q.int8FallbackSpace(result.context);
  const perNode: Record<string, number> = Object.create(null) as Record<string, number>; // keyed by node names
  for (const [i, row] of rows.entries()) {
    inputs.onProgress(`--metric ${form.name}: node ${i + 1}/${rows.length}: ${row.node}`);
    perNode[row.node] = await score(await space.only([row.node]));
  }
  return {
    name: form.name,
    target: labelled ? 'labels' : 'reference',
    higherIsBetter: factory.higherIsBetter,
    samples: data.count,
    fp32,
    int8: await score(result.model),
    perNode,
  };
}

/**
 * The metric budget of `--metric` (taskMetric): labelled with maxAccuracyDrop (the drop measured on
 * the metric on all of --eval-data), else label-free against FP32 with metricBudget.
 */
async function taskMetricBudget(options: QuantizeWorkflowOptions, spec: string, inputs: Awaited<ReturnType<typeof loadInputs>>): Promise<MetricBudget> {
  const { resolveMetric } = await import('./metric-module.js');
  const factory = await resolveMetric(spec, { output: options.outputName, hint: ' (pick another with --output-name)' });
  const lowerIsBetter = !factory.higherIsBetter;
  if (options.maxAccuracyDrop) {
    const evalData = inputs.evalData;
    if (!evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
    if (!evalData.labels)
      throw new UsageError(
        `--max-accuracy-drop with --metric ${spec} needs labels in ${options.evalData}; without labels give --metric-budget <value> (the label-free form against FP32)`,
      );
    const b = options.maxAccuracyDrop;
    let maxDrop = b.value / 100;
    if (b.kind === 'relative') {
      const r = await inputs.evaluate.evaluate(
        inputs.model,
        evalData,
        { task: factory.create() },
        { runner: inputs.runner, batchSize: options.batchSize ?? 16 },
      );
      maxDrop = b.value * Math.abs(r.task.value);
    }
    return { name: factory.name, create: factory.create, lowerIsBetter, maxDrop };
  }
  if (options.metricBudget === undefined)
    throw new UsageError(
      `--metric ${spec} needs a budget: --metric-budget <value> (label-free, against FP32) or --max-accuracy-drop with labelled --eval-data (or use it with --analyze)`,
    );
  const free = factory.labelFree;
  if (!free) throw new UsageError(`--metric ${spec} has no label-free form to hold to --metric-budget; use --max-accuracy-drop with labelled --eval-data`);
  return { name: free.name, create: free.create, lowerIsBetter, min: options.metricBudget };
}

export async function quantizeWorkflow(options: QuantizeWorkflowOptions, events: WorkflowEvents = {}): Promise<QuantizeResult> {
  // Sessions and temp folders shared between phases (the FP32 reference, the fusion file), released however the run ends.
  const cleanups: (() => Promise<void>)[] = [];
  const seen: { randomData?: Dataset } = {};
  try {
    return await quantizeRun(options, events, cleanups, seen);
  } catch (error) {
    // A run on made-up inputs that onnxruntime refuses: name the integer inputs that were made up.
    if (!seen.randomData) throw error;
    const { withRandomInputsHint } = await import('../data/index.js');
    throw withRandomInputsHint(error, seen.randomData);
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
  }
}

async function quantizeRun(
  options: QuantizeWorkflowOptions,
  events: WorkflowEvents,
  cleanups: (() => Promise<void>)[],
  seen: { randomData?: Dataset },
): Promise<QuantizeResult> {
  if (!options.output) throw new UsageError('missing -o/--output <path> (or use --analyze)');
  const output = checkOutputPath(options.output, [
    options.model,
    ...[options.calibrationData, options.evalData, options.qat?.data].filter((f): f is string => Boolean(f)),
  ]);
  const timings: QuantizeTiming[] = [];
  let mark = performance.now();
  const lap = (phase: QuantizePhase): void => {
    const now = performance.now();
    timings.push({ phase, seconds: (now - mark) / 1000 });
    mark = now;
  };
  const inputs = await loadInputs(options, events);
  const { model, specs, calibration, evalData, runner, onWarning, onProgress, runtime, data, q, evaluate } = inputs;
  const started = performance.now();
  const guardOn = options.guard !== false;
  if (options.taskMetric && !guardOn) throw new UsageError('--metric sets a budget of the fidelity guard, which --no-guard turns off');
  // --metric: the metric decides (labelled drop on all of --eval-data, or label-free against FP32).
  const metricBudget = options.taskMetric ? await taskMetricBudget(options, options.taskMetric, inputs) : options.metric;
  const labelledMetric = metricBudget?.maxDrop !== undefined && options.taskMetric !== undefined;
  // Which samples set the ranges and which check the result (passes/quantize/fidelity.ts).
  const plan = guardOn
    ? q.planHeldOut({
        available: calibration?.count,
        calibrationCount: inputs.calibrationCount,
        evalCount: evalData?.count,
        setsRanges: options.mode === 'int8',
        ...(labelledMetric ? { checkCount: evalData!.count } : {}),
      })
    : undefined;
  if (plan?.note && plan.source === 'calibration-tail') onWarning(plan.note);
  lap('load');

  let written: Model;
  let report: QuantizeResult['report'];
  let guard: GuardResult | undefined;
  let qat: QatReport | undefined;
  let fallback: ((judge: InstanceType<typeof q.FidelityJudge>) => Promise<FidelityGuardResult<unknown>>) | undefined;
  const fallbackProgress = { onProgress };
  if (options.mode === 'int8') {
    const result = await int8(model, calibration, inputs, options, plan && plan.source !== 'random' ? plan.calibrationSamples : inputs.calibrationCount);
    written = result.model;
    report = result.report;
    // The pass timed its own parts; what is left (the nothing-quantized check) goes with QDQ.
    for (const phase of ['preprocess', 'shapes', 'calibration'] as const) timings.push({ phase, seconds: result.report.timings[phase] });
    timings.push({
      phase: 'qdq',
      seconds: (performance.now() - mark) / 1000 - result.report.timings.preprocess - result.report.timings.shapes - result.report.timings.calibration,
    });
    mark = performance.now();
    if (options.qat) {
      const trained = await qatStep(result.context, options, options.qat, evalData, inputs);
      written = trained.model;
      qat = trained.report;
      lap('qat');
    }
    if (options.maxAccuracyDrop && !options.taskMetric) {
      if (!evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
      guard = await q.guardAccuracy(model, result.context, evalData, options.maxAccuracyDrop, {
        outputName: options.outputName,
        runner,
        onProgress: (e) => onProgress(e.message),
      });
      written = guard.model;
      result.report.qdq = guard.qdq;
      lap('accuracy-guard');
    }
    if (!options.qat && !guard) {
      const int8Report = result.report;
      fallback = async (judge) => {
        const g = await q.guardFidelity({ model: written, extra: int8Report.qdq }, () => q.int8FallbackSpace(result.context), judge, fallbackProgress);
        int8Report.qdq = g.extra;
        return g;
      };
    }
  } else if (options.mode === 'int8-dynamic') {
    const { quantizeDynamic } = await import('../passes/quantize/dynamic.js');
    const perChannel = options.perChannel ?? true;
    const dynOptions = {
      opTypes: options.opTypes,
      excludeOpTypes: options.excludeOpTypes,
      excludeNodes: options.excludeNodes,
      perChannel,
      reduceRange: options.reduceRange,
    };
    const result = quantizeDynamic(model, { ...dynOptions, onWarning });
    await refuseNothingQuantized(result.report, model, options, onWarning);
    ({ model: written, report } = result);
    fallback = async (judge) => {
      const g = await q.guardFidelity(
        { model: result.model, extra: result.report },
        () => q.dynamicFallbackSpace(model, dynOptions, result.report),
        judge,
        fallbackProgress,
      );
      report = g.extra;
      return g;
    };
  } else if (options.mode === 'int4' || options.mode === 'q4f16') {
    const { quantizeInt4, int4StatisticRequests } = await import('../passes/quantize/int4.js');
    const int4Options: import('../passes/quantize/int4.js').Int4Options = {
      blockSize: options.int4?.blockSize,
      symmetric: options.int4?.symmetric,
      accuracyLevel: options.int4?.accuracyLevel,
      method: options.int4?.method,
      opTypes: options.opTypes,
      excludeOpTypes: options.excludeOpTypes,
      excludeNodes: options.excludeNodes,
      float16: options.mode === 'q4f16' ? { keepIoTypes: options.keepIoTypes ?? true, opBlockList: options.opBlockList } : undefined,
    };
    if (int4Options.method === 'awq') {
      if (!calibration) throw new UsageError('--int4-method awq needs --calibration-data (activation statistics)');
      const { collectStatistics } = await import('../calibration/index.js');
      int4Options.activationStatistics = (
        await collectStatistics(model, int4StatisticRequests(model, int4Options), calibration, { batchSize: options.batchSize, runner })
      ).channels;
    }
    const result = quantizeInt4(model, int4Options);
    await refuseNothingQuantized(result.report, model, options, onWarning);
    ({ model: written, report } = result);
    fallback = async (judge) => {
      const g = await q.guardFidelity(
        { model: result.model, extra: result.report },
        () => q.int4FallbackSpace(model, int4Options, result.report),
        judge,
        fallbackProgress,
      );
      report = g.extra;
      return g;
    };
  } else {
    const { convertToFloat16 } = await import('../passes/quantize/fp16.js');
    const nodeBlockList = (await import('./exclude-nodes.js')).matchedExcludeNodes(model, options.excludeNodes); // the rest were warned about
    const fp16Options = { keepIoTypes: options.keepIoTypes ?? true, opBlockList: options.opBlockList, nodeBlockList };
    const result = convertToFloat16(model, { ...fp16Options, onWarning });
    const { nothingConvertedReason } = await import('../passes/quantize/nothing-quantized.js');
    const nothing = nothingConvertedReason(result.report);
    if (nothing) throw new UsageError(`${options.model}: ${nothing}`);
    ({ model: written, report } = result);
    fallback = async (judge) => {
      const g = await q.guardFidelity(
        { model: result.model, extra: result.report },
        () => q.fp16FallbackSpace(model, fp16Options, result.report),
        judge,
        fallbackProgress,
      );
      report = g.extra;
      return g;
    };
  }

  if (options.mode !== 'int8') lap('quantize');

  // Inputs for the checks, made before anything is written: the held-out samples (guard on), else
  // the first calibration samples as before. Without data a symbolic dim that no --shape sizes
  // fails here: for int8 (always with data) that cannot happen; int8-dynamic and fp16 need no data,
  // so they write the model and only load it (a warning names --shape).
  let checkData: Dataset | undefined;
  let checkInputs: QuantizeChecks['inputs'] = null;
  let skipped: string | undefined;
  if (plan && plan.source === 'eval-data') [checkData, checkInputs] = [q.sliceDataset(evalData!, plan.check.start, plan.check.end), 'eval-data'];
  else if (plan && plan.source !== 'random') [checkData, checkInputs] = [q.sliceDataset(calibration!, plan.check.start, plan.check.end), 'calibration'];
  else if (!plan && calibration) [checkData, checkInputs] = [data.take(calibration, Math.min(inputs.calibrationCount, CHECK_SAMPLE_COUNT)), 'calibration'];
  else {
    // A model that fixes a batch of k > 1 gets one batch of exactly its declared shapes, as
    // benchmark feeds it (gather_0's [5,4,3,2] data beside [3] indices: dim 0 is no batch its outputs
    // keep); a batch of 1 or none, 8 samples (a fixed batch of 1 runs them one by one).
    const fixed = data.fixedBatchSize(specs);
    const count = fixed !== undefined && fixed > 1 ? fixed : 8;
    const random = (shapeOverrides: ShapeOverrides | undefined): Dataset =>
      data.randomDataset(specs, count, 0, { shapeOverrides, integerBounds: runtime.integerInputBounds(model), constants: options.inputValues });
    try {
      checkData = seen.randomData = random(options.shapes);
      checkInputs = 'random';
    } catch (error) {
      // Only a missing size is recoverable (its message names --shape); other usage errors stand.
      if (!(error instanceof UsageError) || options.mode === 'int8' || !error.message.includes('--shape')) throw error;
      // QA F4: the check (and the guard) must not silently switch off on a symbolic sequence length:
      // symbolic non-batch dims without --shape take SUGGESTED_DIM, said in a warning.
      // The first size the FP32 model runs at (a framing Reshape may need a multiple of 64); none: skipped as before.
      const filled = await firstRunnableSize(model, specs, options.shapes ?? {}, runtime, runner);
      if (filled) {
        checkData = seen.randomData = random(filled.overrides);
        checkInputs = 'random';
        onWarning(
          `no data and no --shape for symbolic dim(s): the check runs on 8 random inputs with --shape ${filled.flags.join(' --shape ')} ` +
            '(pass --shape with your own sizes, or give --calibration-data)',
        );
      } else skipped = error.message;
    }
  }

  // The fidelity guard: decides, unless the labelled guard does (then it is measured) or QAT changed
  // the weights (then the distance to FP32 is reported, not enforced).
  let fidelity: FidelityReport;
  let judge: InstanceType<typeof q.FidelityJudge> | undefined;
  if (!plan) fidelity = { enabled: false, reason: 'turned off (--no-guard): the model was not held to a fidelity budget' };
  else if (!checkData) fidelity = { enabled: false, reason: `no inputs to check the model on: ${skipped}` };
  else {
    // A --metric budget replaces the default SQNR / agreement floors (still measured and reported).
    const metricDecides = options.taskMetric !== undefined;
    const budget: FidelityBudget = {
      minSqnrDb: options.minSqnrDb ?? (metricDecides ? -Infinity : q.DEFAULT_FIDELITY_BUDGET.minSqnrDb),
      minTop1Agreement: options.minTop1Agreement ?? (metricDecides ? 0 : q.DEFAULT_FIDELITY_BUDGET.minTop1Agreement),
      ...(metricBudget ? { metric: metricBudget } : {}),
    };
    // The FP32 reference's session and outputs on checkData serve the guard and the check after writing.
    judge = new q.FidelityJudge(model, checkData, budget, { runner, batchSize: options.batchSize ?? 16 });
    cleanups.push(() => judge!.close());
    const heldOut = {
      source: plan.source,
      samples: checkData.count,
      start: plan.check.start,
      end: plan.check.start + checkData.count,
      ...(plan.note ? { note: plan.note } : {}),
    };
    if (fallback) {
      const g = await fallback(judge);
      written = g.model;
      fidelity = {
        enabled: true,
        decidedBy: 'fidelity',
        heldOut,
        budget,
        initial: g.initial,
        final: g.final,
        met: g.met,
        floatNodes: g.floatNodes,
        sensitivity: g.sensitivity,
        steps: g.steps,
        runs: g.runs,
      };
      if (g.floatNodes.length > 0)
        onWarning(
          g.met
            ? `fidelity guard: ${g.floatNodes.length} node(s) kept float to meet the budget: ${g.floatNodes.join(', ')}`
            : `fidelity guard: ${g.floatNodes.length} node(s) tried in float, and the budget is still missed: ${g.floatNodes.join(', ')}`,
        );
    } else {
      onProgress(`fidelity check on ${checkData.count} held-out samples`);
      const m = await judge!.measure(written);
      const step = { floatNodes: guard?.chosen.fp32Nodes ?? [], worstSqnrDb: m.worstSqnrDb, met: m.met, failures: m.failures };
      fidelity = {
        enabled: true,
        decidedBy: guard ? 'labels' : 'reported',
        heldOut,
        budget,
        initial: m,
        final: m,
        met: m.met,
        floatNodes: [],
        sensitivity: [],
        steps: [step],
        runs: judge!.runs,
      };
      if (!m.met)
        onWarning(
          `the model misses the fidelity budget (${m.failures.join('; ')}); not enforced: ${guard ? '--max-accuracy-drop decides' : 'QAT changes the weights'}`,
        );
    }
  }
  lap('fidelity');
  const gateFailure = gateFailureOf(guard, fidelity, options, q.describeBudget);
  const common = {
    mode: options.mode,
    input: { path: options.model, sizeBytes: await fileSize(options.model) },
    guard: guardSummary(guard),
    fidelity,
    qat,
    warnings: inputs.warnings,
  };
  if (gateFailure && !options.force) {
    return {
      ...common,
      output: null,
      seconds: (performance.now() - started) / 1000,
      report,
      agreement: null,
      checks: { ran: false, inputs: null, note: 'nothing written' },
      gateFailure,
      timings,
    };
  }

  const target = output;
  onProgress(`writing ${target}`);
  const { saveModel } = await import('../onnx/index.js');
  // The file must load (and, when inputs could be made, run) before we call it a success: the check
  // runs on the staged file, so a model that fails it never replaces what was at the path before.
  let agreement: Record<string, AgreementMetrics> | null = null;
  let checks: QuantizeChecks = { ran: false, inputs: null };
  // One session of the written file: it is compared with FP32 (the judge's cached outputs when
  // the guard ran on the same samples), and what onnxruntime made of it is the fusion check's.
  const fusionFile = options.mode === 'fp16' ? undefined : await q.fusionTarget(runner);
  if (fusionFile) cleanups.push(() => fusionFile.remove());
  await saveModel(written, target, {
    verify: async (staged) => {
      onProgress('checking the written model in onnxruntime');
      const session = await runtime.createRunner(staged, { ...runner, ...fusionFile?.runnerOptions, label: target });
      try {
        if (checkData) {
          // The data is the FP32 model's: a written model with float16 inputs and outputs
          // (--no-keep-io-types) is fed it converted and compared in float32 (referenceIo).
          const { referenceIo } = await import('../passes/quantize/fidelity.js');
          agreement = judge
            ? await judge.agreement(session)
            : await evaluate.compareOutputs(model, referenceIo(session), checkData, { runner, batchSize: options.batchSize ?? 16 });
          checks = { ran: true, inputs: checkInputs };
        } else {
          const note = `the comparison with FP32 in onnxruntime was skipped (the written model was only loaded): ${skipped}, or give --calibration-data`;
          checks = { ran: false, inputs: null, note };
          onWarning(note);
        }
      } finally {
        await session.release();
      }
    },
  });
  lap('write-and-check');
  const qdqReport = report.mode === 'int8' ? report.qdq : undefined;
  const keptFloat = qdqReport ? [...qdqReport.skipped, ...qdqReport.floatCompute.map((f) => ({ ...f, weightsDequantized: true }))] : undefined;
  onProgress('checking what onnxruntime fuses');
  const fusion = fusionFile ? await fusionFile.read(target, { reference: written, keptFloat }) : undefined;
  if (fusion) lap('fusion-check');
  const speed = options.measureSpeedRuns
    ? await speedCheck(
        options.model,
        target,
        {
          runs: options.measureSpeedRuns,
          threads: options.threads ?? 1,
          shapes: options.shapes,
          data: calibration ?? evalData,
          inputValues: options.inputValues,
        },
        { onProgress, onWarning },
      )
    : undefined;
  if (speed) lap('speed-check');
  return {
    ...common,
    output: { path: target, sizeBytes: await fileSize(target) },
    seconds: (performance.now() - started) / 1000,
    report,
    fusion,
    speed,
    agreement,
    checks,
    ...(gateFailure ? { gateFailure } : {}),
    timings,
  };
}

function guardSummary(guard: GuardResult | undefined): QuantizeResult['guard'] {
  if (!guard) return undefined;
  const { budget, baselineAccuracy, evalSamples, met, chosen, attempts, sensitivity, outOfRangeLabels, classes } = guard;
  return { budget, baselineAccuracy, evalSamples, met, chosen, attempts, sensitivity, ...(outOfRangeLabels ? { outOfRangeLabels, classes } : {}) };
}

const formatDbValue = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(1)} dB` : 'inf dB');

/** Why the command fails (a budget no setting met, with what was tried), or undefined. */
function gateFailureOf(
  guard: GuardResult | undefined,
  fidelity: FidelityReport,
  options: QuantizeWorkflowOptions,
  describeBudget: (b: FidelityBudget) => string,
): string | undefined {
  const tail = options.force ? 'wrote the best attempt (--force)' : 'nothing written (--force writes the best attempt)';
  if (guard && !guard.met) {
    return `no INT8 setting met --max-accuracy-drop: best drop ${guard.chosen.dropPoints.toFixed(2)}pt with ${guard.chosen.fp32Nodes.length} node(s) in FP32 (${guard.attempts.length} attempt(s)); ${tail}`;
  }
  if (!fidelity.enabled || fidelity.decidedBy !== 'fidelity' || fidelity.met) return undefined;
  const tried = fidelity.steps.slice(1).map((s) => s.floatNodes.length);
  const budget = describeBudget(fidelity.budget);
  const what =
    tried.length > 0
      ? `tried ${tried.join(', ')} node(s) in float (of ${fidelity.sensitivity.reduce((n, u) => n + u.nodes.length, 0)} candidates, ranked by sensitivity); best worst-output SQNR ${formatDbValue(fidelity.final.worstSqnrDb)} with ${fidelity.floatNodes.length} node(s) in float`
      : `no fallback: it keeps at most half of the quantized nodes float, and there ${fidelity.sensitivity.length === 0 ? 'are fewer than 2' : 'is no unit small enough'}`;
  return `the ${options.mode} model misses the fidelity budget (${budget}) on ${fidelity.heldOut.samples} held-out samples: ${fidelity.initial.failures.join('; ')}; ${what}; ${tail}${fidelity.heldOut.source === 'random' ? `, or give --calibration-data with real inputs (this check ran on ${fidelity.heldOut.samples} random ones, a weak check)` : ''}, or relax it with ${fidelity.budget.metric ? (fidelity.budget.metric.maxDrop !== undefined ? '--max-accuracy-drop' : '--metric-budget') : '--min-sqnr/--min-agreement'}, or --no-guard`;
}

/** QAT after calibration: fine-tune from PTQ's preprocessed model and ranges, export as QDQ. */
async function qatStep(
  context: Int8Context,
  options: QuantizeWorkflowOptions,
  settings: NonNullable<QuantizeWorkflowOptions['qat']>,
  evalData: Dataset | undefined,
  inputs: Awaited<ReturnType<typeof loadInputs>>,
): Promise<{ model: Model; report: QatReport }> {
  const { quantizeAwareTraining } = await import('./qat.js');
  const train = await inputs.data.loadDataset(settings.data, inputs.specs);
  return quantizeAwareTraining(context.preprocessed, {
    ranges: context.ranges,
    qdq: context.qdqOptions,
    train,
    eval: evalData,
    teacher: Boolean(settings.teacher),
    epochs: settings.epochs,
    learningRate: settings.learningRate,
    backend: settings.backend,
    outputName: options.outputName,
    runner: inputs.runner,
    onProgress: (e) => inputs.onProgress(e.message),
    onWarning: inputs.onWarning,
  });
}

/**
 * `--shape` overrides that size every symbolic non-batch dim (a sequence length) left unsized by
 * `given`: SUGGESTED_DIM per dim name (one size for every input that shares it), and a whole shape
 * per input for unnamed dims. `flags`: the same as --shape arguments ('T=16', 'mask=1x16').
 */
export function fillSymbolicDims(specs: readonly IoSpec[], given: ShapeOverrides, size = SUGGESTED_DIM): { overrides: ShapeOverrides; flags: string[] } {
  const axes = batchAxes(specs);
  const overrides: ShapeOverrides = Object.assign(Object.create(null) as ShapeOverrides, given);
  const flags: string[] = [];
  for (const spec of specs) {
    if (spec.unknownRank || Object.hasOwn(given, spec.name)) continue;
    const axis = axes[spec.name] ?? null;
    let unnamed = false;
    spec.shape.forEach((d, i) => {
      if (typeof d === 'number' || i === axis) return;
      if (typeof d === 'string' && d !== '') {
        if (!Object.hasOwn(overrides, d)) {
          overrides[d] = [size];
          flags.push(`${d}=${size}`);
        }
      } else unnamed = true;
    });
    if (unnamed) {
      const dims = spec.shape.map((d, i) =>
        typeof d === 'number' ? d : i === axis ? 1 : typeof d === 'string' && d !== '' && overrides[d]?.length === 1 ? overrides[d]![0]! : size,
      );
      overrides[spec.name] = dims;
      flags.push(`${spec.name}=${dims.join('x')}`);
    }
  }
  return { overrides, flags };
}

/** Sizes tried for symbolic non-batch dims without data or --shape, in order (SUGGESTED_DIM first). */
const FILL_SIZES = [SUGGESTED_DIM, 64, 256, 1024];

/**
 * fillSymbolicDims at the first of FILL_SIZES the FP32 model runs at (one all-zero sample; a
 * framing Reshape rejects 16 samples of audio in frames of 64), or undefined when none does.
 */
async function firstRunnableSize(
  model: Model,
  specs: readonly IoSpec[],
  given: ShapeOverrides,
  runtime: typeof import('../runtime/index.js'),
  runner: RunnerOptions,
): Promise<{ overrides: ShapeOverrides; flags: string[] } | undefined> {
  const { dtypeInfo, elementCount } = await import('../ir/dtype.js');
  const { resolveShape } = await import('../ir/io-spec.js');
  const axes = batchAxes(specs);
  const session = await runtime.createRunner(model, { ...runner, label: 'FP32 model (probe for --shape sizes)' });
  try {
    for (const size of FILL_SIZES) {
      const filled = fillSymbolicDims(specs, given, size);
      try {
        const feeds: Record<string, import('../ir/index.js').TensorData> = Object.create(null);
        for (const spec of specs) {
          const dims = resolveShape(spec, filled.overrides, 1, spec.unknownRank ? 0 : (axes[spec.name] ?? null));
          const info = dtypeInfo(spec.dtype);
          if (!info.array) return filled; // strings: no probe
          feeds[spec.name] = { dtype: spec.dtype, dims, data: new info.array(elementCount(dims)) as never };
        }
        await session.run(feeds);
        return filled;
      } catch {
        // this size does not fit the model: try the next
      }
    }
    return undefined;
  } finally {
    await session.release();
  }
}

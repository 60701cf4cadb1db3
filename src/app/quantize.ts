/**
 * The quantize workflow (`model-opt quantize` as a function): load the model and data, run INT8
 * static (optionally with QAT or the accuracy guard), INT8 dynamic or FP16, write the model
 * atomically (never over an input; a missed accuracy goal goes to `.missed-goal.onnx`), load and run
 * the written file in onnxruntime against FP32 (agreement), check what onnxruntime fuses, and
 * optionally time it. `sensitivityWorkflow` is `--analyze`: the per-node sensitivity, nothing written.
 * A pass that quantized nothing is a UsageError (nothing written) unless `opTypes` was given. Modes
 * that need no data (int8-dynamic, fp16) still write their model when the check cannot make inputs
 * (a symbolic dim without `--shape` or data): the written file is then only loaded in onnxruntime,
 * `agreement` is null and `checks` says why (a warning names `--shape`).
 * May import: errors, calibration/defaults, app/*, types from below; onnx, data, runtime, evaluate,
 * passes (lazily).
 */
import { rm, stat } from 'node:fs/promises';
import { UsageError } from '../errors.js';
import { CHECK_SAMPLE_COUNT, DEFAULT_CALIBRATION_COUNT } from '../calibration/defaults.js';
import type { Model } from '../ir/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import type { Dataset, InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import type { AgreementMetrics } from '../metrics/index.js';
import type { CalibrationMethod } from '../passes/quantize/calibrate.js';
import type { AccuracyBudget, FusionReport, GuardResult, Int8Context, Int8Report, SensitivityRow } from '../passes/quantize/index.js';
import type { DynamicReport } from '../passes/quantize/dynamic.js';
import type { Fp16Report } from '../passes/quantize/fp16.js';
import type { TrainingBackend } from '../train/backend.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath, missedGoalPath } from './output-path.js';
import type { QatReport } from './qat.js';
import { speedCheck, type SpeedCheck } from './speed-check.js';

export type QuantizeMode = 'int8' | 'int8-dynamic' | 'fp16';

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
  /** `--feedback OUTPUT=INPUT`: states made by running the FP32 model over the data in order. */
  feedback?: readonly FeedbackPair[];
  /** Time the input model against the written one, this many runs each. */
  measureSpeedRuns?: number;
  /** int8: quantization-aware training after calibration. */
  qat?: { data: string; epochs?: number; learningRate?: number; teacher?: boolean; backend?: TrainingBackend | 'auto' };
}

/** What `model-opt quantize --json` prints (less its schema version and command name). */
export interface QuantizeResult {
  mode: QuantizeMode;
  input: { path: string; sizeBytes: number };
  output: { path: string; sizeBytes: number };
  seconds: number;
  report: Int8Report | DynamicReport | Fp16Report;
  fusion?: FusionReport;
  speed?: SpeedCheck;
  /** Agreement of the written model with FP32, per output (the onnxruntime check); null when it was skipped. */
  agreement: Record<string, AgreementMetrics> | null;
  /** What the onnxruntime check after writing did: compared with FP32, or only loaded the file (and why). */
  checks: QuantizeChecks;
  guard?: Omit<GuardResult, 'model' | 'qdq'>;
  qat?: QatReport;
  warnings: string[];
}

export interface QuantizeChecks {
  /** True: the written model ran in onnxruntime and was compared with FP32; false: it was only loaded (a session created). */
  ran: boolean;
  /** Inputs the comparison ran on: 'calibration' (the data's first samples), 'random' (seeded), or null. */
  inputs: 'calibration' | 'random' | null;
  /** Why the comparison was skipped, when it was. */
  note?: string;
}

export interface SensitivityResult {
  model: string;
  sensitivity: SensitivityRow[];
  warnings: string[];
}

async function fileSize(file: string): Promise<number> {
  return (await stat(file)).size;
}

/** Load, refuse an already quantized model, load the data sets; warnings collected as they come. */
async function loadInputs(options: QuantizeWorkflowOptions, events: WorkflowEvents) {
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
  const runner: RunnerOptions = options.threads ? { intraOpThreads: options.threads } : {};
  onProgress(`loading ${options.model}`);
  const model = await loadModel(options.model, { onWarning });
  if (options.mode !== 'fp16') q.refuseQuantized(model, options.model);
  const specs = runtime.modelInputSpecs(model);
  const { loadModelData } = await import('./load-data.js');
  const dataOptions = { inputValues: options.inputValues, feedback: options.feedback, runner, onProgress };
  const calibration = options.calibrationData ? await loadModelData(model, options.calibrationData, { ...dataOptions, maxSamples: calibrationCount }) : undefined;
  const evalData = options.evalData ? await loadModelData(model, options.evalData, dataOptions) : undefined;
  return { model, specs, calibration, evalData, calibrationCount, runner, warnings, onWarning, onProgress, runtime, data, q, evaluate };
}

/** The INT8 static pass with the workflow's options. */
async function int8(model: Model, calibration: Dataset | undefined, inputs: Awaited<ReturnType<typeof loadInputs>>, options: QuantizeWorkflowOptions) {
  if (!calibration) throw new UsageError('--mode int8 needs --calibration-data (representative inputs); without data use --mode int8-dynamic');
  const result = await inputs.q.quantizeInt8(model, {
    calibration,
    calibrationCount: inputs.calibrationCount,
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
async function refuseNothingQuantized(report: Int8Report | DynamicReport, model: Model, options: QuantizeWorkflowOptions, onWarning: (message: string) => void): Promise<void> {
  const { nothingQuantizedReason } = await import('../passes/quantize/nothing-quantized.js');
  const reason = nothingQuantizedReason(report, model);
  if (!reason) return;
  if (!options.opTypes || options.opTypes.length === 0) throw new UsageError(`${options.model}: ${reason}`);
  onWarning(`${options.model}: ${reason.split('. ')[0]} (--op-types ${options.opTypes.join(',')})`);
}

/** `--analyze`: quantize in memory, then the per-node sensitivity (lowest SQNR first). Writes nothing. */
export async function sensitivityWorkflow(options: QuantizeWorkflowOptions, events: WorkflowEvents = {}): Promise<SensitivityResult> {
  const inputs = await loadInputs({ ...options, mode: 'int8' }, events);
  const result = await int8(inputs.model, inputs.calibration, inputs, options);
  const sensitivity = await inputs.q.analyzeSensitivity(result.context, { runner: inputs.runner, onProgress: (e) => inputs.onProgress(e.message) });
  return { model: options.model, sensitivity, warnings: inputs.warnings };
}

export async function quantizeWorkflow(options: QuantizeWorkflowOptions, events: WorkflowEvents = {}): Promise<QuantizeResult> {
  if (!options.output) throw new UsageError('missing -o/--output <path> (or use --analyze)');
  const output = checkOutputPath(options.output, [options.model, ...[options.calibrationData, options.evalData, options.qat?.data].filter((f): f is string => Boolean(f))]);
  const inputs = await loadInputs(options, events);
  const { model, specs, calibration, evalData, runner, onWarning, onProgress, runtime, data, q, evaluate } = inputs;
  const started = performance.now();

  let written: Model;
  let report: QuantizeResult['report'];
  let guard: GuardResult | undefined;
  let qat: QatReport | undefined;
  if (options.mode === 'int8') {
    const result = await int8(model, calibration, inputs, options);
    written = result.model;
    report = result.report;
    if (options.qat) {
      const trained = await qatStep(result.context, options, options.qat, evalData, inputs);
      written = trained.model;
      qat = trained.report;
    }
    if (options.maxAccuracyDrop) {
      if (!evalData) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
      guard = await q.guardAccuracy(model, result.context, evalData, options.maxAccuracyDrop, { outputName: options.outputName, runner, onProgress: (e) => onProgress(e.message) });
      written = guard.model;
      result.report.qdq = guard.qdq;
    }
  } else if (options.mode === 'int8-dynamic') {
    const { quantizeDynamic } = await import('../passes/quantize/dynamic.js');
    const perChannel = options.perChannel ?? true;
    const result = quantizeDynamic(model, { opTypes: options.opTypes, excludeOpTypes: options.excludeOpTypes, excludeNodes: options.excludeNodes, perChannel, reduceRange: options.reduceRange, onWarning });
    await refuseNothingQuantized(result.report, model, options, onWarning);
    ({ model: written, report } = result);
  } else {
    const { convertToFloat16 } = await import('../passes/quantize/fp16.js');
    ({ model: written, report } = convertToFloat16(model, { keepIoTypes: options.keepIoTypes ?? true, opBlockList: options.opBlockList, nodeBlockList: options.excludeNodes, onWarning }));
  }

  // Inputs for the check below, made before anything is written. Without data a symbolic dim
  // that no --shape sizes fails here: for int8 (always with data) that cannot happen; int8-dynamic
  // and fp16 need no data, so they write the model and only load it (a warning names --shape).
  let checkData: Dataset | undefined;
  let skipped: string | undefined;
  if (calibration) checkData = data.take(calibration, Math.min(inputs.calibrationCount, CHECK_SAMPLE_COUNT));
  else {
    try {
      checkData = data.randomDataset(specs, 8, 0, { shapeOverrides: options.shapes, integerBounds: runtime.integerInputBounds(model), constants: options.inputValues });
    } catch (error) {
      // Only a missing size is skippable (its message names --shape); other usage errors stand.
      if (!(error instanceof UsageError) || options.mode === 'int8' || !error.message.includes('--shape')) throw error;
      skipped = error.message;
    }
  }
  const target = guard && !guard.met ? missedGoalPath(output) : output;
  onProgress(`writing ${target}`);
  const { saveModel } = await import('../onnx/index.js');
  await saveModel(written, target);

  // The written file must load (and, when inputs could be made, run) before we call it a success.
  onProgress('checking the written model in onnxruntime');
  let agreement: Record<string, AgreementMetrics> | null = null;
  let checks: QuantizeChecks;
  try {
    if (checkData) {
      agreement = await evaluate.compareOutputs(model, target, checkData, { runner, batchSize: options.batchSize ?? 16 });
      checks = { ran: true, inputs: calibration ? 'calibration' : 'random' };
    } else {
      const session = await runtime.createRunner(target, { ...runner, label: target });
      await session.release();
      const note = `the comparison with FP32 in onnxruntime was skipped (the written model was only loaded): ${skipped}, or give --calibration-data`;
      checks = { ran: false, inputs: null, note };
      onWarning(note);
    }
  } catch (error) {
    await rm(target, { force: true });
    throw error;
  }
  const qdqReport = report.mode === 'int8' ? report.qdq : undefined;
  const keptFloat = qdqReport ? [...qdqReport.skipped, ...qdqReport.floatCompute.map((f) => ({ ...f, weightsDequantized: true }))] : undefined;
  const fusion = options.mode === 'fp16' ? undefined : await q.checkFusion(target, { runner, reference: written, keptFloat });
  const speed = options.measureSpeedRuns
    ? await speedCheck(options.model, target, { runs: options.measureSpeedRuns, threads: options.threads ?? 1, shapes: options.shapes, data: calibration ?? evalData }, { onProgress, onWarning })
    : undefined;
  return {
    mode: options.mode,
    input: { path: options.model, sizeBytes: await fileSize(options.model) },
    output: { path: target, sizeBytes: await fileSize(target) },
    seconds: (performance.now() - started) / 1000,
    report,
    fusion,
    speed,
    agreement,
    checks,
    guard: guard
      ? {
          budget: guard.budget,
          baselineAccuracy: guard.baselineAccuracy,
          evalSamples: guard.evalSamples,
          met: guard.met,
          chosen: guard.chosen,
          attempts: guard.attempts,
          sensitivity: guard.sensitivity,
        }
      : undefined,
    qat,
    warnings: inputs.warnings,
  };
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

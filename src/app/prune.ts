/**
 * The prune workflow (`model-opt prune` as a function): load the model and the data sets, run the
 * pruning library (which checks the result in onnxruntime and measures sizes and accuracy), write
 * the model atomically (never over an input) and optionally time it against the input. With data
 * and no `--shape`, the checks and timings that need concrete input shapes (the onnxruntime check,
 * FLOPs, the speed check) take them from the data's first sample (./data-shapes.ts).
 * `--metric` / `--output-name` score the eval data with a task metric (ctc, cer, f1, miou, top-k, a
 * module; ./metric-module.ts) on a chosen output, before and after: `score` in the result; plain
 * top-1 on an output stays `accuracy` (the library's own measurement).
 * May import: app/*, types from below; onnx, data, ir, evaluate, passes/prune (lazily).
 */
import type { Accuracy, ModelSize, PruneOptions, PruneResult, RunCheck } from './prune-passes.js';
import type { Dataset, InputValues } from '../data/index.js';
import type { Model } from '../ir/index.js';
import type { FeedbackPair } from '../calibration/index.js';
import type { TaskMetricFactory } from '../evaluate/index.js';
import { UsageError } from '../errors.js';
import { chooseOutput } from '../ir/io-spec.js';
import { withinAccuracyBudget, type AccuracyBudget } from '../metrics/accuracy-budget.js';
import type { WorkflowEvents } from './events.js';
import { checkOutputPath } from './output-path.js';
import { speedCheck, type SpeedCheck } from './speed-check.js';

export interface PruneWorkflowOptions extends Omit<PruneOptions, 'calibrationData' | 'evalData'> {
  /** The model file (never modified). */
  model: string;
  /** Where to write the pruned model (never over an input). */
  output: string;
  /** Unlabelled data file for activation statistics. */
  calibrationData?: string;
  /** Labelled data file: top-1 accuracy before and after. */
  evalData?: string;
  /**
   * `--max-accuracy-drop`: the top-1 drop on evalData the pruned model may have; beyond it the
   * result carries `gateFailure` (the model is still written: fine-tuning, e.g. distill, follows).
   */
  maxAccuracyDrop?: AccuracyBudget;
  /** Time the input model against the written one, this many runs each (1 thread). */
  measureSpeedRuns?: number;
  /** `--input` values: inputs given once for all samples of the data files. */
  inputValues?: InputValues;
  /** `--feedback OUTPUT=INPUT`: states made by running the FP32 model over the data in order. */
  feedback?: readonly FeedbackPair[];
  /** `--metric`: the task metric scored on evalData before and after (default top1). */
  metric?: string;
  /** `--output-name`: the output the metric scores (default the first). */
  outputName?: string;
}

/** A task metric on the eval data before and after pruning (`--metric`, other than plain top-1). */
export interface PruneScore {
  metric: string;
  higherIsBetter: boolean;
  /** The output scored ('' when a module reads several). */
  output: string;
  samples: number;
  /** null when the metric compares with the unpruned model (agreement): that model is its reference. */
  before: number | null;
  after: number;
  /** Secondary numbers (CER beside CTC exact match, precision and recall beside F1, ...). */
  details: { before: Record<string, number>; after: Record<string, number> };
}

/** What `model-opt prune --json` prints (less its schema version and command name). */
export interface PruneWorkflowResult {
  input: string;
  output: string;
  report: PruneResult['report'];
  size: { before: ModelSize; after: ModelSize };
  accuracy: { before: Accuracy; after: Accuracy } | null;
  /** With `--metric` other than top1: that metric before and after (accuracy is then null). */
  score?: PruneScore;
  check: RunCheck;
  speed?: SpeedCheck;
  notes: string[];
  /** Where the written model differs from what was asked (also sent to events.onWarning). */
  warnings: string[];
  /** The accuracy budget missed (--max-accuracy-drop), for the CLI's exit code 1. */
  gateFailure?: string;
}

export async function pruneWorkflow(options: PruneWorkflowOptions, events: WorkflowEvents = {}): Promise<PruneWorkflowResult> {
  const {
    model: input,
    output: requested,
    calibrationData: calibrationPath,
    evalData: evalPath,
    measureSpeedRuns,
    inputValues,
    feedback,
    metric,
    outputName,
    maxAccuracyDrop,
    ...pruneOptions
  } = options;
  if (maxAccuracyDrop && !evalPath) throw new UsageError('--max-accuracy-drop needs --eval-data <labelled data>');
  if (maxAccuracyDrop && metric !== undefined && !isTop1(metric))
    throw new UsageError(`--max-accuracy-drop holds top-1 accuracy; --metric ${metric} is reported only`);
  const output = checkOutputPath(requested, [input, ...(evalPath ? [evalPath] : []), ...(calibrationPath ? [calibrationPath] : [])]);
  const [{ prune }, { loadModel }] = await Promise.all([import('./prune-passes.js'), import('../onnx/index.js')]);
  const progress = events.onProgress ?? (() => undefined);
  progress(`loading ${input}`);
  const model = await loadModel(input);
  if (outputName !== undefined) chooseOutput(model.graph.outputs, outputName, input);
  const { loadModelData } = await import('./load-data.js');
  const calibrationData = calibrationPath ? await loadModelData(model, calibrationPath, { inputValues, feedback, onProgress: progress }) : undefined;
  const evalData = evalPath ? await loadModelData(model, evalPath, { inputValues, feedback, onProgress: progress }) : undefined;
  const { checkShapes } = await import('./data-shapes.js');
  const shapes = checkShapes(pruneOptions.shapes, calibrationData, evalData);
  // A metric or output of the user's is scored here; the library measures top-1 of the first output.
  const ownScoring = evalData !== undefined && (outputName !== undefined || (metric !== undefined && !isTop1(metric)));
  const factory = ownScoring && metric !== undefined && !isTop1(metric) ? await metricFactory(metric, outputName, evalData, evalPath!) : undefined;
  const result = await prune(
    model,
    { ...pruneOptions, shapes, calibrationData, evalData: ownScoring ? undefined : evalData, inputValues },
    { onProgress: progress },
  ).catch(async (error: unknown) => {
    // Top-1 of the first output is the default: say how to score another output or task.
    if (error instanceof UsageError && /^nothing was pruned/.test(error.message)) throw new UsageError(`${input}: ${error.message}`, { cause: error });
    if (!(error instanceof UsageError) || !/cannot compute top-1/.test(error.message)) throw error;
    throw new UsageError(`${error.message}; pick the scores with --output-name, or a task metric with --metric (ctc, cer, f1, miou)`, { cause: error });
  });
  let accuracy = result.accuracy ?? null;
  let score: PruneScore | undefined;
  if (ownScoring) {
    progress(`measuring ${factory?.name ?? 'top-1 accuracy'} before and after`);
    const data = pruneOptions.maxSamples !== undefined ? (await import('../data/index.js')).take(evalData, pruneOptions.maxSamples) : evalData;
    if (factory) score = await scoreBeforeAfter(factory, model, result.model, data);
    else {
      const { measureAccuracy } = await import('./prune-passes.js');
      accuracy = { before: await measureAccuracy(model, data, { outputName }), after: await measureAccuracy(result.model, data, { outputName }) };
    }
  }
  const gateFailure = accuracy && maxAccuracyDrop ? accuracyGate(accuracy, maxAccuracyDrop) : undefined;
  const drop = accuracy ? (accuracy.before.top1 - accuracy.after.top1) * 100 : 0;
  // A large drop is expected before fine-tuning, but exit 0 must not read as "this model is fine".
  if (!maxAccuracyDrop && drop > LARGE_DROP_POINTS) {
    result.warnings.push(
      `top-1 fell ${drop.toFixed(1)} pt: fine-tune it (model-opt distill --teacher ${input} --student ${output}), prune less${calibrationData ? '' : ', or give --calibration-data'}; --max-accuracy-drop makes this exit 1`,
    );
  }
  for (const warning of result.warnings) events.onWarning?.(warning);
  progress(`writing ${output}`);
  await (await import('../runtime/index.js')).saveModelChecked(result.model, output);
  const speed = measureSpeedRuns
    ? await speedCheck(input, output, { runs: measureSpeedRuns, threads: 1, shapes, data: calibrationData ?? evalData, inputValues }, events)
    : undefined;
  return {
    input,
    output,
    report: result.report,
    size: { before: result.sizeBefore, after: result.sizeAfter },
    accuracy,
    ...(score ? { score } : {}),
    check: result.check,
    speed,
    notes: result.notes,
    warnings: result.warnings,
    ...(gateFailure ? { gateFailure } : {}),
  };
}

/** A top-1 drop (points) above which an ungated prune warns. */
const LARGE_DROP_POINTS = 5;

/** The gate's message when `accuracy` misses `budget`, else undefined. */
function accuracyGate(accuracy: { before: Accuracy; after: Accuracy }, budget: AccuracyBudget): string | undefined {
  const { before, after } = accuracy;
  if (withinAccuracyBudget(budget, before.top1, after.top1)) return undefined;
  const limit = budget.kind === 'points' ? `${budget.value} pt` : `${+(budget.value * 100).toFixed(6)}% of it`;
  return `the pruned model's top-1 fell ${((before.top1 - after.top1) * 100).toFixed(2)} pt (${(before.top1 * 100).toFixed(2)}% -> ${(after.top1 * 100).toFixed(2)}% on ${after.samples} samples), more than --max-accuracy-drop ${limit}; it was written for fine-tuning (model-opt distill)`;
}

function isTop1(metric: string): boolean {
  return /^\s*top-?1\s*$/i.test(metric);
}

/** The `--metric` factory, checked against the eval data before any pruning runs. */
async function metricFactory(spec: string, output: string | undefined, data: Dataset, path: string): Promise<TaskMetricFactory> {
  const [{ resolveMetric }, { UsageError }] = await Promise.all([import('./metric-module.js'), import('../errors.js')]);
  const factory = await resolveMetric(spec, { output, hint: ' (pick another with --output-name)' });
  if (factory.needsLabels && !data.labels) throw new UsageError(`--metric ${factory.name} needs labels; ${path} has none (use --metric agreement)`);
  return factory;
}

/** `factory`'s value for the unpruned and the pruned model on the same batches (the pruned one against the unpruned for a metric with a reference). */
async function scoreBeforeAfter(factory: TaskMetricFactory, model: Model, pruned: Model, data: Dataset): Promise<PruneScore> {
  const { evaluateMany } = await import('../evaluate/index.js');
  const first = factory.create();
  const reference = first.needsReference === true;
  const [before, after] = await evaluateMany(
    [
      { model, label: 'unpruned model', metrics: { task: reference ? undefined : first } },
      { model: pruned, label: 'pruned model', metrics: { task: factory.create() } },
    ],
    data,
  );
  const b = before!.task;
  const a = after!.task!;
  return {
    metric: a.metric,
    higherIsBetter: a.higherIsBetter,
    output: a.output,
    samples: a.total,
    before: b ? b.value : null,
    after: a.value,
    details: { before: { ...(b?.details ?? {}) }, after: { ...a.details } },
  };
}

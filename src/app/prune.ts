/**
 * The prune workflow (`model-opt prune` as a function): load the model and the data sets, run the
 * pruning library (which checks the result in onnxruntime and measures sizes and accuracy), write
 * the model atomically (never over an input) and optionally time it against the input. With data
 * and no `--shape`, the checks and timings that need concrete input shapes (the onnxruntime check,
 * FLOPs, the speed check) take them from the data's first sample (./data-shapes.ts).
 * May import: app/*, types from below; onnx, data, ir, passes/prune (lazily).
 */
import type { Accuracy, ModelSize, PruneOptions, PruneResult, RunCheck } from '../passes/prune/index.js';
import type { InputValues } from '../data/index.js';
import type { FeedbackPair } from '../calibration/index.js';
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
  /** Time the input model against the written one, this many runs each (1 thread). */
  measureSpeedRuns?: number;
  /** `--input` values: inputs given once for all samples of the data files. */
  inputValues?: InputValues;
  /** `--feedback OUTPUT=INPUT`: states made by running the FP32 model over the data in order. */
  feedback?: readonly FeedbackPair[];
}

/** What `model-opt prune --json` prints (less its schema version and command name). */
export interface PruneWorkflowResult {
  input: string;
  output: string;
  report: PruneResult['report'];
  size: { before: ModelSize; after: ModelSize };
  accuracy: { before: Accuracy; after: Accuracy } | null;
  check: RunCheck;
  speed?: SpeedCheck;
  notes: string[];
  /** Where the written model differs from what was asked (also sent to events.onWarning). */
  warnings: string[];
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
    ...pruneOptions
  } = options;
  const output = checkOutputPath(requested, [input, ...(evalPath ? [evalPath] : []), ...(calibrationPath ? [calibrationPath] : [])]);
  const [{ prune }, { loadModel, saveModel }] = await Promise.all([import('../passes/prune/index.js'), import('../onnx/index.js')]);
  const progress = events.onProgress ?? (() => undefined);
  progress(`loading ${input}`);
  const model = await loadModel(input);
  const { loadModelData } = await import('./load-data.js');
  const calibrationData = calibrationPath ? await loadModelData(model, calibrationPath, { inputValues, feedback, onProgress: progress }) : undefined;
  const evalData = evalPath ? await loadModelData(model, evalPath, { inputValues, feedback, onProgress: progress }) : undefined;
  const { checkShapes } = await import('./data-shapes.js');
  const shapes = checkShapes(pruneOptions.shapes, calibrationData, evalData);
  const result = await prune(model, { ...pruneOptions, shapes, calibrationData, evalData, inputValues }, { onProgress: progress });
  for (const warning of result.warnings) events.onWarning?.(warning);
  progress(`writing ${output}`);
  await saveModel(result.model, output);
  const speed = measureSpeedRuns
    ? await speedCheck(input, output, { runs: measureSpeedRuns, threads: 1, shapes, data: calibrationData ?? evalData, inputValues }, events)
    : undefined;
  return {
    input,
    output,
    report: result.report,
    size: { before: result.sizeBefore, after: result.sizeAfter },
    accuracy: result.accuracy ?? null,
    check: result.check,
    speed,
    notes: result.notes,
    warnings: result.warnings,
  };
}

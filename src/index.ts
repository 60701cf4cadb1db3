/**
 * model-opt's public library API: a few re-exports, nothing else. Everything a CLI command does is
 * a typed function here (`import { quantizeInt8, benchmark } from 'model-opt'`).
 *
 * Loading this module loads neither onnxruntime-node nor tfjs (test/cli/lazy-load.test.ts checks
 * it): every module re-exported here imports them only inside the functions that need them
 * (createRunner, the training workflows, initTrainingBackend). The one exception is the class
 * TrainableGraph, whose module needs tfjs-core at load: it is exported as a type only, and made
 * with `await createTrainableGraph(model)` (after `await initTrainingBackend()`), which loads
 * tfjs on first use. Add nothing here that imports onnxruntime-node or @tensorflow/* at top level;
 * wrap it the same way instead.
 * Imports: anything in src/ (train/tfjs/onnx-graph.js only as a type and lazily).
 */
import type { Model } from './ir/index.js';
import type { TrainableGraph } from './train/tfjs/onnx-graph.js';

// The model graph and ONNX files.
export * from './ir/index.js';
export { loadModel, saveModel, decodeModel, encodeModel, decodeTensorProto, encodeTensorProto } from './onnx/index.js';
export { ModelOptError, InputError, UsageError, GateError, ExitCode } from './errors.js';

// Running models and data sets.
export { createRunner, captureIntermediates, inferShapesByRunning, modelInputSpecs, modelOutputSpecs, parseShapeOverrides } from './runtime/index.js';
export type { Runner, RunnerOptions, IoSpec } from './runtime/index.js';
export { loadDataset, batches, take, randomDataset, readNpz, writeNpz, readNpy, writeNpy, readTestDataSet } from './data/index.js';
export type { Dataset, Batch } from './data/index.js';

// Commands as functions.
export { inspectModel, type InspectReport } from './analysis/inspect.js';
// Scoring: one way to run models over data and score them; metrics as values (top-k, agreement,
// CTC exact match and CER, binary F1, mean IoU, or a user's module).
export { evaluate, evaluateMany, agreementWithReference, topKAccuracy, builtinMetric, compareOutputs, top1Accuracy } from './evaluate/index.js';
export type { Metric, MetricBatch, TaskMetricFactory, TaskMetricResult } from './evaluate/index.js';
export { resolveMetric } from './app/metric-module.js';
export { benchmark, evaluateGates } from './benchmark/index.js';
export type { BenchmarkOptions, BenchmarkResult } from './benchmark/index.js';
export { preprocess } from './passes/preprocess/index.js';
export { quantizeInt8, checkFusion, guardAccuracy, analyzeSensitivity } from './app/quantize-passes.js';
export { convertToFloat16 } from './passes/quantize/fp16.js';
export { quantizeDynamic } from './passes/quantize/dynamic.js';
export { prune, pruneChannels, pruneMagnitude } from './app/prune-passes.js';
export { batchify } from './passes/batchify.js';
export { simplify, type SimplifyOptions, type SimplifyReport } from './passes/simplify/index.js';
// Workflows: what each CLI command does, start to end (load, run, write, check), as functions.
export { quantizeWorkflow, sensitivityWorkflow, type QuantizeWorkflowOptions, type QuantizeResult, type SensitivityResult } from './app/quantize.js';
export { pruneWorkflow, type PruneWorkflowOptions, type PruneWorkflowResult } from './app/prune.js';
export { distill, distillWorkflow, studentFromTeacher, type DistillWorkflowOptions, type DistillWorkflowResult } from './app/distill.js';
export { quantizeAwareTraining, type QatOptions, type QatReport } from './app/qat.js';
export { speedCheck, type SpeedCheck } from './app/speed-check.js';
export { optimizeWorkflow, type OptimizeOptions, type OptimizeResult, type OptimizeCandidate } from './app/optimize.js';
export { batchifyWorkflow, type BatchifyWorkflowOptions, type BatchifyWorkflowResult } from './app/batchify.js';
export { simplifyWorkflow, type SimplifyWorkflowOptions, type SimplifyWorkflowResult } from './app/simplify.js';
export {
  dynamicBatchingWorkflow,
  batchingSweepOptions,
  type DynamicBatchingOptions,
  type BatcherSettingOptions,
  type BatchingRunOptions,
  type BatchingEvents,
} from './app/dynamic-batching.js';
export { exportTritonWorkflow, type ExportTritonOptions, type ExportTritonResult } from './app/export-triton.js';
export type { WorkflowEvents } from './app/events.js';
export type { TrainableGraph } from './train/tfjs/onnx-graph.js';
export { initTrainingBackend } from './train/tfjs/backend.js';
export { DynamicBatcher, runBatchingSweep, writeTritonRepository } from './serve/index.js';

/** A trainable tfjs view of `model` (see TrainableGraph); loads tfjs-core on first use. */
export async function createTrainableGraph(model: Model): Promise<TrainableGraph> {
  const { TrainableGraph: Graph } = await import('./train/tfjs/onnx-graph.js');
  return new Graph(model);
}

/**
 * model-opt's public library API: a few re-exports, nothing else. Everything a CLI command does is
 * a typed function here (`import { quantizeInt8, benchmark } from 'model-opt'`).
 */

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
export { benchmark, evaluateGates } from './bench/index.js';
export type { BenchmarkOptions, BenchmarkResult } from './bench/index.js';
export { preprocess } from './passes/preprocess/index.js';
export { quantizeInt8, checkFusion, guardAccuracy, analyzeSensitivity } from './passes/quantize/index.js';
export { convertToFloat16 } from './passes/quantize/fp16.js';
export { quantizeDynamic } from './passes/quantize/dynamic.js';
export { prune, pruneChannels, pruneMagnitude } from './passes/prune/index.js';
export { batchify } from './passes/batchify.js';
export { distill, studentFromTeacher } from './train/distill.js';
export { quantizeAwareTraining } from './train/qat.js';
export { TrainableGraph } from './train/onnx-graph.js';
export { initTrainingBackend } from './train/backend.js';
export { DynamicBatcher, runBatchingSweep, writeTritonRepository } from './serve/index.js';

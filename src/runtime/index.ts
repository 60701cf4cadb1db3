/**
 * Runtime: onnxruntime-node behind a small Runner, intermediate-tensor capture, input specs and
 * `--shape` resolution (those two from ir/). Re-exports only; onnxruntime-node itself loads on
 * the first createRunner.
 */
export {
  createRunner,
  listExecutionProviders,
  loadOrt,
  ORT_ENVIRONMENT,
  withOrtEnvironment,
  modelLabel,
  needsExternalData,
  DEFAULT_EXTERNAL_DATA_THRESHOLD,
  type GraphOptimizationLevel,
  type Runner,
  type RunnerOptions,
} from './runner.js';
export {
  canCountBins,
  canReduce,
  captureIntermediates,
  MAX_INDEX_BINS,
  type BinGrid,
  createCaptureRunner,
  createStatisticsCapture,
  inferShapesByRunning,
  type CaptureRunner,
  type StatisticsCapture,
  type StatisticsCaptureResult,
  type StatisticsCapturePlan,
  type TensorReduction,
} from './capture.js';
// The pure io specs live in ir/ (data/ uses them too); re-exported here for existing callers.
export { integerInputBounds, maskInputs } from '../ir/input-bounds.js';
export {
  describeSpec,
  formatShape,
  modelInputSpecs,
  modelOutputSpecs,
  parseShapeOverrides,
  resolveShape,
  type Dim,
  type IoSpec,
  type ShapeOverrides,
} from '../ir/io-spec.js';
export { fromOrtTensor, toOrtTensor } from './ort-tensor.js';
export { matchStage, pipelineRunner, type DownstreamStage } from './pipeline.js';
export { loadsInOnnxruntime, saveModelChecked, writeModelBytesChecked, type CheckedWriteOptions } from './written-model.js';

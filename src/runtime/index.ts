/**
 * Runtime: onnxruntime-node behind a small Runner, intermediate-tensor capture, input specs and
 * `--shape` resolution. Re-exports only; onnxruntime-node itself loads on the first createRunner.
 */
export { createRunner, listExecutionProviders, loadOrt, needsExternalData, DEFAULT_EXTERNAL_DATA_THRESHOLD, type GraphOptimizationLevel, type Runner, type RunnerOptions } from './runner.js';
export { captureIntermediates, createCaptureRunner, inferShapesByRunning, type CaptureRunner } from './capture.js';
export { integerInputBounds, modelInputSpecs, modelOutputSpecs } from './model-specs.js';
export {
  describeSpec,
  formatShape,
  parseShapeOverrides,
  resolveShape,
  type Dim,
  type IoSpec,
  type ShapeOverrides,
} from './shapes.js';
export { fromOrtTensor, toOrtTensor } from './ort-tensor.js';

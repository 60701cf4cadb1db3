/**
 * The evaluation module: one way to run a model (or several, on the same batches) over a Dataset
 * and score it with metrics given as values. Re-exports only.
 */
export {
  DEFAULT_EVAL_BATCH,
  evaluate,
  evaluateMany,
  evaluationBatchSize,
  runBatch,
  type EvaluatedModel,
  type EvaluateOptions,
  type Metric,
  type MetricBatch,
  type MetricContext,
  type MetricResults,
  type MetricSet,
  type ModelSource,
} from './evaluate.js';
export { agreementWithReference, topKAccuracy, type TopKOptions, type TopKResult } from './metrics.js';
export { compareOutputs, top1Accuracy } from './compare.js';

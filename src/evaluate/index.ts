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
  type ReferenceOutputs,
} from './evaluate.js';
export { agreementWithReference, topKAccuracy, type AgreementOptions, type TopKOptions, type TopKResult } from './metrics.js';
export { checkLabelRange, labelRange, labelRangeMessage, labelsLookOneBased, type LabelRange } from './label-range.js';
export { compareOutputs, top1Accuracy } from './compare.js';
export {
  isModuleSpec,
  parseMetricSpec,
  type TaskMetric,
  type TaskMetricFactory,
  type TaskMetricOptions,
  type TaskMetricResult,
} from './task-metric.js';
export { BUILTIN_METRICS, builtinMetric } from './builtin-metrics.js';
export { ctcGreedyDecode, ctcMetric, editDistance, labelSequences, sameSequence, type CtcLayout, type CtcOptions } from './ctc.js';
export { binaryDecisions, binaryF1, f1FromCounts, type BinaryOptions } from './binary.js';
export { meanIoU, pixelClasses } from './segmentation.js';
export { metricFromModule } from './module-metric.js';

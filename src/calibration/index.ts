/**
 * The calibration service: statistics declared by tensor name and kind, collected in one streamed
 * pass with bounded memory; the streaming histogram; the shared sample counts; recurrent feedback
 * (a streaming model's state filled in by running it). Re-exports only.
 */
export {
  budgetedBatchSize,
  calibrationBatchSize,
  capturePath,
  collectStatistics,
  DEFAULT_CALIBRATION_BATCH,
  DEFAULT_CAPTURE_BUDGET,
  SINGLE_SAMPLE_ALLOWANCE,
  type CapturePath,
  type CalibrationBatching,
  type CalibrationProgress,
  type ChannelMoments,
  type CollectedStatistics,
  type CollectOptions,
  type StatisticRequest,
  type TensorStatistics,
} from './statistics.js';
export { DEFAULT_BINS, StreamingHistogram, type HistogramState } from './histogram.js';
export { prestartBinningThread } from './binning.js';
export { exposeSubgraphValues, type ExposedSubgraphValues } from './subgraph-capture.js';
export { CHECK_SAMPLE_COUNT, DEFAULT_CALIBRATION_COUNT } from './defaults.js';
export { feedbackHint, fedBackInputs, parseFeedback, runWithFeedback, withFeedback, withFeedbackHint, type FeedbackPair } from './feedback.js';

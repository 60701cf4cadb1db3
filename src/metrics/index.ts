/**
 * Pure metrics that several layers need (the benchmark, quantize, prune, training): label and
 * output handling, top-k / top-1 correctness, output agreement. A leaf: it imports only ir/dtype
 * and errors, never bench, passes, train or runtime. Re-exports only.
 */
export {
  NO_CLASS,
  argmaxRows,
  classAxis,
  labelIndices,
  toNumbers,
  top1Correct,
  topKCorrect,
  type LabelOptions,
} from './classification.js';
export { AgreementAccumulator, agreement, channelLayout, type AgreementMetrics } from './agreement.js';

/**
 * Pure metrics and statistics that several layers need (evaluate, the benchmark, serving, the
 * reporters): label and output handling, top-k / top-1 correctness, output agreement, summary
 * statistics, bootstrap intervals, paired speed-up, McNemar's test. A leaf: it imports only
 * ir/dtype, util/random and errors, never bench, passes, train or runtime. Re-exports only.
 */
export {
  NO_CLASS,
  argmaxRows,
  classAxis,
  labelIndices,
  toNumbers,
  top1Correct,
  topKCorrect,
} from './classification.js';
export { EmbeddingAccumulator, MAX_NEIGHBOUR_SAMPLES, nearestNeighbours, type EmbeddingAgreement } from './embedding.js';
export {
  DEFAULT_KIND_BUDGET,
  describeKindBudget,
  judgeOutput,
  NEIGHBOURS_JUDGED_FROM,
  ODDS_AGREEMENT,
  OUTPUT_KINDS,
  parseOutputKind,
  type KindBudget,
  type OutputJudgement,
  type OutputKind,
} from './output-kinds.js';
export { AgreementAccumulator, agreement, channelLayout, logOdds, stepAgreement, type AgreementMetrics } from './agreement.js';
export {
  accuracy,
  bootstrapMedianCI,
  bootstrapPercentileCI,
  erfc,
  max,
  mcnemar,
  mcnemarFromCounts,
  MCNEMAR_EXACT_BELOW,
  mean,
  median,
  min,
  pairedSpeedup,
  cannotBeFaster,
  percentile,
  percentileSorted,
  SPEEDUP_NOISE_THRESHOLD,
  speedupVerdict,
  std,
  summarize,
  Z_95,
  type BootstrapOptions,
  type Interval,
  type McNemarResult,
  type Speedup,
  type SpeedupVerdict,
  type SummaryStats,
} from './statistics.js';

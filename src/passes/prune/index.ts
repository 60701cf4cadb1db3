/**
 * Pruning passes, pure: magnitude (unstructured), N:M and structured channel pruning; the
 * statistics each declares (requests), the op table, what to say when nothing was pruned.
 * Checking and measuring a pruned model (onnxruntime, calibration, accuracy) is the pipeline's:
 * app/prune-steps.ts (`prune`), re-exported with these by app/prune-passes.ts. Distillation calls
 * `pruneChannels` directly to build a narrower student. Re-exports only.
 */
export { analyzeChannels, countParams, pruneChannels, statisticsRequests, type ChannelPlan, type ChannelPruneResult } from './channel.js';
export type { ChannelStatistics } from './channel-analysis.js';
export {
  checkNM,
  convTapMeans,
  findTargets,
  magnitudeStatisticsRequests,
  nmPruneIndices,
  pruneMagnitude,
  weightGeometry,
  type MagnitudePruneResult,
  type WeightGeometry,
} from './magnitude.js';
export { PRUNE_OPS, pruneRow, type ChannelOpHandler, type PruneOpRow, type WeightSlot } from './op-handlers.js';
export { PRUNED_OP_TYPES, channelWarnings, unmatchedExclusions } from './outcome.js';
export type * from './types.js';

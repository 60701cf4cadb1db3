/**
 * The pruning passes (passes/prune, pure) with the pipeline's steps that run models: `prune` and
 * the statistics it collects (./prune-steps.ts), the onnxruntime check and the measurements
 * (./prune-measure.ts). What app code, the library and the tests import. Re-exports only.
 */
export * from '../passes/prune/index.js';
export * from './prune-steps.js';
export {
  checkRuns,
  collectChannelStatistics,
  layerFlops,
  measureAccuracy,
  measureFlops,
  modelSize,
  probeFeeds,
  type Accuracy,
  type ModelSize,
  type ProbeOptions,
  type RunCheck,
} from './prune-measure.js';

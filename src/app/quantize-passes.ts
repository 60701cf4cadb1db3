/**
 * The quantize passes (passes/quantize, pure) together with the steps of the pipeline that run
 * models: INT8 calibration and re-quantizing (./quantize-int8.ts), the fidelity judge and guard with
 * its fallback spaces, the labelled accuracy guard and per-node sensitivity, the fusion check.
 * What app code, the library and the tests import. Re-exports only.
 */
export * from '../passes/quantize/index.js';
export { quantizeInt8, requantize } from './quantize-int8.js';
export {
  analyzeOptimized,
  checkFusion,
  fusionTarget,
  INTEGER_KERNELS,
  type FusionReport,
  type KeptFloatNode,
  type UnfusedNode,
} from './quantize-fusion-check.js';
export {
  analyzeSensitivity,
  dynamicFallbackSpace,
  fp16FallbackSpace,
  guardAccuracy,
  int4FallbackSpace,
  int8FallbackSpace,
  type AccuracyBudget,
  type GuardResult,
  type SensitivityRow,
} from './quantize-guard.js';
export {
  DEFAULT_FIDELITY_BUDGET,
  describeBudget,
  FidelityJudge,
  groupUnits,
  growingCounts,
  guardFidelity,
  MAX_SENSITIVITY_UNITS,
  planHeldOut,
  REFINE_UNITS,
  searchRanking,
  sliceDataset,
  type FallbackSpace,
  type FallbackStep,
  type FallbackUnit,
  type FidelityBudget,
  type FidelityGuardResult,
  type FidelityMeasure,
  type HeldOutPlan,
  type HeldOutSource,
  type MetricBudget,
  type OutputFidelity,
} from './quantize-fidelity.js';
export { batchedSensitivity, buildSensitivityModel, SENSITIVITY_ROWS } from './quantize-batched-sensitivity.js';

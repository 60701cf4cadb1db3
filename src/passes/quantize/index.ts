/**
 * Quantization passes: INT8 static (QDQ, calibrated through src/calibration), range methods, the
 * fusion check, the accuracy guard; INT8 dynamic and FP16 live beside them (dynamic.ts, fp16.ts).
 * Re-exports only.
 */
export { CALIBRATION_METHODS, computeRange, entropyRange, mseRange, percentileRange, type CalibrationMethod, type Range } from './calibrate.js';
export { applyQdq, planQdq, quantizeQdq, requiredStatistics, type QdqOptions, type QdqPlan, type QdqReport } from './qdq.js';
export { QDQ_HANDLERS, QUANTIZABLE_OP_TYPES, refuseQuantized, type OpHandler } from './registry.js';
export { analyzeOptimized, checkFusion, fusionTarget, INTEGER_KERNELS, type FusionReport, type KeptFloatNode, type UnfusedNode } from './fusion-check.js';
export {
  quantizeInt8,
  requantize,
  type Int8Context,
  type Int8Options,
  type Int8Report,
  type QuantizeProgress,
} from './int8.js';
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
} from './guard.js';
export {
  DEFAULT_FIDELITY_BUDGET,
  describeBudget,
  FidelityJudge,
  groupUnits,
  growingCounts,
  guardFidelity,
  MAX_SENSITIVITY_UNITS,
  planHeldOut,
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
} from './fidelity.js';
export { activationParams, quantizeWeight, quantizeBias, fakeQuantize, type QuantParams } from './quant-math.js';
export { quantizeInt4, int4StatisticRequests, INT4_METHODS, type Int4Options, type Int4Report } from './int4.js';

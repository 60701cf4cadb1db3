/**
 * Quantization passes, pure: they declare the statistics they need (QDQ plans, INT4's AWQ
 * requests) and transform a graph; the range methods; INT8 dynamic, INT4 and FP16 beside them.
 * Running models (value types, calibration, the guards, the fusion check) is the pipeline's:
 * app/quantize-passes.ts re-exports these with those steps. Re-exports only.
 */
export { CALIBRATION_METHODS, computeRange, entropyRange, mseRange, percentileRange, type CalibrationMethod, type Range } from './calibrate.js';
export { applyQdq, planQdq, quantizeQdq, requiredStatistics, type QdqOptions, type QdqPlan, type QdqReport } from './qdq.js';
export { QDQ_HANDLERS, QUANTIZABLE_OP_TYPES, refuseQuantized, type OpHandler } from './registry.js';
export {
  int8Context,
  int8Notes,
  preprocessForInt8,
  type CalibrationReport,
  type Int8Context,
  type Int8Options,
  type Int8Report,
  type QuantizeProgress,
} from './int8.js';
export { MODE, QUANTIZE_MODES, type QuantizeMode } from './mode-names.js';
export { activationParams, quantizeWeight, quantizeBias, fakeQuantize, type QuantParams } from './quant-math.js';
export { quantizeInt4, int4StatisticRequests, INT4_METHODS, type Int4Options, type Int4Report } from './int4.js';
export { SPEED_CAUSE_KINDS, type SpeedCause, type SpeedCauseKind } from './speed-causes.js';

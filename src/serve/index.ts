/**
 * Serving-side performance: the dynamic batcher (Triton semantics) in front of onnxruntime
 * sessions, the load generator, the SLO search, the batching sweep, and Triton config.pbtxt I/O.
 * Re-exports only; onnxruntime loads lazily on the first real executor.
 */
export {
  DynamicBatcher,
  RequestRejectedError,
  validateBatcherConfig,
  type BatcherConfig,
  type BatcherStats,
  type InferenceResult,
  type RejectReason,
  type RequestTiming,
} from './batcher.js';
export { RealClock, VirtualClock, realClock, type Clock, type TimerHandle } from './clock.js';
export {
  checkBatchable,
  createOrtExecutors,
  createSimulatedExecutor,
  linearCost,
  type BatchExecutor,
  type CostModel,
  type OrtExecutorOptions,
} from './executor.js';
export {
  describeLoad,
  measureLoad,
  type LatencySummary,
  type LoadMeasurement,
  type LoadSpec,
  type LoadTarget,
  type MeasurementOptions,
  type WindowStats,
} from './load-generator.js';
export {
  defaultLoadRamp,
  describeSetting,
  expandSearchSpace,
  meetsSlo,
  searchSlo,
  type BatchingSetting,
  type SloCandidate,
  type SloSearchOptions,
  type SloSearchResult,
  type SloSearchSpace,
  type TargetFactory,
} from './slo-search.js';
export {
  BATCHING_SCHEMA_VERSION,
  defaultSearchSpace,
  runBatchingSweep,
  type BatchingSweepOptions,
  type BatchingSweepResult,
  type SweepProgress,
  type SweepRow,
} from './sweep.js';
export { formatPbtxt, parsePbtxt, pb, pbLocation, type PbField, type PbMessage, type PbScalar, type PbValue } from './pbtxt.js';
export { validatePbtxt, type PbEnumSchema, type PbFieldSchema, type PbMessageSchema, type PbScalarType } from './pbtxt-schema.js';
export { MODEL_CONFIG, SCHEDULING_CHOICE, validateModelConfig, type SchedulingChoice } from './triton-schema.js';
export {
  batcherSettingsFromTriton,
  dataTypeFromTriton,
  formatTritonConfig,
  parseTritonConfig,
  tritonConfigToPb,
  tritonDataType,
  tritonInstanceCount,
  tritonScheduling,
  type TritonDynamicBatching,
  type TritonInstanceGroup,
  type TritonModelConfig,
  type TritonQueuePolicy,
  type TritonTensor,
} from './triton-config.js';
export {
  buildTritonConfig,
  tritonModelFileName,
  tritonModelName,
  writeTritonRepository,
  type TritonExportOptions,
  type TritonExportResult,
} from './triton-export.js';

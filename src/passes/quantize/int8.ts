/**
 * INT8 static quantization, the pure parts: the options, report and context types, pre-processing
 * for INT8 (refuse a quantized model, constants, BatchNorm folding, opset upgrade, per-tensor when
 * the opset stays old), the context calibration fills, and the report's notes from what the model
 * holds. Running the model (value types, statistics, `--calibrate auto`) is the pipeline's:
 * app/quantize-int8.ts calibrates through src/calibration and calls these. Never mutates its input.
 * Imports: preprocess, the IR, data/runtime/calibration types, files beside it.
 */
import { MODE } from './mode-names.js';
import { UsageError } from '../../errors.js';
import { isTensorType, type Model } from '../../ir/index.js';
import type { Dataset } from '../../data/index.js';
import type { AgreementMetrics } from '../../metrics/index.js';
import type { TensorStatistics } from '../../calibration/index.js';
import type { RunnerOptions } from '../../runtime/index.js';
import { preprocess, TARGET_OPSET, type PreprocessReport } from '../preprocess/index.js';
import type { CalibrationMethod, Range, RangeOptions } from './calibrate.js';
import { localizeOuterActivations, type QdqOptions, type QdqPlan, type QdqReport } from './qdq.js';
import type { SubgraphCoverage } from './subgraph-coverage.js';
import { refuseQuantized } from './registry.js';
import type { AutoCalibrationReport } from './auto-calibration.js';
import { highDynamicRangeCandidates, minmaxOnlyTensors } from './tensor-rules.js';
import { DataType } from '../../ir/dtype.js';
import type { SpeedCause } from './speed-causes.js';
import type { CrossLayerEqualizationReport } from './cross-layer-equalization.js';

/**
 * Bias correction is on unless turned off: on the stand-ins it raised the SQNR of every model it
 * touched (+0.3 to +3.4 dB) and let the guard keep one node fewer float on the mel front end
 * (docs/quantize.md, "PTQ repair").
 */
export const DEFAULT_BIAS_CORRECTION = true;

export interface QuantizeProgress {
  phase: 'preprocess' | 'calibrate' | 'quantize' | 'verify' | 'analyze' | 'guard';
  message: string;
  fraction?: number;
}

export interface Int8Options extends QdqOptions {
  /** Calibration samples (model inputs, sample dim first). */
  calibration: Dataset;
  /** Use the first N calibration samples; default DEFAULT_CALIBRATION_COUNT (100). */
  calibrationCount?: number;
  /** Batch size for calibration runs; default 16 (or the model's fixed batch). */
  batchSize?: number;
  /** Range method; default 'minmax'. 'auto' picks per tensor by the output (./auto-ranges.ts). */
  method?: CalibrationMethod;
  /**
   * High-dynamic-range tensors (power spectra, Exp outputs, Log inputs, attention scores) that
   * 8-bit would destroy: 'float' (default) keeps them and the nodes around them in FP32, with the
   * reason in the report; 'int8' quantizes them like any other tensor.
   */
  highDynamicRange?: 'float' | 'int8';
  /** For 'percentile'; default 99.99. */
  percentile?: number;
  /** Histogram bins per tensor; default 4096. */
  bins?: number;
  /**
   * Bias correction (./bias-correction.ts): calibration also measures the mean of every input
   * channel of the quantized Conv/Gemm nodes, and their biases absorb the mean output shift of
   * their int8 weights. Default DEFAULT_BIAS_CORRECTION (on).
   */
  biasCorrection?: boolean;
  /**
   * Cross-layer equalization (./cross-layer-equalization.ts) of Conv -> (Relu|LeakyRelu|PRelu|none)
   * -> Conv pairs before calibration: exact in float, balances per-channel weight ranges. Default false.
   */
  crossLayerEqualization?: boolean;
  runner?: RunnerOptions;
  onProgress?: (event: QuantizeProgress) => void;
  onWarning?: (message: string) => void;
}

export interface CalibrationReport {
  method: CalibrationMethod;
  percentile?: number;
  samples: number;
  /** Samples per onnxruntime run of the first pass (from the memory budget unless --batch-size). */
  batchSize: number;
  /** Histograms were binned on a worker thread beside onnxruntime (calibration/binning.ts). */
  binningThread: boolean;
  tensors: number;
  seconds: number;
  /** Tensors that took the minmax range whatever the method (bounded outputs, Softmax inputs), when the method is not minmax. */
  minmaxTensors?: number;
  /** What --calibrate auto chose. */
  auto?: AutoCalibrationReport;
}

export interface Int8Report {
  mode: typeof MODE.int8;
  preprocess: PreprocessReport;
  /** Why weights are per-tensor although per-channel was asked for, if they are. */
  perTensorFallback?: string;
  calibration: CalibrationReport;
  qdq: QdqReport;
  /** Cross-layer equalization (Int8Options.crossLayerEqualization): the Conv pairs equalized. */
  crossLayerEqualization?: CrossLayerEqualizationReport;
  /** Agreement with FP32 on the calibration inputs, per output. */
  agreement?: Record<string, AgreementMetrics>;
  /** Facts about what the pass did (e.g. a bias-scale adjustment). */
  notes: string[];
  /** Traits that can cost speed (a transformer-style graph, HardSwish, ...): printed only beside a measured speed. */
  speedCauses: SpeedCause[];
  /** High-dynamic-range tensors left in FP32 (with their nodes), and why. */
  highDynamicRange: { tensor: string; reason: string }[];
  /**
   * If/Loop/Scan bodies with tensors to calibrate: whether the calibration data ran each, and how
   * many of its nodes were quantized (a body never run stays float). Absent without sub-graphs.
   */
  subgraphs?: SubgraphCoverage[];
  /** Seconds spent in each part of the pass (they add up to its whole time). */
  timings: Int8Timings;
}

export interface Int8Timings {
  /** preprocess(): constant folding, BatchNorm folding, opset upgrade. */
  preprocess: number;
  /** Value types by running the model on two samples, the rank-dependent rewrites, the batch choice. */
  shapes: number;
  /** Every calibration pass (the plan's tensors, high-dynamic-range rounds, --calibrate auto). */
  calibration: number;
  /** QDQ insertion and the report. */
  qdq: number;
}

/** What the accuracy guard and --analyze reuse without calibrating again. */
export interface Int8Context {
  /** The pre-processed FP32 model the QDQ model was made from. */
  preprocessed: Model;
  statistics: Map<string, TensorStatistics>;
  ranges: Map<string, Range>;
  qdqOptions: QdqOptions;
  calibration: Dataset;
  batchSize: number;
  /** How ranges are computed from statistics (for tensors calibrated later). */
  rangeOptions: RangeOptions;
  histograms: boolean;
  /** Tensors that get a histogram even when `histograms` is false (high-dynamic-range candidates). */
  histogramTensors?: Set<string>;
  /**
   * Min/max of tensors no plan needed yet, captured with the first pass (app/quantize-int8.ts's
   * spareTensors): a later plan that needs one as a plain range takes it from here, not from a new pass.
   */
  spare?: Map<string, TensorStatistics>;
  /** Tensors that take the minmax range whatever the method (tensor-rules.ts). */
  minmaxTensors?: ReadonlySet<string>;
  bins?: number;
  runner: RunnerOptions;
  /** True when `batchSize` was asked for (--batch-size): calibration then runs at exactly that batch. */
  batchSizeGiven?: boolean;
  /** Bias correction: the mean of each channel of the quantized Conv/Gemm inputs, by tensor (present only when it is on). */
  channelMeans?: Map<string, Float64Array>;
  /** `preprocessed` was equalized (cross-layer equalization). */
  crossLayerEqualization?: boolean;
  /** Body tensors calibration could not capture (a Loop value changing shape per iteration), with the reason. */
  uncaptured?: Map<string, string>;
}

/** Refuse a quantized model, pre-process (constants, BatchNorm folding, opset upgrade), and the QDQ options (per-tensor when the opset stays old). */
export function preprocessForInt8(model: Model, options: Int8Options, progress: (e: QuantizeProgress) => void, warn: (message: string) => void) {
  refuseQuantized(model);
  progress({ phase: 'preprocess', message: 'pre-processing (constants, BatchNorm folding, opset)' });
  const pre = preprocess(model, { upgradeOpset: true });
  // A body's quantized tensors are its own: outer activations read by quantizable body nodes get a local copy.
  localizeOuterActivations(pre.model);
  let perTensorFallback: string | undefined;
  const opset = pre.model.opsetVersion('') ?? 0;
  if (pre.report.opset && !pre.report.opset.upgraded) {
    const why = pre.report.opset.blockers.join('; ');
    if (opset < 10) throw new UsageError(`cannot quantize: the model is opset ${opset} and cannot be upgraded (${why})`);
    perTensorFallback = `opset ${opset} could not be upgraded to ${TARGET_OPSET} (${why}); per-tensor weights`;
    warn(perTensorFallback);
  }
  const qdqOptions: QdqOptions = {
    perChannel: options.perChannel,
    activationType: options.activationType,
    activationSymmetric: options.activationSymmetric,
    opTypes: options.opTypes,
    excludeOpTypes: options.excludeOpTypes,
    excludeNodes: options.excludeNodes,
    minConvReduction: options.minConvReduction,
    padChannels: options.padChannels,
    layoutAnchors: options.layoutAnchors,
    onlyNodes: options.onlyNodes,
  };
  for (const name of options.excludeNodes ?? []) {
    if (!pre.model.graph.allNodes().some((n) => n.name === name)) warn(`--exclude-nodes: no node named '${name}' in the model`);
  }
  return { pre, perTensorFallback, qdqOptions };
}

/** The context calibration fills and re-quantizing reuses. */
export function int8Context(
  preprocessed: Model,
  plan: QdqPlan,
  qdqOptions: QdqOptions,
  calibration: Dataset,
  batchSize: number,
  options: Int8Options,
): Int8Context {
  const method = options.method ?? 'minmax';
  const symmetric = qdqOptions.activationSymmetric ?? qdqOptions.activationType === 'int8';
  return {
    preprocessed,
    statistics: new Map(),
    ranges: new Map(),
    qdqOptions,
    calibration,
    batchSize,
    rangeOptions: { method, percentile: options.percentile, type: qdqOptions.activationType === 'int8' ? DataType.INT8 : DataType.UINT8, symmetric },
    histograms: method !== 'minmax',
    histogramTensors: new Set(options.highDynamicRange === 'int8' ? [] : highDynamicRangeCandidates(plan)),
    minmaxTensors: method === 'minmax' ? undefined : new Set(minmaxOnlyTensors(preprocessed).keys()),
    bins: options.bins,
    runner: { ...options.runner },
    batchSizeGiven: options.batchSize !== undefined,
    channelMeans: (options.biasCorrection ?? DEFAULT_BIAS_CORRECTION) ? new Map() : undefined,
    crossLayerEqualization: options.crossLayerEqualization ?? false,
  };
}

/**
 * What the model holds, for the report: plain notes (facts about what the pass did) and speed
 * causes (traits that can cost speed, printed only beside a speed this run measured: ./speed-causes.ts).
 */
export function int8Notes(model: Model, qdq: QdqReport, qdqOptions: QdqOptions): { notes: string[]; speedCauses: SpeedCause[] } {
  const notes: string[] = [];
  const speedCauses: SpeedCause[] = [];
  const adjusted = qdq.biasScaleAdjustments ?? [];
  if (adjusted.length > 0) {
    const channels = adjusted.reduce((a, b) => a + b.channels, 0);
    const factor = Math.max(...adjusted.map((a) => a.maxFactor));
    const first = adjusted
      .slice(0, 3)
      .map((a) => a.node)
      .join(', ');
    notes.push(
      `${channels} output channel(s) of ${adjusted.length} node(s) (${first}${adjusted.length > 3 ? ', ...' : ''}): the bias did not fit int32 at input scale x weight scale, so the weight scale was enlarged (up to ${factor.toPrecision(3)}x) until it fits, instead of clamping the bias`,
    );
  }
  if (qdqOptions.activationType === 'int8') {
    speedCauses.push({
      cause: 'int8-activations',
      text: 'int8 (symmetric) activations: onnxruntime on x86 has no fast kernel for int8 x int8 convolutions and takes a slow path; uint8 activations (the default) use the fast one. Keep int8 for runtimes that require it (e.g. TensorRT).',
    });
  }
  const hardActivations = model.graph.allNodes().filter((n) => n.opType === 'HardSwish' || n.opType === 'HardSigmoid').length;
  if (hardActivations > 0) {
    speedCauses.push({
      cause: 'hard-activations',
      text: `${hardActivations} HardSwish/HardSigmoid node(s): onnxruntime folds them into float convolutions for free but has no int8 form, so after each int8 conv they run in float between a DequantizeLinear and a QuantizeLinear.`,
    });
  }
  const gated = sigmoidGatedDepthwise(model);
  if (gated) {
    speedCauses.push({
      cause: 'gated-depthwise',
      text: `${gated.gates} Sigmoid-gated Mul(s) (SiLU/Swish, squeeze-excitation) around ${gated.depthwise} depthwise conv(s): in FP32 onnxruntime fuses SiLU into one float pass, in INT8 each gate costs a QLinearSigmoid and a QLinearMul pass, against the little work of a depthwise conv.`,
    });
  }
  const transformer = transformerSigns(model);
  if (transformer) {
    speedCauses.push({
      cause: 'transformer',
      text: `Transformer-style graph (${transformer}): with static INT8, onnxruntime on CPU keeps the normalizations, activations and residual Adds in float between the integer kernels; --mode int8-dynamic quantizes only the MatMuls (onnxruntime's advice for transformers): compare both with --measure-speed or model-opt benchmark.`,
    });
  }
  return { notes, speedCauses };
}

/** Mul nodes gated by a Sigmoid, when the model also has depthwise convs (EfficientNet/MobileNet-style), or undefined. */
function sigmoidGatedDepthwise(model: Model): { gates: number; depthwise: number } | undefined {
  const nodes = model.graph.allNodes();
  const gates = nodes.filter((n) => n.opType === 'Mul' && n.inputs.some((v) => v?.producer?.opType === 'Sigmoid')).length;
  const depthwise = nodes.filter((n) => {
    if (n.opType !== 'Conv' || n.getInt('group', 1) <= 1 || !n.inputs[1]) return false;
    const w = n.graph.constantTensor(n.inputs[1]);
    return w !== undefined && w.dims[1] === 1;
  }).length;
  return gates > 0 && depthwise > 0 ? { gates, depthwise } : undefined;
}

/** What marks `model` as transformer-like (LayerNormalization, MatMuls on 3-D activations), or undefined. */
function transformerSigns(model: Model): string | undefined {
  const nodes = model.graph.allNodes();
  const signs: string[] = [];
  if (nodes.some((n) => n.opType === 'LayerNormalization')) signs.push('LayerNormalization');
  const matmul3d = nodes.filter((n) => {
    if (n.opType !== 'MatMul' || !n.inputs[1] || !n.graph.constantTensor(n.inputs[1])) return false;
    const t = n.inputs[0]?.type;
    return t !== undefined && isTensorType(t) && (t.shape?.length ?? 0) >= 3;
  }).length;
  if (matmul3d > 0) signs.push(`${matmul3d} MatMul(s) with weights on 3-D activations`);
  return signs.length > 0 ? signs.join(', ') : undefined;
}

/**
 * INT8 static quantization end to end, as a pass: pre-process (opset upgrade when below 13,
 * per-tensor fallback when that is impossible), fill in value types by running the model, declare
 * the tensors to calibrate and ask the calibration service for their statistics in one streaming
 * pass, quantize to QDQ. Re-quantizing with other options (the guard, --analyze) reuses the
 * statistics and calibrates only what is new. Never mutates its input model. Measuring the result
 * (agreement, top-1) is src/evaluate's job.
 * Imports: preprocess, calibration, runtime (shape inference), data (batching), IR, files beside it.
 */
import { MODE } from './mode-names.js';
import { UsageError } from '../../errors.js';
import { isTensorType, type Model } from '../../ir/index.js';
import { batches, fixedBatchSize, take, type Dataset } from '../../data/index.js';
import type { AgreementMetrics } from '../../metrics/index.js';
import {
  budgetedBatchSize,
  calibrationBatchSize,
  collectStatistics,
  prestartBinningThread,
  DEFAULT_CALIBRATION_COUNT,
  type CalibrationBatching,
  type CalibrationProgress,
  type StatisticRequest,
  type TensorStatistics,
} from '../../calibration/index.js';
import { inferShapesByRunning, modelInputSpecs, type RunnerOptions } from '../../runtime/index.js';
import { preprocess, shapeRewrites, TARGET_OPSET, type PreprocessReport } from '../preprocess/index.js';
import { computeRange, type CalibrationMethod, type Range, type RangeOptions } from './calibrate.js';
import { concatsWithMismatchedRanges, planQdq, quantizeQdq, type QdqOptions, type QdqPlan, type QdqReport } from './qdq.js';
import { refuseQuantized } from './registry.js';
import { autoRanges, type AutoCalibrationReport } from './auto-ranges.js';
import { highDynamicRangeCandidates, highDynamicRangeNodes, minmaxOnlyTensors } from './tensor-rules.js';
import { DataType } from '../../ir/dtype.js';

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
  /** Agreement with FP32 on the calibration inputs, per output. */
  agreement?: Record<string, AgreementMetrics>;
  /** Advice for the user (e.g. a transformer-style graph, where dynamic INT8 usually wins). */
  notes: string[];
  /** High-dynamic-range tensors left in FP32 (with their nodes), and why. */
  highDynamicRange: { tensor: string; reason: string }[];
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
  /** Tensors that take the minmax range whatever the method (tensor-rules.ts). */
  minmaxTensors?: ReadonlySet<string>;
  bins?: number;
  runner: RunnerOptions;
  /** True when `batchSize` was asked for (--batch-size): calibration then runs at exactly that batch. */
  batchSizeGiven?: boolean;
}

/** Samples of the run that fills in value types (inferShapesByRunning captures every untyped value whole). */
const SHAPE_PROBE_SAMPLES = 2;

/** A stopwatch of the pass's parts: each call returns the seconds since the last one. */
function stopwatch(): () => number {
  let mark = performance.now();
  return () => {
    const now = performance.now();
    const seconds = (now - mark) / 1000;
    mark = now;
    return seconds;
  };
}

/** Quantize `model` to INT8 QDQ. Returns the new model, its report and the reusable context. */
export async function quantizeInt8(model: Model, options: Int8Options): Promise<{ model: Model; report: Int8Report; context: Int8Context }> {
  const progress = options.onProgress ?? (() => undefined);
  const warn = options.onWarning ?? (() => undefined);
  const lap = stopwatch();
  const { pre, perTensorFallback, qdqOptions } = preprocessForInt8(model, options, progress, warn);
  const calibration = take(options.calibration, options.calibrationCount ?? DEFAULT_CALIBRATION_COUNT);
  if (calibration.count === 0) throw new UsageError(`${calibration.source ? `${calibration.source}: ` : ''}the calibration data set has no samples`);
  // Histograms are binned on a worker thread beside onnxruntime: start it while the model is probed.
  if ((options.method ?? 'minmax') !== 'minmax') prestartBinningThread();
  const preprocessSeconds = lap();
  const batchSize = await probeValueTypes(pre, calibration, options, progress);
  // Calibrate exactly what this plan declares; other variants (guard, analysis) add theirs lazily.
  const plan = planQdq(pre.model, qdqOptions);
  const shapesSeconds = lap();
  const context = int8Context(pre.model, plan, qdqOptions, calibration, batchSize, options);
  const calibrated = await calibrateInt8(context, plan, options, progress);
  const calibrationSeconds = lap();
  progress({ phase: 'quantize', message: 'inserting QuantizeLinear/DequantizeLinear' });
  const { model: quantized, report: qdq } = quantizeQdq(pre.model, { ...qdqOptions, ranges: context.ranges });
  if (qdq.biasSaturated > 0) warn(`${qdq.biasSaturated} bias value(s) did not fit int32 and were clamped`);
  const method = context.rangeOptions.method;
  const report: Int8Report = {
    mode: MODE.int8,
    preprocess: pre.report,
    perTensorFallback,
    calibration: {
      method,
      percentile: method === 'percentile' || method === 'auto' ? (options.percentile ?? 99.99) : undefined,
      samples: calibration.count,
      // The first pass's batch (with histograms over large activations it may be lower than the evaluation batch).
      batchSize: calibrated.batching?.batchSize ?? batchSize,
      binningThread: calibrated.batching?.binningThread ?? false,
      tensors: plan.statistics.length,
      seconds: calibrated.seconds,
      minmaxTensors: context.minmaxTensors ? [...context.statistics.keys()].filter((n) => context.minmaxTensors!.has(n)).length : undefined,
      auto: calibrated.auto,
    },
    qdq,
    notes: int8Notes(pre.model, qdq, qdqOptions),
    highDynamicRange: calibrated.highDynamicRange,
    timings: { preprocess: preprocessSeconds, shapes: shapesSeconds, calibration: calibrationSeconds, qdq: 0 },
  };
  report.timings.qdq = lap();
  // Nothing quantized is the caller's decision (the quantize workflow refuses it unless an op list
  // was given): ./nothing-quantized.ts says why from this report.
  return { model: quantized, report, context };
}

/** Refuse a quantized model, pre-process (constants, BatchNorm folding, opset upgrade), and the QDQ options (per-tensor when the opset stays old). */
function preprocessForInt8(model: Model, options: Int8Options, progress: (e: QuantizeProgress) => void, warn: (message: string) => void) {
  refuseQuantized(model);
  progress({ phase: 'preprocess', message: 'pre-processing (constants, BatchNorm folding, opset)' });
  const pre = preprocess(model, { upgradeOpset: true });
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

/**
 * Value types decide what is float; fill in the ones the file does not declare. Every untyped
 * value is captured whole in that run, so it takes two samples (enough to tell the batch dim
 * apart), not a calibration batch: its memory is two samples' activations. A model that fixes its
 * batch dim is fed exactly that batch (the observed shapes are its types). Returns the calibration batch.
 */
async function probeValueTypes(
  pre: ReturnType<typeof preprocess>,
  calibration: Dataset,
  options: Int8Options,
  progress: (e: QuantizeProgress) => void,
): Promise<number> {
  const batchSize = calibrationBatchSize(pre.model, calibration, options.batchSize);
  const probe = fixedBatchSize(modelInputSpecs(pre.model)) !== undefined ? batchSize : Math.min(SHAPE_PROBE_SAMPLES, calibration.count);
  progress({ phase: 'preprocess', message: `inferring value types by running the model on ${probe} sample(s)` });
  const firstBatch = batches(calibration, probe).next().value!.feeds;
  await inferShapesByRunning(pre.model, firstBatch, { ...options.runner });
  // Ranks the file did not declare are known now: a 2-D MatMul + bias becomes a Gemm (QGemm; left
  // alone, onnxruntime fuses it into a float Gemm on dequantized weights), a spatial ReduceMean a
  // GlobalAveragePool, a BatchNormalization with nothing to fold into a depthwise Conv (integer
  // kernels).
  shapeRewrites(pre.model, pre.report, { int8: true });
  // Without --batch-size, the batch is the largest whose four biggest activations fit the capture
  // budget (src/calibration's budgetedBatchSize): known now that the value types are.
  return options.batchSize === undefined ? budgetedBatchSize(pre.model, calibration) : batchSize;
}

/** The context calibration fills and re-quantizing reuses. */
function int8Context(preprocessed: Model, plan: QdqPlan, qdqOptions: QdqOptions, calibration: Dataset, batchSize: number, options: Int8Options): Int8Context {
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
  };
}

/**
 * Calibrate the plan's tensors in one streaming pass, then what the plan's revisions need: tensors
 * 8-bit would destroy (power spectra, Log inputs, wide attention scores) stay float, and keeping
 * nodes float makes new float -> int8 boundaries, which are checked in turn; a Concat of tensors with
 * very different ranges (boxes and class scores) stays float; `--calibrate auto` picks per tensor.
 * Sets the float nodes in `context.qdqOptions`.
 */
async function calibrateInt8(context: Int8Context, plan: QdqPlan, options: Int8Options, progress: (e: QuantizeProgress) => void) {
  const { calibration } = context;
  const qdqOptions = context.qdqOptions;
  const wanted = plan.statistics;
  progress({ phase: 'calibrate', message: `calibrating ${wanted.length} tensors on ${calibration.count} samples`, fraction: 0 });
  const started = performance.now();
  const batching = await calibrateMore(context, wanted, (p) => {
    // Histograms over large activations take a ranges pass, then one pass per capture group.
    const pass = p.pass === 1 && p.passes === 1 ? '' : p.stage === 'ranges' ? ' (pass 1: ranges)' : ` (pass ${p.pass} of ${p.passes}: histograms)`;
    const fraction = p.passes ? (p.pass - 1 + p.samples / calibration.count) / p.passes : undefined;
    progress({ phase: 'calibrate', message: `calibrating: ${p.samples}/${calibration.count} samples${pass}`, fraction });
  });
  const mismatched = concatsWithMismatchedRanges(plan, context.ranges);
  const hdr = { nodes: Object.create(null) as Record<string, string>, tensors: [] as { tensor: string; reason: string }[] };
  for (let round = 0, current = plan; round < 4 && options.highDynamicRange !== 'int8'; round++) {
    const found = highDynamicRangeNodes(current, context.statistics);
    const fresh = Object.keys(found.nodes).filter((n) => !(n in hdr.nodes));
    if (fresh.length === 0) break;
    Object.assign(hdr.nodes, found.nodes);
    for (const t of found.tensors) if (!hdr.tensors.some((x) => x.tensor === t.tensor)) hdr.tensors.push(t);
    qdqOptions.floatNodes = { ...qdqOptions.floatNodes, ...hdr.nodes };
    current = planQdq(context.preprocessed, qdqOptions);
    for (const n of highDynamicRangeCandidates(current)) context.histogramTensors!.add(n);
    await calibrateMore(context, current.statistics);
  }
  if (Object.keys(mismatched).length > 0) {
    qdqOptions.floatNodes = { ...qdqOptions.floatNodes, ...mismatched };
    await calibrateMore(context, planQdq(context.preprocessed, qdqOptions).statistics);
  }
  let auto: AutoCalibrationReport | undefined;
  if (context.rangeOptions.method === 'auto') {
    progress({ phase: 'calibrate', message: 'choosing a range method per tensor by the output (--calibrate auto)' });
    auto = await autoRanges(
      context.preprocessed,
      qdqOptions,
      context.statistics,
      context.ranges,
      context.rangeOptions,
      calibration,
      context.batchSize,
      context.runner,
      context.minmaxTensors ?? new Set(),
    );
  }
  return { batching, highDynamicRange: hdr.tensors, auto, seconds: (performance.now() - started) / 1000 };
}

/** Advice from what the model holds (the report's notes). */
function int8Notes(model: Model, qdq: QdqReport, qdqOptions: QdqOptions): string[] {
  const notes: string[] = [];
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
    notes.push(
      'int8 (symmetric) activations: onnxruntime on x86 has no fast kernel for int8 x int8 convolutions and falls back to a slow path (the example CNN ran at 0.3-0.6x FP32 this way, 1.5x with uint8); keep uint8 activations for x86 CPUs and use int8 for runtimes that require it (e.g. TensorRT).',
    );
  }
  const hardActivations = model.graph.allNodes().filter((n) => n.opType === 'HardSwish' || n.opType === 'HardSigmoid').length;
  if (hardActivations > 0) {
    notes.push(
      `${hardActivations} HardSwish/HardSigmoid node(s): onnxruntime folds them into float convolutions for free but has no int8 form, so after each int8 conv they run in float between a DequantizeLinear and a QuantizeLinear; expect little or no speed-up (a MobileNetV3-style model, bench/quantize-blocks.mjs mnv3, ran at 0.55-0.57x FP32). Measure with model-opt benchmark.`,
    );
  }
  const gated = sigmoidGatedDepthwise(model);
  if (gated) {
    notes.push(
      `${gated.gates} Sigmoid-gated Mul(s) (SiLU/Swish, squeeze-excitation) around ${gated.depthwise} depthwise conv(s): in FP32 onnxruntime fuses SiLU into one float pass, in INT8 each gate costs a QLinearSigmoid and a QLinearMul pass, which on depthwise-heavy models (EfficientNet-style: bench/quantize-blocks.mjs effnet, 0.89-1.01x) eats the int8 conv gains; models with regular convs still gain. Measure with model-opt benchmark.`,
    );
  }
  const transformer = transformerSigns(model);
  if (transformer) {
    notes.push(
      `Transformer-style graph (${transformer}): with static INT8, onnxruntime on CPU keeps the normalizations, activations and residual Adds in float between the integer kernels, which often makes the model slower than FP32; --mode int8-dynamic is usually the faster choice for transformers (onnxruntime's own advice). Compare both with model-opt benchmark.`,
    );
  }
  return notes;
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

/** One streaming calibration pass for the tensors of `names` not calibrated yet. */
async function calibrateMore(
  context: Int8Context,
  names: readonly string[],
  onProgress?: (progress: CalibrationProgress) => void,
): Promise<CalibrationBatching | undefined> {
  const missing = names.filter((n) => !context.ranges.has(n));
  if (missing.length === 0) return undefined;
  const { calibration, batchSize } = context;
  const requests: StatisticRequest[] = missing.map((tensor) =>
    context.histograms || context.histogramTensors?.has(tensor) ? { tensor, kind: 'histogram', bins: context.bins } : { tensor, kind: 'range' },
  );
  const { ranges: stats, batching } = await collectStatistics(context.preprocessed, requests, calibration, {
    // Without --batch-size the service picks the batch (the same budgeted one for ranges; a smaller
    // one when that keeps whole captures for histograms to one pass).
    batchSize: context.batchSizeGiven ? batchSize : undefined,
    runner: context.runner,
    onProgress,
  });
  for (const [name, s] of stats) {
    context.statistics.set(name, s);
    context.ranges.set(name, computeRange(s, context.minmaxTensors?.has(name) ? { ...context.rangeOptions, method: 'minmax' } : context.rangeOptions));
  }
  return batching;
}

/**
 * Re-quantize from a context with other options (exclusions): calibrates only the tensors the new
 * plan needs that no earlier plan did, then quantizes the pre-processed model again.
 */
export async function requantize(context: Int8Context, overrides: Partial<QdqOptions>): Promise<{ model: Model; report: QdqReport }> {
  const options = { ...context.qdqOptions, ...overrides };
  await calibrateMore(context, planQdq(context.preprocessed, options).statistics);
  return quantizeQdq(context.preprocessed, { ...options, ranges: context.ranges });
}

/**
 * INT8 static quantization end to end, the pipeline's part: pre-process (passes/quantize/int8.ts),
 * fill in value types by running the model, ask the calibration service for the statistics the QDQ
 * plan declares in one streaming pass (and for what its revisions need: high-dynamic-range tensors,
 * mismatched Concats, `--calibrate auto`), then the pure QDQ pass. Tensors inside If/Loop/Scan
 * bodies are calibrated from the runs that reached them (the service carries them out); a body the
 * data never ran, or whose values could not be captured, stays float (passes/quantize/
 * subgraph-coverage.ts, said in the report). Re-quantizing with other options
 * (the guards, --analyze, optimize's region steps) reuses the statistics and calibrates only what is
 * new. Never mutates its input model.
 * May import: errors, calibration, runtime, data, passes, app/*.
 */
import { UsageError } from '../errors.js';
import { isFloatDtype, isTensorType, type Model } from '../ir/index.js';
import { batches, fixedBatchSize, take, type Dataset } from '../data/index.js';
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
} from '../calibration/index.js';
import { inferShapesByRunning, modelInputSpecs } from '../runtime/index.js';
import { shapeRewrites, type preprocess } from '../passes/preprocess/index.js';
import { computeRange } from '../passes/quantize/calibrate.js';
import { concatsWithMismatchedRanges, planQdq, quantizeQdq, type QdqOptions, type QdqPlan, type QdqReport } from '../passes/quantize/qdq.js';
import { highDynamicRangeCandidates, highDynamicRangeNodes } from '../passes/quantize/tensor-rules.js';
import { biasCorrectionRequests } from '../passes/quantize/bias-correction.js';
import { equalizeCrossLayer } from '../passes/quantize/cross-layer-equalization.js';
import { MODE } from '../passes/quantize/mode-names.js';
import {
  int8Context,
  int8Notes,
  preprocessForInt8,
  type Int8Context,
  type Int8Options,
  type Int8Report,
  type QuantizeProgress,
} from '../passes/quantize/int8.js';
import { autoRanges } from './quantize-auto-ranges.js';
import { bodiesReached, subgraphCoverage, unreachedFloatNodes } from '../passes/quantize/subgraph-coverage.js';
import type { AutoCalibrationReport } from '../passes/quantize/auto-calibration.js';

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
  // Equalization changes the float weights (not the outputs): before anything is calibrated.
  const equalized = options.crossLayerEqualization ? equalizeCrossLayer(pre.model) : undefined;
  if (equalized) pre.model = equalized.model;
  // Calibrate exactly what this plan declares; other variants (guard, analysis) add theirs lazily.
  const plan = planQdq(pre.model, qdqOptions);
  const shapesSeconds = lap();
  const context = int8Context(pre.model, plan, qdqOptions, calibration, batchSize, options);
  const calibrated = await calibrateInt8(context, plan, options, progress);
  const calibrationSeconds = lap();
  progress({ phase: 'quantize', message: 'inserting QuantizeLinear/DequantizeLinear' });
  const { model: quantized, report: qdq } = quantizeQdq(pre.model, { ...qdqOptions, ranges: context.ranges, channelMeans: context.channelMeans });
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
    ...(equalized ? { crossLayerEqualization: equalized.report } : {}),
    ...int8Notes(pre.model, qdq, qdqOptions),
    highDynamicRange: calibrated.highDynamicRange,
    ...(calibrated.reached.size > 0 ? { subgraphs: subgraphCoverage(calibrated.reached, qdq) } : {}),
    timings: { preprocess: preprocessSeconds, shapes: shapesSeconds, calibration: calibrationSeconds, qdq: 0 },
  };
  report.timings.qdq = lap();
  // Nothing quantized is the caller's decision (the quantize workflow refuses it unless an op list
  // was given): ./nothing-quantized.ts says why from this report.
  return { model: quantized, report, context };
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
  // Spares serve later plans' plain ranges only: with histograms for every tensor they would serve nothing.
  const batching = await calibrateMore(context, plan, context.histograms ? [] : spareTensors(context, plan), (p) => {
    // Histograms over large activations take a ranges pass, then one pass per capture group.
    const pass = p.pass === 1 && p.passes === 1 ? '' : p.stage === 'ranges' ? ' (pass 1: ranges)' : ` (pass ${p.pass} of ${p.passes}: histograms)`;
    const fraction = p.passes ? (p.pass - 1 + p.samples / calibration.count) / p.passes : undefined;
    progress({ phase: 'calibrate', message: `calibrating: ${p.samples}/${calibration.count} samples${pass}`, fraction });
  });
  // Bodies the calibration data never ran have no ranges: their nodes stay float (said in the report).
  const reached = bodiesReached(context.preprocessed, plan, context.statistics, context.uncaptured);
  const unreached = unreachedFloatNodes(reached);
  if (Object.keys(unreached).length > 0) qdqOptions.floatNodes = { ...qdqOptions.floatNodes, ...unreached };
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
    await calibrateMore(context, current);
  }
  if (Object.keys(mismatched).length > 0) {
    qdqOptions.floatNodes = { ...qdqOptions.floatNodes, ...mismatched };
    await calibrateMore(context, planQdq(context.preprocessed, qdqOptions));
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
  return { batching, highDynamicRange: hdr.tensors, auto, reached, seconds: (performance.now() - started) / 1000 };
}

/**
 * Tensors the first pass also captures, though `plan` needs none of them: the float outputs of its
 * data-movement nodes in the main graph (Transpose, MaxPool, Reshape: a passthrough output shares
 * its input's range, so it is not calibrated). Kept float by the guard or the region search, such a
 * node's quantized consumers need its output's own range, and without it every such re-quantization
 * was a full pass over the data again (two of the guard's five trials on the recognizer stand-in).
 * Only those: every plan node's output (conv outputs before their Relu too) cost calibration 12%.
 */
function spareTensors(context: Int8Context, plan: QdqPlan): string[] {
  const graph = context.preprocessed.graph;
  const main = new Set(graph.nodes);
  const out: string[] = [];
  for (const { node, handler } of plan.nodes) {
    if (!main.has(node) || handler.output !== 'passthrough') continue;
    for (const v of node.outputs) {
      const type = graph.localValue(v.name)?.type;
      if (type && isTensorType(type) && isFloatDtype(type.elemType)) out.push(v.name);
    }
  }
  return out;
}

/**
 * One streaming calibration pass for what `plan` needs that is not collected yet: the ranges of its
 * tensors and, with bias correction, the channel means of its Conv/Gemm inputs.
 */
async function calibrateMore(
  context: Int8Context,
  plan: QdqPlan,
  spare: readonly string[] = [],
  onProgress?: (progress: CalibrationProgress) => void,
): Promise<CalibrationBatching | undefined> {
  const histogram = (tensor: string): boolean => context.histograms || context.histogramTensors?.has(tensor) === true;
  const missing: string[] = [];
  for (const name of plan.statistics) {
    if (context.ranges.has(name)) continue;
    const kept = histogram(name) ? undefined : context.spare?.get(name);
    if (kept) addStatistics(context, name, kept);
    else missing.push(name);
  }
  // Spare tensors are captured as plain ranges beside what the plan needs (never instead of it).
  const spares = spare.filter((n) => !context.ranges.has(n) && !missing.includes(n) && !context.spare?.has(n));
  const means = context.channelMeans;
  const moments = means ? biasCorrectionRequests(plan.nodes.map((n) => n.node)).filter((r) => !means.has(r.tensor)) : [];
  if (missing.length === 0 && moments.length === 0) return undefined;
  const { calibration, batchSize } = context;
  const requests: StatisticRequest[] = missing.map((tensor) =>
    histogram(tensor) ? { tensor, kind: 'histogram', bins: context.bins } : { tensor, kind: 'range' },
  );
  requests.push(...spares.map((tensor): StatisticRequest => ({ tensor, kind: 'range' })));
  requests.push(...moments);
  const {
    ranges: stats,
    channels,
    batching,
    uncaptured,
  } = await collectStatistics(context.preprocessed, requests, calibration, {
    // Without --batch-size the service picks the batch (the same budgeted one for ranges; a smaller
    // one when that keeps whole captures for histograms to one pass).
    batchSize: context.batchSizeGiven ? batchSize : undefined,
    runner: context.runner,
    onProgress,
  });
  const spareSet = new Set(spares);
  for (const [name, s] of stats) {
    if (spareSet.has(name)) (context.spare ??= new Map()).set(name, s);
    else addStatistics(context, name, s);
  }
  for (const [name, m] of channels) means?.set(name, m.mean);
  for (const u of uncaptured ?? []) (context.uncaptured ??= new Map()).set(u.tensor, u.reason);
  return batching;
}

/** A tensor's statistics and its range, as the context's range options compute it. */
function addStatistics(context: Int8Context, name: string, s: TensorStatistics): void {
  context.statistics.set(name, s);
  context.ranges.set(name, computeRange(s, context.minmaxTensors?.has(name) ? { ...context.rangeOptions, method: 'minmax' } : context.rangeOptions));
}

/**
 * Re-quantize from a context with other options (exclusions): calibrates only the tensors the new
 * plan needs that no earlier plan did, then quantizes the pre-processed model again.
 */
export async function requantize(context: Int8Context, overrides: Partial<QdqOptions>): Promise<{ model: Model; report: QdqReport }> {
  const options = { ...context.qdqOptions, ...overrides };
  await calibrateMore(context, planQdq(context.preprocessed, options));
  return quantizeQdq(context.preprocessed, { ...options, ranges: context.ranges, channelMeans: context.channelMeans });
}

export type { Int8Context, Int8Options, Int8Report, QuantizeProgress };

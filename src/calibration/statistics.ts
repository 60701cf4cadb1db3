/**
 * The calibration service: a pass declares which statistics it needs, by tensor name and kind, and
 * one streamed pass over the calibration data (onnxruntime with those tensors captured as extra
 * outputs, batch by batch) collects them all. Kinds:
 * - 'range': the exact running min/max of the finite values;
 * - 'histogram': the same min/max plus a StreamingHistogram (percentile / entropy / mse ranges);
 * - 'channel-moments': mean and variance of every index along one axis (counted from the end),
 *   reduced over all other axes and the samples (prune's bias compensation and activation ranking).
 * Nothing per sample is kept: memory depends on the number of tensors, their per-channel sizes and
 * the batch size, never on the sample count. Quantization (passes/quantize) and pruning
 * (passes/prune) both ask this service; what they compute from the statistics stays with them.
 * The float operations (order of min/max, histogram and moment accumulation) are those the passes
 * used before this service existed, so ranges and moments are bit-identical for the same batches.
 * Imports: runtime (capture runner, model specs), data (Dataset, batching), ir, errors.
 */
import { UsageError } from '../errors.js';
import { DataType, elementCount, type TensorData } from '../ir/dtype.js';
import { batchAxes } from '../ir/io-spec.js';
import type { Model } from '../ir/index.js';
import { batches as datasetBatches, fixedBatchSize, type Dataset } from '../data/index.js';
import { createCaptureRunner, modelInputSpecs, type RunnerOptions } from '../runtime/index.js';
import { DEFAULT_BINS, StreamingHistogram } from './histogram.js';

/** One statistic a pass needs: of which tensor, and what. */
export type StatisticRequest =
  | { tensor: string; kind: 'range' }
  | { tensor: string; kind: 'histogram'; bins?: number }
  | { tensor: string; kind: 'channel-moments'; axis: number };

/** Range (and, when asked for, histogram) statistics of one tensor. */
export interface TensorStatistics {
  name: string;
  /** Smallest / largest finite value seen (Infinity / -Infinity when none). */
  min: number;
  max: number;
  /** Elements seen (non-finite ones included). */
  count: number;
  histogram?: StreamingHistogram;
}

/** Per-index moments along the requested axis of one tensor. */
export interface ChannelMoments {
  mean: Float64Array;
  variance: Float64Array;
}

export interface CollectedStatistics {
  /** 'range' and 'histogram' requests, by tensor name. */
  ranges: Map<string, TensorStatistics>;
  /** 'channel-moments' requests, by tensor name. */
  channels: Map<string, ChannelMoments>;
}

export interface CalibrationProgress {
  batches: number;
  samples: number;
  totalSamples?: number;
}

export interface CollectOptions {
  /**
   * Samples per onnxruntime run when `data` is a Dataset; default the model's fixed batch dim, else
   * DEFAULT_CALIBRATION_BATCH (at most the sample count). Batch sizes change how a histogram grows,
   * so a caller that must reproduce earlier ranges passes the batch size it used.
   */
  batchSize?: number;
  runner?: RunnerOptions;
  /** Total samples, for progress fractions only (a Dataset gives its own). */
  totalSamples?: number;
  onProgress?: (p: CalibrationProgress) => void;
}

/** Default samples per calibration run for a model without a fixed batch dim. */
export const DEFAULT_CALIBRATION_BATCH = 16;

type Feeds = Record<string, TensorData>;

/** The batch a calibration pass over `dataset` uses for `model` unless told otherwise. */
export function calibrationBatchSize(model: Model, dataset: Dataset, requested?: number): number {
  const fixed = fixedBatchSize(modelInputSpecs(model));
  if (fixed !== undefined) return fixed;
  return Math.max(1, Math.min(requested ?? DEFAULT_CALIBRATION_BATCH, dataset.count));
}

function isDataset(data: unknown): data is Dataset {
  return typeof data === 'object' && data !== null && 'inputs' in data && 'count' in data && 'source' in data;
}

interface RangeState {
  kind: 'range' | 'histogram';
  stats: TensorStatistics;
}

interface MomentState {
  axis: number;
  sums?: { s: Float64Array; s2: Float64Array; n: number };
}

/** Merges the requests per tensor; a tensor asked for with two different axes or bin counts is a UsageError. */
function plan(requests: readonly StatisticRequest[]): { ranges: Map<string, RangeState>; moments: Map<string, MomentState> } {
  const ranges = new Map<string, RangeState>();
  const moments = new Map<string, MomentState>();
  for (const r of requests) {
    if (r.kind === 'channel-moments') {
      const seen = moments.get(r.tensor);
      if (seen && seen.axis !== r.axis) {
        throw new UsageError(`calibration: tensor '${r.tensor}' asked for channel moments along axes ${seen.axis} and ${r.axis}`);
      }
      moments.set(r.tensor, { axis: r.axis });
      continue;
    }
    const seen = ranges.get(r.tensor);
    const bins = r.kind === 'histogram' ? (r.bins ?? DEFAULT_BINS) : undefined;
    if (seen?.stats.histogram && bins !== undefined && seen.stats.histogram.bins !== bins) {
      throw new UsageError(`calibration: tensor '${r.tensor}' asked for histograms of ${seen.stats.histogram.bins} and ${bins} bins`);
    }
    // A histogram request subsumes a range request of the same tensor (its min/max are the same).
    if (seen && (seen.kind === 'histogram' || r.kind === 'range')) continue;
    ranges.set(r.tensor, {
      kind: r.kind,
      stats: { name: r.tensor, min: Infinity, max: -Infinity, count: 0, histogram: bins !== undefined ? new StreamingHistogram(bins) : undefined },
    });
  }
  return { ranges, moments };
}

/**
 * One streamed pass over `data` (a Dataset, cut into batches, or any sequence of feeds, e.g. a
 * generator that makes data on the fly) collecting every requested statistic. UsageError when the
 * data has no samples or a tensor is not numeric.
 */
export async function collectStatistics(
  model: Model,
  requests: readonly StatisticRequest[],
  data: Dataset | Iterable<Feeds> | AsyncIterable<Feeds>,
  options: CollectOptions = {},
): Promise<CollectedStatistics> {
  const { ranges, moments } = plan(requests);
  const names = [...new Set(requests.map((r) => r.tensor))];
  const result: CollectedStatistics = { ranges: new Map([...ranges].map(([name, s]) => [name, s.stats])), channels: new Map() };
  if (names.length === 0) return result;
  let source: Iterable<Feeds> | AsyncIterable<Feeds>;
  let totalSamples = options.totalSamples;
  // Samples per batch, for progress: a Dataset's batches say; other feeds, the extent of an input's
  // batch dim (where the model has it: a state [2,batch,H] at dim 1, a scalar none).
  const batchSizes = new WeakMap<Feeds, number>();
  const axes = batchAxes(modelInputSpecs(model));
  if (isDataset(data)) {
    if (data.count === 0) throw new UsageError(`${data.source}: the calibration data set has no samples`);
    const batchSize = options.batchSize ?? calibrationBatchSize(model, data);
    source = (function* () {
      for (const b of datasetBatches(data, batchSize)) {
        batchSizes.set(b.feeds, b.size);
        yield b.feeds;
      }
    })();
    totalSamples ??= data.count;
  } else {
    source = data;
  }
  const runner = await createCaptureRunner(model, names, { label: 'calibration model', ...options.runner });
  let batchCount = 0;
  let samples = 0;
  // Pipelined: onnxruntime runs batch k+1 on its own threads while this thread folds batch k into
  // the statistics, so calibration costs about max(inference, statistics), not their sum.
  const iterator = (Symbol.asyncIterator in source
    ? (source as AsyncIterable<Feeds>)[Symbol.asyncIterator]()
    : (source as Iterable<Feeds>)[Symbol.iterator]()) as AsyncIterator<Feeds> | Iterator<Feeds>;
  const start = async (): Promise<{ feeds: Feeds; captured: Promise<Feeds> } | undefined> => {
    const next = await iterator.next();
    if (next.done) return undefined;
    const captured = runner.run(next.value);
    captured.catch(() => undefined); // awaited below; avoid an unhandled rejection meanwhile
    return { feeds: next.value, captured };
  };
  try {
    let current = await start();
    while (current) {
      const captured = await current.captured;
      const feeds = current.feeds;
      current = await start();
      for (const [name, state] of ranges) addRange(state.stats, numericView(captured[name]!, name));
      for (const [name, state] of moments) addMoments(state, captured[name]!, name);
      batchCount++;
      samples += batchSizes.get(feeds) ?? feedsBatchSize(feeds, axes);
      options.onProgress?.({ batches: batchCount, samples, totalSamples });
    }
  } finally {
    await runner.release();
  }
  if (batchCount === 0) throw new UsageError('calibration data set is empty');
  for (const [name, { sums }] of moments) {
    if (!sums) continue;
    const { s, s2, n } = sums;
    const mean = s.map((x) => x / n);
    result.channels.set(name, { mean, variance: s2.map((x, i) => Math.max(0, x / n - mean[i]! * mean[i]!)) });
  }
  return result;
}

/** The samples in a feed: the extent of the first input's batch dim (`axes`: ir/io-spec's batchAxes), else 1. */
function feedsBatchSize(feeds: Feeds, axes: Readonly<Record<string, number | null>>): number {
  for (const [name, t] of Object.entries(feeds)) {
    const axis = name in axes ? axes[name] : 0;
    if (axis !== null && axis !== undefined && t.dims.length > axis) return t.dims[axis]!;
  }
  return 1;
}

function addRange(s: TensorStatistics, values: ArrayLike<number>): void {
  if (s.histogram) {
    s.histogram.add(values);
    s.min = s.histogram.min;
    s.max = s.histogram.max;
  } else {
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!;
      if (!Number.isFinite(v)) continue;
      if (v < s.min) s.min = v;
      if (v > s.max) s.max = v;
    }
  }
  s.count += values.length;
}

/** Per-index sums along the axis: each (outer, index) row is summed first, then added, in sample order. */
function addMoments(state: MomentState, t: TensorData, name: string): void {
  const pos = t.dims.length + state.axis;
  if (pos < 0 || pos >= t.dims.length) {
    throw new UsageError(`calibration: tensor '${name}' has shape [${t.dims}], no axis ${state.axis}`);
  }
  const len = t.dims[pos]!;
  const outer = elementCount(t.dims.slice(0, pos));
  const inner = elementCount(t.dims.slice(pos + 1));
  const acc = (state.sums ??= { s: new Float64Array(len), s2: new Float64Array(len), n: 0 });
  if (acc.s.length !== len) {
    throw new UsageError(`calibration: tensor '${name}' has ${len} channels along axis ${state.axis} in one batch and ${acc.s.length} in another`);
  }
  const x = numericView(t, name);
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < len; c++) {
      const base = (o * len + c) * inner;
      let s = 0;
      let s2 = 0;
      for (let i = 0; i < inner; i++) {
        const v = x[base + i]!;
        s += v;
        s2 += v * v;
      }
      acc.s[c] = acc.s[c]! + s;
      acc.s2[c] = acc.s2[c]! + s2;
    }
  }
  acc.n += outer * inner;
}

function numericView(t: TensorData, name: string): ArrayLike<number> {
  if (t.dtype === DataType.FLOAT || t.dtype === DataType.DOUBLE) return t.data as Float32Array;
  if (Array.isArray(t.data) || t.data instanceof BigInt64Array || t.data instanceof BigUint64Array) {
    throw new UsageError(`cannot calibrate tensor '${name}': it is not a float tensor`);
  }
  return t.data;
}

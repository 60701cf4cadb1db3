/**
 * Calibration as a service: a quantizer declares the tensors it needs ranges for; one streaming
 * pass over the calibration batches (onnxruntime with those tensors captured as extra outputs)
 * collects, per tensor, the exact running min/max and a fixed-size histogram that re-bins (merges
 * bin pairs) whenever the range grows. Nothing per sample is kept, so memory depends on the number
 * of tensors and the batch size, never on the sample count. Ranges are then computed with one of
 * four methods: minmax, percentile, entropy (KL divergence, TensorRT-style) and mse.
 * Imports: runtime (capture runner), ir/dtype, errors.
 */
import { UsageError } from '../../errors.js';
import { DataType, type TensorData } from '../../ir/dtype.js';
import type { Model } from '../../ir/index.js';
import { createCaptureRunner, type RunnerOptions } from '../../runtime/index.js';
import { activationParams, fakeQuantize, type QuantType } from './quant-math.js';

export type CalibrationMethod = 'minmax' | 'percentile' | 'entropy' | 'mse';
export const CALIBRATION_METHODS: readonly CalibrationMethod[] = ['minmax', 'percentile', 'entropy', 'mse'];

/** Default histogram size; 4096 bins of 8 bytes is 32 KiB per tensor. */
export const DEFAULT_BINS = 4096;

/**
 * A histogram over [lo, lo + bins * width) with lo a whole multiple of width. Growing doubles the
 * width and merges bin pairs, which is exact because every old bin falls inside one new bin.
 */
export class StreamingHistogram {
  readonly counts: Float64Array;
  lo = 0;
  width = 0;
  min = Infinity;
  max = -Infinity;
  total = 0;
  /** NaN and infinite values seen (left out of the histogram and the range). */
  nonFinite = 0;

  constructor(readonly bins = DEFAULT_BINS) {
    if (bins < 8 || bins % 2 !== 0) throw new UsageError(`histogram bins must be an even number >= 8, got ${bins}`);
    this.counts = new Float64Array(bins);
  }

  get hi(): number {
    return this.lo + this.bins * this.width;
  }

  add(values: ArrayLike<number>): void {
    let bmin = Infinity;
    let bmax = -Infinity;
    // v * 0 is NaN for NaN and +-Infinity, 0 otherwise: one pass finds both the range and them.
    let poison = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!;
      if (v < bmin) bmin = v;
      if (v > bmax) bmax = v;
      poison += v * 0;
    }
    const finite = poison === 0 && Number.isFinite(bmin) && Number.isFinite(bmax);
    if (!finite) {
      // Rare: recompute ignoring non-finite values.
      bmin = Infinity;
      bmax = -Infinity;
      for (let i = 0; i < values.length; i++) {
        const v = values[i]!;
        if (!Number.isFinite(v)) continue;
        if (v < bmin) bmin = v;
        if (v > bmax) bmax = v;
      }
      if (bmin === Infinity) {
        this.nonFinite += values.length;
        return;
      }
    }
    this.cover(bmin, bmax);
    const { counts, lo, bins } = this;
    const inv = 1 / this.width;
    const last = bins - 1;
    let counted = 0;
    if (finite) {
      // Hot loop (hundreds of millions of elements per calibration): no per-element checks
      // beyond the clamp; truncation is floor here because (v - lo) >= 0 up to rounding.
      for (let i = 0; i < values.length; i++) {
        const b = ((values[i]! - lo) * inv) | 0;
        counts[b > last ? last : b < 0 ? 0 : b]! += 1;
      }
      counted = values.length;
    } else {
      for (let i = 0; i < values.length; i++) {
        const v = values[i]!;
        if (!Number.isFinite(v)) {
          this.nonFinite++;
          continue;
        }
        const b = ((v - lo) * inv) | 0;
        counts[b > last ? last : b < 0 ? 0 : b]! += 1;
        counted++;
      }
    }
    this.total += counted;
    if (bmin < this.min) this.min = bmin;
    if (bmax > this.max) this.max = bmax;
  }

  private cover(bmin: number, bmax: number): void {
    if (this.width === 0) {
      // First data: a width that spans the batch range (and 0) with a little room, never zero.
      const lo = Math.min(bmin, 0);
      const hi = Math.max(bmax, 0);
      this.width = Math.max(hi - lo, 1e-12) * 1.0001 / this.bins;
      this.lo = Math.floor(lo / this.width) * this.width;
    }
    while (bmin < this.lo) this.grow('down');
    while (bmax >= this.hi) this.grow('up');
  }

  /**
   * Double the width, merging bin pairs. The new origin stays a multiple of the new width (so
   * merges are exact) and the new range covers the old one, extended on the side that needs it.
   */
  private grow(direction: 'up' | 'down'): void {
    const newWidth = this.width * 2;
    const newLo =
      direction === 'up'
        ? Math.floor(this.lo / newWidth) * newWidth
        : Math.ceil((this.hi - this.bins * newWidth) / newWidth) * newWidth;
    const merged = new Float64Array(this.bins);
    for (let i = 0; i < this.bins; i++) {
      const c = this.counts[i]!;
      if (c === 0) continue;
      const center = this.lo + (i + 0.5) * this.width;
      const j = Math.min(this.bins - 1, Math.max(0, Math.floor((center - newLo) / newWidth)));
      merged[j]! += c;
    }
    this.counts.set(merged);
    this.lo = newLo;
    this.width = newWidth;
  }

  /** Histogram of |x| with the same bin width, from 0 (bins centred on the grid). */
  absolute(): { counts: Float64Array; width: number } {
    const firstEdge = Math.round(this.lo / this.width);
    const maxIndex = Math.max(Math.abs(firstEdge), Math.abs(firstEdge + this.bins));
    const counts = new Float64Array(maxIndex);
    for (let i = 0; i < this.bins; i++) {
      const c = this.counts[i]!;
      if (c === 0) continue;
      const k = firstEdge + i; // bin covers [k w, (k+1) w)
      const j = k >= 0 ? k : -k - 1;
      counts[j]! += c;
    }
    return { counts, width: this.width };
  }
}

/** Statistics of one tensor after calibration. */
export interface TensorStatistics {
  name: string;
  min: number;
  max: number;
  /** Elements seen. */
  count: number;
  histogram?: StreamingHistogram;
}

export interface CalibrationProgress {
  batches: number;
  samples: number;
  totalSamples?: number;
}

export interface CollectOptions {
  /** Collect histograms (needed by percentile, entropy, mse); default true. */
  histograms?: boolean;
  bins?: number;
  runner?: RunnerOptions;
  /** Total samples, for progress fractions only. */
  totalSamples?: number;
  onProgress?: (p: CalibrationProgress) => void;
}

/**
 * One streaming pass: for each batch of feeds, capture the requested tensors and fold them into
 * the statistics. `batches` may be a generator that makes data on the fly.
 */
export async function collectStatistics(
  model: Model,
  tensorNames: readonly string[],
  batches: Iterable<Record<string, TensorData>> | AsyncIterable<Record<string, TensorData>>,
  options: CollectOptions = {},
): Promise<Map<string, TensorStatistics>> {
  const names = [...new Set(tensorNames)];
  const stats = new Map<string, TensorStatistics>();
  const withHistograms = options.histograms ?? true;
  for (const name of names) {
    stats.set(name, {
      name,
      min: Infinity,
      max: -Infinity,
      count: 0,
      histogram: withHistograms ? new StreamingHistogram(options.bins ?? DEFAULT_BINS) : undefined,
    });
  }
  if (names.length === 0) return stats;
  const runner = await createCaptureRunner(model, names, { label: 'calibration model', ...options.runner });
  let batchCount = 0;
  let samples = 0;
  // Pipelined: onnxruntime runs batch k+1 on its own threads while this thread folds batch k into
  // the histograms, so calibration costs about max(inference, statistics), not their sum.
  const iterator = (Symbol.asyncIterator in batches
    ? (batches as AsyncIterable<Record<string, TensorData>>)[Symbol.asyncIterator]()
    : (batches as Iterable<Record<string, TensorData>>)[Symbol.iterator]()) as AsyncIterator<Record<string, TensorData>> | Iterator<Record<string, TensorData>>;
  const start = async (): Promise<{ feeds: Record<string, TensorData>; captured: Promise<Record<string, TensorData>> } | undefined> => {
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
      for (const name of names) {
        const t = captured[name]!;
        const s = stats.get(name)!;
        const values = numericView(t, name);
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
      batchCount++;
      const first = Object.values(feeds)[0];
      samples += first?.dims[0] ?? 1;
      options.onProgress?.({ batches: batchCount, samples, totalSamples: options.totalSamples });
    }
  } finally {
    await runner.release();
  }
  if (batchCount === 0) throw new UsageError('calibration data set is empty');
  return stats;
}

function numericView(t: TensorData, name: string): ArrayLike<number> {
  if (t.dtype === DataType.FLOAT || t.dtype === DataType.DOUBLE) return t.data as Float32Array;
  if (Array.isArray(t.data) || t.data instanceof BigInt64Array || t.data instanceof BigUint64Array) {
    throw new UsageError(`cannot calibrate tensor '${name}': it is not a float tensor`);
  }
  return t.data;
}

export interface RangeOptions {
  method: CalibrationMethod;
  /** Percentile for 'percentile', e.g. 99.99. */
  percentile?: number;
  /** Quantized type of the activation (affects entropy/mse levels). */
  type?: QuantType;
  symmetric?: boolean;
}

export interface Range {
  min: number;
  max: number;
}

/** The float range to quantize a tensor over, from its statistics. */
export function computeRange(s: TensorStatistics, options: RangeOptions): Range {
  if (!Number.isFinite(s.min) || !Number.isFinite(s.max)) return { min: 0, max: 0 };
  const h = s.histogram;
  if (options.method === 'minmax' || !h || h.total === 0) return { min: s.min, max: s.max };
  switch (options.method) {
    case 'percentile':
      return percentileRange(h, options.percentile ?? 99.99, options.symmetric ?? false);
    case 'entropy':
      return entropyRange(h, options.type ?? DataType.UINT8);
    case 'mse':
      return mseRange(h, options.type ?? DataType.UINT8, options.symmetric ?? false);
    default:
      throw new UsageError(`unknown calibration method '${String(options.method)}'`);
  }
}

/** Value below which `fraction` of the histogram mass lies (linear inside a bin). */
function quantileOf(counts: Float64Array, lo: number, width: number, fraction: number, total: number): number {
  const target = fraction * total;
  let acc = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i]!;
    if (acc + c >= target && c > 0) {
      const within = (target - acc) / c;
      return lo + (i + within) * width;
    }
    acc += c;
  }
  return lo + counts.length * width;
}

/**
 * Percentile: symmetric, the p-th percentile of |x|; asymmetric (as onnxruntime does), the p-th
 * percentile as the top and the (100 - p)-th as the bottom, each tail cut separately. Clamped to
 * the observed min/max.
 */
export function percentileRange(h: StreamingHistogram, p: number, symmetric: boolean): Range {
  if (!(p > 0 && p <= 100)) throw new UsageError(`--percentile must be in (0, 100], got ${p}`);
  const f = p / 100;
  if (symmetric) {
    const abs = h.absolute();
    const a = Math.min(quantileOf(abs.counts, 0, abs.width, f, h.total), Math.max(Math.abs(h.min), Math.abs(h.max)));
    return { min: -a, max: a };
  }
  const upper = Math.min(h.max, quantileOf(h.counts, h.lo, h.width, f, h.total));
  const lower = Math.max(h.min, quantileOf(h.counts, h.lo, h.width, 1 - f, h.total));
  return { min: Math.min(lower, upper), max: upper };
}

/**
 * Entropy (TensorRT): over the |x| histogram, pick the clipping threshold whose quantized
 * distribution (with `levels` levels) is closest to the original in KL divergence.
 */
export function entropyRange(h: StreamingHistogram, type: QuantType): Range {
  let { counts, width } = h.absolute();
  // Trim empty tail, cap resolution at 2048 bins (exact pair merges) to bound the O(n^2) search.
  let n = counts.length;
  while (n > 1 && counts[n - 1] === 0) n--;
  counts = counts.subarray(0, n);
  while (counts.length > 2048) {
    const merged = new Float64Array(Math.ceil(counts.length / 2));
    for (let i = 0; i < counts.length; i++) merged[i >> 1]! += counts[i]!;
    counts = merged;
    width *= 2;
  }
  n = counts.length;
  // TensorRT's choice: 128 levels for magnitudes, thresholds from 128 of 2048 bins upwards.
  void type;
  const levels = 128;
  const amax = Math.max(Math.abs(h.min), Math.abs(h.max));
  if (n <= levels) return clampRange(h, amax);
  let bestKl = Infinity;
  let bestI = n;
  const p = new Float64Array(n);
  const q = new Float64Array(n);
  const suffix = new Float64Array(n + 1);
  for (let i = n - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + counts[i]!;
  for (let i = levels; i <= n; i++) {
    // Reference distribution: first i bins, outliers folded into the last one.
    for (let k = 0; k < i; k++) p[k] = counts[k]!;
    p[i - 1]! += suffix[i]!;
    // Candidate: the first i bins WITHOUT the outliers merged into `levels` groups, each group's
    // mass spread over its non-empty bins; clipping shows up as the mass Q lacks in the last bin.
    const per = i / levels;
    for (let g = 0; g < levels; g++) {
      const start = Math.floor(g * per);
      const end = g === levels - 1 ? i : Math.floor((g + 1) * per);
      let mass = 0;
      let nonEmpty = 0;
      for (let k = start; k < end; k++) {
        mass += counts[k]!;
        if (counts[k]! > 0) nonEmpty++;
      }
      for (let k = start; k < end; k++) q[k] = counts[k]! > 0 && nonEmpty > 0 ? mass / nonEmpty : 0;
    }
    const kl = klDivergence(p, q, i);
    if (kl < bestKl) {
      bestKl = kl;
      bestI = i;
    }
  }
  return clampRange(h, (bestI + 0.5) * width);
}

function klDivergence(p: Float64Array, q: Float64Array, n: number): number {
  let sp = 0;
  let sq = 0;
  for (let k = 0; k < n; k++) {
    sp += p[k]!;
    sq += q[k]!;
  }
  if (sp === 0 || sq === 0) return Infinity;
  let kl = 0;
  for (let k = 0; k < n; k++) {
    const pk = p[k]! / sp;
    if (pk === 0) continue;
    const qk = q[k]! / sq;
    if (qk === 0) return Infinity;
    kl += pk * Math.log(pk / qk);
  }
  return kl;
}

/** Threshold t on |x| applied to the observed range: [max(min, -t), min(max, t)]. */
function clampRange(h: StreamingHistogram, t: number): Range {
  return { min: Math.max(h.min, -t), max: Math.min(h.max, t) };
}

/**
 * MSE: scan ranges [alpha * min, alpha * max] (alpha from 1 down to 0.05) and keep the one with
 * the least expected squared quantize-dequantize error over the histogram (bin centres).
 */
export function mseRange(h: StreamingHistogram, type: QuantType, symmetric: boolean): Range {
  const centres: number[] = [];
  const weights: number[] = [];
  for (let i = 0; i < h.bins; i++) {
    const c = h.counts[i]!;
    if (c === 0) continue;
    // Clamp centres to the exact observed range (the first/last bins extend past it).
    centres.push(Math.min(h.max, Math.max(h.min, h.lo + (i + 0.5) * h.width)));
    weights.push(c);
  }
  let best: Range = { min: h.min, max: h.max };
  let bestErr = Infinity;
  for (let step = 0; step < 96; step++) {
    const alpha = 1 - step * 0.01;
    const range = { min: h.min * alpha, max: h.max * alpha };
    const params = activationParams(range.min, range.max, type, symmetric);
    let err = 0;
    for (let k = 0; k < centres.length; k++) {
      const x = centres[k]!;
      const d = x - fakeQuantize(x, params);
      err += weights[k]! * d * d;
    }
    if (err < bestErr) {
      bestErr = err;
      best = range;
    }
  }
  return best;
}

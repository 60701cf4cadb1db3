/**
 * Quantization ranges from calibration statistics: minmax, percentile, entropy (KL divergence,
 * TensorRT-style) and mse. The statistics themselves (exact running min/max and a streaming
 * histogram per tensor, one pass over the calibration data) come from the calibration service
 * (src/calibration).
 * Imports: calibration (histogram, statistics types), ir/dtype, errors, ./quant-math.
 */
import { UsageError } from '../../errors.js';
import { DataType } from '../../ir/dtype.js';
import { StreamingHistogram, type TensorStatistics } from '../../calibration/index.js';
import { activationParams, fakeQuantize, type QuantType } from './quant-math.js';

/**
 * 'auto' picks one of the others per tensor by its effect on the model's output (./auto-ranges.ts);
 * as a range of one tensor on its own it is minmax.
 */
export type CalibrationMethod = 'minmax' | 'percentile' | 'entropy' | 'mse' | 'auto';
export const CALIBRATION_METHODS: readonly CalibrationMethod[] = ['minmax', 'percentile', 'entropy', 'mse', 'auto'];

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
  if (options.method === 'minmax' || options.method === 'auto' || !h || h.total === 0) return { min: s.min, max: s.max };
  switch (options.method) {
    case 'percentile':
      return percentileRange(h, options.percentile ?? 99.99, options.symmetric ?? false);
    case 'entropy':
      return entropyRange(h, options.type ?? DataType.UINT8, options.symmetric ?? false);
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

/** Two-sided tensors: both signs reach at least this fraction of the larger extent (e.g. a conv output). */
export const TWO_SIDED_FRACTION = 0.25;
/** Entropy never clips more than this fraction of a tensor's values (of the side it thresholds). */
export const ENTROPY_MAX_CLIPPED = 0.01;

/**
 * Entropy (TensorRT's KL method): pick the clipping threshold whose quantized distribution is
 * closest to the original in KL divergence. TensorRT designed it for int8 magnitudes of post-ReLU
 * tensors, whose mass sits near zero; applied as is (the |x| histogram, thresholds from 1/16 of the
 * range up) it collapsed tensors whose mass sits away from zero: a sigmoid gate in [0.21, 0.76] got
 * the range [0, 0.05] (everything folded into one bin scores KL 0), which switched the
 * squeeze-excite gates of a MobileNetV3/EfficientNet-style model off. So:
 * - two-sided tensors (both signs reach TWO_SIDED_FRACTION of the larger extent): the |x|
 *   histogram and a symmetric threshold, 128 levels, as TensorRT;
 * - one-sided tensors (non-negative, sigmoid gates, HardSwish/SiLU outputs with their small
 *   negative dip, or the mirror): the signed histogram from the fixed end (0, or the small side's
 *   extreme, which is kept whole) towards the dominant end, 128 levels;
 * - the threshold never clips more than ENTROPY_MAX_CLIPPED of the values, so it cannot fall below
 *   the bulk of the distribution.
 */
export function entropyRange(h: StreamingHistogram, type: QuantType, symmetric = false): Range {
  void type;
  const neg = -Math.min(h.min, 0);
  const pos = Math.max(h.max, 0);
  if (neg > 0 && pos > 0 && Math.min(neg, pos) >= TWO_SIDED_FRACTION * Math.max(neg, pos)) {
    const abs = h.absolute();
    const { counts, width } = capBins(abs.counts, abs.width);
    const i = klThreshold(counts, 128);
    return i === undefined ? { min: h.min, max: h.max } : clampRange(h, i * width);
  }
  const up = pos >= neg;
  // Outward bins from the fixed end towards the dominant extreme.
  const anchor = symmetric ? 0 : up ? Math.min(h.min, 0) : Math.max(h.max, 0);
  const a0 = Math.min(h.bins - 1, Math.max(0, Math.floor((anchor - h.lo) / h.width)));
  const outward = up ? h.counts.slice(a0) : h.counts.slice(0, a0 + 1).reverse();
  const { counts, width } = capBins(outward, h.width);
  // 128 levels as TensorRT, also for uint8 (256 levels would need the bulk to span more than the
  // 2048 bins the search is capped at: uniform [0, 1) beside outliers at 10 spans about 205).
  const i = klThreshold(counts, 128);
  if (i === undefined) return { min: h.min, max: h.max };
  if (up) {
    const edge = h.lo + a0 * h.width + i * width;
    return { min: h.min, max: Math.max(Math.min(h.max, edge), symmetric ? neg : 0) };
  }
  const edge = h.lo + (a0 + 1) * h.width - i * width;
  return { min: Math.min(Math.max(h.min, edge), symmetric ? -pos : 0), max: h.max };
}

/** Trim the empty outer tail and merge bin pairs (exactly) down to 2048 bins, bounding the O(n^2) search. */
function capBins(counts: Float64Array, width: number): { counts: Float64Array; width: number } {
  let n = counts.length;
  while (n > 1 && counts[n - 1] === 0) n--;
  let c = counts.subarray(0, n);
  while (c.length > 2048) {
    const merged = new Float64Array(Math.ceil(c.length / 2));
    for (let k = 0; k < c.length; k++) merged[k >> 1]! += c[k]!;
    c = merged;
    width *= 2;
  }
  return { counts: c, width };
}

/**
 * The number of bins (from the fixed end) to keep: the KL-best threshold over `counts` merged into
 * `levels` groups, never clipping more than ENTROPY_MAX_CLIPPED of the mass; undefined when there
 * are too few bins to choose (keep the whole range).
 */
function klThreshold(counts: Float64Array, levels: number): number | undefined {
  const n = counts.length;
  if (n <= levels) return undefined;
  let total = 0;
  for (let k = 0; k < n; k++) total += counts[k]!;
  let first = levels;
  for (let acc = 0, k = 0; k < n; k++) {
    acc += counts[k]!;
    if (acc >= (1 - ENTROPY_MAX_CLIPPED) * total) {
      first = Math.max(levels, k + 1);
      break;
    }
  }
  let bestKl = Infinity;
  let bestI = n;
  const p = new Float64Array(n);
  const q = new Float64Array(n);
  const suffix = new Float64Array(n + 1);
  for (let i = n - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + counts[i]!;
  for (let i = first; i <= n; i++) {
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
  return bestI;
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

/**
 * Classification metrics shared by the benchmark, the passes and training: numbers out of any
 * numeric tensor, class labels out of a labels tensor, the class axis of an output, and per-sample
 * top-k / top-1 correctness. The one implementation of "is this sample classified right".
 * Pure and deterministic. Imports: ir/dtype, errors.
 */
import { UsageError } from '../errors.js';
import { DataType, bfloat16ToFloat32, dtypeName, float16ToFloat32, type TensorData, type TypedArray } from '../ir/dtype.js';

/** Numeric view of a tensor (fp16/bf16 decoded, int64 converted) for metrics. */
export function toNumbers(t: TensorData, what: string): ArrayLike<number> {
  if (Array.isArray(t.data)) throw new UsageError(`${what} is a ${dtypeName(t.dtype)} tensor; metrics need numbers`);
  const data = t.data as TypedArray;
  if (t.dtype === DataType.FLOAT16 || t.dtype === DataType.BFLOAT16) {
    const decode = t.dtype === DataType.FLOAT16 ? float16ToFloat32 : bfloat16ToFloat32;
    const out = new Float32Array(data.length);
    for (let i = 0; i < data.length; i++) out[i] = decode(data[i] as number);
    return out;
  }
  if (data instanceof BigInt64Array || data instanceof BigUint64Array) {
    const out = new Float64Array(data.length);
    for (let i = 0; i < data.length; i++) out[i] = Number(data[i]!);
    return out;
  }
  return data as Exclude<TypedArray, BigInt64Array | BigUint64Array>;
}

/** The label index that no prediction matches (what `labelIndices` gives a label beyond int32). */
export const NO_CLASS = -1;

const INT32_MAX = 0x7fffffff;

/**
 * Class indices from a labels tensor: integers of shape [N] or [N, 1], or one-hot / probability
 * rows [N, C] (argmax, first index on ties). The one label policy of every command: an index label
 * that is not a class index (negative, fractional, NaN) is a UsageError naming `source` and the
 * sample; a label beyond int32 is NO_CLASS (no model has that many classes, so it is out of range,
 * a miss, like any label >= classes).
 */
export function labelIndices(labels: TensorData, source: string): Int32Array {
  const n = labels.dims[0] ?? 0;
  const values = toNumbers(labels, `labels in ${source}`);
  const per = n > 0 ? values.length / n : 0;
  const out = new Int32Array(n);
  if (per === 1) {
    for (let i = 0; i < n; i++) {
      const v = values[i]!;
      if (!Number.isInteger(v) || v < 0) {
        throw new UsageError(`${source}: label ${i} is ${v}; class labels must be non-negative integers`);
      }
      out[i] = v > INT32_MAX ? NO_CLASS : v;
    }
    return out;
  }
  for (let i = 0; i < n; i++) {
    let best = 0;
    for (let j = 1; j < per; j++) if (values[i * per + j]! > values[i * per + best]!) best = j;
    out[i] = best;
  }
  return out;
}

/** Elements per sample of an output batch and its class count (last dim), for metrics. */
export function classAxis(t: TensorData, batch: number): { perSample: number; classes: number | null } {
  const total = t.data.length;
  const perSample = batch > 0 ? total / batch : 0;
  const last = t.dims.length >= 2 ? t.dims[t.dims.length - 1]! : null;
  // Only a [batch, ..., C] output whose sample is one row of C scores has a class axis.
  const classes = last !== null && last > 1 && perSample === last ? last : null;
  return { perSample, classes };
}

/**
 * Per-sample top-k correctness: scores is row-major [n, classes]; a sample is right when its label
 * is among the k highest scores. Ties are broken toward the lower class index (like argmax), so a
 * constant row counts only classes 0..k-1. A NaN score never beats another and a NaN label score
 * is never right; a label outside [0, classes) (e.g. NO_CLASS) is never right.
 */
export function topKCorrect(scores: ArrayLike<number>, classes: number, labels: ArrayLike<number>, k: number): Uint8Array {
  const n = labels.length;
  if (scores.length !== n * classes) {
    throw new Error(`topKCorrect: ${scores.length} scores for ${n} samples x ${classes} classes`);
  }
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const label = labels[i]!;
    if (!(label >= 0 && label < classes)) continue;
    const base = i * classes;
    const target = scores[base + label]!;
    // Rank of the label = classes that beat it (higher score, or equal score at a lower index).
    let rank = 0;
    for (let j = 0; j < classes && rank < k; j++) {
      const s = scores[base + j]!;
      if (s > target || (s === target && j < label)) rank++;
    }
    out[i] = rank < k && !Number.isNaN(target) ? 1 : 0;
  }
  return out;
}

/**
 * Per-sample top-1 correctness (topKCorrect with k = 1): the label is the first index of the
 * row's largest score. This is the top-1 accuracy of every command (benchmark, quantize, prune,
 * distill, QAT).
 */
export function top1Correct(scores: ArrayLike<number>, classes: number, labels: ArrayLike<number>): Uint8Array {
  return topKCorrect(scores, classes, labels, 1);
}

/** Index of each row's largest score (first on ties; NaN scores are skipped, an all-NaN row gives 0). */
export function argmaxRows(scores: ArrayLike<number>, classes: number): Int32Array {
  const n = Math.floor(scores.length / classes);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    let best = 0;
    let bestValue = -Infinity;
    for (let j = 0; j < classes; j++) {
      const s = scores[i * classes + j]!;
      if (s > bestValue) {
        bestValue = s;
        best = j;
      }
    }
    out[i] = best;
  }
  return out;
}

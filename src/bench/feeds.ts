/**
 * Turning a data set into model feeds for the benchmark: concrete shapes per batch size, batches
 * padded to a fixed batch dim, tiling a small data set up to a large batch, numbers out of any
 * numeric tensor, and class labels out of a labels tensor.
 * Imports: ir/dtype, runtime/shapes (pure), data/tensor-ops (pure), errors.
 */
import { UsageError } from '../errors.js';
import {
  DataType,
  bfloat16ToFloat32,
  dtypeName,
  float16ToFloat32,
  type TensorData,
  type TypedArray,
} from '../ir/dtype.js';
import { concatSamples, sliceSamples } from '../data/tensor-ops.js';
import { formatShape, resolveShape, type IoSpec, type ShapeOverrides } from '../runtime/shapes.js';

export type Feeds = Record<string, TensorData>;

/** The batch dim a model fixes (same fixed dim 0 on every input), or null when it is dynamic. */
export function fixedBatchDim(inputs: readonly IoSpec[]): number | null {
  for (const spec of inputs) {
    const d = spec.shape[0];
    if (typeof d === 'number') return d;
  }
  return null;
}

/**
 * Concrete input shapes for one batch size. Dim 0 is the batch dim of every input; other symbolic
 * dims come from --shape. A fixed dim 0 that differs from the batch size is a usage error naming
 * the input, since a sweep over it cannot run.
 */
export function shapesForBatch(inputs: readonly IoSpec[], batchSize: number, overrides: ShapeOverrides): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const spec of inputs) {
    const d0 = spec.shape[0];
    if (typeof d0 === 'number' && d0 !== batchSize) {
      throw new UsageError(
        `--batch-size ${batchSize}: input '${spec.name}' ${formatShape(spec.shape)} has a fixed batch dim of ${d0}; ` +
          `only batch size ${d0} can run (export the model with a dynamic batch dim to sweep)`,
      );
    }
    const shape = resolveShape(spec, overrides, batchSize);
    if (shape.length > 0) shape[0] = batchSize;
    out[spec.name] = shape;
  }
  return out;
}

/** Samples [start, start + size) of every input, padded by repeating the last sample up to `padTo`. */
export function batchFeeds(inputs: Feeds, start: number, size: number, padTo?: number): Feeds {
  const out: Feeds = {};
  for (const [name, t] of Object.entries(inputs)) {
    let part = sliceSamples(t, start, start + size);
    if (padTo !== undefined && padTo > size) {
      const last = sliceSamples(t, start + size - 1, start + size);
      part = concatSamples([part, ...Array.from({ length: padTo - size }, () => last)]);
    }
    out[name] = part;
  }
  return out;
}

/** The first `batchSize` samples, cycling through the data set when it has fewer. */
export function tiledFeeds(inputs: Feeds, count: number, batchSize: number): Feeds {
  const out: Feeds = {};
  for (const [name, t] of Object.entries(inputs)) {
    if (count >= batchSize) {
      out[name] = sliceSamples(t, 0, batchSize);
      continue;
    }
    const parts: TensorData[] = [];
    for (let have = 0; have < batchSize; have += count) {
      parts.push(sliceSamples(t, 0, Math.min(count, batchSize - have)));
    }
    out[name] = concatSamples(parts);
  }
  return out;
}

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

/**
 * Class indices from a labels tensor: integers of shape [N] or [N, 1], or one-hot / probability
 * rows [N, C] (argmax).
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
      out[i] = v;
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

export { formatShape };

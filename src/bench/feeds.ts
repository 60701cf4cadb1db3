/**
 * Turning a data set into model feeds for the benchmark: concrete shapes per batch size, batches
 * padded to a fixed batch dim, tiling a small data set up to a large batch. Re-exports the tensor
 * and label helpers of src/metrics (numbers out of any numeric tensor, class labels, class axis).
 * Imports: ir/dtype, runtime/shapes (pure), data/tensor-ops (pure), metrics, errors.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { concatSamples, sliceSamples } from '../data/tensor-ops.js';
import { formatShape, resolveShape, type IoSpec, type ShapeOverrides } from '../runtime/shapes.js';

export { classAxis, labelIndices, toNumbers } from '../metrics/index.js';

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

export { formatShape };

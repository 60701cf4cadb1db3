/**
 * Turning a data set into model feeds for the benchmark's timed runs: concrete shapes per batch
 * size, tiling a small data set up to a large batch. (Evaluation batches are src/evaluate's.)
 * Imports: ir/dtype (types), runtime (pure shape helpers), data (sample slicing), errors.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { concatSamples, sliceSamples } from '../data/index.js';
import { formatShape, resolveShape, type IoSpec, type ShapeOverrides } from '../runtime/index.js';

export type Feeds = Record<string, TensorData>;

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

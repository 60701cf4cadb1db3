/**
 * Turning a data set into model feeds for the benchmark's timed runs: concrete shapes per batch
 * size, tiling a small data set up to a large batch. Each input's batch dim is where the model
 * has it (ir/io-spec's batchAxes: a state [2,batch,32] takes B in dim 1; a scalar takes none).
 * (Evaluation batches are src/evaluate's.)
 * Imports: ir/dtype (types), ir/batch-layout, ir/io-spec (via runtime), data (sample slicing), errors.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { moveSampleAxis, sampleValue } from '../ir/batch-layout.js';
import { concatSamples, sliceSamples, type Dataset } from '../data/index.js';
import { batchAxes, formatShape, resolveShape, type IoSpec, type ShapeOverrides } from '../ir/io-spec.js';

export type Feeds = Record<string, TensorData>;

/**
 * Concrete input shapes for one batch size, for inputs that have a batch dim (others are fed as
 * the data has them). Other symbolic dims come from --shape. A fixed batch dim that differs from
 * the batch size is a usage error naming the input, since a sweep over it cannot run.
 */
export function shapesForBatch(inputs: readonly IoSpec[], batchSize: number, overrides: ShapeOverrides): Record<string, number[]> {
  const axes = batchAxes(inputs);
  const out: Record<string, number[]> = Object.create(null) as Record<string, number[]>;
  for (const spec of inputs) {
    const axis = spec.unknownRank ? 0 : axes[spec.name];
    if (axis === null || axis === undefined) continue;
    const d = spec.shape[axis];
    if (typeof d === 'number' && d !== batchSize) {
      throw new UsageError(
        `--batch-size ${batchSize}: input '${spec.name}' ${formatShape(spec.shape)} has a fixed batch dim of ${d}; ` +
          `only batch size ${d} can run (export the model with a dynamic batch dim to sweep)`,
      );
    }
    const shape = resolveShape(spec, overrides, batchSize, axis);
    if (shape.length > axis) shape[axis] = batchSize;
    out[spec.name] = shape;
  }
  return out;
}

/** Whether feeds of more than one sample can be built: some stored input has a batch axis. */
export function canBatch(dataset: Dataset): boolean {
  const axes = dataset.batchAxes;
  const names = Object.keys(dataset.inputs);
  if (!axes) return names.length > 0;
  return names.some((name) => !Object.hasOwn(axes, name) || axes[name] !== null);
}

/** The first `batchSize` samples of each input, cycling through the data set when it has fewer. */
export function tiledFeeds(inputs: Feeds, count: number, batchSize: number): Feeds {
  const out: Feeds = Object.create(null) as Feeds;
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

/**
 * Feeds of `batchSize` samples for timing: tiledFeeds laid out along each input's batch axis; an
 * input without one takes the first sample's value; constants as they are.
 */
export function latencyFeeds(dataset: Dataset, batchSize: number): Feeds {
  const axes = dataset.batchAxes;
  const axisOf = (name: string): number | null => (axes && Object.hasOwn(axes, name) ? (axes[name] ?? null) : 0);
  const batched: Feeds = Object.assign(
    Object.create(null) as Feeds,
    Object.fromEntries(Object.entries(dataset.inputs).filter(([name]) => axisOf(name) !== null)),
  );
  const feeds = tiledFeeds(batched, dataset.count, batchSize);
  if (!axes && !dataset.constants) return feeds;
  const out: Feeds = Object.create(null) as Feeds;
  for (const [name, t] of Object.entries(dataset.inputs)) {
    const axis = axisOf(name);
    out[name] = axis === null ? sampleValue(t, 0) : moveSampleAxis(feeds[name]!, axis);
  }
  return { ...out, ...dataset.constants };
}

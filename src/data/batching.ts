/**
 * Cutting a Dataset into model feeds: `batches()` (the one path calibration, evaluation, the
 * guard and prune's measurements take), `take()`, and the batch size a model forces.
 * A batch of B samples becomes a feed by moving the sample dim to each input's batch axis
 * (state [B,2,32] -> [2,B,32]); an input without one (a scalar, or a sample that is a whole feed)
 * lets consecutive samples share a run only while its value is the same (the feed is that value);
 * constants are added as they are. A data set whose every axis is 0 and that has no constants
 * takes the plain path: views along dim 0, exactly as before batch axes existed.
 * Imports: ../ir/batch-layout.js, ../ir/samples.js, ../ir/dtype.js (types), ../ir/io-spec.js, ../errors.js.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { moveSampleAxis, sameSample, sampleValue } from '../ir/batch-layout.js';
import { batchAxes, type IoSpec } from '../ir/io-spec.js';
import { sliceSamples } from '../ir/samples.js';
import type { Dataset } from './dataset.js';

export interface Batch {
  /** Feeds for Runner.run: one array per input (and constant), `size` samples. */
  feeds: Record<string, TensorData>;
  labels?: TensorData;
  /** Index of the batch's first sample in the data set. */
  start: number;
  size: number;
}

/**
 * The batch size the model forces, when an input fixes its batch dim (e.g. [1,3,224,224]);
 * undefined when every batch dim is symbolic. UsageError when inputs fix different sizes.
 */
export function fixedBatchSize(inputSpecs: readonly IoSpec[]): number | undefined {
  const axes = batchAxes(inputSpecs);
  let fixed: number | undefined;
  for (const spec of inputSpecs) {
    const axis = axes[spec.name];
    const d = spec.unknownRank || axis === null || axis === undefined ? undefined : spec.shape[axis];
    if (typeof d !== 'number') continue;
    if (fixed !== undefined && fixed !== d) {
      throw new UsageError(`model inputs fix different batch sizes (${fixed} and ${d} for '${spec.name}')`);
    }
    fixed = d;
  }
  return fixed;
}

/** The first `n` samples (views, no copy); batch axes, constants and sequences come along. */
export function take(dataset: Dataset, n: number): Dataset {
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`take: expected a non-negative sample count, got ${n}`);
  const m = Math.min(n, dataset.count);
  const cut = (r: Record<string, TensorData>) =>
    Object.assign(Object.create(null) as Record<string, TensorData>, Object.fromEntries(Object.entries(r).map(([k, t]) => [k, sliceSamples(t, 0, m)])));
  const out: Dataset = { ...dataset, count: m, inputs: cut(dataset.inputs), notes: [...dataset.notes] };
  if (dataset.labels) out.labels = sliceSamples(dataset.labels, 0, m);
  if (dataset.outputs) out.outputs = cut(dataset.outputs);
  if (dataset.sequences) out.sequences = dataset.sequences.subarray(0, m);
  return out;
}

/** The batch axis of a stored input: the data set's entry, 0 when absent. */
export function axisOf(dataset: Dataset, name: string): number | null {
  const axes = dataset.batchAxes;
  if (!axes || !Object.hasOwn(axes, name)) return 0;
  return axes[name] ?? null;
}

/** True when every input batches along dim 0 and there are no constants: feeds are plain views. */
export function isPlainLayout(dataset: Dataset): boolean {
  const constants = dataset.constants ? Object.keys(dataset.constants).length : 0;
  return constants === 0 && Object.keys(dataset.inputs).every((name) => axisOf(dataset, name) === 0);
}

/** The feed of samples [start, end), which must be able to share a run (see batches). */
export function feedsOf(dataset: Dataset, start: number, end: number): Record<string, TensorData> {
  const feeds: Record<string, TensorData> = Object.create(null);
  for (const [name, t] of Object.entries(dataset.inputs)) {
    const axis = axisOf(dataset, name);
    feeds[name] = axis === null ? sampleValue(t, start) : moveSampleAxis(sliceSamples(t, start, end), axis);
  }
  if (dataset.constants) for (const [name, t] of Object.entries(dataset.constants)) feeds[name] = t;
  return feeds;
}

/**
 * Where the batch starting at `start` ends: at most `batchSize` samples, fewer where an input
 * without a batch axis changes value (a sample per run when no stored input has a batch axis,
 * constants only included).
 */
export function batchEnd(dataset: Dataset, start: number, batchSize: number): number {
  const names = Object.keys(dataset.inputs);
  const whole = names.filter((name) => axisOf(dataset, name) === null);
  const limit = Math.min(start + batchSize, dataset.count);
  if (whole.length === names.length) return start + 1;
  if (whole.length === 0) return limit;
  let end = start + 1;
  while (end < limit && whole.every((name) => sameSample(dataset.inputs[name]!, start, end))) end++;
  return end;
}

/**
 * Consecutive batches of at most `batchSize` samples in order (the last may be smaller unless
 * dropLast; with inputs that have no batch axis, any may be: see batchEnd). Views where the layout
 * allows.
 */
export function* batches(dataset: Dataset, batchSize: number, options: { dropLast?: boolean } = {}): Generator<Batch> {
  if (!Number.isInteger(batchSize) || batchSize <= 0) throw new UsageError(`batch size must be a positive integer, got ${batchSize}`);
  if (isPlainLayout(dataset)) {
    for (let start = 0; start < dataset.count; start += batchSize) {
      const end = Math.min(start + batchSize, dataset.count);
      if (options.dropLast && end - start < batchSize) return;
      const feeds: Record<string, TensorData> = Object.create(null);
      for (const [name, t] of Object.entries(dataset.inputs)) feeds[name] = sliceSamples(t, start, end);
      const batch: Batch = { feeds, start, size: end - start };
      if (dataset.labels) batch.labels = sliceSamples(dataset.labels, start, end);
      yield batch;
    }
    return;
  }
  for (let start = 0, end = 0; start < dataset.count; start = end) {
    end = batchEnd(dataset, start, batchSize);
    if (options.dropLast && end - start < batchSize) continue;
    const batch: Batch = { feeds: feedsOf(dataset, start, end), start, size: end - start };
    if (dataset.labels) batch.labels = sliceSamples(dataset.labels, start, end);
    yield batch;
  }
}

/**
 * The one way to run a model over a Dataset and score it. A metric is a value: a streaming object
 * that sees each batch's outputs (with the batch's labels, its sample range and, when it asks, the
 * reference model's outputs for the same batch) and gives a result at the end. Built-in metrics are
 * in ./metrics.ts (top-k accuracy, agreement with a reference); a user's metric is any object with
 * the same shape (the later `--metric module.js` loads one).
 *
 * Shape: `evaluate(model | path | Runner, dataset, { name: metric, ... }, options)` returns
 * `{ name: result, ... }`; `evaluateMany([{ model, metrics }, ...], dataset, options)` runs several
 * models batch by batch on the same inputs (one onnxruntime run per model and batch) and hands
 * every metric that asks for it the FIRST model's outputs of that batch as the reference. This is
 * the benchmark's baseline + candidates and quantize's FP32-vs-INT8 check without running anything
 * twice or keeping outputs beyond one batch.
 *
 * One batch rule: the model's fixed batch dim (dim 0 of its inputs), else DEFAULT_EVAL_BATCH; a
 * smaller last batch reaches a fixed-batch model through the Runner, which pads it with copies of
 * the last sample and drops the padding from the outputs. Labels and the class axis are the
 * metrics' business (one policy for all, in ./metrics.ts on top of src/metrics).
 * Imports: runtime (Runner), data (Dataset, batching), ir (types), errors.
 */
import { InputError, ModelOptError, UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import { batches, fixedBatchSize, type Dataset } from '../data/index.js';
import { createRunner, modelLabel, type IoSpec, type Runner, type RunnerOptions } from '../runtime/index.js';

/** A model to evaluate: in memory, a file path, or a Runner the caller owns (and releases). */
export type ModelSource = Model | string | Runner;

/** Samples per run for a model that does not fix its batch dim. */
export const DEFAULT_EVAL_BATCH = 32;

export interface MetricContext {
  /** The data set being evaluated (labels, source path for messages, sample count). */
  dataset: Dataset;
  /** The model's outputs, in order. */
  outputs: readonly IoSpec[];
  /** The model's name in messages (its path, or the label given). */
  model: string;
}

export interface MetricBatch {
  /** This model's outputs for the batch (those the metric asked for; every output for 'all'). */
  outputs: Record<string, TensorData>;
  /** The reference model's outputs for the same batch (evaluateMany, metrics with needsReference). */
  reference?: Record<string, TensorData>;
  /** The batch's labels (dataset.labels, samples [start, start + size)), when the data has labels. */
  labels?: TensorData;
  /** Index of the batch's first sample in the data set. */
  start: number;
  size: number;
}

/**
 * A streaming metric. `begin` (optional) runs once before the first batch: it checks what it needs
 * (labels, an output) and returns the outputs it reads ('all', the default, for every output).
 * `update` sees every batch in order; `result` is called once at the end.
 */
export interface Metric<R = unknown> {
  /** Reads the reference model's outputs (evaluateMany: the first model's); such metrics need one. */
  readonly needsReference?: boolean;
  begin?(context: MetricContext): readonly string[] | 'all';
  update(batch: MetricBatch): void | Promise<void>;
  result(): R;
}

export type MetricSet = Record<string, Metric | undefined>;
/** What a metric (or an absent one) gives: its result type, or undefined. */
export type ResultOf<T> = T extends Metric<infer R> ? R : undefined;
export type MetricResults<M extends MetricSet> = { [K in keyof M]: ResultOf<M[K]> };

export interface EvaluateOptions {
  /** Samples per run for a model without a fixed batch dim (a fixed one always wins); default DEFAULT_EVAL_BATCH. */
  batchSize?: number;
  /** Session options for models given as a Model or a path. */
  runner?: RunnerOptions;
  /** Called after each batch with the samples done so far. */
  onProgress?: (done: number, total: number) => void;
  /**
   * The first model's outputs of an earlier evaluation on the same data and batches (every output,
   * by batch start): a batch found here is not run again; one not found is run and offered to `keep`.
   */
  reference?: ReferenceOutputs;
}

/** Kept outputs of a reference model by batch start (app code decides when two evaluations are the same). */
export interface ReferenceOutputs {
  get(start: number, size: number): Record<string, TensorData> | undefined;
  keep(start: number, size: number, outputs: Record<string, TensorData>): void;
}

export interface EvaluatedModel<M extends MetricSet = MetricSet> {
  model: ModelSource;
  metrics: M;
  /** The model's name in messages; default its path, or 'model under evaluation'. */
  label?: string;
}

/**
 * The batch size evaluate uses for a model with these inputs: its fixed batch dim wins (any other
 * size would only be split into runs of it), then the one requested, then DEFAULT_EVAL_BATCH.
 */
export function evaluationBatchSize(inputs: readonly IoSpec[], requested?: number): number {
  return fixedBatchSize(inputs) ?? requested ?? DEFAULT_EVAL_BATCH;
}

/** Scores `model` on `dataset` with the given metrics; results keyed like `metrics`. */
export async function evaluate<M extends MetricSet>(
  model: ModelSource,
  dataset: Dataset,
  metrics: M,
  options: EvaluateOptions & { label?: string } = {},
): Promise<MetricResults<M>> {
  const [results] = await evaluateMany([{ model, metrics, label: options.label }], dataset, options);
  return results!;
}

/**
 * Scores several models on the same batches: per batch, the first model runs, then each other
 * one, so every metric with needsReference compares against the first model's outputs of that
 * batch. A metric with needsReference on the first model is a usage error (it has no reference).
 */
export async function evaluateMany<M extends MetricSet>(
  models: readonly EvaluatedModel<M>[],
  dataset: Dataset,
  options: EvaluateOptions = {},
): Promise<MetricResults<M>[]> {
  if (models.length === 0) return [];
  const opened: { runner: Runner; own: boolean; label: string }[] = [];
  try {
    for (const m of models) {
      if (typeof m.model === 'object' && 'run' in m.model) {
        opened.push({ runner: m.model, own: false, label: m.label ?? 'model under evaluation' });
      } else {
        // Named by its file too (a Model keeps the path it was loaded from): "m.onnx (FP32 model)".
        const label = await modelLabel(m.model, m.label, 'model under evaluation');
        opened.push({ runner: await createRunner(m.model, { label, ...options.runner }), own: true, label });
      }
    }
    const metricLists = models.map((m) => Object.values(m.metrics).filter((x): x is Metric => x !== undefined));
    if (metricLists[0]!.some((x) => x.needsReference)) {
      throw new UsageError(`${opened[0]!.label}: a metric that compares with a reference cannot run on the reference model itself`);
    }
    const referenceNeeded = metricLists.slice(1).some((list) => list.some((x) => x.needsReference));
    // What each model must fetch: the union of its metrics' outputs; every output for the reference.
    const fetches = metricLists.map((list, i) => {
      const { runner, label } = opened[i]!;
      const context: MetricContext = { dataset, outputs: runner.outputs, model: label };
      const wanted = new Set<string>();
      let all = i === 0 && referenceNeeded;
      for (const metric of list) {
        const names = metric.begin ? metric.begin(context) : 'all';
        if (names === 'all') all = true;
        else for (const n of names) wanted.add(n);
      }
      return all ? undefined : [...wanted];
    });
    const batchSize = evaluationBatchSize(opened[0]!.runner.inputs, options.batchSize);
    for (const batch of batches(dataset, batchSize)) {
      let reference: Record<string, TensorData> | undefined;
      for (let i = 0; i < models.length; i++) {
        const fetch = fetches[i];
        if (metricLists[i]!.length === 0 && !(i === 0 && referenceNeeded)) continue;
        // Every output of the reference is what is kept (a subset is not reused).
        const kept = i === 0 && fetch === undefined ? options.reference : undefined;
        const known = kept?.get(batch.start, batch.size);
        const outputs = known ?? (fetch && fetch.length === 0 ? {} : await runBatch(opened[i]!, batch.feeds, fetch));
        if (kept && !known) kept.keep(batch.start, batch.size, outputs);
        if (i === 0) reference = outputs;
        for (const metric of metricLists[i]!) {
          await metric.update({
            outputs,
            ...(metric.needsReference ? { reference } : {}),
            ...(batch.labels ? { labels: batch.labels } : {}),
            start: batch.start,
            size: batch.size,
          });
        }
      }
      options.onProgress?.(batch.start + batch.size, dataset.count);
    }
    return models.map((m) => Object.fromEntries(Object.entries(m.metrics).map(([k, metric]) => [k, metric?.result()])) as MetricResults<M>);
  } finally {
    for (const o of opened) if (o.own) await o.runner.release();
  }
}

/**
 * One run of a model on one batch; an error that is not already a typed one becomes an InputError
 * naming the model and the input shapes.
 */
export async function runBatch(
  model: { runner: Runner; label: string },
  feeds: Record<string, TensorData>,
  fetch?: readonly string[],
): Promise<Record<string, TensorData>> {
  try {
    return await model.runner.run(feeds, fetch);
  } catch (error) {
    if (error instanceof ModelOptError) throw error;
    const message = error instanceof Error ? error.message.split('\n')[0] : String(error);
    const shapes = Object.entries(feeds)
      .map(([n, t]) => `${n}=${t.dims.join('x')}`)
      .join(', ');
    throw new InputError(`${model.label}: onnxruntime failed to run with inputs ${shapes} (${message})`, { cause: error });
  }
}

/**
 * The built-in evaluation metrics, as values for evaluate(): top-k accuracy against the data set's
 * labels (per-sample correctness kept, for McNemar's test) and agreement with a reference model's
 * outputs (SQNR, cosine, relative L2, top-1 agreement, worst channel; metrics/agreement.ts).
 *
 * The label policy, for every command: labels are class indices ([N] or [N, 1] integers) or
 * one-hot / probability rows ([N, C], argmax); an index label that is not a class index (negative,
 * fractional, NaN) is a UsageError naming the data file and the sample; a label beyond the class
 * count is a miss, counted (TopKResult.outOfRange) and reported, and when every label is beyond it
 * the score means nothing: an InputError naming the data file. The class-axis rule: the scored output must be [batch, ..., C] with one row of C
 * scores per sample (metrics/classification.ts's classAxis); anything else is a UsageError naming
 * the output and the model.
 * Imports: metrics (pure), ir (dtype, io specs), errors, ./evaluate (types).
 */
import { InputError, UsageError } from '../errors.js';
import { AgreementAccumulator, channelLayout, classAxis, labelIndices, toNumbers, topKCorrect, type AgreementMetrics } from '../metrics/index.js';
import { formatShape } from '../runtime/index.js';
import type { Metric, MetricBatch, MetricContext } from './evaluate.js';

export interface TopKResult {
  k: number;
  /** The output scored. */
  output: string;
  correct: number;
  total: number;
  /** correct / total (0 for an empty data set). */
  accuracy: number;
  /** 1 where sample i is classified right (its label among the k highest scores), else 0. */
  perSample: Uint8Array;
  /** Samples whose label is not a class of the output (>= its class count): counted as misses. */
  outOfRange: number;
  /** The output's class count (0 when nothing was scored). */
  classes: number;
  /** The smallest and largest label seen (-1 for a label beyond int32), with outOfRange only. */
  minLabel?: number;
  maxLabel?: number;
}

export interface TopKOptions {
  /** Default 1. */
  k?: number;
  /** Output to score; default the model's first output. */
  output?: string;
  /** Appended to the message when the output has no class axis (e.g. which flag picks another). */
  hint?: string;
}

/** Top-k accuracy of one output against the data set's labels. */
export function topKAccuracy(options: TopKOptions = {}): Metric<TopKResult> {
  const k = options.k ?? 1;
  if (!Number.isInteger(k) || k < 1) throw new UsageError(`top-k accuracy: k must be a positive integer, got ${k}`);
  let output = '';
  let model = '';
  let labels: Int32Array | undefined;
  let perSample = new Uint8Array(0);
  let source = '';
  let classCount = 0;
  let outOfRange = 0;
  let largest = -1;
  let minLabel = Number.POSITIVE_INFINITY;
  let maxLabel = Number.NEGATIVE_INFINITY;
  return {
    begin(context: MetricContext) {
      const { dataset } = context;
      source = dataset.source;
      outOfRange = 0;
      largest = -1;
      minLabel = Number.POSITIVE_INFINITY;
      maxLabel = Number.NEGATIVE_INFINITY;
      if (!dataset.labels) throw new UsageError(`${dataset.source}: the evaluation data has no labels`);
      labels = labelIndices(dataset.labels, dataset.source);
      output = options.output ?? context.outputs[0]?.name ?? '';
      if (!context.outputs.some((o) => o.name === output)) {
        throw new UsageError(`'${output}' is not an output of ${context.model} (outputs: ${context.outputs.map((o) => o.name).join(', ')})`);
      }
      model = context.model;
      perSample = new Uint8Array(dataset.count);
      return [output];
    },
    update(batch: MetricBatch) {
      const scores = batch.outputs[output]!;
      const { classes } = classAxis(scores, batch.size);
      if (classes === null) {
        throw new UsageError(
          `output '${output}' of ${model} is ${formatShape(scores.dims)}, not [batch, classes] scores; cannot compute top-${k}${options.hint ?? ''}`,
        );
      }
      // top-k over k >= classes counts every sample right: a setting that can never mean anything.
      if (k >= classes) throw new UsageError(`top-${k}: output '${output}' of ${model} has ${classes} classes; k must be below that`);
      const batchLabels = labels!.subarray(batch.start, batch.start + batch.size);
      classCount = classes;
      for (const label of batchLabels) {
        if (label < minLabel) minLabel = label;
        if (label > maxLabel) maxLabel = label;
        // NO_CLASS (-1) stands for a label beyond int32: out of range too.
        if (label < 0 || label >= classes) {
          outOfRange++;
          largest = label < 0 ? Number.POSITIVE_INFINITY : Math.max(largest, label);
        }
      }
      const ok = topKCorrect(toNumbers(scores, `output '${output}'`), classes, batchLabels, k);
      perSample.set(ok, batch.start);
    },
    result() {
      const total = perSample.length;
      if (total > 0 && outOfRange === total) {
        const max = Number.isFinite(largest) ? `the largest is ${largest}` : 'some beyond int32';
        throw new InputError(
          `${source}: all ${total} labels are out of range for the ${classCount} classes of output '${output}' of ${model} (${max}); labels must be class indices 0..${classCount - 1}`,
        );
      }
      let correct = 0;
      for (const v of perSample) correct += v;
      const range = outOfRange > 0 ? { minLabel, maxLabel } : {};
      return { k, output, correct, total, accuracy: total > 0 ? correct / total : 0, perSample, outOfRange, classes: classCount, ...range };
    },
  };
}

/**
 * Agreement with the reference model's outputs, per output (every numeric output both have):
 * streaming, so nothing is kept beyond one batch. Keys follow the reference's output order.
 */
export function agreementWithReference(): Metric<Record<string, AgreementMetrics>> {
  const accumulators = new Map<string, AgreementAccumulator>();
  return {
    needsReference: true,
    begin: () => 'all',
    update(batch: MetricBatch) {
      if (!batch.reference) throw new Error('agreement: no reference outputs for this batch');
      for (const [name, ref] of Object.entries(batch.reference)) {
        const cand = batch.outputs[name];
        if (!cand || Array.isArray(ref.data) || Array.isArray(cand.data)) continue;
        let acc = accumulators.get(name);
        if (!acc) accumulators.set(name, (acc = new AgreementAccumulator(classAxis(ref, batch.size).classes, channelLayout(ref.dims))));
        acc.add(toNumbers(ref, `output '${name}'`), toNumbers(cand, `output '${name}'`));
      }
    },
    result() {
      // Keyed by output names: a null-prototype record.
      return Object.assign(
        Object.create(null) as Record<string, AgreementMetrics>,
        Object.fromEntries([...accumulators].map(([name, acc]) => [name, acc.result()])),
      );
    },
  };
}

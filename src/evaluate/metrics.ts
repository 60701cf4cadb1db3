/**
 * The built-in evaluation metrics, as values for evaluate(): top-k accuracy against the data set's
 * labels (per-sample correctness kept, for McNemar's test) and agreement with a reference model's
 * outputs (SQNR, cosine, relative L2, top-1 agreement, worst channel; metrics/agreement.ts).
 *
 * The label policy, for every command: labels are class indices ([N] or [N, 1] integers) or
 * one-hot / probability rows ([N, C], argmax); an index label that is not a class index (negative,
 * fractional, NaN) is a UsageError naming the data file and the sample; a label beyond the class
 * count is a miss. The class-axis rule: the scored output must be [batch, ..., C] with one row of C
 * scores per sample (metrics/classification.ts's classAxis); anything else is a UsageError naming
 * the output and the model.
 * Imports: metrics (pure), ir (dtype, io specs), errors, ./evaluate (types).
 */
import { UsageError } from '../errors.js';
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
  return {
    begin(context: MetricContext) {
      const { dataset } = context;
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
      const ok = topKCorrect(toNumbers(scores, `output '${output}'`), classes, labels!.subarray(batch.start, batch.start + batch.size), k);
      perSample.set(ok, batch.start);
    },
    result() {
      let correct = 0;
      for (const v of perSample) correct += v;
      return { k, output, correct, total: perSample.length, accuracy: perSample.length > 0 ? correct / perSample.length : 0, perSample };
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
      return Object.fromEntries([...accumulators].map(([name, acc]) => [name, acc.result()]));
    },
  };
}

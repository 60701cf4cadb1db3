/**
 * The built-in evaluation metrics, as values for evaluate(): top-k accuracy against the data set's
 * labels (per-sample correctness kept, for McNemar's test) and agreement with a reference model's
 * outputs (SQNR, cosine, relative L2, top-1 agreement, worst channel; metrics/agreement.ts).
 *
 * The label policy, for every command: labels are class indices ([N] or [N, 1] integers) or
 * one-hot / probability rows ([N, C], argmax); an index label that is not a class index (negative,
 * fractional, NaN) is a UsageError naming the data file and the sample; a label beyond the class
 * count is a miss, counted (TopKResult.outOfRange) and reported, and when every label is beyond it
 * the score means nothing: an InputError naming the data file (./label-range.ts, the one check
 * training's data goes through too). The class-axis rule: the scored output must be [batch, ..., C] with one row of C
 * scores per sample (metrics/classification.ts's classAxis); anything else is a UsageError naming
 * the output and the model.
 * Imports: metrics (pure), ir (dtype, io specs), errors, ./label-range, ./evaluate (types).
 */
import { UsageError } from '../errors.js';
import {
  AgreementAccumulator,
  channelLayout,
  classAxis,
  EmbeddingAccumulator,
  labelIndices,
  toNumbers,
  topKCorrect,
  type AgreementMetrics,
} from '../metrics/index.js';
import { formatShape } from '../runtime/index.js';
import { checkLabelRange, labelRange } from './label-range.js';
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
  return {
    begin(context: MetricContext) {
      const { dataset } = context;
      source = dataset.source;
      classCount = 0;
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
        // [N, T, C]: class scores at every step; labels of such a model are sequences (CTC's lines).
        const steps = scores.dims.length === 3 ? '; per-step scores [N, T, C] with labelled sequences: --metric ctc (exact lines) or cer' : '';
        throw new UsageError(
          `output '${output}' of ${model} is ${formatShape(scores.dims)}, not [batch, classes] scores; cannot compute top-${k}${steps}${options.hint ?? ''}`,
        );
      }
      // top-k over k >= classes counts every sample right: a setting that can never mean anything.
      if (k >= classes) throw new UsageError(`top-${k}: output '${output}' of ${model} has ${classes} classes; k must be below that`);
      const batchLabels = labels!.subarray(batch.start, batch.start + batch.size);
      classCount = classes;
      const ok = topKCorrect(toNumbers(scores, `output '${output}'`), classes, batchLabels, k);
      perSample.set(ok, batch.start);
    },
    result() {
      // labels beyond the class count are misses (topKCorrect), counted here; all of them: an error
      const total = perSample.length;
      const range = classCount > 0 ? labelRange(labels!.subarray(0, total), classCount) : { outOfRange: 0, total, classes: 0 };
      checkLabelRange(range, { source, output, model });
      let correct = 0;
      for (const v of perSample) correct += v;
      const { outOfRange, minLabel, maxLabel } = range;
      return {
        k,
        output,
        correct,
        total,
        accuracy: total > 0 ? correct / total : 0,
        perSample,
        outOfRange,
        classes: classCount,
        ...(outOfRange > 0 ? { minLabel, maxLabel } : {}),
      };
    },
  };
}

export interface AgreementOptions {
  /** Outputs judged as embeddings: cosine per vector, pooled per sample, nearest neighbours (metrics/embedding.ts). */
  embeddings?: ReadonlySet<string>;
  /**
   * An integer input of the data (an attention mask [N, S]) that weights the pooling of an
   * embedding output [N, S, D] with the same S; otherwise every vector counts.
   */
  mask?: string;
}

/**
 * Agreement with the reference model's outputs, per output (every numeric output both have):
 * streaming, so nothing is kept beyond one batch (an embedding output keeps one pooled vector per
 * sample, for its nearest neighbours). Keys follow the reference's output order.
 */
export function agreementWithReference(options: AgreementOptions = {}): Metric<Record<string, AgreementMetrics>> {
  const accumulators = new Map<string, AgreementAccumulator>();
  const embeddings = new Map<string, EmbeddingAccumulator>();
  let mask: Mask | undefined;
  return {
    needsReference: true,
    begin: (context) => {
      const t = options.mask !== undefined && Object.hasOwn(context.dataset.inputs, options.mask) ? context.dataset.inputs[options.mask] : undefined;
      mask =
        t && t.dims.length >= 2 && !Array.isArray(t.data)
          ? { perSample: t.dims.slice(1).reduce((a, b) => a * b, 1), values: toNumbers(t, `input '${options.mask}'`) }
          : undefined;
      return 'all';
    },
    update(batch: MetricBatch) {
      if (!batch.reference) throw new Error('agreement: no reference outputs for this batch');
      for (const [name, ref] of Object.entries(batch.reference)) {
        const cand = batch.outputs[name];
        if (!cand || Array.isArray(ref.data) || Array.isArray(cand.data)) continue;
        let acc = accumulators.get(name);
        if (!acc) accumulators.set(name, (acc = new AgreementAccumulator(classAxis(ref, batch.size).classes, channelLayout(ref.dims))));
        const r = toNumbers(ref, `output '${name}'`);
        const c = toNumbers(cand, `output '${name}'`);
        acc.add(r, c);
        if (options.embeddings?.has(name)) embeddingUpdate(embeddings, name, batch, ref.dims, r, c, mask);
      }
    },
    result() {
      // Keyed by output names: a null-prototype record.
      return Object.assign(
        Object.create(null) as Record<string, AgreementMetrics>,
        Object.fromEntries(
          [...accumulators].map(([name, acc]) => {
            const e = embeddings.get(name);
            return [name, e ? { ...acc.result(), embedding: e.result() } : acc.result()];
          }),
        ),
      );
    },
  };
}

/** The data's mask input, as numbers, and its values per sample. */
interface Mask {
  perSample: number;
  values: ArrayLike<number>;
}

/** One batch of an embedding output: vectors along the last axis, pooled per sample over the mask's rows when they match. */
function embeddingUpdate(
  embeddings: Map<string, EmbeddingAccumulator>,
  name: string,
  batch: MetricBatch,
  dims: readonly number[],
  r: ArrayLike<number>,
  c: ArrayLike<number>,
  mask: Mask | undefined,
): void {
  const dim = dims.length >= 2 ? dims[dims.length - 1]! : 1;
  const per = batch.size > 0 ? r.length / batch.size / dim : 0;
  if (!(dim > 0) || !Number.isInteger(per) || per < 1) return;
  let acc = embeddings.get(name);
  if (!acc) embeddings.set(name, (acc = new EmbeddingAccumulator(dim, per)));
  if (acc.vectorsPerSample !== per) return;
  const weights =
    mask && per > 1 && mask.perSample === per ? Array.prototype.slice.call(mask.values, batch.start * per, (batch.start + batch.size) * per) : undefined;
  acc.add(r, c, weights as number[] | undefined);
}

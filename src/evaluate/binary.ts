/**
 * Binary classification at a threshold: F1 (headline), precision and recall of the positive class.
 * Output: [N] or [N, 1] probabilities of the positive class (or logits with `sigmoid`), or [N, 2]
 * scores (class 1 positive; softmax probability of class 1). A sample is predicted positive when
 * its probability is >= threshold (default 0.5). Labels: 0/1 as [N] or [N, 1], or one-hot [N, 2]
 * (metrics/classification's label policy; any other class is a UsageError). Label-free: the
 * reference model's decisions stand in for the labels.
 * F1 = 2TP / (2TP + FP + FN); a data set with nothing positive on either side (TP + FP + FN = 0)
 * scores 1 (there was nothing to get wrong). F1 is not a mean over samples: no McNemar test.
 * Imports: metrics (numbers, labels), runtime (formatShape), errors, ./task-metric, ./evaluate (types).
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { labelIndices, toNumbers } from '../metrics/index.js';
import { formatShape } from '../runtime/index.js';
import type { MetricBatch, MetricContext } from './evaluate.js';
import { pickOutput, type TaskMetric, type TaskMetricOptions, type TaskMetricResult } from './task-metric.js';

export interface BinaryOptions extends TaskMetricOptions {
  /** Positive when the probability is >= threshold; default 0.5. */
  threshold?: number;
  /** [N] / [N, 1] outputs are logits: apply the sigmoid first. */
  sigmoid?: boolean;
}

/** Positive (1) or negative (0) per sample of a [n] / [n, 1] / [n, 2] output; null for any other shape. */
export function binaryDecisions(t: TensorData, n: number, options: { threshold?: number; sigmoid?: boolean }, what: string): Uint8Array | null {
  const threshold = options.threshold ?? 0.5;
  const per = n > 0 ? t.data.length / n : 0;
  const rankOk = t.dims.length === 1 || (t.dims.length === 2 && t.dims[1] === per);
  if (!rankOk || (per !== 1 && per !== 2) || t.dims[0] !== n) return null;
  const values = toNumbers(t, what);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    let p: number;
    if (per === 1) p = options.sigmoid ? 1 / (1 + Math.exp(-values[i]!)) : values[i]!;
    else p = 1 / (1 + Math.exp(values[2 * i]! - values[2 * i + 1]!)); // softmax of class 1 of two
    out[i] = p >= threshold ? 1 : 0;
  }
  return out;
}

/** Precision, recall and F1 from counts (F1 = 1 when nothing is positive on either side; precision/recall 0 with an empty denominator). */
export function f1FromCounts(tp: number, fp: number, fn: number): { precision: number; recall: number; f1: number } {
  return {
    precision: tp + fp > 0 ? tp / (tp + fp) : 0,
    recall: tp + fn > 0 ? tp / (tp + fn) : 0,
    f1: tp + fp + fn > 0 ? (2 * tp) / (2 * tp + fp + fn) : 1,
  };
}

/** Binary F1 at a threshold against the data's 0/1 labels ('labels') or the reference model's decisions ('reference'). */
export function binaryF1(target: 'labels' | 'reference', options: BinaryOptions = {}): TaskMetric {
  const threshold = options.threshold ?? 0.5;
  if (!Number.isFinite(threshold)) throw new UsageError(`f1: threshold must be a number, got ${threshold}`);
  let output = '';
  let model = '';
  let labels: Int32Array | undefined;
  let tp = 0;
  let fp = 0;
  let fn = 0;
  let tn = 0;
  const decide = (t: TensorData, size: number, whose: string): Uint8Array => {
    const d = binaryDecisions(t, size, options, `output '${output}'`);
    if (!d)
      throw new UsageError(
        `output '${output}' of ${whose} is ${formatShape(t.dims)}, not [batch], [batch, 1] or [batch, 2] scores; cannot compute binary F1${options.hint ?? ''}`,
      );
    return d;
  };
  return {
    ...(target === 'reference' ? { needsReference: true } : {}),
    begin(context: MetricContext) {
      const { dataset } = context;
      if (target === 'labels') {
        if (!dataset.labels) throw new UsageError(`${dataset.source}: the evaluation data has no labels (F1 needs 0/1 labels)`);
        labels = labelIndices(dataset.labels, dataset.source);
        const bad = labels.findIndex((v) => v !== 0 && v !== 1);
        if (bad >= 0)
          throw new UsageError(`${dataset.source}: label ${bad} is ${labels[bad] === -1 ? 'out of range' : labels[bad]}; binary F1 needs labels 0 or 1`);
      }
      output = pickOutput(context, options.output);
      model = context.model;
      return [output];
    },
    update(batch: MetricBatch) {
      const predicted = decide(batch.outputs[output]!, batch.size, model);
      let truth: ArrayLike<number>;
      if (target === 'labels') truth = labels!.subarray(batch.start, batch.start + batch.size);
      else {
        const ref = batch.reference?.[output];
        if (!ref) throw new Error(`f1: no reference output '${output}' for this batch`);
        truth = decide(ref, batch.size, 'the reference model');
      }
      for (let i = 0; i < batch.size; i++) {
        if (predicted[i]) {
          if (truth[i]) tp++;
          else fp++;
        } else if (truth[i]) fn++;
        else tn++;
      }
    },
    result(): TaskMetricResult {
      const { precision, recall, f1 } = f1FromCounts(tp, fp, fn);
      const total = tp + fp + fn + tn;
      return {
        metric: target === 'labels' ? 'f1' : 'f1-vs-reference',
        value: f1,
        higherIsBetter: true,
        target,
        output,
        total,
        details: { precision, recall, threshold, tp, fp, fn, tn, accuracy: total > 0 ? (tp + tn) / total : 0 },
      };
    },
  };
}

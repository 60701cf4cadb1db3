/**
 * Mean intersection over union for segmentation-style outputs. Output: [N, C, ...spatial] scores
 * (class axis 1, e.g. [N, C, H, W]); the predicted class of a pixel is its argmax along axis 1
 * (first on ties). Labels: integer class ids [N, ...spatial]; a label outside [0, C) (255, -1) is
 * ignored (not counted). Intersections and unions are summed over the whole data set per class;
 * mIoU is the mean of IoU over the classes that occur (union > 0) in labels or predictions.
 * Label-free: the reference model's per-pixel argmax stands in for the labels.
 * Imports: metrics (numbers), runtime (formatShape), errors, ./task-metric, ./evaluate (types).
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { toNumbers } from '../metrics/index.js';
import { formatShape } from '../runtime/index.js';
import type { MetricBatch, MetricContext } from './evaluate.js';
import { pickOutput, type TaskMetric, type TaskMetricOptions, type TaskMetricResult } from './task-metric.js';

/** Per-pixel argmax along axis 1 of an [n, C, ...spatial] tensor: [n * pixels] class ids. */
export function pixelClasses(scores: ArrayLike<number>, n: number, classes: number, pixels: number): Int32Array {
  const out = new Int32Array(n * pixels);
  for (let i = 0; i < n; i++) {
    for (let p = 0; p < pixels; p++) {
      let best = 0;
      let bestValue = -Infinity;
      for (let c = 0; c < classes; c++) {
        const s = scores[(i * classes + c) * pixels + p]!;
        if (s > bestValue) {
          bestValue = s;
          best = c;
        }
      }
      out[i * pixels + p] = best;
    }
  }
  return out;
}

/** Mean IoU against integer label maps ('labels') or the reference model's argmax maps ('reference'). */
export function meanIoU(target: 'labels' | 'reference', options: TaskMetricOptions = {}): TaskMetric {
  let output = '';
  let model = '';
  let source = '';
  let intersection = new Float64Array(0);
  let union = new Float64Array(0);
  let correct = 0;
  let counted = 0;
  let samples = 0;
  const classesOf = (t: TensorData, size: number, whose: string): { classes: number; pixels: number } => {
    const pixels = t.dims.slice(2).reduce((a, b) => a * b, 1);
    if (t.dims.length < 3 || t.dims[0] !== size || !(t.dims[1]! > 1)) {
      throw new UsageError(
        `output '${output}' of ${whose} is ${formatShape(t.dims)}, not [batch, classes, ...spatial] scores; cannot compute mean IoU${options.hint ?? ''}`,
      );
    }
    return { classes: t.dims[1]!, pixels };
  };
  return {
    ...(target === 'reference' ? { needsReference: true } : {}),
    begin(context: MetricContext) {
      if (target === 'labels' && !context.dataset.labels)
        throw new UsageError(`${context.dataset.source}: the evaluation data has no labels (mean IoU needs label maps [N, H, W])`);
      output = pickOutput(context, options.output);
      model = context.model;
      source = context.dataset.source;
      return [output];
    },
    update(batch: MetricBatch) {
      const t = batch.outputs[output]!;
      const { classes, pixels } = classesOf(t, batch.size, model);
      if (intersection.length === 0) {
        intersection = new Float64Array(classes);
        union = new Float64Array(classes);
      }
      const predicted = pixelClasses(toNumbers(t, `output '${output}'`), batch.size, classes, pixels);
      let truth: ArrayLike<number>;
      if (target === 'labels') {
        truth = toNumbers(batch.labels!, `labels in ${source}`);
        if (truth.length !== predicted.length) {
          throw new UsageError(
            `${source}: labels of shape ${formatShape(batch.labels!.dims)} do not match output '${output}' ${formatShape(t.dims)} (want [batch, ...spatial] class ids)`,
          );
        }
      } else {
        const ref = batch.reference?.[output];
        if (!ref) throw new Error(`miou: no reference output '${output}' for this batch`);
        truth = pixelClasses(toNumbers(ref, `output '${output}'`), batch.size, classes, pixels);
      }
      // Per class: intersection = pixels where both say c; union = |pred = c| + |truth = c| - intersection.
      const predictedCount = new Float64Array(classes);
      const truthCount = new Float64Array(classes);
      for (let k = 0; k < predicted.length; k++) {
        const y = truth[k]!;
        if (!Number.isInteger(y)) throw new UsageError(`${source}: label map ${batch.start + Math.floor(k / pixels)} holds ${y}; labels are integer class ids`);
        if (y < 0 || y >= classes) continue;
        const p = predicted[k]!;
        counted++;
        predictedCount[p]! += 1;
        truthCount[y]! += 1;
        if (p === y) {
          intersection[p]! += 1;
          correct++;
        }
      }
      // Summed as |pred = c| + |truth = c|; result() subtracts the intersection.
      for (let c = 0; c < classes; c++) union[c]! += predictedCount[c]! + truthCount[c]!;
      samples += batch.size;
    },
    result(): TaskMetricResult {
      let sum = 0;
      let present = 0;
      for (let c = 0; c < intersection.length; c++) {
        const u = union[c]! - intersection[c]!;
        if (u > 0) {
          sum += intersection[c]! / u;
          present++;
        }
      }
      return {
        metric: target === 'labels' ? 'miou' : 'miou-vs-reference',
        value: present > 0 ? sum / present : 0,
        higherIsBetter: true,
        target,
        output,
        total: samples,
        details: { classesPresent: present, pixelAccuracy: counted > 0 ? correct / counted : 0, pixels: counted },
      };
    },
  };
}

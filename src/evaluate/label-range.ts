/**
 * The one check of class labels against an output's class count, for every command that scores or
 * trains on labels (evaluate/metrics.ts's top-k accuracy, training's data checks): the count of
 * labels out of range, the error when all of them are, and the out-of-range wording for every
 * reporter and warning (how many labels are not class indices of the output and, when they are
 * exactly the class indices plus one, the hint that they look 1-based).
 * Pure; imports errors only (reporters load it without onnxruntime).
 */
import { InputError } from '../errors.js';

/** What labelRangeMessage reads: a top-k result, or the same counts carried in a report. */
export interface LabelRange {
  outOfRange: number;
  total: number;
  classes: number;
  minLabel?: number;
  maxLabel?: number;
}

/**
 * How class indices (metrics/classification.ts's labelIndices: -1 for a label beyond int32) fall
 * against `classes`: a label outside [0, classes) is out of range; the smallest and largest label
 * come with any out of range.
 */
export function labelRange(labels: ArrayLike<number>, classes: number): LabelRange {
  let outOfRange = 0;
  let minLabel = Number.POSITIVE_INFINITY;
  let maxLabel = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < labels.length; i++) {
    const label = labels[i]!;
    if (label < minLabel) minLabel = label;
    if (label > maxLabel) maxLabel = label;
    if (!(label >= 0 && label < classes)) outOfRange++;
  }
  return { outOfRange, total: labels.length, classes, ...(outOfRange > 0 ? { minLabel, maxLabel } : {}) };
}

/**
 * Throws the InputError of labels that are all out of range (a score or a training run on them
 * means nothing), naming the data file, the output and the model; returns when some label is a
 * class index (or there are none).
 */
export function checkLabelRange(r: LabelRange, where: { source: string; output: string; model: string }): void {
  if (!(r.total > 0 && r.outOfRange === r.total)) return;
  // -1 stands for a label beyond int32
  const max = r.minLabel === -1 ? 'some beyond int32' : `the largest is ${r.maxLabel}`;
  throw new InputError(
    `${where.source}: all ${r.total} labels are out of range for the ${r.classes} classes of output '${where.output}' of ${where.model} (${max}); labels must be class indices 0..${r.classes - 1}`,
  );
}

/**
 * True when the labels look 1-based: the smallest is 1 and the largest is the class count, so
 * labels minus one are exactly the class indices 0..C-1 (a MATLAB/R export, or class ids that
 * start at 1). Such labels leave only the last class out of range and score near nothing.
 */
export function labelsLookOneBased(r: LabelRange): boolean {
  return r.outOfRange > 0 && r.classes > 1 && r.minLabel === 1 && r.maxLabel === r.classes;
}

/**
 * '47 of 100 labels are out of range for the 2 classes of the output (scored as misses); labels
 * look 1-based (min 1, max 2): subtract 1', or null when every label is a class index. The one
 * wording for the report line and the warning.
 */
export function labelRangeMessage(r: LabelRange, output = 'the output', consequence = 'scored as misses'): string | null {
  if (!(r.outOfRange > 0)) return null;
  const base = `${r.outOfRange} of ${r.total} labels are out of range for the ${r.classes} classes of ${output} (${consequence})`;
  return labelsLookOneBased(r) ? `${base}; labels look 1-based (min 1, max ${r.classes}): subtract 1` : base;
}

/**
 * The out-of-range label wording, one for every reporter and warning: how many labels are not
 * class indices of the scored output and, when they are exactly the class indices plus one, the
 * hint that they look 1-based. Pure; imports nothing (reporters load it without onnxruntime).
 */

/** What labelRangeMessage reads: a top-k result, or the same counts carried in a report. */
export interface LabelRange {
  outOfRange: number;
  total: number;
  classes: number;
  minLabel?: number;
  maxLabel?: number;
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
export function labelRangeMessage(r: LabelRange): string | null {
  if (!(r.outOfRange > 0)) return null;
  const base = `${r.outOfRange} of ${r.total} labels are out of range for the ${r.classes} classes of the output (scored as misses)`;
  return labelsLookOneBased(r) ? `${base}; labels look 1-based (min 1, max ${r.classes}): subtract 1` : base;
}

/**
 * Element-wise comparison of one output of two runs, shared by the checks that hold a rewritten
 * model to the original's outputs (batchify's, simplify's): |have - want| <= atol + rtol * |want|
 * per element, NaN where the other is not NaN counting as a difference.
 * May import: errors, ir (types).
 */
import { InputError } from '../errors.js';
import type { TensorData } from '../ir/index.js';

export interface Tolerance {
  atol: number;
  rtol: number;
}

/** Elements as numbers (int64 through Number); InputError for string tensors. */
export function numbersOf(t: TensorData): ArrayLike<number> {
  const d = t.data;
  if (Array.isArray(d)) throw new InputError('string outputs cannot be compared numerically');
  if (d instanceof BigInt64Array || d instanceof BigUint64Array) return Array.from(d, Number);
  return d as ArrayLike<number>;
}

/** The largest |have - want| and the first element outside the tolerance, if any. */
export function compareTensors(
  want: ArrayLike<number>,
  have: ArrayLike<number>,
  tolerance: Tolerance,
): { maxAbsDiff: number; mismatch?: { index: number; want: number; have: number } } {
  let maxAbsDiff = 0;
  for (let i = 0; i < want.length; i++) {
    const w = want[i]!;
    const h = have[i]!;
    if (Number.isNaN(w) && Number.isNaN(h)) continue;
    const diff = Math.abs(h - w);
    if (!(diff <= tolerance.atol + tolerance.rtol * Math.abs(w))) return { maxAbsDiff: Math.max(maxAbsDiff, diff), mismatch: { index: i, want: w, have: h } };
    if (diff > maxAbsDiff) maxAbsDiff = diff;
  }
  return { maxAbsDiff };
}

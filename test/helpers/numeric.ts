// Numeric comparisons shared by tests in every folder (no vitest import, so scripts can use it too).

/** Largest |a[i] - b[i]| (NaN if either holds NaN at the same place). */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    m = Number.isNaN(d) ? NaN : Math.max(m, d);
  }
  return m;
}

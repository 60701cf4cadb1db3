/**
 * An accuracy budget (`--max-accuracy-drop 0.5pt` or `1%`) and the test a candidate's accuracy
 * passes against it: the quantize guard, prune's gate and benchmark's gate read budgets alike.
 * Pure. Imports: none.
 */

/** Points: the drop in percentage points; relative: the drop as a fraction of the baseline. */
export type AccuracyBudget = { kind: 'points'; value: number } | { kind: 'relative'; value: number };

/** Whether `candidate` accuracy (a fraction) is within `budget` of `baseline` (round-off allowed). */
export function withinAccuracyBudget(budget: AccuracyBudget, baseline: number, candidate: number): boolean {
  const eps = 1e-9;
  if (budget.kind === 'points') return (baseline - candidate) * 100 <= budget.value + eps;
  return baseline === 0 ? true : (baseline - candidate) / baseline <= budget.value + eps;
}

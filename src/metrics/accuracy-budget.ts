/**
 * An accuracy budget (`--max-accuracy-drop 0.5pt` or `1%`) and the test a candidate's accuracy
 * passes against it: the quantize guard, prune's gate and benchmark's gate read budgets alike.
 * Pure. Imports: errors.
 */
import { UsageError } from '../errors.js';

/** Points: the drop in percentage points; relative: the drop as a fraction of the baseline. */
export type AccuracyBudget = { kind: 'points'; value: number } | { kind: 'relative'; value: number };

/** Whether `candidate` accuracy (a fraction) is within `budget` of `baseline` (round-off allowed). */
export function withinAccuracyBudget(budget: AccuracyBudget, baseline: number, candidate: number): boolean {
  const eps = 1e-9;
  if (budget.kind === 'points') return (baseline - candidate) * 100 <= budget.value + eps;
  return baseline === 0 ? true : (baseline - candidate) / baseline <= budget.value + eps;
}

/**
 * '0.5pt', '0.5' (points) or '1%' (relative) -> a budget, and whether it was a bare number (no
 * unit). UsageError with a one-line message for any other text, or a drop beyond 100.
 */
export function parseAccuracyBudgetText(value: string): { budget: AccuracyBudget; bare: boolean } {
  const text = value.trim();
  const match = /^(\d+(?:\.\d+)?)\s*(pt|pts|%)?$/.exec(text);
  if (!match) throw new UsageError(`expected an accuracy drop like '0.5pt' or '1%', got '${value}'`);
  const n = Number(match[1]);
  // A drop beyond 100 points (or 100%) can never happen: such a gate means nothing.
  if (n > 100) throw new UsageError(`an accuracy drop of ${text} can never happen (at most 100${match[2] === '%' ? '%' : 'pt'}); got '${value}'`);
  const budget: AccuracyBudget = match[2] === '%' ? { kind: 'relative', value: n / 100 } : { kind: 'points', value: n };
  return { budget, bare: match[2] === undefined };
}

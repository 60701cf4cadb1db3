/**
 * CI gates over a finished benchmark: pure functions of the measured models. A gate compares the
 * point estimate with the limit (so a model against itself never fails by noise alone) and carries
 * the 95% interval in its message so a reader sees how sure the verdict is.
 * Imports bench types and ../util/format.js (the p-value format the reporters use).
 */
import { formatPClause } from '../util/format.js';
import type { AccuracyBudget, GateResult, Gates, ModelResult } from './types.js';
import type { Interval } from '../metrics/index.js';

/** Allowance for float round-off when a measured value equals the limit exactly. */
const EPSILON = 1e-9;

const fmt = (x: number, digits = 2): string => (Number.isFinite(x) ? x.toFixed(digits) : String(x));
const interval = (i: Interval, digits: number, unit: string): string =>
  `${fmt(i.estimate, digits)}${unit} (95% CI ${fmt(i.low, digits)} to ${fmt(i.high, digits)}${unit})`;

export function formatBudget(budget: AccuracyBudget): string {
  return budget.kind === 'points' ? `${budget.value}pt` : `${+(budget.value * 100).toFixed(6)}%`;
}

/**
 * Evaluate every requested gate. Accuracy and speed-up gates apply to each candidate; the p99 gate
 * applies to each candidate, or to the baseline when there is no candidate. Latency gates are
 * checked at every batch size measured.
 */
export function evaluateGates(models: ModelResult[], gates: Gates): GateResult[] {
  const results: GateResult[] = [];
  const baseline = models.find((m) => m.role === 'baseline');
  const candidates = models.filter((m) => m.role === 'candidate');

  if (gates.maxAccuracyDrop && baseline) {
    const budget = gates.maxAccuracyDrop;
    for (const model of candidates) {
      const comparison = model.accuracy?.comparison;
      const baseAccuracy = baseline.accuracy?.value;
      if (!comparison || baseAccuracy === undefined) continue;
      // Drop = baseline - candidate, so the interval flips.
      const dropPt: Interval = {
        estimate: -comparison.difference.estimate * 100,
        low: -comparison.difference.high * 100,
        high: -comparison.difference.low * 100,
      };
      let measured: Interval;
      let unit: 'pt' | '%';
      let limit: number;
      if (budget.kind === 'points') {
        measured = dropPt;
        unit = 'pt';
        limit = budget.value;
      } else {
        const scale = baseAccuracy > 0 ? 1 / baseAccuracy : Infinity;
        measured = { estimate: dropPt.estimate * scale, low: dropPt.low * scale, high: dropPt.high * scale };
        unit = '%';
        limit = budget.value * 100;
      }
      const passed = measured.estimate <= limit + EPSILON;
      results.push({
        gate: 'max-accuracy-drop',
        model: model.label,
        limit: formatBudget(budget),
        measured,
        unit,
        passed,
        message:
          `max-accuracy-drop: ${model.label} ${unit === 'pt' ? 'dropped' : 'dropped by'} ${interval(measured, 2, unit === 'pt' ? ' pt' : '%')} ` +
          `on ${comparison.n} samples (McNemar ${formatPClause(comparison.pValue)}); limit ${formatBudget(budget)}` +
          (passed ? '' : ' exceeded'),
      });
    }
  }

  if (gates.minSpeedup !== undefined) {
    for (const model of candidates) {
      for (const point of model.latency) {
        if (!point.speedup) continue;
        const passed = point.speedup.estimate + EPSILON >= gates.minSpeedup;
        results.push({
          gate: 'min-speedup',
          model: model.label,
          batchSize: point.batchSize,
          limit: `${gates.minSpeedup}x`,
          measured: { estimate: point.speedup.estimate, low: point.speedup.low, high: point.speedup.high },
          unit: 'x',
          passed,
          message:
            `min-speedup: ${model.label} at batch ${point.batchSize} is ${interval(point.speedup, 3, 'x')} ` +
            `(${point.speedup.verdict}); limit ${gates.minSpeedup}x` +
            (passed ? '' : ' not reached'),
        });
      }
    }
  }

  if (gates.maxLatencyP99Ms !== undefined) {
    const targets = candidates.length > 0 ? candidates : baseline ? [baseline] : [];
    for (const model of targets) {
      for (const point of model.latency) {
        const passed = point.stats.p99 <= gates.maxLatencyP99Ms + EPSILON;
        results.push({
          gate: 'max-latency-p99',
          model: model.label,
          batchSize: point.batchSize,
          limit: `${gates.maxLatencyP99Ms}ms`,
          measured: point.p99Interval,
          unit: 'ms',
          passed,
          message:
            `max-latency-p99: ${model.label} at batch ${point.batchSize} has p99 ${interval(point.p99Interval, 3, ' ms')}; ` +
            `limit ${gates.maxLatencyP99Ms} ms` +
            (passed ? '' : ' exceeded'),
        });
      }
    }
  }
  return results;
}

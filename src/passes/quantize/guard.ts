/**
 * The accuracy guard and sensitivity analysis for INT8. Sensitivity of a node = SQNR (dB) of the
 * model output against FP32 when only that node (with the data-movement ops behind it) is
 * quantized, on calibration inputs: the lower, the more the node hurts. The guard measures top-1
 * on the evaluation set; while the drop exceeds the budget it keeps the most sensitive nodes in
 * FP32 (1, 2, 3, ... of them; fewer FP32 nodes = faster model) and returns the first model within
 * budget, or the best one found when none is. Both measurements are src/evaluate's (top-1 with its
 * label policy, agreement against FP32); the analysis uses the first CHECK_SAMPLE_COUNT calibration
 * samples. Imports ./int8, ./qdq, ./registry, evaluate, calibration (sample count), data, runtime.
 */
import type { Model } from '../../ir/index.js';
import { take, type Dataset } from '../../data/index.js';
import type { RunnerOptions } from '../../runtime/index.js';
import { CHECK_SAMPLE_COUNT } from '../../calibration/index.js';
import { compareOutputs, top1Accuracy } from '../../evaluate/index.js';
import { requantize, type Int8Context, type QuantizeProgress } from './int8.js';
import { QDQ_HANDLERS } from './registry.js';
import type { QdqReport } from './qdq.js';

export interface SensitivityRow {
  node: string;
  opType: string;
  /** Output SQNR vs FP32 with only this node quantized (higher is better). */
  sqnrDb: number;
  /** Top-1 agreement with FP32 on the same inputs, when the output has classes. */
  top1Agreement: number | null;
}

export type AccuracyBudget = { kind: 'points'; value: number } | { kind: 'relative'; value: number };

export interface GuardAttempt {
  /** Nodes kept in FP32. */
  fp32Nodes: string[];
  accuracy: number;
  /** Drop against FP32 in percentage points. */
  dropPoints: number;
  withinBudget: boolean;
}

export interface GuardResult {
  baselineAccuracy: number;
  evalSamples: number;
  budget: AccuracyBudget;
  attempts: GuardAttempt[];
  met: boolean;
  /** The chosen attempt: first within budget, else the most accurate. */
  chosen: GuardAttempt;
  model: Model;
  qdq: QdqReport;
  sensitivity: SensitivityRow[];
}

/** Rank the quantizable compute nodes, most sensitive first. */
export async function analyzeSensitivity(
  context: Int8Context,
  options: { samples?: number; runner?: RunnerOptions; onProgress?: (e: QuantizeProgress) => void } = {},
): Promise<SensitivityRow[]> {
  const full = await requantize(context, {});
  const nodes = full.report.quantized.filter((q) => QDQ_HANDLERS.get(q.opType)?.output !== 'passthrough');
  const data = take(context.calibration, options.samples ?? CHECK_SAMPLE_COUNT);
  const rows: SensitivityRow[] = [];
  const passthroughs = full.report.quantized.filter((q) => QDQ_HANDLERS.get(q.opType)?.output === 'passthrough').map((q) => q.node);
  for (const [i, q] of nodes.entries()) {
    options.onProgress?.({ phase: 'analyze', message: `sensitivity ${i + 1}/${nodes.length}: ${q.node}`, fraction: i / nodes.length });
    const single = await requantize(context, { onlyNodes: [q.node, ...passthroughs] });
    const agreement = await compareOutputs(context.preprocessed, single.model, data, { batchSize: context.batchSize, runner: options.runner });
    const first = Object.values(agreement)[0];
    rows.push({ node: q.node, opType: q.opType, sqnrDb: first?.sqnrDb ?? Infinity, top1Agreement: first?.top1Agreement ?? null });
  }
  rows.sort((a, b) => a.sqnrDb - b.sqnrDb);
  return rows;
}

function dropPoints(baseline: number, candidate: number): number {
  return (baseline - candidate) * 100;
}

function within(budget: AccuracyBudget, baseline: number, candidate: number): boolean {
  const eps = 1e-9;
  if (budget.kind === 'points') return dropPoints(baseline, candidate) <= budget.value + eps;
  return baseline === 0 ? true : (baseline - candidate) / baseline <= budget.value + eps;
}

/**
 * Find the fastest INT8 model within `budget` of FP32 top-1 on `evalData`: full INT8 first, then
 * the k most sensitive nodes in FP32 for growing k.
 */
export async function guardAccuracy(
  original: Model,
  context: Int8Context,
  evalData: Dataset,
  budget: AccuracyBudget,
  options: { outputName?: string; runner?: RunnerOptions; maxAttempts?: number; onProgress?: (e: QuantizeProgress) => void } = {},
): Promise<GuardResult> {
  const progress = options.onProgress ?? (() => undefined);
  const evalOptions = { outputName: options.outputName, runner: options.runner, batchSize: 32 };
  progress({ phase: 'guard', message: `FP32 accuracy on ${evalData.count} samples` });
  const baseline = (await top1Accuracy(original, evalData, evalOptions)).accuracy;
  const attempts: GuardAttempt[] = [];
  const tryExcluding = async (fp32Nodes: string[]): Promise<{ attempt: GuardAttempt; model: Model; qdq: QdqReport }> => {
    const excludeNodes = [...(context.qdqOptions.excludeNodes ?? []), ...fp32Nodes];
    const q = await requantize(context, { excludeNodes });
    progress({ phase: 'guard', message: `INT8 accuracy with ${fp32Nodes.length} node(s) in FP32` });
    const acc = (await top1Accuracy(q.model, evalData, evalOptions)).accuracy;
    const attempt = { fp32Nodes, accuracy: acc, dropPoints: dropPoints(baseline, acc), withinBudget: within(budget, baseline, acc) };
    attempts.push(attempt);
    return { attempt, model: q.model, qdq: q.report };
  };
  let best = await tryExcluding([]);
  let sensitivity: SensitivityRow[] = [];
  if (!best.attempt.withinBudget) {
    sensitivity = await analyzeSensitivity(context, { runner: options.runner, onProgress: options.onProgress });
    const limit = Math.min(sensitivity.length - 1, options.maxAttempts ?? 16);
    for (let k = 1; k <= limit; k++) {
      const r = await tryExcluding(sensitivity.slice(0, k).map((s) => s.node));
      if (r.attempt.withinBudget) {
        best = r;
        break;
      }
      if (r.attempt.accuracy > best.attempt.accuracy) best = r;
    }
  }
  return {
    baselineAccuracy: baseline,
    evalSamples: evalData.count,
    budget,
    attempts,
    met: best.attempt.withinBudget,
    chosen: best.attempt,
    model: best.model,
    qdq: best.qdq,
    sensitivity,
  };
}

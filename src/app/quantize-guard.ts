/**
 * The accuracy guard and sensitivity analysis for INT8. Sensitivity of a node = SQNR (dB) of the
 * model output against FP32 when only that node (with the data-movement ops behind it) is
 * quantized, on calibration inputs: the lower, the more the node hurts. `--analyze` measures it
 * with one re-quantized model per node (analyzeSensitivity); the guards rank by the batched
 * measurement (./quantize-batched-sensitivity.ts: every node quantized alone, all in one session).
 * The labelled guard measures top-1 on the evaluation set; while the drop exceeds the budget it
 * keeps float the smallest prefix of the ranking that meets it (searchRanking in ./quantize-fidelity.ts:
 * growing, then bisection, not one node at a time; fewer FP32 nodes = faster model) and returns it,
 * or the best model found when none is. Both measurements are src/evaluate's (top-1 with its
 * label policy, agreement against FP32); the analysis uses the first CHECK_SAMPLE_COUNT calibration
 * samples. The label-free fidelity guard (on by default) is ./fidelity.ts; the spaces it searches
 * for each mode (which nodes may stay float, how the model is re-made) are defined here.
 * Imports ./int8, ./qdq, ./registry, ./dynamic, ./fp16, ./fidelity, evaluate, calibration (sample
 * count), data, runtime.
 */
import type { Model } from '../ir/index.js';
import { withinAccuracyBudget, type AccuracyBudget } from '../metrics/accuracy-budget.js';
import { take, type Dataset } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import { CHECK_SAMPLE_COUNT } from '../calibration/index.js';
import { compareOutputs, top1Accuracy } from '../evaluate/index.js';
import type { Int8Context, QuantizeProgress } from '../passes/quantize/int8.js';
import { requantize } from './quantize-int8.js';
import { ABSORBABLE_ACTIVATIONS, QDQ_HANDLERS } from '../passes/quantize/registry.js';
import type { QdqReport } from '../passes/quantize/qdq.js';
import { quantizeDynamic, type DynamicOptions, type DynamicReport } from '../passes/quantize/dynamic.js';
import { convertToFloat16, type Fp16Options, type Fp16Report } from '../passes/quantize/fp16.js';
import { quantizeInt4, type Int4Options, type Int4Report } from '../passes/quantize/int4.js';
import type { FallbackSpace } from './quantize-fidelity.js';

export interface SensitivityRow {
  node: string;
  opType: string;
  /** Output SQNR vs FP32 with only this node quantized (higher is better). */
  sqnrDb: number;
  /** Top-1 agreement with FP32 on the same inputs, when the output has classes. */
  top1Agreement: number | null;
}

export type { AccuracyBudget } from '../metrics/accuracy-budget.js';

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
  /** Evaluation samples whose label is beyond the output's class count (scored as misses); absent when none. */
  outOfRangeLabels?: number;
  /** The output's class count, with outOfRangeLabels. */
  classes?: number;
  budget: AccuracyBudget;
  attempts: GuardAttempt[];
  met: boolean;
  /** The chosen attempt: first within budget, else the most accurate. */
  chosen: GuardAttempt;
  model: Model;
  qdq: QdqReport;
  sensitivity: SensitivityRow[];
}

/**
 * `nodes` plus the Relu/Clip right behind each of them: quantized alone, a Conv then puts its Q
 * after the activation it absorbs, as in the full model (so a node is measured with the ranges the
 * full model uses for it; without them its pre-activation tensor would be quantized instead).
 */
function withAbsorbed(model: Model, nodes: readonly string[]): string[] {
  const names = new Set(nodes);
  const out = [...nodes];
  for (const n of model.graph.allNodes()) {
    if (!names.has(n.name)) continue;
    const readers = n.outputs[0]?.consumers ?? [];
    if (readers.length === 1 && ABSORBABLE_ACTIVATIONS.has(readers[0]!.opType) && readers[0]!.name) out.push(readers[0]!.name);
  }
  return out;
}

/** Rank the quantizable compute nodes, most sensitive first. */
export async function analyzeSensitivity(
  context: Int8Context,
  options: { samples?: number; data?: Dataset; runner?: RunnerOptions; onProgress?: (e: QuantizeProgress) => void } = {},
): Promise<SensitivityRow[]> {
  const full = await requantize(context, {});
  const nodes = full.report.quantized.filter((q) => QDQ_HANDLERS.get(q.opType)?.output !== 'passthrough');
  const data = options.data ?? take(context.calibration, options.samples ?? CHECK_SAMPLE_COUNT);
  const rows: SensitivityRow[] = [];
  const passthroughs = full.report.quantized.filter((q) => QDQ_HANDLERS.get(q.opType)?.output === 'passthrough').map((q) => q.node);
  for (const [i, q] of nodes.entries()) {
    options.onProgress?.({ phase: 'analyze', message: `sensitivity ${i + 1}/${nodes.length}: ${q.node}`, fraction: i / nodes.length });
    const single = await requantize(context, { onlyNodes: withAbsorbed(context.preprocessed, [q.node, ...passthroughs]) });
    const agreement = await compareOutputs(context.preprocessed, single.model, data, { batchSize: context.batchSize, runner: options.runner });
    const first = Object.values(agreement)[0];
    rows.push({ node: q.node, opType: q.opType, sqnrDb: first?.sqnrDb ?? Infinity, top1Agreement: first?.top1Agreement ?? null });
  }
  rows.sort((a, b) => a.sqnrDb - b.sqnrDb);
  return rows;
}

/** Most nodes the labelled guard keeps float. */
export const MAX_GUARD_FLOAT_NODES = 16;

function dropPoints(baseline: number, candidate: number): number {
  return (baseline - candidate) * 100;
}

/**
 * Find the fastest INT8 model within `budget` of FP32 top-1 on `evalData`: full INT8 first, then
 * float sets over the sensitivity ranking (quantize-fidelity.ts's searchRanking: prefixes of 1, 2,
 * 4, ... nodes, bisection, refinement), at most MAX_GUARD_FLOAT_NODES nodes float (and never all). The ranking is the batched
 * one (every node quantized alone, all in one session, on the first CHECK_SAMPLE_COUNT calibration
 * samples), else analyzeSensitivity's one run per node.
 */
export async function guardAccuracy(
  original: Model,
  context: Int8Context,
  evalData: Dataset,
  budget: AccuracyBudget,
  options: { outputName?: string; runner?: RunnerOptions; maxFloatNodes?: number; onProgress?: (e: QuantizeProgress) => void } = {},
): Promise<GuardResult> {
  const progress = options.onProgress ?? (() => undefined);
  const evalOptions = { outputName: options.outputName, runner: options.runner, batchSize: 32 };
  progress({ phase: 'guard', message: `FP32 accuracy on ${evalData.count} samples` });
  const baselineResult = await top1Accuracy(original, evalData, evalOptions);
  const baseline = baselineResult.accuracy;
  const attempts: GuardAttempt[] = [];
  const tryExcluding = async (fp32Nodes: string[]): Promise<{ attempt: GuardAttempt; model: Model; qdq: QdqReport }> => {
    const excludeNodes = [...(context.qdqOptions.excludeNodes ?? []), ...fp32Nodes];
    const q = await requantize(context, { excludeNodes });
    progress({ phase: 'guard', message: `INT8 accuracy with ${fp32Nodes.length} node(s) in FP32` });
    const acc = (await top1Accuracy(q.model, evalData, evalOptions)).accuracy;
    const attempt = { fp32Nodes, accuracy: acc, dropPoints: dropPoints(baseline, acc), withinBudget: withinAccuracyBudget(budget, baseline, acc) };
    attempts.push(attempt);
    return { attempt, model: q.model, qdq: q.report };
  };
  let best = await tryExcluding([]);
  let sensitivity: SensitivityRow[] = [];
  if (!best.attempt.withinBudget) {
    sensitivity = await rankForGuard(context, options);
    const { searchRanking } = await import('./quantize-fidelity.js');
    const units = sensitivity.map((r) => ({ nodes: [r.node], opType: r.opType, sqnrDb: r.sqnrDb, top1Agreement: r.top1Agreement }));
    const limit = Math.min(sensitivity.length - 1, options.maxFloatNodes ?? MAX_GUARD_FLOAT_NODES);
    await searchRanking(units, limit, async (fp32Nodes) => {
      const r = await tryExcluding(fp32Nodes);
      const fewer = r.attempt.withinBudget && (!best.attempt.withinBudget || fp32Nodes.length < best.attempt.fp32Nodes.length);
      if (fewer || (!best.attempt.withinBudget && r.attempt.accuracy > best.attempt.accuracy)) best = r;
      return r.attempt.withinBudget;
    });
  }
  return {
    baselineAccuracy: baseline,
    evalSamples: evalData.count,
    ...(baselineResult.outOfRange > 0 ? { outOfRangeLabels: baselineResult.outOfRange, classes: baselineResult.classes } : {}),
    budget,
    attempts,
    met: best.attempt.withinBudget,
    chosen: best.attempt,
    model: best.model,
    qdq: best.qdq,
    sensitivity,
  };
}

/** The labelled guard's ranking: batched on the first CHECK_SAMPLE_COUNT calibration samples, else one run per node. */
async function rankForGuard(context: Int8Context, options: { runner?: RunnerOptions; onProgress?: (e: QuantizeProgress) => void }): Promise<SensitivityRow[]> {
  const space = await int8FallbackSpace(context);
  const data = take(context.calibration, CHECK_SAMPLE_COUNT);
  options.onProgress?.({ phase: 'analyze', message: `sensitivity of ${space.candidates.length} nodes in one batched pass` });
  const sqnr = await space.rank!(
    space.candidates.map((c) => [c.node]),
    data,
  );
  if (!sqnr) return analyzeSensitivity(context, { runner: options.runner, onProgress: options.onProgress });
  const rows = space.candidates.map((c, i) => ({ node: c.node, opType: c.opType, sqnrDb: sqnr[i]!, top1Agreement: null }));
  return rows.sort((a, b) => a.sqnrDb - b.sqnrDb);
}

/**
 * INT8 static: the candidates are the quantized compute nodes (not the data-movement ones, which
 * follow their neighbours); a model is re-made from the context's statistics (nothing calibrated
 * twice).
 */
export async function int8FallbackSpace(context: Int8Context): Promise<FallbackSpace<QdqReport>> {
  const full = await requantize(context, {});
  const passthrough = (opType: string) => QDQ_HANDLERS.get(opType)?.output === 'passthrough';
  const passthroughs = full.report.quantized.filter((q) => passthrough(q.opType)).map((q) => q.node);
  const base = context.qdqOptions.excludeNodes ?? [];
  return {
    candidates: full.report.quantized.filter((q) => !passthrough(q.opType)).map((q) => ({ node: q.node, opType: q.opType })),
    build: async (floatNodes) => {
      const q = await requantize(context, { excludeNodes: [...base, ...floatNodes] });
      return { model: q.model, extra: q.report };
    },
    only: async (nodes) => (await requantize(context, { onlyNodes: withAbsorbed(context.preprocessed, [...nodes, ...passthroughs]) })).model,
    rank: async (units, data) => {
      const { batchedSensitivity } = await import('./quantize-batched-sensitivity.js');
      return batchedSensitivity(context.preprocessed, full.model, units, data, { batchSize: context.batchSize, runner: context.runner });
    },
  };
}

/** A space whose models are made by a pass that keeps named nodes float (`make(floatNodes)`). */
function namedSpace<R>(candidates: { node: string; opType: string }[], make: (float: readonly string[]) => { model: Model; report: R }): FallbackSpace<R> {
  return {
    candidates,
    build: async (floatNodes) => {
      const r = make(floatNodes);
      return { model: r.model, extra: r.report };
    },
    only: async (nodes) => {
      const keep = new Set(nodes);
      return make(candidates.map((c) => c.node).filter((n) => !keep.has(n))).model;
    },
  };
}

/**
 * A weight-only mode's space: the candidates are the named nodes it quantized (`first.quantized`),
 * kept float by adding them to `excludeNodes` and quantizing again with `make`.
 */
function excludedNodesSpace<R extends { quantized: readonly { node: string; opType: string }[] }>(
  model: Model,
  first: R,
  base: readonly string[],
  make: (excludeNodes: string[]) => { model: Model; report: R },
): FallbackSpace<R> {
  const named = new Set(
    model.graph
      .allNodes()
      .map((n) => n.name)
      .filter(Boolean),
  );
  const candidates = first.quantized.filter((q) => named.has(q.node)).map((q) => ({ node: q.node, opType: q.opType }));
  return namedSpace(candidates, (exclude) => make([...base, ...exclude]));
}

/**
 * INT8 dynamic: the candidates are its quantized nodes; others excluded by name. With `batched`
 * (the first model) its ranking is the batched one.
 */
export function dynamicFallbackSpace(
  model: Model,
  options: DynamicOptions,
  first: DynamicReport,
  batched?: { quantized: Model; runner?: RunnerOptions },
): FallbackSpace<DynamicReport> {
  const space = excludedNodesSpace(model, first, options.excludeNodes ?? [], (excludeNodes) =>
    quantizeDynamic(model, { ...options, excludeNodes, onWarning: undefined }),
  );
  if (!batched) return space;
  return {
    ...space,
    rank: async (units, data) => {
      const { batchedSensitivity } = await import('./quantize-batched-sensitivity.js');
      return batchedSensitivity(model, batched.quantized, units, data, { runner: batched.runner });
    },
  };
}

/** INT4 weight-only: the candidates are the named MatMuls/Gathers it quantized. */
export function int4FallbackSpace(model: Model, options: Int4Options, first: Int4Report): FallbackSpace<Int4Report> {
  return excludedNodesSpace(model, first, options.excludeNodes ?? [], (excludeNodes) => quantizeInt4(model, { ...options, excludeNodes }));
}

/** FP16: the candidates are the named nodes it converted; others kept float32 by nodeBlockList. */
export function fp16FallbackSpace(model: Model, options: Fp16Options, first: Fp16Report): FallbackSpace<Fp16Report> {
  const kept = new Set(first.keptFloat32.map((k) => k.node));
  const base = options.nodeBlockList ?? [];
  const blocked = new Set(base);
  const candidates = model.graph
    .allNodes()
    .filter((n) => n.name && !kept.has(n.name) && !blocked.has(n.name))
    .map((n) => ({ node: n.name, opType: n.opType }));
  return namedSpace(candidates, (block) => convertToFloat16(model, { ...options, nodeBlockList: [...base, ...block], onWarning: undefined }));
}

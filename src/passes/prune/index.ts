/**
 * Pruning passes: magnitude (unstructured), N:M and structured channel pruning, plus `prune`, the
 * entry the CLI calls: run one pass, check the result in onnxruntime, measure sizes, FLOPs and
 * (with labelled data) accuracy before and after. Distillation calls `pruneChannels` directly to
 * build a narrower student.
 * Imports: the modules of this folder, ../../ir, ../../runtime (types), ../../errors.js.
 */
import { UsageError } from '../../errors.js';
import type { Model } from '../../ir/index.js';
import type { ShapeOverrides } from '../../runtime/index.js';
import { pruneChannels, statisticsRequests } from './channel.js';
import { pruneMagnitude } from './magnitude.js';
import { checkRuns, collectChannelStatistics, measureAccuracy, measureFlops, modelSize, type Accuracy, type ModelSize, type RunCheck } from './measure.js';
import type { ChannelCompensation, ChannelPruneReport, MagnitudePruneReport, PruneCriterion, PrunePattern, PruneScope } from './types.js';

export { analyzeChannels, countParams, pruneChannels, statisticsRequests, type ChannelPlan, type ChannelPruneResult } from './channel.js';
export type { ChannelStatistics } from './channel-analysis.js';
export { checkNM, findTargets, nmPruneIndices, pruneMagnitude, type MagnitudePruneResult } from './magnitude.js';
export { checkRuns, collectChannelStatistics, layerFlops, measureAccuracy, measureFlops, modelSize, type Accuracy, type ModelSize, type RunCheck } from './measure.js';
export { PRUNE_OPS, pruneRow, type ChannelOpHandler, type PruneOpRow, type WeightSlot } from './op-handlers.js';
export type * from './types.js';

export interface PruneOptions {
  pattern: PrunePattern;
  /** Fraction to remove: weights (unstructured) or coupled channels (channel). Implied for N:M. */
  sparsity: number;
  scope: PruneScope;
  criterion: PruneCriterion;
  excludeNodes: string[];
  excludeOpTypes: string[];
  pruneFirstLast: boolean;
  /** Channel pattern: round kept channel counts to a multiple of this (default 1). */
  roundTo?: number;
  /** Channel pattern: what replaces a removed channel in the layers that read it (default 'mean'). */
  compensation?: ChannelCompensation;
  /** Sizes of symbolic input dims other than the batch, for the onnxruntime check. */
  shapes?: ShapeOverrides;
  /**
   * Channel pattern: unlabelled data (.npz etc.) to measure channel means and variances on. The
   * means replace removed channels (bias compensation); criterion 'activation' ranks by them.
   */
  calibrationData?: string;
  /** Labelled data (.npz etc.) to measure top-1 accuracy before and after. */
  evalData?: string;
  maxSamples?: number;
}

export interface PruneContext {
  onProgress?: (message: string) => void;
}

export interface PruneResult {
  model: Model;
  report: MagnitudePruneReport | ChannelPruneReport;
  sizeBefore: ModelSize;
  sizeAfter: ModelSize;
  check: RunCheck;
  accuracy?: { before: Accuracy; after: Accuracy };
  /** What the user should know about speed and accuracy (the honest part of the report). */
  notes: string[];
}

export const NOTES = {
  denseRuntime:
    'Zeros shrink the compressed file, but dense CPU runtimes (onnxruntime included) multiply zeros like any number: ' +
    'this model is not faster. For a speed-up use --pattern channel, which removes whole channels.',
  nm: (n: number, m: number): string =>
    `${n}:${m} sparsity is the pattern sparse tensor cores accelerate (NVIDIA Ampere and newer, e.g. through TensorRT); ` +
    'dense CPU runtimes do not run it faster.',
  channel: 'Whole channels were removed: the result is a smaller dense model, faster on every runtime.',
  recovery:
    'Pruning without fine-tuning loses accuracy; recover it with `model-opt distill`, using the unpruned model as the teacher.',
};

/** Run one pruning pass and check and measure its result. The input model is not changed. */
export async function prune(model: Model, options: PruneOptions, context: PruneContext = {}): Promise<PruneResult> {
  const progress = context.onProgress ?? (() => {});
  progress(`pruning (${options.pattern.kind === 'n:m' ? `${options.pattern.n}:${options.pattern.m}` : options.pattern.kind})`);
  let pruned: Model;
  let report: MagnitudePruneReport | ChannelPruneReport;
  const notes: string[] = [];
  if (options.pattern.kind === 'channel') {
    let statistics;
    if (options.calibrationData) {
      progress('measuring channel statistics on the calibration data');
      statistics = await collectChannelStatistics(model, statisticsRequests(model), options.calibrationData, { maxSamples: options.maxSamples });
    } else if (options.criterion === 'activation') {
      throw new UsageError("--criterion activation needs calibration data (--calibration-data)");
    }
    const result = pruneChannels(model, { ...options, statistics });
    pruned = result.model;
    report = result.report;
    progress('measuring FLOPs before and after');
    const [before, after] = [await measureFlops(model, options.shapes), await measureFlops(pruned, options.shapes)];
    for (const layer of result.report.layers) {
      layer.flopsBefore = before.get(layer.node);
      layer.flopsAfter = after.get(layer.node);
    }
    const sum = (m: Map<string, number | undefined>): number => [...m.values()].reduce<number>((s, x) => s + (x ?? 0), 0);
    report.flopsBefore = sum(before);
    report.flopsAfter = sum(after);
    notes.push(NOTES.channel);
  } else {
    const result = pruneMagnitude(model, { ...options, pattern: options.pattern });
    pruned = result.model;
    report = result.report;
    notes.push(NOTES.denseRuntime);
    if (options.pattern.kind === 'n:m') notes.push(NOTES.nm(options.pattern.n, options.pattern.m));
  }
  progress('checking the pruned model in onnxruntime');
  const check = await checkRuns(model, pruned, options.shapes);
  const result: PruneResult = { model: pruned, report, sizeBefore: modelSize(model), sizeAfter: modelSize(pruned), check, notes };
  if (options.evalData) {
    progress('measuring accuracy before and after');
    const evalOptions = { maxSamples: options.maxSamples };
    result.accuracy = {
      before: await measureAccuracy(model, options.evalData, evalOptions),
      after: await measureAccuracy(pruned, options.evalData, evalOptions),
    };
  }
  notes.push(NOTES.recovery);
  return result;
}

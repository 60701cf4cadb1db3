/**
 * `prune` as the pipeline runs it: one pruning pass (passes/prune, pure) with the statistics it
 * declares collected through the calibration service first, then the result checked in onnxruntime
 * and measured (sizes, FLOPs, with a labelled Dataset the accuracy before and after).
 * May import: errors, ir, data (types), runtime, passes/prune, app/prune-measure.
 */
import { UsageError } from '../errors.js';
import { isTensorType, type Model } from '../ir/index.js';
import type { Dataset, InputValues } from '../data/index.js';
import { inferShapesByRunning, type ShapeOverrides } from '../runtime/index.js';
import type { ChannelStatistics } from '../passes/prune/channel-analysis.js';
import { pruneChannels, statisticsRequests } from '../passes/prune/channel.js';
import { magnitudeStatisticsRequests, pruneMagnitude } from '../passes/prune/magnitude.js';
import { channelWarnings, newlyZeroed, nothingChannelPruned, nothingMagnitudePruned, unmatchedExclusions } from '../passes/prune/outcome.js';
import {
  checkRuns,
  collectChannelStatistics,
  measureAccuracy,
  measureFlops,
  modelSize,
  probeFeeds,
  type Accuracy,
  type ModelSize,
  type ProbeOptions,
  type RunCheck,
} from './prune-measure.js';
import type {
  ChannelCompensation,
  ChannelPruneReport,
  MagnitudePruneReport,
  MagnitudeScope,
  PruneCriterion,
  PrunePattern,
  UnstructuredCriterion,
} from '../passes/prune/types.js';

export interface PruneOptions {
  pattern: PrunePattern;
  /** Fraction to remove: weights (unstructured) or coupled channels (channel). Implied for N:M. */
  sparsity: number;
  /** 'output' (rank within each filter / row) is for unstructured and N:M only. */
  scope: MagnitudeScope;
  /**
   * Channel: l1 | l2 | activation. Unstructured / N:M: activation (|w| x input RMS, needs
   * calibration data) or anything else for plain |w|.
   */
  criterion: PruneCriterion | UnstructuredCriterion;
  /**
   * Unstructured / N:M with calibration data: fold the zeroed weights' mean contribution into the
   * bias (default true when calibration data is given).
   */
  biasCorrection?: boolean;
  excludeNodes: string[];
  excludeOpTypes: string[];
  pruneFirstLast: boolean;
  /** Channel pattern: round kept channel counts to a multiple of this (default 1). */
  roundTo?: number;
  /** Channel pattern: what replaces a removed channel in the layers that read it (default 'mean'). */
  compensation?: ChannelCompensation;
  /**
   * Sizes of symbolic input dims other than the batch, for the onnxruntime check and FLOPs on
   * random inputs (when neither data set is given: with data, the checks run on its first samples).
   */
  shapes?: ShapeOverrides;
  /** `--input` values: inputs given once for all samples of the checks' random inputs. */
  inputValues?: InputValues;
  /**
   * Unlabelled data to measure channel means and variances on (its first maxSamples samples). Channel pattern: the
   * means replace removed channels (bias compensation); criterion 'activation' ranks by them.
   * Unstructured / N:M: criterion 'activation' ranks weights by |w| x input RMS, and bias
   * correction keeps each layer's mean output.
   */
  calibrationData?: Dataset;
  /** Labelled data to measure top-1 accuracy before and after (its first maxSamples samples). */
  evalData?: Dataset;
  /** Use at most this many samples of calibrationData and evalData. */
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
  /**
   * Where the model differs from what was asked: an --exclude-nodes name that matches no node, a
   * channel group pruned far more or less than the sparsity (rounding), with its real fraction.
   */
  warnings: string[];
}

export const NOTES = {
  denseRuntime:
    'Zeros shrink the compressed file, but dense CPU runtimes (onnxruntime included) multiply zeros like any number: ' +
    'this model does the same work as the input. To remove work, use --pattern channel, which removes whole channels (--measure-speed times the result).',
  nm: (n: number, m: number): string =>
    (n === 2 && m === 4
      ? '2:4 sparsity is the pattern sparse tensor cores accelerate (NVIDIA Ampere and newer, e.g. through TensorRT); '
      : `${n}:${m} sparsity has no sparse kernels in common runtimes (NVIDIA's sparse tensor cores take 2:4 only); `) +
    'dense CPU runtimes do the same work as for the input.',
  channel: 'Whole channels were removed: the result is a smaller dense model, with fewer multiply-adds on every runtime (--measure-speed times it).',
  recovery: 'Pruning without fine-tuning loses accuracy; recover it with `model-opt distill`, using the unpruned model as the teacher.',
};

/**
 * One pass over the calibration data for unstructured / N:M pruning: per input channel mean and
 * variance of every pruned layer's input. With `spatial`, also the mean of every element of a
 * sample for Convs whose taps see the borders differently (padding, stride, kernel > 1), captured
 * through a Flatten added to a copy of the model: bias correction is then exact at the borders
 * too. Off by default: on the example it measured slightly worse than per-channel means
 * (docs/prune.md), and it costs a shape-inference run and C x H x W numbers per layer.
 */
export async function collectMagnitudeStatistics(
  model: Model,
  options: Pick<PruneOptions, 'excludeNodes' | 'excludeOpTypes' | 'pruneFirstLast' | 'maxSamples'>,
  data: Dataset,
  collect: { spatial?: boolean } = {},
): Promise<{ statistics: ChannelStatistics; spatialMeans: Map<string, { dims: number[]; mean: Float64Array }> }> {
  const requests = magnitudeStatisticsRequests(model, options);
  const copy = model.clone();
  const flat = new Map<string, { flatName: string; dims: number[] }>();
  if (collect.spatial && requests.some((r) => r.spatial)) {
    // Per-sample dims of the activations, observed at batch 1 on a throw-away copy.
    const probe = model.clone();
    for (const node of probe.graph.nodes) for (const out of node.outputs) if (!out.isGraphOutput()) out.type = undefined;
    await inferShapesByRunning(probe, probeFeeds(probe, 1, { data }), { label: 'model for shape inference' });
    for (const r of requests) {
      const type = probe.graph.localValue(r.name)?.type;
      // Dim 0 is the batch (possibly symbolic on a model input); the rest must be known.
      const sample = isTensorType(type) ? type.shape?.slice(1) : undefined;
      const dims = sample?.every((d) => typeof d === 'number') ? (sample as number[]) : undefined;
      const source = copy.graph.localValue(r.name);
      if (!r.spatial || !dims || !source) continue;
      const flatName = copy.graph.uniqueName(`${r.name}_flat_statistics`);
      copy.graph.addNode({ opType: 'Flatten', inputs: [source], outputs: [flatName], attributes: { axis: 1 } });
      flat.set(r.name, { flatName, dims });
    }
  }
  const all = [...requests.map(({ name, axis }) => ({ name, axis })), ...[...flat.values()].map((f) => ({ name: f.flatName, axis: -1 }))];
  const collected = await collectChannelStatistics(copy, all, data, { maxSamples: options.maxSamples });
  const spatialMeans = new Map<string, { dims: number[]; mean: Float64Array }>();
  for (const [name, f] of flat) {
    const s = collected.get(f.flatName);
    if (s) spatialMeans.set(name, { dims: f.dims, mean: s.mean });
    collected.delete(f.flatName);
  }
  return { statistics: collected, spatialMeans };
}

/** Run one pruning pass and check and measure its result. The input model is not changed. */
export async function prune(model: Model, options: PruneOptions, context: PruneContext = {}): Promise<PruneResult> {
  const progress = context.onProgress ?? (() => {});
  if (model.graph.allNodes().some((n) => n.name === '')) {
    // Layers, exclusions and per-layer FLOPs go by node name: give unnamed nodes stable names.
    model = model.clone();
    model.graph.nameUnnamedNodes();
  }
  progress(`pruning (${options.pattern.kind === 'n:m' ? `${options.pattern.n}:${options.pattern.m}` : options.pattern.kind})`);
  // The checks (load and run, FLOPs) run on the data's first samples when data is given.
  const probe: ProbeOptions = { shapes: options.shapes, inputValues: options.inputValues, data: options.calibrationData ?? options.evalData };
  let pruned: Model;
  let report: MagnitudePruneReport | ChannelPruneReport;
  const notes: string[] = [];
  const warnings = unmatchedExclusions(model, options.excludeNodes);
  if (options.pattern.kind === 'channel') {
    if (options.scope === 'output') throw new UsageError("scope 'output' applies to unstructured and N:M pruning only");
    if (options.criterion === 'magnitude') throw new UsageError("channel pruning ranks by l1, l2 or activation, not 'magnitude'");
    if (options.biasCorrection === false)
      throw new UsageError('--no-bias-correction applies to unstructured and N:M pruning; channel pruning has --compensation');
    let statistics;
    if (options.calibrationData) {
      progress('measuring channel statistics on the calibration data');
      statistics = await collectChannelStatistics(model, statisticsRequests(model), options.calibrationData, { maxSamples: options.maxSamples });
    } else if (options.criterion === 'activation') {
      throw new UsageError('--criterion activation needs calibration data (--calibration-data)');
    }
    const result = pruneChannels(model, { ...options, scope: options.scope, criterion: options.criterion, statistics });
    // A model written unchanged would contradict the report: refuse, saying why (nothing is written).
    if (result.report.channelsRemoved === 0) throw new UsageError(nothingChannelPruned(model, result.report));
    pruned = result.model;
    report = result.report;
    warnings.push(...channelWarnings(result.report));
    progress('measuring FLOPs before and after');
    const [before, after] = [await measureFlops(model, probe), await measureFlops(pruned, probe)];
    for (const layer of result.report.layers) {
      layer.flopsBefore = before.get(layer.node);
      layer.flopsAfter = after.get(layer.node);
    }
    const sum = (m: Map<string, number | undefined>): number => [...m.values()].reduce<number>((s, x) => s + (x ?? 0), 0);
    report.flopsBefore = sum(before);
    report.flopsAfter = sum(after);
    notes.push(NOTES.channel);
  } else {
    // Options of channel pruning would be ignored here: refuse them rather than report another criterion.
    if (options.criterion === 'l1' || options.criterion === 'l2') {
      throw new UsageError(`--criterion ${options.criterion} ranks channels (--pattern channel); unstructured and N:M rank by magnitude or activation`);
    }
    if (options.compensation !== undefined) throw new UsageError('--compensation applies to --pattern channel');
    const criterion: UnstructuredCriterion = options.criterion === 'activation' ? 'activation' : 'magnitude';
    const biasCorrection = options.biasCorrection ?? options.calibrationData !== undefined;
    let statistics;
    if (criterion === 'activation' || biasCorrection) {
      if (!options.calibrationData) {
        throw new UsageError(`${criterion === 'activation' ? '--criterion activation' : 'bias correction'} needs calibration data (--calibration-data)`);
      }
      progress('measuring input statistics of the pruned layers on the calibration data');
      statistics = await collectMagnitudeStatistics(model, options, options.calibrationData);
    }
    const result = pruneMagnitude(model, { ...options, pattern: options.pattern, criterion, biasCorrection, ...statistics });
    if (newlyZeroed(result.report) === 0) throw new UsageError(nothingMagnitudePruned(model, result.report));
    pruned = result.model;
    report = result.report;
    notes.push(NOTES.denseRuntime);
    if (options.pattern.kind === 'n:m') notes.push(NOTES.nm(options.pattern.n, options.pattern.m));
  }
  progress('checking the pruned model in onnxruntime');
  const check = await checkRuns(model, pruned, probe);
  const result: PruneResult = { model: pruned, report, sizeBefore: modelSize(model), sizeAfter: modelSize(pruned), check, notes, warnings };
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

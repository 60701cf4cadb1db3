/**
 * Pruned + distilled candidates for `optimize --time-budget` (issue 16 item 2): for each width
 * (fraction of channels kept), narrow the FP32 model by structured channel pruning (L2 ranking,
 * channel counts rounded to a multiple of 8, removed channels replaced by their means measured on
 * the data), check with a short paired timing that the narrow model is faster than FP32 at the
 * batch size and threads asked for (distilling a model that is not faster would waste the budget),
 * then distill it back from the FP32 model on the given inputs without labels (alpha 0: soft
 * targets for class scores, MSE on the outputs otherwise) for as many epochs as the remaining
 * budget allows (samples/s measured on a few probe steps first), check top-1 agreement with FP32
 * before and after on a held-out 20% of the data (the undistilled pruned model is written when
 * distillation lowered it), and write it to `dir`. A width the
 * budget cannot reach, or whose distillation is cut by the deadline, is dropped with a warning.
 * The caller (./optimize.ts) measures speed and fidelity like every other candidate.
 * May import: errors, ir, data, app/*; passes/prune, onnx, evaluate, bench, train (lazily).
 */
import path from 'node:path';
import { UsageError } from '../errors.js';
import { isTensorType, type Model } from '../ir/index.js';
import type { Dataset } from '../data/index.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import { makeTempFolder, removeTempFolder } from '../util/temp-folder.js';
import type { WorkflowEvents } from './events.js';

/** Widths tried by default: 30% and 50% of the channels removed. */
export const DEFAULT_PRUNE_WIDTHS: readonly number[] = [0.7, 0.5];
/**
 * Adam's learning rate for distillation: 3e-3 reached 96.5% held-out agreement in 11 epochs of 256
 * images on the hard-swish stand-in where 1e-3 reached 76% in 6 (docs/optimize.md).
 */
export const DEFAULT_PRUNE_LEARNING_RATE = 3e-3;
/** Kept channel counts are rounded to a multiple of this: odd counts make CPU kernels slower (docs/optimize.md). */
export const PRUNE_ROUND_TO = 8;

export interface PruneDistillOptions extends WorkflowEvents {
  /** Folder the candidates are written to (must exist). */
  dir: string;
  /** Fractions of channels kept, tried in this order (default DEFAULT_PRUNE_WIDTHS). */
  widths?: number[];
  /** Wall-clock budget for everything this function does, in ms. */
  timeBudgetMs: number;
  /** Batch size the model will run at, for the speed pre-check (default 1). */
  batchSize?: number;
  /** onnxruntime intra-op threads for the speed pre-check (default 1). */
  threads?: number;
  /** Held-out inputs: top-1 agreement of each candidate with FP32 (class-score outputs only). */
  evalData?: Dataset;
  /** Round kept channel counts to a multiple of this (default PRUNE_ROUND_TO). */
  roundTo?: number;
  /** Training batch size (default 32). */
  trainBatchSize?: number;
  /** Adam learning rate, cosine schedule (default DEFAULT_PRUNE_LEARNING_RATE). */
  learningRate?: number;
  /**
   * The caller's top-1 agreement budget: when a width's distilled model misses it on the validation
   * split, narrower widths are not tried (they would miss it too); the budget goes to no one else.
   */
  minTop1Agreement?: number;
  /** Most epochs per width however much time is left (default 30). */
  maxEpochs?: number;
  /**
   * A work budget instead of the wall clock: every width distills exactly this many epochs, and
   * the time budget no longer cuts a width or its training (reproducible runs and tests, where a
   * loaded machine must not change the outcome).
   */
  epochsPerWidth?: number;
  /** Skip the speed pre-check (distill every width). */
  skipSpeedCheck?: boolean;
  /** The output distillation matches (default: the model's first output). */
  outputName?: string;
}

export interface PruneDistillCandidate {
  /** The written model. */
  path: string;
  /** Fraction of channels kept (asked for; rounding may keep a few more or fewer). */
  width: number;
  description: string;
  /** Seconds spent on this candidate: pruning, speed pre-check, distillation, writing. */
  seconds: number;
  distill: {
    epochs: number;
    /** Training samples per distillation pass. */
    samples: number;
    samplesPerSecond: number;
    loss: 'kd' | 'mse';
    /** Top-1 agreement with FP32 on options.evalData (class-score outputs only). */
    agreement?: number;
    /**
     * Top-1 agreement with FP32 on the validation split (the last VALIDATION_FRACTION of the data),
     * before and after distillation; when distillation lowered it, the undistilled pruned model was
     * written instead (`kept: 'pruned'`).
     */
    validation?: { samples: number; before: number; after: number };
    kept: 'distilled' | 'pruned';
    /** The training backend distillation ran on ('onnxruntime', or the wasm fallback when a node has no gradient rule). */
    backend?: string;
  };
  /** Speed-up of the pruned model over FP32 measured by the pre-check (estimate), when run. */
  precheckSpeedup?: number;
}

/** Thrown from the trainer's progress callback to stop a distillation at the deadline. */
class DeadlineReached extends Error {}

const MIN_EPOCHS = 1;
/** Share of the data held out (at most MAX_VALIDATION samples, only from MIN_SPLIT samples up) to check that distillation helped. */
const VALIDATION_FRACTION = 0.2;
const MAX_VALIDATION = 64;
const MIN_SPLIT = 40;
/** Probe: this many training steps to measure samples/s (the first step warms kernels up and is not counted). */
const PROBE_STEPS = 3;

/** 'kd' when the first output looks like class scores ([N, C], C > 1), else 'mse'. */
function lossFor(model: Model): 'kd' | 'mse' {
  const type = model.graph.outputs[0]?.type;
  const shape = isTensorType(type) ? type.shape : undefined;
  const classes = shape?.length === 2 ? shape[1] : undefined;
  return typeof classes === 'number' && classes > 1 ? 'kd' : 'mse';
}

/** Shape overrides for the timing: the data's first sample with the batch dim set, only when a non-batch input dim is symbolic. */
function timingShapes(model: Model, shapes: ShapeOverrides | undefined, batchSize: number): ShapeOverrides | undefined {
  const symbolic = model.graph.inputs.some((v) => {
    if (v.initializer) return false;
    const s = isTensorType(v.type) ? v.type.shape : undefined;
    return !s || s.slice(1).some((d) => typeof d !== 'number');
  });
  if (!symbolic || !shapes) return undefined;
  // Keyed by input names: a null-prototype record.
  return Object.assign(
    Object.create(null),
    Object.fromEntries(Object.entries(shapes).map(([k, dims]) => [k, Array.isArray(dims) && dims.length > 0 ? [batchSize, ...dims.slice(1)] : dims])),
  ) as ShapeOverrides;
}

/** The training and validation splits of the data (labels dropped). */
interface DataSplit {
  train: Dataset;
  /** The last VALIDATION_FRACTION of the data (class-score outputs only: agreement is top-1). */
  validation?: Dataset;
  /** Training batch: options.trainBatchSize (default 32), at most the training samples. */
  trainBatch: number;
}

async function splitData(data: Dataset, loss: 'kd' | 'mse', trainBatchSize: number | undefined): Promise<DataSplit> {
  const { take, sliceSamples } = await import('../data/index.js');
  const validationCount = loss === 'kd' && data.count >= MIN_SPLIT ? Math.min(MAX_VALIDATION, Math.round(data.count * VALIDATION_FRACTION)) : 0;
  const trainCount = data.count - validationCount;
  const train: Dataset = { ...take(data, trainCount), labels: undefined };
  const validation: Dataset | undefined =
    validationCount > 0
      ? {
          ...data,
          count: validationCount,
          inputs: Object.assign(
            Object.create(null),
            Object.fromEntries(Object.entries(data.inputs).map(([k, t]) => [k, sliceSamples(t, trainCount, data.count)])),
          ),
          labels: undefined,
          outputs: undefined,
          sequences: undefined,
          notes: [],
        }
      : undefined;
  return { train, validation, trainBatch: Math.min(trainBatchSize ?? 32, train.count) };
}

/** The lazily loaded modules the search uses. */
interface PruneModules {
  pruneChannels: typeof import('./prune-passes.js')['pruneChannels'];
  saveModel: typeof import('../onnx/index.js')['saveModel'];
  distill: typeof import('./distill.js')['distill'];
  studentForOnnxruntime: typeof import('./distill.js')['studentForOnnxruntime'];
  take: typeof import('../data/index.js')['take'];
}

/** One search under way: the model, its settings and data, what was measured so far, the deadline. */
interface PruneSearch extends DataSplit {
  model: Model;
  options: PruneDistillOptions;
  modules: PruneModules;
  progress: (message: string) => void;
  warn: (message: string) => void;
  deadline: number;
  /** Widths still to try (cut short when a width misses options.minTop1Agreement). */
  widths: number[];
  batchSize: number;
  threads: number;
  roundTo: number;
  learningRate: number;
  maxEpochs: number;
  loss: 'kd' | 'mse';
  /** Channel statistics for pruning, measured once. */
  statistics: Awaited<ReturnType<typeof import('./prune-passes.js')['collectChannelStatistics']>>;
  scratch: string;
  /** The FP32 model as a file, for the speed pre-check. */
  fp32Path: string;
  shapes: ShapeOverrides | undefined;
  /**
   * Training throughput (samples/s) and the fixed cost of one distillation (backend, teacher
   * outputs, validation), from the probe and then from each finished distillation.
   */
  samplesPerSecond?: number;
  overheadSeconds: number;
  /** The backend the last distillation trained on (from its report). */
  backend?: string;
}

const secondsLeft = (s: PruneSearch): number => (s.deadline - performance.now()) / 1000;

/** The speed pre-check: a short paired timing of the pruned model against FP32. Returns its speed-up, or undefined (with a warning) when it is not faster. */
async function precheckSpeedup(s: PruneSearch, pruned: Model, i: number, label: string): Promise<{ estimate: number } | undefined> {
  const { options, batchSize, threads } = s;
  const prunedPath = path.join(s.scratch, `pruned-${i}.onnx`);
  await s.modules.saveModel(pruned, prunedPath);
  const durationMs = Math.max(300, Math.min(3000, 0.04 * options.timeBudgetMs));
  s.progress(
    `${label}: timing the pruned model against FP32 (batch ${batchSize}, ${threads} thread${threads === 1 ? '' : 's'}, ${(durationMs / 1000).toFixed(1)} s)`,
  );
  const { benchmark } = await import('../benchmark/index.js');
  const bench = await benchmark(
    {
      baseline: s.fp32Path,
      candidates: [prunedPath],
      durationMs,
      warmup: 5,
      threads,
      batchSizes: [batchSize],
      shapes: s.shapes,
      measureMemory: false,
      bootstrapResamples: 500,
    },
    { onWarning: s.warn },
  );
  const speedup = bench.models[1]?.latency[0]?.speedup;
  if (!speedup || speedup.estimate <= 1) {
    s.warn(
      `${label}: the pruned model is not faster than FP32 (${speedup ? `${speedup.estimate.toFixed(2)}x [${speedup.low.toFixed(2)}, ${speedup.high.toFixed(2)}]` : 'not measured'}): not distilled`,
    );
    return undefined;
  }
  return { estimate: speedup.estimate };
}

/** Probe: a few distillation steps on a small slice, timed from the end of the first step; sets the search's throughput and overhead. */
async function probeTrainingSpeed(s: PruneSearch, pruned: Model, label: string): Promise<void> {
  const { train, trainBatch } = s;
  const probeCount = Math.min(train.count, trainBatch * PROBE_STEPS);
  const stamps: { at: number; samples: number }[] = [];
  s.progress(`${label}: measuring training speed (${PROBE_STEPS} steps of ${trainBatch})`);
  const p0 = performance.now();
  await s.modules.distill({
    student: pruned,
    teacher: s.model,
    outputName: s.options.outputName,
    train: s.modules.take(train, probeCount),
    alpha: 0,
    loss: s.loss,
    epochs: 1,
    batchSize: trainBatch,
    learningRate: s.learningRate,
    onProgress: (e) => {
      if (e.phase === 'train') stamps.push({ at: performance.now(), samples: (e.step ?? 0) * trainBatch });
    },
  });
  const probeSeconds = (performance.now() - p0) / 1000;
  const first = stamps[0];
  const last = stamps[stamps.length - 1];
  let samplesPerSecond: number;
  if (first && last && last.at > first.at) samplesPerSecond = (last.samples - first.samples) / ((last.at - first.at) / 1000);
  else if (first) samplesPerSecond = first.samples / Math.max(1e-3, (first.at - p0) / 1000);
  else samplesPerSecond = probeCount / Math.max(1e-3, probeSeconds);
  const trainedSeconds = ((stamps.length > 0 ? stamps.length : 1) * trainBatch) / samplesPerSecond;
  s.samplesPerSecond = samplesPerSecond;
  s.overheadSeconds = Math.max(0, probeSeconds - trainedSeconds);
}

/** How long width i may distill: its epochs (undefined, with a warning, when not even MIN_EPOCHS fit). */
function planEpochs(s: PruneSearch, i: number, label: string): { epochs: number; steps: number; epochSeconds: number } | undefined {
  const { train, trainBatch, overheadSeconds } = s;
  const fixed = s.options.epochsPerWidth;
  if (fixed !== undefined) {
    const steps = Math.max(1, Math.floor(train.count / trainBatch));
    return { epochs: fixed, steps, epochSeconds: (steps * trainBatch) / s.samplesPerSecond! };
  }
  // This width's share of what is left: an even split over the widths still to try.
  const share = secondsLeft(s) / (s.widths.length - i);
  const trainSeconds = share - overheadSeconds * 1.2 - 0.5;
  const steps = Math.max(1, Math.floor(train.count / trainBatch));
  const epochSeconds = (steps * trainBatch) / s.samplesPerSecond!;
  const epochs = Math.min(s.maxEpochs, Math.floor(trainSeconds / epochSeconds));
  if (epochs < MIN_EPOCHS) {
    s.warn(
      `${label}: not distilled: one pass over ${train.count} samples takes ~${epochSeconds.toFixed(1)} s (+${overheadSeconds.toFixed(1)} s setup), ` +
        `${Math.max(0, share).toFixed(1)} s of the budget is left for it`,
    );
    return undefined;
  }
  return { epochs, steps, epochSeconds };
}

/** Distills the pruned model for `epochs`; undefined (with a warning) when the deadline cut it. Updates the throughput and overhead. */
async function distillWidth(
  s: PruneSearch,
  pruned: Model,
  plan: { epochs: number; steps: number; epochSeconds: number },
  label: string,
): Promise<{ model: Model; seconds: number } | undefined> {
  const { train, trainBatch, loss } = s;
  const { epochs, steps, epochSeconds } = plan;
  s.progress(
    `${label}: distilling from FP32 without labels (${loss === 'kd' ? 'soft targets' : 'MSE on the outputs'}, ${epochs} epoch${epochs === 1 ? '' : 's'} of ${train.count} samples, ~${(epochs * epochSeconds).toFixed(0)} s)`,
  );
  const d0 = performance.now();
  let trained: Awaited<ReturnType<PruneModules['distill']>>;
  let announced = false;
  try {
    trained = await s.modules.distill({
      student: pruned,
      teacher: s.model,
      outputName: s.options.outputName,
      train,
      alpha: 0,
      loss,
      epochs,
      batchSize: trainBatch,
      learningRate: s.learningRate,
      onWarning: s.warn,
      onProgress: (e) => {
        if (e.phase === 'backend' && !announced) {
          announced = true;
          s.progress(`${label}: ${e.message}`);
        }
        if (e.phase === 'train' && performance.now() > s.deadline) throw new DeadlineReached(`epoch ${e.epoch}/${e.epochs}`);
        if (e.phase === 'train' && e.step === e.steps) s.progress(`${label}: epoch ${e.epoch}/${e.epochs} loss ${e.loss?.toExponential(2)}`);
      },
    });
  } catch (error) {
    if (!(error instanceof DeadlineReached)) throw error;
    s.warn(`${label}: distillation stopped at ${error.message} when the time budget ran out: candidate dropped`);
    return undefined;
  }
  const distillSeconds = (performance.now() - d0) / 1000;
  s.samplesPerSecond = trained.report.samplesPerSecond;
  s.backend = trained.report.backend.name;
  s.overheadSeconds = Math.max(0, distillSeconds - (epochs * steps * trainBatch) / s.samplesPerSecond);
  return { model: trained.model, seconds: distillSeconds };
}

/** Which model is written (the pruned one when distillation lowered held-out agreement), with the agreements measured. */
interface DistillCheck {
  written: Model;
  kept: 'distilled' | 'pruned';
  validation?: { samples: number; before: number; after: number };
  /** Top-1 agreement of the written model with FP32 on options.evalData. */
  agreement?: number;
}

async function checkDistilled(s: PruneSearch, pruned: Model, distilled: Model, label: string): Promise<DistillCheck> {
  const { model, validation } = s;
  const { compareOutputs } = await import('../evaluate/index.js');
  const first = model.graph.outputs[0]!.name;
  const agreementOf = async (m: Model, on: Dataset): Promise<number | undefined> => (await compareOutputs(model, m, on))[first]?.top1Agreement ?? undefined;
  let written = distilled;
  let kept: 'distilled' | 'pruned' = 'distilled';
  let check: DistillCheck['validation'];
  if (validation) {
    const [before, after] = [await agreementOf(pruned, validation), await agreementOf(distilled, validation)];
    if (before !== undefined && after !== undefined) {
      check = { samples: validation.count, before, after };
      if (after < before) {
        written = pruned;
        kept = 'pruned';
        s.warn(
          `${label}: distillation lowered top-1 agreement with FP32 on ${validation.count} held-out samples ` +
            `(${(before * 100).toFixed(1)}% -> ${(after * 100).toFixed(1)}%): writing the pruned model without it`,
        );
      }
    }
  }
  const agreement = s.options.evalData ? await agreementOf(written, s.options.evalData) : undefined;
  return { written, kept, validation: check, agreement };
}

/**
 * The pruned model at opset 13 when it is older, so that it trains on onnxruntime: the onnxruntime
 * training graph needs opset 13, and below it `auto` fell back to tfjs-wasm, about 10x slower on a
 * MobileNetV3-style student (issue 32: 6 samples/s inside optimize against 67 for `distill
 * --backend onnxruntime`). The written candidate then declares opset 13. When the upgrade is
 * blocked the model is kept as it is (and trains on wasm), with a warning.
 */
function forOnnxruntime(s: PruneSearch, pruned: Model, label: string): Model {
  const { model, from, blockers } = s.modules.studentForOnnxruntime(pruned);
  if (model) {
    if (model !== pruned) s.progress(`${label}: opset ${from} upgraded to 13 to train on onnxruntime (the candidate declares opset 13)`);
    return model;
  }
  s.warn(`${label}: opset ${from} cannot be upgraded to 13 (${blockers[0] ?? 'blocked'}): distilled on the slower tfjs backend`);
  return pruned;
}

/** Prune, pre-check, distill, check and write width i; undefined when the width is dropped (with a warning). */
async function tryWidth(s: PruneSearch, i: number): Promise<PruneDistillCandidate | undefined> {
  const { options, roundTo, loss, train } = s;
  const width = s.widths[i]!;
  const t0 = performance.now();
  const label = `width ${width}`;
  if (secondsLeft(s) <= 0) {
    s.warn(`${label}: not tried, the time budget was spent`);
    return undefined;
  }
  s.progress(`${label}: pruning channels (keeping ${Math.round(width * 100)}%, multiples of ${roundTo})`);
  const pruned = forOnnxruntime(s, s.modules.pruneChannels(s.model, { width, roundTo, statistics: s.statistics }).model, label);
  let speedup: { estimate: number } | undefined;
  if (!options.skipSpeedCheck) {
    speedup = await precheckSpeedup(s, pruned, i, label);
    if (!speedup) return undefined;
  }
  if (s.samplesPerSecond === undefined) await probeTrainingSpeed(s, pruned, label);
  const plan = planEpochs(s, i, label);
  if (!plan) return undefined;
  const { epochs } = plan;
  const trained = await distillWidth(s, pruned, plan, label);
  if (!trained) return undefined;
  const checked = await checkDistilled(s, pruned, trained.model, label);
  const reached = checked.validation ? Math.max(checked.validation.before, checked.validation.after) : checked.agreement;
  if (options.minTop1Agreement !== undefined && reached !== undefined && reached < options.minTop1Agreement && i < s.widths.length - 1) {
    s.warn(
      `${label}: top-1 agreement with FP32 ${(reached * 100).toFixed(1)}% < ${(options.minTop1Agreement * 100).toFixed(0)}% on held-out samples: narrower widths not tried`,
    );
    s.widths.length = i + 1;
  }
  const file = path.join(options.dir, `pruned-${Math.round(width * 100)}.onnx`);
  s.progress(`${label}: writing ${file}`);
  await s.modules.saveModel(checked.written, file);
  const seconds = (performance.now() - t0) / 1000;
  return {
    path: file,
    width,
    description:
      `channels pruned to ${Math.round(width * 100)}% (multiples of ${roundTo}), ` +
      (checked.kept === 'distilled'
        ? `distilled from FP32 without labels (${loss === 'kd' ? 'soft targets' : 'MSE'}, ${epochs} epoch${epochs === 1 ? '' : 's'} of ${train.count} samples, ${trained.seconds.toFixed(0)} s)`
        : `not distilled (${epochs} epoch${epochs === 1 ? '' : 's'} lowered agreement with FP32 on held-out samples)`),
    seconds,
    distill: {
      epochs,
      samples: train.count,
      samplesPerSecond: s.samplesPerSecond!,
      loss,
      ...(checked.agreement !== undefined ? { agreement: checked.agreement } : {}),
      ...(checked.validation ? { validation: checked.validation } : {}),
      kept: checked.kept,
      ...(s.backend !== undefined ? { backend: s.backend } : {}),
    },
    ...(speedup !== undefined ? { precheckSpeedup: speedup.estimate } : {}),
  };
}

/**
 * Prune + distill candidates within `timeBudgetMs`. The input model is not modified; `data`'s
 * labels, if any, are not used. Events come from `events`, else from the options' callbacks.
 * Steps: split the data, measure channel statistics once, then each width in turn (tryWidth).
 */
export async function pruneDistillCandidates(
  model: Model,
  data: Dataset,
  options: PruneDistillOptions,
  events: WorkflowEvents = {},
): Promise<PruneDistillCandidate[]> {
  const started = performance.now();
  // A work budget (epochsPerWidth) replaces the deadline: the outcome must not depend on the machine.
  const deadline = options.epochsPerWidth !== undefined ? Infinity : started + options.timeBudgetMs;
  if (options.epochsPerWidth !== undefined && !(Number.isInteger(options.epochsPerWidth) && options.epochsPerWidth >= 1))
    throw new UsageError(`epochs per width must be a positive integer, got ${options.epochsPerWidth}`);
  const progress = events.onProgress ?? options.onProgress ?? (() => undefined);
  const warn = events.onWarning ?? options.onWarning ?? (() => undefined);
  const widths = [...(options.widths ?? DEFAULT_PRUNE_WIDTHS)];
  for (const w of widths) if (!(w > 0 && w < 1)) throw new UsageError(`prune widths must be in (0, 1), got ${w}`);
  if (!(options.timeBudgetMs > 0)) throw new UsageError(`the time budget must be positive, got ${options.timeBudgetMs} ms`);
  if (data.count < 2) throw new UsageError(`${data.source}: distillation needs at least 2 samples, got ${data.count}`);
  const loss = lossFor(model);
  const split = await splitData(data, loss, options.trainBatchSize);

  const [{ pruneChannels, collectChannelStatistics, statisticsRequests }, { saveModel }, { distill, studentForOnnxruntime }, { checkShapes }, { take }] =
    await Promise.all([
      import('./prune-passes.js'),
      import('../onnx/index.js'),
      import('./distill.js'),
      import('./data-shapes.js'),
      import('../data/index.js'),
    ]);
  const candidates: PruneDistillCandidate[] = [];
  const scratch = await makeTempFolder('model-opt-prune-');
  try {
    progress('measuring channel means on the training inputs (for pruning)');
    const statistics = await collectChannelStatistics(model, statisticsRequests(model), split.train, { maxSamples: 256 });
    const fp32Path = path.join(scratch, 'fp32.onnx');
    if (!options.skipSpeedCheck) await saveModel(model, fp32Path);
    const batchSize = options.batchSize ?? 1;
    const search: PruneSearch = {
      ...split,
      model,
      options,
      modules: { pruneChannels, saveModel, distill, studentForOnnxruntime, take },
      progress,
      warn,
      deadline,
      widths,
      batchSize,
      threads: options.threads ?? 1,
      roundTo: options.roundTo ?? PRUNE_ROUND_TO,
      learningRate: options.learningRate ?? DEFAULT_PRUNE_LEARNING_RATE,
      maxEpochs: options.maxEpochs ?? 30,
      loss,
      statistics,
      scratch,
      fp32Path,
      shapes: timingShapes(model, checkShapes(undefined, split.train), batchSize),
      overheadSeconds: 0,
    };
    for (let i = 0; i < widths.length; i++) {
      const candidate = await tryWidth(search, i);
      if (candidate) candidates.push(candidate);
    }
  } finally {
    await removeTempFolder(scratch);
  }
  return candidates;
}

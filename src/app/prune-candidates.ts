/**
 * Pruned + distilled candidates for `optimize --time-budget` (issue 16 item 2, issue 32): each
 * width (fraction of channels kept) is one entry of the plan (./optimize-plan.ts). Prepare: narrow
 * the FP32 model by structured channel pruning (L2 ranking, channel counts rounded to a multiple of
 * 8, removed channels replaced by their means measured on the data), check with a short paired
 * timing that it is faster than FP32 at the batch size and threads asked for (its speed-up is what
 * the entry expects), probe the training speed. Train: a round of distillation from the FP32 model
 * on the given inputs without labels (alpha 0, by output kind, ./distill-objective.ts: soft targets
 * for class scores, at every step for a class sequence, MSE on the outputs otherwise) with early
 * stopping on a held-out 20% of the data labelled by FP32 (the trainer's evaluation is top-1, or
 * sequence, agreement with FP32; the best epoch is kept; patience, the round's deadline
 * and the cannot-reach rule stop it); a later round continues from the best weights. Finish: write
 * the best model (the pruned one when distillation lowered held-out agreement) to `dir`, with the
 * record a recipe needs to rebuild it (`rebuildPruned`).
 * The caller (./optimize.ts) measures speed and fidelity like every other candidate.
 * May import: errors, ir, data, app/*; passes/prune, onnx, evaluate, bench, train (lazily).
 */
import path from 'node:path';
import { UsageError } from '../errors.js';
import { isTensorType, type Model } from '../ir/index.js';
import type { Dataset } from '../data/index.js';
import type { EpochRecord } from '../train/core/loop.js';
import type { TrainingBackend } from '../train/tfjs/backend.js';
import type { ShapeOverrides } from '../ir/io-spec.js';
import { makeTempFolder, removeTempFolder } from '../util/temp-folder.js';
import type { WorkflowEvents } from './events.js';
import type { PrunedCandidateSpec } from './optimize-recipe.js';
import type { OutputKind } from '../metrics/output-kinds.js';
import { distillObjective } from './distill-objective.js';
import { epochStop, runPlan, type PlanEntry, type RoundStop, type StopRule } from './optimize-plan.js';

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
  /** What the output means (default: detected from the graph); a class sequence trains with per-step KD, ./distill-objective.ts. */
  outputKind?: OutputKind;
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
  /**
   * The speed-up a pass after pruning adds (optimize: static INT8's measured one, when each pruned
   * model is also quantized): a width expects its pre-checked speed-up times this (default 1).
   */
  thenSpeedup?: number;
}

export interface PruneDistillCandidate {
  /** The written model. */
  path: string;
  /** Fraction of channels kept (asked for; rounding may keep a few more or fewer). */
  width: number;
  description: string;
  /** Seconds spent on this candidate: pruning, speed pre-check, distillation, writing. */
  seconds: number;
  /** How to build it again (a recipe's `pruned` candidate): widths, samples, each kept round. */
  build: PrunedBuild;
  distill: {
    /** Epochs run over all rounds. */
    epochs: number;
    /** Epochs whose weights were kept (each round's best held-out epoch). */
    keptEpochs: number;
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
const MAX_VALIDATION = 128;
const MIN_SPLIT = 40;
/** Probe: this many training steps to measure samples/s (the first step warms kernels up and is not counted). */
const PROBE_STEPS = 3;

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
  /** The last VALIDATION_FRACTION of the data (at most MAX_VALIDATION samples): the held-out split. */
  validation?: Dataset;
  /** Training batch: options.trainBatchSize (default 32), at most the training samples. */
  trainBatch: number;
}

async function splitData(data: Dataset, trainBatchSize: number | undefined): Promise<DataSplit> {
  const { take, sliceSamples } = await import('../data/index.js');
  const validationCount = data.count >= MIN_SPLIT ? Math.min(MAX_VALIDATION, Math.round(data.count * VALIDATION_FRACTION)) : 0;
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
  /** The loss in words ('soft targets at every step'), ./distill-objective.ts. */
  lossWords: string;
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
  /** The validation split labelled by FP32 (./validationTargets): the trainer's held-out score is agreement with it. */
  validationTargets?: Dataset;
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

/** The epochs a round may run before `roundDeadline` (at least MIN_EPOCHS, at most maxEpochs), from the measured throughput and setup cost. */
function epochsFor(s: PruneSearch, roundDeadline: number): number {
  const trainSeconds = (roundDeadline - performance.now()) / 1000 - s.overheadSeconds * 1.2 - 0.5;
  return Math.max(MIN_EPOCHS, Math.min(s.maxEpochs, Math.floor(trainSeconds / epochSecondsOf(s))));
}

/** Seconds of one pass over the training split at the measured throughput. */
function epochSecondsOf(s: PruneSearch): number {
  const steps = Math.max(1, Math.floor(s.train.count / s.trainBatch));
  return (steps * s.trainBatch) / s.samplesPerSecond!;
}

/**
 * The validation split labelled by the FP32 model: the class it picks (kd), its scores per step
 * for a class sequence, or its output itself (mse), so that the trainer's held-out score each epoch
 * is top-1 (odds-weighted sequence) agreement with FP32 (or minus the MSE against its outputs): what
 * the budget judges, and what early stopping and the best epoch go by.
 */
async function validationTargets(s: Pick<PruneSearch, 'validation' | 'model' | 'options' | 'loss' | 'threads'>): Promise<Dataset | undefined> {
  const { validation } = s;
  if (!validation) return undefined;
  const { teacherTargets } = await import('../train/distill.js');
  const name = s.options.outputName ?? s.model.graph.outputs[0]!.name;
  const runner = { intraOpThreads: s.threads };
  const out = (await teacherTargets(s.model, validation, [name], { studentInputs: Object.keys(validation.inputs), runner })).get(name)!;
  if (s.loss === 'mse') return { ...validation, labels: out };
  // FP32's class per sample, or its scores per step for a class sequence (odds-weighted sequence agreement, ./distill-objective.ts).
  const { referenceLabels } = await import('../train/core/agreement.js');
  return { ...validation, labels: referenceLabels(out.data as Float32Array, out.dims) };
}

/** One round of distillation as it ran (epochs of its cosine schedule, epochs kept, learning rate): what a recipe needs to run it again. */
export type DistillRound = PrunedCandidateSpec['rounds'][number];

/** Learning rate of a later round (continuing from the best weights) as a fraction of the first's. */
const LATER_ROUND_LEARNING_RATE = 0.3;

/**
 * One round of distillation of `student` with early stopping on the held-out split (the loop's
 * patience, and the plan's rule after each epoch: the round's deadline, a target it cannot reach);
 * the FP32 model is the teacher. Updates the search's throughput and setup cost.
 */
async function distillRound(
  s: PruneSearch,
  student: Model,
  round: { epochs: number; learningRate: number; rule?: StopRule },
  label: string,
): Promise<{ model: Model; report: Awaited<ReturnType<PruneModules['distill']>>['report']; seconds: number; stoppedBy: RoundStop }> {
  const { train, trainBatch, loss } = s;
  const { epochs, rule } = round;
  s.progress(
    `${label}: distilling from FP32 without labels (${s.lossWords}, up to ${epochs} epoch${epochs === 1 ? '' : 's'} of ${train.count} samples, ~${(epochs * epochSecondsOf(s)).toFixed(0)} s, lr ${round.learningRate.toExponential(1)})`,
  );
  const d0 = performance.now();
  const scores: number[] = [];
  let mark: number | undefined;
  let stoppedBy: RoundStop | undefined;
  const hardDeadline = rule ? rule.searchDeadline : s.deadline;
  const trained = await s.modules.distill({
    student,
    teacher: s.model,
    outputName: s.options.outputName,
    train,
    ...(s.validationTargets ? { eval: s.validationTargets } : {}),
    alpha: 0,
    loss,
    epochs,
    batchSize: trainBatch,
    learningRate: round.learningRate,
    seed: PRUNE_SEED,
    ...(rule ? { patience: rule.patience } : {}),
    // Agreement on a small held-out split stays at its best while training still helps: keep the later epoch.
    keepLaterTies: true,
    onWarning: s.warn,
    ...(rule
      ? {
          stopAfter: (record: EpochRecord) => {
            const t = performance.now();
            const epochSeconds = (t - (mark ?? d0)) / 1000;
            mark = t;
            const score = record.evalAccuracy ?? (record.evalLoss !== undefined ? -record.evalLoss : undefined);
            if (score !== undefined) scores.push(score);
            stoppedBy = epochStop(loss === 'kd' ? scores : [], epochSeconds, rule, t);
            return stoppedBy !== undefined;
          },
        }
      : {}),
    onProgress: (e) => {
      if (e.phase === 'train' && mark === undefined) mark = performance.now();
      if (e.phase === 'train' && performance.now() > hardDeadline) throw new DeadlineReached(`epoch ${e.epoch}/${e.epochs}`);
      if (e.phase === 'train' && e.step === e.steps) s.progress(`${label}: epoch ${e.epoch}/${e.epochs} loss ${e.loss?.toExponential(2)}`);
    },
  });
  const seconds = (performance.now() - d0) / 1000;
  const run = trained.report.history.length;
  s.samplesPerSecond = trained.report.samplesPerSecond;
  s.overheadSeconds = Math.max(0, seconds - (run * Math.floor(train.count / trainBatch) * trainBatch) / s.samplesPerSecond);
  return { model: trained.model, report: trained.report, seconds, stoppedBy: stoppedBy ?? (trained.report.stoppedEarly ? 'patience' : 'epochs') };
}

/** A width under way: the pruned model, its best weights so far and the rounds that made them. */
interface WidthState {
  width: number;
  label: string;
  pruned?: Model;
  speedup?: number;
  /** The best model so far (undefined: the pruned one, no round kept). */
  current?: Model;
  /** Held-out agreement (kd) or minus the MSE (mse) of `current ?? pruned`, when measured. */
  best?: number;
  /** The pruned model's held-out agreement before any training (kd). */
  before?: number;
  rounds: DistillRound[];
  epochsRun: number;
  trainSeconds: number;
  backend?: string;
  seconds: number;
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

/** How a pruned candidate is built again (a recipe's `pruned` candidate, ./optimize-recipe.ts). */
export type PrunedBuild = PrunedCandidateSpec;

/** Seed of every distillation round (shuffling, dropout): recorded in the recipe. */
const PRUNE_SEED = 0;
/** Channel statistics for pruning are measured on at most this many training samples. */
const STATISTICS_SAMPLES = 256;

/** One width as an entry of the plan (./optimize-plan.ts): prepare = prune + speed pre-check (+ probe), train = a round, finish = write. */
function widthEntry(s: PruneSearch, i: number): PlanEntry & { candidate(): PruneDistillCandidate | undefined } {
  const width = s.widths[i]!;
  const st: WidthState = { width, label: `width ${width}`, rounds: [], epochsRun: 0, trainSeconds: 0, seconds: 0 };
  const { options, roundTo, loss, train } = s;
  const fixed = options.epochsPerWidth;
  let made: PruneDistillCandidate | undefined;
  return {
    name: st.label,
    kind: 'pruned',
    ...(i > 0 ? { after: `width ${s.widths[i - 1]}` } : {}),
    async prepare() {
      if (secondsLeft(s) <= 0) return { skip: 'not tried, the time budget was spent' };
      const t0 = performance.now();
      s.progress(`${st.label}: pruning channels (keeping ${Math.round(width * 100)}%, multiples of ${roundTo})`);
      st.pruned = forOnnxruntime(s, s.modules.pruneChannels(s.model, { width, roundTo, statistics: s.statistics }).model, st.label);
      if (!options.skipSpeedCheck) {
        const speedup = await precheckSpeedup(s, st.pruned, i, st.label);
        if (!speedup) return { skip: 'not distilled: the pruned model is not faster than FP32 (pre-check)' };
        st.speedup = speedup.estimate;
      }
      if (s.samplesPerSecond === undefined) await probeTrainingSpeed(s, st.pruned, st.label);
      st.seconds += (performance.now() - t0) / 1000;
      return {
        ...(st.speedup !== undefined ? { expectedSpeedup: st.speedup * (options.thenSpeedup ?? 1) } : {}),
        minSeconds: s.overheadSeconds * 1.2 + MIN_EPOCHS * epochSecondsOf(s) + 0.5,
      };
    },
    async train(rule) {
      const first = st.epochsRun === 0;
      const epochs = fixed ?? epochsFor(s, rule.roundDeadline);
      const learningRate = first ? s.learningRate : s.learningRate * LATER_ROUND_LEARNING_RATE;
      const t0 = performance.now();
      let r: Awaited<ReturnType<typeof distillRound>>;
      try {
        r = await distillRound(s, st.current ?? st.pruned!, { epochs, learningRate, ...(fixed === undefined ? { rule } : {}) }, st.label);
      } catch (error) {
        if (!(error instanceof DeadlineReached)) throw error;
        s.warn(`${st.label}: distillation stopped at ${error.message} when the time budget ran out: that round was dropped`);
        const seconds = (performance.now() - t0) / 1000;
        st.seconds += seconds;
        return { epochs: 0, seconds, stoppedBy: 'deadline', noGain: true, ...scoreOf(s, st) };
      }
      const history = r.report.history;
      st.epochsRun += history.length;
      st.trainSeconds += r.seconds;
      st.seconds += r.seconds;
      st.backend = r.report.backend.name;
      if (first && loss === 'kd') st.before = r.report.accuracy.studentBefore;
      const keptEpochs = r.report.bestEpoch ?? history.length;
      const at = history[keptEpochs - 1];
      const value = at?.evalAccuracy ?? (at?.evalLoss !== undefined ? -at.evalLoss : undefined);
      const previous = st.best ?? st.before;
      const noGain = value !== undefined && previous !== undefined && value < previous;
      if (noGain) {
        st.best = previous;
        s.warn(
          `${st.label}: ${first ? 'distillation' : 'another round'} lowered the held-out score against FP32 (${fmt(previous, loss)} -> ${fmt(value, loss)}): ${first ? 'the pruned model is kept without it' : 'the earlier weights are kept'}`,
        );
      } else {
        st.current = r.model;
        st.best = value;
        st.rounds.push({ epochs, keptEpochs, learningRate });
      }
      return { epochs: history.length, seconds: r.seconds, stoppedBy: r.stoppedBy, ...(noGain ? { noGain } : {}), ...scoreOf(s, st) };
    },
    async finish() {
      if (!st.pruned || st.epochsRun === 0) return undefined;
      const written = st.current ?? st.pruned;
      const file = path.join(options.dir, `pruned-${Math.round(width * 100)}.onnx`);
      s.progress(`${st.label}: writing ${file}`);
      await s.modules.saveModel(written, file);
      const agreement = options.evalData ? await agreementOn(s.model, written, options.evalData) : undefined;
      const kept = st.rounds.reduce((a, r) => a + r.keptEpochs, 0);
      const description =
        `channels pruned to ${Math.round(width * 100)}% (multiples of ${roundTo}), ` +
        (st.rounds.length > 0
          ? `distilled from FP32 without labels (${s.lossWords}, ${st.epochsRun} epoch${st.epochsRun === 1 ? '' : 's'} of ${train.count} samples` +
            `${kept !== st.epochsRun ? `, ${kept} kept` : ''}${st.rounds.length > 1 ? ` in ${st.rounds.length} rounds` : ''}, ${st.trainSeconds.toFixed(0)} s)`
          : `not distilled (${st.epochsRun} epoch${st.epochsRun === 1 ? '' : 's'} lowered agreement with FP32 on held-out samples)`);
      const build: PrunedBuild = {
        width,
        roundTo,
        trainSamples: train.count,
        batchSize: s.trainBatch,
        seed: PRUNE_SEED,
        loss,
        ...(st.backend ? { backend: st.backend } : {}),
        ...(options.outputName !== undefined ? { outputName: options.outputName } : {}),
        rounds: st.rounds,
      };
      made = {
        path: file,
        width,
        description,
        seconds: st.seconds,
        build,
        distill: {
          epochs: st.epochsRun,
          keptEpochs: kept,
          samples: train.count,
          samplesPerSecond: s.samplesPerSecond!,
          loss,
          ...(agreement !== undefined ? { agreement } : {}),
          ...(s.validation && st.before !== undefined && st.best !== undefined && loss === 'kd'
            ? { validation: { samples: s.validation.count, before: st.before, after: st.best } }
            : {}),
          kept: st.rounds.length > 0 ? 'distilled' : 'pruned',
          ...(st.backend ? { backend: st.backend } : {}),
        },
        ...(st.speedup !== undefined ? { precheckSpeedup: st.speedup } : {}),
      };
      return { path: file, description, spec: { pruned: build } };
    },
    candidate: () => made,
  };
}

const fmt = (v: number | undefined, loss: 'kd' | 'mse'): string =>
  v === undefined ? '-' : loss === 'kd' ? `${(v * 100).toFixed(1)}%` : `MSE ${(-v).toExponential(2)}`;

/** The round result's score fields from the width's best so far. */
function scoreOf(s: PruneSearch, st: WidthState): { agreement?: number; score?: number; heldOut?: number } {
  const best = st.best ?? st.before;
  if (best === undefined) return {};
  const heldOut = s.validationTargets ? { heldOut: s.validationTargets.count } : {};
  return s.loss === 'kd' ? { agreement: best, ...heldOut } : { score: best };
}

/** Top-1 agreement of `candidate` with `model` on the first output, over `data`. */
async function agreementOn(model: Model, candidate: Model, data: Dataset): Promise<number | undefined> {
  const { compareOutputs } = await import('../evaluate/index.js');
  const first = model.graph.outputs[0]!.name;
  return (await compareOutputs(model, candidate, data))[first]?.top1Agreement ?? undefined;
}

/** A prepared search: one plan entry per width, and what the caller must release. */
export interface PrunedEntries {
  entries: (PlanEntry & { candidate(): PruneDistillCandidate | undefined })[];
  loss: 'kd' | 'mse';
  dispose(): Promise<void>;
}

/**
 * Prepares the pruned candidates for a plan: splits the data, measures channel statistics once,
 * labels the validation split by FP32, and makes one plan entry per width. The caller runs the
 * plan (./optimize-plan.ts) and then `dispose`s.
 */
export async function prunedEntries(model: Model, data: Dataset, options: PruneDistillOptions, events: WorkflowEvents = {}): Promise<PrunedEntries> {
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
  const objective = distillObjective(model, options.outputName, options.outputKind);
  const loss = objective.loss;
  const split = await splitData(data, options.trainBatchSize);
  const [{ pruneChannels, collectChannelStatistics, statisticsRequests }, { saveModel }, { distill, studentForOnnxruntime }, { checkShapes }, { take }] =
    await Promise.all([
      import('./prune-passes.js'),
      import('../onnx/index.js'),
      import('./distill.js'),
      import('./data-shapes.js'),
      import('../data/index.js'),
    ]);
  const scratch = await makeTempFolder('model-opt-prune-');
  try {
    progress('measuring channel means on the training inputs (for pruning)');
    const statistics = await collectChannelStatistics(model, statisticsRequests(model), split.train, { maxSamples: STATISTICS_SAMPLES });
    const fp32Path = path.join(scratch, 'fp32.onnx');
    if (!options.skipSpeedCheck) await saveModel(model, fp32Path);
    const batchSize = options.batchSize ?? 1;
    const threads = options.threads ?? 1;
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
      threads,
      roundTo: options.roundTo ?? PRUNE_ROUND_TO,
      learningRate: options.learningRate ?? DEFAULT_PRUNE_LEARNING_RATE,
      maxEpochs: options.maxEpochs ?? 30,
      loss,
      lossWords: objective.words,
      statistics,
      scratch,
      fp32Path,
      shapes: timingShapes(model, checkShapes(undefined, split.train), batchSize),
      overheadSeconds: 0,
    };
    search.validationTargets = await validationTargets(search);
    return { entries: widths.map((_, i) => widthEntry(search, i)), loss, dispose: () => removeTempFolder(scratch) };
  } catch (error) {
    await removeTempFolder(scratch);
    throw error;
  }
}

/**
 * Prune + distill candidates within `timeBudgetMs`, planned as ./optimize-plan.ts plans them (a
 * share of the time per width, early stopping on held-out agreement, what is left to the most
 * promising width). The input model is not modified; `data`'s labels, if any, are not used.
 * Events come from `events`, else from the options' callbacks. A width not trained is said in a warning.
 */
export async function pruneDistillCandidates(
  model: Model,
  data: Dataset,
  options: PruneDistillOptions,
  events: WorkflowEvents = {},
): Promise<PruneDistillCandidate[]> {
  const started = performance.now();
  const prepared = await prunedEntries(model, data, options, events);
  const warn = events.onWarning ?? options.onWarning ?? (() => undefined);
  try {
    const fixed = options.epochsPerWidth !== undefined;
    const plan = await runPlan(prepared.entries, {
      deadline: fixed ? Infinity : started + options.timeBudgetMs,
      ...(prepared.loss === 'kd' && options.minTop1Agreement !== undefined ? { target: options.minTop1Agreement } : {}),
      oneRoundEach: fixed,
      onProgress: events.onProgress ?? options.onProgress,
    });
    for (const e of plan.entries) if (e.rounds.length === 0) warn(`${e.name}: ${e.note}`);
    const candidates: PruneDistillCandidate[] = [];
    for (const entry of prepared.entries) {
      await entry.finish();
      const c = entry.candidate();
      if (c) candidates.push(c);
    }
    return candidates;
  } finally {
    await prepared.dispose();
  }
}

/**
 * A pruned candidate again from its recipe (`build`): the same training samples (the first
 * `trainSamples` of `data`), the same channel statistics and pruning, then each kept round of
 * distillation for its epochs, stopped after its kept epochs. Deterministic training (onnxruntime,
 * one thread, the same seed) gives the same weights.
 */
export async function rebuildPruned(model: Model, data: Dataset, build: PrunedBuild, events: WorkflowEvents = {}): Promise<Model> {
  if (data.count < build.trainSamples)
    throw new UsageError(`${data.source}: the recipe's pruned candidate was trained on ${build.trainSamples} samples; the data has ${data.count}`);
  const [{ pruneChannels, collectChannelStatistics, statisticsRequests }, { distill, studentForOnnxruntime }, { take }] = await Promise.all([
    import('./prune-passes.js'),
    import('./distill.js'),
    import('../data/index.js'),
  ]);
  const train: Dataset = { ...take(data, build.trainSamples), labels: undefined };
  events.onProgress?.(`pruning channels (keeping ${Math.round(build.width * 100)}%, multiples of ${build.roundTo})`);
  const statistics = await collectChannelStatistics(model, statisticsRequests(model), train, { maxSamples: STATISTICS_SAMPLES });
  const pruned = pruneChannels(model, { width: build.width, roundTo: build.roundTo, statistics }).model;
  // As the search did (forOnnxruntime): an older opset is upgraded to 13 so the rounds train the same graph.
  let current = studentForOnnxruntime(pruned).model ?? pruned;
  for (const [i, round] of build.rounds.entries()) {
    events.onProgress?.(`distilling round ${i + 1}/${build.rounds.length}: ${round.keptEpochs} of ${round.epochs} epochs, lr ${round.learningRate}`);
    const trained = await distill({
      student: current,
      teacher: model,
      outputName: build.outputName,
      train,
      alpha: 0,
      loss: build.loss,
      epochs: round.epochs,
      ...(round.keptEpochs < round.epochs ? { stopAfterEpoch: round.keptEpochs } : {}),
      batchSize: build.batchSize,
      learningRate: round.learningRate,
      seed: build.seed,
      ...(build.backend ? { backend: build.backend as TrainingBackend } : {}),
      onWarning: events.onWarning,
    });
    current = trained.model;
  }
  return current;
}

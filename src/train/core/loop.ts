/**
 * The training loop, one for both backends: the run's shape (batch size, steps, the last partial
 * batch dropped), gradual pruning's schedule, resume from a checkpoint, each epoch's seeded batches
 * with the learning-rate schedule (./loop-state.ts's runEpoch), each step's non-finite check before
 * anything is applied, then the evaluation, best snapshot, early stopping and checkpoint of each
 * epoch (./loop-state.ts's EpochBook), and the result with the chosen weights. What a step computes
 * and where the weights live is the backend's (./step-backend.ts: ../tfjs/loop.ts,
 * ../onnxruntime/loop.ts). Progress goes to a callback. No tfjs, no onnxruntime here.
 * Imports: ../../errors, ../../ir/dtype (types), ./batching, ./checkpoint, ./loop-state,
 * ./non-finite, ./optimizer-options, ./pruning-masks, ./schedule, ./step-backend (types).
 */
import { UsageError } from '../../errors.js';
import type { TensorData } from '../../ir/dtype.js';
import { gatherRows } from './batching.js';
import { readCheckpoint } from './checkpoint.js';
import { checkResume, EpochBook, epochPlan, loopFingerprint, pruningSchedule, runEpoch, type CheckpointMeta, type StepStats } from './loop-state.js';
import { NonFiniteTrainingError } from './non-finite.js';
import type { OptimizerOptions } from './optimizer-options.js';
import type { LayerSparsity } from './pruning-masks.js';
import type { ScheduleKind } from './schedule.js';
import type { LoopPruner, StepBackend } from './step-backend.js';

/** Samples, sample dim first. `targets` holds 'labels', 'teacher' and 'feature:<student tensor>' arrays. */
export interface TrainData {
  count: number;
  inputs: Record<string, TensorData>;
  labels?: TensorData;
  teacher?: TensorData;
  /** Teacher intermediates by student tensor name (feature distillation). */
  features?: Map<string, TensorData>;
}

export interface FeaturePair {
  teacher: string;
  student: string;
}

export interface LoopProgress {
  phase: 'train' | 'eval';
  epoch: number;
  epochs: number;
  step: number;
  steps: number;
  loss?: number;
  accuracy?: number;
  samplesPerSecond?: number;
  etaSeconds?: number;
}

export interface LoopOptions {
  epochs: number;
  batchSize: number;
  seed: number;
  learningRate: number;
  optimizer: OptimizerOptions;
  schedule: ScheduleKind;
  /** Step schedule: decay every N epochs. */
  stepEpochs?: number;
  gamma?: number;
  lossKind: 'kd' | 'mse';
  alpha: number;
  temperature: number;
  features?: FeaturePair[];
  featureWeight?: number;
  /** Student output the loss reads (logits). */
  outputName: string;
  /** Gradual magnitude pruning of the weight tensors to this sparsity. */
  pruneTo?: number;
  /** Pruning reaches its target at this fraction of all steps (default 0.75), then masks stay fixed. */
  pruneEndFraction?: number;
  /** Variable names pruning applies to (default: conv/gemm/matmul kernels). */
  pruneParams?: string[];
  /** Early stopping: epochs without improvement of the eval score. */
  patience?: number;
  /**
   * An epoch that ties the best eval score becomes the best snapshot (the later, more trained
   * weights), though it does not reset the patience: for a coarse score (agreement on a small
   * held-out set) that stays at its best while training still helps.
   */
  keepLaterTies?: boolean;
  /**
   * Fine-tuning weights that are already good (label-free QAT from PTQ's): with `evalData`, the
   * starting weights are evaluated first and are the best snapshot to beat (bestEpoch 0), and an
   * epoch whose eval score falls below the best restores the best weights, starts the optimizer
   * afresh and multiplies the learning rate by `factor` for the epochs after it. Training then
   * never hands back weights worse than it started from (on the eval data). Not with pruning or resume.
   */
  rollback?: { factor: number };
  /** BatchNormalization in inference form while training. */
  freezeNorm?: boolean;
  evalData?: TrainData;
  evalBatchSize?: number;
  checkpointPath?: string;
  resumeFrom?: string;
  /** Stop (as if interrupted) after this many epochs; the checkpoint is written first. */
  stopAfterEpoch?: number;
  /** Settings a resumed run must share with the run that wrote the checkpoint. */
  fingerprint?: Record<string, unknown>;
  /**
   * Asked after each epoch (its record holds the eval fields): true stops the loop there, as early
   * stopping does (the best eval epoch's weights are kept). A caller's own rule: a deadline, a
   * target that cannot be reached in the time left (app/optimize-plan.ts).
   */
  stopAfter?: (record: EpochRecord, history: readonly EpochRecord[]) => boolean;
  onProgress?: (event: LoopProgress) => void;
}

export interface EpochRecord {
  epoch: number;
  loss: number;
  /** Mean hard-label and soft-target terms of the loss, when present. */
  hardLoss?: number;
  softLoss?: number;
  featureLoss?: number;
  trainAccuracy?: number;
  evalAccuracy?: number;
  evalLoss?: number;
  learningRate: number;
  samplesPerSecond: number;
  seconds: number;
  /** Pruning target reached at the end of the epoch. */
  sparsity?: number;
  /** `rollback`: this epoch scored below the best, whose weights were restored (the learning rate lowered after it). */
  rolledBack?: boolean;
}

export interface LoopResult {
  history: EpochRecord[];
  /** The epoch whose weights are handed back (1-based); 0: the starting weights (`rollback`: no epoch beat them). */
  bestEpoch?: number;
  bestScore?: number;
  /** `rollback`: the eval score of the starting weights. */
  startScore?: number;
  stoppedEarly: boolean;
  /** Stopped by stopAfterEpoch (a checkpoint holds the state to resume). */
  interrupted: boolean;
  resumedAfterEpoch?: number;
  /** Resumed from a run of this many epochs and trained further (--epochs larger than that run's; checkResume). */
  extendedFromEpochs?: number;
  steps: number;
  /** Training throughput of the steps this run took (forward + backward + update). */
  samplesPerSecond: number;
  sparsity?: LayerSparsity[];
  /** The chosen weights (best eval epoch, else the last), by variable name. */
  values: Map<string, Float32Array>;
}

/** Throws UsageError when `data` cannot be trained on: no samples, or neither labels nor teacher outputs. */
export function checkTrainData(data: TrainData): void {
  if (data.count === 0) throw new UsageError('the training data set has no samples');
  if (!data.labels && !data.teacher) throw new UsageError('training needs labels or teacher outputs');
}

/** The batch size (at most the sample count) and the steps of a run; a last partial batch is dropped. */
export function runShape(count: number, options: Pick<LoopOptions, 'batchSize' | 'epochs'>): { batchSize: number; stepsPerEpoch: number; totalSteps: number } {
  const batchSize = Math.min(options.batchSize, count);
  // A last partial batch is dropped: a batch of one makes batch statistics meaningless.
  const stepsPerEpoch = Math.max(1, Math.floor(count / batchSize));
  return { batchSize, stepsPerEpoch, totalSteps: stepsPerEpoch * options.epochs };
}

/** Gradual pruning of options.pruneParams (default: the backend's kernels) for a run of `totalSteps`; undefined without --prune-to. */
function createPruner(backend: StepBackend, options: LoopOptions, totalSteps: number): LoopPruner | undefined {
  const schedule = pruningSchedule(options, totalSteps);
  if (!schedule) return undefined;
  const pruner = backend.createPruner(new Set(options.pruneParams ?? backend.defaultPruneParams()), schedule);
  if (!pruner) throw new UsageError('--prune-to: the model has no Conv/Gemm/MatMul weights to prune');
  return pruner;
}

/** Continues from checkpoint `file`: values, optimizer, masks, history; returns the epoch and global step to go on from. */
async function resumeFrom(
  file: string,
  backend: StepBackend,
  pruner: LoopPruner | undefined,
  book: EpochBook,
  fingerprint: Record<string, unknown>,
): Promise<{ epoch: number; globalStep: number }> {
  const ckpt = await readCheckpoint<CheckpointMeta>(file);
  const { extendedFrom } = checkResume(file, ckpt.meta, fingerprint);
  backend.restore(ckpt.variables, file);
  backend.optimizer.load(ckpt.meta.optimizerStep, ckpt.optimizer);
  pruner?.load(ckpt.meta.pruneCurrent, ckpt.masks);
  book.resume(ckpt.meta, ckpt.best, extendedFrom);
  return { epoch: ckpt.meta.epoch, globalStep: ckpt.meta.globalStep };
}

/**
 * One training step on rows `indices`: the pruning masks of this step, the backend's forward and
 * backward, then the update only when the loss and every gradient are finite (a NaN hidden from the
 * loss, as a Relu maps NaN to 0, shows in the gradients); else NonFiniteTrainingError with the
 * values and the batch of the step.
 */
async function trainStep(
  backend: StepBackend,
  pruner: LoopPruner | undefined,
  inputs: Record<string, TensorData>,
  step: { indices: Int32Array; learningRate: number; globalStep: number; epoch: number; batch: number },
): Promise<StepStats> {
  pruner?.maybeUpdate(step.globalStep);
  const computed = await backend.compute(step.indices, step.globalStep);
  const bad = !Number.isFinite(computed.loss) ? `the loss became ${computed.loss}` : computed.nonFiniteGradient();
  if (bad) {
    computed.discard();
    const batch: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
    for (const [name, td] of Object.entries(inputs)) batch[name] = gatherRows(td, step.indices);
    throw new NonFiniteTrainingError(bad, step.epoch + 1, step.batch + 1, backend.values(), batch);
  }
  computed.update(step.learningRate);
  pruner?.applyMasks();
  return computed.finish(step.globalStep);
}

/**
 * Trains the backend's weights on `data` and returns the history and the chosen weights (the best
 * eval epoch's, else the last). Releases the backend when it ends, also on an error.
 */
export async function runLoop(backend: StepBackend, data: TrainData, options: LoopOptions): Promise<LoopResult> {
  let pruner: LoopPruner | undefined;
  try {
    if (backend.parameters.length === 0) throw new UsageError('the model has no trainable float weights');
    const progress = options.onProgress ?? (() => undefined);
    const { batchSize, stepsPerEpoch, totalSteps } = runShape(data.count, options);
    pruner = createPruner(backend, options, totalSteps);
    const fingerprint = loopFingerprint(options, batchSize, data.count, backend.parameters);
    const book = new EpochBook(options, data, stepsPerEpoch);
    const start = options.resumeFrom ? await resumeFrom(options.resumeFrom, backend, pruner, book, fingerprint) : { epoch: 0, globalStep: 0 };
    let globalStep = start.globalStep;
    const plan = epochPlan(options, data.count, batchSize, stepsPerEpoch, globalStep);
    const evaluation = options.evalData ? backend.evaluation(options.evalData) : undefined;
    const values = (): Map<string, Float32Array> => backend.values();
    const rollback = options.rollback && evaluation && !pruner && !options.resumeFrom ? options.rollback : undefined;
    // rollback: the learning rate of every later step is the schedule's times `scale`.
    let scale = 1;
    if (rollback) {
      await book.startFrom(options.lossKind, evaluation!, values());
      const scheduled = plan.learningRateAt;
      plan.learningRateAt = (step) => scheduled(step) * scale;
    }
    for (let epoch = start.epoch; epoch < options.epochs; epoch++) {
      const walked = await runEpoch(
        epoch,
        plan,
        globalStep,
        (indices, learningRate, step, batch) => trainStep(backend, pruner, data.inputs, { indices, learningRate, globalStep: step, epoch, batch }),
        progress,
      );
      globalStep = walked.globalStep;
      const { record, score } = await book.closeEpoch(epoch, walked, pruner?.current, evaluation);
      const stop = await book.endEpoch(epoch, record, score, options, { globalStep, fingerprint, values, optimizer: backend.optimizer, pruner });
      if (rollback && score !== undefined && book.bestScore !== undefined && score < book.bestScore && book.best) {
        // Worse than the best: back to its weights, the optimizer's moments and step afresh, a smaller rate.
        backend.restore(book.best, 'the best weights so far');
        backend.optimizer.load(0, new Map([...backend.optimizer.state()].map(([k, v]) => [k, new Float32Array(v.length)])));
        scale *= rollback.factor;
        record.rolledBack = true;
      }
      if (stop) break;
      if (epoch + 1 < options.epochs && options.stopAfter?.(record, book.history)) {
        book.stoppedEarly = true;
        break;
      }
    }
    const chosen = book.best ?? backend.values();
    const result = book.result(chosen, globalStep);
    // sparsity of the weights that are handed back
    if (pruner) result.sparsity = pruner.report(chosen);
    return result;
  } finally {
    pruner?.dispose?.();
    await backend.dispose();
  }
}

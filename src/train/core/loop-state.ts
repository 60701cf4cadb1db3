/**
 * The state of the training loop (./loop.ts), whichever backend it drives: what it writes into a
 * checkpoint besides the arrays (./checkpoint.ts): loop counters, best score, history, and the
 * fingerprint of the settings a resumed run must share, so a checkpoint has one format whichever
 * backend wrote it. Also the bookkeeping at the end of an epoch (EpochBook: history, best snapshot,
 * early stopping, the checkpoint, the result), and the walk over an epoch's batches (runEpoch). No tfjs.
 * Imports: errors, ./checkpoint, ./batching, ./schedule, types of ./loop and ./pruning-masks.
 */
import { UsageError } from '../../errors.js';
import { epochPermutation } from './batching.js';
import type { PruningSchedule } from './pruning-masks.js';
import { writeCheckpoint } from './checkpoint.js';
import { learningRateAt } from './schedule.js';
import type { EpochRecord, LoopOptions, LoopProgress, LoopResult, TrainData } from './loop.js';

export interface CheckpointMeta {
  epoch: number;
  globalStep: number;
  optimizerStep: number;
  pruneCurrent: number;
  bestScore?: number;
  bestEpoch?: number;
  badEpochs: number;
  history: EpochRecord[];
  fingerprint: Record<string, unknown>;
}

/** Settings a resumed run must share with the run that wrote the checkpoint. */
export function loopFingerprint(
  options: LoopOptions,
  batchSize: number,
  samples: number,
  variables: readonly { name: string; size: number }[],
): Record<string, unknown> {
  return {
    ...options.fingerprint,
    epochs: options.epochs,
    batchSize,
    seed: options.seed,
    learningRate: options.learningRate,
    optimizer: options.optimizer,
    schedule: options.schedule,
    lossKind: options.lossKind,
    alpha: options.alpha,
    temperature: options.temperature,
    pruneTo: options.pruneTo ?? 0,
    samples,
    variables: variables.map((p) => `${p.name}:${p.size}`),
  };
}

/** Keys whose values differ between two fingerprints. */
export function fingerprintDiff(a: Record<string, unknown>, b: Record<string, unknown>): string[] {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
}

/**
 * Checks a checkpoint before resuming from it: every setting of the fingerprint must be this run's,
 * except `epochs`, which may grow (training a finished or interrupted run further, as a larger
 * max_epochs does in the peer tools); fewer epochs than the checkpoint's run is refused. Returns
 * the checkpoint run's epochs when they grew. UsageError naming the file and the settings.
 */
export function checkResume(file: string, meta: CheckpointMeta, fingerprint: Record<string, unknown>): { extendedFrom?: number } {
  const diff = fingerprintDiff(meta.fingerprint, fingerprint).filter((k) => k !== 'epochs');
  if (diff.length > 0) throw new UsageError(`${file}: the checkpoint was written with other settings (${diff.join(', ')}); resume with the same ones`);
  const before = Number(meta.fingerprint['epochs']);
  const now = Number(fingerprint['epochs']);
  if (now === before) return {};
  if (now < before)
    throw new UsageError(
      `${file}: the checkpoint's run has ${before} epochs (${meta.epoch} done); --epochs ${now} is fewer: resume with --epochs ${before}, or more to train further`,
    );
  return { extendedFrom: before };
}

/**
 * Gradual pruning's schedule for a run of `totalSteps` (either backend): from 0 to options.pruneTo,
 * reached at pruneEndFraction (default 0.75) of the steps, masks recomputed 20 times on the way;
 * undefined without --prune-to.
 */
export function pruningSchedule(options: Pick<LoopOptions, 'pruneTo' | 'pruneEndFraction'>, totalSteps: number): PruningSchedule | undefined {
  if (options.pruneTo === undefined || !(options.pruneTo > 0)) return undefined;
  const endStep = Math.max(0, Math.round(totalSteps * (options.pruneEndFraction ?? 0.75)) - 1);
  return { finalSparsity: options.pruneTo, beginStep: 0, endStep, frequency: Math.max(1, Math.round(endStep / 20)) };
}

/** What a loop hands EpochBook.endEpoch: its counters and state now, read for the best snapshot and the checkpoint. */
export interface LoopSnapshot {
  globalStep: number;
  fingerprint: Record<string, unknown>;
  /** The current weights (and running statistics, adapters), by name. */
  values(): Map<string, Float32Array>;
  optimizer: { readonly step: number; state(): Map<string, Float32Array> };
  /** Gradual pruning, when on: the sparsity its masks are at, its schedule, its masks. */
  pruner?: { readonly current: number; readonly schedule: PruningSchedule; state(): Map<string, Float32Array> };
}

/**
 * Epoch-to-epoch bookkeeping of the loop, whichever backend: each epoch's record and
 * evaluation, the history, the best snapshot (by eval score), early stopping, checkpoints and
 * resume, and the LoopResult with the throughput of the steps this loop ran.
 */
export class EpochBook {
  history: EpochRecord[] = [];
  best?: Map<string, Float32Array>;
  bestScore?: number;
  bestEpoch?: number;
  /** `rollback`: the starting weights' eval score. */
  startScore?: number;
  badEpochs = 0;
  stoppedEarly = false;
  interrupted = false;
  resumedAfterEpoch?: number;
  extendedFromEpochs?: number;
  /** Samples and seconds of the training steps this loop ran (not those before a resume). */
  private trainSamples = 0;
  private trainSeconds = 0;

  /**
   * For a run of `options` on `data` in `stepsPerEpoch` steps per epoch: which loss terms its
   * records hold, the eval score's kind, the progress events.
   */
  constructor(
    private readonly options: Pick<LoopOptions, 'lossKind' | 'features' | 'epochs' | 'onProgress'>,
    private readonly data: Pick<TrainData, 'labels' | 'teacher'>,
    private readonly stepsPerEpoch: number,
  ) {}

  /**
   * The record of epoch `epoch` (0-based) from its walk (runEpoch), at pruning sparsity
   * `sparsity`; with `evaluate`, its eval fields and the score that picks the best epoch
   * (evaluateEpoch). Counts the epoch's samples and seconds for the result's throughput.
   */
  async closeEpoch(
    epoch: number,
    walked: { sums: EpochSums; learningRate: number; seconds: number },
    sparsity: number | undefined,
    evaluate?: () => { accuracy?: number; loss?: number } | Promise<{ accuracy?: number; loss?: number }>,
  ): Promise<{ record: EpochRecord; score: number | undefined }> {
    const { options, data } = this;
    this.trainSamples += walked.sums.seen;
    this.trainSeconds += walked.seconds;
    const kind = options.lossKind;
    const record = epochRecord(epoch, walked.sums, walked.learningRate, walked.seconds, {
      labels: Boolean(data.labels),
      teacher: Boolean(data.teacher),
      features: (options.features ?? []).length > 0,
      kd: kind === 'kd',
      sparsity,
    });
    const progress = options.onProgress ?? (() => undefined);
    const at = { epoch, epochs: options.epochs, steps: this.stepsPerEpoch };
    const score = evaluate ? await evaluateEpoch(record, kind, evaluate, progress, at) : undefined;
    return { record, score };
  }

  /**
   * `rollback`: the starting weights `values`, evaluated, are the best snapshot to beat (bestEpoch
   * 0; startScore in the result).
   */
  async startFrom(
    kind: 'kd' | 'mse',
    evaluate: () => { accuracy?: number; loss?: number } | Promise<{ accuracy?: number; loss?: number }>,
    values: Map<string, Float32Array>,
  ): Promise<void> {
    const score = evalScore(kind, await evaluate());
    if (score === undefined) return;
    this.bestScore = score;
    this.startScore = score;
    this.bestEpoch = 0;
    this.best = values;
  }

  /**
   * Continues from a checkpoint's metadata and best snapshot; `extendedFrom`: the checkpoint's run
   * had that many epochs and this one has more (checkResume). An early stop of that run is
   * forgotten then: the patience counts again from the resumed epoch.
   */
  resume(meta: CheckpointMeta, best: Map<string, Float32Array> | undefined, extendedFrom?: number): void {
    this.history = meta.history;
    this.best = best;
    this.bestScore = meta.bestScore;
    this.bestEpoch = meta.bestEpoch;
    this.badEpochs = extendedFrom !== undefined ? 0 : meta.badEpochs;
    this.resumedAfterEpoch = meta.epoch;
    this.extendedFromEpochs = extendedFrom;
  }

  /**
   * Ends epoch `epoch` (0-based): records it, keeps a snapshot when its score is the best so far
   * (once pruning has reached its target: before, a model would be denser than asked), decides
   * early stopping, writes the checkpoint, and returns true when the loop stops here (early stop or
   * options.stopAfterEpoch).
   */
  async endEpoch(
    epoch: number,
    record: EpochRecord,
    score: number | undefined,
    options: Pick<LoopOptions, 'epochs' | 'patience' | 'checkpointPath' | 'stopAfterEpoch' | 'keepLaterTies'>,
    now: LoopSnapshot,
  ): Promise<boolean> {
    this.history.push(record);
    const eligible = !now.pruner || now.globalStep - 1 >= now.pruner.schedule.endStep;
    if (score !== undefined && eligible) {
      const better = this.bestScore === undefined || score > this.bestScore;
      if (better || (options.keepLaterTies && score === this.bestScore)) {
        this.bestScore = score;
        this.bestEpoch = epoch + 1;
        this.best = now.values();
      }
      if (better) this.badEpochs = 0;
      else this.badEpochs++;
    }
    const last = epoch + 1 === options.epochs;
    if (options.patience !== undefined && this.badEpochs >= options.patience && !last) this.stoppedEarly = true;
    if (options.checkpointPath) {
      await writeCheckpoint<CheckpointMeta>(options.checkpointPath, {
        meta: {
          epoch: epoch + 1,
          globalStep: now.globalStep,
          optimizerStep: now.optimizer.step,
          pruneCurrent: now.pruner?.current ?? 0,
          bestScore: this.bestScore,
          bestEpoch: this.bestEpoch,
          badEpochs: this.badEpochs,
          history: this.history,
          fingerprint: now.fingerprint,
        },
        variables: now.values(),
        optimizer: now.optimizer.state(),
        masks: now.pruner?.state() ?? new Map(),
        best: this.best,
      });
    }
    if (this.stoppedEarly) return true;
    if (options.stopAfterEpoch !== undefined && epoch + 1 >= options.stopAfterEpoch && !last) {
      this.interrupted = true;
      return true;
    }
    return false;
  }

  /** The loop's result with `values` (the best snapshot, else the caller's current weights). */
  result(values: Map<string, Float32Array>, steps: number): LoopResult {
    const samplesPerSecond = this.trainSamples / Math.max(this.trainSeconds, 1e-9);
    return {
      history: this.history,
      bestEpoch: this.bestEpoch,
      bestScore: this.bestScore,
      ...(this.startScore !== undefined ? { startScore: this.startScore } : {}),
      stoppedEarly: this.stoppedEarly,
      interrupted: this.interrupted,
      resumedAfterEpoch: this.resumedAfterEpoch,
      ...(this.extendedFromEpochs !== undefined ? { extendedFromEpochs: this.extendedFromEpochs } : {}),
      steps,
      samplesPerSecond,
      values,
    };
  }
}

/** An epoch's loss terms summed over its batches (each times its batch size), and its samples. */
export interface EpochSums {
  loss: number;
  hard: number;
  soft: number;
  feature: number;
  correct: number;
  seen: number;
}

/** The epoch's record: mean loss terms of the parts the run has, train accuracy for kd with labels. */
export function epochRecord(
  epoch: number,
  sums: EpochSums,
  learningRate: number,
  seconds: number,
  parts: { labels: boolean; teacher: boolean; features: boolean; kd: boolean; sparsity?: number },
): EpochRecord {
  const { seen } = sums;
  const record: EpochRecord = { epoch: epoch + 1, loss: sums.loss / seen, learningRate, samplesPerSecond: seen / Math.max(seconds, 1e-9), seconds };
  if (parts.labels) record.hardLoss = sums.hard / seen;
  if (parts.teacher) record.softLoss = sums.soft / seen;
  if (parts.features) record.featureLoss = sums.feature / seen;
  if (parts.kd && parts.labels) record.trainAccuracy = sums.correct / seen;
  if (parts.sparsity !== undefined) record.sparsity = parts.sparsity;
  return record;
}

/**
 * The end-of-epoch evaluation with its two progress events: fills the record's eval fields and
 * returns the score that picks the best epoch (accuracy for kd, minus the loss for mse).
 */
export async function evaluateEpoch(
  record: EpochRecord,
  kind: 'kd' | 'mse',
  run: () => { accuracy?: number; loss?: number } | Promise<{ accuracy?: number; loss?: number }>,
  progress: (event: LoopProgress) => void,
  at: { epoch: number; epochs: number; steps: number },
): Promise<number | undefined> {
  const where = { phase: 'eval' as const, epoch: at.epoch + 1, epochs: at.epochs, step: at.steps, steps: at.steps };
  progress(where);
  const ev = await run();
  record.evalAccuracy = ev.accuracy;
  record.evalLoss = ev.loss;
  progress({ ...where, loss: record.loss, accuracy: ev.accuracy });
  return evalScore(kind, ev);
}

/** The score that picks the best weights: accuracy for kd, minus the loss for mse. */
function evalScore(kind: 'kd' | 'mse', ev: { accuracy?: number; loss?: number }): number | undefined {
  return kind === 'kd' ? ev.accuracy : -(ev.loss ?? 0);
}

/** One step's results: its mean loss terms and how many of its samples were classified right. */
export interface StepStats {
  loss: number;
  hard?: number;
  soft?: number;
  feature?: number;
  correct: number;
}

/** What the walk over an epoch needs to know about the run. */
export interface EpochPlan {
  count: number;
  seed: number;
  batchSize: number;
  stepsPerEpoch: number;
  totalSteps: number;
  epochs: number;
  /** The learning rate at a global step (the schedule). */
  learningRateAt(globalStep: number): number;
  /** When training (re)started and at which global step, for the ETA. */
  started: number;
  stepsDoneAtStart: number;
}

/** The plan of a run of `count` samples in `stepsPerEpoch` batches per epoch, (re)starting at `globalStep`. */
export function epochPlan(options: LoopOptions, count: number, batchSize: number, stepsPerEpoch: number, globalStep: number): EpochPlan {
  const totalSteps = stepsPerEpoch * options.epochs;
  const schedule = {
    kind: options.schedule,
    baseLearningRate: options.learningRate,
    totalSteps,
    stepsPerEpoch,
    stepEpochs: options.stepEpochs,
    gamma: options.gamma,
  };
  return {
    count,
    seed: options.seed,
    batchSize,
    stepsPerEpoch,
    totalSteps,
    epochs: options.epochs,
    learningRateAt: (step) => learningRateAt(schedule, step),
    started: performance.now(),
    stepsDoneAtStart: globalStep,
  };
}

/**
 * One epoch's batches in the epoch's seeded order (the last partial batch dropped): each step's
 * learning rate from the schedule, `step` for the work (the update included), the running sums and
 * one progress event per step. Returns the sums, the last learning rate, the seconds and the global
 * step after the epoch.
 */
export async function runEpoch(
  epoch: number,
  plan: EpochPlan,
  globalStep: number,
  step: (indices: Int32Array, learningRate: number, globalStep: number, batch: number) => StepStats | Promise<StepStats>,
  progress: (event: LoopProgress) => void,
): Promise<{ sums: EpochSums; learningRate: number; seconds: number; globalStep: number }> {
  const perm = epochPermutation(plan.count, plan.seed, epoch);
  const sums: EpochSums = { loss: 0, hard: 0, soft: 0, feature: 0, correct: 0, seen: 0 };
  const epochStart = performance.now();
  let learningRate = 0; // set by every step (stepsPerEpoch >= 1)
  for (let b = 0; b < plan.stepsPerEpoch; b++) {
    const idx = perm.subarray(b * plan.batchSize, (b + 1) * plan.batchSize);
    learningRate = plan.learningRateAt(globalStep);
    const r = await step(idx, learningRate, globalStep, b);
    sums.loss += r.loss * idx.length;
    sums.hard += (r.hard ?? 0) * idx.length;
    sums.soft += (r.soft ?? 0) * idx.length;
    sums.feature += (r.feature ?? 0) * idx.length;
    sums.correct += r.correct;
    sums.seen += idx.length;
    globalStep++;
    const elapsed = (performance.now() - epochStart) / 1000;
    const perStep = (performance.now() - plan.started) / 1000 / (globalStep - plan.stepsDoneAtStart);
    progress({
      phase: 'train',
      epoch: epoch + 1,
      epochs: plan.epochs,
      step: b + 1,
      steps: plan.stepsPerEpoch,
      loss: sums.loss / sums.seen,
      samplesPerSecond: sums.seen / Math.max(elapsed, 1e-9),
      etaSeconds: perStep * (plan.totalSteps - globalStep),
    });
  }
  return { sums, learningRate, seconds: (performance.now() - epochStart) / 1000, globalStep };
}

/**
 * What the one training loop (./loop.ts) drives: a backend that holds the trained weights on one
 * runtime and runs a training step's forward and backward pass on a batch. ../tfjs/loop.ts
 * implements it with the tfjs interpreter and tf.variableGrads, ../onnxruntime/loop.ts with one
 * onnxruntime run of the training graph and host arrays. Epochs, batches, the schedule, the
 * non-finite check, pruning, evaluation, best epoch, early stopping and checkpoints are the loop's.
 * Imports: types of ./pruning-masks, ./loop and ./loop-state.
 */
import type { LayerSparsity, PruningSchedule } from './pruning-masks.js';
import type { TrainData } from './loop.js';
import type { StepStats } from './loop-state.js';

/** The optimizer's step count and slots, as a checkpoint holds them. */
export interface LoopOptimizer {
  readonly step: number;
  state(): Map<string, Float32Array>;
  /** Restores `state` (written by `state()`) at step `step`. */
  load(step: number, state: ReadonlyMap<string, Float32Array>): void;
}

/** Gradual magnitude pruning of some of the backend's weights (the schedule and masks of ./pruning-masks.ts). */
export interface LoopPruner {
  /** Sparsity the current masks were computed for. */
  readonly current: number;
  readonly schedule: PruningSchedule;
  /** Recomputes the masks when `globalStep` is an update step (before the step) and applies them. */
  maybeUpdate(globalStep: number): boolean;
  /** Zeroes the pruned weights (after every optimizer update). */
  applyMasks(): void;
  state(): Map<string, Float32Array>;
  load(current: number, masks: ReadonlyMap<string, Float32Array>): void;
  /** Measured zeros per pruned weight, of `values` (by name). */
  report(values: ReadonlyMap<string, Float32Array>): LayerSparsity[];
  dispose?(): void;
}

/** Accuracy (kd) or mean squared error (mse) of the current weights on a labelled data set. */
export type Evaluation = () => { accuracy?: number; loss?: number } | Promise<{ accuracy?: number; loss?: number }>;

/** A step's forward and backward pass, not yet applied. */
export interface ComputedStep {
  /** The batch's loss (mean over its samples); the loop applies nothing when it is not finite. */
  readonly loss: number;
  /** "the gradient of 'w' became non-finite" for the first gradient holding NaN or infinity. */
  nonFiniteGradient(): string | undefined;
  /** The optimizer update at `learningRate`. */
  update(learningRate: number): void;
  /** After the update and the pruning masks: running statistics, hooks; releases the step; its results. */
  finish(globalStep: number): StepStats;
  /** Releases the step without applying it. */
  discard(): void;
}

export interface StepBackend {
  /** The trained weights (feature adapters included), name and element count, in a fixed order. */
  readonly parameters: readonly { name: string; size: number }[];
  readonly optimizer: LoopOptimizer;
  /** The weights gradual pruning applies to unless the run names them: Conv/ConvTranspose/Gemm/MatMul kernels. */
  defaultPruneParams(): string[];
  /** A pruner of the trained weights named in `names`; undefined when none of them is trained. */
  createPruner(names: ReadonlySet<string>, schedule: PruningSchedule): LoopPruner | undefined;
  /** Forward and backward on rows `indices` of the training data at global step `globalStep`. */
  compute(indices: Int32Array, globalStep: number): ComputedStep | Promise<ComputedStep>;
  /** Copies of the current values (weights, running statistics, adapters) by name. */
  values(): Map<string, Float32Array>;
  /** Sets the values from a checkpoint (`file`, for messages). */
  restore(values: ReadonlyMap<string, Float32Array>, file: string): void;
  /** The evaluation run at the end of each epoch on `data`; undefined: none. */
  evaluation(data: TrainData): Evaluation | undefined;
  /** Releases what the backend holds (tensors, sessions); called once, when the loop ends. */
  dispose(): void | Promise<void>;
}

/** A backend's optimizer (whose `load` needs the parameters it updates) as the loop's LoopOptimizer. */
export function loopOptimizer<P>(
  optimizer: {
    readonly step: number;
    state(): Map<string, Float32Array>;
    load(step: number, state: ReadonlyMap<string, Float32Array>, params: readonly P[]): void;
  },
  params: readonly P[],
): LoopOptimizer {
  return {
    get step() {
      return optimizer.step;
    },
    state: () => optimizer.state(),
    load: (step, state) => optimizer.load(step, state, params),
  };
}

/**
 * The distillation settings and their defaults, in a module that loads no tfjs, so that the CLI can
 * show them as flag defaults in `--help` without importing the trainer (test/cli/lazy-load.test.ts).
 * Imports types only (erased at run time): ./loop, ./optimizer-options, ./schedule.
 */
import type { FeaturePair } from './loop.js';
import type { OptimizerKind } from './optimizer-options.js';
import type { ScheduleKind } from './schedule.js';

export interface DistillSettings {
  /** Passes over the training set (default 5). */
  epochs: number;
  batchSize: number;
  learningRate: number;
  optimizer: OptimizerKind;
  /** SGD momentum. */
  momentum: number;
  schedule: ScheduleKind;
  /** Step schedule: decay every N epochs. */
  stepEpochs?: number;
  gamma: number;
  weightDecay: number;
  seed: number;
  /** Softmax temperature of the soft targets. */
  temperature: number;
  /** Weight of the hard-label loss; 1 - alpha weighs the soft-target loss. */
  alpha: number;
  /** 'kd' for classifiers, 'mse' for regression outputs. */
  loss: 'kd' | 'mse';
  /** Feature distillation pairs (teacher tensor = student tensor). */
  features: FeaturePair[];
  featureWeight: number;
  /** Gradual magnitude pruning to this weight sparsity during training. */
  pruneTo?: number;
  /** Early stopping after this many epochs without improvement. */
  patience?: number;
  /** Keep BatchNormalization statistics frozen (inference form) while training. */
  freezeNorm: boolean;
}

export const DEFAULT_DISTILL_SETTINGS: DistillSettings = {
  epochs: 5,
  batchSize: 64,
  learningRate: 1e-3,
  optimizer: 'adam',
  momentum: 0.9,
  schedule: 'cosine',
  gamma: 0.1,
  weightDecay: 0,
  seed: 0,
  temperature: 4,
  alpha: 0.5,
  loss: 'kd',
  features: [],
  featureWeight: 1,
  freezeNorm: false,
};

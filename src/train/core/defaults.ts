/**
 * The default distillation settings, in a module that loads no tfjs, so that the CLI can show
 * them as flag defaults in `--help` without importing the trainer (test/cli/lazy-load.test.ts).
 * Imports types only (erased at run time).
 */
import type { DistillSettings } from '../distill.js';

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

/**
 * Learning-rate schedules of the training loops: constant, cosine (to zero over all steps), step
 * (x gamma every N epochs). Plain arithmetic, no tfjs, so the onnxruntime loop can use them.
 * Imports: nothing.
 */
export type ScheduleKind = 'constant' | 'cosine' | 'step';
export const SCHEDULES: readonly ScheduleKind[] = ['constant', 'cosine', 'step'];

export interface ScheduleOptions {
  kind: ScheduleKind;
  baseLearningRate: number;
  totalSteps: number;
  stepsPerEpoch: number;
  /** Step schedule: multiply by gamma every `stepEpochs` epochs. */
  stepEpochs?: number;
  gamma?: number;
}

/** Learning rate at a (0-based) global step. */
export function learningRateAt(options: ScheduleOptions, step: number): number {
  const lr = options.baseLearningRate;
  switch (options.kind) {
    case 'constant':
      return lr;
    case 'cosine': {
      const progress = Math.min(1, step / Math.max(1, options.totalSteps));
      return 0.5 * lr * (1 + Math.cos(Math.PI * progress));
    }
    case 'step': {
      const epoch = Math.floor(step / Math.max(1, options.stepsPerEpoch));
      return lr * (options.gamma ?? 0.1) ** Math.floor(epoch / Math.max(1, options.stepEpochs ?? 1));
    }
  }
}

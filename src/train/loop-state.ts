/**
 * What the tfjs loop (./loop.ts) and the onnxruntime loop (./onnx-training/loop.ts) write into a
 * checkpoint besides the arrays (./checkpoint.ts): loop counters, best score, history, and the
 * fingerprint of the settings a resumed run must share. One definition, so a checkpoint has one
 * format whichever backend wrote it. Plain data, no tfjs.
 * Imports: types of ./loop only.
 */
import type { EpochRecord, LoopOptions } from './loop.js';

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

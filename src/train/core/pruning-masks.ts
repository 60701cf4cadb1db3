/**
 * The pure half of gradual magnitude pruning (Zhu & Gupta 2017, as tfmot's prune_low_magnitude with
 * PolynomialDecay), shared by the tfjs pruner (../tfjs/gradual-pruning.ts) and the onnxruntime
 * backend's (../onnxruntime/loop.ts), driven by ./loop.ts: the sparsity schedule, the update-step rule, the per-layer
 * magnitude mask and the measured sparsity. Plain typed arrays, no tfjs.
 * Imports: nothing.
 */

export interface PruningSchedule {
  finalSparsity: number;
  initialSparsity?: number;
  beginStep: number;
  endStep: number;
  /** Masks are recomputed every `frequency` steps in [beginStep, endStep]. */
  frequency: number;
  /** Exponent of the polynomial (3 in the paper and in tfmot). */
  power?: number;
}

/** Target sparsity at a global step: s(t) = s_f + (s_i - s_f) (1 - (t - b) / (e - b))^3. */
export function sparsityAt(schedule: PruningSchedule, step: number): number {
  const si = schedule.initialSparsity ?? 0;
  if (step < schedule.beginStep) return 0;
  const span = Math.max(1, schedule.endStep - schedule.beginStep);
  const progress = Math.min(1, (step - schedule.beginStep) / span);
  return schedule.finalSparsity + (si - schedule.finalSparsity) * (1 - progress) ** (schedule.power ?? 3);
}

/** Whether masks are recomputed at this step (tfmot's rule, plus the final step so the target is reached). */
export function isUpdateStep(schedule: PruningSchedule, step: number): boolean {
  if (step < schedule.beginStep || step > schedule.endStep) return false;
  return (step - schedule.beginStep) % schedule.frequency === 0 || step === schedule.endStep;
}

/**
 * 1/0 mask that drops the floor(sparsity x size) smallest magnitudes of `w`; ties are broken by
 * index so the count is exact.
 */
export function magnitudeMask(w: ArrayLike<number>, sparsity: number): Float32Array {
  const k = Math.floor(sparsity * w.length);
  const mask = new Float32Array(w.length).fill(1);
  if (k > 0) {
    const order = Array.from({ length: w.length }, (_v, i) => i).sort((a, b) => Math.abs(w[a]!) - Math.abs(w[b]!) || a - b);
    for (let i = 0; i < k; i++) mask[order[i]!] = 0;
  }
  return mask;
}

export interface LayerSparsity {
  name: string;
  params: number;
  sparsity: number;
}

/** Measured fraction of exact zeros of one tensor. */
export function layerSparsity(name: string, w: ArrayLike<number>): LayerSparsity {
  let zeros = 0;
  for (let i = 0; i < w.length; i++) if (w[i] === 0) zeros++;
  return { name, params: w.length, sparsity: zeros / Math.max(1, w.length) };
}

/**
 * Gradual magnitude pruning during training (Zhu & Gupta 2017, as tfmot's prune_low_magnitude with
 * PolynomialDecay): the target sparsity rises from `initialSparsity` to `finalSparsity` between
 * `beginStep` and `endStep` as s(t) = s_f + (s_i - s_f) (1 - (t - b) / (e - b))^3, masks are
 * recomputed every `frequency` steps by per-layer weight magnitude, and the masked weights are
 * zeroed after every optimizer step so pruned weights stay exactly zero.
 * Imports: @tensorflow/tfjs-core only.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { Param } from './optimizer.js';

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

/** Target sparsity at a global step. */
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

export interface LayerSparsity {
  name: string;
  params: number;
  sparsity: number;
}

export class GradualPruner {
  readonly schedule: PruningSchedule;
  readonly params: readonly Param[];
  private readonly masks = new Map<string, tf.Tensor>();
  /** Sparsity the current masks were computed for. */
  current = 0;

  constructor(params: readonly Param[], schedule: PruningSchedule) {
    this.params = params;
    this.schedule = schedule;
  }

  /** Recomputes masks when `step` is an update step; call before the step's optimizer update. */
  maybeUpdate(step: number): boolean {
    if (!isUpdateStep(this.schedule, step)) return false;
    const target = sparsityAt(this.schedule, step);
    for (const p of this.params) {
      const w = p.variable.dataSync() as Float32Array;
      const k = Math.floor(target * w.length);
      const mask = new Float32Array(w.length).fill(1);
      if (k > 0) {
        // the k smallest magnitudes go; ties broken by index so the count is exact
        const order = Array.from({ length: w.length }, (_v, i) => i).sort((a, b) => Math.abs(w[a]!) - Math.abs(w[b]!) || a - b);
        for (let i = 0; i < k; i++) mask[order[i]!] = 0;
      }
      this.setMask(p, mask);
    }
    this.current = target;
    this.applyMasks();
    return true;
  }

  private setMask(p: Param, mask: Float32Array): void {
    this.masks.get(p.name)?.dispose();
    this.masks.set(p.name, tf.keep(tf.tensor(mask, p.variable.shape, 'float32')));
  }

  /** Zeroes the pruned weights (after every optimizer step). */
  applyMasks(): void {
    tf.tidy(() => {
      for (const p of this.params) {
        const m = this.masks.get(p.name);
        if (m) p.variable.assign(tf.mul(p.variable, m));
      }
    });
  }

  state(): Map<string, Float32Array> {
    const out = new Map<string, Float32Array>();
    for (const [k, m] of this.masks) out.set(k, m.dataSync() as Float32Array);
    return out;
  }

  load(current: number, masks: ReadonlyMap<string, Float32Array>): void {
    this.current = current;
    for (const p of this.params) {
      const m = masks.get(p.name);
      if (m) this.setMask(p, m);
    }
  }

  /** Measured zeros per pruned layer, of the variables or of `values` (a snapshot by name) where given. */
  report(values?: ReadonlyMap<string, Float32Array>): LayerSparsity[] {
    return this.params.map((p) => {
      const w = values?.get(p.name) ?? p.variable.dataSync();
      let zeros = 0;
      for (let i = 0; i < w.length; i++) if (w[i] === 0) zeros++;
      return { name: p.name, params: w.length, sparsity: zeros / Math.max(1, w.length) };
    });
  }

  dispose(): void {
    for (const m of this.masks.values()) m.dispose();
    this.masks.clear();
  }
}

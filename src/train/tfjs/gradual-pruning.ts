/**
 * Gradual magnitude pruning during training (Zhu & Gupta 2017, as tfmot's prune_low_magnitude with
 * PolynomialDecay): the target sparsity rises from `initialSparsity` to `finalSparsity` between
 * `beginStep` and `endStep` as s(t) = s_f + (s_i - s_f) (1 - (t - b) / (e - b))^3, masks are
 * recomputed every `frequency` steps by per-layer weight magnitude, and the masked weights are
 * zeroed after every optimizer step so pruned weights stay exactly zero.
 * The schedule and the mask rule are pure functions in ../core/pruning-masks.ts (the onnxruntime backend uses
 * them too); this class keeps the masks as tfjs tensors.
 * Imports: @tensorflow/tfjs-core, ../core/pruning-masks, ./optimizer (types).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { Param } from './optimizer.js';
import { isUpdateStep, layerSparsity, magnitudeMask, sparsityAt, type LayerSparsity, type PruningSchedule } from '../core/pruning-masks.js';

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
      const mask = magnitudeMask(p.variable.dataSync() as Float32Array, target);
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
    return this.params.map((p) => layerSparsity(p.name, values?.get(p.name) ?? p.variable.dataSync()));
  }

  dispose(): void {
    for (const m of this.masks.values()) m.dispose();
    this.masks.clear();
  }
}

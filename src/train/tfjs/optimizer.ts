/**
 * The optimizers of the tfjs backend of the training loop, written out (rather than
 * tf.train's) so their state can be checkpointed and restored exactly:
 *   adam   Adam with decoupled weight decay (AdamW: w -= lr x wd x w, separate from the moments)
 *   sgd    SGD with (heavy-ball) momentum; weight decay added to the gradient (L2)
 * Weight decay applies to tensors of rank >= 2 (kernels, matrices), not to biases and norm scales.
 * The options and the learning-rate schedules are tfjs-free (../core/optimizer-options.ts, ../core/schedule.ts).
 * Imports: @tensorflow/tfjs-core, ../core/optimizer-options (types).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { OptimizerOptions } from '../core/optimizer-options.js';

export interface Param {
  name: string;
  variable: tf.Variable;
}

export class Optimizer {
  readonly options: Required<OptimizerOptions>;
  /** Steps taken (Adam's bias correction counts from 1). */
  step = 0;
  private readonly slots = new Map<string, tf.Variable>();

  constructor(options: OptimizerOptions) {
    this.options = { momentum: 0.9, beta1: 0.9, beta2: 0.999, epsilon: 1e-8, weightDecay: 0, ...options };
  }

  private slot(key: string, like: tf.Variable): tf.Variable {
    let s = this.slots.get(key);
    if (!s) {
      s = tf.tidy(() => tf.variable(tf.zerosLike(like), false));
      this.slots.set(key, s);
    }
    return s;
  }

  /** One update of every parameter that has a gradient. `grads` is keyed by parameter name. */
  apply(params: readonly Param[], grads: ReadonlyMap<string, tf.Tensor>, learningRate: number): void {
    this.step++;
    const { kind, momentum, beta1, beta2, epsilon, weightDecay } = this.options;
    const t = this.step;
    tf.tidy(() => {
      for (const p of params) {
        const g = grads.get(p.name);
        if (!g) continue;
        const w = p.variable;
        const decay = weightDecay > 0 && w.rank >= 2 ? weightDecay : 0;
        if (kind === 'adam') {
          const m = this.slot(`${p.name}/m`, w);
          const v = this.slot(`${p.name}/v`, w);
          m.assign(tf.add(tf.mul(m, beta1), tf.mul(g, 1 - beta1)));
          v.assign(tf.add(tf.mul(v, beta2), tf.mul(tf.square(g), 1 - beta2)));
          const mHat = tf.div(m, 1 - beta1 ** t);
          const vHat = tf.div(v, 1 - beta2 ** t);
          let update = tf.div(mHat, tf.add(tf.sqrt(vHat), epsilon));
          if (decay > 0) update = tf.add(update, tf.mul(w, decay));
          w.assign(tf.sub(w, tf.mul(update, learningRate)));
        } else {
          const gradient = decay > 0 ? tf.add(g, tf.mul(w, decay)) : g;
          if (momentum > 0) {
            const buf = this.slot(`${p.name}/momentum`, w);
            buf.assign(tf.add(tf.mul(buf, momentum), gradient));
            w.assign(tf.sub(w, tf.mul(buf, learningRate)));
          } else {
            w.assign(tf.sub(w, tf.mul(gradient, learningRate)));
          }
        }
      }
    });
  }

  /** Slot values for a checkpoint. */
  state(): Map<string, Float32Array> {
    const out = new Map<string, Float32Array>();
    for (const [k, v] of this.slots) out.set(k, v.dataSync() as Float32Array);
    return out;
  }

  /** Restores slots written by `state` (shapes from the parameters). */
  load(step: number, slots: ReadonlyMap<string, Float32Array>, params: readonly Param[]): void {
    this.step = step;
    const byName = new Map(params.map((p) => [p.name, p.variable]));
    for (const [key, data] of slots) {
      const name = key.slice(0, key.lastIndexOf('/'));
      const like = byName.get(name);
      if (!like) continue;
      const s = this.slot(key, like);
      tf.tidy(() => s.assign(tf.tensor(data, like.shape, 'float32')));
    }
  }

  dispose(): void {
    for (const s of this.slots.values()) s.dispose();
    this.slots.clear();
  }
}

/**
 * The optimizers of ../tfjs/optimizer.ts (AdamW, SGD with momentum, the same formulas and options) over
 * plain typed arrays in Node, for training on onnxruntime: the weights stay host arrays that are fed
 * to the training graph, so no tfjs tensor is involved. Slot state is kept per parameter in the
 * parameter's own precision (float32 as the tfjs slots), so a checkpoint holds it exactly and a
 * resumed run continues bit for bit.
 * Imports: ../core/optimizer-options (types only).
 */
import type { OptimizerOptions } from '../core/optimizer-options.js';

export interface HostParam {
  name: string;
  data: Float32Array | Float64Array;
  /** Rank of the tensor: weight decay applies to rank >= 2 only (kernels, matrices). */
  rank: number;
}

export class HostOptimizer {
  readonly options: Required<OptimizerOptions>;
  step = 0;
  private readonly slots = new Map<string, Float32Array | Float64Array>();

  constructor(options: OptimizerOptions) {
    this.options = { momentum: 0.9, beta1: 0.9, beta2: 0.999, epsilon: 1e-8, weightDecay: 0, ...options };
  }

  private slot(key: string, like: Float32Array | Float64Array): Float32Array | Float64Array {
    let s = this.slots.get(key);
    if (!s) {
      s = like instanceof Float64Array ? new Float64Array(like.length) : new Float32Array(like.length);
      this.slots.set(key, s);
    }
    return s;
  }

  /** One update of every parameter that has a gradient (in place). */
  apply(params: readonly HostParam[], grads: ReadonlyMap<string, ArrayLike<number>>, learningRate: number): void {
    this.step++;
    const { kind, momentum, beta1, beta2, epsilon, weightDecay } = this.options;
    const t = this.step;
    const c1 = 1 - beta1 ** t;
    const c2 = 1 - beta2 ** t;
    for (const p of params) {
      const g = grads.get(p.name);
      if (!g) continue;
      const w = p.data;
      const decay = weightDecay > 0 && p.rank >= 2 ? weightDecay : 0;
      if (kind === 'adam') {
        const m = this.slot(`${p.name}/m`, w);
        const v = this.slot(`${p.name}/v`, w);
        for (let i = 0; i < w.length; i++) {
          const gi = g[i]!;
          m[i] = m[i]! * beta1 + gi * (1 - beta1);
          v[i] = v[i]! * beta2 + gi * gi * (1 - beta2);
          const update = m[i]! / c1 / (Math.sqrt(v[i]! / c2) + epsilon) + decay * w[i]!;
          w[i] = w[i]! - update * learningRate;
        }
      } else if (momentum > 0) {
        const buf = this.slot(`${p.name}/momentum`, w);
        for (let i = 0; i < w.length; i++) {
          buf[i] = buf[i]! * momentum + g[i]! + decay * w[i]!;
          w[i] = w[i]! - buf[i]! * learningRate;
        }
      } else {
        for (let i = 0; i < w.length; i++) w[i] = w[i]! - (g[i]! + decay * w[i]!) * learningRate;
      }
    }
  }

  /** Slot values for a checkpoint (keys as the tfjs optimizer's: `<param>/m`, `/v`, `/momentum`). */
  state(): Map<string, Float32Array> {
    const out = new Map<string, Float32Array>();
    for (const [k, v] of this.slots) out.set(k, v instanceof Float32Array ? v : Float32Array.from(v));
    return out;
  }

  /** Restores slots written by `state` (or by the tfjs optimizer) for the parameters present. */
  load(step: number, slots: ReadonlyMap<string, Float32Array>, params: readonly HostParam[]): void {
    this.step = step;
    const byName = new Map(params.map((p) => [p.name, p.data]));
    for (const [key, data] of slots) {
      const like = byName.get(key.slice(0, key.lastIndexOf('/')));
      if (!like) continue;
      if (data.length !== like.length) throw new Error(`optimizer slot '${key}' has ${data.length} values, its parameter ${like.length}`);
      this.slot(key, like).set(data);
    }
  }
}

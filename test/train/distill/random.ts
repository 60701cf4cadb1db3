// Seeded numbers for the training tests (no vitest import, so scripts can use it too).

export { randomFloats, rng } from '../../helpers/random.js';
import { rng } from '../../helpers/random.js';

/**
 * Distinct values on a shuffled grid over [-span, span], none at the kinks 0, +-0.5, +-1 (ReLU,
 * Clip, pooling ties): finite differences with a step well below the grid gap never cross a kink.
 */
export function spacedFloats(n: number, seed: number, span = 1.5): Float32Array {
  const r = rng(seed);
  const values = Array.from({ length: n }, (_v, i) => -span + (2 * span * (i + 0.5)) / n + (0.0137 * span) / n);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [values[i], values[j]] = [values[j]!, values[i]!];
  }
  return Float32Array.from(values);
}

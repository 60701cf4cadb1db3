// Seeded numbers for tests in every folder: the project's PRNG and one way to draw floats from it
// (no vitest import, so scripts can use it too).

export { seededRandom as rng } from '../../src/util/random.js';
import { seededRandom as rng } from '../../src/util/random.js';

/** n floats uniform in [offset - scale, offset + scale) from a generator seeded with `seed`. */
export function randomFloats(n: number, seed: number, scale = 1, offset = 0): Float32Array {
  return randomArray(rng(seed), n, scale, offset);
}

/** The same, drawn from an existing generator (continues its stream). */
export function randomArray(rand: () => number, n: number, scale: number, offset = 0): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (rand() * 2 - 1) * scale + offset;
  return out;
}

/**
 * Sample order and mini-batch gathering of the training loop (./loop.ts) and its backends
 * (../tfjs/loop.ts, ../onnxruntime/loop.ts): the seeded epoch permutation (a function of seed and epoch only, so a
 * resumed run sees the same order) and row gathers of sample-first arrays, into a new array or
 * into a buffer allocated once. Plain typed arrays, no tfjs.
 * Imports: ../../ir/dtype, ../../errors, ../../util/random.
 */
import { UsageError } from '../../errors.js';
import { elementCount, type TensorData, type TypedArray } from '../../ir/dtype.js';
import { seededRandom as prng } from '../../util/random.js';

/** The sample order of an epoch: a function of (seed, epoch) only, so a resumed run sees the same order. */
export function epochPermutation(count: number, seed: number, epoch: number): Int32Array {
  const r = prng((seed * 1000003 + epoch * 7919 + 17) >>> 0);
  const p = Int32Array.from({ length: count }, (_v, i) => i);
  for (let i = count - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    const t = p[i]!;
    p[i] = p[j]!;
    p[j] = t;
  }
  return p;
}

/** Rows `indices` of a sample-first array (copy). */
export function gatherRows(td: TensorData, indices: ArrayLike<number>): TensorData {
  if (Array.isArray(td.data)) throw new UsageError('string data cannot be trained on');
  const src = td.data as TypedArray;
  const Ctor = src.constructor as new (n: number) => TypedArray;
  const out = new Ctor(indices.length * elementCount(td.dims.slice(1)));
  return gatherRowsInto(td, indices, out);
}

/** Rows `indices` of a sample-first array, copied into `out` (of the same element type, large enough). */
export function gatherRowsInto(td: TensorData, indices: ArrayLike<number>, out: TypedArray): TensorData {
  if (Array.isArray(td.data)) throw new UsageError('string data cannot be trained on');
  const row = elementCount(td.dims.slice(1));
  const src = td.data as Float32Array;
  const dst = out as Float32Array;
  for (let i = 0; i < indices.length; i++) {
    const k = indices[i]!;
    dst.set(src.subarray(k * row, (k + 1) * row), i * row);
  }
  const data = out.length === indices.length * row ? out : (out as Float32Array).subarray(0, indices.length * row);
  return { dtype: td.dtype, dims: [indices.length, ...td.dims.slice(1)], data };
}

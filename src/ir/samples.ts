/**
 * Slicing and concatenating tensors along the sample dim (dim 0): views where possible, copies
 * when joining. Shared by data readers, runners and the serving batcher.
 * Imports: ./dtype.js only.
 */
import { dtypeInfo, elementCount, type TensorData, type TypedArray } from './dtype.js';

/** Samples [start, end) along dim 0; a view on the same memory for typed arrays. */
export function sliceSamples(t: TensorData, start: number, end: number): TensorData {
  const per = elementCount(t.dims.slice(1));
  const bits = dtypeInfo(t.dtype).bits;
  if (bits === 4 && per % 2 === 1) throw new Error(`cannot slice packed 4-bit samples of odd size ${per}`);
  const scale = bits === 4 ? 0.5 : 1;
  const data = Array.isArray(t.data) ? t.data.slice(start * per, end * per) : (t.data as TypedArray).subarray(start * per * scale, end * per * scale);
  return { dtype: t.dtype, dims: [end - start, ...t.dims.slice(1)], data };
}

/** Concatenates tensors of one dtype and equal trailing dims along dim 0 (copies). */
export function concatSamples(parts: readonly TensorData[]): TensorData {
  const first = parts[0]!;
  if (parts.length === 1) return first;
  const count = parts.reduce((n, p) => n + (p.dims[0] ?? 1), 0);
  const dims = [count, ...first.dims.slice(1)];
  if (Array.isArray(first.data)) {
    return { dtype: first.dtype, dims, data: parts.flatMap((p) => p.data as string[]) };
  }
  const Ctor = dtypeInfo(first.dtype).array!;
  const total = parts.reduce((n, p) => n + p.data.length, 0);
  const out = new Ctor(total);
  let offset = 0;
  for (const p of parts) {
    (out as Float32Array).set(p.data as Float32Array, offset);
    offset += p.data.length;
  }
  return { dtype: first.dtype, dims, data: out };
}

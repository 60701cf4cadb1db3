/**
 * Laying stored samples out as a model feed: samples are stored along dim 0 ([B, ...one sample]),
 * while a model may take its batch dim elsewhere (an LSTM state [2, batch, hidden] takes it at
 * dim 1). Moving dim 0 to the batch axis, reading one sample's value, comparing two samples.
 * Pure; shared by data (batches) and bench (latency feeds).
 * Imports: ./dtype.js, ./samples.js.
 */
import { dtypeInfo, elementCount, type TensorData, type TypedArray } from './dtype.js';
import { sliceSamples } from './samples.js';

/**
 * [B, d0, ..., dk] -> the same values with dim 0 moved to `axis` (0 returns `t` itself). B == 1
 * or an axis after every dim of extent > 1 only reshapes (a view); otherwise copies.
 */
export function moveSampleAxis(t: TensorData, axis: number): TensorData {
  if (axis === 0) return t;
  const [count, ...rest] = t.dims;
  const dims = [...rest.slice(0, axis), count!, ...rest.slice(axis)];
  const outer = elementCount(rest.slice(0, axis));
  if (count === 1 || outer === 1) return { dtype: t.dtype, dims, data: t.data };
  if (dtypeInfo(t.dtype).bits === 4) throw new Error(`cannot move the sample axis of packed 4-bit data`);
  const inner = elementCount(rest.slice(axis));
  const n = count! * outer * inner;
  if (Array.isArray(t.data)) {
    const src = t.data;
    const out: string[] = new Array<string>(n);
    for (let o = 0; o < outer; o++) {
      for (let b = 0; b < count!; b++) {
        for (let i = 0; i < inner; i++) out[(o * count! + b) * inner + i] = src[(b * outer + o) * inner + i]!;
      }
    }
    return { dtype: t.dtype, dims, data: out };
  }
  const src = t.data as TypedArray;
  const out = new (src.constructor as new (n: number) => TypedArray)(n);
  for (let o = 0; o < outer; o++) {
    for (let b = 0; b < count!; b++) {
      const from = (b * outer + o) * inner;
      (out as Float32Array).set((src as Float32Array).subarray(from, from + inner), (o * count! + b) * inner);
    }
  }
  return { dtype: t.dtype, dims, data: out };
}

/** Sample `i` of `t` (stored along dim 0) as a value of its own, without the sample dim; a view. */
export function sampleValue(t: TensorData, i: number): TensorData {
  const one = sliceSamples(t, i, i + 1);
  return { dtype: one.dtype, dims: t.dims.slice(1), data: one.data };
}

/** Whether samples `i` and `j` of `t` hold the same values (NaN never equals). */
export function sameSample(t: TensorData, i: number, j: number): boolean {
  if (i === j) return true;
  const per = t.data.length / Math.max(1, t.dims[0] ?? 1);
  const d = t.data as ArrayLike<unknown>;
  for (let k = 0; k < per; k++) if (d[i * per + k] !== d[j * per + k]) return false;
  return true;
}

/**
 * The element-type conversions loadDataset allows: float to float (rounding to the target
 * precision) and integer to integer (range-checked).
 * Imports: ../ir/dtype.js only.
 */
import {
  DataType,
  dtypeInfo,
  float16ToFloat32,
  float32ToFloat16,
  bfloat16ToFloat32,
  float32ToBfloat16,
  isFloatDtype,
  type TensorData,
  type TypedArray,
} from '../ir/dtype.js';

const INT_RANGES: Partial<Record<number, [bigint, bigint]>> = {
  [DataType.INT8]: [-128n, 127n],
  [DataType.UINT8]: [0n, 255n],
  [DataType.INT16]: [-32768n, 32767n],
  [DataType.UINT16]: [0n, 65535n],
  [DataType.INT32]: [-(2n ** 31n), 2n ** 31n - 1n],
  [DataType.UINT32]: [0n, 2n ** 32n - 1n],
  [DataType.INT64]: [-(2n ** 63n), 2n ** 63n - 1n],
  [DataType.UINT64]: [0n, 2n ** 64n - 1n],
};

/** float32, float64, float16 or bfloat16 (see isFloatDtype). */
export function isConvertibleFloat(dtype: number): boolean {
  return isFloatDtype(dtype);
}
export function isInteger(dtype: number): boolean {
  return dtype in INT_RANGES;
}

function floatReader(t: TensorData): (i: number) => number {
  const d = t.data as TypedArray;
  // Half precision is stored as Uint16Array bits (the dtype table); an onnxruntime build on a
  // runtime with Float16Array hands float16 outputs over as numbers instead.
  const bits = d instanceof Uint16Array;
  if (t.dtype === DataType.FLOAT16 && bits) return (i) => float16ToFloat32(d[i] as number);
  if (t.dtype === DataType.BFLOAT16 && bits) return (i) => bfloat16ToFloat32(d[i] as number);
  return (i) => d[i] as number;
}

/** Float-to-float conversion (rounding to the target precision); half-precision data as Uint16Array bits or as numbers (Float16Array). */
export function convertFloat(t: TensorData, to: DataType): TensorData {
  const read = floatReader(t);
  const n = t.data.length;
  if (to === DataType.FLOAT16 || to === DataType.BFLOAT16) {
    const enc = to === DataType.FLOAT16 ? float32ToFloat16 : float32ToBfloat16;
    const out = new Uint16Array(n);
    for (let i = 0; i < n; i++) out[i] = enc(read(i));
    return { dtype: to, dims: t.dims, data: out };
  }
  const out = to === DataType.DOUBLE ? new Float64Array(n) : new Float32Array(n);
  if (t.dtype === DataType.FLOAT || t.dtype === DataType.DOUBLE) out.set(t.data as Float32Array);
  else for (let i = 0; i < n; i++) out[i] = read(i);
  return { dtype: to, dims: t.dims, data: out };
}

/**
 * Integer-to-integer conversion; returns the index of the first value outside the target range
 * instead of converting when there is one, so the caller can name it.
 */
export function convertInteger(t: TensorData, to: DataType): TensorData | { outOfRange: number; value: bigint } {
  const [lo, hi] = INT_RANGES[to]!;
  const src = t.data as TypedArray;
  const n = src.length;
  for (let i = 0; i < n; i++) {
    const v = BigInt(src[i]!);
    if (v < lo || v > hi) return { outOfRange: i, value: v };
  }
  const Ctor = dtypeInfo(to).array!;
  const out = new Ctor(n);
  const big = to === DataType.INT64 || to === DataType.UINT64;
  for (let i = 0; i < n; i++) {
    const v = src[i]!;
    (out as unknown as (number | bigint)[])[i] = big ? BigInt(v) : Number(v);
  }
  return { dtype: to, dims: t.dims, data: out };
}

/**
 * The little host-side tensor arithmetic the passes need (constant and BatchNormalization folding,
 * pruning's weight edits, the trainer's broadcasting): float64 views of tensors, dtype-preserving conversion back, broadcasting
 * elementwise ops, transpose and reshape-shape resolution.
 * Imports: ./dtype.js, ./tensor.js, ../errors.js.
 */
import { UsageError } from '../errors.js';
import { DataType, dtypeInfo, float32ToBfloat16, float32ToFloat16, isFloatDtype, isIntegerDtype, type TensorData, type TypedArray } from './dtype.js';
import { Tensor } from './tensor.js';

export interface F64Tensor {
  dims: number[];
  data: Float64Array;
}

export function toF64(t: Tensor): F64Tensor {
  return { dims: [...t.dims], data: t.toFloat64() };
}

/** Types toF64/fromF64 handle: the arithmetic floats, 8- to 64-bit integers and bool. */
export function isNumericDtype(dtype: number): boolean {
  return isFloatDtype(dtype) || (isIntegerDtype(dtype) && dtypeInfo(dtype).bits >= 8) || dtype === DataType.BOOL;
}

/** Float64 values -> storage of `dtype` (integers truncated toward zero, fp16/bf16 as bits). */
export function fromF64(dtype: DataType, dims: number[], values: ArrayLike<number>): TensorData {
  const info = dtypeInfo(dtype);
  if (!info.array || !isNumericDtype(dtype)) throw new UsageError(`cannot build a ${info.name} tensor from numbers`);
  const n = values.length;
  let data: TypedArray;
  if (dtype === DataType.FLOAT16 || dtype === DataType.BFLOAT16) {
    const enc = dtype === DataType.FLOAT16 ? float32ToFloat16 : float32ToBfloat16;
    const out = new Uint16Array(n);
    for (let i = 0; i < n; i++) out[i] = enc(values[i]!);
    data = out;
  } else if (dtype === DataType.INT64 || dtype === DataType.UINT64) {
    const out = dtype === DataType.INT64 ? new BigInt64Array(n) : new BigUint64Array(n);
    for (let i = 0; i < n; i++) out[i] = BigInt(Math.trunc(values[i]!));
    data = out;
  } else if (dtype === DataType.BOOL) {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = values[i] ? 1 : 0;
    data = out;
  } else {
    const Ctor = info.array as unknown as new (n: number) => TypedArray;
    const out = new Ctor(n) as unknown as number[];
    const integer = !isFloatDtype(dtype);
    for (let i = 0; i < n; i++) out[i] = integer ? Math.trunc(values[i]!) : values[i]!;
    data = out as unknown as TypedArray;
  }
  return { dtype, dims, data };
}

export function broadcastShape(a: readonly number[], b: readonly number[]): number[] {
  const rank = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < rank; i++) {
    const da = a[a.length - rank + i] ?? 1;
    const db = b[b.length - rank + i] ?? 1;
    if (da !== db && da !== 1 && db !== 1) throw new UsageError(`shapes [${a}] and [${b}] do not broadcast`);
    out.push(da === 1 ? db : da);
  }
  return out;
}

/** Index into a broadcast operand for each output element. */
export function broadcastIndex(src: readonly number[], out: readonly number[]): Int32Array {
  const n = out.reduce((x, y) => x * y, 1);
  const rank = out.length;
  const padded = [...Array(rank - src.length).fill(1), ...src] as number[];
  const strides = new Array<number>(rank).fill(0);
  let s = 1;
  for (let i = rank - 1; i >= 0; i--) {
    strides[i] = padded[i] === 1 ? 0 : s;
    s *= padded[i]!;
  }
  const idx = new Int32Array(n);
  const counter = new Array<number>(rank).fill(0);
  let off = 0;
  for (let k = 0; k < n; k++) {
    idx[k] = off;
    for (let d = rank - 1; d >= 0; d--) {
      counter[d]!++;
      off += strides[d]!;
      if (counter[d]! < out[d]!) break;
      off -= strides[d]! * counter[d]!;
      counter[d] = 0;
    }
  }
  return idx;
}

export function elementwise(a: F64Tensor, b: F64Tensor, fn: (x: number, y: number) => number): F64Tensor {
  const dims = broadcastShape(a.dims, b.dims);
  const ia = broadcastIndex(a.dims, dims);
  const ib = broadcastIndex(b.dims, dims);
  const data = new Float64Array(ia.length);
  for (let k = 0; k < data.length; k++) data[k] = fn(a.data[ia[k]!]!, b.data[ib[k]!]!);
  return { dims, data };
}

export function transpose(t: F64Tensor, perm?: readonly number[]): F64Tensor {
  const rank = t.dims.length;
  const p = perm && perm.length > 0 ? perm : [...Array(rank).keys()].reverse();
  const dims = p.map((i) => t.dims[i]!);
  const inStrides = new Array<number>(rank).fill(1);
  for (let i = rank - 2; i >= 0; i--) inStrides[i] = inStrides[i + 1]! * t.dims[i + 1]!;
  const n = t.data.length;
  const data = new Float64Array(n);
  const counter = new Array<number>(rank).fill(0);
  for (let k = 0; k < n; k++) {
    let off = 0;
    for (let d = 0; d < rank; d++) off += counter[d]! * inStrides[p[d]!]!;
    data[k] = t.data[off]!;
    for (let d = rank - 1; d >= 0; d--) {
      counter[d]!++;
      if (counter[d]! < dims[d]!) break;
      counter[d] = 0;
    }
  }
  return { dims, data };
}

/** Reshape's target dims: 0 copies the input dim (unless allowzero), -1 is inferred. */
export function reshapeDims(inDims: readonly number[], shape: readonly number[], allowZero = false): number[] {
  const total = inDims.reduce((x, y) => x * y, 1);
  const out = shape.map((d, i) => (d === 0 && !allowZero ? inDims[i]! : d));
  const known = out.filter((d) => d !== -1).reduce((x, y) => x * y, 1);
  const inferred = out.indexOf(-1);
  if (inferred >= 0) out[inferred] = known === 0 ? 0 : total / known;
  if (out.reduce((x, y) => x * y, 1) !== total) throw new UsageError(`cannot reshape [${inDims}] to [${shape}]`);
  return out;
}

/** A fresh tensor from float64 data in the dtype of `like`. */
export function tensorLike(name: string, dtype: DataType, t: F64Tensor): Tensor {
  return Tensor.fromData(name, fromF64(dtype, t.dims, t.data));
}

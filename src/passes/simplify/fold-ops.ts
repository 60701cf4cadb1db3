/**
 * Exact constant folding of the ops that build shapes, indices and branch conditions (Shape, Size,
 * Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Identity, Cast, Equal, Greater, Less, Not,
 * And, Or): elements are moved or compared in their own dtype (int64 stays BigInt, fp16 stays bits),
 * never through float64, so an index or a sample rate folds to exactly what onnxruntime computes.
 * One row per op; a row returns undefined (or throws) to leave the node to the runtime.
 * Imports the IR (dtype, tensor, tensor-math, graph types).
 */
import { DataType, dtypeInfo, elementCount, type TensorData, type TypedArray } from '../../ir/dtype.js';
import type { Node, Value } from '../../ir/graph.js';
import type { Tensor } from '../../ir/tensor.js';
import { isTensorType } from '../../ir/types.js';
import { broadcastIndex, broadcastShape, fromF64, reshapeDims } from '../../ir/tensor-math.js';
import { nullPrototype } from '../../util/null-prototype.js';

/** Inputs: the constant tensor of each input (undefined for an omitted optional one). */
export type ExactFolder = (node: Node, inputs: readonly (Tensor | undefined)[], opset: number) => TensorData | undefined;

type Elements = TypedArray | string[];

/** Dtypes whose elements can be moved one by one (not packed 4-bit, not complex pairs). */
export function isMovableDtype(dtype: number): boolean {
  if (dtype === DataType.STRING) return true;
  if (dtype === DataType.COMPLEX64 || dtype === DataType.COMPLEX128) return false;
  const info = dtypeInfo(dtype);
  return info.array !== null && info.bits >= 8;
}

function emptyLike(data: Elements, n: number): Elements {
  if (Array.isArray(data)) return new Array<string>(n);
  return new (data.constructor as new (n: number) => TypedArray)(n);
}

function copyInto(out: Elements, k: number, data: Elements, j: number): void {
  (out as unknown as unknown[])[k] = (data as unknown as unknown[])[j];
}

const ints = (t: Tensor | undefined): number[] | undefined => (t ? Array.from(t.data as ArrayLike<number | bigint>, Number) : undefined);

function normAxis(axis: number, rank: number): number {
  const a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) throw new RangeError(`axis ${axis} out of range for rank ${rank}`);
  return a;
}

function strides(dims: readonly number[]): number[] {
  const out = new Array<number>(dims.length).fill(1);
  for (let i = dims.length - 2; i >= 0; i--) out[i] = out[i + 1]! * dims[i + 1]!;
  return out;
}

/** Same elements, new dims. */
const withDims = (t: Tensor, dims: number[]): TensorData => ({ dtype: t.dtype, dims, data: t.data.slice() as Elements });

/** The axes an op takes from its input (opset 13+) or from its `axes` attribute. */
function axesOf(node: Node, input: Tensor | undefined): number[] | undefined {
  return input ? ints(input) : node.hasAttr('axes') ? node.getInts('axes') : undefined;
}

function gather(node: Node, [data, indices]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!data || !indices) return undefined;
  const axis = normAxis(node.getInt('axis', 0), data.dims.length);
  const size = data.dims[axis]!;
  const outer = elementCount(data.dims.slice(0, axis));
  const inner = elementCount(data.dims.slice(axis + 1));
  const idx = ints(indices)!.map((i) => (i < 0 ? i + size : i));
  if (idx.some((i) => i < 0 || i >= size)) throw new RangeError('Gather index out of range');
  const src = data.data as Elements;
  const out = emptyLike(src, outer * idx.length * inner);
  let k = 0;
  for (let o = 0; o < outer; o++) for (const i of idx) for (let j = 0; j < inner; j++) copyInto(out, k++, src, (o * size + i) * inner + j);
  return { dtype: data.dtype, dims: [...data.dims.slice(0, axis), ...indices.dims, ...data.dims.slice(axis + 1)], data: out };
}

/** Start, element count and step of one sliced axis, clamped as the ONNX spec says. */
function sliceRange(start: number, end: number, step: number, dim: number): { start: number; count: number } {
  if (step === 0) throw new RangeError('Slice step 0');
  let s = start < 0 ? start + dim : start;
  let e = end < 0 ? end + dim : end;
  if (step > 0) {
    s = Math.min(Math.max(s, 0), dim);
    e = Math.min(Math.max(e, 0), dim);
  } else {
    s = Math.min(Math.max(s, 0), dim - 1);
    e = Math.min(Math.max(e, -1), dim - 1);
  }
  return { start: s, count: Math.max(0, Math.ceil((e - s) / step)) };
}

function slice(node: Node, inputs: readonly (Tensor | undefined)[], opset: number): TensorData | undefined {
  const data = inputs[0];
  if (!data) return undefined;
  const rank = data.dims.length;
  const fromAttrs = opset < 10;
  const starts = fromAttrs ? node.getInts('starts') : ints(inputs[1]);
  const ends = fromAttrs ? node.getInts('ends') : ints(inputs[2]);
  if (!starts || !ends || starts.length !== ends.length) return undefined;
  const axes = (fromAttrs ? (node.hasAttr('axes') ? node.getInts('axes') : undefined) : ints(inputs[3])) ?? starts.map((_, i) => i);
  const steps = (fromAttrs ? undefined : ints(inputs[4])) ?? starts.map(() => 1);
  const begin = new Array<number>(rank).fill(0);
  const step = new Array<number>(rank).fill(1);
  const dims = [...data.dims];
  axes.forEach((raw, i) => {
    const a = normAxis(raw, rank);
    const r = sliceRange(starts[i]!, ends[i]!, steps[i]!, data.dims[a]!);
    begin[a] = r.start;
    step[a] = steps[i]!;
    dims[a] = r.count;
  });
  const inStrides = strides(data.dims);
  const src = data.data as Elements;
  const n = elementCount(dims);
  const out = emptyLike(src, n);
  const counter = new Array<number>(rank).fill(0);
  for (let k = 0; k < n; k++) {
    let off = 0;
    for (let d = 0; d < rank; d++) off += (begin[d]! + counter[d]! * step[d]!) * inStrides[d]!;
    copyInto(out, k, src, off);
    for (let d = rank - 1; d >= 0; d--) {
      if (++counter[d]! < dims[d]!) break;
      counter[d] = 0;
    }
  }
  return { dtype: data.dtype, dims, data: out };
}

function concat(node: Node, inputs: readonly (Tensor | undefined)[]): TensorData | undefined {
  const parts = inputs.filter((t): t is Tensor => t !== undefined);
  if (parts.length === 0 || parts.length !== inputs.length) return undefined;
  const first = parts[0]!;
  const axis = normAxis(node.getInt('axis'), first.dims.length);
  const outer = elementCount(first.dims.slice(0, axis));
  const dims = [...first.dims];
  dims[axis] = parts.reduce((s, t) => s + t.dims[axis]!, 0);
  const out = emptyLike(first.data as Elements, elementCount(dims));
  let k = 0;
  for (let o = 0; o < outer; o++) {
    for (const t of parts) {
      if (t.dtype !== first.dtype || t.dims.length !== first.dims.length) return undefined;
      const chunk = elementCount(t.dims.slice(axis));
      for (let j = 0; j < chunk; j++) copyInto(out, k++, t.data as Elements, o * chunk + j);
    }
  }
  return { dtype: first.dtype, dims, data: out };
}

function unsqueeze(node: Node, [a, axesInput]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!a) return undefined;
  const raw = axesOf(node, axesInput) ?? [];
  const rank = a.dims.length + raw.length;
  const axes = raw.map((x) => normAxis(x, rank));
  const dims: number[] = [];
  let k = 0;
  for (let i = 0; i < rank; i++) dims.push(axes.includes(i) ? 1 : a.dims[k++]!);
  return withDims(a, dims);
}

function squeeze(node: Node, [a, axesInput]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!a) return undefined;
  const axes = axesOf(node, axesInput)?.map((x) => normAxis(x, a.dims.length));
  if (axes?.some((x) => a.dims[x] !== 1)) throw new RangeError('Squeeze of a dim that is not 1');
  return withDims(
    a,
    a.dims.filter((d, i) => (axes ? !axes.includes(i) : d !== 1)),
  );
}

/** Cast between numeric dtypes: integers to 64-bit integers exactly (BigInt), the rest through numbers. */
function cast(node: Node, [a]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!a || a.dtype === DataType.STRING) return undefined;
  const to = node.getInt('to') as DataType;
  if (to === DataType.STRING || !isMovableDtype(to)) return undefined;
  if (to === a.dtype) return withDims(a, [...a.dims]);
  const src = a.data as TypedArray;
  if ((to === DataType.INT64 || to === DataType.UINT64) && (src instanceof BigInt64Array || src instanceof BigUint64Array)) {
    const wrap = to === DataType.INT64 ? (v: bigint) => BigInt.asIntN(64, v) : (v: bigint) => BigInt.asUintN(64, v);
    const out = to === DataType.INT64 ? new BigInt64Array(src.length) : new BigUint64Array(src.length);
    for (let i = 0; i < src.length; i++) out[i] = wrap(src[i]!);
    return { dtype: to, dims: [...a.dims], data: out };
  }
  const values = a.toFloat64();
  if ((to === DataType.INT64 || to === DataType.UINT64) && values.some((v) => !Number.isFinite(v))) return undefined;
  return fromF64(to, [...a.dims], values);
}

/** Elementwise comparison or logic with broadcasting; the result is bool. */
function compare(test: (x: number | bigint | string, y: number | bigint | string) => boolean): ExactFolder {
  return (_node, [a, b]) => {
    if (!a || !b) return undefined;
    const dims = broadcastShape(a.dims, b.dims);
    const ia = broadcastIndex(a.dims, dims);
    const ib = broadcastIndex(b.dims, dims);
    const da = a.data as ArrayLike<number | bigint | string>;
    const db = b.data as ArrayLike<number | bigint | string>;
    const bothBig = typeof da[0] === 'bigint' && typeof db[0] === 'bigint';
    const out = new Uint8Array(ia.length);
    for (let k = 0; k < out.length; k++) {
      const x = da[ia[k]!]!;
      const y = db[ib[k]!]!;
      out[k] = (bothBig || typeof x === 'string' ? test(x, y) : test(Number(x), Number(y))) ? 1 : 0;
    }
    return { dtype: DataType.BOOL, dims, data: out };
  };
}

/** Op type -> exact folder. Adding an op is adding a row. */
export const EXACT_FOLDERS: Record<string, ExactFolder> = nullPrototype<ExactFolder>({
  Identity: (_n, [a]) => (a ? withDims(a, [...a.dims]) : undefined),
  Gather: gather,
  Slice: slice,
  Concat: concat,
  Unsqueeze: unsqueeze,
  Squeeze: squeeze,
  Reshape: (node, [a, shape]) => (a && shape ? withDims(a, reshapeDims(a.dims, ints(shape)!, node.getInt('allowzero', 0) === 1)) : undefined),
  Cast: cast,
  Equal: compare((x, y) => x === y),
  Greater: compare((x, y) => x > y),
  Less: compare((x, y) => x < y),
  And: compare((x, y) => Boolean(x) && Boolean(y)),
  Or: compare((x, y) => Boolean(x) || Boolean(y)),
  Not: (_n, [a]) =>
    a && a.dtype === DataType.BOOL ? { dtype: DataType.BOOL, dims: [...a.dims], data: (a.data as Uint8Array).map((v) => (v ? 0 : 1)) } : undefined,
});

/** Dims of a value: from its constant tensor, else its declared type (numbers, or names/null for symbolic dims). */
export function declaredDims(value: Value, constant: Tensor | undefined): (number | string | null)[] | undefined {
  if (constant) return [...constant.dims];
  const type = value.type;
  if (!type || !isTensorType(type) || !type.shape) return undefined;
  return [...type.shape];
}

/** The dims a Shape node (opset-15 start/end) reports of `dims`. */
function shapeSlice(node: Node, dims: readonly (number | string | null)[]): (number | string | null)[] {
  const rank = dims.length;
  const clamp = (v: number): number => Math.min(Math.max(v < 0 ? v + rank : v, 0), rank);
  const start = clamp(node.getInt('start', 0));
  return dims.slice(start, Math.max(start, clamp(node.getInt('end', rank))));
}

const allNumbers = (dims: readonly (number | string | null)[]): dims is number[] => dims.every((d) => typeof d === 'number');

/** Shape (with opset-15 start/end) or Size of a value whose dims are known; undefined otherwise. */
export function foldShapeOf(node: Node, dims: readonly (number | string | null)[] | undefined): TensorData | undefined {
  if (!dims) return undefined;
  if (node.opType === 'Size') return allNumbers(dims) ? { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(BigInt(elementCount(dims))) } : undefined;
  const picked = shapeSlice(node, dims);
  return allNumbers(picked) ? { dtype: DataType.INT64, dims: [picked.length], data: BigInt64Array.from(picked, BigInt) } : undefined;
}

/**
 * Gather of some entries of a Shape whose other dims are symbolic (`Gather(Shape(x), 1)` with only
 * the batch dim unknown, as exporters write it): the picked dims, when they are all known.
 */
export function foldGatherOfShape(
  gather: Node,
  shape: Node,
  dims: readonly (number | string | null)[] | undefined,
  indices: Tensor | undefined,
): TensorData | undefined {
  if (!dims || !indices || gather.getInt('axis', 0) !== 0) return undefined;
  const entries = shapeSlice(shape, dims);
  const picked = ints(indices)!.map((i) => entries[i < 0 ? i + entries.length : i]);
  if (picked.some((d) => typeof d !== 'number')) return undefined;
  return { dtype: DataType.INT64, dims: [...indices.dims], data: BigInt64Array.from(picked as number[], BigInt) };
}

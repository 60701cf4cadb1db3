/**
 * Exact constant folding of the ops that build shapes, indices, masks and branch conditions (Shape,
 * Size, Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Identity, Cast, Equal, Greater, Less,
 * Not, And, Or, Where, Range, ConstantOfShape, Expand, Tile): elements are moved or compared in
 * their own dtype (int64 stays BigInt, fp16 stays bits), never through float64, so an index or a
 * sample rate folds to exactly what onnxruntime computes. The ops that make a larger tensor than
 * they read (Range, ConstantOfShape, Expand, Tile) fold only up to MAX_GROWN_ELEMENTS: beyond, a
 * folded constant would only grow the file. One row per op; a row returns undefined (or throws) to
 * leave the node to the runtime.
 * Imports the IR (dtype, tensor, tensor-math, graph types).
 */
import { DataType, dtypeInfo, elementCount, type TensorData, type TypedArray } from '../../ir/dtype.js';
import type { Node, Value } from '../../ir/graph.js';
import type { Tensor } from '../../ir/tensor.js';
import { isTensorType } from '../../ir/types.js';
import { broadcastIndex, broadcastShape, fromF64, reshapeDims } from '../../ir/tensor-math.js';
import { Tensor as TensorClass } from '../../ir/tensor.js';
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

/**
 * Most elements a folded Range/ConstantOfShape/Expand/Tile may have: shape vectors, index lists and
 * small masks fold; a larger output stays a node (as a constant it would only grow the file).
 */
export const MAX_GROWN_ELEMENTS = 4096;

function checkGrown(dims: readonly number[]): void {
  if (dims.some((d) => !Number.isInteger(d) || d < 0)) throw new RangeError(`bad dims [${dims.join(', ')}]`);
  if (elementCount(dims) > MAX_GROWN_ELEMENTS) throw new RangeError('output too large to fold');
}

/** Elementwise Where(cond, x, y) with broadcasting; x and y keep their dtype. */
function where(_node: Node, [cond, x, y]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!cond || !x || !y || x.dtype !== y.dtype) return undefined;
  const dims = broadcastShape(broadcastShape(cond.dims, x.dims), y.dims);
  const ic = broadcastIndex(cond.dims, dims);
  const ix = broadcastIndex(x.dims, dims);
  const iy = broadcastIndex(y.dims, dims);
  const c = cond.data as ArrayLike<number>;
  const out = emptyLike(x.data as Elements, ic.length);
  for (let k = 0; k < ic.length; k++) {
    if (c[ic[k]!]) copyInto(out, k, x.data as Elements, ix[k]!);
    else copyInto(out, k, y.data as Elements, iy[k]!);
  }
  return { dtype: x.dtype, dims, data: out };
}

/**
 * Range(start, limit, delta): integers exactly (BigInt for int64); float32 accumulates in float32
 * (value += delta), as onnxruntime's kernel does, double in double.
 */
function range(_node: Node, [start, limit, delta]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!start || !limit || !delta || start.elementCount !== 1 || limit.elementCount !== 1 || delta.elementCount !== 1) return undefined;
  const dtype = start.dtype;
  if (limit.dtype !== dtype || delta.dtype !== dtype) return undefined;
  const s0 = (start.data as ArrayLike<number | bigint>)[0]!;
  const l0 = (limit.data as ArrayLike<number | bigint>)[0]!;
  const d0 = (delta.data as ArrayLike<number | bigint>)[0]!;
  if (typeof s0 === 'bigint') {
    const d = d0 as bigint;
    if (d === 0n) throw new RangeError('Range delta 0');
    const span = (l0 as bigint) - s0;
    // ceil(span / d) for either sign of d, in integers.
    const q = span / d;
    const n = Number(q * d === span || span > 0n !== d > 0n ? q : q + 1n);
    const count = Math.max(0, n);
    checkGrown([count]);
    const out = new BigInt64Array(count);
    for (let i = 0; i < count; i++) out[i] = s0 + BigInt(i) * d;
    return { dtype, dims: [count], data: out };
  }
  if (dtype !== DataType.FLOAT && dtype !== DataType.DOUBLE && dtype !== DataType.INT32 && dtype !== DataType.INT16) return undefined;
  const [s, l, d] = [s0, l0, d0] as number[];
  if (d === 0) throw new RangeError('Range delta 0');
  const count = Math.max(0, Math.ceil((l! - s!) / d!));
  checkGrown([count]);
  const round = dtype === DataType.FLOAT ? Math.fround : (v: number) => v;
  const values = new Float64Array(count);
  for (let i = 0, v = s!; i < count; i++, v = round(v + d!)) values[i] = v;
  return fromF64(dtype, [count], values);
}

/** ConstantOfShape(shape): the `value` attribute (default float32 0) repeated. */
function constantOfShape(node: Node, [shape]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!shape) return undefined;
  const dims = ints(shape)!;
  checkGrown(dims);
  const value = node.hasAttr('value') ? node.getTensor('value') : undefined;
  const fill = value ?? TensorClass.fromData('value', { dtype: DataType.FLOAT, dims: [1], data: Float32Array.of(0) });
  if (fill.elementCount !== 1 || !isMovableDtype(fill.dtype) || fill.dtype === DataType.STRING) return undefined;
  const out = emptyLike(fill.data as Elements, elementCount(dims));
  for (let k = 0; k < out.length; k++) copyInto(out, k, fill.data as Elements, 0);
  return { dtype: fill.dtype, dims, data: out };
}

/** Expand(input, shape): bidirectional broadcast of the input to the shape. */
function expand(_node: Node, [a, shape]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!a || !shape) return undefined;
  const dims = broadcastShape(a.dims, ints(shape)!);
  checkGrown(dims);
  const idx = broadcastIndex(a.dims, dims);
  const out = emptyLike(a.data as Elements, idx.length);
  for (let k = 0; k < idx.length; k++) copyInto(out, k, a.data as Elements, idx[k]!);
  return { dtype: a.dtype, dims, data: out };
}

/** Tile(input, repeats): each axis repeated. */
function tile(_node: Node, [a, repeats]: readonly (Tensor | undefined)[]): TensorData | undefined {
  if (!a || !repeats) return undefined;
  const reps = ints(repeats)!;
  if (reps.length !== a.dims.length) throw new RangeError('Tile repeats of the wrong length');
  const dims = a.dims.map((d, i) => d * reps[i]!);
  checkGrown(dims);
  const inStrides = strides(a.dims);
  const n = elementCount(dims);
  const out = emptyLike(a.data as Elements, n);
  const counter = new Array<number>(dims.length).fill(0);
  for (let k = 0; k < n; k++) {
    let off = 0;
    for (let d = 0; d < dims.length; d++) off += (counter[d]! % a.dims[d]!) * inStrides[d]!;
    copyInto(out, k, a.data as Elements, off);
    for (let d = dims.length - 1; d >= 0; d--) {
      if (++counter[d]! < dims[d]!) break;
      counter[d] = 0;
    }
  }
  return { dtype: a.dtype, dims, data: out };
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
  Where: where,
  Range: range,
  ConstantOfShape: constantOfShape,
  Expand: expand,
  Tile: tile,
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

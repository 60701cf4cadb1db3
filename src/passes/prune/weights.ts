/**
 * Weight access for the pruning passes: find a node's constant input (initializer or Constant
 * node), slice tensors along an axis, per-channel norms, and write a rewritten constant back
 * without touching other readers of the same tensor.
 * Imports: ../../ir/index.js, ../../errors.js, ../../ir/tensor-math.js (float64 -> storage).
 */
import { InputError } from '../../errors.js';
import { fromF64 } from '../../ir/tensor-math.js';
import {
  DataType,
  dtypeInfo,
  elementCount,
  isFloatDtype,
  isTensorType,
  Tensor,
  type Node,
  type TensorData,
  type TypedArray,
  type Value,
} from '../../ir/index.js';

/**
 * Float dtypes whose zero is the all-zero bit pattern, so pruning may write 0 into storage: the
 * arithmetic floats of the one dtype table (isFloatDtype), as a has() view for this folder's callers.
 */
export const PRUNABLE_DTYPES: Pick<ReadonlySet<number>, 'has'> = { has: (dtype: number): boolean => isFloatDtype(dtype) };

/** The constant tensor behind input `index` of `node`, if the input is a constant. */
export function constantInput(node: Node, index: number): Tensor | undefined {
  const v = node.inputs[index];
  if (!v) return undefined;
  const t = v.graph.constantTensor(v);
  return t && t.hasData ? t : undefined;
}

/** Number of elements of every float constant a node reads (its parameters). */
export function nodeParams(node: Node): number {
  let n = 0;
  for (let i = 0; i < node.inputs.length; i++) {
    const t = constantInput(node, i);
    if (t && PRUNABLE_DTYPES.has(t.dtype)) n += t.elementCount;
  }
  return n;
}

/** Copy of `td` keeping only the listed indices along `axis` (storage elements, so fp16 bits stay bits). */
export function sliceAxis(td: TensorData, axis: number, keep: readonly number[]): TensorData {
  if (dtypeInfo(td.dtype).bits < 8 || Array.isArray(td.data)) {
    throw new InputError(`cannot slice a ${dtypeInfo(td.dtype).name} tensor`);
  }
  const dims = td.dims;
  const outer = elementCount(dims.slice(0, axis));
  const len = dims[axis]!;
  const inner = elementCount(dims.slice(axis + 1));
  const src = td.data as TypedArray;
  const Ctor = src.constructor as new (n: number) => TypedArray;
  const out = new Ctor(outer * keep.length * inner);
  let o = 0;
  for (let a = 0; a < outer; a++) {
    for (const k of keep) {
      const start = (a * len + k) * inner;
      (out as Float32Array).set((src as Float32Array).subarray(start, start + inner), o);
      o += inner;
    }
  }
  const newDims = [...dims];
  newDims[axis] = keep.length;
  return { dtype: td.dtype, dims: newDims, data: out };
}

/** Per-index norm along `axis` (l1: sum |w|, l2: sqrt(sum w^2)) over every other axis. */
export function axisNorms(tensor: Tensor, axis: number, criterion: 'l1' | 'l2'): Float64Array {
  const w = tensor.toFloat64();
  const dims = tensor.dims;
  const outer = elementCount(dims.slice(0, axis));
  const len = dims[axis]!;
  const inner = elementCount(dims.slice(axis + 1));
  const acc = new Float64Array(len);
  for (let a = 0; a < outer; a++) {
    for (let k = 0; k < len; k++) {
      const base = (a * len + k) * inner;
      let s = 0;
      for (let i = 0; i < inner; i++) {
        const x = w[base + i]!;
        s += criterion === 'l1' ? Math.abs(x) : x * x;
      }
      acc[k] = acc[k]! + s;
    }
  }
  if (criterion === 'l2') for (let k = 0; k < len; k++) acc[k] = Math.sqrt(acc[k]!);
  return acc;
}

/** Whether the tensor behind `value` can be changed in place: this node is its only reader. */
function ownedBy(value: Value, node: Node, tensor: Tensor): boolean {
  if (value.isGraphOutput() || value.isGraphInput()) return false;
  if (value.uses().length !== 1 || value.uses()[0]!.node !== node) return false;
  if (value.initializer === tensor) return true;
  // A Constant node's `value` attribute holds the tensor itself; value_float(s) etc. do not.
  return value.producer?.opType === 'Constant' && value.producer.getTensor('value') === tensor;
}

/**
 * Make input `index` of `node` hold `td`. Rewrites the tensor in place when only this node reads
 * it; otherwise adds a new initializer so other readers keep the original.
 */
export function setConstantInput(node: Node, index: number, td: TensorData): void {
  const value = node.inputs[index];
  const tensor = constantInput(node, index);
  if (!value || !tensor) throw new InputError(`node '${node.name || node.opType}': input ${index} is not a constant`);
  if (ownedBy(value, node, tensor)) {
    tensor.dims = [...td.dims];
    tensor.data = td.data;
    // The bytes now live in memory; a stale external location must not be written back.
    tensor.external = undefined;
    if (isTensorType(value.type) && value.type.shape) value.type.shape = [...td.dims];
    return;
  }
  const graph = node.graph;
  const fresh = graph.addInitializer(Tensor.fromData(graph.uniqueName(`${value.name || node.name}_pruned`), td));
  node.setInput(index, fresh);
}

/**
 * Add `delta` (one number per output channel) to the per-channel bias at input `index` of a
 * layer, creating the bias when the input is absent. Returns false, changing nothing, when the
 * existing input is not a constant vector of that length.
 */
export function addToBias(node: Node, index: number, delta: Float64Array, dtype: DataType): boolean {
  if (!node.inputs[index]) {
    const graph = node.graph;
    const tensor = Tensor.fromData(graph.uniqueName(`${node.name || node.opType}_bias`), fromF64(dtype, [delta.length], delta));
    node.setInput(index, graph.addInitializer(tensor));
    return true;
  }
  const bias = constantInput(node, index);
  if (!bias || !PRUNABLE_DTYPES.has(bias.dtype) || bias.elementCount !== delta.length) return false;
  const values = bias.toFloat64();
  for (let i = 0; i < values.length; i++) values[i] = values[i]! + delta[i]!;
  setConstantInput(node, index, fromF64(bias.dtype, [...bias.dims], values));
  return true;
}

/**
 * Add `delta` (one number per output channel / feature) to whatever acts as the layer's bias:
 * input 2 of Conv / ConvTranspose (created when absent), Gemm's C (scaled by alpha / beta), or
 * the constant of an Add that is a MatMul's only reader. Returns true, or why it could not.
 */
export function addOutputBias(node: Node, delta: Float64Array, dtype: DataType): true | string {
  switch (node.opType) {
    case 'Conv':
    case 'ConvTranspose':
      return addToBias(node, 2, delta, dtype) || 'its bias is not a constant vector';
    case 'Gemm': {
      const alpha = node.getFloat('alpha', 1);
      const beta = node.getFloat('beta', 1);
      const c = node.inputs[2] ? constantInput(node, 2) : undefined;
      if (node.inputs[2] && (!c || beta === 0)) return 'its C is not a constant it can add to';
      const scaled = delta.map((d) => (d * alpha) / beta);
      if (c && c.elementCount === 1) {
        // A scalar C widens to one value per output feature.
        const base = c.toFloat64()[0]!;
        node.setInput(2, null);
        return (
          addToBias(
            node,
            2,
            scaled.map((d) => d + base),
            c.dtype,
          ) || 'its C is not a constant vector'
        );
      }
      return addToBias(node, 2, scaled, dtype) || 'its C is not a per-feature vector';
    }
    case 'MatMul': {
      const out = node.outputs[0]!;
      const readers = out.uses();
      const add = readers.length === 1 && readers[0]!.node.opType === 'Add' && !out.isGraphOutput() ? readers[0]!.node : undefined;
      const other = add ? 1 - readers[0]!.index : -1;
      const c = add ? constantInput(add, other) : undefined;
      if (!add || !c || !PRUNABLE_DTYPES.has(c.dtype) || c.elementCount !== delta.length || c.dims[c.dims.length - 1] !== delta.length) {
        return 'MatMul is not followed by an Add of a per-feature constant';
      }
      return addToBias(add, other, delta, dtype) || 'the following Add has no constant vector';
    }
    default:
      return `${node.opType} has no bias`;
  }
}

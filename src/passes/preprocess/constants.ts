/**
 * Constant handling before quantization: Constant nodes become initializers (so weights in
 * Constant nodes quantize like any weight), Identity and inference-time Dropout nodes are removed,
 * and nodes whose inputs are all constant are folded for a small set of ops evaluated here in
 * float64 (Cast, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Add, Sub, Mul, Div, Neg, Sqrt,
 * Reciprocal, Identity). These edit the graph they are given (the pre-processing entry point works on
 * a clone). Imports the IR (with ir/tensor-math).
 */
import { nullPrototype } from '../../util/null-prototype.js';
import { DataType } from '../../ir/dtype.js';
import { Tensor, type Graph, type Node, type Value } from '../../ir/index.js';
import { elementwise, isNumericDtype, reshapeDims, tensorLike, toF64, transpose, type F64Tensor } from '../../ir/tensor-math.js';

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

/** Folding stops at tensors bigger than this (elements), so a pass never balloons a model. */
const MAX_FOLD_ELEMENTS = 1 << 24;

/**
 * Replace the node producing `out` by an initializer holding `tensor`, keeping the value's name so
 * graph outputs and value_info stay valid. Returns false when that is not possible.
 */
export function replaceWithInitializer(graph: Graph, node: Node, out: Value, tensor: Tensor): boolean {
  if (out.isGraphOutput() || node.outputs.length !== 1) return false;
  const name = out.name;
  const tmp = graph.addInitializer(tensor.clone(graph.uniqueName(`${name}__folded`)));
  graph.replaceAllUsesWith(out, tmp);
  graph.removeNode(node);
  tmp.rename(name);
  return true;
}

/** Constant nodes -> initializers (in every graph). Returns the count converted. */
export function constantsToInitializers(graph: Graph): number {
  let count = 0;
  for (const g of graph.allGraphs()) {
    for (const node of [...g.nodes]) {
      if (node.opType !== 'Constant' || !isDefaultDomain(node)) continue;
      const out = node.outputs[0];
      if (!out) continue;
      const t = g.constantTensor(out);
      if (!t) continue; // sparse_value stays a node
      if (replaceWithInitializer(g, node, out, t)) count++;
    }
  }
  return count;
}

/** Remove Identity and Dropout (inference: identity; only when its mask output is unused). */
export function removeIdentities(graph: Graph): number {
  let count = 0;
  for (const g of graph.allGraphs()) {
    for (const node of [...g.nodes]) {
      if (!isDefaultDomain(node)) continue;
      const isDropout = node.opType === 'Dropout';
      if (node.opType !== 'Identity' && !isDropout) continue;
      const input = node.inputs[0];
      const out = node.outputs[0];
      if (!input || !out || out.isGraphOutput()) continue;
      if (isDropout) {
        const mask = node.outputs[1];
        if (mask && mask.name !== '' && (mask.consumers.length > 0 || mask.isGraphOutput())) continue;
        // Dropout-12+ in training mode is not an identity.
        const training = node.inputs[2] ? g.constantTensor(node.inputs[2]) : undefined;
        if (node.inputs[2] && (!training || training.toFloat64()[0] !== 0)) continue;
      }
      g.replaceAllUsesWith(out, input);
      g.removeNode(node, { force: true });
      count++;
    }
  }
  return count;
}

type Folder = (node: Node, inputs: (Tensor | undefined)[]) => { dtype: DataType; t: F64Tensor } | undefined;

const binary =
  (fn: (x: number, y: number) => number): Folder =>
  (_node, [a, b]) => {
    if (!a || !b) return undefined;
    return { dtype: a.dtype, t: elementwise(toF64(a), toF64(b), fn) };
  };

const unary =
  (fn: (x: number) => number): Folder =>
  (_node, [a]) => {
    if (!a) return undefined;
    const t = toF64(a);
    return { dtype: a.dtype, t: { dims: t.dims, data: t.data.map(fn) } };
  };

const axesOf = (node: Node, inputs: (Tensor | undefined)[], rank: number): number[] | undefined => {
  const fromInput = inputs[1];
  const raw = fromInput ? Array.from(fromInput.toFloat64()) : node.hasAttr('axes') ? node.getInts('axes') : undefined;
  return raw?.map((a) => (a < 0 ? a + rank : a));
};

/** Op type -> how to fold it when every input is constant. Adding an op is adding a row. */
const FOLDERS: Record<string, Folder> = nullPrototype<Folder>({
  Identity: (_n, [a]) => (a ? { dtype: a.dtype, t: toF64(a) } : undefined),
  Add: binary((x, y) => x + y),
  Sub: binary((x, y) => x - y),
  Mul: binary((x, y) => x * y),
  Div: binary((x, y) => x / y),
  Neg: unary((x) => -x),
  Sqrt: unary(Math.sqrt),
  Reciprocal: unary((x) => 1 / x),
  Cast: (node, [a]) => (a ? { dtype: node.getInt('to') as DataType, t: toF64(a) } : undefined),
  Transpose: (node, [a]) => (a ? { dtype: a.dtype, t: transpose(toF64(a), node.hasAttr('perm') ? node.getInts('perm') : undefined) } : undefined),
  Reshape: (node, [a, shape]) => {
    if (!a || !shape) return undefined;
    const dims = reshapeDims(a.dims, Array.from(shape.toFloat64()), node.getInt('allowzero', 0) === 1);
    return { dtype: a.dtype, t: { dims, data: a.toFloat64() } };
  },
  Flatten: (node, [a]) => {
    if (!a) return undefined;
    const rank = a.dims.length;
    let axis = node.getInt('axis', 1);
    if (axis < 0) axis += rank;
    const outer = a.dims.slice(0, axis).reduce((x, y) => x * y, 1);
    return { dtype: a.dtype, t: { dims: [outer, a.elementCount / outer], data: a.toFloat64() } };
  },
  Squeeze: (node, inputs) => {
    const a = inputs[0];
    if (!a) return undefined;
    const axes = axesOf(node, inputs, a.dims.length);
    const dims = a.dims.filter((d, i) => (axes ? !axes.includes(i) : d !== 1));
    return { dtype: a.dtype, t: { dims, data: a.toFloat64() } };
  },
  Unsqueeze: (node, inputs) => {
    const a = inputs[0];
    if (!a) return undefined;
    const rank = a.dims.length + (inputs[1] ? inputs[1].elementCount : node.getInts('axes', []).length);
    const axes = axesOf(node, inputs, rank) ?? [];
    const dims: number[] = [];
    let k = 0;
    for (let i = 0; i < rank; i++) dims.push(axes.includes(i) ? 1 : a.dims[k++]!);
    return { dtype: a.dtype, t: { dims, data: a.toFloat64() } };
  },
});

/** Fold constant subexpressions (every graph). Returns the number of nodes folded. */
export function foldConstants(graph: Graph): number {
  let count = 0;
  for (const g of graph.allGraphs()) {
    for (const node of [...g.nodes]) {
      if (!isDefaultDomain(node)) continue;
      const folder = FOLDERS[node.opType];
      if (!folder || node.outputs.length !== 1 || node.inputs.length === 0) continue;
      const inputs = node.inputs.map((v) => (v ? g.constantTensor(v) : undefined));
      if (node.inputs.some((v, i) => v !== null && !inputs[i])) continue;
      if (inputs.some((t) => t && (!isNumericDtype(t.dtype) || !t.hasData || t.elementCount > MAX_FOLD_ELEMENTS))) continue;
      let result: ReturnType<Folder>;
      try {
        result = folder(node, inputs);
      } catch {
        continue; // leave anything surprising to the runtime
      }
      if (!result || result.t.data.length > MAX_FOLD_ELEMENTS || !isNumericDtype(result.dtype)) continue;
      const out = node.outputs[0]!;
      const tensor = tensorLike(out.name, result.dtype, result.t);
      if (replaceWithInitializer(g, node, out, tensor)) count++;
    }
  }
  return count;
}

/**
 * Initializers nothing reads any more (left behind by folding or quantization), in `graph` and,
 * unless `nested` is false, in every If/Loop body below it. Returns the count removed.
 */
export function removeUnusedInitializers(graph: Graph, { nested = true }: { nested?: boolean } = {}): number {
  let count = 0;
  for (const g of nested ? graph.allGraphs() : [graph]) {
    for (const v of [...g.initializerValues]) {
      if (v.consumers.length === 0 && !v.isGraphOutput() && !v.isGraphInput()) {
        g.removeInitializer(v);
        count++;
      }
    }
  }
  return count;
}

/**
 * The graph pattern that crashes onnxruntime-node 1.30 (SIGSEGV in InferenceSession.create at
 * graphOptimizationLevel 'all', in its MatmulTransposeFusion) when the Transpose is float16: a
 * Transpose moving batch axes the way FusedMatMul's transBatchA does (perm [1..r-2, 0, r-1], or
 * [1..r-2, r-1, 0] with the last two swapped too: [1,0,2], [1,2,0], [1,2,0,3], [1,2,3,0]) feeding
 * input A of a MatMul, directly or through Casts, whose B is a constant of rank 1 or 2.
 * Measured (docs/quantize.md): the same graph in float32 runs, and so does one whose Transpose
 * alone is float32; a float32 MatMul behind a float16 Transpose still crashes. Shared by the fp16
 * pass (which keeps such a Transpose float32) and the runtime (which disables that fusion for
 * models that have it). Pure: imports the IR only.
 */
import { DataType } from './dtype.js';
import type { Graph, Node, Value } from './graph.js';
import type { Model } from './model.js';
import { isTensorType } from './types.js';

/** A Transpose of the crashing form and the MatMul it feeds. */
export interface BatchTransposeMatMul {
  transpose: Node;
  matmul: Node;
  perm: number[];
}

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

/**
 * The structural test, whatever the element type: `node` is a Transpose of the batch-moving form
 * feeding input A of a MatMul (through at most 4 Casts) whose B is a constant of rank <= 2.
 */
export function batchTransposeIntoMatMul(node: Node): BatchTransposeMatMul | undefined {
  if (node.opType !== 'Transpose' || !isDefaultDomain(node) || !node.hasAttr('perm')) return undefined;
  const perm = node.getInts('perm');
  const r = perm.length;
  if (r < 3) return undefined;
  const batch = Array.from({ length: r - 2 }, (_, i) => i + 1);
  const same = (a: number[]): boolean => a.length === r && a.every((x, i) => x === perm[i]);
  if (!same([...batch, 0, r - 1]) && !same([...batch, r - 1, 0])) return undefined;
  const out = node.outputs[0];
  if (!out) return undefined;
  const matmuls: Node[] = [];
  const visit = (v: Value, depth: number): void => {
    for (const u of v.uses()) {
      if (u.node.opType === 'Cast' && isDefaultDomain(u.node) && depth < 4 && u.node.outputs[0]) visit(u.node.outputs[0], depth + 1);
      else if (u.node.opType === 'MatMul' && isDefaultDomain(u.node) && u.index === 0) matmuls.push(u.node);
    }
  };
  visit(out, 0);
  const matmul = matmuls.find((m) => {
    const b = m.inputs[1] ? m.graph.constantTensor(m.inputs[1]) : undefined;
    return b !== undefined && b.dims.length <= 2;
  });
  return matmul ? { transpose: node, matmul, perm } : undefined;
}

/** Steps a backward walk takes looking for a value's element type before giving up. */
const MAX_TYPE_STEPS = 32;

/**
 * The element type of `v` when the model says it: its declared type, its initializer, a Cast's
 * `to`, or (for a value without type information) the type of its producer's first input, which
 * every op on this path (Transpose, Reshape, elementwise ops) keeps. undefined when unknown.
 */
function elementType(v: Value | null | undefined, steps = 0): number | undefined {
  if (!v || steps > MAX_TYPE_STEPS) return undefined;
  if (isTensorType(v.type) && v.type.elemType !== undefined && v.type.elemType !== DataType.UNDEFINED) return v.type.elemType;
  const constant = v.graph.constantTensor(v) ?? v.initializer;
  if (constant) return constant.dtype;
  const p = v.producer;
  if (!p) return undefined;
  if (p.opType === 'Cast' && isDefaultDomain(p) && p.hasAttr('to')) return p.getInt('to');
  return elementType(p.inputs[0], steps + 1);
}

/** Whether any graph of the model holds a float16 initializer, value type or Cast to float16. */
function holdsFloat16(graphs: readonly Graph[]): boolean {
  for (const g of graphs) {
    if (g.initializers.some((t) => t.dtype === DataType.FLOAT16)) return true;
    for (const v of g.values()) if (isTensorType(v.type) && v.type.elemType === DataType.FLOAT16) return true;
    for (const n of g.nodes) if (n.opType === 'Cast' && n.hasAttr('to') && n.getInt('to') === DataType.FLOAT16) return true;
  }
  return false;
}

/**
 * The first float16 instance of the pattern in the model (every graph, function bodies too), or
 * undefined. A Transpose whose element type cannot be told counts as float16 when the model holds
 * any float16 tensor: disabling one fusion costs little, a crash costs the process.
 */
export function findFloat16BatchTransposeMatMul(model: Model): BatchTransposeMatMul | undefined {
  const graphs = [...model.graph.allGraphs(), ...model.functions.flatMap((f) => f.graph.allGraphs())];
  let anyFloat16: boolean | undefined;
  for (const g of graphs) {
    for (const node of g.nodes) {
      const hit = batchTransposeIntoMatMul(node);
      if (!hit) continue;
      const type = elementType(node.outputs[0]) ?? elementType(node.inputs[0]);
      if (type === DataType.FLOAT16) return hit;
      if (type === undefined) {
        anyFloat16 ??= holdsFloat16(graphs);
        if (anyFloat16) return hit;
      }
    }
  }
  return undefined;
}

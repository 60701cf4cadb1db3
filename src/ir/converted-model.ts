/**
 * Whether a model is already the output of a conversion that quantizing again cannot improve:
 * 4-bit weights (com.microsoft MatMulNBits / GatherBlockQuantized) or float16/bfloat16 weights.
 * The int8/int4 passes never quantize such nodes (their candidates are float32 ops), so quantizing
 * the model again leaves everything float and says why in terms that miss the point; inspect and
 * the quantize workflow say "quantize the FP32 original" instead (QDQ int8 models: ir/model.ts
 * quantizedOpTypes). Pure: imports the IR only.
 */
import { DataType, dtypeName } from './dtype.js';
import type { Graph, Node } from './graph.js';
import type { Tensor } from './tensor.js';
import type { Model } from './model.js';

/** com.microsoft ops that hold 4-bit (or 2/8-bit block-quantized) weights. */
const BLOCK_QUANTIZED_OPS: readonly string[] = ['MatMulNBits', 'GatherBlockQuantized'];

const HALF_TYPES: readonly DataType[] = [DataType.FLOAT16, DataType.BFLOAT16];

function weightTensors(graphs: readonly Graph[]): Tensor[] {
  const out: Tensor[] = [];
  for (const g of graphs) {
    out.push(...g.initializers);
    for (const n of g.nodes) {
      if (n.opType !== 'Constant' || (n.domain !== '' && n.domain !== 'ai.onnx')) continue;
      const t = n.getTensor('value');
      if (t) out.push(t);
    }
  }
  return out;
}

/**
 * 'already 4-bit (MatMulNBits)', 'a float16 model' (most float weight bytes are float16 or
 * bfloat16), or undefined for a model still worth quantizing. Subgraphs and functions included.
 */
export function convertedModelKind(model: Model): string | undefined {
  const nodes: Node[] = model.allNodes();
  const blocks = BLOCK_QUANTIZED_OPS.filter((op) => nodes.some((n) => n.domain === 'com.microsoft' && n.opType === op));
  if (blocks.length > 0) return `already 4-bit (${blocks.join(', ')})`;
  const graphs = [...model.graph.allGraphs(), ...model.functions.flatMap((f) => f.graph.allGraphs())];
  const bytes = new Map<DataType, number>();
  for (const t of weightTensors(graphs)) bytes.set(t.dtype, (bytes.get(t.dtype) ?? 0) + t.byteLength);
  const half = HALF_TYPES.map((d) => ({ dtype: d, bytes: bytes.get(d) ?? 0 })).sort((a, b) => b.bytes - a.bytes)[0]!;
  const full = (bytes.get(DataType.FLOAT) ?? 0) + (bytes.get(DataType.DOUBLE) ?? 0);
  if (half.bytes > 0 && half.bytes > full) return `a ${dtypeName(half.dtype)} model`;
  return undefined;
}

/**
 * Input-channel padding for quantized convolutions that read a float -> int8 boundary (the stem
 * of almost every vision model: 1 or 3 input channels). onnxruntime's fast x86 QLinearConv kernel
 * (MLAS "ConvSym", indirect convolution) needs the input channel count to be a multiple of 4;
 * below that it falls back to im2col + a generic int8 GEMM whose reduction is a handful of values,
 * and the stem alone can cost more than the float Conv it replaced. Padding Cin up to the next
 * multiple of 4 with zero weights, and the float tensor with zeros before its QuantizeLinear,
 * computes exactly the same numbers (the added channels multiply zero weights) and lets the fast
 * kernel run. Measured (bench/quantize-blocks.mjs stems, docs/quantize.md): faster for 1x1, 3x3 and 5x5
 * stems; for 7x7 no better or slower, so larger kernels are left alone. Not behind a Transpose
 * (the NHWC -> NCHW of Keras/tf2onnx exports): onnxruntime then cancels that Transpose against its
 * own NHWC layout and runs the Pad on the innermost (channel) axis of the NHWC tensor, which costs
 * more than padding saves (a 64x64x3 input: 1.39x against 1.61x unpadded, same model, one run).
 * Part of applyQdq, which then drops the unpadded weights and re-sorts the graph. Imports the IR
 * only.
 */
import { DataType } from '../../ir/dtype.js';
import { isTensorType, Tensor, type Graph, type Model, type Node, type Value } from '../../ir/index.js';

/** Channel multiple onnxruntime's x86 symmetric-conv kernels need (KernelInputChannelAlignment). */
export const CHANNEL_ALIGNMENT = 4;
/** Largest kernel area (kh x kw) padded: where the measured gain holds. */
export const MAX_PADDED_KERNEL_AREA = 25;

export interface PaddedConv {
  node: string;
  /** The float tensor padded before its QuantizeLinear. */
  tensor: string;
  from: number;
  to: number;
}

const only = <T>(xs: readonly T[]): T | undefined => (xs.length === 1 ? xs[0] : undefined);
const isScalarLike = (t: Tensor | undefined): boolean => !!t && t.elementCount === 1;

/**
 * A quantized Conv reading DQ(Q(float x)), x a boundary tensor read by nothing else, with a 4-D
 * int8 weight DQ(w), group 1, Cin not a multiple of 4 and a kernel area of at most 25: what padding
 * needs, or undefined.
 */
function candidate(node: Node, graph: Graph, boundary: ReadonlySet<Value>): { x: Value; q: Node; wq: Tensor; wqValue: Value; cin: number } | undefined {
  if (node.opType !== 'Conv' || !(node.domain === '' || node.domain === 'ai.onnx')) return undefined;
  if (node.getInt('group', 1) !== 1) return undefined;
  const dq = node.inputs[0]?.producer;
  const wdq = node.inputs[1]?.producer;
  if (dq?.opType !== 'DequantizeLinear' || wdq?.opType !== 'DequantizeLinear') return undefined;
  if (only(node.inputs[0]!.consumers) !== node) return undefined;
  const q = dq.inputs[0]?.producer;
  if (q?.opType !== 'QuantizeLinear' || only(q.outputs[0]!.consumers) !== dq) return undefined;
  // A per-axis boundary scale would need padding too; those only follow data-movement ops.
  if (!isScalarLike(graph.constantTensor(q.inputs[1]!)) || (q.inputs[2] && !isScalarLike(graph.constantTensor(q.inputs[2])))) return undefined;
  const x = q.inputs[0]!;
  if (!boundary.has(x) || x.consumers.length !== 1 || x.isGraphOutput() || x.producer?.opType === 'Transpose') return undefined;
  const wqValue = wdq.inputs[0]!;
  const wq = graph.constantTensor(wqValue);
  if (!wq || wq.dtype !== DataType.INT8 || wq.dims.length !== 4) return undefined;
  const [, cin, kh, kw] = wq.dims as [number, number, number, number];
  if (cin % CHANNEL_ALIGNMENT === 0 || kh * kw > MAX_PADDED_KERNEL_AREA) return undefined;
  const shape = isTensorType(x.type) ? x.type.shape : undefined;
  if (!shape || shape.length !== 4 || shape[1] !== cin) return undefined;
  return { x, q, wq, wqValue, cin };
}

/**
 * Pad the input channels of every eligible quantized Conv of the main graph; returns what changed.
 * Leaves the replaced int8 weights in place and the new nodes unsorted (the caller cleans up).
 * `boundary`: the float tensors quantized at a float -> int8 boundary (graph inputs, outputs of
 * float nodes), the only ones a float Pad can go before without splitting a fused int8 group.
 */
export function padConvInputChannels(model: Model, boundary: ReadonlySet<Value>): PaddedConv[] {
  const graph = model.graph;
  const opset = model.opsetVersion('') ?? 0;
  if (opset < 11) return []; // Pad takes its pads as an input from opset 11 on.
  const done: PaddedConv[] = [];
  for (const node of [...graph.nodes]) {
    const c = candidate(node, graph, boundary);
    if (!c) continue;
    const to = Math.ceil(c.cin / CHANNEL_ALIGNMENT) * CHANNEL_ALIGNMENT;
    const [cout, , kh, kw] = c.wq.dims as [number, number, number, number];
    const area = kh * kw;
    const src = c.wq.data as Int8Array;
    const padded = new Int8Array(cout * to * area);
    for (let o = 0; o < cout; o++) padded.set(src.subarray(o * c.cin * area, (o + 1) * c.cin * area), o * to * area);
    const weight = graph.addInitializer(
      Tensor.fromData(graph.uniqueName(`${c.wqValue.name}_padded`), { dtype: DataType.INT8, dims: [cout, to, kh, kw], data: padded }),
    );
    node.inputs[1]!.producer!.setInput(0, weight);

    const pads = graph.addInitializer(
      Tensor.fromData(graph.uniqueName(`${c.x.name}_channel_pads`), {
        dtype: DataType.INT64,
        dims: [8],
        data: BigInt64Array.from([0, 0, 0, 0, 0, to - c.cin, 0, 0].map(BigInt)),
      }),
    );
    const padNode = graph.addNode({
      opType: 'Pad',
      inputs: [c.x, pads],
      outputs: [graph.uniqueName(`${c.x.name}_channel_padded`)],
      name: graph.uniqueName(`${c.x.name}_channel_pad`),
    });
    const shape = isTensorType(c.x.type) ? c.x.type.shape : undefined;
    const paddedShape = shape ? [shape[0]!, to, shape[2]!, shape[3]!] : undefined;
    if (isTensorType(c.x.type)) padNode.outputs[0]!.type = { ...c.x.type, shape: paddedShape };
    c.q.setInput(0, padNode.outputs[0]!);
    for (const v of [c.q.outputs[0]!, node.inputs[0]!]) {
      if (isTensorType(v.type) && v.type.shape) v.type = { ...v.type, shape: paddedShape };
    }
    done.push({ node: node.name, tensor: c.x.name, from: c.cin, to });
  }
  return done;
}

/**
 * The INT8 QDQ op table: one row per operator type saying which inputs are activations, weights
 * or biases, and how its output is quantized. The rows follow onnxruntime's CPU QDQ fusions
 * (onnxruntime/core/optimizer/qdq_transformer/selectors_actions): a group fuses only when every
 * float input comes from a DequantizeLinear used by that node alone and the output goes only to a
 * QuantizeLinear (a Relu/Clip between them is dropped when the Q range makes it redundant):
 *   Conv -> QLinearConv; MatMul -> QLinearMatMul (MatMulIntegerToFloat without Q); Gemm -> QGemm
 *   (output Q optional); Add/Mul -> QLinearAdd/QLinearMul; Concat -> QLinearConcat;
 *   AveragePool/GlobalAveragePool/Sigmoid/LeakyRelu/Softmax -> QLinear*; MaxPool, Reshape,
 *   Flatten, Transpose, Squeeze, Unsqueeze, Resize, Split, ... run on 8-bit data when input and
 *   outputs share one scale and zero point ("drop QDQ"; Split: every output).
 * Adding an operator is adding a row; duplicate rows throw. Imports the IR (with
 * ir/converted-model) and errors only.
 */
import { quantizedOpTypes, type Graph, type Model, type Node } from '../../ir/index.js';
import { convertedModelKind } from '../../ir/converted-model.js';
import { UsageError } from '../../errors.js';

export type InputRole =
  | { role: 'activation' }
  /** Constant weight, int8 symmetric; `axis` is the per-channel axis (null: per-tensor only). */
  | { role: 'weight'; axis: number | null }
  /** Constant bias, int32 with scale = scale(input 0) x scale(weight). */
  | { role: 'bias' }
  | { role: 'float' };

/**
 * How the output is quantized:
 *  quantize   - own range from calibration (Q/DQ always; required for the fusion);
 *  optional   - quantized only when every reader is itself quantized (Gemm/MatMul can output float);
 *  passthrough- the input's scale and zero point (data-movement ops); only when the input is quantized.
 */
export type OutputMode = 'quantize' | 'optional' | 'passthrough';

export interface OpHandler {
  opType: string;
  /** Role of each input slot (missing slots are 'float'). */
  inputs(node: Node, graph: Graph): InputRole[];
  output: OutputMode;
  /** A Relu/Clip right after the node may move behind the output Q (onnxruntime drops it). */
  absorbsActivation: boolean;
  /** Why this node cannot be quantized, if it cannot. */
  check?(node: Node, graph: Graph): string | undefined;
  /** The integer kernel onnxruntime fuses the group into (for reports). */
  kernel: string;
  /**
   * Set when the op itself has no integer kernel on onnxruntime's CPU provider: its activation
   * input and its output are still quantized, so the ops around it stay int8, and it computes in
   * float (weights stay float). The reason goes to the report ("float by choice").
   */
  floatCompute?: string;
  /** Every output is quantized like output 0 (Split: each piece keeps the input's parameters). */
  allOutputs?: boolean;
}

const act = { role: 'activation' } as const;

function constWeight(node: Node, graph: Graph, index: number): boolean {
  const v = node.inputs[index];
  return !!v && !!graph.constantTensor(v);
}

const HANDLERS: OpHandler[] = [
  {
    opType: 'Conv',
    kernel: 'QLinearConv',
    output: 'quantize',
    absorbsActivation: true,
    inputs: (node) => (node.inputs[2] ? [act, { role: 'weight', axis: 0 }, { role: 'bias' }] : [act, { role: 'weight', axis: 0 }]),
    check: (node, graph) => (constWeight(node, graph, 1) ? undefined : 'weight is not a constant'),
  },
  {
    // Weight [Cin, Cout, k...] (group 1): output channels on axis 1. On a small U-Net
    // (bench/quantize-blocks.mjs unet) 1.48-1.56x FP32 this way, 1.25-1.32x with the
    // ConvTranspose left out (its float output kept the skip Add float too). Float weights gain
    // nothing: onnxruntime quantizes them itself when the op sits between DQ and Q.
    opType: 'ConvTranspose',
    kernel: 'ConvTranspose (float between int8 tensors)',
    output: 'quantize',
    absorbsActivation: true,
    inputs: (node) => (node.inputs[2] ? [act, { role: 'weight', axis: 1 }, { role: 'bias' }] : [act, { role: 'weight', axis: 1 }]),
    check: (node, graph) =>
      !constWeight(node, graph, 1) ? 'weight is not a constant' : node.getInt('group', 1) !== 1 ? 'grouped ConvTranspose is not quantized' : undefined,
    floatCompute:
      "onnxruntime's CPU provider has no integer ConvTranspose: it runs in float on its dequantized weights, between int8 tensors, so its neighbours stay int8",
  },
  {
    opType: 'Gemm',
    kernel: 'QGemm',
    output: 'optional',
    absorbsActivation: true,
    inputs(node, graph) {
      const transB = node.getInt('transB', 0) === 1;
      const b: InputRole = constWeight(node, graph, 1) ? { role: 'weight', axis: transB ? 0 : 1 } : act;
      const roles: InputRole[] = [act, b];
      if (node.inputs[2]) {
        const c = graph.constantTensor(node.inputs[2]);
        const bDims = b.role === 'weight' ? graph.constantTensor(node.inputs[1]!)!.dims : undefined;
        const n = bDims ? (transB ? bDims[0] : bDims[1]) : undefined;
        roles.push(c && b.role === 'weight' && c.dims.length === 1 && c.dims[0] === n ? { role: 'bias' } : { role: 'float' });
      }
      return roles;
    },
  },
  {
    opType: 'MatMul',
    kernel: 'QLinearMatMul',
    output: 'optional',
    absorbsActivation: true,
    inputs(node, graph) {
      const w = node.inputs[1] ? graph.constantTensor(node.inputs[1]) : undefined;
      if (!w) return [act, act];
      // Per-column scales (axis 1) for a 2-D weight; stacked weights get one scale.
      return [act, { role: 'weight', axis: w.dims.length === 2 ? 1 : null }];
    },
  },
  { opType: 'Add', kernel: 'QLinearAdd', output: 'quantize', absorbsActivation: true, inputs: () => [act, act] },
  { opType: 'Mul', kernel: 'QLinearMul', output: 'quantize', absorbsActivation: true, inputs: () => [act, act] },
  {
    opType: 'Concat',
    kernel: 'QLinearConcat',
    output: 'quantize',
    absorbsActivation: false,
    inputs: (node) => node.inputs.map(() => act),
  },
  { opType: 'AveragePool', kernel: 'QLinearAveragePool', output: 'quantize', absorbsActivation: false, inputs: () => [act] },
  { opType: 'GlobalAveragePool', kernel: 'QLinearGlobalAveragePool', output: 'quantize', absorbsActivation: false, inputs: () => [act] },
  { opType: 'Sigmoid', kernel: 'QLinearSigmoid', output: 'quantize', absorbsActivation: false, inputs: () => [act] },
  { opType: 'LeakyRelu', kernel: 'QLinearLeakyRelu', output: 'quantize', absorbsActivation: false, inputs: () => [act] },
  ...['MaxPool', 'Reshape', 'Flatten', 'Transpose', 'Squeeze', 'Unsqueeze', 'Resize', 'Split'].map(
    (opType): OpHandler => ({
      opType,
      kernel: `${opType} (8-bit)`,
      output: 'passthrough',
      absorbsActivation: false,
      allOutputs: opType === 'Split',
      inputs: () => [act],
      check:
        opType === 'MaxPool' ? (node) => (node.outputs.length > 1 && node.outputs[1]!.name !== '' ? 'MaxPool indices output is used' : undefined) : undefined,
    }),
  ),
];

function buildRegistry(handlers: readonly OpHandler[]): ReadonlyMap<string, OpHandler> {
  const map = new Map<string, OpHandler>();
  for (const h of handlers) {
    if (map.has(h.opType)) throw new Error(`duplicate QDQ handler for ${h.opType}`);
    map.set(h.opType, h);
  }
  return map;
}

export const QDQ_HANDLERS = buildRegistry(HANDLERS);

/** Op types the INT8 QDQ pass can quantize. */
export const QUANTIZABLE_OP_TYPES: readonly string[] = HANDLERS.map((h) => h.opType);

/** Ops that may sit between a quantized node and its output Q (onnxruntime removes them). */
export const ABSORBABLE_ACTIVATIONS = new Set(['Relu', 'Clip']);

/**
 * UsageError for a model that is already quantized (int8 and int8-dynamic; 4-bit MatMulNBits;
 * float16 weights, see ir/converted-model): quantizing it again
 * would requantize dequantized values, compounding the rounding, and leave Q/DQ chains onnxruntime
 * cannot fuse.
 */
export function refuseQuantized(model: Model, label = 'the model'): void {
  const ops = quantizedOpTypes(model);
  if (ops.length > 0) throw new UsageError(`${label} is already quantized (${ops.join(', ')}): quantize its FP32 original instead`);
  // 4-bit or float16 weights are no candidates of any mode: every node would be left float, for
  // reasons (an image stem, a weight that is not constant float32) that miss the point.
  const converted = convertedModelKind(model);
  if (converted !== undefined) throw new UsageError(`${label} is ${converted}: quantize its FP32 original instead`);
}

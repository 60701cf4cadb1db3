/**
 * The default trainable set, one table and one function for every training backend: which input
 * slots of which op types hold parameters (weights the optimizer trains, running statistics the
 * training forward updates), and the float initializers or float Constant-node outputs of a model
 * found in them. The tfjs interpreter (./onnx-graph.ts) and the onnxruntime training graph
 * (../onnxruntime/build.ts) both take their default from `defaultParameters`, so one run trains
 * the same weights on either backend.
 * What counts as a weight follows what PyTorch trains (every nn.Parameter): kernels and biases,
 * norm scales and shifts, embedding tables (Gather's data), either operand of MatMul, PRelu slopes,
 * recurrent W/R/B/P, and for element-wise ops a constant operand of more than one element (a bias or
 * a scale; a scalar such as 0.5 or sqrt(2) is a constant of the formula, not a parameter).
 * Whether a backend can run an op is its own table's business; this one only names parameters.
 * Imports: ../../ir.
 */
import { DataType, type Model, type Node, type Tensor } from '../../ir/index.js';

interface SlotRow {
  /** Input slots holding weights. */
  weights?: readonly number[];
  /** Input slots holding running statistics. */
  statistics?: readonly number[];
  /** A constant operand with more than one element is a weight. */
  elementwise?: boolean;
}

const ELEMENTWISE: SlotRow = { elementwise: true };

const PARAMETER_SLOTS: ReadonlyMap<string, SlotRow> = new Map<string, SlotRow>([
  ['Conv', { weights: [1, 2] }],
  ['ConvTranspose', { weights: [1, 2] }],
  ['Gemm', { weights: [1, 2] }],
  ['MatMul', { weights: [0, 1] }],
  ['Gather', { weights: [0] }],
  ['BatchNormalization', { weights: [1, 2], statistics: [3, 4] }],
  ['LayerNormalization', { weights: [1, 2] }],
  ['PRelu', { weights: [1] }],
  ['LSTM', { weights: [1, 2, 3, 7] }],
  ['GRU', { weights: [1, 2, 3] }],
  // QAT on onnxruntime: a float weight fake-quantized by a QuantizeLinear node
  ['QuantizeLinear', { weights: [0] }],
  ['Add', ELEMENTWISE],
  ['Sub', ELEMENTWISE],
  ['Mul', ELEMENTWISE],
  ['Div', ELEMENTWISE],
  ['Sum', ELEMENTWISE],
]);

function isDefaultDomain(node: Node): boolean {
  return node.domain === '' || node.domain === 'ai.onnx';
}

/** The float tensor behind a node input: an initializer or a float Constant node's value. */
export function floatParameterTensor(node: Node, i: number): Tensor | undefined {
  const v = node.inputs[i];
  if (!v || v.name === '') return undefined;
  const t = v.initializer ?? node.graph.constantTensor(v);
  return t && t.dtype === DataType.FLOAT ? t : undefined;
}

/** What input slot `i` of `node` holds by the table: 'weight', 'statistic' or undefined. */
export function parameterSlotKind(node: Node, i: number, tensor: Tensor): 'weight' | 'statistic' | undefined {
  const row = isDefaultDomain(node) ? PARAMETER_SLOTS.get(node.opType) : undefined;
  if (!row) return undefined;
  if (row.weights?.includes(i) || (row.elementwise && tensor.elementCount > 1)) return 'weight';
  if (row.statistics?.includes(i)) return 'statistic';
  return undefined;
}

export interface DefaultParameters {
  /** Weights to train, in order of first use over `nodes`. */
  weights: string[];
  /** Running statistics (updated by the training forward, not by the optimizer). */
  states: string[];
}

/**
 * Every float initializer or float Constant-node output in a parameter slot of the graph's nodes
 * (in `nodes` order, default the graph's). A tensor that is a weight anywhere is a weight.
 */
export function defaultParameters(model: Model, nodes: readonly Node[] = model.graph.nodes): DefaultParameters {
  const weights = new Set<string>();
  const states = new Set<string>();
  for (const node of nodes) {
    node.inputs.forEach((v, i) => {
      const t = floatParameterTensor(node, i);
      if (!v || !t) return;
      const kind = parameterSlotKind(node, i, t);
      if (kind === 'weight') weights.add(v.name);
      else if (kind === 'statistic') states.add(v.name);
    });
  }
  return { weights: [...weights], states: [...states].filter((s) => !weights.has(s)) };
}

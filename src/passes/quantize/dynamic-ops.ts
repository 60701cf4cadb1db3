/**
 * The op table of dynamic INT8 quantization (see dynamic.ts for the patterns written and why):
 * one row per (domain, op type). A quantizing row plans a node (the plan, or why it stays float)
 * and applies its plan; a float row only names why that op stays float in this mode. Adding an op
 * is adding a row; duplicate rows throw.
 *
 * Plans are applied stage by stage (0: MatMul, Gemm and com.microsoft Attention, which share the
 * weight and DynamicQuantizeLinear caches; 1: LSTM; 2: Gather; 3: EmbedLayerNormalization), each
 * stage in graph order, then the `finish` of that stage's rows (notes, opset imports): this order
 * fixes every generated name and the initializer order, so outputs are byte-identical run to run.
 * Imports: the IR (with ir/unique-names), ./dynamic-weights.js, ./quant-math.js.
 */
import { DataType, Tensor, isTensorType, type Graph, type Model, type Node, type Value } from '../../ir/index.js';
import { uniqueNodeNamer } from '../../ir/unique-names.js';
import { quantizeWeight, type QuantizedWeight, type WeightType } from './dynamic-weights.js';
import { activationParams, quantizeValues, quantizeWeight as quantizeSymmetric } from './quant-math.js';

export const MS_DOMAIN = 'com.microsoft';

/** What the report collects (the public DynamicReport extends it). */
export interface DynamicQuantizedNode {
  node: string;
  opType: string;
  /** The float weight it replaced. */
  weight: string;
  /** Weight matrix [K, N] as multiplied (after transB); for LSTM, one direction's W as [input, 4*hidden]. */
  shape: [number, number];
  /** LSTM: the recurrent weight R, quantized alongside W. */
  recurrentWeight?: string;
  perChannel: boolean;
  /** Whether a bias Add follows (Gemm C, or an existing MatMul + Add) so onnxruntime fuses it. */
  bias: boolean;
}

export interface DynamicSettings {
  perChannel: boolean;
  weightType: WeightType;
  reduceRange: boolean;
}

/** Shared state of the apply phase. */
export interface ApplyContext extends DynamicSettings {
  model: Model;
  quantized: DynamicQuantizedNode[];
  quantizedByOpType: Record<string, number>;
  notes: string[];
  /** A value name unique in the model tree. */
  valueName(base: string): string;
  /** A node name unique in the model tree. */
  nodeName(base: string): string;
  /**
   * Quantized weights by float weight and weight key (a weight read by several nodes is quantized
   * once). Keyed by the value, not its name: sibling sub-graphs may each define a weight of the same name.
   */
  weights: Map<Value, Map<string, { q: Value; scale: Value; zp?: Value }>>;
  /** One DynamicQuantizeLinear per activation and graph: its three outputs. */
  dynamicQuantized: Map<Value, Map<Graph, Value[]>>;
  /** Float weights replaced; dropped at the end when nothing reads them. */
  oldWeights: Set<Value>;
}

export function createApplyContext(
  model: Model,
  settings: DynamicSettings,
  report: Pick<ApplyContext, 'quantized' | 'quantizedByOpType' | 'notes'>,
): ApplyContext {
  const nodeName = uniqueNodeNamer(model.allNodes());
  return {
    ...settings,
    ...report,
    model,
    valueName: (base) => model.graph.uniqueName(base),
    nodeName,
    weights: new Map(),
    dynamicQuantized: new Map(),
    oldWeights: new Set(),
  };
}

export interface QuantizingHandler<P> {
  opType: string;
  /** '' (ONNX) or 'com.microsoft'. */
  domain: string;
  /** Apply stage (see the header). */
  stage: number;
  /**
   * Whether the node is worth a report line at all; checked before the op-type and node
   * exclusions (Gathers on shapes and indices are everywhere; only embedding lookups count).
   */
  isCandidate?(node: Node): boolean;
  /** The plan, or why the node stays float. Never edits the graph. */
  plan(node: Node, settings: DynamicSettings): P | string;
  apply(plan: P, ctx: ApplyContext): void;
  /** After the stage: notes and imports, given how many nodes this row rewrote. */
  finish?(applied: number, ctx: ApplyContext): void;
}

export interface FloatHandler {
  opType: string;
  domain: string;
  /** Why this op stays float in dynamic mode (listed in the report for every such node). */
  floatReason: string;
}

export type DynamicHandler = QuantizingHandler<unknown> | FloatHandler;

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';
const label = (n: Node): string => n.name || n.opType;

function countQuantized(ctx: ApplyContext, entry: DynamicQuantizedNode): void {
  ctx.quantized.push(entry);
  ctx.quantizedByOpType[entry.opType] = (ctx.quantizedByOpType[entry.opType] ?? 0) + 1;
}

function floatConstant(v: Value | null | undefined): Tensor | undefined {
  if (!v) return undefined;
  const t = v.constantTensor();
  return t && t.dtype === DataType.FLOAT && t.hasData ? t : undefined;
}

/** Replace `node` (single output) by `result`, which takes over its output's name and type. */
function replaceNode(graph: Graph, node: Node, result: Value): void {
  const old = node.outputs[0]!;
  const name = old.name;
  const type = old.type;
  const inValueInfo = graph.valueInfo.includes(old);
  graph.replaceAllUsesWith(old, result);
  graph.removeNode(node);
  graph.valueInfo = graph.valueInfo.filter((v) => v !== old);
  result.rename(name);
  if (type) result.type = type;
  if (inValueInfo) graph.valueInfo.push(result);
}

// ---- MatMul, Gemm, com.microsoft Attention: int8 weight x DynamicQuantizeLinear'd activation ------

interface GemmPlan {
  node: Node;
  graph: Graph;
  activation: Value;
  weight: Value;
  /** Weight as [K, N] row-major float, alpha folded in. */
  matrix: Float32Array;
  k: number;
  n: number;
  /** Constant bias [N] (Gemm C times beta). */
  bias?: Float32Array;
  /** Non-fused addend (Gemm C that is not a per-column vector). */
  addend?: Value | Float32Array;
  addendDims?: number[];
  /** Existing Add after a MatMul whose constant bias sits in slot 0: swap so onnxruntime fuses. */
  swapAdd?: Node;
  weightKey: string;
}

/** The weight of a plan quantized (once per weight key), in the scope of the float weight. */
function quantizedWeight(p: GemmPlan, ctx: ApplyContext): { q: Value; scale: Value; zp?: Value } {
  let byKey = ctx.weights.get(p.weight);
  if (!byKey) ctx.weights.set(p.weight, (byKey = new Map()));
  let w = byKey.get(p.weightKey);
  if (!w) {
    const { weightType, perChannel } = ctx;
    const q = quantizeWeight(p.matrix, p.k, p.n, weightType, perChannel, ctx.reduceRange);
    const home = p.weight.graph; // the scope of the float weight sees every user of it
    const wName = ctx.valueName(`${p.weight.name}_quantized`);
    const qv = home.addInitializer(Tensor.fromData(wName, { dtype: weightType === 'int8' ? DataType.INT8 : DataType.UINT8, dims: [p.k, p.n], data: q.data }));
    const sv = home.addInitializer(
      Tensor.fromData(ctx.valueName(`${p.weight.name}_scale`), { dtype: DataType.FLOAT, dims: perChannel ? [p.n] : [], data: q.scales }),
    );
    // Symmetric int8 has zero points of 0, the MatMulInteger default: leave the input out.
    const zv =
      weightType === 'uint8'
        ? home.addInitializer(
            Tensor.fromData(ctx.valueName(`${p.weight.name}_zero_point`), { dtype: DataType.UINT8, dims: perChannel ? [p.n] : [], data: q.zeroPoints }),
          )
        : undefined;
    w = { q: qv, scale: sv, zp: zv };
    byKey.set(p.weightKey, w);
  }
  ctx.oldWeights.add(p.weight);
  return w;
}

/** One DynamicQuantizeLinear per activation and graph, shared by every quantized reader: [x_q, x_scale, x_zp]. */
function dynamicallyQuantized(p: GemmPlan, ctx: ApplyContext): [Value, Value, Value] {
  let perGraph = ctx.dynamicQuantized.get(p.activation);
  if (!perGraph) ctx.dynamicQuantized.set(p.activation, (perGraph = new Map()));
  let dql = perGraph.get(p.graph);
  if (!dql) {
    const d = p.graph.insertBefore(p.node, {
      opType: 'DynamicQuantizeLinear',
      name: ctx.nodeName(`${p.activation.name}_DynamicQuantizeLinear`),
      inputs: [p.activation],
      outputs: [ctx.valueName(`${p.activation.name}_quantized`), ctx.valueName(`${p.activation.name}_scale`), ctx.valueName(`${p.activation.name}_zero_point`)],
    });
    const shape = isTensorType(p.activation.type) ? p.activation.type.shape : undefined;
    d.outputs[0]!.type = { kind: 'tensor', elemType: DataType.UINT8, shape: shape ? [...shape] : undefined };
    d.outputs[1]!.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: [] };
    d.outputs[2]!.type = { kind: 'tensor', elemType: DataType.UINT8, shape: [] };
    dql = [...d.outputs];
    perGraph.set(p.graph, dql);
  }
  return dql as [Value, Value, Value];
}

/** MatMulInteger -> Cast -> Mul(x_scale * W_scale) [-> Add(bias)] [-> Add(C)] in place of the node. */
function applyMatMulInteger(p: GemmPlan, ctx: ApplyContext): void {
  const { node, graph } = p;
  const base = label(node);
  const w = quantizedWeight(p, ctx);
  const [xq, xScale, xZp] = dynamicallyQuantized(p, ctx);
  const origOut = node.outputs[0]!;
  const outShape = isTensorType(origOut.type) ? origOut.type.shape : undefined;
  const typed = (v: Value, elemType: DataType, shape = outShape): Value => {
    v.type = { kind: 'tensor', elemType, shape: shape ? [...shape] : undefined };
    return v;
  };

  const mmi = graph.insertBefore(node, {
    opType: 'MatMulInteger',
    name: ctx.nodeName(`${base}_MatMulInteger`),
    inputs: w.zp ? [xq, w.q, xZp, w.zp] : [xq, w.q, xZp],
    outputs: [ctx.valueName(`${base}_int32`)],
  });
  typed(mmi.outputs[0]!, DataType.INT32);
  const cast = graph.insertBefore(node, {
    opType: 'Cast',
    name: ctx.nodeName(`${base}_Cast`),
    inputs: [mmi.outputs[0]!],
    outputs: [ctx.valueName(`${base}_int32_float`)],
    attributes: { to: DataType.FLOAT },
  });
  typed(cast.outputs[0]!, DataType.FLOAT);
  // Activation scale first: onnxruntime's fusion reads this Mul's inputs as (a_scale, b_scale).
  const scaleMul = graph.insertBefore(node, {
    opType: 'Mul',
    name: ctx.nodeName(`${base}_scale_Mul`),
    inputs: [xScale, w.scale],
    outputs: [ctx.valueName(`${base}_output_scale`)],
  });
  typed(scaleMul.outputs[0]!, DataType.FLOAT, ctx.perChannel ? [p.n] : []);
  const mul = graph.insertBefore(node, {
    opType: 'Mul',
    name: ctx.nodeName(`${base}_output_Mul`),
    inputs: [cast.outputs[0]!, scaleMul.outputs[0]!],
    outputs: [ctx.valueName(`${base}_scaled`)],
  });
  let result = typed(mul.outputs[0]!, DataType.FLOAT);
  if (p.bias) {
    const bv = graph.addInitializer(Tensor.fromData(ctx.valueName(`${base}_bias`), { dtype: DataType.FLOAT, dims: [p.n], data: p.bias }));
    const add = graph.insertBefore(node, {
      opType: 'Add',
      name: ctx.nodeName(`${base}_bias_Add`),
      inputs: [result, bv],
      outputs: [ctx.valueName(`${base}_biased`)],
    });
    result = typed(add.outputs[0]!, DataType.FLOAT);
  }
  if (p.addend) {
    const av =
      p.addend instanceof Float32Array
        ? graph.addInitializer(Tensor.fromData(ctx.valueName(`${base}_addend`), { dtype: DataType.FLOAT, dims: p.addendDims!, data: p.addend }))
        : p.addend;
    const add = graph.insertBefore(node, {
      opType: 'Add',
      name: ctx.nodeName(`${base}_C_Add`),
      inputs: [result, av],
      outputs: [ctx.valueName(`${base}_plus_c`)],
    });
    result = typed(add.outputs[0]!, DataType.FLOAT);
  }
  if (p.swapAdd) {
    const [a, b] = p.swapAdd.inputs;
    p.swapAdd.setInputs([b ?? null, a ?? null]);
  }
  replaceNode(graph, node, result);
  countQuantized(ctx, {
    node: base,
    opType: node.opType,
    weight: p.weight.name,
    shape: [p.k, p.n],
    perChannel: ctx.perChannel,
    bias: Boolean(p.bias || p.swapAdd),
  });
}

function planMatMul(node: Node): GemmPlan | string {
  const [a, b] = node.inputs;
  if (!a || !b) return 'missing input';
  if (floatConstant(a)) return 'activation input is a constant (fold constants first)';
  const w = floatConstant(b);
  if (!w) return b.constantTensor() ? 'weight is not float32' : 'second input is not a constant weight';
  if (w.dims.length !== 2) return `weight '${b.name}' has rank ${w.dims.length}, not 2`;
  const [k, n] = w.dims as [number, number];
  const plan: GemmPlan = { node, graph: node.graph, activation: a, weight: b, matrix: w.data as Float32Array, k, n, weightKey: `${b.name}|n` };
  // MatMul -> Add(bias): keep the MatMul side in slot 0 so onnxruntime folds the bias in.
  const outV = node.outputs[0]!;
  const readers = outV.uses();
  if (readers.length === 1 && !outV.isGraphOutput()) {
    const add = readers[0]!.node;
    if (add.opType === 'Add' && isDefaultDomain(add) && add.graph === node.graph && readers[0]!.index === 1) {
      const other = add.inputs[0];
      const bias = floatConstant(other);
      if (bias && bias.dims.length === 1 && bias.dims[0] === n && n > 1) plan.swapAdd = add;
    }
  }
  return plan;
}

function planGemm(node: Node): GemmPlan | string {
  const [a, b, c] = node.inputs;
  if (!a || !b) return 'missing input';
  if (node.getInt('transA', 0) !== 0) return 'transA=1 is not supported (the activation would need a Transpose)';
  if (floatConstant(a)) return 'activation input is a constant (fold constants first)';
  const w = floatConstant(b);
  if (!w) return b.constantTensor() ? 'weight is not float32' : 'second input is not a constant weight';
  if (w.dims.length !== 2) return `weight '${b.name}' has rank ${w.dims.length}, not 2`;
  const transB = node.getInt('transB', 0) !== 0;
  const alpha = node.getFloat('alpha', 1);
  const beta = node.getFloat('beta', 1);
  const [r, s] = w.dims as [number, number];
  const k = transB ? s : r;
  const n = transB ? r : s;
  const src = w.data as Float32Array;
  let matrix: Float32Array;
  if (!transB && alpha === 1) matrix = src;
  else {
    matrix = new Float32Array(k * n);
    for (let i = 0; i < k; i++) for (let j = 0; j < n; j++) matrix[i * n + j] = alpha * (transB ? src[j * k + i]! : src[i * n + j]!);
  }
  const plan: GemmPlan = { node, graph: node.graph, activation: a, weight: b, matrix, k, n, weightKey: `${b.name}|${transB ? 't' : 'n'}|${alpha}` };
  if (c) {
    const ct = floatConstant(c);
    if (ct) {
      const cdata = ct.toFloat64();
      const count = cdata.length;
      const perColumn = count === n && n > 1 && (ct.dims.length === 1 || (ct.dims.length === 2 && ct.dims[0] === 1));
      const scaled = Float32Array.from(cdata, (x) => x * beta);
      if (perColumn) plan.bias = scaled;
      else {
        plan.addend = scaled;
        plan.addendDims = [...ct.dims];
      }
    } else {
      if (beta !== 1) return 'non-constant C with beta != 1';
      plan.addend = c;
    }
  }
  return plan;
}

/** Attributes onnxruntime's QAttention schema accepts (anything else fails at load). */
const QATTENTION_ATTRIBUTES = new Set(['num_heads', 'unidirectional', 'do_rotary', 'past_present_share_buffer', 'mask_filter_value', 'scale']);

/**
 * com.microsoft Attention with a constant packed [D, 3H] float weight and nothing QAttention lacks
 * (Q, K, V of different sizes, a rotary dimension, attention_bias or past_sequence_length inputs),
 * as onnxruntime's quantize_dynamic decides; otherwise why it stays float.
 */
function planAttention(node: Node): GemmPlan | string {
  const [x, weight, , , , attentionBias, pastLength] = node.inputs;
  if (!x || !weight) return 'missing input';
  if (node.attributes.has('qkv_hidden_sizes'))
    return 'qkv_hidden_sizes (Q, K, V projections of different sizes): QAttention has no such form (quantize_dynamic leaves it float too)';
  const unknown = [...node.attributes.keys()].find((a) => !QATTENTION_ATTRIBUTES.has(a));
  if (unknown) return `attribute '${unknown}' has no QAttention equivalent`;
  for (const flag of ['do_rotary', 'past_present_share_buffer']) {
    if (node.getInt(flag, 0) !== 0) return `${flag}=1: not kept for QAttention here (only the plain form is checked against onnxruntime)`;
  }
  if (attentionBias || pastLength)
    return `input '${(attentionBias ?? pastLength)!.name}' (attention_bias / past_sequence_length): QAttention has no such input`;
  if (floatConstant(x)) return 'activation input is a constant (fold constants first)';
  const w = floatConstant(weight);
  if (!w) return weight.constantTensor() ? 'weight is not float32' : 'weights are not a constant';
  const heads = node.getInt('num_heads', 0);
  const [k, n] = w.dims as [number, number];
  if (w.dims.length !== 2 || n % 3 !== 0 || heads <= 0 || (n / 3) % heads !== 0) {
    return `weight '${weight.name}' [${w.dims}] is not a packed [D, 3 x hidden] Q/K/V projection for ${heads} heads`;
  }
  return { node, graph: node.graph, activation: x, weight, matrix: w.data as Float32Array, k, n, weightKey: `${weight.name}|n` };
}

/** Attention rewritten in place into QAttention; the outputs (and past/present) stay as they were. */
function applyQAttention(p: GemmPlan, ctx: ApplyContext): void {
  const { node, graph } = p;
  const base = label(node);
  const w = quantizedWeight(p, ctx);
  const [xq, xScale, xZp] = dynamicallyQuantized(p, ctx);
  // QAttention: input, weight, bias, input_scale, weight_scale, mask_index, input_zero_point,
  // weight_zero_point, past.
  const [, , bias, mask, past] = node.inputs;
  const biasValue =
    bias ?? graph.addInitializer(Tensor.fromData(ctx.valueName(`${base}_bias`), { dtype: DataType.FLOAT, dims: [p.n], data: new Float32Array(p.n) }));
  const inputs: (Value | null)[] = [xq, w.q, biasValue, xScale, w.scale, mask ?? null, xZp, w.zp ?? null, past ?? null];
  while (inputs.length > 0 && inputs[inputs.length - 1] === null) inputs.pop();
  node.setInputs(inputs);
  node.opType = 'QAttention';
  countQuantized(ctx, { node: base, opType: 'Attention', weight: p.weight.name, shape: [p.k, p.n], perChannel: ctx.perChannel, bias: true });
}

// ---- LSTM -> com.microsoft DynamicQuantizeLSTM -----------------------------------------------------

/** onnxruntime's DynamicQuantizeLSTM rejects per-row uint8 zero points ("must be constant"). */
const UINT8_PER_CHANNEL_LSTM = 'uint8 weights per channel: DynamicQuantizeLSTM needs one zero point per direction (use int8 or per-tensor)';

interface LstmPlan {
  node: Node;
  wValue: Value;
  rValue: Value;
  w: Tensor;
  r: Tensor;
  directions: number;
  hidden: number;
}

function planLstm(node: Node, settings: DynamicSettings): LstmPlan | string {
  if (settings.weightType === 'uint8' && settings.perChannel) return UINT8_PER_CHANNEL_LSTM;
  const [x, wValue, rValue] = node.inputs;
  if (!x || !wValue || !rValue) return 'missing input';
  if (node.getInt('layout', 0) !== 0) return 'layout=1 (batch first): onnxruntime has no DynamicQuantizeLSTM kernel for it';
  const w = floatConstant(wValue);
  const r = floatConstant(rValue);
  if (!w || !r) return 'W and R are not both constant float32 weights';
  if (w.dims.length !== 3 || r.dims.length !== 3) return `W and R have rank ${w.dims.length} and ${r.dims.length}, not 3`;
  const [directions, gateRows] = w.dims as [number, number, number];
  const hidden = r.dims[2]!;
  if (gateRows !== 4 * hidden || r.dims[0] !== directions || r.dims[1] !== gateRows) {
    return `W [${w.dims}] and R [${r.dims}] do not fit an LSTM of hidden size ${hidden}`;
  }
  return { node, wValue, rValue, w, r, directions, hidden };
}

/**
 * LSTM gate weights [directions, rows, k] (rows = 4*hidden) quantized per direction as the
 * transposed [k, rows] matrix DynamicQuantizeLSTM multiplies by: data [directions, k, rows],
 * scales and zero points [directions, rows] per channel or [directions] per tensor.
 */
export function quantizeGates(
  w: Float32Array,
  directions: number,
  rows: number,
  k: number,
  type: WeightType,
  perChannel: boolean,
  reduceRange: boolean,
): QuantizedWeight {
  const per = perChannel ? rows : 1;
  const data = type === 'int8' ? new Int8Array(directions * k * rows) : new Uint8Array(directions * k * rows);
  const scales = new Float32Array(directions * per);
  const zeroPoints = type === 'int8' ? new Int8Array(directions * per) : new Uint8Array(directions * per);
  const transposed = new Float32Array(k * rows);
  for (let d = 0; d < directions; d++) {
    const base = d * rows * k;
    for (let r = 0; r < rows; r++) for (let c = 0; c < k; c++) transposed[c * rows + r] = w[base + r * k + c]!;
    const q = quantizeWeight(transposed, k, rows, type, perChannel, reduceRange);
    data.set(q.data, d * k * rows);
    scales.set(q.scales, d * per);
    zeroPoints.set(q.zeroPoints, d * per);
  }
  return { data, scales, zeroPoints };
}

function applyLstm(p: LstmPlan, ctx: ApplyContext): void {
  const { node } = p;
  const { weightType, perChannel } = ctx;
  const [x, , , ...optional] = node.inputs;
  const gates = (weight: Value, t: Tensor) => {
    const q = quantizeGates(t.data as Float32Array, p.directions, 4 * p.hidden, t.dims[2]!, weightType, perChannel, ctx.reduceRange);
    const home = weight.graph;
    const dims = perChannel ? [p.directions, 4 * p.hidden] : [p.directions];
    const dtype = weightType === 'int8' ? DataType.INT8 : DataType.UINT8;
    return [
      home.addInitializer(Tensor.fromData(ctx.valueName(`${weight.name}_quantized`), { dtype, dims: [p.directions, t.dims[2]!, 4 * p.hidden], data: q.data })),
      home.addInitializer(Tensor.fromData(ctx.valueName(`${weight.name}_scale`), { dtype: DataType.FLOAT, dims, data: q.scales })),
      home.addInitializer(Tensor.fromData(ctx.valueName(`${weight.name}_zero_point`), { dtype, dims, data: q.zeroPoints })),
    ] as const;
  };
  const [wq, ws, wz] = gates(p.wValue, p.w);
  const [rq, rs, rz] = gates(p.rValue, p.r);
  // DynamicQuantizeLSTM: X, W, R, B, sequence_lens, initial_h, initial_c, P, then the scales and zero points.
  const standard = Array.from({ length: 5 }, (_, i) => optional[i] ?? null);
  node.setInputs([x ?? null, wq, rq, ...standard, ws, wz, rs, rz]);
  node.opType = 'DynamicQuantizeLSTM';
  node.domain = MS_DOMAIN;
  ctx.oldWeights.add(p.wValue);
  ctx.oldWeights.add(p.rValue);
  countQuantized(ctx, {
    node: label(node),
    opType: 'LSTM',
    weight: p.wValue.name,
    recurrentWeight: p.rValue.name,
    shape: [p.w.dims[2]!, 4 * p.hidden],
    perChannel,
    bias: node.inputs[3] != null,
  });
}

// ---- Gather of an embedding table ------------------------------------------------------------------

interface GatherPlan {
  node: Node;
  data: Value;
  table: Tensor;
}

/** A Gather reading rows of a constant float [rows, cols] table by non-constant indices (an embedding lookup). */
function isEmbeddingLookup(node: Node): boolean {
  const [data, indices] = node.inputs;
  const table = floatConstant(data);
  // Constant indices (e.g. position ids) pick constant rows: a constant, not a lookup per input.
  return Boolean(data && indices && table && table.dims.length === 2 && !indices.constantTensor());
}

/** An embedding Gather: the plan, or why it stays float. */
function planGather(node: Node): GatherPlan | string {
  const data = node.inputs[0]!;
  const table = floatConstant(data)!;
  if (node.getInt('axis', 0) !== 0) return `axis ${node.getInt('axis', 0)}: only row lookups (axis 0) are quantized`;
  // A tied table (e.g. also transposed into an LM head) stays float for that reader: an int8 copy
  // beside it would only make the model bigger.
  const other = data.uses().find((u) => u.node.opType !== 'Gather' || u.index !== 0 || u.node.getInt('axis', 0) !== 0 || u.node.inputs[1]?.constantTensor());
  if (other || data.isGraphOutput())
    return `the table is also read by ${other ? `'${other.node.name}' (${other.node.opType})` : 'a graph output'}: an int8 copy would only add to the size`;
  return { node, data, table };
}

function applyGather(p: GatherPlan, ctx: ApplyContext): void {
  const { node, table } = p;
  const graph = node.graph;
  const base = label(node);
  const [rows, cols] = table.dims as [number, number];
  // int8 symmetric, one scale per row (axis 0) or per table: the static weights' own quantizer.
  const q = quantizeSymmetric(table.data as Float32Array, table.dims, ctx.perChannel ? 0 : null);
  const home = p.data.graph;
  const qv = home.addInitializer(Tensor.fromData(ctx.valueName(`${p.data.name}_quantized`), { dtype: DataType.INT8, dims: [rows, cols], data: q.data }));
  const indices = node.inputs[1]!;
  const gathered = graph.insertBefore(node, {
    opType: 'Gather',
    name: ctx.nodeName(`${base}_int8`),
    inputs: [qv, indices],
    outputs: [ctx.valueName(`${base}_int8`)],
    attributes: { axis: 0 },
  });
  let result: Value;
  if (ctx.perChannel) {
    // Row scales [rows, 1], gathered with the rows: [..., 1] broadcasts over each row.
    const sv = home.addInitializer(Tensor.fromData(ctx.valueName(`${p.data.name}_row_scale`), { dtype: DataType.FLOAT, dims: [rows, 1], data: q.scales }));
    const scales = graph.insertBefore(node, {
      opType: 'Gather',
      name: ctx.nodeName(`${base}_row_scale`),
      inputs: [sv, indices],
      outputs: [ctx.valueName(`${base}_row_scale`)],
      attributes: { axis: 0 },
    });
    const cast = graph.insertBefore(node, {
      opType: 'Cast',
      name: ctx.nodeName(`${base}_Cast`),
      inputs: [gathered.outputs[0]!],
      outputs: [ctx.valueName(`${base}_int8_float`)],
      attributes: { to: DataType.FLOAT },
    });
    result = graph.insertBefore(node, {
      opType: 'Mul',
      name: ctx.nodeName(`${base}_scale_Mul`),
      inputs: [cast.outputs[0]!, scales.outputs[0]!],
      outputs: [ctx.valueName(`${base}_dequantized`)],
    }).outputs[0]!;
  } else {
    const sv = home.addInitializer(Tensor.fromData(ctx.valueName(`${p.data.name}_scale`), { dtype: DataType.FLOAT, dims: [], data: q.scales }));
    result = graph.insertBefore(node, {
      opType: 'DequantizeLinear',
      name: ctx.nodeName(`${base}_DequantizeLinear`),
      inputs: [gathered.outputs[0]!, sv],
      outputs: [ctx.valueName(`${base}_dequantized`)],
    }).outputs[0]!;
  }
  replaceNode(graph, node, result);
  ctx.oldWeights.add(p.data);
  countQuantized(ctx, { node: base, opType: 'Gather', weight: p.data.name, shape: [rows, cols], perChannel: ctx.perChannel, bias: false });
}

// ---- com.microsoft EmbedLayerNormalization -> QEmbedLayerNormalization -----------------------------

interface EmbedTensor {
  value: Value;
  tensor: Tensor;
}

interface EmbedPlan {
  node: Node;
  word: EmbedTensor;
  position: EmbedTensor;
  segment?: EmbedTensor;
  gamma: EmbedTensor;
  beta: EmbedTensor;
}

/**
 * com.microsoft EmbedLayerNormalization with constant float tables, gamma and beta, no
 * position_ids input, no embedding_sum reader and no attribute but epsilon: the plan for
 * QEmbedLayerNormalization (as onnxruntime's quantize_dynamic writes it); otherwise why it stays float.
 */
function planEmbedLayerNorm(node: Node): EmbedPlan | string {
  const [ids, , word, position, segment, gamma, beta, , positionIds] = node.inputs;
  if (!ids || !word || !position || !gamma || !beta) return 'missing input';
  if (positionIds) return `input '${positionIds.name}' (position_ids): QEmbedLayerNormalization has no such input`;
  const sum = node.outputs[2];
  if (sum && sum.name !== '' && (sum.uses().length > 0 || sum.isGraphOutput()))
    return `output '${sum.name}' (embedding_sum): QEmbedLayerNormalization has no such output`;
  const unknown = [...node.attributes.keys()].find((a) => a !== 'epsilon');
  if (unknown) return `attribute '${unknown}' has no QEmbedLayerNormalization equivalent`;
  const slots: Record<string, EmbedTensor> = {};
  for (const [role, value] of Object.entries({ word, position, segment, gamma, beta })) {
    if (!value) continue;
    const tensor = floatConstant(value);
    if (!tensor) return `'${value.name}' is not a constant float32 tensor`;
    slots[role] = { value, tensor };
  }
  return { node, word: slots.word!, position: slots.position!, segment: slots.segment, gamma: slots.gamma!, beta: slots.beta! };
}

function applyEmbedLayerNorm(p: EmbedPlan, ctx: ApplyContext): void {
  const { node } = p;
  const base = label(node);
  const home = node.graph;
  // uint8 asymmetric, one scale per tensor: onnxruntime's QEmbedLayerNormalization dequantizes
  // each table (and gamma, beta) with a scalar scale and zero point as it gathers.
  const quantize = ({ value, tensor }: EmbedTensor) => {
    const values = tensor.data as Float32Array;
    let min = Infinity;
    let max = -Infinity;
    for (const x of values) {
      if (x < min) min = x;
      if (x > max) max = x;
    }
    const params = activationParams(min, max, DataType.UINT8, false);
    ctx.oldWeights.add(value);
    return [
      home.addInitializer(
        Tensor.fromData(ctx.valueName(`${value.name}_quantized`), {
          dtype: DataType.UINT8,
          dims: [...tensor.dims],
          data: quantizeValues(values, params) as Uint8Array,
        }),
      ),
      home.addInitializer(Tensor.fromData(ctx.valueName(`${value.name}_scale`), { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(params.scale) })),
      home.addInitializer(
        Tensor.fromData(ctx.valueName(`${value.name}_zero_point`), { dtype: DataType.UINT8, dims: [], data: Uint8Array.of(params.zeroPoint) }),
      ),
    ] as const;
  };
  const word = quantize(p.word);
  const position = quantize(p.position);
  const segment = p.segment ? quantize(p.segment) : undefined;
  const gamma = quantize(p.gamma);
  const beta = quantize(p.beta);
  const [ids, segmentIds, , , , , , mask] = node.inputs;
  // QEmbedLayerNormalization: input_ids, segment_ids, the five 8-bit tensors, mask, their five
  // scales, then their five zero points; outputs layernorm_out and mask_index_out (required).
  node.setInputs([
    ids ?? null,
    segmentIds ?? null,
    word[0],
    position[0],
    segment?.[0] ?? null,
    gamma[0],
    beta[0],
    mask ?? null,
    word[1],
    position[1],
    segment?.[1] ?? null,
    gamma[1],
    beta[1],
    word[2],
    position[2],
    segment?.[2] ?? null,
    gamma[2],
    beta[2],
  ]);
  // Exactly two outputs (an unread embedding_sum goes; the plan checked it is unread).
  const [output, maskIndex] = node.outputs;
  const keptMaskIndex = maskIndex && maskIndex.name !== '' ? maskIndex : undefined;
  for (const dropped of node.outputs.slice(keptMaskIndex ? 2 : 1)) node.graph.valueInfo = node.graph.valueInfo.filter((v) => v !== dropped);
  node._setOutputs(keptMaskIndex ? [output!, keptMaskIndex] : [output!]);
  if (!keptMaskIndex) node.addOutput(ctx.valueName(`${base}_mask_index`), { kind: 'tensor', elemType: DataType.INT32 });
  node.opType = 'QEmbedLayerNormalization';
  const [rows, cols] = p.word.tensor.dims as [number, number];
  countQuantized(ctx, { node: base, opType: 'EmbedLayerNormalization', weight: p.word.value.name, shape: [rows, cols], perChannel: false, bias: false });
}

// ---- the table -------------------------------------------------------------------------------------

const row = <P>(handler: QuantizingHandler<P>): DynamicHandler => handler as QuantizingHandler<unknown>;

/** Rows in the order op types are listed to users (default opTypes, error messages). */
const HANDLERS: readonly DynamicHandler[] = [
  row({ opType: 'MatMul', domain: '', stage: 0, plan: planMatMul, apply: applyMatMulInteger }),
  row({ opType: 'Gemm', domain: '', stage: 0, plan: planGemm, apply: applyMatMulInteger }),
  row({
    opType: 'LSTM',
    domain: '',
    stage: 1,
    plan: planLstm,
    apply: applyLstm,
    finish(applied, ctx) {
      if (applied === 0) return;
      if (ctx.model.opsetVersion(MS_DOMAIN) === undefined) ctx.model.opsetImports.push({ domain: MS_DOMAIN, version: 1 });
      ctx.notes.push(
        `${applied} LSTM node(s) became com.microsoft DynamicQuantizeLSTM (onnxruntime's integer LSTM kernel): the model now runs on onnxruntime only; exclude LSTM (--exclude-op-types LSTM) to keep standard ONNX.`,
      );
    },
  }),
  row({ opType: 'Gather', domain: '', stage: 2, isCandidate: isEmbeddingLookup, plan: planGather, apply: applyGather }),
  row({
    opType: 'Attention',
    domain: MS_DOMAIN,
    stage: 0,
    plan: planAttention,
    apply: applyQAttention,
    finish(applied, ctx) {
      if (applied === 0) return;
      ctx.notes.push(
        `${applied} com.microsoft Attention node(s) became QAttention (onnxruntime's integer attention): the Q/K/V projection runs as int8 GEMMs on the dynamically quantized input; the attention scores stay float.`,
      );
    },
  }),
  row({
    opType: 'EmbedLayerNormalization',
    domain: MS_DOMAIN,
    stage: 3,
    plan: planEmbedLayerNorm,
    apply: applyEmbedLayerNorm,
    finish(applied, ctx) {
      if (applied === 0) return;
      ctx.notes.push(
        `${applied} com.microsoft EmbedLayerNormalization node(s) became QEmbedLayerNormalization: word, position and segment tables, gamma and beta in uint8 (one scale each), dequantized as they are gathered; a size gain (the embeddings are often a quarter of a BERT's weights), onnxruntime only.`,
      );
    },
  }),
  // Left float on purpose; listed in the report so users see why.
  {
    opType: 'Conv',
    domain: '',
    floatReason: 'Conv stays float in dynamic mode (it quantizes MatMul-type ops; static INT8 runs convs as QLinearConv); use --mode int8',
  },
  { opType: 'GRU', domain: '', floatReason: 'GRU stays float (no integer kernel)' },
  { opType: 'RNN', domain: '', floatReason: 'RNN stays float (no integer kernel)' },
  {
    opType: 'Attention',
    domain: '',
    floatReason:
      "ONNX Attention (opset 23) stays float: onnxruntime has no integer kernel for it (com.microsoft Attention, from onnxruntime's transformer optimizer, becomes QAttention; MatMuls exported as separate nodes are quantized)",
  },
  { opType: 'MultiHeadAttention', domain: '', floatReason: 'MultiHeadAttention stays float (no dynamic integer kernel)' },
];

const handlerKey = (domain: string, opType: string): string => `${domain === 'ai.onnx' ? '' : domain}|${opType}`;

export function buildDynamicRegistry(handlers: readonly DynamicHandler[]): ReadonlyMap<string, DynamicHandler> {
  const map = new Map<string, DynamicHandler>();
  for (const h of handlers) {
    const key = handlerKey(h.domain, h.opType);
    if (map.has(key)) throw new Error(`duplicate dynamic-quantization handler for ${h.domain || 'ai.onnx'} ${h.opType}`);
    map.set(key, h);
  }
  return map;
}

const REGISTRY = buildDynamicRegistry(HANDLERS);

/** The row for a node's domain and op type, if any. */
export function dynamicHandler(node: Node): DynamicHandler | undefined {
  return REGISTRY.get(handlerKey(node.domain, node.opType));
}

export function isQuantizingHandler(h: DynamicHandler): h is QuantizingHandler<unknown> {
  return !('floatReason' in h);
}

/** Op types `opTypes` may name, in table order (the default list). */
export const DYNAMIC_OP_TYPES: readonly string[] = [...new Set(HANDLERS.filter(isQuantizingHandler).map((h) => h.opType))];

/** Quantizing rows in table order, for the per-stage finish calls. */
export const QUANTIZING_HANDLERS: readonly QuantizingHandler<unknown>[] = HANDLERS.filter(isQuantizingHandler);

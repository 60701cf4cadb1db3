/**
 * INT8 static quantization in QDQ form: QuantizeLinear/DequantizeLinear pairs around the
 * operators of the registry, placed so onnxruntime fuses each group into an integer kernel
 * (see registry.ts). Weights int8 symmetric (per channel by default), biases int32 with scale =
 * input scale x weight scale, activations uint8 asymmetric (or int8 symmetric) from calibrated
 * ranges. Plan, then apply: `planQdq` decides every node and tensor (and so which tensors need
 * statistics), `applyQdq` edits a clone once. Only the main graph is quantized; nodes inside
 * If/Loop bodies are left in float and read quantized outer values through a DequantizeLinear.
 * Imports the IR, ../preprocess/constants (removeUnusedInitializers), ./registry, ./quant-math,
 * ./calibrate (types).
 */
import { InputError, UsageError } from '../../errors.js';
import { DataType, isIntegerDtype } from '../../ir/dtype.js';
import { isTensorType, Tensor, type Graph, type Model, type Node, type Value } from '../../ir/index.js';
import { uniqueNodeNamer } from '../../ir/unique-names.js';
import { removeUnusedInitializers } from '../preprocess/constants.js';
import type { Range } from './calibrate.js';
import { activationParams, biasWeightScaleFloor, quantizeBias, quantizeValues, quantizeWeight, type QuantParams, type QuantType } from './quant-math.js';
import { padConvInputChannels, type PaddedConv } from './channel-pad.js';
import { ABSORBABLE_ACTIVATIONS, QDQ_HANDLERS, type InputRole, type OpHandler } from './registry.js';

export interface QdqOptions {
  /** Per-channel weight scales (needs opset 13); default true. */
  perChannel?: boolean;
  /** Activation type; default 'uint8' (asymmetric). */
  activationType?: 'uint8' | 'int8';
  /** Symmetric activation ranges; default true for int8, false for uint8. */
  activationSymmetric?: boolean;
  /** Quantize only these op types (default: every type in the registry). */
  opTypes?: readonly string[];
  /** Never quantize these op types. */
  excludeOpTypes?: readonly string[];
  /** Never quantize these nodes (by name). */
  excludeNodes?: readonly string[];
  /** Quantize only these nodes (by name); used by sensitivity analysis. */
  onlyNodes?: readonly string[];
  /** Nodes kept float by a rule, with the reason for the report (treated like excludeNodes otherwise). */
  floatNodes?: Readonly<Record<string, string>>;
  /**
   * Leave an ungrouped Conv with a spatial kernel in float when its dot-product length
   * (Cin x kh x kw) is below this; default 16, 0 turns the rule off. Such convs (a 1-channel 3x3
   * stem: 9) mostly run faster as onnxruntime's float NCHWc Conv than as QLinearConv, even with
   * padded channels: the int8 kernel does a few multiply-adds per output pixel and kernel tap, then
   * requantizes (bench/quantize-blocks.mjs stems, docs/quantize.md). 1x1 and grouped (depthwise) convs
   * are never left float by this rule. 0 also turns off the narrow image stem
   * (MIN_STEM_OUTPUT_CHANNELS) and narrow grouped conv (MIN_GROUP_CHANNELS) rules.
   */
  minConvReduction?: number;
  /**
   * Pad the input channels of quantized convs at a float -> int8 boundary (1- or 3-channel stems)
   * to a multiple of 4 so onnxruntime's fast x86 int8 conv kernel runs; same numbers. Default true.
   */
  padChannels?: boolean;
  /**
   * Let an int8 Add/Mul read a float -> int8 boundary tensor that a quantized Conv reads too,
   * through an identity int8 1x1 depthwise Conv (a layout anchor; see anchorChannels). Default true.
   */
  layoutAnchors?: boolean;
  /**
   * A bias that does not fit int32 at input scale x weight scale: 'scale' (default) enlarges the
   * weight scale of its channel until it fits; 'clamp' clamps the bias (the old behaviour, kept to
   * measure what it cost: docs/quantize.md, "What clamping cost").
   */
  biasOverflow?: 'scale' | 'clamp';
}

/** Default of QdqOptions.minConvReduction. */
export const MIN_CONV_REDUCTION = 16;

/**
 * Float ops through which onnxruntime's QDQPropagationTransformer hoists a QuantizeLinear with a
 * scalar scale (MaxPool-12, Reshape, Transpose, Squeeze, Unsqueeze, Slice). A float -> int8
 * boundary Q that would be hoisted up to a MaxPool would turn a fast float NCHWc MaxPool into a
 * slow uint8 NCHW one; such a Q gets a per-axis scale (all values equal: same numbers), which
 * onnxruntime does not propagate. Only then: a per-axis Q costs far more than a scalar one when
 * onnxruntime's layout optimizer moves it onto the channels of an NHWC tensor (12k values of a
 * Keras-style NHWC input, Transpose -> Q: 523 us per-axis vs a few us), and hoisting through the
 * data-movement ops alone is harmless.
 */
const Q_HOISTING_OPS = new Set(['MaxPool', 'Reshape', 'Transpose', 'Squeeze', 'Unsqueeze', 'Slice']);

/** Ops whose integer kernel pays for a QuantizeLinear and a DequantizeLinear around it. */
const HEAVY_OPS = new Set(['Conv', 'ConvTranspose', 'MatMul', 'Gemm']);

/** Whether a quantized node reads `node`'s outputs (looking past a Relu/Clip it may absorb). */
function feedsQuantized(node: Node, quantizedNodes: ReadonlySet<Node>): boolean {
  return node.outputs.some(
    (o) =>
      o.name !== '' &&
      o
        .uses()
        .some(
          (u) =>
            quantizedNodes.has(u.node) ||
            (ABSORBABLE_ACTIVATIONS.has(u.node.opType) && u.node.outputs.some((a) => a.uses().some((w) => quantizedNodes.has(w.node)))),
        ),
  );
}

/** Elementwise ops quantized only when every non-constant input is already int8 (see planQdq). */
const ELEMENTWISE_INT8 = new Set(['Add', 'Mul']);

/**
 * Fewest input channels per group for a grouped (not depthwise) Conv to run int8: below it
 * onnxruntime's int8 grouped kernel is slower than its float one. Measured on a 128-channel 3x3
 * conv at 28x28 between two 1x1 convs (batch 1, 1 thread, INT8 vs FP32 of the whole block): 4
 * channels per group (ResNeXt's 32x4d) 0.69x, 8: 1.18x, 16: 1.08x, 32: 1.51x, 64: 1.87x.
 */
export const MIN_GROUP_CHANNELS = 8;

/** Input channels per group of a grouped, non-depthwise Conv (group > 1, more than one channel per group), else undefined. */
function groupedConvChannels(node: Node, graph: Graph): number | undefined {
  const group = node.getInt('group', 1);
  const w = node.inputs[1] ? graph.constantTensor(node.inputs[1]) : undefined;
  if (group <= 1 || !w || w.dims.length < 3) return undefined;
  return w.dims[1]! > 1 ? w.dims[1]! : undefined;
}

/**
 * Cin x kernel size of an ungrouped Conv with a constant weight and a spatial kernel: the convs the
 * minConvReduction rule is about. Not for 1x1 convs (they read their input directly, without the
 * per-tap indirection that makes short int8 reductions slow) nor grouped/depthwise ones (their
 * reduction is always short and onnxruntime has dedicated int8 depthwise kernels: a MobileNetV2
 * measured 2.15x with int8 depthwise convs, 1.50x with them float; docs/quantize.md).
 */
/**
 * Fewest output channels for an image stem (the first conv, reading the model's 1-4 channel input)
 * to run int8. Measured with a 3-channel 3x3 stride-2 stem, then two 64-channel convs, GAP and a
 * Gemm (batch 1, 1 thread, whole model INT8 vs FP32, stem int8 with padded channels vs stem float):
 * 8 output channels at 224 px 0.98x vs 1.66x; 16 at 224 px 1.29x vs 1.66x, at 96 px 1.31x vs
 * 1.61x; 24 at 224 px 1.72x vs 1.78x; 32 at 224 px 1.68x vs 1.63x.
 */
export const MIN_STEM_OUTPUT_CHANNELS = 32;

/** Ops between a model input and its stem that leave it an image stem (layout, padding, casts). */
const STEM_PASSTHROUGH = new Set(['Transpose', 'Pad', 'Cast', 'Identity', 'Reshape', 'Squeeze', 'Unsqueeze']);

/**
 * Output channels of an ungrouped spatial Conv that reads a model input with 1-4 channels (maybe
 * through a Transpose, Pad or Cast) and has fewer than MIN_STEM_OUTPUT_CHANNELS outputs, else
 * undefined.
 */
function narrowStemChannels(node: Node, graph: Graph): number | undefined {
  const w = node.inputs[1] ? graph.constantTensor(node.inputs[1]) : undefined;
  if (!w || w.dims.length < 3 || node.getInt('group', 1) !== 1 || w.dims.slice(2).every((d) => d === 1)) return undefined;
  const [cout, cin] = w.dims as [number, number];
  if (cin > 4 || cout >= MIN_STEM_OUTPUT_CHANNELS) return undefined;
  let v = node.inputs[0];
  for (let hops = 0; v?.producer && STEM_PASSTHROUGH.has(v.producer.opType) && hops < 8; hops++) v = v.producer.inputs[0];
  return v?.isGraphInput() ? cout : undefined;
}

function convReduction(node: Node, graph: Graph): number | undefined {
  const w = node.inputs[1] ? graph.constantTensor(node.inputs[1]) : undefined;
  if (!w || w.dims.length < 3 || w.dims.slice(2).every((d) => d === 1) || node.getInt('group', 1) !== 1) return undefined;
  return w.dims.slice(1).reduce((a, b) => a * b, 1);
}

interface TensorPlan {
  value: Value;
  source: 'calibrated' | 'constant' | 'inherited';
  /** Passthrough ops: the tensor whose scale and zero point this one reuses. */
  inheritFrom?: Value;
  /** Produced by a quantized node: every reader must go through a DequantizeLinear. */
  producedByQuantized: boolean;
  /** A Relu/Clip absorbed before the Q: its bounds clamp the range. */
  clip?: { min: number; max: number };
  /** Quantized input slots reading this tensor (when not producedByQuantized). */
  readers: { node: Node; index: number }[];
}

interface NodePlan {
  node: Node;
  handler: OpHandler;
  roles: InputRole[];
  /** The tensor after the node (or after its absorbed Relu/Clip); undefined when left float. */
  output?: Value;
  /** Outputs 1.. of a multi-output passthrough op (Split), quantized like `output`. */
  moreOutputs?: Value[];
  absorbed?: Node;
}

export interface QdqPlan {
  nodes: NodePlan[];
  /** Boundary tensors read through a layout anchor, with the elementwise nodes it lets run int8. */
  anchors: Map<Value, { channels: number; enables: Node[] }>;
  tensors: Map<Value, TensorPlan>;
  skipped: SkippedNode[];
  /** Tensors that need calibration statistics. */
  statistics: string[];
  perChannel: boolean;
}

export interface SkippedNode {
  node: string;
  opType: string;
  reason: string;
}

export interface QuantizedNodeInfo {
  node: string;
  opType: string;
  /** Integer kernel onnxruntime is expected to fuse the group into. */
  kernel: string;
  outputQuantized: boolean;
  absorbed?: string;
}

export interface LayoutAnchor {
  /** The boundary tensor the anchor re-emits (its readers read the anchor). */
  tensor: string;
  channels: number;
  /** The int8 Add/Mul nodes that stay in onnxruntime's NHWC layout thanks to it. */
  enables: string[];
}

export interface BiasScaleAdjustment {
  node: string;
  /** Output channels whose weight scale grew (1 for per-tensor weights). */
  channels: number;
  /** Largest new / old weight scale. */
  maxFactor: number;
}

export interface QdqReport {
  activationType: 'uint8' | 'int8';
  activationSymmetric: boolean;
  perChannel: boolean;
  quantized: QuantizedNodeInfo[];
  byOpType: Record<string, number>;
  skipped: SkippedNode[];
  activationTensors: number;
  weights: number;
  biases: number;
  /** Bias values that did not fit int32 and were clamped (0 unless a scale cannot grow enough). */
  biasSaturated: number;
  /**
   * Nodes whose bias did not fit int32 at input scale x weight scale: the weight scale of those
   * output channels (per-tensor weights: of the tensor) was enlarged until it fits.
   */
  biasScaleAdjustments: BiasScaleAdjustment[];
  qdqNodesAdded: number;
  /** Convs whose input channels were padded for onnxruntime's fast int8 kernel. */
  paddedConvs: PaddedConv[];
  /** Identity int8 convs added so onnxruntime keeps int8 Adds/Muls in NHWC (see anchorChannels). */
  layoutAnchors: LayoutAnchor[];
  /** Quantized at their boundaries but computing in float (no integer kernel), with the reason. */
  floatCompute: SkippedNode[];
}

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';

function knownElemType(v: Value): number | undefined {
  return isTensorType(v.type) ? v.type.elemType : undefined;
}

function clipBounds(node: Node, graph: Graph): { min: number; max: number } | undefined {
  if (node.opType === 'Relu') return { min: 0, max: Infinity };
  // Clip: constant bounds only (attributes before opset 11, inputs from 11).
  const bound = (i: number, attr: string, fallback: number): number | undefined => {
    if (node.hasAttr(attr)) return node.getFloat(attr);
    const v = node.inputs[i];
    if (!v) return fallback;
    const t = graph.constantTensor(v);
    return t ? t.toFloat64()[0] : undefined;
  };
  const min = bound(1, 'min', -Infinity);
  const max = bound(2, 'max', Infinity);
  return min === undefined || max === undefined ? undefined : { min, max };
}

/**
 * An Add of a constant vector (a bias) to the only output of a MatMul with a constant weight: left
 * float, the MatMul's output then stays float too, and onnxruntime fuses DQ -> MatMul -> Add into
 * MatMulIntegerToFloat with the bias in its epilogue (2-D MatMul + bias became a Gemm in
 * pre-processing; this is the 3-D case of transformers).
 */
function isBiasAfterMatMul(add: Node, graph: Graph): boolean {
  return add.inputs.some((v, i) => {
    const other = add.inputs[1 - i];
    const mm = v?.producer;
    if (!mm || mm.opType !== 'MatMul' || !isDefaultDomain(mm) || v!.uses().length !== 1 || !mm.inputs[1] || !graph.constantTensor(mm.inputs[1])) return false;
    const bias = other ? graph.constantTensor(other) : undefined;
    return !!bias && bias.dims.length === 1;
  });
}

/** Decide what to quantize. Does not modify the model. */
export function planQdq(model: Model, options: QdqOptions = {}): QdqPlan {
  const graph = model.graph;
  const opset = model.opsetVersion('') ?? 0;
  if (opset < 10) throw new UsageError(`QDQ quantization needs opset 10 or later; the model declares opset ${opset}`);
  const perChannel = (options.perChannel ?? true) && opset >= 13;
  const excludedNodes = new Set(options.excludeNodes ?? []);
  const excludedTypes = new Set(options.excludeOpTypes ?? []);
  const onlyTypes = options.opTypes ? new Set(options.opTypes) : undefined;
  const onlyNodes = options.onlyNodes ? new Set(options.onlyNodes) : undefined;
  const minReduction = options.minConvReduction ?? MIN_CONV_REDUCTION;
  const skipped: SkippedNode[] = [];
  const floatNodes = new Map(Object.entries(options.floatNodes ?? {}));
  const selected = (n: Node): boolean =>
    !excludedNodes.has(n.name) &&
    !floatNodes.has(n.name) &&
    !excludedTypes.has(n.opType) &&
    (!onlyTypes || onlyTypes.has(n.opType)) &&
    (!onlyNodes || onlyNodes.has(n.name));

  // Grouped convs with few channels per group stay float (onnxruntime's int8 grouped kernel is
  // slower), like excluded nodes: between a DequantizeLinear and a QuantizeLinear onnxruntime would
  // quantize the float weights itself and run the slow kernel anyway.
  const narrowGroups = new Map<Node, string>();
  for (const node of graph.nodes) {
    if (node.opType !== 'Conv' || !isDefaultDomain(node) || minReduction <= 0 || !selected(node)) continue;
    const perGroup = groupedConvChannels(node, graph);
    if (perGroup !== undefined && perGroup < MIN_GROUP_CHANNELS) {
      narrowGroups.set(
        node,
        `grouped conv with ${perGroup} input channels per group (< ${MIN_GROUP_CHANNELS}): onnxruntime's int8 grouped kernel is slower than its float one, so it and the ops reading it stay float`,
      );
    }
  }

  // Outputs of explicitly excluded nodes stay float, and so do the nodes reading them: a Q right
  // after an excluded node would let onnxruntime fuse it into an integer kernel anyway.
  const fp32Outputs = new Map<Value, Node>();
  for (const node of graph.nodes) {
    if (!isDefaultDomain(node) || !QDQ_HANDLERS.has(node.opType)) continue;
    if (!excludedNodes.has(node.name) && !floatNodes.has(node.name) && !excludedTypes.has(node.opType) && !narrowGroups.has(node)) continue;
    for (const out of node.outputs) {
      if (out.name === '') continue;
      fp32Outputs.set(out, node);
      const next = out.consumers.length === 1 ? out.consumers[0]! : undefined;
      if (next && ABSORBABLE_ACTIVATIONS.has(next.opType) && next.graph === graph) fp32Outputs.set(next.outputs[0]!, node);
    }
  }

  // 1. Which nodes are quantized (passthrough ops only behind a quantized producer).
  const nodes: NodePlan[] = [];
  const quantizedNodes = new Set<Node>();
  const anchors = new Map<Value, { channels: number; enables: Node[] }>();
  const producesQuantized = (v: Value | null | undefined): boolean => {
    let p = v?.producer;
    if (p && ABSORBABLE_ACTIVATIONS.has(p.opType) && p.inputs[0]?.producer) {
      const q = p.inputs[0].producer;
      if (quantizedNodes.has(q) && QDQ_HANDLERS.get(q.opType)!.absorbsActivation) p = q;
    }
    return !!p && quantizedNodes.has(p);
  };
  for (const node of graph.nodes) {
    const handler = isDefaultDomain(node) ? QDQ_HANDLERS.get(node.opType) : undefined;
    if (!handler) continue;
    const label = { node: node.name, opType: node.opType };
    if (!selected(node)) {
      const rule = floatNodes.get(node.name);
      if (rule !== undefined) skipped.push({ ...label, reason: rule });
      else if (excludedNodes.has(node.name) || excludedTypes.has(node.opType)) skipped.push({ ...label, reason: 'excluded' });
      continue;
    }
    const problem = handler.check?.(node, graph);
    if (problem) {
      skipped.push({ ...label, reason: problem });
      continue;
    }
    const reduction = node.opType === 'Conv' ? convReduction(node, graph) : undefined;
    if (reduction !== undefined && reduction < minReduction) {
      skipped.push({ ...label, reason: `reduction size ${reduction} (Cin x kernel) < ${minReduction}: QLinearConv would be slower than float Conv` });
      continue;
    }
    const stemOutputs = node.opType === 'Conv' && minReduction > 0 ? narrowStemChannels(node, graph) : undefined;
    if (stemOutputs !== undefined) {
      skipped.push({
        ...label,
        reason: `image stem with ${stemOutputs} output channels (< ${MIN_STEM_OUTPUT_CHANNELS}): its int8 form plus quantizing the input would be slower than the float conv`,
      });
      continue;
    }
    const slowGroups = narrowGroups.get(node);
    if (slowGroups !== undefined) {
      skipped.push({ ...label, reason: slowGroups });
      continue;
    }
    const roles = handler.inputs(node, graph);
    const notFloat = node.inputs.find((v, i) => {
      const role = roles[i]?.role ?? 'float';
      if (!v || role === 'float') return false;
      const t = role === 'activation' ? (knownElemType(v) ?? graph.constantTensor(v)?.dtype) : graph.constantTensor(v)?.dtype;
      return t !== undefined && t !== DataType.FLOAT;
    });
    if (notFloat) {
      // Shape arithmetic (the Shape -> Gather -> Unsqueeze -> Concat of a dynamic Reshape) is not
      // a candidate at all: no need to list it as left in FP32.
      const integerOnly = node.outputs.every((o) => {
        const t = knownElemType(o);
        return t !== undefined && isIntegerDtype(t);
      });
      if (!integerOnly) skipped.push({ ...label, reason: `input '${notFloat.name}' is not float32` });
      continue;
    }
    const fromFp32 = node.inputs.find((v, i) => v && roles[i]?.role === 'activation' && fp32Outputs.has(v));
    if (fromFp32) {
      skipped.push({ ...label, reason: `reads the output of FP32 node '${fp32Outputs.get(fromFp32)!.name}'` });
      continue;
    }
    // An int8 Add/Mul pays off only between int8 tensors: a float input would need its own
    // QuantizeLinear (as costly as the float op), and onnxruntime keeps such a QLinearAdd in NCHW
    // (its transpose optimizer sees no gain in moving the other input), which drags the 8-bit ops
    // after it (MaxPool) onto slow NCHW kernels. Sensitivity analysis (onlyNodes) still tries it.
    if (node.opType === 'Add' && !onlyNodes && isBiasAfterMatMul(node, graph)) {
      skipped.push({
        ...label,
        reason:
          'bias Add after a MatMul: left float, onnxruntime runs MatMul + bias as MatMulIntegerToFloat (float output; more accurate than QLinearMatMul + QLinearAdd with an int8 bias, as fast)',
      });
      continue;
    }
    if (ELEMENTWISE_INT8.has(node.opType) && !onlyNodes) {
      const activations = node.inputs.filter((v, i): v is Value => !!v && roles[i]?.role === 'activation' && !graph.constantTensor(v));
      const floatInputs = activations.filter((v) => !producesQuantized(v));
      if (floatInputs.length > 0) {
        // uint8 activations only: with int8 ones this build fuses no QLinearConv (measured 0.3x), so
        // the anchor would be one more float conv.
        const anchorsOn = options.layoutAnchors !== false && options.activationType !== 'int8';
        const channels = !anchorsOn || floatInputs.length !== 1 ? undefined : anchorChannels(floatInputs[0]!, activations, quantizedNodes, producesQuantized);
        if (channels === undefined) {
          skipped.push({ ...label, reason: `reads float tensor '${floatInputs[0]!.name}': an int8 ${node.opType} only pays off between int8 tensors` });
          continue;
        }
        const anchor = anchors.get(floatInputs[0]!) ?? { channels, enables: [] };
        anchor.enables.push(node);
        anchors.set(floatInputs[0]!, anchor);
      }
    }
    if (handler.output === 'passthrough' && !producesQuantized(node.inputs[0])) {
      skipped.push({ ...label, reason: 'input is not quantized (data-movement ops only run in 8-bit behind a quantized op)' });
      continue;
    }
    quantizedNodes.add(node);
    nodes.push({ node, handler, roles });
  }

  // A data-movement op whose readers all stay float gains nothing in 8-bit (its output would only
  // be dequantized again, and it would force a Q onto the op before it): drop it, repeatedly for
  // chains (e.g. the Flatten -> Softmax -> Reshape an opset upgrade writes after a classifier).
  for (let changed = true; changed; ) {
    changed = false;
    for (let i = nodes.length - 1; i >= 0; i--) {
      const { node, handler } = nodes[i]!;
      if (handler.output !== 'passthrough') continue;
      const feedsInt8 = node.outputs.some((o) => o.name !== '' && o.uses().some((u) => quantizedNodes.has(u.node)));
      if (feedsInt8) continue;
      nodes.splice(i, 1);
      quantizedNodes.delete(node);
      skipped.push({ node: node.name, opType: node.opType, reason: 'its readers stay float: in 8-bit it would only add a DequantizeLinear' });
      changed = true;
    }
    // A light op (not a Conv or matrix product) between float ops: a QuantizeLinear before it and a
    // DequantizeLinear after it cost more than its integer kernel saves. The SiLU after a float
    // stem (x * Sigmoid(x)): the Mul reads the float x and stays float, and a QLinearSigmoid
    // between them made five passes over the stem's output where float makes one (onnxruntime
    // fuses x * Sigmoid(x) into QuickGelu). Not for sensitivity analysis, which quantizes one node
    // at a time on purpose.
    for (let i = nodes.length - 1; i >= 0 && !onlyNodes; i--) {
      const { node, roles, handler } = nodes[i]!;
      if (HEAVY_OPS.has(node.opType) || handler.output === 'passthrough') continue;
      const readsInt8 = node.inputs.some((v, j) => v && roles[j]?.role === 'activation' && producesQuantized(v));
      if (readsInt8 || feedsQuantized(node, quantizedNodes)) continue;
      nodes.splice(i, 1);
      quantizedNodes.delete(node);
      skipped.push({
        node: node.name,
        opType: node.opType,
        reason: 'between float ops: in 8-bit it would only add a QuantizeLinear before it and a DequantizeLinear after it',
      });
      changed = true;
    }
  }

  // 2. Outputs: where the Q goes (after an absorbed Relu/Clip) and whether there is one.
  const readsAsActivation = (reader: Node, v: Value): boolean => {
    if (!quantizedNodes.has(reader)) return false;
    const plan = nodes.find((p) => p.node === reader)!;
    return reader.inputs.some((x, i) => x === v && plan.roles[i]?.role === 'activation');
  };
  for (const plan of nodes) {
    const { node, handler } = plan;
    let out = node.outputs[0];
    if (!out || out.name === '') continue;
    if (handler.absorbsActivation && out.consumers.length === 1 && out.uses().length === 1 && !out.isGraphOutput()) {
      const next = out.consumers[0]!;
      if (next.graph === graph && isDefaultDomain(next) && ABSORBABLE_ACTIVATIONS.has(next.opType) && selected(next) && next.inputs[0] === out) {
        if (clipBounds(next, graph)) {
          plan.absorbed = next;
          out = next.outputs[0]!;
        }
      }
    }
    if (handler.output === 'optional') {
      const readers = out.uses();
      const allQuantized = readers.length > 0 && !out.isGraphOutput() && readers.every((u) => readsAsActivation(u.node, out!));
      if (!allQuantized) continue;
    }
    plan.output = out;
    if (handler.allOutputs) plan.moreOutputs = node.outputs.slice(1).filter((o) => o.name !== '');
  }

  // 3. Tensor plans: outputs first, then activation inputs (merged by value).
  const tensors = new Map<Value, TensorPlan>();
  const entry = (v: Value): TensorPlan => {
    let tp = tensors.get(v);
    if (!tp) {
      tp = { value: v, source: graph.constantTensor(v) ? 'constant' : 'calibrated', producedByQuantized: false, readers: [] };
      tensors.set(v, tp);
    }
    return tp;
  };
  for (const plan of nodes) {
    if (!plan.output) continue;
    for (const out of [plan.output, ...(plan.moreOutputs ?? [])]) {
      const tp = entry(out);
      tp.producedByQuantized = true;
      if (plan.handler.output === 'passthrough') {
        tp.source = 'inherited';
        tp.inheritFrom = plan.node.inputs[0]!;
      } else tp.source = 'calibrated';
      if (plan.absorbed) tp.clip = clipBounds(plan.absorbed, graph);
    }
  }
  for (const plan of nodes) {
    plan.roles.forEach((role, i) => {
      const v = plan.node.inputs[i];
      if (v && role.role === 'activation') entry(v).readers.push({ node: plan.node, index: i });
    });
  }
  const statistics = [...tensors.values()].filter((t) => t.source === 'calibrated').map((t) => t.value.name);
  return { nodes, anchors, tensors, skipped, statistics, perChannel };
}

/**
 * A layout anchor: an identity int8 1x1 depthwise Conv (weights 1, scale 1, output on its input's
 * scale: the same 8-bit values) behind the QuantizeLinear of a float -> int8 boundary tensor that
 * a quantized Conv and an int8 Add/Mul both read; both then read the anchor. Why: onnxruntime runs
 * QLinearConv in NHWC and wraps it in Transposes that its transpose optimizer then cancels. An int8
 * Add reading a conv's NHWC output and the boundary tensor (NCHW: nothing produced it in NHWC)
 * scores as a tie (one Transpose removed, one added), so the Add stays NCHW with a Transpose on
 * each side, and the 8-bit MaxPool after it runs on onnxruntime's slow NCHW kernel. That is the
 * first residual block after a float stem (the float stem itself is the narrow-stem or
 * small-reduction rule's doing). The anchor is an NHWC conv, so every reader of its output is NHWC
 * and all Transposes cancel: on the example (fashion-cnn: float 1-channel stem, MaxPool, residual
 * block, MaxPool) 24 -> 18 kernels, INT8 vs FP32 ahead of the unanchored model in each of 8 runs
 * side by side (median 1.53x vs 1.475x, busy host); a CIFAR ResNet-20 1.82x vs 1.56x
 * (docs/quantize.md). Rank 4 only (measured). A channel Concat is not anchored: in NHWC it
 * interleaves every pixel, which ate the gain on a DenseNet.
 *
 * Returns the channels of the anchor that lets an int8 Add/Mul read the float tensor `v`,
 * or undefined: `v` is rank 4 with a static channel count, a quantized Conv already reads it as
 * its activation, and the elementwise op has other activation inputs (not just constants), all int8
 * outputs of quantized nodes with v's channels and spatial size (no broadcasting).
 */
function anchorChannels(
  v: Value,
  activations: readonly Value[],
  quantizedNodes: ReadonlySet<Node>,
  producesQuantized: (v: Value) => boolean,
): number | undefined {
  const shape = isTensorType(v.type) ? v.type.shape : undefined;
  const channels = shape?.[1];
  if (!shape || shape.length !== 4 || typeof channels !== 'number' || channels < 1) return undefined;
  if (!v.uses().some((u) => u.index === 0 && u.node.opType === 'Conv' && quantizedNodes.has(u.node))) return undefined;
  if (activations.length < 2) return undefined;
  // The other inputs: int8, same channels and spatial size (the batch dim may be symbolic on one side).
  const sameInt8 = (a: Value): boolean => {
    const s = isTensorType(a.type) ? a.type.shape : undefined;
    return producesQuantized(a) && !!s && s.length === 4 && s.every((d, i) => i === 0 || d === shape[i]);
  };
  return activations.every((a) => a === v || sameInt8(a)) ? channels : undefined;
}

/** Tensors a QDQ quantization of `model` with `options` needs statistics for. */
export function requiredStatistics(model: Model, options: QdqOptions = {}): string[] {
  return planQdq(model, options).statistics;
}

export interface ApplyOptions extends QdqOptions {
  /** Calibrated ranges by tensor name (every name in plan.statistics). */
  ranges: ReadonlyMap<string, Range>;
}

/** Quantize a copy of `model` (QDQ). The input model is not modified. */
export function quantizeQdq(model: Model, options: ApplyOptions): { model: Model; report: QdqReport } {
  const out = model.clone();
  const plan = planQdq(out, options);
  const report = applyQdq(out, plan, options);
  return { model: out, report };
}

/**
 * The activation quantization parameters of every planned tensor, as applyQdq writes them and QAT
 * fake-quantizes with them: calibrated (or constant) range, clamped by an absorbed Relu/Clip;
 * passthrough tensors inherit their input's parameters (`root` is the tensor they come from).
 */
const isSoftmaxOutput = (v: Value): boolean => v.producer?.opType === 'Softmax' && (v.producer.domain === '' || v.producer.domain === 'ai.onnx');

/**
 * A quantized Softmax output always spans [0, 1] in steps of 1/256 (zero point 0 for uint8, -128
 * for int8), whatever calibration saw: onnxruntime fuses DQ -> Softmax -> Q into QLinearSoftmax,
 * whose kernel is built for that grid (its quantizer forces the same parameters). A calibrated
 * range (e.g. max 0.07 for near-uniform attention) made a 2-layer transformer's logits 6 dB SQNR
 * instead of 39 dB.
 */
function softmaxOutputParams(type: QuantType): QuantParams {
  return { scale: 1 / 256, zeroPoint: type === DataType.UINT8 ? 0 : -128, type };
}

export function activationParamResolver(
  graph: Graph,
  plan: QdqPlan,
  ranges: ReadonlyMap<string, Range>,
  actType: QuantType,
  symmetric: boolean,
): (value: Value) => { root: Value; p: QuantParams } {
  const done = new Map<Value, { root: Value; p: QuantParams }>();
  const resolve = (value: Value): { root: Value; p: QuantParams } => {
    const known = done.get(value);
    if (known) return known;
    const tp = plan.tensors.get(value);
    if (!tp) throw new Error(`QDQ plan: tensor '${value.name}' is not planned`);
    let result: { root: Value; p: QuantParams };
    if (tp.source === 'inherited') result = resolve(tp.inheritFrom!);
    else if (tp.source !== 'constant' && isSoftmaxOutput(tp.value)) result = { root: tp.value, p: softmaxOutputParams(actType) };
    else {
      let range: Range;
      if (tp.source === 'constant') {
        let min = Infinity;
        let max = -Infinity;
        for (const x of graph.constantTensor(tp.value)!.toFloat64()) {
          if (x < min) min = x;
          if (x > max) max = x;
        }
        range = { min, max };
      } else {
        const r = ranges.get(tp.value.name);
        if (!r) throw new InputError(`no calibration statistics for tensor '${tp.value.name}'`);
        range = r;
      }
      let reluLike = false;
      if (tp.clip) {
        range = { min: Math.max(range.min, tp.clip.min), max: Math.min(range.max, tp.clip.max) };
        reluLike = tp.clip.min >= 0;
      }
      result = { root: tp.value, p: activationParams(range.min, range.max, actType, symmetric, reluLike) };
    }
    done.set(value, result);
    return result;
  };
  return resolve;
}

/** Apply a plan made on `model` to `model` itself. */
export function applyQdq(model: Model, plan: QdqPlan, options: ApplyOptions): QdqReport {
  const graph = model.graph;
  const actType: QuantType = options.activationType === 'int8' ? DataType.INT8 : DataType.UINT8;
  const symmetric = options.activationSymmetric ?? actType === DataType.INT8;
  const report: QdqReport = {
    activationType: actType === DataType.INT8 ? 'int8' : 'uint8',
    activationSymmetric: symmetric,
    perChannel: plan.perChannel,
    quantized: [],
    byOpType: {},
    skipped: plan.skipped,
    activationTensors: 0,
    weights: 0,
    biases: 0,
    biasSaturated: 0,
    biasScaleAdjustments: [],
    qdqNodesAdded: 0,
    paddedConvs: [],
    layoutAnchors: [...plan.anchors].map(([v, a]) => ({ tensor: v.name, channels: a.channels, enables: a.enables.map((n) => n.name) })),
    floatCompute: [],
  };
  const nodeName = uniqueNodeNamer(graph.allNodes());
  const init = (base: string, dtype: DataType, dims: number[], data: Float32Array | Uint8Array | Int8Array | Int32Array): Value =>
    graph.addInitializer(Tensor.fromData(graph.uniqueName(base), { dtype, dims, data }));
  const addNode = (opType: string, inputs: Value[], outputName: string, attributes: Record<string, number> = {}): Value => {
    const n = graph.addNode({ opType, inputs, outputs: [graph.uniqueName(outputName)], attributes, name: nodeName(`${outputName}_${opType}`) });
    report.qdqNodesAdded++;
    return n.outputs[0]!;
  };

  // Activation parameters (passthrough chains resolved), one scale/zero-point pair per root tensor.
  const paramsOf = activationParamResolver(graph, plan, options.ranges, actType, symmetric);
  const initializersOf = new Map<Value, { scale: Value; zeroPoint: Value }>();
  const resolve = (tp: TensorPlan): { p: QuantParams; scale: Value; zeroPoint: Value } => {
    const { root, p } = paramsOf(tp.value);
    let made = initializersOf.get(root);
    if (!made) {
      const zpData = actType === DataType.UINT8 ? Uint8Array.of(p.zeroPoint) : Int8Array.of(p.zeroPoint);
      made = {
        scale: init(`${root.name}_scale`, DataType.FLOAT, [], Float32Array.of(p.scale)),
        zeroPoint: init(`${root.name}_zero_point`, actType, [], zpData),
      };
      initializersOf.set(root, made);
    }
    return { p, ...made };
  };

  // A float -> int8 boundary behind an op onnxruntime would hoist the Q through: a per-axis Q
  // (first static dimension > 1 from axis 1 on; needs opset 13).
  const opset = model.opsetVersion('') ?? 0;
  const hoistBlockingAxis = (tp: TensorPlan): { axis: number; size: number } | undefined => {
    const producer = tp.value.producer;
    if (tp.producedByQuantized || tp.source !== 'calibrated' || opset < 13 || !producer || !Q_HOISTING_OPS.has(producer.opType)) return undefined;
    let reachesMaxPool = false;
    for (let p: Node | null | undefined = producer; p && Q_HOISTING_OPS.has(p.opType) && !reachesMaxPool; p = p.inputs[0]?.producer) {
      reachesMaxPool = p.opType === 'MaxPool';
    }
    if (!reachesMaxPool) return undefined;
    const shape = isTensorType(tp.value.type) ? tp.value.type.shape : undefined;
    if (!shape) return undefined;
    for (let i = 1; i < shape.length; i++) {
      const d = shape[i];
      if (typeof d === 'number' && d > 1) return { axis: i, size: d };
    }
    return undefined;
  };

  // DQ -> identity depthwise 1x1 Conv (int8 weights 1, scale 1) -> Q on the same scale: the same
  // 8-bit values, produced by an NHWC kernel in onnxruntime (see anchorChannels).
  const layoutAnchor = (quantized: Value, v: Value, channels: number, scale: Value, zeroPoint: Value): Value => {
    const floatType = isTensorType(v.type) ? { ...v.type, shape: v.type.shape?.slice() } : undefined;
    const input = addNode('DequantizeLinear', [quantized, scale, zeroPoint], `${v.name}_anchor_input`);
    input.type = floatType;
    const ones = init(`${v.name}_anchor_weight`, DataType.INT8, [channels, 1, 1, 1], new Int8Array(channels).fill(1));
    const weight = addNode(
      'DequantizeLinear',
      [
        ones,
        init(`${v.name}_anchor_weight_scale`, DataType.FLOAT, [], Float32Array.of(1)),
        init(`${v.name}_anchor_weight_zero_point`, DataType.INT8, [], Int8Array.of(0)),
      ],
      `${v.name}_anchor_weight_dequantized`,
    );
    const conv = graph.addNode({
      opType: 'Conv',
      inputs: [input, weight],
      outputs: [graph.uniqueName(`${v.name}_anchored`)],
      attributes: { group: channels, kernel_shape: [1, 1] },
      name: nodeName(`${v.name}_layout_anchor`),
    });
    conv.outputs[0]!.type = floatType;
    const anchored = addNode('QuantizeLinear', [conv.outputs[0]!, scale, zeroPoint], `${v.name}_anchored`);
    anchored.type = quantized.type;
    return anchored;
  };

  // Original activation input 0 of each node, before rewiring (bias scale needs its params).
  const input0 = new Map(plan.nodes.map((n) => [n.node, n.node.inputs[0] ?? null]));

  for (const tp of plan.tensors.values()) {
    const { p, scale, zeroPoint } = resolve(tp);
    const v = tp.value;
    report.activationTensors++;
    let quantized: Value;
    if (tp.source === 'constant' && !tp.producedByQuantized) {
      const t = graph.constantTensor(v)!;
      quantized = init(`${v.name}_quantized`, actType, [...t.dims], quantizeValues(t.toFloat64(), p));
    } else {
      const axis = hoistBlockingAxis(tp);
      if (axis) {
        const n = axis.size;
        const zp = actType === DataType.UINT8 ? new Uint8Array(n).fill(p.zeroPoint) : new Int8Array(n).fill(p.zeroPoint);
        const s = init(`${v.name}_boundary_scale`, DataType.FLOAT, [n], new Float32Array(n).fill(p.scale));
        const z = init(`${v.name}_boundary_zero_point`, actType, [n], zp);
        quantized = addNode('QuantizeLinear', [v, s, z], `${v.name}_quantized`, { axis: axis.axis });
      } else quantized = addNode('QuantizeLinear', [v, scale, zeroPoint], `${v.name}_quantized`);
      quantized.type = { kind: 'tensor', elemType: actType, shape: isTensorType(v.type) ? v.type.shape?.slice() : undefined };
      const anchor = plan.anchors.get(v);
      if (anchor) quantized = layoutAnchor(quantized, v, anchor.channels, scale, zeroPoint);
    }
    const dequantize = (name = `${v.name}_dequantized`): Value => {
      const d = addNode('DequantizeLinear', [quantized, scale, zeroPoint], name);
      d.type = v.type && isTensorType(v.type) ? { ...v.type, shape: v.type.shape?.slice() } : undefined;
      return d;
    };
    if (tp.producedByQuantized) {
      // Every reader (subgraph nodes included) gets its own DequantizeLinear: onnxruntime fuses
      // a group only when each DQ feeds that one node.
      const qNode = quantized.producer;
      for (const use of v.uses()) if (use.node !== qNode) use.node.setInput(use.index, dequantize());
      if (v.isGraphOutput()) {
        // Keep the model's output name on the dequantized value.
        const name = v.name;
        v.rename(graph.uniqueName(`${name}_prequant`));
        const d = dequantize(name);
        graph.outputs = graph.outputs.map((o) => (o === v ? d : o));
        graph.valueInfo = graph.valueInfo.filter((x) => x !== v);
      }
    } else {
      for (const r of tp.readers) r.node.setInput(r.index, dequantize());
    }
  }

  // Biases that would not fit int32 at input scale x weight scale: the weight scale of that output
  // channel grows until they do (floors by weight, the largest any reader's bias needs).
  const weightFloors = new Map<string, Float64Array>();
  const biasValues = (node: Node, v: Value): Float64Array => {
    const values = graph.constantTensor(v)!.toFloat64();
    const beta = node.opType === 'Gemm' ? node.getFloat('beta', 1) : 1;
    return beta !== 1 ? values.map((b) => b * beta) : values;
  };
  for (const np of options.biasOverflow === 'clamp' ? [] : plan.nodes) {
    const wi = np.roles.findIndex((r) => r.role === 'weight');
    const bi = np.roles.findIndex((r) => r.role === 'bias');
    const role = np.roles[wi];
    const w = np.node.inputs[wi];
    const b = np.node.inputs[bi];
    const x = input0.get(np.node);
    const xPlan = x ? plan.tensors.get(x) : undefined;
    if (wi < 0 || bi < 0 || !w || !b || !xPlan || role?.role !== 'weight') continue;
    const axis = plan.perChannel ? role.axis : null;
    const t = graph.constantTensor(w)!;
    const channels = axis === null ? 1 : t.dims[axis]!;
    const floor = biasWeightScaleFloor(biasValues(np.node, b), resolve(xPlan).p.scale, channels);
    if (!floor.some((f) => f > 0)) continue;
    // Compare with the scales the weight would get on its own.
    const plain = quantizeWeight(t.toFloat64(), t.dims, axis).scales;
    let grown = 0;
    let maxFactor = 1;
    floor.forEach((f, c) => {
      if (f > plain[c]!) {
        grown++;
        maxFactor = Math.max(maxFactor, f / plain[c]!);
      }
    });
    if (grown === 0) continue;
    const key = `${w.name}|${axis}`;
    const prev = weightFloors.get(key);
    weightFloors.set(key, prev ? prev.map((p, c) => Math.max(p, floor[c]!)) : floor);
    report.biasScaleAdjustments.push({ node: np.node.name, channels: grown, maxFactor });
  }

  // Weights and biases.
  const weightCache = new Map<string, { q: Value; scale: Value; zeroPoint: Value; scales: Float32Array; axis: number | null }>();
  for (const np of plan.nodes) {
    const { node } = np;
    let weightScales: Float32Array | undefined;
    np.roles.forEach((role, i) => {
      const v = node.inputs[i];
      if (!v || role.role !== 'weight') return;
      const axis = plan.perChannel ? role.axis : null;
      const key = `${v.name}|${axis}`;
      let w = weightCache.get(key);
      if (!w) {
        const t = graph.constantTensor(v)!;
        const qw = quantizeWeight(t.toFloat64(), t.dims, axis, weightFloors.get(key));
        const shape = axis === null ? [] : [qw.scales.length];
        w = {
          q: init(`${v.name}_quantized`, DataType.INT8, [...t.dims], qw.data),
          scale: init(`${v.name}_scale`, DataType.FLOAT, shape, qw.scales),
          zeroPoint: init(`${v.name}_zero_point`, DataType.INT8, shape, new Int8Array(qw.scales.length)),
          scales: qw.scales,
          axis,
        };
        weightCache.set(key, w);
        report.weights++;
      }
      const d = addNode('DequantizeLinear', [w.q, w.scale, w.zeroPoint], `${v.name}_dequantized`, axis === null ? {} : { axis });
      node.setInput(i, d);
      weightScales = w.scales;
    });
    np.roles.forEach((role, i) => {
      const v = node.inputs[i];
      if (!v || role.role !== 'bias') return;
      const x = input0.get(node);
      const xPlan = x ? plan.tensors.get(x) : undefined;
      if (!xPlan || !weightScales) return;
      const inputScale = resolve(xPlan).p.scale;
      const t = graph.constantTensor(v)!;
      // QGemm needs beta = 1 with an int32 bias: fold beta into the bias.
      const values = biasValues(node, v);
      if (node.opType === 'Gemm') node.setAttr('beta', 1.0, 1);
      const qb = quantizeBias(values, inputScale, weightScales);
      report.biasSaturated += qb.saturated;
      const perChannel = weightScales.length > 1;
      const shape = perChannel ? [qb.scales.length] : [];
      const scales = perChannel ? qb.scales : Float32Array.of(qb.scales[0] ?? 1);
      const q = init(`${v.name}_quantized`, DataType.INT32, [...t.dims], qb.data);
      const s = init(`${v.name}_scale`, DataType.FLOAT, shape, scales);
      const z = init(`${v.name}_zero_point`, DataType.INT32, shape, new Int32Array(scales.length));
      node.setInput(i, addNode('DequantizeLinear', [q, s, z], `${v.name}_dequantized`, perChannel ? { axis: 0 } : {}));
      report.biases++;
    });
    report.quantized.push({
      node: node.name,
      opType: node.opType,
      kernel: np.handler.kernel,
      outputQuantized: !!np.output,
      absorbed: np.absorbed?.name,
    });
    report.byOpType[node.opType] = (report.byOpType[node.opType] ?? 0) + 1;
    if (np.handler.floatCompute) report.floatCompute.push({ node: node.name, opType: node.opType, reason: np.handler.floatCompute });
  }

  if (options.padChannels !== false) {
    const boundary = new Set([...plan.tensors.values()].filter((tp) => !tp.producedByQuantized && tp.source === 'calibrated').map((tp) => tp.value));
    report.paddedConvs = padConvInputChannels(model, boundary);
  }
  // Float weights (and unpadded int8 ones) nothing reads any more (only the main graph was edited).
  removeUnusedInitializers(graph, { nested: false });
  graph.topologicalSort();
  return report;
}

/** Fewest 8-bit levels an input of a Concat may keep on the Concat's output scale. */
export const MIN_CONCAT_INPUT_LEVELS = 16;

/**
 * Quantized Concats whose inputs span very different ranges, with the reason: QLinearConcat puts
 * every input on the output's one scale, so an input with a range far below the others keeps only
 * a few of the 256 levels. The classic case is a detector's output, Concat(boxes in pixels,
 * class probabilities in [0, 1]): on a YOLO-style head the probabilities kept 2 distinct values.
 * Needs the calibrated ranges; a Concat kept float still reads int8 producers (one DequantizeLinear
 * per input, each on its own scale).
 */
export function concatsWithMismatchedRanges(plan: QdqPlan, ranges: ReadonlyMap<string, { min: number; max: number }>): Record<string, string> {
  const out: Record<string, string> = Object.create(null); // keyed by node names from the model
  const width = (r: { min: number; max: number }): number => Math.max(r.max, 0) - Math.min(r.min, 0);
  // The range a tensor is quantized over: its own, or that of the tensor it inherits parameters from.
  const rangeOf = (v: Value): { min: number; max: number } | undefined => {
    let tp = plan.tensors.get(v);
    for (let hops = 0; tp?.source === 'inherited' && tp.inheritFrom && hops < 64; hops++) tp = plan.tensors.get(tp.inheritFrom);
    if (!tp) return ranges.get(v.name);
    if (isSoftmaxOutput(tp.value)) return { min: 0, max: 1 };
    return ranges.get(tp.value.name);
  };
  for (const { node } of plan.nodes) {
    if (node.opType !== 'Concat') continue;
    const total = rangeOf(node.outputs[0]!);
    if (!total || width(total) === 0) continue;
    let worst: { name: string; levels: number; width: number } | undefined;
    for (const v of node.inputs) {
      const r = v ? rangeOf(v) : undefined;
      if (!v || !r) continue;
      const levels = (255 * width(r)) / width(total);
      if (!worst || levels < worst.levels) worst = { name: v.name, levels, width: width(r) };
    }
    if (worst && worst.levels < MIN_CONCAT_INPUT_LEVELS) {
      const ratio = worst.width > 0 ? `${(width(total) / worst.width).toFixed(0)}x` : 'far';
      out[node.name] =
        `input '${worst.name}' spans ${ratio} less than the whole Concat: on one 8-bit scale it would keep ${Math.max(1, Math.round(worst.levels))} of 256 levels (e.g. class scores beside box coordinates)`;
    }
  }
  return out;
}

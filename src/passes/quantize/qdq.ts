/**
 * INT8 static quantization in QDQ form: QuantizeLinear/DequantizeLinear pairs around the
 * operators of the registry, placed so onnxruntime fuses each group into an integer kernel
 * (see registry.ts). Weights int8 symmetric (per channel by default), biases int32 with scale =
 * input scale x weight scale, activations uint8 asymmetric (or int8 symmetric) from calibrated
 * ranges. Plan, then apply: `planQdq` decides every node and tensor (and so which tensors need
 * statistics: select nodes, drop the unprofitable ones, place outputs, plan tensors), `applyQdq`
 * edits a clone once (activations, bias scale floors, weights and biases, channel padding). Every
 * graph is planned on its own (the main graph, then If/Loop/Scan bodies unless `subgraphs` is
 * false), its Q/DQ nodes and quantized initializers written into that graph under names no graph of
 * the model uses; a body node reading an outer-scope activation directly stays float (quantize
 * localizes such reads first: localizeOuterActivations), and a float body node reading a quantized
 * outer value reads it through a DequantizeLinear. With channel means (ApplyOptions.channelMeans) the
 * biases of Conv/Gemm absorb the mean shift of weight rounding (./bias-correction.ts). Imports the
 * IR, ../preprocess/constants (removeUnusedInitializers), ./registry, ./quant-math, ./channel-pad,
 * ./bias-correction, ./calibrate (types).
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
import { biasCorrectionInput, matMulBiasAdd, outputShift } from './bias-correction.js';

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
  /**
   * Quantize inside If/Loop/Scan bodies too (default true): their tensors need statistics like
   * any other (app/quantize-int8 captures them from the branches that ran).
   */
  subgraphs?: boolean;
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

/** Elementwise ops quantized only when every non-constant input is already int8 (see elementwiseLeavesFloat). */
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
  /** The graph whose nodes read or make it: its Q/DQ nodes and initializers go there. */
  graph: Graph;
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
  /** Bias correction (ApplyOptions.channelMeans): the nodes whose bias absorbed their weights' mean output shift. */
  biasCorrection?: BiasCorrection[];
}

export interface BiasCorrection {
  node: string;
  /** Largest |shift| subtracted from one output channel's bias. */
  maxShift: number;
  /** The node had no bias and got one. */
  biasAdded: boolean;
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

/** The node filters of QdqOptions, resolved once. */
interface NodeFilter {
  excludedNodes: ReadonlySet<string>;
  excludedTypes: ReadonlySet<string>;
  onlyTypes?: ReadonlySet<string>;
  onlyNodes?: ReadonlySet<string>;
  /** Nodes kept float by a rule, with the reason for the report. */
  floatNodes: ReadonlyMap<string, string>;
  minReduction: number;
  /** Names of values defined in more than one graph (sibling sub-graphs may reuse names; see sharedValueNames). */
  sharedNames: ReadonlySet<string>;
}

/**
 * Names defined by values of more than one graph of the model. Statistics and ranges are keyed by
 * name, so a tensor with such a name cannot be calibrated on its own (simplify makes every name
 * unique first: passes/simplify uniqueValueNames).
 */
function sharedValueNames(model: Model): Set<string> {
  const seen = new Set<string>();
  const shared = new Set<string>();
  for (const g of model.graph.allGraphs()) {
    for (const v of g.values()) {
      if (v.name !== '' && seen.has(v.name)) shared.add(v.name);
      seen.add(v.name);
    }
  }
  return shared;
}

function nodeFilter(options: QdqOptions, model: Model): NodeFilter {
  return {
    sharedNames: model.graph.allGraphs().length > 1 ? sharedValueNames(model) : new Set(),
    excludedNodes: new Set(options.excludeNodes ?? []),
    excludedTypes: new Set(options.excludeOpTypes ?? []),
    onlyTypes: options.opTypes ? new Set(options.opTypes) : undefined,
    onlyNodes: options.onlyNodes ? new Set(options.onlyNodes) : undefined,
    floatNodes: new Map(Object.entries(options.floatNodes ?? {})),
    minReduction: options.minConvReduction ?? MIN_CONV_REDUCTION,
  };
}

/** Excluded by the user (by name or op type) or kept float by a rule. */
function isExcluded(filter: NodeFilter, n: Node): boolean {
  return filter.excludedNodes.has(n.name) || filter.floatNodes.has(n.name) || filter.excludedTypes.has(n.opType);
}

/** Whether the options let `n` be quantized at all. */
function isSelected(filter: NodeFilter, n: Node): boolean {
  return !isExcluded(filter, n) && (!filter.onlyTypes || filter.onlyTypes.has(n.opType)) && (!filter.onlyNodes || filter.onlyNodes.has(n.name));
}

/**
 * Grouped convs with few channels per group stay float (onnxruntime's int8 grouped kernel is
 * slower), like excluded nodes: between a DequantizeLinear and a QuantizeLinear onnxruntime would
 * quantize the float weights itself and run the slow kernel anyway. Returns them with the reason.
 */
function narrowGroupedConvs(graph: Graph, filter: NodeFilter): Map<Node, string> {
  const narrowGroups = new Map<Node, string>();
  for (const node of graph.nodes) {
    if (node.opType !== 'Conv' || !isDefaultDomain(node) || filter.minReduction <= 0 || !isSelected(filter, node)) continue;
    const perGroup = groupedConvChannels(node, graph);
    if (perGroup !== undefined && perGroup < MIN_GROUP_CHANNELS) {
      narrowGroups.set(
        node,
        `grouped conv with ${perGroup} input channels per group (< ${MIN_GROUP_CHANNELS}): onnxruntime's int8 grouped kernel is slower than its float one, so it and the ops reading it stay float`,
      );
    }
  }
  return narrowGroups;
}

/**
 * Outputs of explicitly excluded nodes (and narrow grouped convs) stay float, and so do the nodes
 * reading them: a Q right after an excluded node would let onnxruntime fuse it into an integer
 * kernel anyway. Returns those outputs (past a Relu/Clip) with the node they come from.
 */
function floatOutputs(graph: Graph, filter: NodeFilter, narrowGroups: ReadonlyMap<Node, string>): Map<Value, Node> {
  const fp32Outputs = new Map<Value, Node>();
  for (const node of graph.nodes) {
    if (!isDefaultDomain(node) || !QDQ_HANDLERS.has(node.opType)) continue;
    if (!isExcluded(filter, node) && !narrowGroups.has(node)) continue;
    for (const out of node.outputs) {
      if (out.name === '') continue;
      fp32Outputs.set(out, node);
      const next = out.consumers.length === 1 ? out.consumers[0]! : undefined;
      if (next && ABSORBABLE_ACTIVATIONS.has(next.opType) && next.graph === graph) fp32Outputs.set(next.outputs[0]!, node);
    }
  }
  return fp32Outputs;
}

/** The nodes chosen so far (step 1 of planQdq), with the ones left float and why. */
interface NodeSelection {
  nodes: NodePlan[];
  quantized: Set<Node>;
  anchors: Map<Value, { channels: number; enables: Node[] }>;
  skipped: SkippedNode[];
}

/** Whether `v` is the output of a quantized node (looking through a Relu/Clip it absorbs). */
function producesQuantized(v: Value | null | undefined, quantizedNodes: ReadonlySet<Node>): boolean {
  let p = v?.producer;
  if (p && ABSORBABLE_ACTIVATIONS.has(p.opType) && p.inputs[0]?.producer) {
    const q = p.inputs[0].producer;
    if (quantizedNodes.has(q) && QDQ_HANDLERS.get(q.opType)!.absorbsActivation) p = q;
  }
  return !!p && quantizedNodes.has(p);
}

/** A node left float: the reason for the report, none when it was never a candidate. */
interface LeftFloat {
  reason?: string;
}

/** Whether the options and the node's own shape leave it float, before its inputs are looked at. */
function ruleLeavesFloat(graph: Graph, filter: NodeFilter, narrowGroups: ReadonlyMap<Node, string>, node: Node, handler: OpHandler): LeftFloat | undefined {
  if (!isSelected(filter, node)) {
    const rule = filter.floatNodes.get(node.name);
    if (rule !== undefined) return { reason: rule };
    return filter.excludedNodes.has(node.name) || filter.excludedTypes.has(node.opType) ? { reason: 'excluded' } : {};
  }
  const problem = handler.check?.(node, graph);
  if (problem) return { reason: problem };
  const { minReduction } = filter;
  const reduction = node.opType === 'Conv' ? convReduction(node, graph) : undefined;
  if (reduction !== undefined && reduction < minReduction) {
    return { reason: `reduction size ${reduction} (Cin x kernel) < ${minReduction}: QLinearConv would be slower than float Conv` };
  }
  const stemOutputs = node.opType === 'Conv' && minReduction > 0 ? narrowStemChannels(node, graph) : undefined;
  if (stemOutputs !== undefined) {
    return {
      reason: `image stem with ${stemOutputs} output channels (< ${MIN_STEM_OUTPUT_CHANNELS}): its int8 form plus quantizing the input would be slower than the float conv`,
    };
  }
  const slowGroups = narrowGroups.get(node);
  return slowGroups !== undefined ? { reason: slowGroups } : undefined;
}

/** Whether the node's inputs leave it float: not float32, read from an FP32 node, or a MatMul's bias. */
function inputsLeaveFloat(graph: Graph, filter: NodeFilter, fp32Outputs: ReadonlyMap<Value, Node>, node: Node, roles: InputRole[]): LeftFloat | undefined {
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
    return integerOnly ? {} : { reason: `input '${notFloat.name}' is not float32` };
  }
  const outer = node.inputs.find((v, i) => v && roles[i]?.role === 'activation' && v.graph !== graph && !graph.constantTensor(v));
  if (outer) return { reason: `reads outer-scope value '${outer.name}' directly (a body's 8-bit tensors are its own)` };
  const fromFp32 = node.inputs.find((v, i) => v && roles[i]?.role === 'activation' && fp32Outputs.has(v));
  if (fromFp32) return { reason: `reads the output of FP32 node '${fp32Outputs.get(fromFp32)!.name}'` };
  if (node.opType === 'Add' && !filter.onlyNodes && isBiasAfterMatMul(node, graph)) {
    return {
      reason:
        'bias Add after a MatMul: left float, onnxruntime runs MatMul + bias as MatMulIntegerToFloat (float output; more accurate than QLinearMatMul + QLinearAdd with an int8 bias, as fast)',
    };
  }
  return undefined;
}

/**
 * An int8 Add/Mul pays off only between int8 tensors: a float input would need its own
 * QuantizeLinear (as costly as the float op), and onnxruntime keeps such a QLinearAdd in NCHW (its
 * transpose optimizer sees no gain in moving the other input), which drags the 8-bit ops after it
 * (MaxPool) onto slow NCHW kernels. Returns why `node` stays float, or undefined when every input
 * is int8 or one float input can go through a layout anchor (recorded in `selection.anchors`).
 */
function elementwiseLeavesFloat(graph: Graph, options: QdqOptions, selection: NodeSelection, node: Node, roles: InputRole[]): string | undefined {
  const activations = node.inputs.filter((v, i): v is Value => !!v && roles[i]?.role === 'activation' && !graph.constantTensor(v));
  const floatInputs = activations.filter((v) => !producesQuantized(v, selection.quantized));
  if (floatInputs.length === 0) return undefined;
  // uint8 activations only: with int8 ones this build fuses no QLinearConv (measured 0.3x), so
  // the anchor would be one more float conv.
  const anchorsOn = options.layoutAnchors !== false && options.activationType !== 'int8';
  const channels =
    !anchorsOn || floatInputs.length !== 1
      ? undefined
      : anchorChannels(floatInputs[0]!, activations, selection.quantized, (v) => producesQuantized(v, selection.quantized));
  if (channels === undefined) return `reads float tensor '${floatInputs[0]!.name}': an int8 ${node.opType} only pays off between int8 tensors`;
  const anchor = selection.anchors.get(floatInputs[0]!) ?? { channels, enables: [] };
  anchor.enables.push(node);
  selection.anchors.set(floatInputs[0]!, anchor);
  return undefined;
}

/** Step 1 of planQdq: which nodes are quantized (passthrough ops only behind a quantized producer). */
function selectNodes(graph: Graph, options: QdqOptions, filter: NodeFilter): NodeSelection {
  const narrowGroups = narrowGroupedConvs(graph, filter);
  const fp32Outputs = floatOutputs(graph, filter, narrowGroups);
  const selection: NodeSelection = { nodes: [], quantized: new Set(), anchors: new Map(), skipped: [] };
  for (const node of graph.nodes) {
    const handler = isDefaultDomain(node) ? QDQ_HANDLERS.get(node.opType) : undefined;
    if (!handler) continue;
    const leaveFloat = (reason: string | undefined): void => {
      if (reason !== undefined) selection.skipped.push({ node: node.name, opType: node.opType, reason });
    };
    const ruled = ruleLeavesFloat(graph, filter, narrowGroups, node, handler);
    if (ruled) {
      leaveFloat(ruled.reason);
      continue;
    }
    const roles = handler.inputs(node, graph);
    const shared = [...node.inputs, ...node.outputs].find((v) => v && filter.sharedNames.has(v.name) && !graph.constantTensor(v));
    if (shared) {
      leaveFloat(`tensor '${shared.name}' has the name of a value of another graph: its statistics cannot be told apart (simplify the model first)`);
      continue;
    }
    const byInputs = inputsLeaveFloat(graph, filter, fp32Outputs, node, roles);
    if (byInputs) {
      leaveFloat(byInputs.reason);
      continue;
    }
    // Sensitivity analysis (onlyNodes) still tries an int8 Add/Mul between float tensors.
    const elementwise = ELEMENTWISE_INT8.has(node.opType) && !filter.onlyNodes ? elementwiseLeavesFloat(graph, options, selection, node, roles) : undefined;
    if (elementwise !== undefined) {
      leaveFloat(elementwise);
      continue;
    }
    if (handler.output === 'passthrough' && !producesQuantized(node.inputs[0], selection.quantized)) {
      leaveFloat('input is not quantized (data-movement ops only run in 8-bit behind a quantized op)');
      continue;
    }
    selection.quantized.add(node);
    selection.nodes.push({ node, handler, roles });
  }
  return selection;
}

/** Drop `nodes[i]` from the selection, with the reason. */
function unselect(selection: NodeSelection, i: number, reason: string): void {
  const { node } = selection.nodes[i]!;
  selection.nodes.splice(i, 1);
  selection.quantized.delete(node);
  selection.skipped.push({ node: node.name, opType: node.opType, reason });
}

/**
 * Step 1 continued: drop the nodes that would cost more in 8-bit than they save, repeatedly for
 * chains (e.g. the Flatten -> Softmax -> Reshape an opset upgrade writes after a classifier).
 */
function dropUnprofitableNodes(selection: NodeSelection, filter: NodeFilter): void {
  const { nodes, quantized } = selection;
  for (let changed = true; changed; ) {
    changed = false;
    // A data-movement op whose readers all stay float gains nothing in 8-bit (its output would
    // only be dequantized again, and it would force a Q onto the op before it).
    for (let i = nodes.length - 1; i >= 0; i--) {
      const { node, handler } = nodes[i]!;
      if (handler.output !== 'passthrough') continue;
      const feedsInt8 = node.outputs.some((o) => o.name !== '' && o.uses().some((u) => quantized.has(u.node)));
      if (feedsInt8) continue;
      unselect(selection, i, 'its readers stay float: in 8-bit it would only add a DequantizeLinear');
      changed = true;
    }
    // A light op (not a Conv or matrix product) between float ops: a QuantizeLinear before it and a
    // DequantizeLinear after it cost more than its integer kernel saves. The SiLU after a float
    // stem (x * Sigmoid(x)): the Mul reads the float x and stays float, and a QLinearSigmoid
    // between them made five passes over the stem's output where float makes one (onnxruntime
    // fuses x * Sigmoid(x) into QuickGelu). Not for sensitivity analysis, which quantizes one node
    // at a time on purpose.
    for (let i = nodes.length - 1; i >= 0 && !filter.onlyNodes; i--) {
      const { node, roles, handler } = nodes[i]!;
      if (HEAVY_OPS.has(node.opType) || handler.output === 'passthrough') continue;
      const readsInt8 = node.inputs.some((v, j) => v && roles[j]?.role === 'activation' && producesQuantized(v, quantized));
      if (readsInt8 || feedsQuantized(node, quantized)) continue;
      unselect(selection, i, 'between float ops: in 8-bit it would only add a QuantizeLinear before it and a DequantizeLinear after it');
      changed = true;
    }
  }
}

/** Step 2 of planQdq: where each node's Q goes (after an absorbed Relu/Clip) and whether there is one. */
function placeOutputs(graph: Graph, filter: NodeFilter, selection: NodeSelection): void {
  const { nodes, quantized } = selection;
  const readsAsActivation = (reader: Node, v: Value): boolean => {
    if (!quantized.has(reader)) return false;
    const plan = nodes.find((p) => p.node === reader)!;
    return reader.inputs.some((x, i) => x === v && plan.roles[i]?.role === 'activation');
  };
  for (const plan of nodes) {
    const { node, handler } = plan;
    let out = node.outputs[0];
    if (!out || out.name === '') continue;
    if (handler.absorbsActivation && out.consumers.length === 1 && out.uses().length === 1 && !out.isGraphOutput()) {
      const next = out.consumers[0]!;
      if (next.graph === graph && isDefaultDomain(next) && ABSORBABLE_ACTIVATIONS.has(next.opType) && isSelected(filter, next) && next.inputs[0] === out) {
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
}

/** Step 3 of planQdq: the tensor plans, outputs first, then activation inputs (merged by value). */
function planTensors(graph: Graph, nodes: readonly NodePlan[]): Map<Value, TensorPlan> {
  const tensors = new Map<Value, TensorPlan>();
  const entry = (v: Value): TensorPlan => {
    let tp = tensors.get(v);
    if (!tp) {
      tp = { value: v, graph, source: graph.constantTensor(v) ? 'constant' : 'calibrated', producedByQuantized: false, readers: [] };
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
  return tensors;
}

/** Decide what to quantize. Does not modify the model. */
export function planQdq(model: Model, options: QdqOptions = {}): QdqPlan {
  const opset = model.opsetVersion('') ?? 0;
  if (opset < 10) throw new UsageError(`QDQ quantization needs opset 10 or later; the model declares opset ${opset}`);
  const perChannel = (options.perChannel ?? true) && opset >= 13;
  const filter = nodeFilter(options, model);
  const plan: QdqPlan = { nodes: [], anchors: new Map(), tensors: new Map(), skipped: [], statistics: [], perChannel };
  // Each graph on its own: a body's tensors and Q/DQ nodes are its own (outer reads stay float).
  const graphs = options.subgraphs === false ? [model.graph] : model.graph.allGraphs();
  for (const graph of graphs) {
    const selection = selectNodes(graph, options, filter);
    dropUnprofitableNodes(selection, filter);
    placeOutputs(graph, filter, selection);
    const tensors = planTensors(graph, selection.nodes);
    plan.nodes.push(...selection.nodes);
    for (const [v, a] of selection.anchors) plan.anchors.set(v, a);
    for (const [v, t] of tensors) plan.tensors.set(v, t);
    plan.skipped.push(...selection.skipped);
  }
  plan.statistics = [...plan.tensors.values()].filter((t) => t.source === 'calibrated').map((t) => t.value.name);
  return plan;
}

/**
 * Every activation input of a quantizable node inside a body that reads a float value of an
 * enclosing graph gets an Identity in the body, so the body can quantize its own copy (the plan
 * keeps a body's tensors to itself). Edits `model`; returns the Identities added.
 */
export function localizeOuterActivations(model: Model): number {
  let added = 0;
  const nodeName = uniqueNodeNamer(model.graph.allNodes());
  for (const graph of model.graph.allGraphs()) {
    if (graph === model.graph) continue;
    const local = new Map<Value, Value>();
    for (const node of [...graph.nodes]) {
      const handler = isDefaultDomain(node) ? QDQ_HANDLERS.get(node.opType) : undefined;
      if (!handler) continue;
      const roles = handler.inputs(node, graph);
      node.inputs.forEach((v, i) => {
        if (!v || v.graph === graph || roles[i]?.role !== 'activation' || graph.constantTensor(v)) return;
        let copy = local.get(v);
        if (!copy) {
          const identity = graph.insertBefore(node, {
            opType: 'Identity',
            name: nodeName(`${v.name}_local`),
            inputs: [v],
            outputs: [graph.uniqueName(`${v.name}_local`)],
          });
          copy = identity.outputs[0]!;
          if (v.type) copy.type = isTensorType(v.type) ? { ...v.type, shape: v.type.shape?.slice() } : v.type;
          local.set(v, copy);
          added++;
        }
        node.setInput(i, copy);
      });
    }
  }
  return added;
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
  /**
   * Bias correction (./bias-correction.ts): the mean of each channel of the activation inputs of
   * the quantized Conv/Gemm nodes, by tensor name (biasCorrectionRequests). Given, each such node's
   * bias absorbs the mean output shift of its int8 weights (a node without a bias gets one).
   */
  channelMeans?: ReadonlyMap<string, ArrayLike<number>>;
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

/** A fresh report for `plan`, before anything is written. */
function newQdqReport(plan: QdqPlan, actType: QuantType, symmetric: boolean): QdqReport {
  return {
    activationType: actType === DataType.INT8 ? 'int8' : 'uint8',
    activationSymmetric: symmetric,
    perChannel: plan.perChannel,
    quantized: [],
    byOpType: Object.create(null) as Record<string, number>, // keyed by op types from the file
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
}

type InitializerData = Float32Array | Uint8Array | Int8Array | Int32Array;

/** Activation parameters of a planned tensor, with the scale and zero-point initializers of its root tensor. */
interface ActivationQuant {
  p: QuantParams;
  scale: Value;
  zeroPoint: Value;
}

/** What applyQdq's steps write with: the graph being edited, the plan, the report they fill. */
interface QdqWriter {
  model: Model;
  graph: Graph;
  plan: QdqPlan;
  report: QdqReport;
  actType: QuantType;
  nodeName: (base: string) => string;
  /** A new initializer named after `base`. */
  init(base: string, dtype: DataType, dims: number[], data: InitializerData): Value;
  /** A new node with one output named after `outputName`, counted in report.qdqNodesAdded. */
  addNode(opType: string, inputs: Value[], outputName: string, attributes?: Record<string, number>): Value;
  /** One scale/zero-point pair per root tensor (passthrough chains resolved), made on first use. */
  activation(tp: TensorPlan): ActivationQuant;
  /** Original activation input 0 of each node, before rewiring (bias scale needs its params). */
  input0: ReadonlyMap<Node, Value | null>;
  channelMeans?: ReadonlyMap<string, ArrayLike<number>>;
}

function qdqWriter(
  model: Model,
  graph: Graph,
  plan: QdqPlan,
  options: ApplyOptions,
  report: QdqReport,
  types: { actType: QuantType; symmetric: boolean },
  nodeName: (base: string) => string,
): QdqWriter {
  const { actType, symmetric } = types;
  const init = (base: string, dtype: DataType, dims: number[], data: InitializerData): Value =>
    graph.addInitializer(Tensor.fromData(graph.uniqueName(base), { dtype, dims, data }));
  const addNode = (opType: string, inputs: Value[], outputName: string, attributes: Record<string, number> = {}): Value => {
    const n = graph.addNode({ opType, inputs, outputs: [graph.uniqueName(outputName)], attributes, name: nodeName(`${outputName}_${opType}`) });
    report.qdqNodesAdded++;
    return n.outputs[0]!;
  };
  const paramsOf = activationParamResolver(graph, plan, options.ranges, actType, symmetric);
  const initializersOf = new Map<Value, { scale: Value; zeroPoint: Value }>();
  const activation = (tp: TensorPlan): ActivationQuant => {
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
  const input0 = new Map(plan.nodes.map((n) => [n.node, n.node.inputs[0] ?? null]));
  return { model, graph, plan, report, actType, nodeName, init, addNode, activation, input0, channelMeans: options.channelMeans };
}

/**
 * A float -> int8 boundary behind an op onnxruntime would hoist the Q through up to a MaxPool: the
 * axis of its per-axis Q (first static dimension > 1 from axis 1 on; needs opset 13), else undefined.
 */
function hoistBlockingAxis(tp: TensorPlan, opset: number): { axis: number; size: number } | undefined {
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
}

/**
 * DQ -> identity depthwise 1x1 Conv (int8 weights 1, scale 1) -> Q on the same scale: the same
 * 8-bit values, produced by an NHWC kernel in onnxruntime (see anchorChannels).
 */
function addLayoutAnchor(w: QdqWriter, quantized: Value, v: Value, channels: number, q: ActivationQuant): Value {
  const { graph, init, addNode } = w;
  const floatType = isTensorType(v.type) ? { ...v.type, shape: v.type.shape?.slice() } : undefined;
  const input = addNode('DequantizeLinear', [quantized, q.scale, q.zeroPoint], `${v.name}_anchor_input`);
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
    name: w.nodeName(`${v.name}_layout_anchor`),
  });
  conv.outputs[0]!.type = floatType;
  const anchored = addNode('QuantizeLinear', [conv.outputs[0]!, q.scale, q.zeroPoint], `${v.name}_anchored`);
  anchored.type = quantized.type;
  return anchored;
}

/** The 8-bit form of a planned tensor: a quantized initializer for a constant, else a QuantizeLinear (maybe per axis, maybe anchored). */
function quantizeActivation(w: QdqWriter, tp: TensorPlan, q: ActivationQuant): Value {
  const { graph, actType, init, addNode } = w;
  const { p, scale, zeroPoint } = q;
  const v = tp.value;
  if (tp.source === 'constant' && !tp.producedByQuantized) {
    const t = graph.constantTensor(v)!;
    return init(`${v.name}_quantized`, actType, [...t.dims], quantizeValues(t.toFloat64(), p));
  }
  let quantized: Value;
  const axis = hoistBlockingAxis(tp, w.model.opsetVersion('') ?? 0);
  if (axis) {
    const n = axis.size;
    const zp = actType === DataType.UINT8 ? new Uint8Array(n).fill(p.zeroPoint) : new Int8Array(n).fill(p.zeroPoint);
    const s = init(`${v.name}_boundary_scale`, DataType.FLOAT, [n], new Float32Array(n).fill(p.scale));
    const z = init(`${v.name}_boundary_zero_point`, actType, [n], zp);
    quantized = addNode('QuantizeLinear', [v, s, z], `${v.name}_quantized`, { axis: axis.axis });
  } else quantized = addNode('QuantizeLinear', [v, scale, zeroPoint], `${v.name}_quantized`);
  quantized.type = { kind: 'tensor', elemType: actType, shape: isTensorType(v.type) ? v.type.shape?.slice() : undefined };
  const anchor = w.plan.anchors.get(v);
  return anchor ? addLayoutAnchor(w, quantized, v, anchor.channels, q) : quantized;
}

/** Rewire the readers of a planned tensor to DequantizeLinears of its 8-bit form. */
function dequantizeReaders(w: QdqWriter, tp: TensorPlan, quantized: Value, q: ActivationQuant): void {
  const { graph } = w;
  const v = tp.value;
  const dequantize = (name = `${v.name}_dequantized`): Value => {
    const d = w.addNode('DequantizeLinear', [quantized, q.scale, q.zeroPoint], name);
    d.type = v.type && isTensorType(v.type) ? { ...v.type, shape: v.type.shape?.slice() } : undefined;
    return d;
  };
  if (!tp.producedByQuantized) {
    for (const r of tp.readers) r.node.setInput(r.index, dequantize());
    return;
  }
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
}

/** Step 1 of applyQdq: a Q (and the DQs of its readers) for every planned activation tensor. */
function writeActivations(w: QdqWriter): void {
  for (const tp of w.plan.tensors.values()) {
    const q = w.activation(tp);
    w.report.activationTensors++;
    dequantizeReaders(w, tp, quantizeActivation(w, tp, q), q);
  }
}

/** A node's bias values, with Gemm's beta folded in. */
function biasValues(graph: Graph, node: Node, v: Value): Float64Array {
  const values = graph.constantTensor(v)!.toFloat64();
  const beta = node.opType === 'Gemm' ? node.getFloat('beta', 1) : 1;
  return beta !== 1 ? values.map((b) => b * beta) : values;
}

/**
 * Step 2 of applyQdq: biases that would not fit int32 at input scale x weight scale make the weight
 * scale of that output channel grow until they do. Returns the floors by weight (`name|axis`), the
 * largest any reader's bias needs, and lists the nodes in report.biasScaleAdjustments.
 */
function biasWeightScaleFloors(w: QdqWriter): Map<string, Float64Array> {
  const { graph, plan } = w;
  const weightFloors = new Map<string, Float64Array>();
  for (const np of plan.nodes) {
    const wi = np.roles.findIndex((r) => r.role === 'weight');
    const bi = np.roles.findIndex((r) => r.role === 'bias');
    const role = np.roles[wi];
    const weight = np.node.inputs[wi];
    const b = np.node.inputs[bi];
    const x = w.input0.get(np.node);
    const xPlan = x ? plan.tensors.get(x) : undefined;
    if (wi < 0 || bi < 0 || !weight || !b || !xPlan || role?.role !== 'weight') continue;
    const axis = plan.perChannel ? role.axis : null;
    const t = graph.constantTensor(weight)!;
    const channels = axis === null ? 1 : t.dims[axis]!;
    const floor = biasWeightScaleFloor(biasValues(graph, np.node, b), w.activation(xPlan).p.scale, channels);
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
    const key = `${weight.name}|${axis}`;
    const prev = weightFloors.get(key);
    weightFloors.set(key, prev ? prev.map((p, c) => Math.max(p, floor[c]!)) : floor);
    w.report.biasScaleAdjustments.push({ node: np.node.name, channels: grown, maxFactor });
  }
  return weightFloors;
}

/** A quantized weight's initializers, shared by every node that reads it on the same axis. */
interface QuantizedWeight {
  q: Value;
  scale: Value;
  zeroPoint: Value;
  /** The int8 values (for bias correction). */
  data: Int8Array;
  scales: Float32Array;
  axis: number | null;
  /** The float weight they replace. */
  float: Tensor;
}

/** Put a node's weights behind DequantizeLinears of int8 initializers; returns the quantized weight (its scales set the bias's). */
function writeWeights(
  w: QdqWriter,
  np: NodePlan,
  cache: Map<string, QuantizedWeight>,
  weightFloors: ReadonlyMap<string, Float64Array>,
): QuantizedWeight | undefined {
  const { node } = np;
  let written: QuantizedWeight | undefined;
  np.roles.forEach((role, i) => {
    const v = node.inputs[i];
    if (!v || role.role !== 'weight') return;
    const axis = w.plan.perChannel ? role.axis : null;
    const key = `${v.name}|${axis}`;
    let qw = cache.get(key);
    if (!qw) {
      const t = w.graph.constantTensor(v)!;
      const made = quantizeWeight(t.toFloat64(), t.dims, axis, weightFloors.get(key));
      const shape = axis === null ? [] : [made.scales.length];
      qw = {
        q: w.init(`${v.name}_quantized`, DataType.INT8, [...t.dims], made.data),
        scale: w.init(`${v.name}_scale`, DataType.FLOAT, shape, made.scales),
        zeroPoint: w.init(`${v.name}_zero_point`, DataType.INT8, shape, new Int8Array(made.scales.length)),
        data: made.data,
        scales: made.scales,
        axis,
        float: t,
      };
      cache.set(key, qw);
      w.report.weights++;
    }
    const d = w.addNode('DequantizeLinear', [qw.q, qw.scale, qw.zeroPoint], `${v.name}_dequantized`, axis === null ? {} : { axis });
    node.setInput(i, d);
    written = qw;
  });
  return written;
}

/**
 * The mean output shift of a node's int8 weight (bias correction), recorded in the report, or
 * undefined when it is not corrected: no means for its input, not a Conv/Gemm (or a MatMul with a
 * bias Add: `correctable`, found before the weights were rewired), or a Gemm whose C is not a
 * per-output bias.
 */
function biasShift(w: QdqWriter, np: NodePlan, weight: QuantizedWeight | undefined, correctable: boolean): Float64Array | undefined {
  const x = w.input0.get(np.node);
  const means = x && w.channelMeans?.get(x.name);
  if (!means || !weight || !correctable) return undefined;
  const hasBias = np.roles.some((r) => r.role === 'bias') || np.node.opType === 'MatMul';
  if (np.node.opType === 'Gemm' && !hasBias && np.node.inputs[2]) return undefined;
  const shift = outputShift(np.node, weight.float, weight, means);
  if (!shift) return undefined;
  let maxShift = 0;
  for (const s of shift) maxShift = Math.max(maxShift, Math.abs(s));
  (w.report.biasCorrection ??= []).push({ node: np.node.name, maxShift, biasAdded: !hasBias });
  return shift;
}

/** A MatMul's shift goes into the float bias Add after it (a new constant: the old one may be shared). */
function correctBiasAdd(w: QdqWriter, found: NonNullable<ReturnType<typeof matMulBiasAdd>>, shift: Float64Array): void {
  const values = found.bias.toFloat64().map((b, j) => b - shift[j]!);
  const old = found.add.inputs[found.index]!;
  found.add.setInput(found.index, w.init(`${old.name}_corrected`, DataType.FLOAT, [...found.bias.dims], Float32Array.from(values)));
}

/** Put a node's bias behind a DequantizeLinear of an int32 initializer on input scale x weight scale (less `shift`, when bias correction gives one). */
function writeBias(w: QdqWriter, np: NodePlan, weightScales: Float32Array | undefined, shift?: Float64Array): void {
  const { node } = np;
  const roles = [...np.roles];
  if (shift && !roles.some((r) => r.role === 'bias')) {
    // Bias correction on a node without a bias: a zero one, corrected below.
    node.setInput(2, w.init(`${node.name || node.opType}_bias`, DataType.FLOAT, [shift.length], new Float32Array(shift.length)));
    roles[2] = { role: 'bias' };
  }
  roles.forEach((role, i) => {
    const v = node.inputs[i];
    if (!v || role.role !== 'bias') return;
    const x = w.input0.get(node);
    const xPlan = x ? w.plan.tensors.get(x) : undefined;
    if (!xPlan || !weightScales) return;
    const inputScale = w.activation(xPlan).p.scale;
    const t = w.graph.constantTensor(v)!;
    // QGemm needs beta = 1 with an int32 bias: fold beta into the bias.
    const values = biasValues(w.graph, node, v);
    if (shift) for (let c = 0; c < values.length; c++) values[c] = values[c]! - shift[c]!;
    if (node.opType === 'Gemm') node.setAttr('beta', 1.0, 1);
    const qb = quantizeBias(values, inputScale, weightScales);
    w.report.biasSaturated += qb.saturated;
    const perChannel = weightScales.length > 1;
    const shape = perChannel ? [qb.scales.length] : [];
    const scales = perChannel ? qb.scales : Float32Array.of(qb.scales[0] ?? 1);
    const q = w.init(`${v.name}_quantized`, DataType.INT32, [...t.dims], qb.data);
    const s = w.init(`${v.name}_scale`, DataType.FLOAT, shape, scales);
    const z = w.init(`${v.name}_zero_point`, DataType.INT32, shape, new Int32Array(scales.length));
    node.setInput(i, w.addNode('DequantizeLinear', [q, s, z], `${v.name}_dequantized`, perChannel ? { axis: 0 } : {}));
    w.report.biases++;
  });
}

/** Step 3 of applyQdq: weights and biases of every quantized node, and the node in the report. */
function writeWeightsAndBiases(w: QdqWriter, weightFloors: ReadonlyMap<string, Float64Array>): void {
  const { report } = w;
  const cache = new Map<string, QuantizedWeight>();
  for (const np of w.plan.nodes) {
    const { node } = np;
    // Before the weights are rewired: what the correction reads off the float graph.
    const correctable = !!w.channelMeans && !!biasCorrectionInput(node);
    const biasAdd = correctable && node.opType === 'MatMul' ? matMulBiasAdd(node) : undefined;
    const weight = writeWeights(w, np, cache, weightFloors);
    const shift = biasShift(w, np, weight, correctable);
    if (shift && biasAdd) correctBiasAdd(w, biasAdd, shift);
    else writeBias(w, np, weight?.scales, node.opType === 'MatMul' ? undefined : shift);
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
}

/** Apply a plan made on `model` to `model` itself, graph by graph (names unique across all graphs). */
export function applyQdq(model: Model, plan: QdqPlan, options: ApplyOptions): QdqReport {
  const actType: QuantType = options.activationType === 'int8' ? DataType.INT8 : DataType.UINT8;
  const symmetric = options.activationSymmetric ?? actType === DataType.INT8;
  const report = newQdqReport(plan, actType, symmetric);
  const nodeName = uniqueNodeNamer(model.graph.allNodes());
  for (const graph of model.graph.allGraphs()) {
    const nodes = plan.nodes.filter((n) => n.node.graph === graph);
    const tensors = new Map([...plan.tensors].filter(([, tp]) => tp.graph === graph));
    if (nodes.length === 0 && tensors.size === 0) continue;
    const writer = qdqWriter(model, graph, { ...plan, nodes, tensors }, options, report, { actType, symmetric }, nodeName);
    writeActivations(writer);
    writeWeightsAndBiases(writer, options.biasOverflow === 'clamp' ? new Map() : biasWeightScaleFloors(writer));
  }
  if (options.padChannels !== false) {
    const boundary = new Set(
      [...plan.tensors.values()].filter((tp) => !tp.producedByQuantized && tp.source === 'calibrated' && tp.graph === model.graph).map((tp) => tp.value),
    );
    report.paddedConvs = padConvInputChannels(model, boundary);
  }
  // Float weights (and unpadded int8 ones) nothing reads any more, in every graph.
  removeUnusedInitializers(model.graph);
  for (const g of model.graph.allGraphs()) g.topologicalSort();
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

/**
 * FP16 conversion (`--mode fp16`): float32 weights and compute become float16, except for nodes
 * that must stay float32 (op/node block lists, activations that leave the float16 range in a
 * calibration run, custom domains, nodes holding subgraphs, values whose type is unknown). The
 * com.microsoft ops with float16 CPU kernels (FLOAT16_CUSTOM_OPS: MatMulNBits,
 * GatherBlockQuantized) convert too, so an int4 model becomes `q4f16`: float16 scales and
 * activations, its 4-bit codes and zero points untouched.
 * Casts go only where a float16 value meets a float32 reader (and at the model boundary when
 * keepIoTypes): one Cast per value and target type, never a Cast feeding a Cast. Constants
 * (initializers, Constant nodes, ConstantOfShape/EyeLike attributes) are converted with their
 * readers; finite values beyond ±65504 are clamped with a warning naming the tensor. Large weights
 * read only by custom-domain ops (no float16 kernel) are stored as float16 behind a Cast back to
 * float32 that onnxruntime folds at load.
 * Plan first (which nodes convert, what type every value gets), then edit once: constants, converted
 * nodes, Casts before readers, the model boundary, then tidy the Casts.
 * Works on a clone; the input model is never mutated. Every graph is converted on its own, the
 * main graph first: If/Loop/Scan bodies convert inside (their weights and compute float16), with
 * their inputs and outputs kept float32 so the node that holds them keeps its types; an outer
 * value a body reads is float32 (a Cast in the outer graph when it became float16 there) and is
 * cast to float16 inside the body for the nodes that want it.
 * Imports the IR (with ir/unique-names, ir/batch-transpose-matmul), errors and ./fp16-types.js.
 */
import { nullPrototype } from '../../util/null-prototype.js';
import { MODE } from './mode-names.js';
import type { SpeedCause } from './speed-causes.js';
import {
  DataType,
  FLOAT16_MAX,
  Tensor,
  float32ToFloat16,
  isFloatDtype,
  isTensorType,
  visitGraphs,
  type Graph,
  type Model,
  type Node,
  type Value,
} from '../../ir/index.js';
import { batchTransposeIntoMatMul } from '../../ir/batch-transpose-matmul.js';
import { uniqueNodeNamer } from '../../ir/unique-names.js';
import { UsageError } from '../../errors.js';
import { castAttribute, castTarget, inferElementTypes } from './fp16-types.js';

/** A tensor's observed value range (from a calibration run). */
export interface ActivationRange {
  min: number;
  max: number;
}

export interface Fp16Options {
  /** Keep float32 model inputs/outputs, with Casts at the boundary (default true). */
  keepIoTypes?: boolean;
  /** Op types kept in float32, in addition to DEFAULT_FP16_OP_BLOCK_LIST. */
  opBlockList?: string[];
  /** Use opBlockList instead of (not in addition to) the default block list. */
  replaceDefaultOpBlockList?: boolean;
  /** Node names kept in float32. */
  nodeBlockList?: string[];
  /** Observed ranges per tensor name (e.g. from calibration); nodes touching values beyond ±65504 stay float32. */
  activationRanges?: ReadonlyMap<string, ActivationRange> | Record<string, ActivationRange>;
  /** Non-fatal findings: clamped tensors. */
  onWarning?: (message: string) => void;
}

export interface Fp16Report {
  mode: typeof MODE.fp16;
  /** Bytes of initializers and Constant-node tensors before and after. */
  weightBytesBefore: number;
  weightBytesAfter: number;
  nodesConverted: number;
  convertedByOpType: Record<string, number>;
  /** Nodes with float32 tensors that stay float32, and why. */
  keptFloat32: { node: string; opType: string; reason: string }[];
  /** Constant tensors with finite values beyond the float16 range, clamped to ±65504. */
  clampedTensors: { name: string; count: number; maxAbs: number }[];
  /** Nonzero constant values smaller than the smallest float16 subnormal, which became 0. */
  flushedToZero: number;
  castsInserted: number;
  /**
   * Float32 weights read only by nodes kept float32 for want of a float16 kernel (custom-domain ops
   * such as onnxruntime's Attention on CPU), stored as float16 with a Cast back to float32 that
   * onnxruntime folds at load: the file shrinks, those nodes still compute in float32.
   */
  storedAsFloat16: string[];
  notes: string[];
  /** Traits that can cost speed (float16 on a CPU): printed only beside a measured speed. */
  speedCauses: SpeedCause[];
}

/** Fewest elements for a kept-float32 weight to be stored as float16 (below it a Cast is not worth it). */
export const MIN_HALF_STORED_ELEMENTS = 1024;

/**
 * Kept float32 by default: ops that lose accuracy in float16 (accumulating or index-producing) or
 * whose float16 form onnxruntime's CPU provider lacks or whose inputs must stay float32 (Resize
 * scales), and random/quantization ops whose float outputs are not tied to an input type.
 */
export const DEFAULT_FP16_OP_BLOCK_LIST: readonly string[] = [
  'Resize',
  'Upsample',
  'Range',
  'NonMaxSuppression',
  'TopK',
  'RoiAlign',
  'CumSum',
  'Min',
  'Max',
  'RandomNormal',
  'RandomUniform',
  'RandomNormalLike',
  'RandomUniformLike',
  'Multinomial',
  'Bernoulli',
  'QuantizeLinear',
  'DequantizeLinear',
  'DynamicQuantizeLinear',
  'STFT',
  'DFT',
  // No float16 in the op's type constraints, or no float16 kernel onnxruntime can fall back from:
  'Celu',
  'IsInf',
  'EyeLike',
  'MeanVarianceNormalization',
  'MelWeightMatrix',
  'QLinearConv',
  'QLinearMatMul',
];

/** Nodes kept float32 because of an attribute (onnxruntime's CPU provider lacks the float16 form). */
function attributeBlockReason(node: Node): string | undefined {
  if ((node.opType === 'ScatterElements' || node.opType === 'ScatterND') && node.hasAttr('reduction') && node.getString('reduction') !== 'none') {
    return `${node.opType} with reduction '${node.getString('reduction')}' has no float16 kernel in onnxruntime`;
  }
  return undefined;
}

/**
 * A Transpose kept float32 because onnxruntime-node 1.30 crashes (SIGSEGV in
 * InferenceSession.create at graphOptimizationLevel 'all', its default) on the float16 form of
 * ir/batch-transpose-matmul's pattern (a batch-moving Transpose into a constant-weight MatMul);
 * the same graph whose Transpose alone is float32 runs (the MatMul stays float16).
 */
function batchTransposeCrash(node: Node): string | undefined {
  const hit = batchTransposeIntoMatMul(node);
  if (!hit) return undefined;
  return (
    `perm [${hit.perm.join(',')}] feeds MatMul '${label(hit.matmul)}' (constant weight): onnxruntime 1.30 crashes (segfault) loading the float16 ` +
    `form at optimization level 'all' (MatmulTransposeFusion)`
  );
}

/**
 * Custom-domain ops that onnxruntime's CPU provider runs in float16 (checked with onnxruntime-node
 * 1.30), converted like default-domain ops: their float inputs become float16 (MatMulNBits'
 * activation, scales and bias; GatherBlockQuantized's scales) and so do their outputs; the uint8
 * packed weights and zero points are not float and stay as they are, bit for bit. This is the
 * `q4f16` form transformers.js ships. Keys are `domain|opType`.
 */
export const FLOAT16_CUSTOM_OPS: ReadonlySet<string> = new Set(['com.microsoft|MatMulNBits', 'com.microsoft|GatherBlockQuantized']);
const hasFloat16CustomKernel = (n: Node): boolean => FLOAT16_CUSTOM_OPS.has(`${n.domain}|${n.opType}`);

/** Ops whose float output type an attribute sets, which the pass rewrites to float16. */
const TYPE_SETTING_OPS = new Set(['Cast', 'ConstantOfShape']);

/** Inputs that accept any element type: no Cast is ever placed in front of them. */
const ANY_TYPE_INPUTS: Record<string, number[]> = nullPrototype<number[]>({ Cast: [0], CastLike: [0], Shape: [0], Size: [0] });
/** Float inputs/outputs whose type is not tied to the op's main type and stay float32. */
const FLOAT32_INPUTS: ReadonlyMap<string, readonly number[]> = new Map([
  ['Resize', [1, 2]],
  ['Upsample', [1]],
]);
const FLOAT32_OUTPUTS: ReadonlyMap<string, readonly number[]> = new Map([['LayerNormalization', [1, 2]]]);

const isDefaultDomain = (n: Node): boolean => n.domain === '' || n.domain === 'ai.onnx';
const label = (n: Node): string => n.name || n.opType;

export const FP16_NOTE =
  'FP16 halves the size of the weights; float16 compute is native on GPUs with float16 tensor cores and on ARM CPUs with float16 arithmetic.';

/** Why a float16 model may not run faster on a CPU; printed only beside a measured speed (./speed-causes.ts). */
export const FP16_CPU_CAUSE: SpeedCause = {
  cause: 'float16-on-cpu',
  text: "float16 on a CPU: onnxruntime's CPU provider has float16 kernels for few ops, so on x86 it runs most of a float16 model in float32 behind inserted Casts.",
};

/** Bytes of all initializers (every graph) and Constant-node tensors of a model. */
export function modelWeightBytes(model: Model): number {
  let bytes = 0;
  visitGraphs(model.graph, (g) => {
    for (const t of g.initializers) bytes += t.byteLength;
    for (const n of g.nodes) if (n.opType === 'Constant') for (const a of n.attributes.values()) if (a.value instanceof Tensor) bytes += a.value.byteLength;
  });
  return bytes;
}

interface ConvertStats {
  clamped: { name: string; count: number; maxAbs: number }[];
  flushed: number;
}

/** float32 values -> float16 bits, clamping finite overflow (counted per tensor). */
function toFloat16(name: string, values: ArrayLike<number>, stats: ConvertStats, warn: (m: string) => void): Uint16Array {
  const out = new Uint16Array(values.length);
  let count = 0;
  let maxAbs = 0;
  for (let i = 0; i < values.length; i++) {
    let x = values[i]!;
    if (Number.isFinite(x) && Math.abs(x) > FLOAT16_MAX) {
      count++;
      maxAbs = Math.max(maxAbs, Math.abs(x));
      x = Math.sign(x) * FLOAT16_MAX;
    }
    const h = float32ToFloat16(x);
    if (x !== 0 && (h & 0x7fff) === 0) stats.flushed++;
    out[i] = h;
  }
  if (count > 0) {
    stats.clamped.push({ name, count, maxAbs });
    warn(`tensor '${name}': ${count} value(s) beyond the float16 range (largest |x| = ${maxAbs.toExponential(3)}) clamped to ±${FLOAT16_MAX}`);
  }
  return out;
}

function tensorToFloat16(t: Tensor, stats: ConvertStats, warn: (m: string) => void, name = t.name): Tensor {
  const bits = toFloat16(t.name, t.toFloat64(), stats, warn);
  const c = Tensor.fromData(name, { dtype: DataType.FLOAT16, dims: [...t.dims], data: bits });
  c.docString = t.docString;
  c.metadataProps = t.metadataProps?.map((e) => ({ ...e }));
  return c;
}

/** An initializer keeps its identity (and Value) but now holds float16 bits. */
function convertInitializerInPlace(t: Tensor, stats: ConvertStats, warn: (m: string) => void): void {
  t.data = tensorToFloat16(t, stats, warn).data;
  t.dtype = DataType.FLOAT16;
}

/** Every value finite and within ±65504 (nothing to clamp). */
function withinFloat16(t: Tensor): boolean {
  const values = t.toFloat64();
  for (let i = 0; i < values.length; i++) if (!(Math.abs(values[i]!) <= FLOAT16_MAX)) return false;
  return true;
}

function rangeOf(ranges: Fp16Options['activationRanges'], name: string): ActivationRange | undefined {
  if (!ranges) return undefined;
  if (ranges instanceof Map) return ranges.get(name);
  return (ranges as Record<string, ActivationRange>)[name];
}

/** The options of convertToFloat16, resolved once. */
interface Fp16Rules {
  keepIoTypes: boolean;
  blockedOps: ReadonlySet<string>;
  blockedNodes: ReadonlySet<string>;
  activationRanges: Fp16Options['activationRanges'];
  warn: (message: string) => void;
}

function fp16Rules(model: Model, options: Fp16Options): Fp16Rules {
  const blockedNodes = new Set(options.nodeBlockList ?? []);
  for (const name of blockedNodes) {
    if (!model.allNodes().some((n) => n.name === name)) throw new UsageError(`--node-block-list: no node named '${name}' in the model`);
  }
  return {
    keepIoTypes: options.keepIoTypes ?? true,
    blockedOps: new Set([...(options.replaceDefaultOpBlockList ? [] : DEFAULT_FP16_OP_BLOCK_LIST), ...(options.opBlockList ?? [])]),
    blockedNodes,
    activationRanges: options.activationRanges,
    warn: options.onWarning ?? (() => undefined),
  };
}

function newFp16Report(model: Model, stats: ConvertStats): Fp16Report {
  return {
    mode: MODE.fp16,
    weightBytesBefore: modelWeightBytes(model),
    weightBytesAfter: 0,
    nodesConverted: 0,
    convertedByOpType: Object.create(null) as Record<string, number>, // keyed by op types from the file
    keptFloat32: [],
    clampedTensors: stats.clamped,
    flushedToZero: 0,
    castsInserted: 0,
    storedAsFloat16: [],
    notes: [FP16_NOTE],
    speedCauses: [FP16_CPU_CAUSE],
  };
}

/** What the plan step decides: which nodes convert and the new element type of every float32 value. */
interface Fp16Plan {
  /** Inferred element type of a value (constants: their tensor's). */
  typeOf: (v: Value | null | undefined) => DataType | undefined;
  converted: Set<Node>;
  /** Nodes kept float32 for want of a float16 kernel (custom domains). */
  noHalfKernel: Set<Node>;
  newType: Map<Value, DataType>;
  /** Float32 initializers and Constant-node outputs, converted with their readers. */
  constants: Value[];
}

const isConstantNode = (n: Node): boolean => n.opType === 'Constant' && isDefaultDomain(n);
const lacksHalfKernel = (n: Node): boolean => !isDefaultDomain(n) && !hasFloat16CustomKernel(n);

/** Why a node with float32 tensors stays float32, or undefined when it converts. */
function keptFloat32Reason(
  node: Node,
  rules: Fp16Rules,
  typeOf: Fp16Plan['typeOf'],
  tensors: readonly Value[],
  floatTensors: readonly Value[],
): string | undefined {
  if (lacksHalfKernel(node)) return `custom domain '${node.domain}'`;
  if (node.subgraphs().length > 0) return 'holds a subgraph: its inputs and outputs stay float32, its body is converted inside';
  if (rules.blockedNodes.has(node.name)) return 'node block list';
  if (rules.blockedOps.has(node.opType)) return 'op block list';
  const byAttribute = attributeBlockReason(node) ?? batchTransposeCrash(node);
  if (byAttribute) return byAttribute;
  // Float outputs from non-float inputs (window functions, TfIdfVectorizer...): the op fixes their type.
  if (!TYPE_SETTING_OPS.has(node.opType) && !node.inputs.some((v) => typeOf(v) === DataType.FLOAT))
    return 'its float32 output type is fixed by the op, not by its inputs';
  const unknown = tensors.find((v) => typeOf(v) === undefined);
  if (unknown) return `type of '${unknown.name}' unknown`;
  for (const v of floatTensors) {
    const r = rangeOf(rules.activationRanges, v.name);
    const reach = r === undefined ? 0 : Math.max(Math.abs(r.min), Math.abs(r.max));
    if (reach > FLOAT16_MAX) return `activation '${v.name}' reaches ${reach.toExponential(3)}, beyond float16`;
  }
  return undefined;
}

/** Plan, part 1: which nodes convert (the others listed in report.keptFloat32). */
function planConvertedNodes(graph: Graph, rules: Fp16Rules, typeOf: Fp16Plan['typeOf'], report: Fp16Report): Pick<Fp16Plan, 'converted' | 'noHalfKernel'> {
  const converted = new Set<Node>();
  const noHalfKernel = new Set<Node>();
  for (const node of graph.nodes) {
    if (isConstantNode(node)) continue; // converted with its readers below
    const tensors = [...node.inputs, ...node.outputs].filter((v): v is Value => v !== null && v.name !== '');
    const floatTensors = tensors.filter((v) => typeOf(v) === DataType.FLOAT);
    if (floatTensors.length === 0 && !(node.opType === 'Cast' && castTarget(node) === DataType.FLOAT)) continue;
    const reason = keptFloat32Reason(node, rules, typeOf, tensors, floatTensors);
    if (reason === undefined) {
      converted.add(node);
      continue;
    }
    report.keptFloat32.push({ node: label(node), opType: node.opType, reason });
    if (lacksHalfKernel(node)) noHalfKernel.add(node);
  }
  return { converted, noHalfKernel };
}

/** Plan, part 2: the new element type of every float32 value of the graph, and its float32 constants. */
function planValueTypes(graph: Graph, rules: Fp16Rules, plan: Pick<Fp16Plan, 'typeOf' | 'converted'>): Pick<Fp16Plan, 'newType' | 'constants'> {
  const { typeOf, converted } = plan;
  const newType = new Map<Value, DataType>();
  const constants: Value[] = [];
  for (const v of graph.inputs) {
    if (typeOf(v) === DataType.FLOAT) newType.set(v, rules.keepIoTypes ? DataType.FLOAT : DataType.FLOAT16);
  }
  // A body: the float32 outer values its nodes read (cast to float16 inside for converted readers).
  for (const node of graph.nodes) {
    for (const v of node.inputs) if (v && v.graph !== graph && !v.constantTensor() && typeOf(v) === DataType.FLOAT) newType.set(v, DataType.FLOAT);
  }
  for (const node of graph.nodes) {
    node.outputs.forEach((o, i) => {
      if (o.name === '' || typeOf(o) !== DataType.FLOAT) return;
      if (isConstantNode(node)) constants.push(o);
      else {
        const half = converted.has(node) && !FLOAT32_OUTPUTS.get(node.opType)?.includes(i);
        newType.set(o, half ? DataType.FLOAT16 : DataType.FLOAT);
      }
    });
  }
  for (const v of graph.initializerValues) if (!v.isGraphInput() && v.initializer!.dtype === DataType.FLOAT) constants.push(v);
  return { newType, constants };
}

function planFloat16(graph: Graph, rules: Fp16Rules, report: Fp16Report, outer: (v: Value) => DataType | undefined): Fp16Plan {
  const types = inferElementTypes(graph, outer);
  const typeOf = (v: Value | null | undefined): DataType | undefined =>
    v ? (types.get(v) ?? (v.graph !== graph ? outer(v) : undefined) ?? v.constantTensor()?.dtype) : undefined;
  const nodes = planConvertedNodes(graph, rules, typeOf, report);
  return { typeOf, ...nodes, ...planValueTypes(graph, rules, { typeOf, converted: nodes.converted }) };
}

/** What the apply steps edit with: the plan, the report they fill, and the conversion's counters. */
interface Fp16Edit {
  graph: Graph;
  opset: number;
  rules: Fp16Rules;
  plan: Fp16Plan;
  report: Fp16Report;
  stats: ConvertStats;
  nodeName: (base: string) => string;
}

/** The element type a reader wants for a float32 value, or undefined for "as it is". */
function wantedType(edit: Fp16Edit, reader: Node, index: number): DataType | undefined {
  if (reader.graph !== edit.graph) return DataType.FLOAT; // subgraph bodies are not converted
  if (!edit.plan.converted.has(reader)) return DataType.FLOAT;
  if (ANY_TYPE_INPUTS[reader.opType]?.includes(index)) return undefined;
  if (FLOAT32_INPUTS.get(reader.opType)?.includes(index)) return DataType.FLOAT;
  return DataType.FLOAT16;
}

function retype(v: Value, t: DataType): void {
  if (isTensorType(v.type)) v.type = { ...v.type, kind: 'tensor', elemType: t, shape: v.type.shape ? [...v.type.shape] : undefined };
  else if (!v.type) v.type = { kind: 'tensor', elemType: t };
}

/**
 * A float32 constant none of whose readers wants float16: float32, or, as the weight of float32-only
 * kernels, float16 in the file with a Cast back to float32 (inserted later like any boundary Cast;
 * onnxruntime folds it when the session loads).
 */
function keepConstantFloat32(edit: Fp16Edit, v: Value): void {
  const { plan, stats, rules, report } = edit;
  const t = v.initializer;
  const uses = v.uses();
  const storeHalf =
    t &&
    !v.isGraphOutput() &&
    t.elementCount >= MIN_HALF_STORED_ELEMENTS &&
    uses.length > 0 &&
    uses.every((u) => plan.noHalfKernel.has(u.node)) &&
    withinFloat16(t);
  if (storeHalf) {
    convertInitializerInPlace(t, stats, rules.warn);
    plan.newType.set(v, DataType.FLOAT16);
    retype(v, DataType.FLOAT16);
    report.storedAsFloat16.push(v.name);
  } else plan.newType.set(v, DataType.FLOAT);
}

/** Apply, step 1: constants converted in place when every reader wants float16, duplicated when readers differ. */
function convertConstants(edit: Fp16Edit): void {
  const { graph, plan, stats } = edit;
  const { warn, keepIoTypes } = edit.rules;
  for (const v of plan.constants) {
    const uses = v.uses();
    const want16 = uses.filter((u) => wantedType(edit, u.node, u.index) === DataType.FLOAT16);
    if (want16.length === 0) {
      keepConstantFloat32(edit, v);
      continue;
    }
    const allSixteen = want16.length === uses.length && !(keepIoTypes && v.isGraphOutput());
    if (!allSixteen) {
      const source = v.initializer ?? graph.constantTensor(v)!;
      const copy = graph.addInitializer(tensorToFloat16(source, stats, warn, graph.uniqueName(`${v.name}_fp16`)));
      plan.newType.set(copy, DataType.FLOAT16);
      for (const u of want16) u.node.setInput(u.index, copy);
      plan.newType.set(v, DataType.FLOAT);
      continue;
    }
    if (v.initializer) convertInitializerInPlace(v.initializer, stats, warn);
    else {
      const producer = v.producer!;
      const half = tensorToFloat16(graph.constantTensor(v)!, stats, warn, v.name);
      for (const k of [...producer.attributes.keys()]) if (k.startsWith('value')) producer.removeAttr(k);
      producer.setAttr('value', half);
    }
    plan.newType.set(v, DataType.FLOAT16);
    retype(v, DataType.FLOAT16);
  }
}

/** Apply, step 2: converted nodes: dtype-carrying attributes follow, outputs retyped. */
function convertNodes(edit: Fp16Edit): void {
  const { plan, stats, opset } = edit;
  for (const node of plan.converted) {
    if (node.opType === 'Cast' && castTarget(node) === DataType.FLOAT) node.setAttr('to', castAttribute(DataType.FLOAT16, opset));
    if (node.opType === 'ConstantOfShape') {
      const value = node.getTensor('value');
      if (!value) node.setAttr('value', Tensor.fromData('value', { dtype: DataType.FLOAT16, dims: [1], data: Uint16Array.of(0) }));
      else if (value.dtype === DataType.FLOAT) node.setAttr('value', tensorToFloat16(value, stats, edit.rules.warn));
    }
    if (node.opType === 'EyeLike' && node.hasAttr('dtype') && node.getInt('dtype') === DataType.FLOAT) node.setAttr('dtype', DataType.FLOAT16);
    for (const o of node.outputs) if (plan.newType.get(o) === DataType.FLOAT16) retype(o, DataType.FLOAT16);
  }
}

/** Makes the Casts of the apply step: one per (value, type), never a Cast feeding a Cast. */
interface CastInserter {
  /** `v` as type `to`: itself, the source of a float Cast it comes from, or a (cached) new Cast. */
  castTo(v: Value, to: DataType): Value;
  /** The Casts made so far (their readers are already right). */
  inserted: ReadonlySet<Node>;
}

function castInserter(edit: Fp16Edit): CastInserter {
  const { graph, plan, opset } = edit;
  const castCache = new Map<Value, Map<DataType, Value>>();
  const inserted = new Set<Node>();
  const castTo = (v: Value, to: DataType): Value => {
    const have = plan.newType.get(v) ?? plan.typeOf(v);
    if (have === to) return v;
    // Never stack casts: read past a float-to-float Cast to its source.
    const p = v.producer;
    if (p && p.opType === 'Cast' && isDefaultDomain(p) && p.inputs[0] && p.graph === graph) {
      const src = p.inputs[0];
      const srcType = plan.newType.get(src) ?? plan.typeOf(src);
      if (srcType !== undefined && isFloatDtype(castTarget(p) ?? 0)) return castTo(src, to);
    }
    let perType = castCache.get(v);
    if (!perType) castCache.set(v, (perType = new Map()));
    const cached = perType.get(to);
    if (cached) return cached;
    const suffix = to === DataType.FLOAT16 ? 'fp16' : 'fp32';
    const cast = graph.addNode({
      opType: 'Cast',
      name: edit.nodeName(`${v.name}_to_${suffix}`),
      inputs: [v],
      outputs: [graph.uniqueName(`${v.name}_${suffix}`)],
      attributes: { to: castAttribute(to, opset) },
    });
    inserted.add(cast);
    const c = cast.outputs[0]!;
    const shape = isTensorType(v.type) ? v.type.shape : undefined;
    c.type = { kind: 'tensor', elemType: to, shape: shape ? [...shape] : undefined };
    plan.newType.set(c, to);
    edit.report.castsInserted++;
    perType.set(to, c);
    return c;
  };
  return { castTo, inserted };
}

/** Apply, step 3: Casts where a value's type differs from what its reader wants. */
function castReaders(edit: Fp16Edit, casts: CastInserter): void {
  const { newType } = edit.plan;
  const floatValues = [...newType.keys()];
  for (const v of floatValues) {
    for (const u of v.uses()) {
      if (casts.inserted.has(u.node)) continue;
      const want = wantedType(edit, u.node, u.index);
      if (want === undefined) continue;
      const have = newType.get(v)!;
      if (have !== want) u.node.setInput(u.index, casts.castTo(v, want));
    }
  }
}

/** Apply, step 4: graph inputs/outputs float32 at the boundary when keepIoTypes, float16 otherwise. */
function setBoundaryTypes(edit: Fp16Edit, casts: CastInserter): void {
  const { graph, plan, stats } = edit;
  const ioType = edit.rules.keepIoTypes ? DataType.FLOAT : DataType.FLOAT16;
  for (const v of graph.inputs) {
    if (!plan.newType.has(v)) continue;
    retype(v, ioType);
    // An input with a default (initializer, IR < 4) keeps a default of its new type.
    if (v.initializer && v.initializer.dtype === DataType.FLOAT && ioType === DataType.FLOAT16)
      convertInitializerInPlace(v.initializer, stats, edit.rules.warn);
  }
  graph.outputs = graph.outputs.map((v) => {
    const t = plan.newType.get(v);
    if (t === undefined || t === ioType) return v;
    const name = v.name;
    const declared = v.type;
    let result = casts.castTo(v, ioType);
    if (result.isGraphInput() || result.initializer || result.isGraphOutput()) {
      // The source already has the wanted type but a name of its own: copy it under the output name.
      const id = graph.addNode({ opType: 'Identity', name: edit.nodeName(`${name}_Identity`), inputs: [result], outputs: [graph.uniqueName(`${name}_out`)] });
      id.outputs[0]!.type = result.type ? structuredClone(result.type) : undefined;
      result = id.outputs[0]!;
    }
    v.rename(graph.uniqueName(`${name}_${t === DataType.FLOAT16 ? 'fp16' : 'fp32'}`));
    result.rename(name);
    if (isTensorType(declared)) result.type = { ...declared, elemType: ioType, shape: declared.shape ? [...declared.shape] : undefined };
    return result;
  });
}

/** Apply, step 5: drop Casts left without readers (an original Cast whose readers now read its source), fold Cast chains, sort. */
function tidyCasts(graph: Graph): void {
  for (const node of [...graph.nodes]) {
    if (node.opType === 'Cast' && node.outputs.every((o) => o.uses().length === 0 && !o.isGraphOutput())) graph.removeNode(node);
  }
  foldCastChains(graph);
  graph.topologicalSort();
}

/** Convert a model to float16 weights and compute (see the module comment). */
export function convertToFloat16(model: Model, options: Fp16Options = {}): { model: Model; report: Fp16Report } {
  const rules = fp16Rules(model, options);
  const out = model.clone();
  out.graph.nameUnnamedNodes(); // reports and nodeBlockList need a name for every node
  const graph = out.graph;
  const opset = out.opsetVersion('') ?? 1;
  const stats: ConvertStats = { clamped: [], flushed: 0 };
  const report = newFp16Report(out, stats);
  if (opset < 6) {
    // Cast-1 (string `to`) has no onnxruntime kernel, so no boundary could be written.
    const msg = `opset ${opset} is below 6, where Cast takes a type name that onnxruntime does not run; upgrade the model's opset first (nothing was converted)`;
    rules.warn(msg);
    report.notes.push(msg);
    report.weightBytesAfter = report.weightBytesBefore;
    return { model: out, report };
  }

  // The main graph first, then each body (parents before children), each seeing the types its
  // enclosing graphs ended with; a body keeps float32 inputs and outputs.
  const nodeName = uniqueNodeNamer(out.allNodes());
  const known = new Map<Value, DataType>();
  let converted = 0;
  for (const g of graph.allGraphs()) {
    const plan = planFloat16(g, g === graph ? rules : { ...rules, keepIoTypes: true }, report, (v) => known.get(v));
    for (const v of g.values()) {
      const t = plan.typeOf(v);
      if (t !== undefined) known.set(v, t);
    }
    const edit: Fp16Edit = { graph: g, opset, rules, plan, report, stats, nodeName };
    convertConstants(edit);
    convertNodes(edit);
    const casts = castInserter(edit);
    castReaders(edit, casts);
    setBoundaryTypes(edit, casts);
    tidyCasts(g);
    for (const [v, t] of plan.newType) known.set(v, t);
    for (const node of g.nodes) {
      if (!plan.converted.has(node)) continue;
      converted++;
      report.nodesConverted++;
      report.convertedByOpType[node.opType] = (report.convertedByOpType[node.opType] ?? 0) + 1;
    }
  }
  report.flushedToZero = stats.flushed;
  report.weightBytesAfter = modelWeightBytes(out);
  if (converted === 0) report.notes.push('No node could be converted to float16: the model is unchanged apart from its types.');
  return { model: out, report };
}

/**
 * Cast(float -> float) feeding another Cast: the second reads the first's source directly (the
 * intermediate rounding only loses precision); a Cast back to its source's own type disappears.
 */
function foldCastChains(graph: Graph): void {
  const elemType = (v: Value): DataType | undefined => (isTensorType(v.type) ? v.type.elemType : v.initializer?.dtype);
  let changed = true;
  while (changed) {
    changed = false;
    for (const b of graph.nodes) {
      if (b.opType !== 'Cast' || !isDefaultDomain(b)) continue;
      const a = b.inputs[0]?.producer;
      if (!a || a.opType !== 'Cast' || !isDefaultDomain(a) || a.graph !== graph) continue;
      const src = a.inputs[0];
      if (!src || !isFloatDtype(castTarget(a) ?? 0) || !isFloatDtype(castTarget(b) ?? 0)) continue;
      const srcType = elemType(src);
      if (srcType === undefined || !isFloatDtype(srcType)) continue;
      b.setInput(0, src);
      if (a.outputs[0]!.uses().length === 0 && !a.outputs[0]!.isGraphOutput()) graph.removeNode(a);
      changed = true;
      break;
    }
  }
}

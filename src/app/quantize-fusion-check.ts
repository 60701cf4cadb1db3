/**
 * "Will INT8 be faster here?": load a QDQ model in onnxruntime with every graph optimization,
 * write out what onnxruntime made of it (optimizedModelFilePath, a temp file), and count the
 * integer kernels it formed (QLinearConv, QGemm, QLinearMatMul, ...; in every graph, If/Loop/Scan
 * bodies included) and the DequantizeLinear ->
 * float op pairs it left, each with the most likely reason (read from the QDQ model itself).
 * A DQ -> float op left behind means that op runs in float on dequantized data: slower than FP32.
 * Ops onnxruntime decomposes into unnamed pieces (HardSwish -> HardSigmoid + Mul) are reported
 * once, as the QDQ model's node.
 * Imports runtime, onnx (to read the optimized file), the IR, ./registry.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DataType } from '../ir/dtype.js';
import { isTensorType, type Model, type Node, type Value } from '../ir/index.js';
import { decodeModel } from '../onnx/index.js';
import { createRunner, type RunnerOptions } from '../runtime/index.js';
import { ABSORBABLE_ACTIVATIONS, QDQ_HANDLERS } from '../passes/quantize/registry.js';
import { makeTempFolder, removeTempFolder } from '../util/temp-folder.js';

/** onnxruntime kernels that compute on 8-bit data. */
export const INTEGER_KERNELS = new Set([
  'QLinearConv',
  'QGemm',
  'QLinearMatMul',
  'MatMulInteger',
  'ConvInteger',
  'MatMulIntegerToFloat',
  'DynamicQuantizeMatMul',
  'DynamicQuantizeLSTM',
  'QLinearAdd',
  'QLinearMul',
  'QLinearConcat',
  'QLinearAveragePool',
  'QLinearGlobalAveragePool',
  'QLinearSigmoid',
  'QLinearLeakyRelu',
  'QLinearSoftmax',
  'QLinearWhere',
  'QLinearReduceMean',
  'QAttention',
  'QEmbedLayerNormalization',
  'NhwcQLinearConv',
  'QLinearConvTranspose',
  // Weight-only 8-bit/4-bit kernels (onnxruntime turns DQ(weight) -> MatMul/Gemm into these).
  'MatMulNBits',
  'GatherBlockQuantized',
]);

/** Weight-only kernels: low-bit weights, float activations (--mode int4 / q4f16). */
const WEIGHT_ONLY_KERNELS = new Set(['MatMulNBits', 'GatherBlockQuantized']);

/** Ops that run on 8-bit data when the Q/DQ around them are dropped. */
const DATA_MOVEMENT = new Set([
  'NhwcMaxPool',
  'MaxPool',
  'Reshape',
  'Flatten',
  'Transpose',
  'Squeeze',
  'Unsqueeze',
  'Resize',
  'Gather',
  'Slice',
  'Expand',
  'Tile',
  'Split',
  'ReduceMax',
  'ReduceMin',
  'Concat',
]);

export interface UnfusedNode {
  node: string;
  opType: string;
  /** DequantizeLinear outputs it reads. */
  dequantizedInputs: string[];
  reason: string;
  /**
   * The ops onnxruntime split this node into (HardSwish: HardSigmoid, Mul); their unnamed pieces
   * are reported as this one node of the QDQ model.
   */
  decomposedInto?: string[];
}

/**
 * Ops onnxruntime's optimizer replaces by several unnamed ones (so the optimized graph's nodes no
 * longer carry the QDQ model's name): op type -> the op types it becomes.
 */
export const DECOMPOSED_BY_ONNXRUNTIME: ReadonlyMap<string, readonly string[]> = new Map([['HardSwish', ['HardSigmoid', 'Mul']]]);

export interface FusionReport {
  /** Integer kernels in the optimized graph, by op type. */
  integerKernels: Record<string, number>;
  integerKernelCount: number;
  /** Data-movement ops running on 8-bit data (their Q/DQ dropped), by op type. */
  eightBitDataMovement: Record<string, number>;
  /** Float ops fed by a DequantizeLinear that were meant to run in 8 bits: extra time. */
  unfused: UnfusedNode[];
  /**
   * Float ops the quantizer chose to keep float (options.keptFloat) that read dequantized
   * activations at a float/int8 boundary: one DequantizeLinear each, by design.
   */
  keptFloat: UnfusedNode[];
  quantizeLinear: number;
  dequantizeLinear: number;
  /** Nodes of the optimized model, sub-graphs included. */
  optimizedNodes: number;
  /** One line for people: what onnxruntime runs, no claim about speed (the speed check measures that). */
  verdict: string;
}

export interface FusionCheckOptions {
  runner?: RunnerOptions;
  /** The QDQ model the file was written from (names and reasons); default: read the file. */
  reference?: Model;
  /** Nodes the quantizer kept float on purpose, with its reason (QdqReport.skipped). */
  keptFloat?: readonly KeptFloatNode[];
}

/** A float op the quantizer chose (not onnxruntime's fusion failing), with the reason. */
export interface KeptFloatNode {
  node: string;
  reason: string;
  /** It reads dequantized int8 weights on purpose (no integer kernel exists for it). */
  weightsDequantized?: boolean;
}

/**
 * Analyze what onnxruntime (all optimizations, CPU) makes of a QDQ model. The optimized copy goes
 * to a private temp folder (removed always); for a model over protobuf's limit onnxruntime writes
 * its weights to a side file there (see runner.ts), which is never read back: only the graph matters.
 */
export async function checkFusion(model: Model | string, options: FusionCheckOptions = {}): Promise<FusionReport> {
  const target = await fusionTarget(options.runner);
  try {
    const runner = await createRunner(model, {
      intraOpThreads: 1,
      ...target.runnerOptions,
      label: typeof model === 'string' ? model : 'quantized model',
    });
    await runner.release();
    return await target.read(model, options);
  } finally {
    await target.remove();
  }
}

/**
 * Where a session that is made anyway (the check of a written file) writes what onnxruntime made of
 * the model, so the fusion analysis needs no session of its own: create the session with
 * `runnerOptions` (a private temp folder, all graph optimizations), then `read` the analysis, and
 * `remove` the folder always.
 */
export async function fusionTarget(runner?: RunnerOptions): Promise<{
  runnerOptions: RunnerOptions;
  read(model: Model | string, options?: Omit<FusionCheckOptions, 'runner'>): Promise<FusionReport>;
  remove(): Promise<void>;
}> {
  const dir = await makeTempFolder('model-opt-fusion-', runner?.tempDir);
  const optimizedPath = join(dir, 'optimized.onnx');
  return {
    // Weights go to a side file that is never read: decoding a graph with its weights inline took
    // 2.6 s of the text-recognizer stand-in's fusion check (bench/quantize-phases.mjs).
    runnerOptions: { ...runner, graphOptimizationLevel: 'all', optimizedModelFilePath: optimizedPath, optimizedModelExternalData: true },
    async read(model, options = {}) {
      // No baseDir: tensors in a side file stay unloaded (the analysis reads only the graph).
      // onnxruntime writes sub-graph initializers twice in this file (with external data): keep one.
      const optimized = decodeModel(await readFile(optimizedPath), { sourceName: 'optimized model', keepFirstInitializer: true });
      const reference = options.reference ?? (typeof model === 'string' ? decodeModel(await readFile(model), { sourceName: model }) : model);
      return analyzeOptimized(optimized, reference, options.keptFloat);
    },
    remove: () => removeTempFolder(dir),
  };
}

/** The analysis on an already optimized graph (exported for tests). */
export function analyzeOptimized(optimized: Model, reference?: Model, keptFloatNodes: readonly KeptFloatNode[] = []): FusionReport {
  const chosen = new Map(keptFloatNodes.map((k) => [k.node, k]));
  const g = optimized.graph;
  // Every graph: kernels inside If/Loop/Scan bodies count as much as the main graph's (issue 31).
  const nodes = g.allNodes();
  // Keyed by op types from the model file: null-prototype records.
  const integerKernels: Record<string, number> = Object.create(null);
  const eightBit: Record<string, number> = Object.create(null);
  const quantizedValues = new Set<string>();
  let q = 0;
  let dq = 0;
  for (const node of nodes) {
    if (node.opType === 'QuantizeLinear') {
      q++;
      node.outputs.forEach((o) => quantizedValues.add(o.name));
    } else if (node.opType === 'DequantizeLinear') dq++;
    else if (INTEGER_KERNELS.has(node.opType)) {
      integerKernels[node.opType] = (integerKernels[node.opType] ?? 0) + 1;
      // Kernels with an output scale produce 8-bit data.
      if (!['MatMulIntegerToFloat', 'DynamicQuantizeMatMul', 'DynamicQuantizeLSTM', 'MatMulInteger', 'ConvInteger'].includes(node.opType))
        node.outputs.forEach((o) => quantizedValues.add(o.name));
    } else if (DATA_MOVEMENT.has(node.opType) && node.inputs[0] && quantizedValues.has(node.inputs[0].name)) {
      eightBit[node.opType] = (eightBit[node.opType] ?? 0) + 1;
      node.outputs.forEach((o) => quantizedValues.add(o.name));
    }
  }
  // QGemm with float output: no y_scale input.
  for (const node of nodes) {
    if (node.opType === 'QGemm' && !node.inputs[7]) node.outputs.forEach((o) => quantizedValues.delete(o.name));
  }
  const unfused: UnfusedNode[] = [];
  const keptFloat: UnfusedNode[] = [];
  const decomposed = new Map<Node, UnfusedNode>();
  for (const node of nodes) {
    if (node.opType === 'QuantizeLinear' || node.opType === 'DequantizeLinear' || INTEGER_KERNELS.has(node.opType)) continue;
    const dqInputs = node.inputs.filter((v) => v?.producer?.opType === 'DequantizeLinear').map((v) => v!.name);
    if (dqInputs.length === 0) continue;
    // Bias/weights DQ of a fused kernel never show here; a shape-only consumer is harmless.
    if (node.opType === 'Shape') continue;
    const source = sourceOf(node.name, reference);
    const whole = source === undefined ? decomposedSource(node, reference) : undefined;
    const name = source?.name ?? whole?.name ?? node.name;
    // Kept float by choice, and only activations dequantized (a DQ of a weight costs every run).
    const choice = chosen.get(name);
    const activationsOnly = node.inputs.every((v) => v?.producer?.opType !== 'DequantizeLinear' || !v.producer.graph.constantTensor(v.producer.inputs[0]!));
    const list = choice !== undefined && (activationsOnly || choice.weightsDequantized) ? keptFloat : unfused;
    if (whole !== undefined) {
      // One row per decomposed node of the QDQ model, however many pieces read dequantized data.
      const row = decomposed.get(whole);
      if (row) {
        for (const d of dqInputs) if (!row.dequantizedInputs.includes(d)) row.dequantizedInputs.push(d);
        continue;
      }
      const parts = DECOMPOSED_BY_ONNXRUNTIME.get(whole.opType)!;
      const added: UnfusedNode = {
        node: whole.name,
        opType: whole.opType,
        dequantizedInputs: dqInputs,
        decomposedInto: [...parts],
        reason: list === keptFloat ? choice!.reason : `its pieces run in float on dequantized data (onnxruntime has no integer kernel for ${parts[0]})`,
      };
      decomposed.set(whole, added);
      list.push(added);
    } else if (list === keptFloat) keptFloat.push({ node: name, opType: node.opType, dequantizedInputs: dqInputs, reason: choice!.reason });
    else unfused.push({ node: name, opType: node.opType, dequantizedInputs: dqInputs, reason: explain(node, reference) });
  }
  const boundary = keptFloat.length > 0 ? ` (${keptFloat.length} op(s) kept float by choice read int8 data)` : '';
  const count = Object.values(integerKernels).reduce((a, b) => a + b, 0);
  // Weight-only kernels (int4 / q4f16): activations stay float, so the gain is in loading weights.
  const weightOnly = Object.keys(integerKernels).every((k) => WEIGHT_ONLY_KERNELS.has(k));
  // What onnxruntime made of the model, without a claim about its speed: --measure-speed measures it.
  const verdict =
    count > 0 && weightOnly && unfused.length === 0
      ? `${count} weight-only kernel(s) (${Object.keys(integerKernels).join(', ')}; activations stay float): fewer weight bytes to load, the same float arithmetic; --measure-speed or model-opt benchmark times it`
      : count === 0 && q + dq === 0
        ? 'no integer kernels and no (de)quantize steps: the model runs as FP32 (nothing was quantized)'
        : count === 0
          ? `no integer kernels: onnxruntime runs this model in float, with ${q + dq} (de)quantize step(s) on top of the FP32 work`
          : unfused.length === 0
            ? `${count} integer kernel(s), no DequantizeLinear -> float op left${boundary}: every quantized op runs as an integer kernel; --measure-speed or model-opt benchmark times it`
            : `${count} integer kernel(s), but ${unfused.length} op(s) run in float on dequantized data, between (de)quantize steps`;
  return {
    integerKernels,
    integerKernelCount: count,
    eightBitDataMovement: eightBit,
    unfused,
    keptFloat,
    quantizeLinear: q,
    dequantizeLinear: dq,
    optimizedNodes: nodes.length,
    verdict,
  };
}

/** The QDQ-model node an optimized node came from (onnxruntime keeps names, adding suffixes). */
function sourceOf(name: string, reference?: Model): Node | undefined {
  if (!reference) return undefined;
  return reference.graph.allNodes().find((n) => n.name !== '' && (n.name === name || name.startsWith(`${n.name}_token`) || name.startsWith(`${n.name}/`)));
}

/**
 * The QDQ-model node that onnxruntime decomposed into `node` (an unnamed piece, such as the
 * HardSigmoid or Mul of a HardSwish): a node of DECOMPOSED_BY_ONNXRUNTIME whose parts include
 * node's op type and that reads the same dequantized tensor. The optimized DequantizeLinear may be
 * renamed (onnxruntime names values after their nodes): found by its own name, its output's name,
 * or its quantized input's name.
 */
function decomposedSource(node: Node, reference?: Model): Node | undefined {
  if (!reference) return undefined;
  for (const v of node.inputs) {
    const dq = v?.producer;
    if (!v || dq?.opType !== 'DequantizeLinear') continue;
    const dequantized: Value[] = [];
    const same = reference.graph.value(v.name);
    if (same) dequantized.push(same);
    // onnxruntime renames values after the nodes making them: the DQ node keeps its name.
    const sameNode = dq.name === '' ? undefined : reference.graph.allNodes().find((r) => r.name === dq.name && r.opType === 'DequantizeLinear');
    if (sameNode?.outputs[0]) dequantized.push(sameNode.outputs[0]);
    const quantized = dq.inputs[0] ? reference.graph.value(dq.inputs[0].name) : undefined;
    for (const r of quantized?.consumers ?? []) if (r.opType === 'DequantizeLinear' && r.outputs[0]) dequantized.push(r.outputs[0]);
    for (const d of dequantized) {
      const whole = d.consumers.find((c) => DECOMPOSED_BY_ONNXRUNTIME.get(c.opType)?.includes(node.opType));
      if (whole) return whole;
    }
  }
  return undefined;
}

/** Why onnxruntime left `node` unfused, judged from the QDQ model it came from. */
function explain(node: Node, reference?: Model): string {
  const original = sourceOf(node.name, reference);
  const op = original?.opType ?? node.opType;
  if (!original) {
    return QDQ_HANDLERS.has(op)
      ? `onnxruntime did not fuse this ${op} (node not found in the QDQ model to tell why)`
      : `onnxruntime has no integer kernel for ${op}; it runs in float between DequantizeLinear and QuantizeLinear`;
  }
  if (!QDQ_HANDLERS.has(op) && !ABSORBABLE_ACTIVATIONS.has(op)) {
    return `${op} is not in model-opt's QDQ table, so it runs in float on dequantized data (exclude its neighbours or accept the cost)`;
  }
  const floatInput = original.inputs.find(
    (v, i) => v && v.producer?.opType !== 'DequantizeLinear' && !(op === 'Gemm' && i === 2) && !(op === 'Conv' && i === 2) && !isShapeLike(op, i),
  );
  if (floatInput) return `input '${floatInput.name}' is float (not from a DequantizeLinear): every input of the group must be quantized`;
  const sharedDq = original.inputs.find((v) => v?.producer?.opType === 'DequantizeLinear' && v.consumers.length > 1);
  if (sharedDq) return `DequantizeLinear output '${sharedDq.name}' feeds several nodes; onnxruntime fuses a DQ used by one node only`;
  const out = original.outputs[0];
  if (out) {
    if (out.isGraphOutput() && op !== 'Gemm' && op !== 'MatMul') return 'its output is a graph output, so there is no QuantizeLinear after it';
    const readers = out.consumers;
    const next = readers.length === 1 && ABSORBABLE_ACTIVATIONS.has(readers[0]!.opType) ? readers[0]!.outputs[0]!.consumers : readers;
    if (op !== 'Gemm' && !(op === 'MatMul') && (next.length === 0 || next.some((r) => r.opType !== 'QuantizeLinear'))) {
      return 'its output is not quantized (no QuantizeLinear right after it), so onnxruntime cannot form a QDQ group';
    }
  }
  if (op === 'Gemm' && Math.abs(original.getFloat('beta', 1) - 1) > 1e-6) return 'Gemm beta is not 1 (QGemm needs beta = 1 with a quantized bias)';
  const x = original.inputs[0]?.producer?.inputs[0];
  if (x && isTensorType(x.type) && x.type.elemType === DataType.INT8) {
    return 'int8 activations: this CPU build only fuses uint8 activations for this op (use --activation-type uint8)';
  }
  return `onnxruntime did not fuse this ${op} (types or scales it does not accept)`;
}

function isShapeLike(op: string, index: number): boolean {
  // Inputs that are shapes/axes/scales, not data.
  return (
    (op === 'Reshape' && index === 1) ||
    (op === 'Resize' && index > 0) ||
    ((op === 'Squeeze' || op === 'Unsqueeze') && index === 1) ||
    (op === 'Clip' && index > 0)
  );
}

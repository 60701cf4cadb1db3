/**
 * inspect: what a model is made of. Inputs/outputs, opsets, node and op-type counts (subgraphs and
 * functions included), parameters by dtype (initializers and Constant nodes), weight sparsity,
 * external data files, and whether onnxruntime loads it. Returns a plain record; prints nothing.
 * May import: ir, onnx, runtime (lazily).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Dim, Graph, Model, Node, Tensor, TypedArray } from '../ir/index.js';
import { DataType, byteSize, dtypeInfo, dtypeName, elementCount, quantizedOpTypes, visitGraphs } from '../ir/index.js';
import { SUGGESTED_DIM } from '../ir/io-spec.js';
import { convertedModelKind } from '../ir/converted-model.js';
import { loadModel } from '../onnx/index.js';

export interface IoDescription {
  name: string;
  dtype: string;
  shape: Dim[] | null;
}

export interface ParameterGroup {
  dtype: string;
  tensors: number;
  elements: number;
  bytes: number;
}

export interface InspectReport {
  file: string;
  fileBytes: number;
  externalData: { location: string; bytes: number | null }[];
  irVersion: number;
  producer: { name: string; version: string };
  opsetImports: { domain: string; version: number }[];
  inputs: IoDescription[];
  outputs: IoDescription[];
  nodes: number;
  subgraphs: number;
  functions: number;
  opTypes: { opType: string; count: number }[];
  parameters: { elements: number; bytes: number; byDtype: ParameterGroup[] };
  /** Zeros among floating-point weight elements (initializers and Constant nodes with >= 16 elements). */
  sparsity: { zeros: number; elements: number; fraction: number };
  /** The float weight tensors with the most zeros (at most 5, only those with any zeros). */
  sparsestTensors: { name: string; shape: number[]; fraction: number }[];
  runtime: { loads: boolean; loadMs?: number; error?: string } | null;
  warnings: string[];
  /** What to try next with model-opt, judged from the op types and inputs (heuristic). */
  suggestions: string[];
}

export interface InspectOptions {
  /** Load the model in onnxruntime too (default true). */
  checkRuntime?: boolean;
}

/** Weights smaller than this are treated as shape constants, not parameters, for sparsity. */
const SPARSITY_MIN_ELEMENTS = 16;

export async function inspectModel(file: string, options: InspectOptions = {}): Promise<InspectReport> {
  const warnings: string[] = [];
  const model = await loadModel(file, { onWarning: (message) => warnings.push(message) });
  const stat = await fs.promises.stat(file);
  const report = describeModel(model, file, stat.size);
  report.warnings.push(...warnings);
  if (options.checkRuntime ?? true) report.runtime = await checkRuntimeLoad(file, (message) => report.warnings.push(message));
  // Every command runs the model in onnxruntime: what does not load there cannot be optimized yet.
  if (report.runtime && !report.runtime.loads) {
    report.suggestions = ['onnxruntime cannot load this model, and every model-opt command runs it there: re-export it (a newer opset) first'];
  }
  return report;
}

/** The parts of the report that come from the model alone (no files, no runtime). */
export function describeModel(model: Model, file: string, fileBytes: number): InspectReport {
  const graphs: Graph[] = [];
  visitGraphs(model.graph, (g) => graphs.push(g));
  for (const fn of model.functions) visitGraphs(fn.graph, (g) => graphs.push(g));

  const histogram = new Map<string, number>();
  let nodes = 0;
  for (const g of graphs) {
    for (const node of g.nodes) {
      nodes += 1;
      const key = node.domain && node.domain !== 'ai.onnx' ? `${node.domain}.${node.opType}` : node.opType;
      histogram.set(key, (histogram.get(key) ?? 0) + 1);
    }
  }

  const weights = collectWeights(graphs);
  const groups = new Map<number, ParameterGroup>();
  const externalFiles = new Map<string, number>();
  let zeros = 0;
  let floatElements = 0;
  const sparsest: { name: string; shape: number[]; fraction: number }[] = [];
  for (const tensor of weights) {
    const count = elementCount(tensor.dims);
    const group = groups.get(tensor.dtype) ?? { dtype: dtypeName(tensor.dtype), tensors: 0, elements: 0, bytes: 0 };
    group.tensors += 1;
    group.elements += count;
    group.bytes += byteSize(tensor.dtype, count);
    groups.set(tensor.dtype, group);
    if (tensor.external) {
      const size = externalFiles.get(tensor.external.location) ?? 0;
      externalFiles.set(tensor.external.location, size + (tensor.external.length ?? 0));
    }
    if (dtypeInfo(tensor.dtype).isFloat && count >= SPARSITY_MIN_ELEMENTS && tensor.hasData) {
      const z = countZeros(tensor);
      zeros += z;
      floatElements += count;
      if (z > 0) sparsest.push({ name: tensor.name, shape: [...tensor.dims], fraction: z / count });
    }
  }
  sparsest.sort((a, b) => b.fraction - a.fraction);
  const byDtype = [...groups.values()].sort((a, b) => b.bytes - a.bytes);
  const baseDir = path.dirname(path.resolve(file));

  return {
    file,
    fileBytes,
    externalData: [...externalFiles.keys()].map((location) => ({ location, bytes: fileSize(path.join(baseDir, location)) })),
    irVersion: model.irVersion,
    producer: { name: model.producerName ?? '', version: model.producerVersion ?? '' },
    opsetImports: model.opsetImports.map((o) => ({ domain: o.domain || 'ai.onnx', version: o.version })),
    // Before IR 4, weights were listed as graph inputs too; they are parameters, not inputs.
    inputs: model.graph.inputs.filter((v) => !v.initializer).map(describeIo),
    outputs: model.graph.outputs.map(describeIo),
    nodes,
    subgraphs: graphs.length - 1 - model.functions.length,
    functions: model.functions.length,
    opTypes: [...histogram.entries()].map(([opType, count]) => ({ opType, count })).sort((a, b) => b.count - a.count || a.opType.localeCompare(b.opType)),
    parameters: {
      elements: byDtype.reduce((a, g) => a + g.elements, 0),
      bytes: byDtype.reduce((a, g) => a + g.bytes, 0),
      byDtype,
    },
    sparsity: { zeros, elements: floatElements, fraction: floatElements ? zeros / floatElements : 0 },
    sparsestTensors: sparsest.slice(0, 5),
    runtime: null,
    warnings: [],
    suggestions: suggest(model, histogram, file),
  };
}

/**
 * Next steps for a newcomer, from the op types (a heuristic, not a measurement): an already
 * quantized model, LSTMs with constant weights or transformer-style graphs (dynamic INT8), other
 * recurrent ops (float in every INT8 mode: dynamic INT8 for their MatMul/Gemm, else FP16), CNNs (static INT8 with
 * calibration data, channel pruning), MLPs (either INT8 mode), and a fixed batch dim (batchify).
 */
function suggest(model: Model, ops: ReadonlyMap<string, number>, file: string): string[] {
  const count = (...types: string[]): number => types.reduce((n, t) => n + (ops.get(t) ?? 0), 0);
  const quantized = quantizedOpTypes(model);
  if (quantized.length > 0) {
    return [`already quantized (${quantized.join(', ')}): quantize the FP32 original instead; compare both with model-opt benchmark`];
  }
  const converted = convertedModelKind(model);
  if (converted !== undefined) {
    return [`${converted.replace(/^a /, '')}: quantize the FP32 original instead; compare both with model-opt benchmark`];
  }
  const out: string[] = [];
  const recurrent = count('LSTM', 'GRU', 'RNN');
  // int8-dynamic quantizes an LSTM whose W and R are constants (not graph inputs).
  const lstms = model.graph.nodes.filter(
    (n) => n.opType === 'LSTM' && [1, 2].every((i) => n.inputs[i] && model.graph.constantTensor(n.inputs[i]!) !== undefined),
  ).length;
  const transformer = count('LayerNormalization', 'com.microsoft.Attention', 'com.microsoft.MultiHeadAttention', 'com.microsoft.SkipLayerNormalization');
  const convs = count('Conv', 'ConvTranspose');
  const matmuls = count('MatMul', 'Gemm');
  // Without data, the check after int8-dynamic runs on random inputs and needs sizes for symbolic
  // non-batch dims (a sequence length): name them.
  const symbolic = [
    ...new Set(
      model.graph.inputs
        .filter((v) => !v.initializer)
        .flatMap((v) => {
          const shape = (v.type as { shape?: Dim[] } | undefined)?.shape ?? [];
          return shape.slice(1).filter((d): d is string => typeof d === 'string' && d !== '');
        }),
    ),
  ];
  const shapeFlag = symbolic.length > 0 ? ` ${symbolic.map((d) => `--shape ${d}=${SUGGESTED_DIM}`).join(' ')}` : '';
  if (lstms + transformer > 0) {
    const what = [lstms ? `${lstms} LSTM(s)` : '', transformer ? 'transformer ops' : ''].filter(Boolean).join(' and ');
    out.push(`${what}: model-opt quantize ${file} -o out.onnx --mode int8-dynamic${shapeFlag} (no data needed; add --measure-speed to time it against FP32)`);
  } else if (recurrent > 0) {
    // GRU and RNN have no integer kernel in onnxruntime (nor an LSTM with weights fed as inputs):
    // INT8 reaches only the MatMul/Gemm around them.
    out.push(
      matmuls > 0
        ? `${recurrent} recurrent op(s) INT8 leaves float (GRU/RNN have no integer kernel; an LSTM needs constant weights) and ${matmuls} MatMul/Gemm: model-opt quantize ${file} -o out.onnx --mode int8-dynamic${shapeFlag} quantizes the MatMul/Gemm`
        : `${recurrent} recurrent op(s) INT8 leaves float (GRU/RNN have no integer kernel; an LSTM needs constant weights): model-opt quantize ${file} -o out.onnx --mode fp16 stores its weights in half the bytes`,
    );
  } else if (convs > 0) {
    const hard = count('HardSwish', 'HardSigmoid');
    if (hard > 0) {
      out.push(
        `CNN with ${hard} HardSwish/HardSigmoid (no int8 form in onnxruntime, fused for free into FP32 convs): model-opt quantize ${file} -o out.onnx --calibration-data calib.npz --measure-speed (static INT8; times it against FP32)`,
      );
    } else {
      out.push(
        `CNN (${convs} conv(s)): model-opt quantize ${file} -o out.onnx --calibration-data calib.npz --measure-speed (static INT8, 100 representative inputs; times it against FP32)`,
      );
    }
    out.push(`a smaller dense model: model-opt prune ${file} -o slim.onnx --pattern channel --sparsity 0.3, then model-opt distill to recover accuracy`);
  } else if (matmuls > 0) {
    out.push(`MatMul/Gemm model: model-opt quantize ${file} -o out.onnx --mode int8-dynamic${shapeFlag} (no data), or static INT8 with --calibration-data`);
  }
  const fixed = model.graph.fixedBatchInput();
  // A recurrent model's dim 0 is usually time (layout 0), not a batch.
  if (fixed && recurrent === 0) {
    out.push(
      `batch dim fixed at ${fixed.size} (input '${fixed.input.name}'): model-opt batchify ${file} -o dynamic.onnx to batch requests or sweep batch sizes`,
    );
  }
  return out;
}

function describeIo(value: { name: string; type?: unknown }): IoDescription {
  const type = value.type as { kind?: string; elemType?: number; shape?: Dim[] } | undefined;
  if (!type || (type.kind !== undefined && type.kind !== 'tensor')) {
    return { name: value.name, dtype: type?.kind ?? 'unknown', shape: null };
  }
  return { name: value.name, dtype: dtypeName(type.elemType ?? DataType.UNDEFINED), shape: type.shape ? [...type.shape] : null };
}

/** Initializers of every graph plus the tensors held by Constant nodes ('value' attribute). */
function collectWeights(graphs: Graph[]): Tensor[] {
  const out: Tensor[] = [];
  for (const g of graphs) {
    out.push(...g.initializers);
    for (const node of g.nodes) {
      const t = constantNodeTensor(node);
      if (t) out.push(t);
    }
  }
  return out;
}

function constantNodeTensor(node: Node): Tensor | undefined {
  if (node.opType !== 'Constant' || (node.domain !== '' && node.domain !== 'ai.onnx')) return undefined;
  return node.getTensor('value');
}

function countZeros(tensor: Tensor): number {
  const data = tensor.data as TypedArray;
  let zeros = 0;
  // float16/bfloat16 are stored as bits: +0 and -0 are 0x0000 and 0x8000 in both.
  const bits = tensor.dtype === DataType.FLOAT16 || tensor.dtype === DataType.BFLOAT16;
  for (let i = 0; i < data.length; i++) {
    const v = data[i] as number;
    if (bits ? (v & 0x7fff) === 0 : v === 0) zeros += 1;
  }
  return zeros;
}

function fileSize(file: string): number | null {
  try {
    return fs.statSync(file).size;
  } catch {
    return null;
  }
}

/** Loads the model in onnxruntime; `onWarning` hears what the runner works around (a crashing optimizer it disables). */
async function checkRuntimeLoad(file: string, onWarning: (message: string) => void): Promise<InspectReport['runtime']> {
  const { createRunner } = await import('../runtime/index.js');
  const start = performance.now();
  try {
    const runner = await createRunner(file, { intraOpThreads: 1, onWarning });
    const loadMs = performance.now() - start;
    await runner.release();
    return { loads: true, loadMs };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { loads: false, error: message.split('\n')[0] };
  }
}

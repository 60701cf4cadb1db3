/**
 * Model and model-local functions. A function body is a Graph (inputs/outputs as Values, no
 * types unless value_info gives them), so passes navigate it like any graph.
 * Imports graph, tensor and types only.
 */
import { Graph, type Attribute, attributeGraphs, visitGraphs, type Node } from './graph.js';
import type { StringEntry } from './tensor.js';

export interface OpsetImport {
  domain: string;
  version: number;
}

export class ModelFunction {
  name: string;
  domain: string;
  overload?: string;
  /** Body: inputs/outputs are the function's formal parameters. */
  graph: Graph;
  /** Attribute parameters without defaults (FunctionProto.attribute). */
  attributeNames: string[] = [];
  /** Attribute parameters with defaults (FunctionProto.attribute_proto). */
  attributeDefaults: Attribute[] = [];
  opsetImports: OpsetImport[] = [];
  docString?: string;
  metadataProps?: StringEntry[];
  serializerState?: unknown;

  constructor(name: string, domain: string, graph: Graph = new Graph(name)) {
    this.name = name;
    this.domain = domain;
    this.graph = graph;
  }

  clone(): ModelFunction {
    const f = new ModelFunction(this.name, this.domain, this.graph.clone());
    f.overload = this.overload;
    f.attributeNames = [...this.attributeNames];
    f.attributeDefaults = this.attributeDefaults.map((a) => ({ ...a, value: structuredCloneAttr(a) }));
    f.opsetImports = this.opsetImports.map((o) => ({ ...o }));
    f.docString = this.docString;
    f.metadataProps = this.metadataProps?.map((e) => ({ ...e }));
    f.serializerState = this.serializerState;
    return f;
  }
}

function structuredCloneAttr(a: Attribute): Attribute['value'] {
  if (attributeGraphs(a).length > 0) {
    const gs = attributeGraphs(a).map((g) => g.clone());
    return Array.isArray(a.value) ? gs : gs[0];
  }
  const v = a.value;
  if (v === undefined) return v;
  if (typeof v === 'object' && v !== null && 'clone' in v && typeof (v as { clone: unknown }).clone === 'function') {
    return (v as { clone(): Attribute['value'] }).clone();
  }
  return structuredClone(v);
}

export class Model {
  irVersion: number;
  opsetImports: OpsetImport[];
  producerName?: string;
  producerVersion?: string;
  domain?: string;
  modelVersion?: number;
  docString?: string;
  graph: Graph;
  functions: ModelFunction[] = [];
  metadataProps: StringEntry[] = [];
  /**
   * TrainingInfoProto and DeviceConfigurationProto entries, kept verbatim (as the serializer
   * decoded them) and written back unchanged; the IR does not interpret them.
   */
  trainingInfo: unknown[] = [];
  deviceConfigurations: unknown[] = [];
  serializerState?: unknown;

  constructor(graph: Graph, opsetImports: OpsetImport[] = [{ domain: '', version: 17 }], irVersion = 8) {
    this.graph = graph;
    this.opsetImports = opsetImports;
    this.irVersion = irVersion;
  }

  /** Opset version imported for a domain ('' and 'ai.onnx' are the same domain). */
  opsetVersion(domain = ''): number | undefined {
    const d = domain === 'ai.onnx' ? '' : domain;
    return this.opsetImports.find((o) => (o.domain === 'ai.onnx' ? '' : o.domain) === d)?.version;
  }

  /** The model-local function a node calls, if any. */
  functionFor(node: Node): ModelFunction | undefined {
    return this.functions.find((f) => f.name === node.opType && f.domain === node.domain && (f.overload ?? '') === (node.overload ?? ''));
  }

  /** Every node of the main graph, its subgraphs and the function bodies. */
  allNodes(): Node[] {
    const out: Node[] = [];
    visitGraphs(this.graph, (g) => out.push(...g.nodes));
    for (const f of this.functions) visitGraphs(f.graph, (g) => out.push(...g.nodes));
    return out;
  }

  /** Deep copy: editing the copy never touches this model. */
  clone(): Model {
    const m = new Model(
      this.graph.clone(),
      this.opsetImports.map((o) => ({ ...o })),
      this.irVersion,
    );
    m.producerName = this.producerName;
    m.producerVersion = this.producerVersion;
    m.domain = this.domain;
    m.modelVersion = this.modelVersion;
    m.docString = this.docString;
    m.functions = this.functions.map((f) => f.clone());
    m.metadataProps = this.metadataProps.map((e) => ({ ...e }));
    m.trainingInfo = this.trainingInfo;
    m.deviceConfigurations = this.deviceConfigurations;
    m.serializerState = this.serializerState;
    return m;
  }
}

/** Ops that carry quantized data: a graph with any of them was quantized already (QDQ, QOperator or dynamic). */
const QUANTIZED_OPS = new Set([
  'QuantizeLinear',
  'DequantizeLinear',
  'DynamicQuantizeLinear',
  'MatMulInteger',
  'ConvInteger',
  'QLinearConv',
  'QLinearMatMul',
  'com.microsoft.QGemm',
  'com.microsoft.QLinearConv',
  'com.microsoft.QLinearAdd',
  'com.microsoft.QAttention',
  'com.microsoft.DynamicQuantizeLSTM',
  'com.microsoft.DynamicQuantizeMatMul',
  'com.microsoft.MatMulIntegerToFloat',
  'com.microsoft.QuantizeLinear',
  'com.microsoft.DequantizeLinear',
]);

/** The quantized op types of `model` (domain-qualified for com.microsoft), each once, subgraphs included. */
export function quantizedOpTypes(model: Model): string[] {
  const found = new Set<string>();
  for (const node of model.allNodes()) {
    const key = node.domain === 'com.microsoft' ? `com.microsoft.${node.opType}` : node.domain === '' || node.domain === 'ai.onnx' ? node.opType : undefined;
    if (key && QUANTIZED_OPS.has(key)) found.add(key);
  }
  return [...found];
}

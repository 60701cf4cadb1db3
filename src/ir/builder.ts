/**
 * GraphBuilder: makes models in code (fixtures, tests, exporters).
 *   const b = new GraphBuilder({ opset: 17 });
 *   const x = b.input('x', DataType.FLOAT, ['N', 4]);
 *   const w = b.initializer('w', DataType.FLOAT, [4, 2], Float32Array.from([...]));
 *   const y = b.node('MatMul', [x, w]);
 *   b.output(y, DataType.FLOAT, ['N', 2]);
 *   const model = b.build();
 * Imports the IR only.
 */
import type { DataType, TensorData, TypedArray } from './dtype.js';
import { Graph, type AttributeInput, type Value } from './graph.js';
import { Model, type OpsetImport } from './model.js';
import { Tensor } from './tensor.js';
import type { Dim, ValueType } from './types.js';

export interface GraphBuilderOptions {
  /** Default-domain opset version (default 17). */
  opset?: number;
  /** Extra opset imports, e.g. { 'com.microsoft': 1 }. */
  opsets?: Record<string, number>;
  irVersion?: number;
  graphName?: string;
  producerName?: string;
  producerVersion?: string;
}

export interface NodeOptions {
  name?: string;
  domain?: string;
  /** Number of outputs (default 1), or their names. */
  outputs?: number | string[];
}

export class GraphBuilder {
  readonly graph: Graph;
  private readonly options: GraphBuilderOptions;
  private readonly nodeNames = new Set<string>();

  constructor(options: GraphBuilderOptions = {}) {
    this.options = options;
    this.graph = new Graph(options.graphName ?? 'main');
  }

  input(name: string, dtype: DataType, shape?: Dim[]): Value {
    return this.graph.addInput(name, { kind: 'tensor', elemType: dtype, shape: shape ? [...shape] : undefined });
  }

  initializer(name: string, dtype: DataType, dims: number[], data: TypedArray | string[]): Value {
    return this.graph.addInitializer(Tensor.fromData(name, { dtype, dims, data }));
  }

  /** Add an initializer from TensorData. */
  tensor(name: string, td: TensorData): Value {
    return this.graph.addInitializer(Tensor.fromData(name, td));
  }

  /** A Constant node holding `td`; returns its output. */
  constant(name: string, td: TensorData): Value {
    const node = this.graph.addNode({ opType: 'Constant', name: this.graph.uniqueName(`${name}_const`), outputs: [name] });
    node.setAttr('value', Tensor.fromData(name, td));
    return node.outputs[0]!;
  }

  /** Add a node; returns its single output, or all outputs when `outputs` asks for more. */
  node(
    opType: string,
    inputs: (Value | null)[],
    attributes: Record<string, AttributeInput> | undefined,
    options: NodeOptions & { outputs: number | string[] },
  ): Value[];
  node(opType: string, inputs: (Value | null)[], attributes?: Record<string, AttributeInput>, options?: NodeOptions): Value;
  node(opType: string, inputs: (Value | null)[], attributes: Record<string, AttributeInput> = {}, options: NodeOptions = {}): Value | Value[] {
    const outs = options.outputs ?? 1;
    const name = options.name ?? this.uniqueNodeName(opType.toLowerCase());
    const outputNames =
      typeof outs === 'number' ? Array.from({ length: outs }, (_, i) => this.graph.uniqueName(outs === 1 ? `${name}_out` : `${name}_out${i}`)) : outs;
    const node = this.graph.addNode({ opType, inputs, outputs: outputNames, attributes, name, domain: options.domain });
    return options.outputs === undefined ? node.outputs[0]! : [...node.outputs];
  }

  /**
   * A node name not yet used in this graph. onnxruntime rejects two nodes with the same name, and
   * node names live apart from value names, so Graph.uniqueName alone does not guarantee this.
   */
  private uniqueNodeName(base: string): string {
    const taken = (n: string): boolean => this.nodeNames.has(n) || this.graph.value(n) !== undefined;
    let name = base;
    for (let i = 1; taken(name); i++) name = `${base}_${i}`;
    this.nodeNames.add(name);
    return name;
  }

  /** Mark a value as graph output, giving its type (defaults to the value's known type). */
  output(value: Value, dtype?: DataType, shape?: Dim[]): Value {
    const type: ValueType | undefined = dtype !== undefined ? { kind: 'tensor', elemType: dtype, shape: shape ? [...shape] : undefined } : value.type;
    this.graph.addOutput(value, type);
    return value;
  }

  build(): Model {
    const opsets: OpsetImport[] = [{ domain: '', version: this.options.opset ?? 17 }];
    for (const [domain, version] of Object.entries(this.options.opsets ?? {})) opsets.push({ domain, version });
    const model = new Model(this.graph, opsets, this.options.irVersion ?? 8);
    model.producerName = this.options.producerName ?? 'model-opt';
    if (this.options.producerVersion !== undefined) model.producerVersion = this.options.producerVersion;
    return model;
  }
}

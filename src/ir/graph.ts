/**
 * The graph core: Value, Node, Graph and attributes, with use-def links (Value.producer,
 * Value.consumers) kept current by every editing method, so passes never search by name.
 * Subgraphs (If/Loop/Scan bodies) are Graphs owned by a node attribute; names a subgraph does not
 * define resolve to Values of the enclosing graphs, which then list the subgraph node as consumer.
 * Imports dtype, tensor, types and errors only (no protobuf).
 */
import { DataType } from './dtype.js';
import { Tensor, type StringEntry } from './tensor.js';
import { cloneType, type ValueType } from './types.js';
import { InputError, UsageError } from '../errors.js';

/** AttributeProto.AttributeType numbers. */
export const AttributeType = {
  UNDEFINED: 0,
  FLOAT: 1,
  INT: 2,
  STRING: 3,
  TENSOR: 4,
  GRAPH: 5,
  FLOATS: 6,
  INTS: 7,
  STRINGS: 8,
  TENSORS: 9,
  GRAPHS: 10,
  SPARSE_TENSOR: 11,
  SPARSE_TENSORS: 12,
  TYPE_PROTO: 13,
  TYPE_PROTOS: 14,
} as const;
export type AttributeType = (typeof AttributeType)[keyof typeof AttributeType];

/** A SparseTensorProto: values [NNZ], indices [NNZ] or [NNZ, rank], dense dims. */
export interface SparseTensor {
  values: Tensor;
  indices: Tensor;
  dims: number[];
  serializerState?: unknown;
}

/**
 * Attribute values by type: FLOAT number, INT bigint (int64 kept exact), STRING bytes,
 * TENSOR Tensor, GRAPH Graph, SPARSE_TENSOR SparseTensor, TYPE_PROTO ValueType, and arrays of
 * those for the plural types. undefined for references (refAttrName) inside functions.
 */
export type AttributeValue =
  | number
  | bigint
  | Uint8Array
  | Tensor
  | Graph
  | SparseTensor
  | ValueType
  | number[]
  | bigint[]
  | Uint8Array[]
  | Tensor[]
  | Graph[]
  | SparseTensor[]
  | ValueType[]
  | undefined;

export interface Attribute {
  name: string;
  /** Effective type (inferred from the value field when the file left it out). */
  type: number;
  value: AttributeValue;
  /** Inside a function body: the function attribute this one refers to. */
  refAttrName?: string;
  docString?: string;
  serializerState?: unknown;
}

/** What `setAttr` accepts; plain numbers/strings are converted (ints to bigint, strings to UTF-8). */
export type AttributeInput = number | bigint | string | boolean | Tensor | Graph | number[] | bigint[] | string[] | Tensor[] | Graph[] | Attribute;

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();

/**
 * Attributes that the ONNX operator specs declare as FLOAT (or FLOATS) wherever they appear, so a
 * whole JavaScript number given for them (Gemm `beta: 2`, LeakyRelu `alpha: 1`) is still written as
 * a float; onnxruntime rejects an INT there.
 */
const FLOAT_ATTRIBUTES = new Set([
  'alpha',
  'beta',
  'gamma',
  'epsilon',
  'momentum',
  'lambd',
  'bias',
  'ratio',
  'spatial_scale',
  'extrapolation_value',
  'cubic_coeff_a',
  'max',
  'min',
  'scales',
  'threshold',
]);

/** Build an attribute, inferring its type; integral numbers become INT unless `type` says FLOAT. */
export function makeAttribute(name: string, value: AttributeInput, type?: number): Attribute {
  if (typeof value === 'object' && value !== null && 'name' in value && 'type' in value && !(value instanceof Tensor) && !(value instanceof Graph)) {
    return { ...(value as Attribute), name };
  }
  const T = AttributeType;
  if (typeof value === 'boolean') return { name, type: T.INT, value: value ? 1n : 0n };
  if (typeof value === 'bigint') return { name, type: type ?? T.INT, value: type === T.FLOAT ? Number(value) : value };
  if (typeof value === 'number') {
    const t = type ?? (Number.isInteger(value) && !FLOAT_ATTRIBUTES.has(name) ? T.INT : T.FLOAT);
    return { name, type: t, value: t === T.INT ? BigInt(value) : value };
  }
  if (typeof value === 'string') return { name, type: T.STRING, value: utf8Encoder.encode(value) };
  if (value instanceof Tensor) return { name, type: T.TENSOR, value };
  if (value instanceof Graph) return { name, type: T.GRAPH, value };
  if (Array.isArray(value)) {
    const arr = value as unknown[];
    if (type === T.FLOATS) return { name, type, value: arr.map(Number) };
    if (type === T.INTS) return { name, type, value: arr.map((v) => BigInt(v as number)) };
    if (arr.length === 0) return { name, type: type ?? T.INTS, value: [] as bigint[] };
    const first = arr[0];
    if (typeof first === 'string') return { name, type: T.STRINGS, value: (arr as string[]).map((s) => utf8Encoder.encode(s)) };
    if (first instanceof Tensor) return { name, type: T.TENSORS, value: arr as Tensor[] };
    if (first instanceof Graph) return { name, type: T.GRAPHS, value: arr as Graph[] };
    if (typeof first === 'bigint') return { name, type: T.INTS, value: arr as bigint[] };
    const allInt = (arr as number[]).every((v) => Number.isInteger(v)) && !FLOAT_ATTRIBUTES.has(name);
    return allInt ? { name, type: T.INTS, value: (arr as number[]).map((v) => BigInt(v)) } : { name, type: T.FLOATS, value: arr as number[] };
  }
  throw new UsageError(`attribute '${name}': unsupported value`);
}

export class Value {
  name: string;
  type?: ValueType;
  docString?: string;
  metadataProps?: StringEntry[];
  /** The node that computes this value; null for graph inputs, initializers and outer references. */
  producer: Node | null = null;
  /** Dense initializer backing this value (the same Tensor object as in graph.initializers). */
  initializer?: Tensor;
  /** Sparse initializer backing this value. */
  sparseInitializer?: SparseTensor;
  /** The graph whose scope defines this value. */
  graph: Graph;
  serializerState?: unknown;
  /** @internal one entry per input slot that reads this value. */
  readonly _uses: { node: Node; index: number }[] = [];

  constructor(graph: Graph, name: string, type?: ValueType) {
    this.graph = graph;
    this.name = name;
    this.type = type;
  }

  /** Nodes reading this value (each once), including nodes inside subgraphs. */
  get consumers(): readonly Node[] {
    const seen = new Set<Node>();
    for (const u of this._uses) seen.add(u.node);
    return [...seen];
  }

  /** Every (node, input index) that reads this value. */
  uses(): readonly { node: Node; index: number }[] {
    return [...this._uses];
  }

  isGraphInput(): boolean {
    return this.graph.inputs.includes(this);
  }

  isGraphOutput(): boolean {
    return this.graph.outputs.includes(this);
  }

  /** Constant data: the initializer, or the value attribute of a Constant producer. */
  constantTensor(): Tensor | undefined {
    return this.graph.constantTensor(this);
  }

  /** Rename, keeping the graph's name table right; throws if the name is taken in scope. */
  rename(newName: string): void {
    if (newName === this.name) return;
    if (this.graph.value(newName)) throw new UsageError(`cannot rename '${this.name}' to '${newName}': name in use`);
    this.graph._unregister(this);
    this.name = newName;
    if (this.initializer) this.initializer.name = newName;
    if (this.sparseInitializer) this.sparseInitializer.values.name = newName;
    this.graph._register(this);
  }
}

export class Node {
  name: string;
  opType: string;
  domain: string;
  /** Model-local function overload (NodeProto.overload). */
  overload?: string;
  docString?: string;
  metadataProps?: StringEntry[];
  readonly attributes = new Map<string, Attribute>();
  graph: Graph;
  serializerState?: unknown;
  private _inputs: (Value | null)[] = [];
  private _outputs: Value[] = [];

  constructor(graph: Graph, opType: string, name = '', domain = '') {
    this.graph = graph;
    this.opType = opType;
    this.name = name;
    this.domain = domain;
  }

  /** Inputs in order; null marks an omitted optional input. Edit with setInput/replaceInput. */
  get inputs(): readonly (Value | null)[] {
    return this._inputs;
  }

  /** Outputs in order; a Value named '' marks an omitted optional output. */
  get outputs(): readonly Value[] {
    return this._outputs;
  }

  setInput(index: number, value: Value | null): void {
    this.unlinkInput(index);
    while (this._inputs.length < index) this._inputs.push(null);
    this._inputs[index] = value;
    if (value) value._uses.push({ node: this, index });
  }

  /** Append an input. */
  addInput(value: Value | null): void {
    this.setInput(this._inputs.length, value);
  }

  /** Set the whole input list. */
  setInputs(values: readonly (Value | null)[]): void {
    this.clearInputs();
    values.forEach((v, i) => this.setInput(i, v));
  }

  /** Replace every use of `oldValue` among this node's inputs. */
  replaceInput(oldValue: Value, newValue: Value | null): void {
    this._inputs.forEach((v, i) => {
      if (v === oldValue) this.setInput(i, newValue);
    });
  }

  /** Drop trailing omitted inputs and every link (used when removing the node). */
  clearInputs(): void {
    for (let i = 0; i < this._inputs.length; i++) this.unlinkInput(i);
    this._inputs = [];
  }

  /** Drops the use record of input slot `index` from the value it reads. */
  private unlinkInput(index: number): void {
    const old = this._inputs[index];
    if (!old) return;
    const k = old._uses.findIndex((u) => u.node === this && u.index === index);
    if (k >= 0) old._uses.splice(k, 1);
  }

  /** @internal Attach an output Value (sets its producer). */
  _addOutput(value: Value): void {
    value.producer = this;
    this._outputs.push(value);
  }

  /** @internal */
  _setOutputs(values: Value[]): void {
    for (const v of this._outputs) if (v.producer === this) v.producer = null;
    this._outputs = [];
    for (const v of values) this._addOutput(v);
  }

  /** Add a new output Value with a name unique in the model scope (or the given name). */
  addOutput(name?: string, type?: ValueType): Value {
    const v = this.graph.createValue(name ?? this.graph.uniqueName(`${this.name || this.opType}_out`), type);
    this._addOutput(v);
    return v;
  }

  // ---- attributes -------------------------------------------------------------------------------

  attr(name: string): Attribute | undefined {
    return this.attributes.get(name);
  }

  hasAttr(name: string): boolean {
    return this.attributes.has(name);
  }

  getInt(name: string, fallback?: number): number {
    const a = this.attributes.get(name);
    if (!a || a.value === undefined) return this.missing(name, fallback);
    if (typeof a.value === 'bigint') return Number(a.value);
    if (typeof a.value === 'number') return a.value;
    throw this.wrongType(name, 'int');
  }

  getBigInt(name: string, fallback?: bigint): bigint {
    const a = this.attributes.get(name);
    if (!a || a.value === undefined) return this.missing(name, fallback);
    if (typeof a.value === 'bigint') return a.value;
    throw this.wrongType(name, 'int');
  }

  getFloat(name: string, fallback?: number): number {
    const a = this.attributes.get(name);
    if (!a || a.value === undefined) return this.missing(name, fallback);
    if (typeof a.value === 'number') return a.value;
    if (typeof a.value === 'bigint') return Number(a.value);
    throw this.wrongType(name, 'float');
  }

  getInts(name: string, fallback?: number[]): number[] {
    const a = this.attributes.get(name);
    if (!a || a.value === undefined) return this.missing(name, fallback);
    if (Array.isArray(a.value) && (a.value.length === 0 || typeof a.value[0] === 'bigint' || typeof a.value[0] === 'number')) {
      return (a.value as (bigint | number)[]).map(Number);
    }
    throw this.wrongType(name, 'ints');
  }

  getFloats(name: string, fallback?: number[]): number[] {
    return this.getInts(name, fallback);
  }

  getString(name: string, fallback?: string): string {
    const a = this.attributes.get(name);
    if (!a || a.value === undefined) return this.missing(name, fallback);
    if (a.value instanceof Uint8Array) return utf8Decoder.decode(a.value);
    throw this.wrongType(name, 'string');
  }

  getStrings(name: string, fallback?: string[]): string[] {
    const a = this.attributes.get(name);
    if (!a || a.value === undefined) return this.missing(name, fallback);
    if (Array.isArray(a.value) && (a.value.length === 0 || a.value[0] instanceof Uint8Array)) {
      return (a.value as Uint8Array[]).map((b) => utf8Decoder.decode(b));
    }
    throw this.wrongType(name, 'strings');
  }

  getTensor(name: string): Tensor | undefined {
    const v = this.attributes.get(name)?.value;
    return v instanceof Tensor ? v : undefined;
  }

  getGraph(name: string): Graph | undefined {
    const v = this.attributes.get(name)?.value;
    return v instanceof Graph ? v : undefined;
  }

  /** Set (or replace, keeping its position) an attribute. Graph values get this node as owner. */
  setAttr(name: string, value: AttributeInput, type?: number): Attribute {
    const attr = makeAttribute(name, value, type);
    for (const g of attributeGraphs(attr)) g._attach(this);
    this.attributes.set(name, attr);
    return attr;
  }

  removeAttr(name: string): boolean {
    return this.attributes.delete(name);
  }

  /** Subgraphs held by this node's attributes (If branches, Loop/Scan bodies). */
  subgraphs(): Graph[] {
    const out: Graph[] = [];
    for (const a of this.attributes.values()) out.push(...attributeGraphs(a));
    return out;
  }

  private missing<T>(name: string, fallback: T | undefined): T {
    if (fallback !== undefined) return fallback;
    throw new InputError(`node '${this.name || this.opType}': missing attribute '${name}'`);
  }

  private wrongType(name: string, want: string): InputError {
    return new InputError(`node '${this.name || this.opType}': attribute '${name}' is not ${want}`);
  }
}

export function attributeGraphs(a: Attribute): Graph[] {
  if (a.value instanceof Graph) return [a.value];
  if (Array.isArray(a.value) && a.value.length > 0 && a.value[0] instanceof Graph) return a.value as Graph[];
  return [];
}

/** Spec for Graph.addNode / insertBefore / insertAfter. */
export interface NodeSpec {
  opType: string;
  inputs?: readonly (Value | null)[];
  /** Output names, or a count of outputs to create with unique names (default 1). */
  outputs?: readonly string[] | number;
  attributes?: Record<string, AttributeInput>;
  name?: string;
  domain?: string;
}

export interface QuantizationAnnotation {
  tensorName: string;
  quantParameterTensorNames: StringEntry[];
}

export class Graph {
  name: string;
  docString?: string;
  metadataProps?: StringEntry[];
  inputs: Value[] = [];
  outputs: Value[] = [];
  /** Values listed in value_info, in file order (type info for intermediate values). */
  valueInfo: Value[] = [];
  quantizationAnnotations: QuantizationAnnotation[] = [];
  /** For a subgraph: the node whose attribute holds it. */
  parentNode: Node | null = null;
  serializerState?: unknown;
  private _nodes: Node[] = [];
  private _initializers: Value[] = [];
  private _sparseInitializers: Value[] = [];
  private readonly _values = new Map<string, Value>();

  constructor(name = '') {
    this.name = name;
  }

  /** The enclosing graph for a subgraph. */
  get parent(): Graph | null {
    return this.parentNode?.graph ?? null;
  }

  /** The outermost graph. */
  get root(): Graph {
    let g: Graph = this;
    while (g.parent) g = g.parent;
    return g;
  }

  get nodes(): readonly Node[] {
    return this._nodes;
  }

  /** Initializer tensors in file order. */
  get initializers(): readonly Tensor[] {
    return this.initializerValues.map((v) => v.initializer!);
  }

  /** Values backed by an initializer, in file order (a value whose initializer was cleared drops out). */
  get initializerValues(): readonly Value[] {
    return this._initializers.filter((v) => v.initializer !== undefined);
  }

  get sparseInitializers(): readonly SparseTensor[] {
    return this._sparseInitializers.filter((v) => v.sparseInitializer !== undefined).map((v) => v.sparseInitializer!);
  }

  /** @internal */
  _attach(node: Node): void {
    this.parentNode = node;
    const root = node.graph.root;
    root._graphsCache = undefined;
    root._nodeNames = undefined;
  }

  /** @internal Graph tree of a root, cached for name lookups; may list detached graphs (harmless). */
  _graphsCache: Graph[] | undefined;
  /** @internal Node names in the tree (may hold stale names, which only makes generated names skip them). */
  _nodeNames: Set<string> | undefined;
  private _nameCounters = new Map<string, number>();

  private treeGraphs(): Graph[] {
    const root = this.root;
    if (!root._graphsCache) {
      const list: Graph[] = [];
      visitGraphs(root, (g) => list.push(g));
      root._graphsCache = list;
    }
    return root._graphsCache;
  }

  /** @internal */
  _register(v: Value): void {
    if (v.name !== '') this._values.set(v.name, v);
  }

  /** @internal */
  _unregister(v: Value): void {
    if (this._values.get(v.name) === v) this._values.delete(v.name);
  }

  /** A value defined in this graph (not searching enclosing graphs). */
  localValue(name: string): Value | undefined {
    return this._values.get(name);
  }

  /** Resolve a name as ONNX scoping does: this graph, then enclosing graphs outward. */
  value(name: string): Value | undefined {
    for (let g: Graph | null = this; g; g = g.parent) {
      const v = g._values.get(name);
      if (v) return v;
    }
    return undefined;
  }

  /** All values defined in this graph. */
  values(): IterableIterator<Value> {
    return this._values.values();
  }

  /** Create an unattached value in this graph's scope (the name must be free here). */
  createValue(name: string, type?: ValueType): Value {
    if (name !== '' && this._values.has(name)) throw new UsageError(`graph '${this.name}': value '${name}' already exists`);
    const v = new Value(this, name, type);
    this._register(v);
    return v;
  }

  /** A name not used by any value in the whole model graph tree (root and all subgraphs). */
  uniqueName(base: string): string {
    const graphs = this.treeGraphs();
    const used = (n: string): boolean => graphs.some((g) => g._values.has(n));
    if (!used(base)) return base;
    // Resume numbering where the last call for this base stopped, so repeated calls stay cheap.
    const counters = this.root._nameCounters;
    for (let i = counters.get(base) ?? 1; ; i++) {
      const n = `${base}_${i}`;
      if (!used(n)) {
        counters.set(base, i + 1);
        return n;
      }
    }
  }

  addInput(name: string, type?: ValueType): Value {
    const v = this.createValue(name, type);
    this.inputs.push(v);
    return v;
  }

  addOutput(value: Value, type?: ValueType): void {
    if (type) value.type = type;
    this.outputs.push(value);
  }

  /** Add a dense initializer; the returned Value carries it. Replaces nothing: the name must be free. */
  addInitializer(tensor: Tensor): Value {
    const existing = this._values.get(tensor.name);
    if (existing && !existing.producer && !existing.initializer && existing.isGraphInput()) {
      // Initializer that is also a graph input (IR < 4 style): attach to the input value.
      existing.initializer = tensor;
      this._initializers.push(existing);
      return existing;
    }
    const v = this.createValue(tensor.name);
    v.initializer = tensor;
    this._initializers.push(v);
    return v;
  }

  addSparseInitializer(sparse: SparseTensor): Value {
    const name = sparse.values.name;
    const existing = this._values.get(name);
    if (existing && !existing.producer && !existing.initializer && existing.isGraphInput()) {
      existing.sparseInitializer = sparse;
      this._sparseInitializers.push(existing);
      return existing;
    }
    const v = this.createValue(name);
    v.sparseInitializer = sparse;
    this._sparseInitializers.push(v);
    return v;
  }

  /** Remove an initializer (the value must have no consumers unless `force`). */
  removeInitializer(value: Value, options: { force?: boolean } = {}): void {
    if (!options.force && value._uses.length > 0) {
      throw new UsageError(`initializer '${value.name}' is still used by '${value.consumers[0]!.name || value.consumers[0]!.opType}'`);
    }
    this._initializers = this._initializers.filter((v) => v !== value);
    this._sparseInitializers = this._sparseInitializers.filter((v) => v !== value);
    value.initializer = undefined;
    value.sparseInitializer = undefined;
    if (!value.isGraphInput() && !value.isGraphOutput()) this._unregister(value);
  }

  /** Constant data of a value: its initializer, or a Constant producer's `value` tensor. */
  constantTensor(value: Value | string): Tensor | undefined {
    const v = typeof value === 'string' ? this.value(value) : value;
    if (!v) return undefined;
    if (v.initializer) {
      // An initializer that is also a graph input can be overridden at run time (IR < 4).
      return v.isGraphInput() ? undefined : v.initializer;
    }
    const p = v.producer;
    if (p && p.opType === 'Constant' && (p.domain === '' || p.domain === 'ai.onnx')) {
      const t = p.getTensor('value');
      if (t) return t;
      return constantNodeTensor(p, v.name);
    }
    return undefined;
  }

  // ---- editing ----------------------------------------------------------------------------------

  private buildNode(spec: NodeSpec): Node {
    const node = new Node(this, spec.opType, spec.name ?? '', spec.domain ?? '');
    if (!spec.name) node.name = this.uniqueNodeName(spec.opType);
    else this.root._nodeNames?.add(spec.name);
    (spec.inputs ?? []).forEach((v, i) => node.setInput(i, v));
    const outs = spec.outputs ?? 1;
    const names = typeof outs === 'number' ? Array.from({ length: outs }, () => this.uniqueName(`${node.name}_output`)) : outs;
    for (const n of names) node._addOutput(n === '' ? new Value(this, '') : this.createValue(n));
    for (const [k, a] of Object.entries(spec.attributes ?? {})) node.setAttr(k, a);
    return node;
  }

  private uniqueNodeName(base: string): string {
    const root = this.root;
    if (!root._nodeNames) {
      const names = new Set<string>();
      for (const g of this.treeGraphs()) for (const n of g._nodes) names.add(n.name);
      root._nodeNames = names;
    }
    const used = root._nodeNames;
    let name = base;
    if (used.has(name)) {
      const counters = root._nameCounters;
      let i = counters.get(`node:${base}`) ?? 1;
      while (used.has(`${base}_${i}`)) i++;
      counters.set(`node:${base}`, i + 1);
      name = `${base}_${i}`;
    }
    used.add(name);
    return name;
  }

  /** Append a node at the end. */
  addNode(spec: NodeSpec): Node {
    const node = this.buildNode(spec);
    this._nodes.push(node);
    return node;
  }

  /** Insert a new node just before `anchor` (which must be in this graph). */
  insertBefore(anchor: Node, spec: NodeSpec): Node {
    const i = this.indexOf(anchor);
    const node = this.buildNode(spec);
    this._nodes.splice(i, 0, node);
    return node;
  }

  insertAfter(anchor: Node, spec: NodeSpec): Node {
    const i = this.indexOf(anchor);
    const node = this.buildNode(spec);
    this._nodes.splice(i + 1, 0, node);
    return node;
  }

  /** @internal Append an already built node (decoder, clone). */
  _appendNode(node: Node): void {
    node.graph = this;
    this._nodes.push(node);
  }

  private indexOf(node: Node): number {
    const i = this._nodes.indexOf(node);
    if (i < 0) throw new UsageError(`node '${node.name || node.opType}' is not in graph '${this.name}'`);
    return i;
  }

  /**
   * Point every reader of `oldValue` (node inputs here and in subgraphs, graph outputs) at
   * `newValue`. Graph outputs then carry newValue's name; rename if the model interface must stay.
   */
  replaceAllUsesWith(oldValue: Value, newValue: Value): void {
    if (oldValue === newValue) return;
    for (const u of [...oldValue._uses]) u.node.setInput(u.index, newValue);
    visitGraphs(oldValue.graph, (g) => {
      g.outputs = g.outputs.map((v) => (v === oldValue ? newValue : v));
    });
  }

  /**
   * Remove a node. Its outputs must be unused (no consumers, not graph outputs) unless `force`,
   * in which case readers are left pointing at values with no producer.
   */
  removeNode(node: Node, options: { force?: boolean } = {}): void {
    const i = this.indexOf(node);
    if (!options.force) {
      for (const out of node.outputs) {
        const user = out.consumers[0];
        if (user) throw new UsageError(`cannot remove node '${node.name || node.opType}': output '${out.name}' is used by '${user.name || user.opType}'`);
        if (out.isGraphOutput()) throw new UsageError(`cannot remove node '${node.name || node.opType}': output '${out.name}' is a graph output`);
      }
    }
    this._nodes.splice(i, 1);
    node.clearInputs();
    for (const out of node.outputs) {
      out.producer = null;
      if (out._uses.length === 0 && !out.isGraphOutput()) this._unregister(out);
    }
    this.valueInfo = this.valueInfo.filter((v) => !node.outputs.includes(v) || v.isGraphOutput() || v._uses.length > 0);
  }

  /**
   * Reorder nodes so every node comes after the producers of its inputs (including outer values
   * its subgraphs read). Keeps the existing order where it is already valid. Throws InputError
   * naming a node on a cycle.
   */
  topologicalSort(): void {
    const nodes = this._nodes;
    const index = new Map(nodes.map((n, i) => [n, i]));
    const deps = new Map<Node, Set<Node>>();
    for (const n of nodes) {
      const d = new Set<Node>();
      const addDep = (v: Value | null): void => {
        if (!v || !v.producer) return;
        // Walk the producer up to a node of this graph (outer references from subgraphs).
        let p: Node | null = v.producer;
        while (p && p.graph !== this) p = p.graph.parentNode;
        if (p && p !== n && index.has(p)) d.add(p);
      };
      n.inputs.forEach(addDep);
      for (const sg of n.subgraphs()) visitGraphs(sg, (g) => g.nodes.forEach((sn) => sn.inputs.forEach(addDep)));
      deps.set(n, d);
    }
    const state = new Map<Node, 0 | 1 | 2>();
    const out: Node[] = [];
    const visit = (start: Node): void => {
      // Iterative DFS so very deep graphs do not overflow the stack.
      const stack: { node: Node; it: Iterator<Node> }[] = [{ node: start, it: deps.get(start)!.values() }];
      state.set(start, 1);
      while (stack.length) {
        const top = stack[stack.length - 1]!;
        const next = top.it.next();
        if (next.done) {
          state.set(top.node, 2);
          out.push(top.node);
          stack.pop();
          continue;
        }
        const d = next.value;
        const s = state.get(d) ?? 0;
        if (s === 1) {
          throw new InputError(`graph '${this.name}' has a cycle through node '${d.name || d.opType}'`);
        }
        if (s === 0) {
          state.set(d, 1);
          stack.push({ node: d, it: deps.get(d)!.values() });
        }
      }
    };
    for (const n of nodes) if ((state.get(n) ?? 0) === 0) visit(n);
    this._nodes = out;
  }

  /** This graph and every graph nested in its nodes' attributes, depth first. */
  allGraphs(): Graph[] {
    const out: Graph[] = [];
    visitGraphs(this, (g) => out.push(g));
    return out;
  }

  /** Nodes of this graph and of all nested subgraphs. */
  allNodes(): Node[] {
    return this.allGraphs().flatMap((g) => [...g.nodes]);
  }

  /**
   * The first fed input (no initializer) whose dim 0 is a number, and that number: the batch size
   * an export baked in. Undefined when every input's dim 0 is symbolic or unknown.
   */
  fixedBatchInput(): { input: Value; size: number } | undefined {
    for (const v of this.inputs) {
      if (v.initializer || !v.type || !('shape' in v.type)) continue;
      const d0 = v.type.shape?.[0];
      if (typeof d0 === 'number') return { input: v, size: d0 };
    }
    return undefined;
  }

  /**
   * Names every unnamed node here and in nested subgraphs `<opType>_<first output>` (unique in the
   * tree), so reports, --exclude-nodes and per-node analysis can tell nodes apart; the names are
   * stable across runs on the same model. Returns how many nodes were named.
   */
  nameUnnamedNodes(): number {
    let named = 0;
    for (const g of this.allGraphs()) {
      for (const n of g._nodes) {
        if (n.name !== '') continue;
        const output = n.outputs.find((o) => o.name !== '')?.name;
        n.name = this.uniqueNodeName(output ? `${n.opType}_${output}` : n.opType);
        named++;
      }
    }
    return named;
  }

  /** Deep copy with fresh Values/Nodes; outer references map through `outer` (else kept). */
  clone(outer?: Map<Value, Value>): Graph {
    return cloneGraph(this, outer ?? new Map());
  }
}

/** Call fn on g and every nested subgraph. */
export function visitGraphs(g: Graph, fn: (g: Graph) => void): void {
  fn(g);
  for (const n of g.nodes) for (const sg of n.subgraphs()) visitGraphs(sg, fn);
}

/** Constant nodes may carry value_float(s)/value_int(s)/value_string(s) instead of a tensor. */
function constantNodeTensor(node: Node, name: string): Tensor | undefined {
  const a = (k: string): Attribute | undefined => node.attributes.get(k);
  let t: Tensor | undefined;
  if (a('value_float')) t = Tensor.fromData(name, { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(node.getFloat('value_float')) });
  else if (a('value_floats')) {
    const f = node.getFloats('value_floats');
    t = Tensor.fromData(name, { dtype: DataType.FLOAT, dims: [f.length], data: Float32Array.from(f) });
  } else if (a('value_int')) t = Tensor.fromData(name, { dtype: DataType.INT64, dims: [], data: BigInt64Array.of(node.getBigInt('value_int')) });
  else if (a('value_ints')) {
    const v = a('value_ints')!.value as bigint[];
    t = Tensor.fromData(name, { dtype: DataType.INT64, dims: [v.length], data: BigInt64Array.from(v) });
  } else if (a('value_string')) t = Tensor.fromData(name, { dtype: DataType.STRING, dims: [], data: [node.getString('value_string')] });
  else if (a('value_strings')) {
    const s = node.getStrings('value_strings');
    t = Tensor.fromData(name, { dtype: DataType.STRING, dims: [s.length], data: s });
  }
  return t;
}

function cloneSparse(s: SparseTensor): SparseTensor {
  return { values: s.values.clone(), indices: s.indices.clone(), dims: [...s.dims], serializerState: s.serializerState };
}

function cloneAttribute(a: Attribute, map: Map<Value, Value>): Attribute {
  const copyOne = (v: unknown): unknown => {
    if (v instanceof Tensor) return v.clone();
    if (v instanceof Graph) return cloneGraph(v, map);
    if (v instanceof Uint8Array) return v.slice();
    if (v && typeof v === 'object' && 'values' in v && 'indices' in v) return cloneSparse(v as SparseTensor);
    if (v && typeof v === 'object') return structuredClone(v);
    return v;
  };
  const value = Array.isArray(a.value) ? (a.value as unknown[]).map(copyOne) : copyOne(a.value);
  return { ...a, value: value as AttributeValue };
}

function cloneGraph(src: Graph, map: Map<Value, Value>): Graph {
  const g = new Graph(src.name);
  g.docString = src.docString;
  g.metadataProps = src.metadataProps?.map((e) => ({ ...e }));
  g.serializerState = src.serializerState;
  g.quantizationAnnotations = structuredClone(src.quantizationAnnotations);
  const copyValue = (v: Value): Value => {
    let c = map.get(v);
    if (c) return c;
    c = g.createValue(v.name, v.type ? cloneType(v.type) : undefined);
    c.docString = v.docString;
    c.metadataProps = v.metadataProps?.map((e) => ({ ...e }));
    c.serializerState = v.serializerState;
    map.set(v, c);
    return c;
  };
  const resolve = (v: Value): Value => map.get(v) ?? (v.graph === src ? copyValue(v) : v);
  for (const v of src.inputs) g.inputs.push(copyValue(v));
  for (const v of src.initializerValues) {
    const c = copyValue(v);
    c.initializer = v.initializer!.clone();
    (g as unknown as { _initializers: Value[] })._initializers.push(c);
  }
  for (const v of (src as unknown as { _sparseInitializers: Value[] })._sparseInitializers) {
    const c = copyValue(v);
    c.sparseInitializer = cloneSparse(v.sparseInitializer!);
    (g as unknown as { _sparseInitializers: Value[] })._sparseInitializers.push(c);
  }
  // Outputs first so forward references inside the node list resolve to the same copies.
  for (const n of src.nodes) for (const o of n.outputs) if (o.name !== '') copyValue(o);
  for (const n of src.nodes) {
    const c = new Node(g, n.opType, n.name, n.domain);
    c.overload = n.overload;
    c.docString = n.docString;
    c.metadataProps = n.metadataProps?.map((e) => ({ ...e }));
    c.serializerState = n.serializerState;
    g._appendNode(c);
    n.inputs.forEach((v, i) => c.setInput(i, v ? resolve(v) : null));
    for (const o of n.outputs) {
      if (o.name === '') {
        const e = new Value(g, '', o.type ? cloneType(o.type) : undefined);
        c._addOutput(e);
      } else c._addOutput(copyValue(o));
    }
    for (const [k, a] of n.attributes) {
      const ca = cloneAttribute(a, map);
      for (const sg of attributeGraphs(ca)) sg._attach(c);
      c.attributes.set(k, ca);
    }
  }
  g.outputs = src.outputs.map(resolve);
  g.valueInfo = src.valueInfo.map(resolve);
  return g;
}

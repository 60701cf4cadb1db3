/**
 * A trainable view of an ONNX graph on @tensorflow/tfjs-core: float initializers (and float
 * Constant-node weights) become tf.Variables, a forward interpreter walks the model's nodes in
 * topological order through one op-handler table (./onnx-ops.ts), and the trained values are written
 * back into a clone of the Model. Values that did not change keep their original bytes, so training
 * for zero steps writes back an identical model.
 *
 * Layout: ONNX is NCHW, tfjs convolutions and pools are NHWC. Each value may hold either form (or
 * both); handlers ask for the one they need and the transpose happens at most once per value, so a
 * Conv -> BatchNormalization -> Relu -> MaxPool chain stays NHWC from end to end.
 *
 * Imports: @tensorflow/tfjs-core, ../../ir, ../../errors, ./onnx-ops, ../core/parameters.
 */
import * as tf from '@tensorflow/tfjs-core';
import { InputError, UsageError } from '../../errors.js';
import { DataType, isFloatDtype, type TensorData } from '../../ir/dtype.js';
import type { Graph, Model, Node, Tensor, Value } from '../../ir/index.js';
import { opHandler, type OpContext, type ValueEntry } from './onnx-ops.js';
import { defaultParameters, floatParameterTensor, parameterSlotKind } from '../core/parameters.js';

/** Where a variable's value lives in the ONNX model, for write-back. */
export interface VariableSource {
  /** Value (tensor) name in the main graph. */
  name: string;
  /** An initializer, or the `value` attribute of a Constant node. */
  kind: 'initializer' | 'constant-node';
  /** Trained by the optimizer (weights, biases, norm scales) or only updated in place (running stats). */
  trainable: boolean;
  /** The op types and input slots that read it, e.g. ['Conv:1']. */
  usedAs: string[];
}

export interface ForwardOptions {
  /** Training mode: BatchNormalization uses batch statistics (and updates running stats), Dropout drops. */
  training?: boolean;
  /** Values to return (default: the graph outputs), returned in ONNX (NCHW) layout. */
  fetch?: readonly string[];
  /** Seed for Dropout masks in training mode (vary it per step for fresh masks). */
  seed?: number;
  /** In training mode, keep BatchNormalization in inference form (running statistics, no updates). */
  freezeNorm?: boolean;
}

export interface ForwardResult {
  outputs: Record<string, tf.Tensor>;
  /** Running-statistics updates made in training mode; apply with `applyUpdates` after the step. */
  updates: Array<{ name: string; value: tf.Tensor }>;
}

function isDefaultDomain(node: Node): boolean {
  return node.domain === '' || node.domain === 'ai.onnx';
}

/** Float data of an IR tensor as Float32Array (copy). */
export function tensorToFloat32(t: Tensor): Float32Array {
  if (t.dtype === DataType.FLOAT) return Float32Array.from(t.data as Float32Array);
  return Float32Array.from(t.toFloat64());
}

/** An IR tensor as a tf tensor: floats as float32, integers as int32, booleans as bool. */
export function irTensorToTf(t: Tensor): tf.Tensor {
  const dims = [...t.dims];
  if (isFloatDtype(t.dtype)) return tf.tensor(tensorToFloat32(t), dims, 'float32');
  if (t.dtype === DataType.BOOL) return tf.tensor(Uint8Array.from(t.data as Uint8Array), dims, 'bool');
  if (t.dtype === DataType.STRING) throw new UsageError(`tensor '${t.name}': string tensors cannot be trained on`);
  const f = t.toFloat64();
  return tf.tensor(
    Int32Array.from(f, (x) => Math.max(-2147483648, Math.min(2147483647, x))),
    dims,
    'int32',
  );
}

/** A host tensor (dataset batch) as a tf tensor in ONNX layout. */
export function tensorDataToTf(td: TensorData): tf.Tensor {
  if (isFloatDtype(td.dtype)) {
    const data = td.data instanceof Float32Array ? td.data : Float32Array.from(td.data as ArrayLike<number>, Number);
    return tf.tensor(data, [...td.dims], 'float32');
  }
  if (td.dtype === DataType.BOOL) return tf.tensor(Uint8Array.from(td.data as Uint8Array), [...td.dims], 'bool');
  const src = td.data as ArrayLike<number | bigint>;
  const out = new Int32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = Number(src[i]);
  return tf.tensor(out, [...td.dims], 'int32');
}

/** Nodes in dependency order (Kahn), stable for graphs already sorted; the graph is not touched. */
function topologicalOrder(graph: Graph): Node[] {
  const nodes = graph.nodes;
  const pending = new Map<Node, number>();
  const readers = new Map<Node, Node[]>();
  for (const n of nodes) {
    const deps = new Set<Node>();
    for (const v of n.inputs) if (v?.producer && v.producer.graph === graph) deps.add(v.producer);
    pending.set(n, deps.size);
    for (const d of deps) {
      const list = readers.get(d) ?? [];
      list.push(n);
      readers.set(d, list);
    }
  }
  const out: Node[] = [];
  const ready = nodes.filter((n) => pending.get(n) === 0);
  while (ready.length > 0) {
    const n = ready.shift()!;
    out.push(n);
    for (const r of readers.get(n) ?? []) {
      const left = pending.get(r)! - 1;
      pending.set(r, left);
      if (left === 0) ready.push(r);
    }
  }
  if (out.length !== nodes.length) {
    const stuck = nodes.find((n) => (pending.get(n) ?? 0) > 0)!;
    throw new InputError(`graph '${graph.name}' has a cycle through node '${stuck.name || stuck.opType}'`);
  }
  return out;
}

/**
 * Functions applied inside the forward pass: to a value right after it is produced (or fed), and
 * to a variable each time a node reads it. QAT installs fake quantization here.
 */
export interface ForwardHooks {
  activations?: ReadonlyMap<string, (t: tf.Tensor) => tf.Tensor>;
  weights?: ReadonlyMap<string, (w: tf.Tensor) => tf.Tensor>;
}

export class TrainableGraph {
  /** The model this view was made from; never modified. */
  readonly model: Model;
  /** Fake quantization and similar transforms applied during forward (see ForwardHooks). */
  hooks: ForwardHooks = {};
  readonly opset: number;
  /** Every float weight and running statistic, by value name. */
  readonly variables = new Map<string, tf.Variable>();
  readonly sources = new Map<string, VariableSource>();
  private readonly constants = new Map<string, tf.Tensor>();
  private readonly nodes: readonly Node[];
  private disposed = false;

  /** `frozen`: default weights kept at their values (no variable is trained for them). */
  constructor(model: Model, options: { frozen?: ReadonlySet<string> } = {}) {
    this.model = model;
    this.opset = model.opsetVersion('') ?? 17;
    const graph = model.graph;
    const unsupported = graph.nodes.filter((n) => !isDefaultDomain(n) || !opHandler(n.opType));
    if (unsupported.length > 0) {
      const n = unsupported[0]!;
      const more = unsupported.length > 1 ? ` (and ${unsupported.length - 1} more node(s): ${[...new Set(unsupported.map((u) => u.opType))].join(', ')})` : '';
      throw new UsageError(
        `cannot train: op type '${n.domain ? `${n.domain}.` : ''}${n.opType}' of node '${n.name || '(unnamed)'}' is not supported by the training interpreter${more}`,
      );
    }
    this.nodes = topologicalOrder(graph);

    // the default trainable set is the one every backend uses (./parameters.ts)
    const parameters = defaultParameters(model, this.nodes);
    const weights = new Set(parameters.weights.filter((w) => !options.frozen?.has(w)));
    const known = new Set([...parameters.weights, ...parameters.states]);
    for (const node of this.nodes) {
      node.inputs.forEach((v, i) => {
        if (!v || !known.has(v.name)) return;
        const t = floatParameterTensor(node, i);
        if (!t || !parameterSlotKind(node, i, t)) return;
        const usedAs = `${node.opType}:${i}`;
        const src = this.sources.get(v.name);
        if (src) {
          if (!src.usedAs.includes(usedAs)) src.usedAs.push(usedAs);
          return;
        }
        this.sources.set(v.name, { name: v.name, kind: v.initializer ? 'initializer' : 'constant-node', trainable: weights.has(v.name), usedAs: [usedAs] });
      });
    }
    for (const [name, src] of this.sources) {
      const v = graph.value(name)!;
      const t = (v.initializer ?? graph.constantTensor(v))!;
      // inside tidy: the initial-value tensor is freed, the variable (never tracked by tidy) stays
      this.variables.set(
        name,
        tf.tidy(() => tf.variable(tf.tensor(tensorToFloat32(t), [...t.dims], 'float32'), src.trainable)),
      );
    }
  }

  /** The variables the optimizer updates, in a fixed order (graph order of first use). */
  trainableVariables(): Array<{ name: string; variable: tf.Variable }> {
    return [...this.sources.values()].filter((s) => s.trainable).map((s) => ({ name: s.name, variable: this.variables.get(s.name)! }));
  }

  /** Graph inputs that must be fed (inputs without an initializer). */
  inputNames(): string[] {
    return this.model.graph.inputs.filter((v) => !v.initializer).map((v) => v.name);
  }

  outputNames(): string[] {
    return this.model.graph.outputs.map((v) => v.name);
  }

  private constantFor(v: Value): tf.Tensor | undefined {
    const cached = this.constants.get(v.name);
    if (cached) return cached;
    const t = v.initializer ?? this.model.graph.constantTensor(v);
    if (!t) return undefined;
    const tensor = tf.keep(irTensorToTf(t));
    this.constants.set(v.name, tensor);
    return tensor;
  }

  /**
   * Runs the graph. Call inside tf.tidy (or a gradient function): every intermediate is a tf tensor
   * owned by the caller's scope. Feeds are in ONNX layout.
   */
  forward(feeds: Record<string, tf.Tensor>, options: ForwardOptions = {}): ForwardResult {
    if (this.disposed) throw new Error('TrainableGraph used after dispose()');
    const graph = this.model.graph;
    const fetch = options.fetch ?? this.outputNames();
    const env = new Map<string, ValueEntry>();
    const updates: ForwardResult['updates'] = [];

    // Only the nodes the fetched values depend on.
    const needed = new Set<Node>();
    const stack: Value[] = [];
    for (const name of fetch) {
      const v = graph.value(name);
      if (!v) throw new UsageError(`tensor '${name}' does not exist in the model`);
      stack.push(v);
    }
    const seen = new Set<Value>();
    while (stack.length > 0) {
      const v = stack.pop()!;
      if (seen.has(v)) continue;
      seen.add(v);
      const p = v.producer;
      if (!p || needed.has(p)) continue;
      if (this.variables.has(v.name) || (v.initializer && !v.isGraphInput())) continue;
      if (p.opType === 'Constant' && isDefaultDomain(p)) continue;
      needed.add(p);
      for (const i of p.inputs) if (i && i.name !== '') stack.push(i);
    }

    const lookup = (v: Value, node: Node): ValueEntry => {
      const e = env.get(v.name);
      if (e) return e;
      const variable = this.variables.get(v.name);
      if (variable) {
        const transform = this.hooks.weights?.get(v.name);
        return { onnx: transform ? transform(variable) : variable };
      }
      const feed = feeds[v.name];
      if (feed) {
        const hook = this.hooks.activations?.get(v.name);
        const entry = { onnx: hook ? hook(feed) : feed };
        env.set(v.name, entry);
        return entry;
      }
      const c = this.constantFor(v);
      if (c) return { onnx: c };
      if (v.isGraphInput()) throw new InputError(`model input '${v.name}' was not fed`);
      throw new Error(`node '${node.name}' reads '${v.name}', which has not been computed`);
    };

    let nodeIndex = 0;
    for (const node of this.nodes) {
      nodeIndex++;
      if (!needed.has(node)) continue;
      const ctx = makeContext(this, node, lookup, env, updates, options, nodeIndex);
      try {
        opHandler(node.opType)!.run(ctx);
        const hooks = this.hooks.activations;
        if (hooks) {
          for (const out of node.outputs) {
            const hook = hooks.get(out.name);
            const e = hook ? env.get(out.name) : undefined;
            // element-wise hooks work in either layout: no transpose needed
            if (e) env.set(out.name, e.nhwc && !e.onnx ? { nhwc: hook!(e.nhwc) } : { onnx: hook!(onnxOf(e)) });
          }
        }
      } catch (error) {
        if (error instanceof UsageError || error instanceof InputError) {
          throw new (error.constructor as typeof UsageError)(`node '${node.name || '(unnamed)'}' (${node.opType}): ${error.message}`, { cause: error });
        }
        throw new UsageError(
          `node '${node.name || '(unnamed)'}' (${node.opType}) failed in the training interpreter: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error },
        );
      }
    }

    const outputs: Record<string, tf.Tensor> = Object.create(null) as Record<string, tf.Tensor>;
    for (const name of fetch) {
      const v = graph.value(name)!;
      outputs[name] = onnxOf(lookup(v, this.nodes[0]!));
    }
    return { outputs, updates };
  }

  /** Writes running-statistics updates from a training forward into their variables (and disposes them). */
  applyUpdates(updates: ForwardResult['updates']): void {
    for (const u of updates) {
      this.variables.get(u.name)!.assign(u.value);
      u.value.dispose();
    }
  }

  /** Current values of every variable (for checkpoints and best-model snapshots). */
  snapshot(): Map<string, Float32Array> {
    const out = new Map<string, Float32Array>();
    for (const [name, v] of this.variables) out.set(name, v.dataSync() as Float32Array);
    return out;
  }

  /** Restores values taken by `snapshot` (or read from a checkpoint). */
  restore(values: ReadonlyMap<string, Float32Array>): void {
    for (const [name, v] of this.variables) {
      const data = values.get(name);
      if (!data) throw new InputError(`checkpoint has no value for variable '${name}'`);
      if (data.length !== v.size) throw new InputError(`checkpoint value for '${name}' has ${data.length} elements, the model needs ${v.size}`);
      tf.tidy(() => v.assign(tf.tensor(data, v.shape, 'float32')));
    }
  }

  /**
   * A clone of the model with the variables' current values. Tensors whose values are unchanged
   * keep their original storage, so a model trained for zero steps encodes to identical bytes.
   */
  exportModel(values: ReadonlyMap<string, Float32Array> = this.snapshot()): Model {
    const out = this.model.clone();
    const graph = out.graph;
    for (const [name, src] of this.sources) {
      const data = values.get(name);
      if (!data) continue;
      const v = graph.value(name)!;
      const t = src.kind === 'initializer' ? v.initializer! : graph.constantTensor(v)!;
      const original = t.data as Float32Array;
      let same = original.length === data.length;
      for (let i = 0; same && i < data.length; i++) if (!Object.is(original[i], data[i])) same = false;
      if (!same) t.data = Float32Array.from(data);
    }
    return out;
  }

  dispose(): void {
    if (this.disposed) return;
    for (const v of this.variables.values()) v.dispose();
    for (const c of this.constants.values()) c.dispose();
    this.variables.clear();
    this.constants.clear();
    this.disposed = true;
  }
}

/** The ONNX-layout tensor of an entry, transposing from NHWC once (cached on the entry). */
export function onnxOf(e: ValueEntry): tf.Tensor {
  if (!e.onnx) e.onnx = tf.transpose(e.nhwc!, [0, 3, 1, 2]);
  return e.onnx;
}

function makeContext(
  graph: TrainableGraph,
  node: Node,
  lookup: (v: Value, node: Node) => ValueEntry,
  env: Map<string, ValueEntry>,
  updates: ForwardResult['updates'],
  options: ForwardOptions,
  nodeIndex: number,
): OpContext {
  const entryOf = (i: number): ValueEntry | undefined => {
    const v = node.inputs[i];
    return v && v.name !== '' ? lookup(v, node) : undefined;
  };
  const irGraph = graph.model.graph;
  return {
    node,
    opset: graph.opset,
    training: options.training ?? false,
    freezeNorm: options.freezeNorm ?? false,
    seed: ((options.seed ?? 0) * 1000003 + nodeIndex * 7919) >>> 0,
    inputCount: node.inputs.length,
    has: (i) => entryOf(i) !== undefined,
    entry: entryOf,
    input(i) {
      const e = entryOf(i);
      return e ? onnxOf(e) : undefined;
    },
    required(i) {
      const e = entryOf(i);
      if (!e) throw new InputError(`input ${i} is missing`);
      return onnxOf(e);
    },
    nhwc(i) {
      const e = entryOf(i);
      if (!e) throw new InputError(`input ${i} is missing`);
      if (!e.nhwc) {
        const t = onnxOf(e);
        if (t.rank !== 4) throw new Error(`NHWC form of a rank-${t.rank} tensor`);
        e.nhwc = tf.transpose(t, [0, 2, 3, 1]);
      }
      return e.nhwc;
    },
    ints(i) {
      const v = node.inputs[i];
      if (!v || v.name === '') return undefined;
      const c = irGraph.constantTensor(v) ?? v.initializer;
      if (c) return Array.from(c.toFloat64(), Number);
      const t = onnxOf(lookup(v, node));
      return Array.from(t.dataSync() as ArrayLike<number>, Number);
    },
    variableName(i) {
      const v = node.inputs[i];
      return v && graph.variables.has(v.name) ? v.name : undefined;
    },
    update(name, value) {
      updates.push({ name, value: tf.keep(value) });
    },
    set(i, t, layout = 'onnx') {
      const out = node.outputs[i];
      if (!out || out.name === '') return;
      env.set(out.name, layout === 'nhwc' ? { nhwc: t } : { onnx: t });
    },
    setEntry(i, e) {
      const out = node.outputs[i];
      if (!out || out.name === '') return;
      env.set(out.name, e);
    },
    outputUsed(i) {
      const out = node.outputs[i];
      return !!out && out.name !== '' && (out.consumers.length > 0 || out.isGraphOutput());
    },
  };
}

/**
 * Reverse-mode differentiation over the IR: from a student (inference) model and a loss, one ONNX
 * training graph that takes the trainable weights and running statistics as inputs (with the data
 * inputs, labels and teacher outputs) and returns the loss, its terms, the student output, the
 * gradient of every trainable weight and the new running statistics. onnxruntime runs it with its
 * native kernels. Per-op rules live in ./grad-rules.ts; an op on the path from a weight to the loss
 * without a rule is named with its node before anything runs.
 * Imports: ../../ir, ../../errors, ./emitter, ./grad-rules, ./loss.
 */
import { UsageError } from '../../errors.js';
import { DataType, Graph, Model, Tensor, isTensorType, type Attribute, type Node, type ValueType } from '../../ir/index.js';
import { Emitter, type FloatType } from './emitter.js';
import { gradRule } from './grad-rules.js';
import { emitLoss, type LossSpec } from './loss.js';

export interface TrainingGraphOptions {
  /** Student output the loss reads (default: the first graph output). */
  outputName?: string;
  loss: LossSpec;
  /** Graph inputs for hard labels and/or teacher outputs (at least one). */
  withLabels: boolean;
  withTeacher: boolean;
  /**
   * Static shapes of the model's values from a probe run with a batch of 2 or more (see
   * probeShapes): dim 0 is taken as the batch and never baked into the graph.
   */
  shapes: ReadonlyMap<string, readonly number[]>;
  /** Batch statistics in BatchNormalization (default true); false keeps the inference form. */
  training?: boolean;
  /** Weights to train (default: every float initializer in a weight slot of its op's rule). */
  trainable?: readonly string[];
  /** 'float64' makes every float value double (for finite-difference tests). Default 'float32'. */
  precision?: 'float32' | 'float64';
}

export interface TrainingGraph {
  model: Model;
  /** Trainable weights, graph inputs in this order. */
  weights: string[];
  /** Running statistics (BatchNormalization mean/var), graph inputs. */
  states: string[];
  /** The student's own inputs. */
  dataInputs: string[];
  labelsInput?: string;
  teacherInput?: string;
  lossOutput: string;
  hardOutput?: string;
  softOutput?: string;
  /** The student output, as computed in this step (training-mode forward). */
  studentOutput: string;
  /** Weight name -> name of the graph output holding its gradient. */
  gradients: Map<string, string>;
  /** State name -> name of the graph output holding its new value (training mode only). */
  stateUpdates: Map<string, string>;
}

function isDefaultDomain(node: Node): boolean {
  return node.domain === '' || node.domain === 'ai.onnx';
}

function attributesOf(node: Node): Record<string, Attribute> {
  const out: Record<string, Attribute> = {};
  for (const [k, a] of node.attributes) out[k] = a;
  return out;
}

function convertFloat(t: Tensor, floatType: FloatType, name = t.name): Tensor {
  if (t.dtype !== DataType.FLOAT || floatType === DataType.FLOAT) return t.clone(name);
  return Tensor.fromData(name, { dtype: DataType.DOUBLE, dims: [...t.dims], data: Float64Array.from(t.data as Float32Array) });
}

function retype(type: ValueType | undefined, floatType: FloatType): ValueType | undefined {
  if (!isTensorType(type)) return type;
  return { kind: 'tensor', elemType: type.elemType === DataType.FLOAT ? floatType : type.elemType, shape: type.shape ? [...type.shape] : undefined };
}

/** Trainable weights and running statistics found by the rules' weight and statistics slots. */
export function trainableParameters(model: Model): { weights: string[]; states: string[] } {
  const graph = model.graph;
  const weights: string[] = [];
  const states: string[] = [];
  for (const node of graph.nodes) {
    const rule = isDefaultDomain(node) ? gradRule(node.opType) : undefined;
    if (!rule) continue;
    node.inputs.forEach((v, i) => {
      if (!v || !v.initializer || v.initializer.dtype !== DataType.FLOAT) return;
      const isWeight = (rule.weights?.includes(i) ?? false) || (!!rule.elementwiseWeights && v.initializer.elementCount > 1);
      if (isWeight && !weights.includes(v.name)) weights.push(v.name);
      if (rule.statistics?.includes(i) && !states.includes(v.name)) states.push(v.name);
    });
  }
  return { weights, states: states.filter((s) => !weights.includes(s)) };
}

export function buildTrainingGraph(student: Model, options: TrainingGraphOptions): TrainingGraph {
  const src = student.graph;
  const opsetIn = student.opsetVersion('') ?? 17;
  if (opsetIn < 13) throw new UsageError(`the model uses opset ${opsetIn}; training on onnxruntime needs opset 13 or newer (upgrade it first)`);
  const opset = Math.max(opsetIn, 16); // ScatterElements with reduction (MaxPool's backward)
  if (!options.withLabels && !options.withTeacher) throw new UsageError('training needs labels, teacher outputs, or both');
  const floatType: FloatType = options.precision === 'float64' ? DataType.DOUBLE : DataType.FLOAT;
  const training = options.training ?? true;
  const outputName = options.outputName ?? src.outputs[0]?.name;
  const outValue = outputName ? src.value(outputName) : undefined;
  if (!outValue) throw new UsageError(`tensor '${outputName ?? '(none)'}' does not exist in the model`);
  const shape = (name: string): readonly number[] => {
    const s = options.shapes.get(name);
    if (s) return s;
    const t = src.value(name)?.initializer;
    if (t) return t.dims;
    throw new Error(`no probed shape for tensor '${name}'`);
  };

  const found = trainableParameters(student);
  const weights = options.trainable ? [...options.trainable] : found.weights;
  for (const w of weights) {
    const t = src.value(w)?.initializer;
    if (!t || t.dtype !== DataType.FLOAT) throw new UsageError(`'${w}' is not a float initializer of the model, so it cannot be trained`);
  }
  const states = found.states.filter((s) => !weights.includes(s));

  // Nodes the student output depends on, in graph order.
  const needed = new Set<Node>();
  const stack = [outValue];
  const seen = new Set<string>();
  while (stack.length > 0) {
    const v = stack.pop()!;
    if (seen.has(v.name)) continue;
    seen.add(v.name);
    const p = v.producer;
    if (!p || p.graph !== src || needed.has(p)) continue;
    needed.add(p);
    for (const i of p.inputs) if (i && i.name !== '') stack.push(i);
  }
  const order = src.nodes.filter((n) => needed.has(n));

  // Values that depend on a weight (and so need a gradient).
  const weightSet = new Set(weights);
  const dependent = new Set<string>(weights);
  const differentiated: Node[] = [];
  for (const node of order) {
    if (node.inputs.some((v) => v && dependent.has(v.name))) {
      differentiated.push(node);
      for (const o of node.outputs) if (o.name !== '') dependent.add(o.name);
    }
  }
  const missing = differentiated.filter((n) => !isDefaultDomain(n) || !gradRule(n.opType));
  if (missing.length > 0) {
    const list = missing.map((n) => `'${n.name || '(unnamed)'}' (${n.domain ? `${n.domain}.` : ''}${n.opType})`);
    throw new UsageError(
      `cannot train on onnxruntime: no gradient rule for node ${list.slice(0, 5).join(', ')}${list.length > 5 ? ` and ${list.length - 5} more` : ''}`,
    );
  }
  for (const node of order) {
    if (node.subgraphs().length > 0) throw new UsageError(`cannot train on onnxruntime: node '${node.name}' (${node.opType}) has a subgraph`);
  }

  // ---- the training graph -----------------------------------------------------------------------
  const graph = new Graph(`${src.name || 'student'}_training`);
  const e = new Emitter(graph, floatType, opset);
  const dataInputs: string[] = [];
  for (const v of src.inputs) {
    if (v.initializer) continue;
    graph.addInput(v.name, retype(v.type, floatType));
    dataInputs.push(v.name);
  }
  const stateSet = new Set(states);
  for (const v of src.initializerValues) {
    if (!seen.has(v.name)) continue;
    const t = v.initializer!;
    if (weightSet.has(v.name) || stateSet.has(v.name)) graph.addInput(v.name, { kind: 'tensor', elemType: floatType, shape: [...t.dims] });
    else graph.addInitializer(convertFloat(t, floatType));
  }
  const labelsInput = options.withLabels ? e.fresh('labels') : undefined;
  const teacherInput = options.withTeacher ? e.fresh('teacher') : undefined;
  const outShape = shape(outValue.name);
  const symbolic = (s: readonly number[]): (number | string)[] => s.map((d, i) => (i === 0 ? 'N' : d));
  if (labelsInput) {
    graph.addInput(
      labelsInput,
      options.loss.kind === 'kd'
        ? { kind: 'tensor', elemType: DataType.INT64, shape: ['N'] }
        : { kind: 'tensor', elemType: floatType, shape: symbolic(outShape) },
    );
  }
  if (teacherInput) graph.addInput(teacherInput, { kind: 'tensor', elemType: floatType, shape: symbolic(outShape) });

  // forward
  const saved = new Map<Node, Record<string, string>>();
  const stateUpdateValues = new Map<string, string>();
  for (const node of order) {
    const rule = isDefaultDomain(node) ? gradRule(node.opType) : undefined;
    const inputs = node.inputs.map((v) => (v ? v.name : ''));
    const outputs = node.outputs.map((v) => v.name);
    if (rule?.forward) {
      saved.set(
        node,
        rule.forward({
          node,
          e,
          training,
          shape,
          inputs,
          outputs,
          update: (state, value) => stateUpdateValues.set(state, value),
          isState: (i) => stateSet.has(inputs[i] ?? ''),
        }),
      );
      continue;
    }
    const attributes = attributesOf(node);
    if (floatType === DataType.DOUBLE && node.opType === 'Constant') {
      const t = node.getTensor('value');
      if (t) attributes.value = { name: 'value', type: 4, value: convertFloat(t, floatType) };
    }
    graph.addNode({
      opType: node.opType,
      domain: node.domain,
      inputs: inputs.map((n) => (n === '' ? null : e.value(n))),
      outputs,
      attributes,
      name: node.name || undefined,
    });
  }

  // loss
  const classes = outShape[outShape.length - 1] ?? 1;
  const loss = emitLoss(e, outValue.name, classes, options.loss, labelsInput, teacherInput);

  // backward
  const grads = new Map<string, string[]>();
  grads.set(outValue.name, [loss.dOutput]);
  for (const node of [...differentiated].reverse()) {
    const outputs = node.outputs.map((v) => v.name);
    const dys = outputs.map((o) => {
      const parts = grads.get(o);
      return parts && parts.length > 0 ? e.sum(parts) : undefined;
    });
    if (dys.every((d) => d === undefined)) continue;
    const inputs = node.inputs.map((v) => (v ? v.name : ''));
    const rule = gradRule(node.opType)!;
    let result: (string | undefined)[];
    try {
      result = rule.backward({
        node,
        e,
        training,
        shape,
        inputs,
        outputs,
        dy: (i) => dys[i],
        needs: (i) => dependent.has(inputs[i] ?? ''),
        saved: saved.get(node) ?? {},
      });
    } catch (error) {
      if (error instanceof UsageError) throw error;
      throw new UsageError(`node '${node.name}' (${node.opType}): building its gradient failed: ${error instanceof Error ? error.message : String(error)}`, {
        cause: error,
      });
    }
    result.forEach((g, i) => {
      const name = inputs[i];
      if (!g || !name || !dependent.has(name)) return;
      const list = grads.get(name) ?? [];
      list.push(g);
      grads.set(name, list);
    });
  }

  // outputs
  const scalar: ValueType = { kind: 'tensor', elemType: floatType, shape: [] };
  const addOutput = (value: string, name: string, type: ValueType): string => {
    const out = e.op('Identity', [value], {}, [e.fresh(name)], 'output')[0]!;
    graph.addOutput(e.value(out), type);
    return out;
  };
  const lossOutput = addOutput(loss.loss, 'loss', scalar);
  const hardOutput = loss.hard ? addOutput(loss.hard, 'loss_hard', scalar) : undefined;
  const softOutput = loss.soft ? addOutput(loss.soft, 'loss_soft', scalar) : undefined;
  const studentOutput = addOutput(outValue.name, `${outValue.name}_train`, { kind: 'tensor', elemType: floatType, shape: symbolic(outShape) });
  const gradients = new Map<string, string>();
  for (const w of weights) {
    const dims = [...src.value(w)!.initializer!.dims];
    const parts = grads.get(w);
    const g = parts && parts.length > 0 ? e.sum(parts) : e.zerosLike(w);
    gradients.set(w, addOutput(g, `${w}_grad`, { kind: 'tensor', elemType: floatType, shape: dims }));
  }
  const stateUpdates = new Map<string, string>();
  for (const [s, value] of stateUpdateValues) {
    const dims = [...src.value(s)!.initializer!.dims];
    stateUpdates.set(s, addOutput(value, `${s}_new`, { kind: 'tensor', elemType: floatType, shape: dims }));
  }

  const model = new Model(graph, [{ domain: '', version: opset }], Math.max(student.irVersion, 8));
  model.producerName = 'model-opt training graph';
  return {
    model,
    weights,
    states,
    dataInputs,
    labelsInput,
    teacherInput,
    lossOutput,
    hardOutput,
    softOutput,
    studentOutput,
    gradients,
    stateUpdates,
  };
}

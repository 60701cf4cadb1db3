/**
 * Reverse-mode differentiation over the IR: from a student (inference) model and a loss, one ONNX
 * training graph that takes the trainable weights and running statistics as inputs (with the data
 * inputs, labels and teacher outputs) and returns the loss, its terms, the student output, the
 * gradient of every trainable weight and the new running statistics. onnxruntime runs it with its
 * native kernels. Per-op rules live in ./grad-rules.ts; an op on the path from a weight to the loss
 * without a rule is named with its node before anything runs.
 * Before differentiation, pre-passes (./decompose.ts) lift float Constant nodes in weight slots to
 * initializers and unroll LSTM/GRU over the probed sequence length into primitive nodes, so their
 * gradients come from the primitive rules and the weights keep their original layout.
 * `trainingCoverage` answers, cheaply and without onnxruntime, whether a model can train here.
 * Imports: ../../ir, ../../errors, ../core/parameters, ./emitter, ./grad-rules and the rules-*.ts rows,
 * ./decompose, ./loss.
 */
import { UsageError } from '../../errors.js';
import { DataType, Graph, Model, Tensor, isTensorType, type Attribute, type Node, type Value, type ValueType } from '../../ir/index.js';
import { liftConstantWeights, unrollRecurrent } from './decompose.js';
import { Emitter, type FloatType } from './emitter.js';
import { differentiableSlot, gradRule, type GradRule } from './grad-rules.js';
import { emitFeatureLoss, emitLoss, type LossSpec } from './loss.js';
import { defaultParameters } from '../core/parameters.js';
// Rule rows register themselves on import (after ./grad-rules.js has run).
import './rules-elementwise.js';
import './rules-shape.js';
import './rules-resize.js';
import './rules-recurrent.js';
import './rules-quant.js';

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
  /** Feature terms added to the loss: featureWeight x the sum of their MSEs (see FeatureTerm). */
  features?: readonly FeatureTerm[];
  /** Weight of the feature terms (default 1). */
  featureWeight?: number;
}

/**
 * A feature-distillation term: mean((student tensor [through the adapter] - teacher tensor)^2), as
 * ../tfjs/loop.ts computes it. The teacher's tensor is a graph input [N, ...teacherDims]. With `adapter`,
 * a graph input [Cs, Ct] (trained like a weight: its gradient is an output) maps the student's
 * channels (dim 1) to the teacher's as a 1x1 projection, channels moved last.
 */
export interface FeatureTerm {
  /** The student's tensor (any value of the model). */
  student: string;
  /** Per-sample dims of the teacher's tensor (the batch dim dropped). */
  teacherDims: readonly number[];
  /** Graph input name of the adapter, when the channel counts differ. */
  adapter?: string;
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
  /** Student tensor -> graph input of the teacher's tensor, one per feature term. */
  featureInputs: Map<string, string>;
  /** Adapter inputs of the feature terms (also in `weights`, with gradients). */
  adapters: string[];
  /** The feature terms' MSE summed (unweighted), when there are any. */
  featureOutput?: string;
}

function isDefaultDomain(node: Node): boolean {
  return node.domain === '' || node.domain === 'ai.onnx';
}

function attributesOf(node: Node): Record<string, Attribute> {
  const out: Record<string, Attribute> = Object.create(null) as Record<string, Attribute>; // keyed by attribute names
  for (const [k, a] of node.attributes) out[k] = a;
  return out;
}

function convertFloat(t: Tensor, floatType: FloatType, name = t.name): Tensor {
  if (t.dtype !== DataType.FLOAT || floatType === DataType.FLOAT) return t.clone(name);
  return Tensor.fromData(name, { dtype: DataType.DOUBLE, dims: [...t.dims], data: Float64Array.from(t.data as Float32Array) });
}

/**
 * In float64 training graphs, float constants and casts to float become double (Constant values,
 * ConstantOfShape fills, Cast to FLOAT), so every float value of the graph has one element type.
 */
function retypeAttributes(node: Node, attributes: Record<string, Attribute>): void {
  const dbl = (t: Tensor): Tensor => convertFloat(t, DataType.DOUBLE);
  if (node.opType === 'Constant') {
    const t = node.getTensor('value');
    if (t) attributes.value = { name: 'value', type: 4, value: dbl(t) };
    if (node.hasAttr('value_float') || node.hasAttr('value_floats')) {
      const values = node.hasAttr('value_float') ? [node.getFloat('value_float')] : node.getFloats('value_floats');
      const dims = node.hasAttr('value_float') ? [] : [values.length];
      delete attributes.value_float;
      delete attributes.value_floats;
      attributes.value = { name: 'value', type: 4, value: Tensor.fromData('value', { dtype: DataType.DOUBLE, dims, data: Float64Array.from(values) }) };
    }
  } else if (node.opType === 'ConstantOfShape') {
    const t = node.getTensor('value');
    if (t) attributes.value = { name: 'value', type: 4, value: dbl(t) };
  } else if (node.opType === 'Cast' || node.opType === 'CastLike') {
    if (node.getInt('to', 0) === DataType.FLOAT) attributes.to = { name: 'to', type: 2, value: BigInt(DataType.DOUBLE) };
  }
}

function retype(type: ValueType | undefined, floatType: FloatType): ValueType | undefined {
  if (!isTensorType(type)) return type;
  return { kind: 'tensor', elemType: type.elemType === DataType.FLOAT ? floatType : type.elemType, shape: type.shape ? [...type.shape] : undefined };
}

/**
 * The default trainable weights and running statistics: ../parameters.ts's `defaultParameters`,
 * the same function the tfjs backend uses. Float Constant nodes in parameter slots count
 * (buildTrainingGraph lifts them to initializers; a caller that keeps weight values must read them
 * from `liftConstantWeights(model).model`).
 */
export function trainableParameters(model: Model): { weights: string[]; states: string[] } {
  return defaultParameters(liftConstantWeights(model).model);
}

interface Analysis {
  /** Nodes the output depends on, in graph order. */
  order: Node[];
  /** Names of the values the output depends on (inputs, initializers, node outputs). */
  seen: Set<string>;
  /** Values that depend on a weight through differentiable slots. */
  dependent: Set<string>;
  /** Nodes a gradient flows through, in graph order. */
  differentiated: Node[];
  /** Nodes that need a gradient and cannot get one, with the reason. */
  missing: { node: Node; reason?: string }[];
}

function ruleOf(node: Node): GradRule | undefined {
  return isDefaultDomain(node) ? gradRule(node.opType) : undefined;
}

/** The differentiation plan: which nodes a gradient flows through, and which of them lack a rule. */
function analyse(graph: Graph, targets: readonly Value[], weights: readonly string[]): Analysis {
  const needed = new Set<Node>();
  const stack = [...targets];
  const seen = new Set<string>();
  while (stack.length > 0) {
    const v = stack.pop()!;
    if (seen.has(v.name)) continue;
    seen.add(v.name);
    const p = v.producer;
    if (!p || p.graph !== graph || needed.has(p)) continue;
    needed.add(p);
    for (const i of p.inputs) if (i && i.name !== '') stack.push(i);
  }
  const order = graph.nodes.filter((n) => needed.has(n));
  // forward: values that depend on a weight through slots a gradient flows through
  const dependent = new Set<string>(weights);
  const candidates: Node[] = [];
  for (const node of order) {
    const rule = ruleOf(node);
    const reaches = node.inputs.some((v, i) => v && dependent.has(v.name) && (!rule || differentiableSlot(rule, node, i)));
    if (!reaches) continue;
    candidates.push(node);
    for (const o of node.outputs) if (o.name !== '') dependent.add(o.name);
  }
  // backward: only nodes whose outputs reach the loss through differentiable slots
  const relevant = new Set<string>(targets.map((t) => t.name));
  const differentiated: Node[] = [];
  for (const node of [...candidates].reverse()) {
    if (!node.outputs.some((o) => relevant.has(o.name))) continue;
    differentiated.push(node);
    const rule = ruleOf(node);
    node.inputs.forEach((v, i) => {
      if (v && v.name !== '' && (!rule || differentiableSlot(rule, node, i))) relevant.add(v.name);
    });
  }
  differentiated.reverse();
  const missing: { node: Node; reason?: string }[] = [];
  for (const node of differentiated) {
    const rule = ruleOf(node);
    if (!rule) missing.push({ node });
    else if (node.subgraphs().length > 0) missing.push({ node, reason: 'it has a subgraph' });
    else {
      const reason = rule.unsupported?.(node);
      if (reason) missing.push({ node, reason });
    }
  }
  return { order, seen, dependent, differentiated, missing };
}

function describeNode(node: Node): string {
  return `'${node.name || '(unnamed)'}' (${node.domain ? `${node.domain}.` : ''}${node.opType})`;
}

export interface CoverageOptions {
  /** Student output the loss reads (default: the first graph output). */
  outputName?: string;
  /** Weights to train (default: every float weight found by the rules). */
  trainable?: readonly string[];
}

/**
 * Whether every node a gradient flows through (from a trainable weight to the output) has a rule
 * that handles it, without onnxruntime or a probe run: the backend choice of `distill`. `missing`
 * names each node that lacks one (`reason` when the op has a rule but not for this node's
 * attributes). LSTM/GRU count as covered when they can be unrolled.
 */
export function trainingCoverage(
  model: Model,
  options: CoverageOptions = {},
): { covered: boolean; missing: { node: string; opType: string; reason?: string }[] } {
  const lifted = liftConstantWeights(model).model;
  const graph = lifted.graph;
  const outName = options.outputName ?? graph.outputs[0]?.name;
  const outValue = outName ? graph.value(outName) : undefined;
  if (!outValue) return { covered: false, missing: [{ node: '(none)', opType: '(none)', reason: `output '${outName ?? ''}' does not exist` }] };
  const weights = options.trainable ? [...options.trainable] : trainableParameters(lifted).weights;
  const missing = analyse(graph, [outValue], weights).missing.map(({ node, reason }) => ({
    node: node.name || '(unnamed)',
    opType: `${node.domain ? `${node.domain}.` : ''}${node.opType}`,
    ...(reason ? { reason } : {}),
  }));
  return { covered: missing.length === 0, missing };
}

/** The checked settings of a build: the lifted student, the weights asked for, the output and feature tensors. */
interface BuildSettings {
  opset: number;
  floatType: FloatType;
  training: boolean;
  lifted: Model;
  found: { weights: string[]; states: string[] };
  requested: string[];
  outputName: string;
  features: readonly FeatureTerm[];
}

/** Checks the student and the options (opset, loss inputs, weights, output and feature tensors) before anything is built. */
function buildSettings(student: Model, options: TrainingGraphOptions): BuildSettings {
  const opsetIn = student.opsetVersion('') ?? 17;
  if (opsetIn < 13) {
    // distill --backend onnxruntime upgrades such a student first (app/distill.ts); 'auto' falls back to tfjs with this reason
    throw new UsageError(`the model uses opset ${opsetIn} and the onnxruntime training graph needs opset 13 or newer`);
  }
  const opset = Math.max(opsetIn, 16); // ScatterElements with reduction (MaxPool's backward)
  if (!options.withLabels && !options.withTeacher) throw new UsageError('training needs labels, teacher outputs, or both');
  const floatType: FloatType = options.precision === 'float64' ? DataType.DOUBLE : DataType.FLOAT;
  const lifted = liftConstantWeights(student).model;
  const found = trainableParameters(lifted);
  const requested = options.trainable ? [...options.trainable] : found.weights;
  for (const w of requested) {
    const t = lifted.graph.value(w)?.initializer;
    if (!t || t.dtype !== DataType.FLOAT) throw new UsageError(`'${w}' is not a float initializer of the model, so it cannot be trained`);
  }
  const outputName = options.outputName ?? lifted.graph.outputs[0]?.name;
  if (!outputName || !lifted.graph.value(outputName)) throw new UsageError(`tensor '${outputName ?? '(none)'}' does not exist in the model`);
  const features = options.features ?? [];
  for (const f of features) {
    if (!lifted.graph.value(f.student)) throw new UsageError(`feature tensor '${f.student}' does not exist in the student`);
    if (f.adapter && lifted.graph.value(f.adapter)) throw new UsageError(`adapter name '${f.adapter}' is taken by a tensor of the student`);
  }
  return { opset, floatType, training: options.training ?? true, lifted, found, requested, outputName, features };
}

/** The values the loss reads: the student output and the feature tensors. */
function lossTargets(g: Graph, settings: BuildSettings): Value[] {
  return [g.value(settings.outputName)!, ...settings.features.map((f) => g.value(f.student)!)];
}

/**
 * The weights that train: those asked for that the loss depends on (as on tfjs, where a weight
 * without a gradient is left alone: a weight of another output's branch, in a two-output model
 * trained on one, is neither a graph input nor given a gradient, and keeps its value). Throws
 * UsageError naming the nodes on their paths to the loss that have no gradient rule.
 */
function trainedWeights(settings: BuildSettings): { weights: string[]; reached: Set<string>; differentiated: Node[] } {
  const { lifted, requested } = settings;
  const reached = analyse(lifted.graph, lossTargets(lifted.graph, settings), []).seen;
  const weights = requested.filter((w) => reached.has(w));
  // the op coverage check runs on the model as given, before any shape is needed
  const before = analyse(lifted.graph, lossTargets(lifted.graph, settings), weights);
  if (before.missing.length > 0) {
    const list = before.missing.map(({ node, reason }) => (reason ? `${describeNode(node)}: ${reason}` : describeNode(node)));
    throw new UsageError(
      `cannot train on onnxruntime: no gradient rule for node ${list.slice(0, 5).join(', ')}${list.length > 5 ? ` and ${list.length - 5} more` : ''}`,
    );
  }
  return { weights, reached, differentiated: before.differentiated };
}

/** What the steps that write the training graph share. */
interface BuildContext {
  graph: Graph;
  e: Emitter;
  /** The student after the pre-passes (recurrent nodes unrolled). */
  src: Graph;
  floatType: FloatType;
  training: boolean;
  shape(name: string): readonly number[];
  weightSet: ReadonlySet<string>;
  stateSet: ReadonlySet<string>;
  /** Gradient parts of each value, summed where read. */
  grads: Map<string, string[]>;
}

function addGrad(ctx: BuildContext, name: string, g: string): void {
  const list = ctx.grads.get(name) ?? [];
  list.push(g);
  ctx.grads.set(name, list);
}

/** [N, ...per-sample dims] of a probed shape. */
function symbolic(s: readonly number[]): (number | string)[] {
  return s.map((d, i) => (i === 0 ? 'N' : d));
}

/** The graph inputs: the student's data inputs, trained weights and states (other initializers stay), labels, teacher outputs, feature tensors and adapters. */
function declareInputs(ctx: BuildContext, options: TrainingGraphOptions, settings: BuildSettings, seen: ReadonlySet<string>) {
  const { graph, e, src, floatType, shape } = ctx;
  const dataInputs: string[] = [];
  for (const v of src.inputs) {
    if (v.initializer) continue;
    graph.addInput(v.name, retype(v.type, floatType));
    dataInputs.push(v.name);
  }
  for (const v of src.initializerValues) {
    if (!seen.has(v.name)) continue;
    const t = v.initializer!;
    if (ctx.weightSet.has(v.name) || ctx.stateSet.has(v.name)) graph.addInput(v.name, { kind: 'tensor', elemType: floatType, shape: [...t.dims] });
    else graph.addInitializer(convertFloat(t, floatType));
  }
  const labelsInput = options.withLabels ? e.fresh('labels') : undefined;
  const teacherInput = options.withTeacher ? e.fresh('teacher') : undefined;
  const outShape = shape(settings.outputName);
  if (labelsInput) {
    graph.addInput(
      labelsInput,
      options.loss.kind === 'kd'
        ? { kind: 'tensor', elemType: DataType.INT64, shape: ['N'] }
        : { kind: 'tensor', elemType: floatType, shape: symbolic(outShape) },
    );
  }
  if (teacherInput) graph.addInput(teacherInput, { kind: 'tensor', elemType: floatType, shape: symbolic(outShape) });
  const featureInputs = new Map<string, string>();
  const adapters: string[] = [];
  const adapterDims = new Map<string, number[]>();
  for (const f of settings.features) {
    featureInputs.set(f.student, e.fresh('teacher_feature'));
    graph.addInput(featureInputs.get(f.student)!, { kind: 'tensor', elemType: floatType, shape: ['N', ...f.teacherDims] });
    if (f.adapter) {
      adapterDims.set(f.adapter, [shape(f.student)[1] ?? 1, f.teacherDims[0] ?? 1]);
      graph.addInput(f.adapter, { kind: 'tensor', elemType: floatType, shape: adapterDims.get(f.adapter)! });
      adapters.push(f.adapter);
    }
  }
  return { dataInputs, labelsInput, teacherInput, featureInputs, adapters, adapterDims };
}

/**
 * The training-mode forward pass: nodes with a forward rule (BatchNormalization on batch statistics,
 * MaxPool keeping its argmax) through it, the others copied. Returns what the rules kept for the
 * backward pass and the new values of the running statistics.
 */
function emitForward(ctx: BuildContext, order: readonly Node[]) {
  const { graph, e, floatType, training, shape } = ctx;
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
          isState: (i) => ctx.stateSet.has(inputs[i] ?? ''),
        }),
      );
      continue;
    }
    const attributes = attributesOf(node);
    if (floatType === DataType.DOUBLE && isDefaultDomain(node)) retypeAttributes(node, attributes);
    graph.addNode({
      opType: node.opType,
      domain: node.domain,
      inputs: inputs.map((n) => (n === '' ? null : e.value(n))),
      outputs,
      attributes,
      name: node.name || undefined,
    });
  }
  return { saved, stateUpdateValues };
}

/** The loss (./loss.ts) and the feature terms, with the gradients they start at the student output, feature tensors and adapters. */
function emitLosses(
  ctx: BuildContext,
  options: TrainingGraphOptions,
  settings: BuildSettings,
  inputs: { labelsInput?: string; teacherInput?: string; featureInputs: ReadonlyMap<string, string> },
) {
  const { e, shape } = ctx;
  const outShape = shape(settings.outputName);
  const classes = outShape[outShape.length - 1] ?? 1;
  const loss = emitLoss(e, settings.outputName, classes, options.loss, inputs.labelsInput, inputs.teacherInput);
  addGrad(ctx, settings.outputName, loss.dOutput);
  let totalLoss = loss.loss;
  let featureSum: string | undefined;
  if (settings.features.length > 0) {
    const weight = options.featureWeight ?? 1;
    const terms = settings.features.map((f) => {
      const term = emitFeatureLoss(e, f.student, shape(f.student), inputs.featureInputs.get(f.student)!, f.adapter, weight);
      addGrad(ctx, f.student, term.dStudent);
      if (f.adapter && term.dAdapter) addGrad(ctx, f.adapter, term.dAdapter);
      return term.value;
    });
    featureSum = e.sum(terms);
    totalLoss = e.op1('Add', [loss.loss, e.op1('Mul', [featureSum, e.constF([weight])])], {}, 'loss_total');
  }
  return { loss, totalLoss, featureSum };
}

/** The backward pass: each differentiated node's rule, in reverse order, on the summed gradients of its outputs. */
function emitBackward(
  ctx: BuildContext,
  differentiated: readonly Node[],
  dependent: ReadonlySet<string>,
  saved: ReadonlyMap<Node, Record<string, string>>,
): void {
  const { e, training, shape } = ctx;
  for (const node of [...differentiated].reverse()) {
    const outputs = node.outputs.map((v) => v.name);
    const dys = outputs.map((o) => {
      const parts = ctx.grads.get(o);
      return parts && parts.length > 0 ? e.sum(parts) : undefined;
    });
    if (dys.every((d) => d === undefined)) continue;
    const inputs = node.inputs.map((v) => (v ? v.name : ''));
    const rule = gradRule(node.opType)!;
    const flows = (i: number): boolean => dependent.has(inputs[i] ?? '') && differentiableSlot(rule, node, i);
    let result: (string | undefined)[];
    try {
      result = rule.backward({ node, e, training, shape, inputs, outputs, dy: (i) => dys[i], needs: flows, saved: saved.get(node) ?? {} });
    } catch (error) {
      if (error instanceof UsageError) throw error;
      throw new UsageError(`node '${node.name}' (${node.opType}): building its gradient failed: ${error instanceof Error ? error.message : String(error)}`, {
        cause: error,
      });
    }
    result.forEach((g, i) => {
      const name = inputs[i];
      if (!g || !name || !flows(i)) return;
      addGrad(ctx, name, g);
    });
  }
}

/** Graph output `name` (a fresh name) holding `value`; returns its name. */
function addOutput(ctx: BuildContext, value: string, name: string, type: ValueType): string {
  const out = ctx.e.op('Identity', [value], {}, [ctx.e.fresh(name)], 'output')[0]!;
  ctx.graph.addOutput(ctx.e.value(out), type);
  return out;
}

/** The gradient outputs of the trained weights and adapters (zeros where nothing flowed back) and the new running statistics. */
function emitGradientOutputs(
  ctx: BuildContext,
  trained: readonly string[],
  adapterDims: ReadonlyMap<string, number[]>,
  stateUpdateValues: ReadonlyMap<string, string>,
) {
  const { e, src, floatType } = ctx;
  const gradients = new Map<string, string>();
  for (const w of trained) {
    const dims = adapterDims.get(w) ?? [...src.value(w)!.initializer!.dims];
    const parts = ctx.grads.get(w);
    const g = parts && parts.length > 0 ? e.sum(parts) : e.zerosLike(w);
    gradients.set(w, addOutput(ctx, g, `${w}_grad`, { kind: 'tensor', elemType: floatType, shape: dims }));
  }
  const stateUpdates = new Map<string, string>();
  for (const [s, value] of stateUpdateValues) {
    const dims = [...src.value(s)!.initializer!.dims];
    stateUpdates.set(s, addOutput(ctx, value, `${s}_new`, { kind: 'tensor', elemType: floatType, shape: dims }));
  }
  return { gradients, stateUpdates };
}

/**
 * The training graph of `student`: checked settings, the weights that train and the coverage check,
 * the pre-passes (recurrent nodes unrolled), then the inputs, the forward pass, the loss, the
 * backward pass and the outputs (loss terms, student output, gradients, new running statistics).
 */
export function buildTrainingGraph(student: Model, options: TrainingGraphOptions): TrainingGraph {
  const settings = buildSettings(student, options);
  const { floatType, lifted, outputName } = settings;
  const { weights, reached, differentiated: before } = trainedWeights(settings);
  const unrolled = unrollRecurrent(lifted, before, options.shapes);
  const src = unrolled.model.graph;
  const shape = (name: string): readonly number[] => {
    const s = options.shapes.get(name) ?? unrolled.shapes.get(name);
    if (s) return s;
    const t = src.value(name)?.initializer;
    if (t) return t.dims;
    throw new Error(`no probed shape for tensor '${name}'`);
  };
  const states = settings.found.states.filter((s) => !weights.includes(s) && reached.has(s));
  const { order, seen, dependent, differentiated } = analyse(src, lossTargets(src, settings), weights);

  const graph = new Graph(`${src.name || 'student'}_training`);
  const e = new Emitter(graph, floatType, settings.opset);
  const ctx: BuildContext = {
    graph,
    e,
    src,
    floatType,
    training: settings.training,
    shape,
    weightSet: new Set(weights),
    stateSet: new Set(states),
    grads: new Map(),
  };
  const inputs = declareInputs(ctx, options, settings, seen);
  const { saved, stateUpdateValues } = emitForward(ctx, order);
  const { loss, totalLoss, featureSum } = emitLosses(ctx, options, settings, inputs);
  emitBackward(ctx, differentiated, dependent, saved);

  const scalar: ValueType = { kind: 'tensor', elemType: floatType, shape: [] };
  const lossOutput = addOutput(ctx, totalLoss, 'loss', scalar);
  const hardOutput = loss.hard ? addOutput(ctx, loss.hard, 'loss_hard', scalar) : undefined;
  const softOutput = loss.soft ? addOutput(ctx, loss.soft, 'loss_soft', scalar) : undefined;
  const featureOutput = featureSum ? addOutput(ctx, featureSum, 'loss_features', scalar) : undefined;
  const studentOutput = addOutput(ctx, outputName, `${outputName}_train`, { kind: 'tensor', elemType: floatType, shape: symbolic(shape(outputName)) });
  const trained = [...weights, ...inputs.adapters];
  const { gradients, stateUpdates } = emitGradientOutputs(ctx, trained, inputs.adapterDims, stateUpdateValues);

  const model = new Model(graph, [{ domain: '', version: settings.opset }], Math.max(student.irVersion, 8));
  model.producerName = 'model-opt training graph';
  const { dataInputs, labelsInput, teacherInput, featureInputs, adapters } = inputs;
  return {
    model,
    weights: trained,
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
    featureInputs,
    adapters,
    featureOutput,
  };
}

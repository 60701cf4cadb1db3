/**
 * The tfjs backend of the training loop (../core/loop.ts): the student as a TrainableGraph, each
 * step's loss (./losses.ts, feature terms through 1x1 adapters where channel counts differ) and
 * gradients by tf.variableGrads, the optimizer (./optimizer.ts) and gradual pruning
 * (./gradual-pruning.ts) on tfjs variables, and the evaluation in eval mode. Dropout seeds are a
 * function of the run's seed and the global step, so a resumed run reproduces an uninterrupted one.
 * Imports: @tensorflow/tfjs-core, ../../errors, ../../ir/dtype, ../core (batching, feature adapters,
 * the loop and its types), ./onnx-graph, ./losses, ./optimizer, ./gradual-pruning.
 */
import * as tf from '@tensorflow/tfjs-core';
import { UsageError } from '../../errors.js';
import type { TensorData } from '../../ir/dtype.js';
import { countAgreement } from '../core/agreement.js';
import { gatherRows } from '../core/batching.js';
import { adapterInit, adapterName, featureNeedsAdapter } from '../core/feature-adapters.js';
import { checkTrainData, runLoop, type LoopOptions, type LoopResult, type TrainData } from '../core/loop.js';
import type { PruningSchedule } from '../core/pruning-masks.js';
import { loopOptimizer, type ComputedStep, type Evaluation, type LoopOptimizer, type LoopPruner, type StepBackend } from '../core/step-backend.js';
import { GradualPruner } from './gradual-pruning.js';
import { distillationLoss, meanSquaredError } from './losses.js';
import { tensorDataToTf, type ForwardResult, type TrainableGraph } from './onnx-graph.js';
import { Optimizer, type Param } from './optimizer.js';

/** One number: NaN when any of `tensors` holds a NaN or an infinity (x * 0 is NaN exactly for those). */
function nanProbe(tensors: readonly tf.Tensor[]): number {
  const t = tf.tidy(() => tf.addN(tensors.map((g) => tf.sum(tf.mul(g, 0)))));
  const v = t.dataSync()[0]!;
  t.dispose();
  return v;
}

/** "the gradient of 'w' became non-finite" for the first gradient holding NaN or infinity (one read for all when none does). */
function nonFiniteGradient(grads: ReadonlyMap<string, tf.Tensor>): string | undefined {
  if (grads.size === 0 || Number.isFinite(nanProbe([...grads.values()]))) return undefined;
  for (const [name, g] of grads) if (!Number.isFinite(nanProbe([g]))) return `the gradient of '${name}' became non-finite`;
  return 'a gradient became non-finite';
}

/** tf feeds (ONNX layout) of rows `indices` of every input; call inside tf.tidy. */
export function batchFeeds(inputs: Record<string, TensorData>, indices: ArrayLike<number>): Record<string, tf.Tensor> {
  const feeds: Record<string, tf.Tensor> = Object.create(null) as Record<string, tf.Tensor>;
  for (const [name, td] of Object.entries(inputs)) feeds[name] = tensorDataToTf(gatherRows(td, indices));
  return feeds;
}

function rangeIndices(start: number, end: number): Int32Array {
  return Int32Array.from({ length: end - start }, (_v, i) => start + i);
}

/** Class indices (or float targets for mse) of a label array as a tf tensor. */
function labelsTensor(td: TensorData, kind: 'kd' | 'mse'): tf.Tensor {
  const t = tensorDataToTf(td);
  if (kind === 'mse') return tf.cast(t, 'float32');
  if (t.rank === 2 && t.shape[1]! > 1) return tf.argMax(t, 1); // one-hot or probabilities
  return tf.cast(tf.reshape(t, [-1]), 'int32');
}

/** Accuracy (classification) or MSE (regression) of the graph's output on a data set, eval mode. */
export function evaluate(
  graph: TrainableGraph,
  data: TrainData,
  options: { outputName: string; batchSize: number; kind: 'kd' | 'mse' },
): { accuracy?: number; loss?: number } {
  if (!data.labels) return {};
  let correct = 0;
  let squared = 0;
  for (let start = 0; start < data.count; start += options.batchSize) {
    const idx = rangeIndices(start, Math.min(data.count, start + options.batchSize));
    const value = tf.tidy(() => {
      const out = graph.forward(batchFeeds(data.inputs, idx), { fetch: [options.outputName] }).outputs[options.outputName]!;
      const rows = gatherRows(data.labels!, idx);
      if (options.kind === 'mse') return tf.mul(meanSquaredError(out, tf.reshape(labelsTensor(rows, 'mse'), out.shape)), idx.length).dataSync()[0]!;
      // Top-1, or whole-sequence agreement for per-step labels: one rule with ../onnxruntime/loop.ts.
      return countAgreement(out.dataSync(), rows.data as ArrayLike<number | bigint>, idx.length, options.outputName, rows.dims).samples;
    });
    if (options.kind === 'mse') squared += value;
    else correct += value;
  }
  return options.kind === 'mse' ? { loss: squared / data.count } : { accuracy: correct / data.count };
}

/** A 1x1 projection from student to teacher channels, for feature pairs whose channel counts differ. */
function makeAdapter(name: string, studentChannels: number, teacherChannels: number, seed: number, index: number): Param {
  const data = adapterInit(studentChannels, teacherChannels, seed, index);
  return { name: adapterName(name), variable: tf.tidy(() => tf.variable(tf.tensor(data, [studentChannels, teacherChannels]), true)) };
}

/** Moves the channel axis (1) last so a [Cs, Ct] adapter can be applied as a matrix product. */
function channelsLast(t: tf.Tensor): tf.Tensor {
  if (t.rank <= 2) return t;
  const perm = [0, ...Array.from({ length: t.rank - 2 }, (_v, i) => i + 2), 1];
  return tf.transpose(t, perm);
}

function defaultPruneParams(graph: TrainableGraph): string[] {
  const kernelSlots = ['Conv:1', 'ConvTranspose:1', 'Gemm:1', 'MatMul:0', 'MatMul:1'];
  return [...graph.sources.values()]
    .filter((s) => s.trainable && s.usedAs.some((u) => kernelSlots.includes(u)) && graph.variables.get(s.name)!.rank >= 2)
    .map((s) => s.name);
}

/** Feature adapters (student channels -> teacher channels) of the feature pairs whose channel counts differ, by student tensor. */
function featureAdapters(graph: TrainableGraph, data: TrainData, options: LoopOptions): Map<string, Param> {
  const adapters = new Map<string, Param>();
  (options.features ?? []).forEach((pair, i) => {
    const t = data.features?.get(pair.student);
    if (!t) throw new UsageError(`no teacher values for feature pair ${pair.teacher}=${pair.student}`);
    const studentShape = tf.tidy(() => {
      return graph.forward(batchFeeds(data.inputs, [0]), { fetch: [pair.student] }).outputs[pair.student]!.shape;
    });
    if (featureNeedsAdapter(pair, t.dims.slice(1), studentShape.slice(1))) {
      adapters.set(pair.student, makeAdapter(pair.student, studentShape[1]!, t.dims[1]!, options.seed, i));
    }
  });
  return adapters;
}

/** The mean squared error of the student's feature tensor `student` (through its adapter, if any) against the teacher's `teacher`. */
function featureTerm(student: tf.Tensor, teacher: tf.Tensor, adapter: Param | undefined): tf.Scalar {
  let s = channelsLast(student);
  const t = channelsLast(teacher);
  if (adapter) {
    const lead = s.shape.slice(0, -1);
    s = tf.reshape(tf.matMul(tf.reshape(s, [-1, s.shape[s.rank - 1]!]), adapter.variable), [...lead, adapter.variable.shape[1]!]);
  }
  return meanSquaredError(s, t);
}

/** The trainable graph of a student and its feature adapters on tfjs, driven by ../core/loop.ts. */
class TfjsStepBackend implements StepBackend {
  private readonly params: Param[];
  private readonly tfOptimizer: Optimizer;
  readonly parameters: readonly { name: string; size: number }[];
  readonly optimizer: LoopOptimizer;

  constructor(
    private readonly graph: TrainableGraph,
    private readonly data: TrainData,
    private readonly options: LoopOptions,
    private readonly adapters: Map<string, Param>,
  ) {
    this.params = [...graph.trainableVariables(), ...adapters.values()];
    this.parameters = this.params.map((p) => ({ name: p.name, size: p.variable.size }));
    this.tfOptimizer = new Optimizer(options.optimizer);
    this.optimizer = loopOptimizer(this.tfOptimizer, this.params);
  }

  defaultPruneParams(): string[] {
    return defaultPruneParams(this.graph);
  }

  createPruner(names: ReadonlySet<string>, schedule: PruningSchedule): LoopPruner | undefined {
    const targets = this.params.filter((p) => names.has(p.name));
    return targets.length > 0 ? new GradualPruner(targets, schedule) : undefined;
  }

  /**
   * The step's total loss inside tf.variableGrads, with its terms and correct count kept in
   * `stats` ([total, hard, soft, feature, correct]) and the forward's running-statistic updates.
   */
  private loss(idx: Int32Array, globalStep: number, out: { updates: ForwardResult['updates']; stats?: tf.Tensor }): tf.Scalar {
    const { graph, data, options, adapters } = this;
    const kind = options.lossKind;
    const features = options.features ?? [];
    const fetch = [options.outputName, ...features.map((f) => f.student)];
    const r = graph.forward(batchFeeds(data.inputs, idx), {
      training: true,
      fetch,
      seed: (options.seed * 7919 + globalStep) >>> 0,
      freezeNorm: options.freezeNorm,
    });
    out.updates = r.updates;
    const output = r.outputs[options.outputName]!;
    const labels = data.labels ? labelsTensor(gatherRows(data.labels, idx), kind) : undefined;
    const teacher = data.teacher ? tensorDataToTf(gatherRows(data.teacher, idx)) : undefined;
    const terms = distillationLoss(output, teacher, labels, { alpha: options.alpha, temperature: options.temperature, kind });
    let total: tf.Scalar = terms.total;
    let featureLoss: tf.Scalar = tf.scalar(0);
    for (const pair of features) {
      const t = tensorDataToTf(gatherRows(data.features!.get(pair.student)!, idx));
      featureLoss = tf.add(featureLoss, featureTerm(r.outputs[pair.student]!, t, adapters.get(pair.student))) as tf.Scalar;
    }
    if (features.length > 0) total = tf.add(total, tf.mul(featureLoss, options.featureWeight ?? 1)) as tf.Scalar;
    const correctCount =
      kind === 'kd' && labels ? tf.sum(tf.cast(tf.equal(tf.argMax(tf.reshape(output, [idx.length, -1]), 1), labels), 'float32')) : tf.scalar(0);
    out.stats = tf.keep(tf.stack([total, terms.hard ?? tf.scalar(0), terms.soft ?? tf.scalar(0), featureLoss, correctCount]));
    return total;
  }

  compute(idx: Int32Array, globalStep: number): ComputedStep {
    const { graph, params } = this;
    const out: { updates: ForwardResult['updates']; stats?: tf.Tensor } = { updates: [] };
    const { value, grads } = tf.variableGrads(
      () => this.loss(idx, globalStep, out),
      params.map((p) => p.variable),
    );
    const gradMap = new Map<string, tf.Tensor>();
    for (const p of params) {
      const g = grads[p.variable.name];
      if (g) gradMap.set(p.name, g);
    }
    const s = out.stats!.dataSync();
    out.stats!.dispose();
    value.dispose();
    const release = (): void => {
      for (const g of Object.values(grads)) g.dispose();
    };
    return {
      loss: s[0]!,
      nonFiniteGradient: () => nonFiniteGradient(gradMap),
      update: (learningRate) => this.tfOptimizer.apply(params, gradMap, learningRate),
      finish: () => {
        graph.applyUpdates(out.updates);
        release();
        return { loss: s[0]!, hard: s[1]!, soft: s[2]!, feature: s[3]!, correct: s[4]! };
      },
      discard: release,
    };
  }

  values(): Map<string, Float32Array> {
    const out = this.graph.snapshot();
    for (const a of this.adapters.values()) out.set(a.name, a.variable.dataSync() as Float32Array);
    return out;
  }

  restore(values: ReadonlyMap<string, Float32Array>): void {
    this.graph.restore(values);
    for (const a of this.adapters.values()) {
      const v = values.get(a.name);
      if (v) tf.tidy(() => a.variable.assign(tf.tensor(v, a.variable.shape)));
    }
  }

  evaluation(data: TrainData): Evaluation | undefined {
    const { graph, options } = this;
    if (!data.labels) return undefined;
    return () => evaluate(graph, data, { outputName: options.outputName, batchSize: options.evalBatchSize ?? 256, kind: options.lossKind });
  }

  dispose(): void {
    this.tfOptimizer.dispose();
    for (const a of this.adapters.values()) a.variable.dispose();
  }
}

/**
 * Trains `graph` in place (../core/loop.ts on tfjs) and returns the history and the chosen weights;
 * the graph holds the last step's weights afterwards.
 */
export async function trainLoop(graph: TrainableGraph, data: TrainData, options: LoopOptions): Promise<LoopResult> {
  checkTrainData(data);
  return runLoop(new TfjsStepBackend(graph, data, options, featureAdapters(graph, data, options)), data, options);
}

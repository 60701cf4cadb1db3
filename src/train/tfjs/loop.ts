/**
 * The training loop shared by distillation and QAT: seeded shuffling, mini-batch steps through the
 * TrainableGraph (loss from ./losses.ts, gradients by tf.variableGrads), optimizer and learning-rate
 * schedule, gradual pruning, evaluation each epoch, best snapshot, early stopping, and
 * checkpoint/resume that reproduces an uninterrupted run exactly (same shuffles, same dropout seeds,
 * same optimizer state). Progress goes to a callback.
 * Imports: @tensorflow/tfjs-core, ../../ir/dtype, ../../errors, ./onnx-graph, ./losses, ./optimizer, ../core/non-finite,
 * ./gradual-pruning, ../core/checkpoint, ../core/batching (epoch order and row gathers, shared with the
 * onnxruntime loop), ../core/feature-adapters (the feature-pair shape rule and adapter initial values).
 */
import * as tf from '@tensorflow/tfjs-core';
import { UsageError } from '../../errors.js';
import type { TensorData } from '../../ir/dtype.js';
import { readCheckpoint } from '../core/checkpoint.js';
import { GradualPruner, type LayerSparsity } from './gradual-pruning.js';
import { distillationLoss, meanSquaredError } from './losses.js';
import { tensorDataToTf, type TrainableGraph } from './onnx-graph.js';
import { Optimizer, type OptimizerOptions, type Param, type ScheduleKind } from './optimizer.js';
import { adapterInit, adapterName, featureNeedsAdapter } from '../core/feature-adapters.js';
import { gatherRows } from '../core/batching.js';
import { EpochBook, epochPlan, checkResume, loopFingerprint, pruningSchedule, runEpoch, type CheckpointMeta } from '../core/loop-state.js';
import { NonFiniteTrainingError } from '../core/non-finite.js';

export { epochPermutation, gatherRows } from '../core/batching.js';

/** Samples, sample dim first. `targets` holds 'labels', 'teacher' and 'feature:<student tensor>' arrays. */
export interface TrainData {
  count: number;
  inputs: Record<string, TensorData>;
  labels?: TensorData;
  teacher?: TensorData;
  /** Teacher intermediates by student tensor name (feature distillation). */
  features?: Map<string, TensorData>;
}

export interface FeaturePair {
  teacher: string;
  student: string;
}

export interface LoopProgress {
  phase: 'train' | 'eval';
  epoch: number;
  epochs: number;
  step: number;
  steps: number;
  loss?: number;
  accuracy?: number;
  samplesPerSecond?: number;
  etaSeconds?: number;
}

export interface LoopOptions {
  epochs: number;
  batchSize: number;
  seed: number;
  learningRate: number;
  optimizer: OptimizerOptions;
  schedule: ScheduleKind;
  /** Step schedule: decay every N epochs. */
  stepEpochs?: number;
  gamma?: number;
  lossKind: 'kd' | 'mse';
  alpha: number;
  temperature: number;
  features?: FeaturePair[];
  featureWeight?: number;
  /** Student output the loss reads (logits). */
  outputName: string;
  /** Gradual magnitude pruning of the weight tensors to this sparsity. */
  pruneTo?: number;
  /** Pruning reaches its target at this fraction of all steps (default 0.75), then masks stay fixed. */
  pruneEndFraction?: number;
  /** Variable names pruning applies to (default: conv/gemm/matmul kernels). */
  pruneParams?: string[];
  /** Early stopping: epochs without improvement of the eval score. */
  patience?: number;
  /** BatchNormalization in inference form while training. */
  freezeNorm?: boolean;
  evalData?: TrainData;
  evalBatchSize?: number;
  checkpointPath?: string;
  resumeFrom?: string;
  /** Stop (as if interrupted) after this many epochs; the checkpoint is written first. */
  stopAfterEpoch?: number;
  /** Settings a resumed run must share with the run that wrote the checkpoint. */
  fingerprint?: Record<string, unknown>;
  onProgress?: (event: LoopProgress) => void;
}

export interface EpochRecord {
  epoch: number;
  loss: number;
  /** Mean hard-label and soft-target terms of the loss, when present. */
  hardLoss?: number;
  softLoss?: number;
  featureLoss?: number;
  trainAccuracy?: number;
  evalAccuracy?: number;
  evalLoss?: number;
  learningRate: number;
  samplesPerSecond: number;
  seconds: number;
  /** Pruning target reached at the end of the epoch. */
  sparsity?: number;
}

export interface LoopResult {
  history: EpochRecord[];
  bestEpoch?: number;
  bestScore?: number;
  stoppedEarly: boolean;
  /** Stopped by stopAfterEpoch (a checkpoint holds the state to resume). */
  interrupted: boolean;
  resumedAfterEpoch?: number;
  /** The resumed checkpoint's run had this many epochs, fewer than this run's (checkResume). */
  extendedFromEpochs?: number;
  steps: number;
  samplesPerSecond: number;
  sparsity?: LayerSparsity[];
  /** The chosen weights (best eval epoch, else the last), by variable name. */
  values: Map<string, Float32Array>;
}

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
      const labels = labelsTensor(gatherRows(data.labels!, idx), options.kind);
      if (options.kind === 'mse') return tf.mul(meanSquaredError(out, tf.reshape(labels, out.shape)), idx.length).dataSync()[0]!;
      const predicted = tf.argMax(tf.reshape(out, [idx.length, -1]), 1);
      return tf.sum(tf.cast(tf.equal(predicted, labels), 'float32')).dataSync()[0]!;
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

/** Trains `graph` in place and returns the history and the chosen weights. */
export async function trainLoop(graph: TrainableGraph, data: TrainData, options: LoopOptions): Promise<LoopResult> {
  const progress = options.onProgress ?? (() => undefined);
  const kind = options.lossKind;
  const features = options.features ?? [];
  const batchSize = Math.min(options.batchSize, data.count);
  if (data.count === 0) throw new UsageError('the training data set has no samples');
  if (!data.labels && !data.teacher) throw new UsageError('training needs labels or teacher outputs');
  // A last partial batch is dropped: a batch of one makes batch statistics meaningless.
  const stepsPerEpoch = Math.max(1, Math.floor(data.count / batchSize));
  const totalSteps = stepsPerEpoch * options.epochs;

  // Feature adapters (student channels -> teacher channels) where the channel counts differ.
  const adapters = new Map<string, Param>();
  features.forEach((pair, i) => {
    const t = data.features?.get(pair.student);
    if (!t) throw new UsageError(`no teacher values for feature pair ${pair.teacher}=${pair.student}`);
    const studentShape = tf.tidy(() => {
      return graph.forward(batchFeeds(data.inputs, [0]), { fetch: [pair.student] }).outputs[pair.student]!.shape;
    });
    if (featureNeedsAdapter(pair, t.dims.slice(1), studentShape.slice(1))) {
      adapters.set(pair.student, makeAdapter(pair.student, studentShape[1]!, t.dims[1]!, options.seed, i));
    }
  });

  const params: Param[] = [...graph.trainableVariables(), ...adapters.values()];
  if (params.length === 0) throw new UsageError('the model has no trainable float weights');
  const optimizer = new Optimizer(options.optimizer);
  const pruning = pruningSchedule(options, totalSteps);
  let pruner: GradualPruner | undefined;
  if (pruning) {
    const names = new Set(options.pruneParams ?? defaultPruneParams(graph));
    const targets = params.filter((p) => names.has(p.name));
    if (targets.length === 0) throw new UsageError('--prune-to: the model has no Conv/Gemm/MatMul weights to prune');
    pruner = new GradualPruner(targets, pruning);
  }
  const fingerprint = loopFingerprint(
    options,
    batchSize,
    data.count,
    params.map((p) => ({ name: p.name, size: p.variable.size })),
  );

  const book = new EpochBook(options, data, stepsPerEpoch);
  let startEpoch = 0;
  let globalStep = 0;
  const snapshotAll = (): Map<string, Float32Array> => {
    const out = graph.snapshot();
    for (const a of adapters.values()) out.set(a.name, a.variable.dataSync() as Float32Array);
    return out;
  };
  const restoreAll = (values: Map<string, Float32Array>): void => {
    graph.restore(values);
    for (const a of adapters.values()) {
      const v = values.get(a.name);
      if (v) tf.tidy(() => a.variable.assign(tf.tensor(v, a.variable.shape)));
    }
  };

  if (options.resumeFrom) {
    const ckpt = await readCheckpoint<CheckpointMeta>(options.resumeFrom);
    const { extendedFrom } = checkResume(options.resumeFrom, ckpt.meta, fingerprint);
    restoreAll(ckpt.variables);
    optimizer.load(ckpt.meta.optimizerStep, ckpt.optimizer, params);
    pruner?.load(ckpt.meta.pruneCurrent, ckpt.masks);
    book.resume(ckpt.meta, ckpt.best, extendedFrom);
    startEpoch = ckpt.meta.epoch;
    globalStep = ckpt.meta.globalStep;
  }

  const featureWeight = options.featureWeight ?? 1;

  const plan = epochPlan(options, data.count, batchSize, stepsPerEpoch, globalStep);

  for (let epoch = startEpoch; epoch < options.epochs; epoch++) {
    const walked = await runEpoch(
      epoch,
      plan,
      globalStep,
      (idx, lr, step, b) => {
        pruner?.maybeUpdate(step);
        let updates: ReturnType<TrainableGraph['forward']>['updates'] = [];
        let stats: tf.Tensor | undefined;
        const { value, grads } = tf.variableGrads(
          () => {
            const fetch = [options.outputName, ...features.map((f) => f.student)];
            const r = graph.forward(batchFeeds(data.inputs, idx), {
              training: true,
              fetch,
              seed: (options.seed * 7919 + step) >>> 0,
              freezeNorm: options.freezeNorm,
            });
            updates = r.updates;
            const out = r.outputs[options.outputName]!;
            const labels = data.labels ? labelsTensor(gatherRows(data.labels, idx), kind) : undefined;
            const teacher = data.teacher ? tensorDataToTf(gatherRows(data.teacher, idx)) : undefined;
            const terms = distillationLoss(out, teacher, labels, { alpha: options.alpha, temperature: options.temperature, kind });
            let total: tf.Scalar = terms.total;
            let featureLoss: tf.Scalar = tf.scalar(0);
            for (const pair of features) {
              let s = channelsLast(r.outputs[pair.student]!);
              const t = channelsLast(tensorDataToTf(gatherRows(data.features!.get(pair.student)!, idx)));
              const adapter = adapters.get(pair.student);
              if (adapter) {
                const lead = s.shape.slice(0, -1);
                s = tf.reshape(tf.matMul(tf.reshape(s, [-1, s.shape[s.rank - 1]!]), adapter.variable), [...lead, adapter.variable.shape[1]!]);
              }
              featureLoss = tf.add(featureLoss, meanSquaredError(s, t)) as tf.Scalar;
            }
            if (features.length > 0) total = tf.add(total, tf.mul(featureLoss, featureWeight)) as tf.Scalar;
            const correctCount =
              kind === 'kd' && labels ? tf.sum(tf.cast(tf.equal(tf.argMax(tf.reshape(out, [idx.length, -1]), 1), labels), 'float32')) : tf.scalar(0);
            stats = tf.keep(tf.stack([total, terms.hard ?? tf.scalar(0), terms.soft ?? tf.scalar(0), featureLoss, correctCount]));
            return total;
          },
          params.map((p) => p.variable),
        );
        const gradMap = new Map<string, tf.Tensor>();
        for (const p of params) {
          const g = grads[p.variable.name];
          if (g) gradMap.set(p.name, g);
        }
        const s = stats!.dataSync();
        stats!.dispose();
        value.dispose();
        // nothing non-finite is applied: a NaN hidden from the loss (a Relu maps NaN to 0) shows in the gradients
        const bad = !Number.isFinite(s[0]!) ? `the loss became ${s[0]}` : nonFiniteGradient(gradMap);
        if (bad) {
          for (const g of Object.values(grads)) g.dispose();
          const inputs: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
          for (const [name, td] of Object.entries(data.inputs)) inputs[name] = gatherRows(td, idx);
          throw new NonFiniteTrainingError(bad, epoch + 1, b + 1, snapshotAll(), inputs);
        }
        optimizer.apply(params, gradMap, lr);
        pruner?.applyMasks();
        graph.applyUpdates(updates);
        for (const g of Object.values(grads)) g.dispose();
        return { loss: s[0]!, hard: s[1]!, soft: s[2]!, feature: s[3]!, correct: s[4]! };
      },
      progress,
    );
    globalStep = walked.globalStep;
    const evalData = options.evalData;
    const { record, score } = await book.closeEpoch(
      epoch,
      walked,
      pruner?.current,
      evalData?.labels ? () => evaluate(graph, evalData, { outputName: options.outputName, batchSize: options.evalBatchSize ?? 256, kind }) : undefined,
    );
    const stop = await book.endEpoch(epoch, record, score, options, { globalStep, fingerprint, values: snapshotAll, optimizer, pruner });
    if (stop) break;
  }

  const values = book.best ?? snapshotAll();
  const result = book.result(values, globalStep);
  // sparsity of the weights that are handed back
  if (pruner) result.sparsity = pruner.report(values);
  optimizer.dispose();
  pruner?.dispose();
  for (const a of adapters.values()) a.variable.dispose();
  return result;
}

/**
 * Quantization-aware training (QAT), the training half: fine-tune an FP32 model with fake
 * quantization in its forward pass so that its weights survive INT8. What to fake-quantize, and
 * with which activation parameters, comes in as plain data (a FakeQuantPlan, made by app/qat.ts from
 * the PTQ plan and ranges); exporting the result as a QDQ model is app/qat.ts's job too.
 *
 *   - Activations: fake-quantized with fixed parameters (the PTQ calibration ranges), asymmetric
 *     uint8 or symmetric int8 as PTQ chooses; straight-through estimator, zero gradient outside the
 *     range.
 *   - Weights: symmetric int8 over [-127, 127], per channel or per tensor as PTQ, the scale recomputed
 *     from the current weights each step (as PTQ will from the final ones); the straight-through
 *     estimator passes the gradient unchanged.
 *   - Loss: cross-entropy with labels, optionally distillation from the FP32 model (the teacher runs
 *     once in onnxruntime, like `distill`).
 *
 * The model must train at any batch size (app/ batchifies a fixed-batch model first).
 * Imports: @tensorflow/tfjs-core, ../ir, ../data, ../runtime, ../errors, ./backend, ./onnx-graph,
 * ./loop, ./distill (teacher cache and data helpers).
 */
import * as tf from '@tensorflow/tfjs-core';
import { UsageError } from '../errors.js';
import { DataType } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import type { Dataset } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import { initTrainingBackend, type BackendInfo, type TrainingBackend } from './backend.js';
import { evaluate, trainLoop, type EpochRecord } from './loop.js';
import { TrainableGraph } from './onnx-graph.js';
import { teacherTargets, toTrainData } from './distill.js';
import type { OptimizerKind, ScheduleKind } from './optimizer.js';

/** Fixed quantization parameters of one activation tensor: q = clamp(round(x / scale) + zeroPoint). */
export interface ActivationQuantParams {
  scale: number;
  zeroPoint: number;
  type: typeof DataType.UINT8 | typeof DataType.INT8;
}

/** What to fake-quantize while training, by tensor name. */
export interface FakeQuantPlan {
  /** Activation tensors and their fixed parameters. */
  activations: ReadonlyMap<string, ActivationQuantParams>;
  /** Weight initializers: the per-channel axis, or null for one scale per tensor. */
  weights: ReadonlyMap<string, number | null>;
}

export interface QatProgress {
  phase: 'backend' | 'teacher' | 'train' | 'eval' | 'export';
  message: string;
  epoch?: number;
  epochs?: number;
  loss?: number;
  accuracy?: number;
  samplesPerSecond?: number;
  etaSeconds?: number;
}

export interface FakeQuantTrainingOptions {
  /** Training data (model inputs and labels, sample dim first). */
  train: Dataset;
  /** Labelled data to pick the best epoch and report accuracy. */
  eval?: Dataset;
  /** Distil from the FP32 model (soft targets from onnxruntime) in addition to the labels. */
  teacher?: boolean;
  epochs?: number;
  batchSize?: number;
  /** Fine-tuning rate: small, the model is already trained (default 1e-4). */
  learningRate?: number;
  optimizer?: OptimizerKind;
  schedule?: ScheduleKind;
  seed?: number;
  temperature?: number;
  alpha?: number;
  /** Keep BatchNormalization frozen (default true; PTQ models usually have it folded anyway). */
  freezeNorm?: boolean;
  backend?: TrainingBackend | 'auto';
  outputName?: string;
  runner?: RunnerOptions;
  onProgress?: (event: QatProgress) => void;
}

export interface FakeQuantTrainingResult {
  /** The fine-tuned FP32 model (the weights chosen: best epoch with eval data, else the last). */
  model: Model;
  /** The output the loss read. */
  outputName: string;
  backend: BackendInfo;
  epochs: number;
  history: EpochRecord[];
  bestEpoch?: number;
  samplesPerSecond: number;
  fakeQuantized: { activations: number; weights: number };
  /** Fake-quantized accuracy (interpreter) before and after fine-tuning. */
  fakeQuantAccuracy: { before?: number; after?: number };
}

/** x -> dequantize(quantize(x)) with fixed parameters; gradient passed inside the range, zero outside. */
function fakeQuantActivation(p: ActivationQuantParams): (t: tf.Tensor) => tf.Tensor {
  const qmin = p.type === DataType.UINT8 ? 0 : -128;
  const qmax = p.type === DataType.UINT8 ? 255 : 127;
  const lo = (qmin - p.zeroPoint) * p.scale;
  const hi = (qmax - p.zeroPoint) * p.scale;
  const fq = tf.customGrad(((...args: Array<tf.Tensor | ((ts: tf.Tensor[]) => void)>) => {
    const x = args[0] as tf.Tensor;
    (args[1] as (ts: tf.Tensor[]) => void)([x]);
    const q = tf.clipByValue(tf.add(tf.round(tf.div(x, p.scale)), p.zeroPoint), qmin, qmax);
    return {
      value: tf.mul(tf.sub(q, p.zeroPoint), p.scale),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const inside = tf.logicalAnd(tf.greaterEqual(saved[0]!, lo), tf.lessEqual(saved[0]!, hi));
        return [tf.mul(dy, tf.cast(inside, 'float32'))];
      },
    };
  }) as Parameters<typeof tf.customGrad>[0]);
  return (t) => fq(t);
}

/**
 * Symmetric int8 weights over [-127, 127] with the scale of the current values (per channel along
 * `axis`, or per tensor); straight-through gradient.
 */
function fakeQuantWeight(axis: number | null): (w: tf.Tensor) => tf.Tensor {
  const fq = tf.customGrad(((...args: Array<tf.Tensor | unknown>) => {
    const w = args[0] as tf.Tensor;
    const reduceAxes = axis === null ? undefined : Array.from({ length: w.rank }, (_v, i) => i).filter((i) => i !== axis);
    const absMax = tf.max(tf.abs(w), reduceAxes, true);
    // an all-zero channel gets scale 1, as PTQ does
    const scale = tf.where(tf.greater(absMax, 0), tf.div(absMax, 127), tf.onesLike(absMax));
    const value = tf.mul(tf.clipByValue(tf.round(tf.div(w, scale)), -127, 127), scale);
    return { value, gradFunc: (dy: tf.Tensor) => [dy] };
  }) as Parameters<typeof tf.customGrad>[0]);
  return (w) => fq(w);
}

/**
 * Fine-tunes `model` with fake quantization where `plan` says and returns the trained FP32 model
 * with the training record. `model` is not modified.
 */
export async function trainFakeQuantized(model: Model, plan: FakeQuantPlan, options: FakeQuantTrainingOptions): Promise<FakeQuantTrainingResult> {
  const progress = options.onProgress ?? (() => undefined);
  const backend = await initTrainingBackend({ backend: options.backend ?? 'auto' });
  progress({ phase: 'backend', message: `training backend: ${backend.description}` });

  const graph = new TrainableGraph(model);
  try {
    const activations = new Map<string, (t: tf.Tensor) => tf.Tensor>();
    for (const [name, p] of plan.activations) activations.set(name, fakeQuantActivation(p));
    const weights = new Map<string, (w: tf.Tensor) => tf.Tensor>();
    for (const [name, axis] of plan.weights) {
      if (graph.variables.has(name)) weights.set(name, fakeQuantWeight(axis));
    }
    graph.hooks = { activations, weights };

    const outputName = options.outputName ?? graph.outputNames()[0]!;
    const train = toTrainData(options.train, graph.inputNames(), 'training');
    const evalData = options.eval ? toTrainData(options.eval, graph.inputNames(), 'evaluation') : undefined;
    if (!train.labels && !options.teacher) throw new UsageError(`${options.train.source}: QAT needs labels (or --qat-teacher)`);
    if (options.teacher) {
      progress({ phase: 'teacher', message: `running the FP32 model once over ${train.count} training samples` });
      const targets = await teacherTargets(model, options.train, [outputName], { runner: options.runner, studentInputs: graph.inputNames() });
      train.teacher = targets.get(outputName)!;
    }
    const before = evalData?.labels ? evaluate(graph, evalData, { outputName, batchSize: 256, kind: 'kd' }).accuracy : undefined;
    const epochs = options.epochs ?? 2;
    const result = await trainLoop(graph, train, {
      epochs,
      batchSize: options.batchSize ?? 64,
      seed: options.seed ?? 0,
      learningRate: options.learningRate ?? 1e-4,
      optimizer: { kind: options.optimizer ?? 'adam' },
      schedule: options.schedule ?? 'cosine',
      lossKind: 'kd',
      alpha: train.teacher && train.labels ? (options.alpha ?? 0.5) : train.teacher ? 0 : 1,
      temperature: options.temperature ?? 2,
      outputName,
      freezeNorm: options.freezeNorm ?? true,
      evalData,
      fingerprint: { mode: 'qat' },
      onProgress: (e) =>
        progress({
          phase: e.phase,
          message:
            e.phase === 'train'
              ? `QAT epoch ${e.epoch}/${e.epochs} step ${e.step}/${e.steps} loss ${e.loss?.toFixed(4)}`
              : `QAT epoch ${e.epoch}/${e.epochs} evaluating`,
          epoch: e.epoch,
          epochs: e.epochs,
          loss: e.loss,
          accuracy: e.accuracy,
          samplesPerSecond: e.samplesPerSecond,
          etaSeconds: e.etaSeconds,
        }),
    });
    const trained = graph.exportModel(result.values);
    const after =
      result.history.length > 0
        ? result.bestEpoch !== undefined
          ? result.history[result.bestEpoch - 1]!.evalAccuracy
          : result.history.at(-1)!.evalAccuracy
        : before;
    return {
      model: trained,
      outputName,
      backend,
      epochs,
      history: result.history,
      bestEpoch: result.bestEpoch,
      samplesPerSecond: result.samplesPerSecond,
      fakeQuantized: { activations: activations.size, weights: weights.size },
      fakeQuantAccuracy: { before, after },
    };
  } finally {
    graph.dispose();
  }
}

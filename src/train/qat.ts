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
 * Two backends run it: tfjs (the plan as hooks of the interpreter, ./onnx-graph.ts, trained by
 * ./loop.ts) and onnxruntime (the plan as QuantizeLinear/DequantizeLinear nodes,
 * ./onnxruntime/fake-quant.ts, differentiated by ./onnxruntime/rules-quant.ts and trained by
 * ./onnxruntime/loop.ts); 'auto' takes onnxruntime when every op on the path to the loss has a
 * gradient rule. The model must train at any batch size (app/ batchifies a fixed-batch model first).
 * Imports: @tensorflow/tfjs-core, ../ir, ../data, ../runtime, ../errors, ./tfjs/backend, ./tfjs/onnx-graph,
 * ./tfjs/loop, ./core (loop types, optimizer and schedule kinds), ./distill (teacher cache and data
 * helpers), ./onnxruntime (lazily).
 */
import * as tf from '@tensorflow/tfjs-core';
import { UsageError } from '../errors.js';
import { DataType } from '../ir/dtype.js';
import type { Model } from '../ir/index.js';
import type { Dataset } from '../data/index.js';
import type { RunnerOptions } from '../runtime/index.js';
import { initTrainingBackend, onnxruntimeBackendInfo, type BackendInfo, type TrainingBackend } from './tfjs/backend.js';
import type { EpochRecord, LoopOptions, LoopResult, TrainData } from './core/loop.js';
import { evaluate, trainLoop } from './tfjs/loop.js';
import { TrainableGraph } from './tfjs/onnx-graph.js';
import { checkTrainingLabels, studentOutputDims, teacherTargets, toTrainData } from './distill.js';
import type { OptimizerKind } from './core/optimizer-options.js';
import type { ScheduleKind } from './core/schedule.js';
import type { ActivationQuantParams, FakeQuantModel, FakeQuantPlan } from './onnxruntime/fake-quant.js';

export type { ActivationQuantParams, FakeQuantPlan } from './onnxruntime/fake-quant.js';

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
  /**
   * The loss: 'kd' (default) for class scores (cross-entropy with labels, soft targets from the
   * teacher); 'mse' on the output's values for any other output (regression labels, or the
   * teacher's outputs: label-free QAT of an embedding, a map, per-step scores).
   */
  loss?: 'kd' | 'mse';
  /** Keep BatchNormalization frozen (default true; PTQ models usually have it folded anyway). */
  freezeNorm?: boolean;
  /**
   * With eval data: the starting weights are the ones to beat, and an epoch that scores below the
   * best restores its weights and multiplies the learning rate by this factor (the loop's
   * `rollback`); default off.
   */
  rollback?: number;
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
  /**
   * Fake-quantized accuracy (the training backend's forward: interpreter or onnxruntime) before and
   * after fine-tuning, on the evaluation data, else on the labelled training data (`on` says which;
   * both absent when neither has labels).
   */
  fakeQuantAccuracy: { before?: number; after?: number; on?: 'evaluation' | 'training' };
}

/** The result of a QAT run on either backend: the trained model, the loop's history, the fake-quantized accuracy before and after (`on`: which data, when scored). */
function qatResult(
  model: Model,
  run: { outputName: string; backend: BackendInfo; loop: LoopOptions; result: LoopResult; fakeQuantized: { activations: number; weights: number } },
  accuracy: { before?: number; after?: number; on?: 'evaluation' | 'training' },
): FakeQuantTrainingResult {
  const { result } = run;
  return {
    model,
    outputName: run.outputName,
    backend: run.backend,
    epochs: run.loop.epochs,
    history: result.history,
    bestEpoch: result.bestEpoch,
    samplesPerSecond: result.samplesPerSecond,
    fakeQuantized: run.fakeQuantized,
    fakeQuantAccuracy: { before: accuracy.before, after: accuracy.after, ...(accuracy.on ? { on: accuracy.on } : {}) },
  };
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
 * Installs the plan's fake quantization as forward hooks of the tfjs interpreter (weights only where
 * the graph has them as variables); returns the hooks installed.
 */
export function installFakeQuantHooks(
  graph: TrainableGraph,
  plan: FakeQuantPlan,
): { activations: Map<string, (t: tf.Tensor) => tf.Tensor>; weights: Map<string, (w: tf.Tensor) => tf.Tensor> } {
  const activations = new Map<string, (t: tf.Tensor) => tf.Tensor>();
  for (const [name, p] of plan.activations) activations.set(name, fakeQuantActivation(p));
  const weights = new Map<string, (w: tf.Tensor) => tf.Tensor>();
  for (const [name, axis] of plan.weights) {
    if (graph.variables.has(name)) weights.set(name, fakeQuantWeight(axis));
  }
  graph.hooks = { activations, weights };
  return { activations, weights };
}

/** The training data (with the teacher's soft targets when asked) and the evaluation data. */
async function qatData(
  model: Model,
  options: FakeQuantTrainingOptions,
  inputNames: string[],
  outputName: string,
  progress: (event: QatProgress) => void,
): Promise<{ train: TrainData; evalData?: TrainData }> {
  const train = toTrainData(options.train, inputNames, 'training');
  const evalData = options.eval ? toTrainData(options.eval, inputNames, 'evaluation') : undefined;
  if (!train.labels && !options.teacher) throw new UsageError(`${options.train.source}: QAT needs labels (or --qat-teacher)`);
  if (options.teacher) {
    progress({ phase: 'teacher', message: `running the FP32 model once over ${train.count} training samples` });
    const targets = await teacherTargets(model, options.train, [outputName], { runner: options.runner, studentInputs: inputNames });
    train.teacher = targets.get(outputName)!;
  }
  return { train, evalData };
}

/** The loop settings of QAT, the same on every backend. */
function qatLoopOptions(
  options: FakeQuantTrainingOptions,
  train: TrainData,
  evalData: TrainData | undefined,
  outputName: string,
  progress: (event: QatProgress) => void,
): LoopOptions {
  return {
    epochs: options.epochs ?? 2,
    batchSize: options.batchSize ?? 64,
    seed: options.seed ?? 0,
    learningRate: options.learningRate ?? 1e-4,
    optimizer: { kind: options.optimizer ?? 'adam' },
    schedule: options.schedule ?? 'cosine',
    lossKind: options.loss ?? 'kd',
    alpha: train.teacher && train.labels ? (options.alpha ?? 0.5) : train.teacher ? 0 : 1,
    temperature: options.temperature ?? 2,
    outputName,
    freezeNorm: options.freezeNorm ?? true,
    evalData,
    ...(options.rollback !== undefined && evalData ? { rollback: { factor: options.rollback } } : {}),
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
  };
}

/**
 * The labelled data fake-quantized accuracy is measured on: the evaluation data, else the
 * training data (labelled --data without --eval-data still gets its before/after numbers).
 */
function scoredData(train: TrainData, evalData: TrainData | undefined): { data: TrainData; on: 'evaluation' | 'training' } | undefined {
  if (evalData?.labels) return { data: evalData, on: 'evaluation' };
  return train.labels ? { data: train, on: 'training' } : undefined;
}

/** Evaluation accuracy of the weights chosen (best epoch with eval data, else the last; the starting weights': `before`). */
function chosenAccuracy(result: LoopResult, before: number | undefined): number | undefined {
  if (result.history.length === 0 || result.bestEpoch === 0) return before;
  return result.bestEpoch !== undefined ? result.history[result.bestEpoch - 1]!.evalAccuracy : result.history.at(-1)!.evalAccuracy;
}

/**
 * Fine-tunes `model` with fake quantization where `plan` says and returns the trained FP32 model
 * with the training record. `model` is not modified. On onnxruntime (asked, or 'auto' when every op
 * on the path to the loss has a gradient rule) the plan becomes QuantizeLinear/DequantizeLinear
 * nodes of the graph that trains (./onnxruntime/fake-quant.ts); on tfjs it is hooks of the
 * interpreter. Either way the returned model has no fake-quantization nodes.
 */
export async function trainFakeQuantized(model: Model, plan: FakeQuantPlan, options: FakeQuantTrainingOptions): Promise<FakeQuantTrainingResult> {
  const progress = options.onProgress ?? (() => undefined);
  const requested = options.backend ?? 'auto';
  if (requested === 'onnxruntime' || requested === 'auto') {
    const { insertFakeQuant } = await import('./onnxruntime/fake-quant.js');
    const fq = insertFakeQuant(model, plan);
    const missing = await uncovered(fq.model, options.outputName);
    if (missing.length === 0) return trainOnOnnxruntime(model, fq, options, progress);
    if (requested === 'onnxruntime') {
      throw new UsageError(
        `cannot train on onnxruntime: no gradient rule for node ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ` and ${missing.length - 5} more` : ''} (use --backend wasm)`,
      );
    }
  }
  const backend = await initTrainingBackend({ backend: requested });
  progress({ phase: 'backend', message: `training backend: ${backend.description}` });

  const graph = new TrainableGraph(model);
  try {
    const { activations, weights } = installFakeQuantHooks(graph, plan);
    const outputName = options.outputName ?? graph.outputNames()[0]!;
    const { train, evalData } = await qatData(model, options, graph.inputNames(), outputName, progress);
    await checkTrainingLabels({ model, role: 'QAT model' }, outputName, studentOutputDims(undefined, graph, train, outputName), options, () => undefined);
    const scored = scoredData(train, evalData);
    const before = scored ? evaluate(graph, scored.data, { outputName, batchSize: 256, kind: 'kd' }).accuracy : undefined;
    const loop = qatLoopOptions(options, train, evalData, outputName, progress);
    const result = await trainLoop(graph, train, loop);
    // without eval data the loop keeps the last epoch's weights, which the graph holds now
    const after =
      scored?.on === 'training' ? evaluate(graph, scored.data, { outputName, batchSize: 256, kind: 'kd' }).accuracy : chosenAccuracy(result, before);
    const fakeQuantized = { activations: activations.size, weights: weights.size };
    return qatResult(graph.exportModel(result.values), { outputName, backend, loop, result, fakeQuantized }, { before, after, on: scored?.on });
  } finally {
    graph.dispose();
  }
}

/** Nodes on the path from a weight to the loss without a gradient rule, for the onnxruntime path. */
async function uncovered(fqModel: Model, outputName: string | undefined): Promise<string[]> {
  const { trainingCoverage } = await import('./onnxruntime/build.js');
  return trainingCoverage(fqModel, { outputName }).missing.map((m) => `'${m.node}' (${m.opType}${m.reason ? `: ${m.reason}` : ''})`);
}

/** QAT on onnxruntime: the fake-quantized graph trains with its native kernels (./onnxruntime/loop.ts). */
async function trainOnOnnxruntime(
  model: Model,
  fq: FakeQuantModel,
  options: FakeQuantTrainingOptions,
  progress: (event: QatProgress) => void,
): Promise<FakeQuantTrainingResult> {
  const { createOrtTrainer, ortTrainLoop, exportTrainedModel, OrtEvaluator } = await import('./onnxruntime/loop.js');
  const threads = options.runner?.intraOpThreads ?? 1;
  const backend = onnxruntimeBackendInfo(threads);
  progress({ phase: 'backend', message: `training backend: ${backend.description}` });
  const inputNames = model.graph.inputs.filter((v) => !v.initializer).map((v) => v.name);
  const outputName = options.outputName ?? model.graph.outputs[0]!.name;
  const { train, evalData } = await qatData(model, options, inputNames, outputName, progress);
  const loop = qatLoopOptions(options, train, evalData, outputName, progress);
  const trainer = await createOrtTrainer(fq.model, train.inputs, {
    lossKind: loop.lossKind,
    alpha: loop.alpha,
    temperature: loop.temperature,
    outputName,
    withLabels: !!train.labels,
    withTeacher: !!train.teacher,
    freezeNorm: loop.freezeNorm,
    threads,
  });
  try {
    await checkTrainingLabels({ model, role: 'QAT model' }, outputName, studentOutputDims(trainer, undefined, train, outputName), options, () => undefined);
  } catch (error) {
    await trainer.release();
    throw error;
  }
  let evaluator: Awaited<ReturnType<typeof OrtEvaluator.create>> | undefined;
  let trainerOwned = true; // until the loop takes it over (and releases it)
  try {
    let before: number | undefined;
    let after: number | undefined;
    const scored = scoredData(train, evalData);
    if (scored) {
      // the loop's evaluator, on the initial weights: every trainable value is fed, so onnxruntime
      // keeps the float fake-quantized arithmetic (no int32 bias quantization, no folded scales)
      evaluator = await OrtEvaluator.create(fq.model, [...trainer.graph.weights, ...trainer.graph.states], { threads });
      before = (await evaluator.evaluate(scored.data, trainer.values as Map<string, Float32Array>, { outputName, batchSize: 256, kind: 'kd' })).accuracy;
    }
    trainerOwned = false;
    const result = await ortTrainLoop(fq.model, train, { ...loop, threads, trainer, evaluator });
    if (scored?.on === 'training') {
      after = (await evaluator!.evaluate(scored.data, result.values, { outputName, batchSize: 256, kind: 'kd' })).accuracy;
    } else after = chosenAccuracy(result, before);
    const fakeQuantized = { activations: fq.activations.length, weights: fq.weights.length };
    return qatResult(exportTrainedModel(model, result.values), { outputName, backend, loop, result, fakeQuantized }, { before, after, on: scored?.on });
  } finally {
    await evaluator?.release();
    if (trainerOwned) await trainer.release();
  }
}

/**
 * Teacher-student distillation of ONNX models in Node. The teacher (any ONNX model) runs once per
 * training sample in onnxruntime and its outputs (and chosen intermediates) are cached; the student
 * trains on onnxruntime (./onnxruntime: one training graph, ./onnxruntime/loop.ts) when every
 * op on its path to the loss has a gradient rule, else through the tfjs interpreter
 * (./tfjs/onnx-graph.ts, ./tfjs/loop.ts), both by the one loop of ./core/loop.ts; the trained values are written back into the student's ONNX
 * graph, which is then loaded in onnxruntime to check that it runs and reproduces the trainer's
 * eval-mode outputs, and evaluated there.
 * Students: any ONNX model that trains at any batch size; making one (the teacher narrowed by channel
 * pruning, a fixed-batch model batchified) is app/distill.ts's job.
 * Imports: ../ir, ../data, ../runtime, ../evaluate, ../metrics (labels), ../errors, ./core (settings, loop types, batching,
 * non-finite, pruning types), ./tfjs/backend, ./tfjs/onnx-graph, ./tfjs/loop, ./onnxruntime/loop,
 * ./onnxruntime/build (coverage of feature tensors, the trainable set).
 */
import * as tf from '@tensorflow/tfjs-core';
import { InputError, UsageError } from '../errors.js';
import { DataType, elementCount, type TensorData } from '../ir/dtype.js';
import { formatShape, isTensorType, type Model } from '../ir/index.js';
import { batches, type Dataset } from '../data/index.js';
import { createCaptureRunner, createRunner, modelInputSpecs, modelLabel, type RunnerOptions } from '../runtime/index.js';
import { checkLabelRange, labelRange, labelRangeMessage, top1Accuracy } from '../evaluate/index.js';
import { labelIndices } from '../metrics/index.js';
import { initTrainingBackend, onnxruntimeBackendInfo, type BackendInfo, type TrainingBackend } from './tfjs/backend.js';
import { createOrtTrainer, exportTrainedModel, ortTrainLoop, OrtEvaluator, studentValueNames, type OrtTrainerOptions } from './onnxruntime/loop.js';
import { trainableParameters, trainingCoverage } from './onnxruntime/build.js';
import { explainNonFinite, NonFiniteTrainingError, nonFiniteMessage } from './core/non-finite.js';
import type { OnnxTrainStep } from './onnxruntime/session.js';
import { countAgreement } from './core/agreement.js';
import { gatherRows } from './core/batching.js';
import type { LoopOptions, LoopProgress, LoopResult, TrainData } from './core/loop.js';
import { batchFeeds, evaluate, trainLoop } from './tfjs/loop.js';
import { TrainableGraph, tensorDataToTf } from './tfjs/onnx-graph.js';
import type { LayerSparsity } from './core/pruning-masks.js';
import { DEFAULT_DISTILL_SETTINGS, type DistillSettings } from './core/defaults.js';

export const DISTILL_REPORT_SCHEMA = 1;

// The settings and their defaults live in a tfjs-free module so that `--help` can show them (./core/defaults.ts).
export { DEFAULT_DISTILL_SETTINGS, type DistillSettings };

export interface DistillProgress {
  phase: 'backend' | 'teacher' | 'train' | 'eval' | 'validate';
  message: string;
  epoch?: number;
  epochs?: number;
  step?: number;
  steps?: number;
  loss?: number;
  accuracy?: number;
  samplesPerSecond?: number;
  etaSeconds?: number;
}

export interface DistillOptions extends Partial<DistillSettings> {
  student: Model;
  /** Omitted: the student trains on labels alone (the baseline distillation is compared with). */
  teacher?: Model;
  train: Dataset;
  eval?: Dataset;
  backend?: TrainingBackend | 'auto';
  /** Student output the loss reads (default: the first output; `model-opt distill` asks for it when there are several). */
  outputName?: string;
  /**
   * Teacher output giving the soft targets (default: the output named as the student's, else the
   * teacher's only output; a teacher with several outputs and none of that name must name one).
   */
  teacherOutputName?: string;
  /** Weights (default trainable set, see ./parameters.ts) kept at their values: a fixed front end (STFT, filterbank). */
  freeze?: readonly string[];
  checkpointPath?: string;
  resumeFrom?: string;
  /** Stop after this many epochs as if interrupted (tests of resume). */
  stopAfterEpoch?: number;
  /** The loop's own stopping rule after each epoch (../core/loop.ts's LoopOptions.stopAfter). */
  stopAfter?: LoopOptions['stopAfter'];
  /** A tie of the best eval score keeps the later epoch's weights (../core/loop.ts's LoopOptions.keepLaterTies). */
  keepLaterTies?: boolean;
  runner?: RunnerOptions;
  onProgress?: (event: DistillProgress) => void;
  onWarning?: (message: string) => void;
}

/** What the loop reports of a run (../core/loop.ts's LoopResult), as the distillation report carries it. */
type LoopAccount = Pick<
  LoopResult,
  'history' | 'bestEpoch' | 'stoppedEarly' | 'interrupted' | 'resumedAfterEpoch' | 'extendedFromEpochs' | 'steps' | 'samplesPerSecond'
>;

export interface DistillReport extends LoopAccount {
  schemaVersion: number;
  backend: BackendInfo;
  /** The settings trained with; `alpha` as the loss used it (0 without labels, 1 without a teacher). */
  settings: DistillSettings;
  trainSamples: number;
  evalSamples?: number;
  /** 'distill' with a teacher, 'labels' without one. */
  mode: 'distill' | 'labels';
  /** Seconds the teacher took to label the training set once (cached for all epochs). */
  teacherSeconds?: number;
  accuracy: {
    teacher?: number;
    /** The student before training (interpreter, eval mode). */
    studentBefore?: number;
    /** The written student, in onnxruntime. */
    student?: number;
  };
  /** Largest |onnxruntime - interpreter| / max |interpreter| of the written student's outputs. */
  validationError: number;
  /** Weights kept fixed (--freeze). */
  frozen?: string[];
  sparsity?: { target: number; layers: LayerSparsity[]; overall: number };
}

function labelsAreClasses(labels: TensorData): boolean {
  return (labels.dtype !== DataType.FLOAT && labels.dtype !== DataType.DOUBLE) || (labels.dims.length === 2 && (labels.dims[1] ?? 1) > 1);
}

/** Runs the teacher once over the samples and keeps its output (and captured intermediates), sample-first. */
export async function teacherTargets(
  teacher: Model,
  data: Dataset,
  names: string[],
  options: { runner?: RunnerOptions; studentInputs: string[]; onProgress?: (done: number) => void },
): Promise<Map<string, TensorData>> {
  const teacherInputs = modelInputSpecs(teacher).map((s) => s.name);
  const rename = new Map<string, string>();
  for (const name of teacherInputs) {
    if (name in data.inputs) continue;
    if (teacherInputs.length === 1 && options.studentInputs.length === 1) rename.set(options.studentInputs[0]!, name);
    else throw new InputError(`the teacher's input '${name}' is not in the training data (inputs: ${Object.keys(data.inputs).join(', ')})`);
  }
  const runner = await createCaptureRunner(teacher, names, { label: 'teacher', ...options.runner });
  const parts = new Map<string, { data: Float32Array; dims: number[] }>();
  try {
    for (const batch of batches(data, 256)) {
      const feeds: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const [k, v] of Object.entries(batch.feeds)) {
        const target = rename.get(k) ?? k;
        if (teacherInputs.includes(target)) feeds[target] = v;
      }
      const out = await runner.run(feeds);
      for (const name of names) {
        const t = out[name]!;
        if (t.dtype !== DataType.FLOAT) throw new InputError(`teacher tensor '${name}' is not float32`);
        const perSample = elementCount(t.dims) / batch.size;
        let p = parts.get(name);
        if (!p) {
          const bytes = data.count * perSample * 4;
          if (bytes > 2 ** 31) {
            throw new UsageError(
              `caching teacher tensor '${name}' for ${data.count} samples needs ${(bytes / 2 ** 30).toFixed(1)} GiB; use fewer samples or another feature tensor`,
            );
          }
          p = { data: new Float32Array(data.count * perSample), dims: [data.count, ...t.dims.slice(1)] };
          parts.set(name, p);
        }
        p.data.set(t.data as Float32Array, batch.start * perSample);
      }
      options.onProgress?.(batch.start + batch.size);
    }
  } finally {
    await runner.release();
  }
  return new Map([...parts].map(([k, v]) => [k, { dtype: DataType.FLOAT, dims: v.dims, data: v.data }]));
}

/**
 * Top-1 accuracy of `outputName` on the labelled data in onnxruntime (src/evaluate: its label
 * policy and batch rule). A one-input data set whose array is named otherwise feeds a one-input model.
 */
export async function onnxruntimeAccuracy(
  model: Model,
  data: Dataset,
  outputName: string,
  runnerOptions: RunnerOptions | undefined,
  label: string,
): Promise<{ accuracy: number }> {
  const inputNames = modelInputSpecs(model).map((s) => s.name);
  const arrays = Object.values(data.inputs);
  const inputs =
    inputNames.length === 1 && arrays.length === 1 && !(inputNames[0]! in data.inputs)
      ? { [inputNames[0]!]: arrays[0]! }
      : Object.fromEntries(Object.entries(data.inputs).filter(([name]) => inputNames.includes(name)));
  const labels = data.labels;
  const perStep = labels && labels.dims.length >= 2 && (labels.dims[1] ?? 1) > 1 && (labels.dtype === DataType.INT64 || labels.dtype === DataType.INT32);
  const referenceScores = labels && labels.dims.length === 3 && labels.dtype === DataType.FLOAT;
  if (perStep || referenceScores) {
    // Class indices per step ([N, T]): sequence agreement; the reference's scores per step ([N, T, C]):
    // odds-weighted sequence agreement. The rule of the trainers' held-out score (./core/agreement.ts).
    const out = (await teacherTargets(model, data, [outputName], { runner: runnerOptions, studentInputs: Object.keys(data.inputs) })).get(outputName)!;
    const count = countAgreement(out.data as Float32Array, labels.data as ArrayLike<number | bigint>, data.count, outputName, labels.dims);
    return { accuracy: count.samples / data.count };
  }
  const { accuracy } = await top1Accuracy(model, { ...data, inputs }, { outputName, runner: runnerOptions, label });
  return { accuracy };
}

export function toTrainData(dataset: Dataset, inputNames: string[], role: string): TrainData {
  const axes = dataset.batchAxes ? Object.entries(dataset.batchAxes).filter(([, axis]) => axis !== 0) : [];
  const constants = Object.keys(dataset.constants ?? {});
  if (axes.length > 0 || constants.length > 0) {
    const what = [
      ...axes.map(([name, axis]) => (axis === null ? `'${name}' has no batch dim` : `'${name}' has its batch dim at ${axis}`)),
      ...constants.map((name) => `'${name}' is one value for all samples`),
    ];
    throw new UsageError(
      `${dataset.source}: training needs every input batched along dim 0, but ${what.join(', ')}; ` +
        'models with scalar, state or whole-feed inputs can be quantized and pruned, not yet distilled or trained with QAT',
    );
  }
  const inputs: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const name of inputNames) {
    const t = dataset.inputs[name] ?? (inputNames.length === 1 && Object.keys(dataset.inputs).length === 1 ? Object.values(dataset.inputs)[0] : undefined);
    if (!t) throw new InputError(`${dataset.source}: the ${role} data has no array for the student's input '${name}'`);
    inputs[name] = t;
  }
  return { count: dataset.count, inputs, labels: dataset.labels };
}

/** The trainer settings of a distillation run (without feature terms). */
function ortTrainerSettings(
  settings: DistillSettings,
  outputName: string,
  withLabels: boolean,
  withTeacher: boolean,
  threads: number,
  trainable: readonly string[] | undefined,
): OrtTrainerOptions {
  return {
    trainable,
    lossKind: settings.loss,
    alpha: settings.alpha,
    temperature: settings.temperature,
    outputName,
    withLabels,
    withTeacher,
    freezeNorm: settings.freezeNorm,
    threads,
  };
}

/** The backend a run trains on; for onnxruntime, its trainer (made now, so an uncovered op is named before any work). */
interface BackendChoice {
  info: BackendInfo;
  trainer?: OnnxTrainStep;
}

/**
 * 'auto': onnxruntime when every op on the student's paths to the loss (its output and any feature
 * tensors) has a gradient rule, else the tfjs auto choice (with the reason). An explicit 'onnxruntime' that cannot train the student is a UsageError naming the
 * node and op.
 */
async function chooseBackend(
  requested: TrainingBackend | 'auto',
  student: Model,
  train: TrainData,
  settings: DistillSettings,
  other: { outputName: string; withTeacher: boolean; threads: number; trainable: readonly string[] | undefined },
): Promise<BackendChoice> {
  let reason: string | undefined;
  if (requested === 'onnxruntime' || requested === 'auto') {
    if (train.count < 2) reason = 'onnxruntime training probes shapes with 2 or more samples';
    for (const pair of settings.features) {
      // each feature tensor's path from the weights needs rules too (the output's is checked below)
      const missing = reason ? [] : trainingCoverage(student, { outputName: pair.student }).missing;
      if (missing.length > 0) {
        const m = missing[0]!;
        reason = `cannot train on onnxruntime: no gradient rule for node '${m.node}' (${m.opType})${m.reason ? `: ${m.reason}` : ''} on the path to feature tensor '${pair.student}'`;
      }
    }
    if (reason && requested === 'onnxruntime') throw new UsageError(`--backend onnxruntime: ${reason}`);
    if (!reason) {
      try {
        const trainer = await createOrtTrainer(
          student,
          train.inputs,
          ortTrainerSettings(settings, other.outputName, !!train.labels, other.withTeacher, other.threads, other.trainable),
        );
        return {
          info: onnxruntimeBackendInfo(other.threads, requested === 'auto' ? 'every op on the path to the loss has a gradient rule' : undefined),
          trainer,
        };
      } catch (error) {
        if (!(error instanceof UsageError) || requested === 'onnxruntime') throw error;
        reason = error.message;
      }
    }
  }
  const info = await initTrainingBackend({ backend: requested });
  if (!reason) return { info };
  return { info: { ...info, description: `${info.description}; not onnxruntime: ${reason}`, reason } };
}

/** What a trainer hands back besides the loop's result. */
interface Trained {
  result: LoopResult;
  model: Model;
  studentBefore?: number;
  validationError: number;
}

function relativeError(got: Float32Array, want: Float32Array): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < got.length; i++) {
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  return diff / Math.max(scale, 1e-12);
}

/** Inputs of the first (up to) 64 samples of the eval (else training) data, to validate the written student on. */
function probeInputs(options: DistillOptions, inputNames: string[]): Record<string, TensorData> {
  const probe = options.eval ?? options.train;
  const idx = Array.from({ length: Math.min(probe.count, 64) }, (_v, i) => i);
  const feeds: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const [k, v] of Object.entries(toTrainData(probe, inputNames, 'probe').inputs)) feeds[k] = gatherRows(v, idx);
  return feeds;
}

/** `outputName` of the written model in onnxruntime against the trainer's eval-mode output. */
async function validateWritten(
  model: Model,
  feeds: Record<string, TensorData>,
  outputName: string,
  reference: Float32Array,
  options: DistillOptions,
): Promise<number> {
  const runner = await createRunner(model, { label: 'trained student', ...options.runner });
  try {
    const ort = (await runner.run(feeds, [outputName]))[outputName]!.data as Float32Array;
    return relativeError(ort, reference);
  } finally {
    await runner.release();
  }
}

/** The --freeze names, each a default trainable weight of the student (else a UsageError listing some). */
function frozenWeights(student: Model, names: readonly string[] | undefined): Set<string> {
  const frozen = new Set(names ?? []);
  if (frozen.size === 0) return frozen;
  const weights = trainableParameters(student).weights;
  for (const name of frozen) {
    if (!weights.includes(name)) {
      const list = weights.slice(0, 8).join(', ') + (weights.length > 8 ? `, ... (${weights.length} in all)` : '');
      throw new UsageError(`--freeze: '${name}' is not a trainable weight of the student (weights: ${list})`);
    }
  }
  if (frozen.size === weights.length) throw new UsageError('--freeze names every trainable weight of the student: nothing would train');
  return frozen;
}

/** `name [dims]` of each graph output, for messages. */
function outputList(model: Model): string {
  return model.graph.outputs.map((v) => (isTensorType(v.type) && v.type.shape ? `${v.name} ${formatShape(v.type.shape)}` : v.name)).join(', ');
}

/** The student output the loss reads: `requested` (a tensor of the student), else its first output. */
export function studentOutputName(student: Model, requested: string | undefined): string {
  if (requested !== undefined) {
    if (!student.graph.value(requested)) throw new UsageError(`the student has no tensor '${requested}' (outputs: ${outputList(student)})`);
    return requested;
  }
  const first = student.graph.outputs[0];
  if (!first) throw new UsageError('the student has no outputs');
  return first.name;
}

/**
 * The teacher output giving the soft targets: `requested`, else the output named as the student's
 * (`studentOutput`), else the teacher's only output.
 */
export function teacherOutputName(teacher: Model, requested: string | undefined, studentOutput: string): string {
  const outputs = teacher.graph.outputs;
  if (requested !== undefined) {
    if (!teacher.graph.value(requested)) throw new UsageError(`the teacher has no tensor '${requested}' (outputs: ${outputList(teacher)})`);
    return requested;
  }
  if (outputs.some((v) => v.name === studentOutput)) return studentOutput;
  if (outputs.length === 1) return outputs[0]!.name;
  throw new UsageError(
    `the teacher has ${outputs.length} outputs (${outputList(teacher)}) and none is named '${studentOutput}' as the student's: pass --teacher-output-name`,
  );
}

/** Per-sample dims of the student's output: from the training graph on onnxruntime, else one interpreter forward over 2 samples. */
export function studentOutputDims(trainer: OnnxTrainStep | undefined, graph: TrainableGraph | undefined, train: TrainData, outputName: string): number[] {
  if (trainer) {
    const t = trainer.graph.model.graph.value(trainer.graph.studentOutput)?.type;
    if (isTensorType(t) && t.shape) return t.shape.slice(1).map((d) => (typeof d === 'number' ? d : -1));
  }
  if (!graph) return [];
  const idx = Array.from({ length: Math.min(train.count, 2) }, (_v, i) => i);
  return tf.tidy(() => graph.forward(batchFeeds(train.inputs, idx), { fetch: [outputName] }).outputs[outputName]!.shape.slice(1));
}

/**
 * Class labels of the training and evaluation data against the class count of the output the loss
 * reads (`outputDims`, per sample: one row of scores), through the check every command scores with
 * (evaluate/label-range.ts): a label that is not a class index (negative, fractional) and labels
 * all out of range are errors naming the data file, before the teacher runs or a step is taken;
 * some out of range, a warning counting them.
 */
export async function checkTrainingLabels(
  model: { model: Model; role: string },
  output: string,
  outputDims: readonly number[],
  data: { train: Dataset; eval?: Dataset },
  warn: (message: string) => void,
): Promise<void> {
  const classes = outputDims.length === 1 ? outputDims[0]! : -1;
  // an output of several rows per sample (per-step scores) has per-step labels: not class rows
  if (!(classes > 1)) return;
  const name = await modelLabel(model.model, model.role);
  for (const [set, consequence] of [
    [data.train, 'they teach no class'],
    [data.eval, 'scored as misses'],
  ] as const) {
    if (!set?.labels) continue;
    const range = labelRange(labelIndices(set.labels, set.source), classes);
    checkLabelRange(range, { source: set.source, output, model: name });
    const message = labelRangeMessage(range, `output '${output}'`, consequence);
    if (message) warn(`${set.source}: ${message}`);
  }
}

/** Trains on onnxruntime: ./onnxruntime/loop.ts, evaluation and validation in onnxruntime. */
async function trainOnOnnxruntime(
  trainer: OnnxTrainStep,
  options: DistillOptions,
  train: TrainData,
  loop: LoopOptions,
  threads: number,
  inputNames: string[],
): Promise<Trained> {
  const student = options.student;
  const evaluator = await OrtEvaluator.create(student, studentValueNames(student, trainer.values), { threads });
  try {
    const initial = new Map([...trainer.values].map(([k, v]) => [k, Float32Array.from(v)]));
    const studentBefore =
      loop.evalData?.labels && loop.lossKind === 'kd'
        ? (await evaluator.evaluate(loop.evalData, initial, { outputName: loop.outputName, batchSize: 256, kind: 'kd' })).accuracy
        : undefined;
    const result = await ortTrainLoop(student, train, { ...loop, trainer, threads, evaluator });
    const model = exportTrainedModel(student, result.values);
    model.producerName = 'model-opt';
    options.onProgress?.({ phase: 'validate', message: 'validating the trained student in onnxruntime' });
    const feeds = probeInputs(options, inputNames);
    const reference = (await evaluator.output(feeds, result.values, loop.outputName)).data as Float32Array;
    const validationError = await validateWritten(model, feeds, loop.outputName, reference, options);
    return { result, model, studentBefore, validationError };
  } finally {
    await evaluator.release();
  }
}

/** Trains through the tfjs interpreter (./onnx-graph.ts, ./loop.ts). */
async function trainOnTfjs(graph: TrainableGraph, options: DistillOptions, train: TrainData, loop: LoopOptions, inputNames: string[]): Promise<Trained> {
  const studentBefore =
    loop.evalData?.labels && loop.lossKind === 'kd'
      ? evaluate(graph, loop.evalData, { outputName: loop.outputName, batchSize: 256, kind: 'kd' }).accuracy
      : undefined;
  const result = await trainLoop(graph, train, loop);
  const model = graph.exportModel(result.values);
  model.producerName = 'model-opt';
  options.onProgress?.({ phase: 'validate', message: 'validating the trained student in onnxruntime' });
  // Reference outputs of the interpreter on a few samples, in eval mode, with the chosen weights.
  graph.restore(result.values);
  const feeds = probeInputs(options, inputNames);
  const reference = tf.tidy(() => {
    const tfFeeds: Record<string, tf.Tensor> = Object.create(null) as Record<string, tf.Tensor>;
    for (const [k, v] of Object.entries(feeds)) tfFeeds[k] = tensorDataToTf(v);
    return graph.forward(tfFeeds, { fetch: [loop.outputName] }).outputs[loop.outputName]!.dataSync() as Float32Array;
  });
  const validationError = await validateWritten(model, feeds, loop.outputName, reference, options);
  return { result, model, studentBefore, validationError };
}

/** The run's settings: the defaults, then the options given; checked (UsageError naming the flag). */
function distillSettings(options: DistillOptions): DistillSettings {
  const settings: DistillSettings = { ...DEFAULT_DISTILL_SETTINGS };
  const optionalKeys = new Set(['stepEpochs', 'pruneTo', 'patience']);
  for (const [k, v] of Object.entries(options)) {
    if (v !== undefined && (k in settings || optionalKeys.has(k))) (settings as unknown as Record<string, unknown>)[k] = v;
  }
  if (!(settings.alpha >= 0 && settings.alpha <= 1)) throw new UsageError(`--alpha must be in [0, 1], got ${settings.alpha}`);
  if (!(settings.temperature > 0)) throw new UsageError(`--temperature must be positive, got ${settings.temperature}`);
  if (settings.pruneTo !== undefined && !(settings.pruneTo >= 0 && settings.pruneTo < 1))
    throw new UsageError(`--prune-to must be in [0, 1), got ${settings.pruneTo}`);
  if (settings.features.length > 0 && !options.teacher) throw new UsageError('--feature needs a teacher');
  return settings;
}

/** What a run trains on and with: the student's inputs and output, the teacher's output, the data, the chosen backend. */
interface DistillRun {
  options: DistillOptions;
  settings: DistillSettings;
  inputNames: string[];
  outputName: string;
  teacherOutput?: string;
  train: TrainData;
  evalData?: TrainData;
  threads: number;
  trainable: readonly string[] | undefined;
  progress: (event: DistillProgress) => void;
}

/** The run's names and data; float labels with the kd loss switch it to mse (with a warning). */
function distillRun(options: DistillOptions, settings: DistillSettings, warn: (message: string) => void): Omit<DistillRun, 'trainable'> {
  const student = options.student;
  const inputNames = student.graph.inputs.filter((v) => !v.initializer).map((v) => v.name);
  const outputName = studentOutputName(student, options.outputName);
  const teacherOutput = options.teacher ? teacherOutputName(options.teacher, options.teacherOutputName, outputName) : undefined;
  const train = toTrainData(options.train, inputNames, 'training');
  const evalData = options.eval ? toTrainData(options.eval, inputNames, 'evaluation') : undefined;
  if (!train.labels && !options.teacher) throw new UsageError(`${options.train.source}: no labels and no teacher: nothing to learn from`);
  if (train.labels && settings.loss === 'kd' && !labelsAreClasses(train.labels)) {
    warn(`${options.train.source}: labels are float values; treating them as regression targets (--loss mse)`);
    settings.loss = 'mse';
  }
  const threads = options.runner?.intraOpThreads ?? 1;
  return { options, settings, inputNames, outputName, teacherOutput, train, evalData, threads, progress: options.onProgress ?? (() => undefined) };
}

/**
 * Runs the teacher once over the training set: its soft targets (checked against the student
 * output's shape) and feature tensors go into run.train; the onnxruntime trainer is made again with
 * the feature tensors' shapes; the teacher's accuracy on labelled eval data.
 */
async function teacherPass(
  run: DistillRun,
  teacher: Model,
  teacherOutput: string,
  choice: BackendChoice,
  graph: TrainableGraph | undefined,
): Promise<{ teacherSeconds: number; teacherAccuracy?: number }> {
  const { options, settings, train, progress, outputName } = run;
  const names = [teacherOutput, ...settings.features.map((f) => f.teacher)];
  progress({ phase: 'teacher', message: `running the teacher once over ${train.count} training samples` });
  const started = performance.now();
  const targets = await teacherTargets(teacher, options.train, [...new Set(names)], {
    runner: options.runner,
    studentInputs: run.inputNames,
    onProgress: (done) => progress({ phase: 'teacher', message: `teacher outputs: ${Math.min(done, train.count)}/${train.count} samples` }),
  });
  const teacherSeconds = (performance.now() - started) / 1000;
  train.teacher = targets.get(teacherOutput)!;
  const studentDims = studentOutputDims(choice.trainer, graph, train, outputName);
  const teacherDims = train.teacher.dims.slice(1);
  if (teacherDims.join('x') !== studentDims.join('x')) {
    throw new UsageError(
      `the teacher's output '${teacherOutput}' is ${formatShape(teacherDims)} per sample but the student's output '${outputName}' is ` +
        `${formatShape(studentDims)}: soft targets need the same shape; pass --teacher-output-name (teacher outputs: ${outputList(teacher)})`,
    );
  }
  train.features = new Map(settings.features.map((f) => [f.student, targets.get(f.teacher)!]));
  if (choice.trainer && settings.features.length > 0) {
    // the feature terms need the teacher's tensor shapes: the trainer checked above is made again with them
    await choice.trainer.release();
    choice.trainer = await createOrtTrainer(options.student, train.inputs, {
      ...ortTrainerSettings(settings, outputName, !!train.labels, true, run.threads, run.trainable),
      features: settings.features.map((f) => ({ ...f, teacherDims: train.features!.get(f.student)!.dims.slice(1) })),
      featureWeight: settings.featureWeight,
      seed: settings.seed,
    });
  }
  const teacherAccuracy =
    options.eval?.labels && settings.loss === 'kd'
      ? (await onnxruntimeAccuracy(teacher, options.eval, teacherOutput, options.runner, 'teacher')).accuracy
      : undefined;
  return { teacherSeconds, teacherAccuracy };
}

/** The loop's options of a run: its settings, the alpha the data allows, progress events with messages. */
function distillLoopOptions(run: DistillRun): LoopOptions {
  const { settings, train, options, progress } = run;
  return {
    epochs: settings.epochs,
    batchSize: settings.batchSize,
    seed: settings.seed,
    learningRate: settings.learningRate,
    optimizer: { kind: settings.optimizer, momentum: settings.momentum, weightDecay: settings.weightDecay },
    schedule: settings.schedule,
    stepEpochs: settings.stepEpochs ?? Math.max(1, Math.floor(settings.epochs / 3)),
    gamma: settings.gamma,
    lossKind: settings.loss,
    alpha: train.teacher && train.labels ? settings.alpha : train.teacher ? 0 : 1,
    temperature: settings.temperature,
    features: settings.features,
    featureWeight: settings.featureWeight,
    outputName: run.outputName,
    pruneTo: settings.pruneTo,
    patience: settings.patience,
    freezeNorm: settings.freezeNorm,
    evalData: run.evalData,
    checkpointPath: options.checkpointPath,
    resumeFrom: options.resumeFrom,
    stopAfterEpoch: options.stopAfterEpoch,
    ...(options.stopAfter ? { stopAfter: options.stopAfter } : {}),
    ...(options.keepLaterTies ? { keepLaterTies: true } : {}),
    fingerprint: {
      mode: options.teacher ? 'distill' : 'labels',
      features: settings.features,
      weightDecay: settings.weightDecay,
      freezeNorm: settings.freezeNorm,
    },
    onProgress: (e: LoopProgress) =>
      progress({
        ...e,
        message:
          e.phase === 'train'
            ? `epoch ${e.epoch}/${e.epochs} step ${e.step}/${e.steps} loss ${e.loss?.toFixed(4)}`
            : e.accuracy !== undefined
              ? `epoch ${e.epoch}/${e.epochs} eval accuracy ${(e.accuracy * 100).toFixed(2)}%`
              : `epoch ${e.epoch}/${e.epochs} evaluating`,
      }),
  };
}

/**
 * Trains on the chosen backend (the loop releases the onnxruntime trainer from here on). A run that
 * went non-finite is a UsageError naming the node where the values left the finite range, with the
 * weights of that step.
 */
async function trainStudent(run: DistillRun, choice: BackendChoice, graph: TrainableGraph | undefined, loop: LoopOptions): Promise<Trained> {
  const { options, train, inputNames } = run;
  const trainer = choice.trainer;
  choice.trainer = undefined;
  const trainedWeights = new Set(trainer ? trainer.graph.weights : graph!.trainableVariables().map((v) => v.name));
  try {
    return trainer
      ? await trainOnOnnxruntime(trainer, options, train, loop, run.threads, inputNames)
      : await trainOnTfjs(graph!, options, train, loop, inputNames);
  } catch (error) {
    if (!(error instanceof NonFiniteTrainingError)) throw error;
    const at = graph ? graph.exportModel(error.values) : exportTrainedModel(options.student, error.values);
    throw new UsageError(nonFiniteMessage(error, await explainNonFinite(at, error.inputs, trainedWeights)), { cause: error });
  }
}

/** The report of a run, with the frozen weights and the sparsity reached where those apply. */
function distillReport(
  run: DistillRun,
  backend: BackendInfo,
  loop: LoopOptions,
  trained: Trained,
  measured: { teacherSeconds?: number; teacherAccuracy?: number; studentAccuracy?: number; frozen: ReadonlySet<string> },
): DistillReport {
  const { options, settings } = run;
  const { result, studentBefore, validationError } = trained;
  const report: DistillReport = {
    schemaVersion: DISTILL_REPORT_SCHEMA,
    backend,
    // the alpha the loss used: 0 without labels (soft targets only), 1 without a teacher
    settings: { ...settings, alpha: loop.alpha },
    trainSamples: run.train.count,
    evalSamples: options.eval?.count,
    mode: options.teacher ? 'distill' : 'labels',
    history: result.history,
    bestEpoch: result.bestEpoch,
    stoppedEarly: result.stoppedEarly,
    interrupted: result.interrupted,
    resumedAfterEpoch: result.resumedAfterEpoch,
    ...(result.extendedFromEpochs !== undefined ? { extendedFromEpochs: result.extendedFromEpochs } : {}),
    steps: result.steps,
    samplesPerSecond: result.samplesPerSecond,
    teacherSeconds: measured.teacherSeconds,
    accuracy: { teacher: measured.teacherAccuracy, studentBefore, student: measured.studentAccuracy },
    validationError,
  };
  if (measured.frozen.size > 0) report.frozen = [...measured.frozen];
  if (result.sparsity && settings.pruneTo !== undefined) {
    const total = result.sparsity.reduce((a, l) => a + l.params, 0);
    const zeros = result.sparsity.reduce((a, l) => a + l.params * l.sparsity, 0);
    report.sparsity = { target: settings.pruneTo, layers: result.sparsity, overall: zeros / Math.max(1, total) };
  }
  return report;
}

/**
 * Distills (or, without a teacher, trains) the student. The input models are not modified. The
 * student must train at any batch size: app/distill.ts's `distill` batchifies a fixed-batch one first.
 */
export async function distill(options: DistillOptions): Promise<{ model: Model; report: DistillReport }> {
  const settings = distillSettings(options);
  const warn = options.onWarning ?? (() => undefined);
  const student = options.student;
  const base = distillRun(options, settings, warn);
  const frozen = frozenWeights(student, options.freeze);
  const trainable = frozen.size > 0 ? trainableParameters(student).weights.filter((w) => !frozen.has(w)) : undefined;
  const run: DistillRun = { ...base, trainable };
  const choice = await chooseBackend(options.backend ?? 'auto', student, run.train, settings, {
    outputName: run.outputName,
    withTeacher: !!options.teacher,
    threads: run.threads,
    trainable,
  });
  const backend = choice.info;
  const why = backend.name === 'onnxruntime' && backend.reason ? ` (auto: ${backend.reason})` : '';
  run.progress({ phase: 'backend', message: `training backend: ${backend.description}${why}` });
  let graph: TrainableGraph | undefined;
  try {
    // The tfjs interpreter checks its ops when it is built: before the teacher runs.
    graph = choice.trainer ? undefined : new TrainableGraph(student, { frozen });
    if (settings.loss === 'kd') {
      const dims = studentOutputDims(choice.trainer, graph, run.train, run.outputName);
      await checkTrainingLabels({ model: student, role: 'student' }, run.outputName, dims, { train: options.train, eval: options.eval }, warn);
    }
    const teacher = options.teacher && run.teacherOutput ? await teacherPass(run, options.teacher, run.teacherOutput, choice, graph) : {};
    const loop = distillLoopOptions(run);
    const trained = await trainStudent(run, choice, graph, loop);
    if (!(trained.validationError < 1e-3)) {
      warn(`the written student differs from the trained one in onnxruntime (relative error ${trained.validationError.toExponential(2)})`);
    }
    const studentAccuracy =
      options.eval?.labels && settings.loss === 'kd'
        ? (await onnxruntimeAccuracy(trained.model, options.eval, run.outputName, options.runner, 'trained student')).accuracy
        : undefined;
    return { model: trained.model, report: distillReport(run, backend, loop, trained, { ...teacher, studentAccuracy, frozen }) };
  } finally {
    graph?.dispose();
    await choice.trainer?.release();
  }
}

/**
 * The onnxruntime backend of the training loop (../core/loop.ts): each step is one run of the
 * training graph (./build.ts via ./session.ts) and the update is on host typed arrays
 * (./host-optimizer.ts), with batch-norm running statistics and gradual magnitude pruning
 * (HostPruner, ../core/pruning-masks.ts's schedule and mask rule) on those arrays. Evaluation runs
 * the student itself in onnxruntime, one session whose weights are fed as inputs. Batches are
 * gathered into buffers allocated once; the weights are handed to onnxruntime as views of the host
 * arrays (no copy on our side).
 * Imports: ../../ir, ../../errors, ../../runtime, ../core (batching, the loop and its types,
 * non-finite, pruning masks), ./decompose, ./session, ./host-optimizer.
 */
import { UsageError } from '../../errors.js';
import { DataType, elementCount, type Model, type TensorData, type TypedArray } from '../../ir/index.js';
import { createRunner, type Runner } from '../../runtime/index.js';
import { countAgreement } from '../core/agreement.js';
import { gatherRowsInto } from '../core/batching.js';
import { checkTrainData, runLoop, type LoopOptions, type LoopResult, type TrainData } from '../core/loop.js';
import { firstNonFinite } from '../core/non-finite.js';
import { isUpdateStep, layerSparsity, magnitudeMask, sparsityAt, type LayerSparsity, type PruningSchedule } from '../core/pruning-masks.js';
import { loopOptimizer, type ComputedStep, type Evaluation, type LoopOptimizer, type LoopPruner, type StepBackend } from '../core/step-backend.js';
import { liftConstantWeights } from './decompose.js';
import { HostOptimizer, type HostParam } from './host-optimizer.js';
import { OnnxTrainStep } from './session.js';

export interface OrtTrainerOptions {
  lossKind: 'kd' | 'mse';
  alpha: number;
  temperature: number;
  /** Student output the loss reads. */
  outputName: string;
  /** Whether the loss has a hard-label term (the data has labels) and a teacher term. */
  withLabels: boolean;
  withTeacher: boolean;
  /** BatchNormalization in inference form (no batch statistics, no running-statistic updates). */
  freezeNorm?: boolean;
  /** onnxruntime intra-op threads (default 1). */
  threads?: number;
  /** Weights to train (default: ../parameters.ts's defaultParameters, as on tfjs). */
  trainable?: readonly string[];
  /** Feature pairs with the per-sample dims of the teacher's tensor (see OnnxStepOptions). */
  features?: readonly { teacher: string; student: string; teacherDims: readonly number[] }[];
  featureWeight?: number;
  /** The run's seed (feature adapters' initial values). */
  seed?: number;
}

/**
 * The training graph of `student` and its onnxruntime session, shapes probed on the first two
 * samples of `inputs`. Throws UsageError naming the node and op where a node on the path from a
 * weight to the loss has no gradient rule: before any training (or teacher run) starts.
 */
export async function createOrtTrainer(student: Model, inputs: Record<string, TensorData>, options: OrtTrainerOptions): Promise<OnnxTrainStep> {
  const first = Object.values(inputs)[0];
  if (!first || (first.dims[0] ?? 0) < 2) throw new UsageError('training on onnxruntime needs 2 or more training samples');
  const probe: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
  for (const [name, td] of Object.entries(inputs)) probe[name] = gatherRowsInto(td, [0, 1], newLike(td, 2));
  return OnnxTrainStep.create(student, {
    outputName: options.outputName,
    loss: { kind: options.lossKind, alpha: options.alpha, temperature: options.temperature },
    withLabels: options.withLabels,
    withTeacher: options.withTeacher,
    training: !options.freezeNorm,
    trainable: options.trainable,
    threads: options.threads ?? 1,
    features: options.features,
    featureWeight: options.featureWeight,
    seed: options.seed,
    probe,
  });
}

/** An array of the element type of `td` holding `rows` samples. */
function newLike(td: TensorData, rows: number): TypedArray {
  if (Array.isArray(td.data)) throw new UsageError('string data cannot be trained on');
  const Ctor = (td.data as TypedArray).constructor as new (n: number) => TypedArray;
  return new Ctor(rows * elementCount(td.dims.slice(1)));
}

/**
 * The student in onnxruntime with the named initializers (weights, running statistics) turned into
 * inputs, so one session evaluates any set of values without a new model per epoch.
 */
export class OrtEvaluator {
  private constructor(
    private readonly runner: Runner,
    private readonly dims: Map<string, number[]>,
  ) {}

  /** `names` may include float Constant-node weights (evaluated from the lifted copy, see ./decompose.ts). */
  static async create(student: Model, names: readonly string[], options: { threads?: number } = {}): Promise<OrtEvaluator> {
    const lifted = liftConstantWeights(student);
    const model = lifted.lifted.length > 0 ? lifted.model : student.clone();
    const g = model.graph;
    const dims = new Map<string, number[]>();
    for (const name of names) {
      const v = g.value(name);
      const t = v?.initializer;
      if (!v || !t) throw new UsageError(`'${name}' is not an initializer of the student, so it cannot be fed for evaluation`);
      dims.set(name, [...t.dims]);
      if (!v.isGraphInput()) g.inputs.push(v);
      g.removeInitializer(v, { force: true });
      v.type = { kind: 'tensor', elemType: t.dtype, shape: [...t.dims] };
    }
    const runner = await createRunner(model, { intraOpThreads: options.threads ?? 1, label: 'student (evaluation)' });
    return new OrtEvaluator(runner, dims);
  }

  /** `outputName` for `inputs` with the weights in `values` (by name; float32). */
  async output(inputs: Record<string, TensorData>, values: ReadonlyMap<string, Float32Array>, outputName: string): Promise<TensorData> {
    const feeds: Record<string, TensorData> = { ...inputs };
    for (const [name, dims] of this.dims) {
      const data = values.get(name);
      if (!data) throw new UsageError(`no value for '${name}' to evaluate the student with`);
      feeds[name] = { dtype: DataType.FLOAT, dims, data };
    }
    return (await this.runner.run(feeds, [outputName]))[outputName]!;
  }

  /** Accuracy (kd: top-1, or whole-sequence agreement for per-step labels, ../core/agreement.ts) or MSE (mse) on labelled data, eval mode: as ../tfjs/loop.ts's `evaluate`. */
  async evaluate(
    data: TrainData,
    values: ReadonlyMap<string, Float32Array>,
    options: { outputName: string; batchSize: number; kind: 'kd' | 'mse' },
  ): Promise<{ accuracy?: number; loss?: number }> {
    if (!data.labels) return {};
    let correct = 0;
    let squared = 0;
    for (let start = 0; start < data.count; start += options.batchSize) {
      const end = Math.min(data.count, start + options.batchSize);
      const n = end - start;
      const inputs: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const [name, td] of Object.entries(data.inputs)) inputs[name] = sliceRows(td, start, end);
      const out = await this.output(inputs, values, options.outputName);
      const labels = sliceRows(data.labels, start, end);
      const o = out.data as Float32Array;
      if (options.kind === 'mse') {
        const y = labels.data as ArrayLike<number>;
        if (y.length !== o.length) throw new UsageError(`the labels have ${y.length / n} values per sample, output '${options.outputName}' ${o.length / n}`);
        let s = 0;
        for (let i = 0; i < o.length; i++) s += (o[i]! - Number(y[i])) ** 2;
        squared += (s / o.length) * n;
      } else {
        correct += countAgreement(o, labels.data as ArrayLike<number | bigint>, n, options.outputName, labels.dims).samples;
      }
    }
    return options.kind === 'mse' ? { loss: squared / data.count } : { accuracy: correct / data.count };
  }

  release(): Promise<void> {
    return this.runner.release();
  }
}

/** The names in `values` that are tensors of the student (weights, statistics; not feature adapters). */
export function studentValueNames(student: Model, values: ReadonlyMap<string, unknown>): string[] {
  return [...values.keys()].filter((name) => student.graph.value(name) !== undefined);
}

/** Rows [start, end) of a sample-first array (a view, no copy). */
function sliceRows(td: TensorData, start: number, end: number): TensorData {
  const row = elementCount(td.dims.slice(1));
  return { dtype: td.dtype, dims: [end - start, ...td.dims.slice(1)], data: (td.data as Float32Array).subarray(start * row, end * row) };
}

/** Gradual magnitude pruning of host arrays: the schedule and mask rule of ../tfjs/gradual-pruning.ts. */
export class HostPruner {
  private readonly masks = new Map<string, Float32Array>();
  /** Sparsity the current masks were computed for. */
  current = 0;

  constructor(
    readonly params: readonly HostParam[],
    readonly schedule: PruningSchedule,
  ) {}

  /** Recomputes masks when `step` is an update step (before the step's update) and applies them. */
  maybeUpdate(step: number): boolean {
    if (!isUpdateStep(this.schedule, step)) return false;
    const target = sparsityAt(this.schedule, step);
    for (const p of this.params) this.masks.set(p.name, magnitudeMask(p.data, target));
    this.current = target;
    this.applyMasks();
    return true;
  }

  /** Zeroes the pruned weights (after every optimizer step): exact zeros. */
  applyMasks(): void {
    for (const p of this.params) {
      const m = this.masks.get(p.name);
      if (!m) continue;
      const w = p.data;
      for (let i = 0; i < w.length; i++) if (m[i] === 0) w[i] = 0;
    }
  }

  state(): Map<string, Float32Array> {
    return new Map([...this.masks].map(([k, m]) => [k, Float32Array.from(m)]));
  }

  load(current: number, masks: ReadonlyMap<string, Float32Array>): void {
    this.current = current;
    for (const p of this.params) {
      const m = masks.get(p.name);
      if (m) this.masks.set(p.name, Float32Array.from(m));
    }
  }

  report(values: ReadonlyMap<string, ArrayLike<number>>): LayerSparsity[] {
    return this.params.map((p) => layerSparsity(p.name, values.get(p.name) ?? p.data));
  }
}

const KERNEL_SLOTS = new Set(['Conv:1', 'ConvTranspose:1', 'Gemm:1', 'MatMul:0', 'MatMul:1']);
/** Ops a weight may pass through on its way to a kernel slot (fake quantization, casts). */
const PASS_THROUGH = new Set(['QuantizeLinear', 'DequantizeLinear', 'Identity', 'Cast']);

/** Trained weights of rank >= 2 that feed a Conv/ConvTranspose/Gemm/MatMul kernel slot (as ../tfjs/loop.ts's default). */
export function defaultPruneParams(student: Model, weights: readonly string[]): string[] {
  const g = student.graph;
  const feedsKernel = (name: string, depth: number): boolean => {
    const v = g.value(name);
    if (!v || depth > 4) return false;
    return v.consumers.some((node) => {
      const slot = node.inputs.findIndex((i) => i === v);
      if (KERNEL_SLOTS.has(`${node.opType}:${slot}`)) return true;
      return PASS_THROUGH.has(node.opType) && slot === 0 && node.outputs.some((o) => feedsKernel(o.name, depth + 1));
    });
  };
  return weights.filter((w) => (g.value(w)?.initializer?.dims.length ?? 0) >= 2 && feedsKernel(w, 0));
}

/**
 * A clone of `student` with the initializers (or float Constant nodes' values) named in `values`
 * replaced; names the model lacks (feature adapters) are skipped. Tensors whose values are unchanged
 * keep their storage, so a model trained for zero steps encodes to identical bytes.
 */
export function exportTrainedModel(student: Model, values: ReadonlyMap<string, Float32Array>): Model {
  const out = student.clone();
  const graph = out.graph;
  for (const [name, data] of values) {
    const v = graph.value(name);
    const t = v?.initializer ?? (v ? graph.constantTensor(v) : undefined);
    if (!t) continue;
    const original = t.data as Float32Array;
    let same = original.length === data.length;
    for (let i = 0; same && i < data.length; i++) if (!Object.is(original[i], data[i])) same = false;
    if (!same) t.data = Float32Array.from(data);
  }
  return out;
}

export interface OrtLoopOptions extends LoopOptions {
  /** onnxruntime intra-op threads for the training and evaluation sessions (default 1). */
  threads?: number;
  /** Weights to train (default: ../parameters.ts's defaultParameters, as on tfjs). */
  trainable?: readonly string[];
  /** A trainer made beforehand by createOrtTrainer (released by the loop). */
  trainer?: OnnxTrainStep;
  /** An evaluator of the student made beforehand (kept open: the caller releases it). */
  evaluator?: OrtEvaluator;
  /**
   * After each step's optimizer update, pruning masks and statistics update: may edit `values`
   * (weights and running statistics by name, the host arrays fed to the next step) in place.
   */
  afterStep?: (values: ReadonlyMap<string, Float32Array>, globalStep: number) => void;
}

/** The trainer settings of a run of `options` on `data` (feature pairs with the teacher tensors' per-sample dims). */
function trainerOptions(data: TrainData, options: OrtLoopOptions): OrtTrainerOptions {
  return {
    lossKind: options.lossKind,
    alpha: options.alpha,
    temperature: options.temperature,
    outputName: options.outputName,
    withLabels: !!data.labels,
    withTeacher: !!data.teacher,
    freezeNorm: options.freezeNorm,
    threads: options.threads,
    trainable: options.trainable,
    features: (options.features ?? []).map((pair) => {
      const t = data.features?.get(pair.student);
      if (!t) throw new UsageError(`no teacher values for feature pair ${pair.teacher}=${pair.student}`);
      return { ...pair, teacherDims: t.dims.slice(1) };
    }),
    featureWeight: options.featureWeight,
    seed: options.seed,
  };
}

/**
 * The training graph of a student on onnxruntime, driven by ../core/loop.ts: the weights are host
 * arrays fed to each step (updated by ./host-optimizer.ts), batches are gathered into buffers
 * allocated once, the evaluation runs the student in one session whose weights are inputs.
 */
class OrtStepBackend implements StepBackend {
  readonly parameters: readonly { name: string; size: number }[];
  readonly optimizer: LoopOptimizer;
  private readonly params: HostParam[];
  private readonly hostOptimizer: HostOptimizer;
  /** The trainer's values (weights, running statistics, adapters): the arrays fed to every step. */
  private readonly live: Map<string, Float32Array>;
  private readonly buffers: { inputs: Map<string, TypedArray>; labels?: TypedArray; teacher?: TypedArray; features: Map<string, TypedArray> };

  private constructor(
    private readonly student: Model,
    private readonly trainer: OnnxTrainStep,
    private readonly data: TrainData,
    private readonly options: OrtLoopOptions,
    private readonly evaluator: { evaluator?: OrtEvaluator; own: boolean },
  ) {
    const values = trainer.values as Map<string, Float32Array>;
    this.live = values;
    this.params = trainer.graph.weights.map((name) => ({ name, data: values.get(name)!, rank: trainer.dimsOf(name)?.length ?? 1 }));
    this.parameters = this.params.map((p) => ({ name: p.name, size: p.data.length }));
    this.hostOptimizer = new HostOptimizer(options.optimizer);
    this.optimizer = loopOptimizer(this.hostOptimizer, this.params);
    const rows = Math.min(options.batchSize, data.count);
    this.buffers = {
      inputs: new Map(Object.entries(data.inputs).map(([k, td]) => [k, newLike(td, rows)])),
      labels: data.labels ? newLike(data.labels, rows) : undefined,
      teacher: data.teacher ? newLike(data.teacher, rows) : undefined,
      features: new Map((options.features ?? []).map((f) => [f.student, newLike(data.features!.get(f.student)!, rows)])),
    };
  }

  /** Float Constant-node weights of `model` train as initializers of the same name (the lifted copy of ./decompose.ts). */
  static async create(model: Model, data: TrainData, options: OrtLoopOptions): Promise<OrtStepBackend> {
    const student = liftConstantWeights(model).model;
    const features = options.features ?? [];
    const trainer = options.trainer ?? (await createOrtTrainer(student, data.inputs, trainerOptions(data, options)));
    try {
      if (trainer.graph.featureInputs.size !== features.length)
        throw new UsageError(`the trainer was made for ${trainer.graph.featureInputs.size} feature pair(s), the run has ${features.length}`);
      for (const [name, v] of trainer.values) if (!(v instanceof Float32Array)) throw new UsageError(`'${name}': the onnxruntime loop trains in float32 only`);
      const evaluator =
        options.evaluator ??
        (options.evalData?.labels ? await OrtEvaluator.create(student, studentValueNames(student, trainer.values), { threads: options.threads }) : undefined);
      return new OrtStepBackend(student, trainer, data, options, { evaluator, own: !options.evaluator });
    } catch (error) {
      await trainer.release();
      throw error;
    }
  }

  defaultPruneParams(): string[] {
    return defaultPruneParams(this.student, this.trainer.graph.weights);
  }

  createPruner(names: ReadonlySet<string>, schedule: PruningSchedule): LoopPruner | undefined {
    const targets = this.params.filter((p) => names.has(p.name));
    return targets.length > 0 ? new HostPruner(targets, schedule) : undefined;
  }

  async compute(idx: Int32Array, _globalStep: number): Promise<ComputedStep> {
    const { data, buffers, options } = this;
    const inputs: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
    for (const [name, td] of Object.entries(data.inputs)) inputs[name] = gatherRowsInto(td, idx, buffers.inputs.get(name)!);
    const labels = data.labels ? gatherRowsInto(data.labels, idx, buffers.labels!) : undefined;
    const teacher = data.teacher ? gatherRowsInto(data.teacher, idx, buffers.teacher!) : undefined;
    const features = new Map(
      (options.features ?? []).map((f) => [f.student, gatherRowsInto(data.features!.get(f.student)!, idx, buffers.features.get(f.student)!)]),
    );
    const r = await this.trainer.run({ inputs, labels, teacher, features });
    return {
      loss: r.loss,
      nonFiniteGradient: () => {
        const name = firstNonFinite(r.gradients);
        return name !== undefined ? `the gradient of '${name}' became non-finite` : undefined;
      },
      update: (learningRate) => this.hostOptimizer.apply(this.params, r.gradients, learningRate),
      finish: (globalStep) => {
        this.trainer.applyStates(r.stateUpdates);
        options.afterStep?.(this.live, globalStep);
        const correct =
          options.lossKind === 'kd' && labels
            ? countAgreement(r.output.data as Float32Array, labels.data as ArrayLike<number | bigint>, labels.dims[0] ?? 0).samples
            : 0;
        return { loss: r.loss, hard: r.hard, soft: r.soft, feature: r.feature, correct };
      },
      discard: () => undefined,
    };
  }

  values(): Map<string, Float32Array> {
    return new Map([...this.live].map(([k, v]) => [k, Float32Array.from(v)]));
  }

  restore(values: ReadonlyMap<string, Float32Array>, file: string): void {
    for (const [name, v] of this.live) {
      const saved = values.get(name);
      if (!saved) throw new UsageError(`${file}: the checkpoint has no value for '${name}'`);
      if (saved.length !== v.length) throw new UsageError(`${file}: '${name}' has ${saved.length} values in the checkpoint, the model ${v.length}`);
      v.set(saved);
    }
  }

  evaluation(data: TrainData): Evaluation | undefined {
    const { evaluator } = this.evaluator;
    const { options, live } = this;
    if (!evaluator) return undefined;
    return () => evaluator.evaluate(data, live, { outputName: options.outputName, batchSize: options.evalBatchSize ?? 256, kind: options.lossKind });
  }

  async dispose(): Promise<void> {
    if (this.evaluator.own) await this.evaluator.evaluator?.release();
    await this.trainer.release();
  }
}

/**
 * Trains the student on onnxruntime (../core/loop.ts over OrtStepBackend) and returns the history
 * and the chosen weights. Float Constant-node weights train as initializers of the same name (the
 * lifted copy of ./decompose.ts); `exportTrainedModel(student, values)` writes them back into their
 * Constant nodes.
 */
export async function ortTrainLoop(model: Model, data: TrainData, options: OrtLoopOptions): Promise<LoopResult> {
  checkTrainData(data);
  return runLoop(await OrtStepBackend.create(model, data, options), data, options);
}

/**
 * Runs a training graph (./build.ts) in onnxruntime: probes the student's static shapes once, keeps
 * the weights and running statistics as typed arrays in Node, and computes one step's loss,
 * student output, gradients and statistics updates per call. The optimizer update is the caller's.
 * Imports: ../../runtime, ../../ir, ../../errors, ../core/feature-adapters, ./build, ./decompose.
 */
import { UsageError } from '../../errors.js';
import { DataType, type Model, type TensorData, type TypedArray } from '../../ir/index.js';
import { captureIntermediates, createRunner, type Runner } from '../../runtime/index.js';
import { adapterInit, adapterName, featureNeedsAdapter } from '../core/feature-adapters.js';
import { buildTrainingGraph, type FeatureTerm, type TrainingGraph, type TrainingGraphOptions } from './build.js';
import { liftConstantWeights } from './decompose.js';

/**
 * Shapes of every value the student computes, from one onnxruntime run over `feeds` (2+ samples,
 * so that the batch dim is never confused with a dim of size 1).
 */
export async function probeShapes(model: Model, feeds: Record<string, TensorData>): Promise<Map<string, number[]>> {
  const first = Object.values(feeds)[0];
  if (!first || (first.dims[0] ?? 0) < 2) throw new UsageError('probing shapes for the training graph needs a batch of 2 or more samples');
  const names: string[] = [];
  for (const node of model.graph.nodes) for (const o of node.outputs) if (o.name !== '') names.push(o.name);
  const captured = await captureIntermediates(model, names, feeds, { graphOptimizationLevel: 'disabled' });
  const shapes = new Map<string, number[]>();
  for (const [name, td] of Object.entries(captured)) shapes.set(name, [...td.dims]);
  for (const [name, td] of Object.entries(feeds)) shapes.set(name, [...td.dims]);
  return shapes;
}

export interface OnnxStepOptions extends Omit<TrainingGraphOptions, 'shapes' | 'features'> {
  /** A batch (2+ samples) of the student's inputs, to probe shapes with. */
  probe: Record<string, TensorData>;
  /** onnxruntime intra-op threads (default 1). */
  threads?: number;
  /**
   * Feature pairs with the per-sample dims of the teacher's tensor. Where the channel counts differ
   * an adapter `adapter:<student tensor>` is made (../feature-adapters.ts: same initial value as
   * the tfjs loop for the same `seed` and pair index) and trained with the weights.
   */
  features?: readonly { teacher: string; student: string; teacherDims: readonly number[] }[];
  /** Seed of the adapters' initial values (the run's seed). */
  seed?: number;
}

export interface StepBatch {
  inputs: Record<string, TensorData>;
  /** int64 class indices [N] for kd (other integer or one-hot arrays are converted), floats for mse. */
  labels?: TensorData;
  teacher?: TensorData;
  /** The teacher's feature tensors by student tensor name (feature terms). */
  features?: ReadonlyMap<string, TensorData>;
}

/** Float data of the training graph: float32, or float64 in float64 precision. */
export type FloatArray = Float32Array | Float64Array;

export interface StepResult {
  loss: number;
  hard?: number;
  soft?: number;
  /** Sum of the feature terms (unweighted), with feature terms. */
  feature?: number;
  output: TensorData;
  gradients: Map<string, FloatArray>;
  stateUpdates: Map<string, FloatArray>;
}

/** Class indices as int64 [N] from int labels [N] / [N,1] or one-hot / probability rows [N, C]. */
export function labelIndices(td: TensorData): TensorData {
  const n = td.dims[0] ?? 0;
  const src = td.data as ArrayLike<number | bigint>;
  const out = new BigInt64Array(n);
  const row = n > 0 ? src.length / n : 0;
  if (row > 1) {
    for (let i = 0; i < n; i++) {
      let best = 0;
      for (let c = 1; c < row; c++) if (Number(src[i * row + c]) > Number(src[i * row + best])) best = c;
      out[i] = BigInt(best);
    }
  } else {
    for (let i = 0; i < n; i++) out[i] = BigInt(Math.trunc(Number(src[i])));
  }
  return { dtype: DataType.INT64, dims: [n], data: out };
}

export class OnnxTrainStep {
  readonly graph: TrainingGraph;
  /** Current weights and running statistics by name (float32, or float64 in float64 precision). */
  readonly values = new Map<string, FloatArray>();
  private readonly runner: Runner;
  private readonly dims = new Map<string, number[]>();
  private readonly floatType: DataType;

  private constructor(
    graph: TrainingGraph,
    runner: Runner,
    student: Model,
    floatType: DataType,
    adapters: ReadonlyMap<string, { data: Float32Array; dims: number[] }>,
  ) {
    this.graph = graph;
    this.runner = runner;
    this.floatType = floatType;
    for (const name of [...graph.weights, ...graph.states]) {
      const t = adapters.get(name) ?? student.graph.value(name)!.initializer!;
      const f = t.data as Float32Array;
      this.values.set(name, floatType === DataType.DOUBLE ? Float64Array.from(f) : Float32Array.from(f));
      this.dims.set(name, [...t.dims]);
    }
  }

  /** Float Constant-node weights of `student` start from their node's value (the graph is built on the lifted copy). */
  static async create(model: Model, options: OnnxStepOptions): Promise<OnnxTrainStep> {
    const student = liftConstantWeights(model).model;
    const shapes = await probeShapes(student, options.probe);
    const features: FeatureTerm[] = [];
    const adapters = new Map<string, { data: Float32Array; dims: number[] }>();
    (options.features ?? []).forEach((pair, i) => {
      const studentShape = shapes.get(pair.student);
      if (!studentShape) throw new UsageError(`feature tensor '${pair.student}' is not computed by the student`);
      const term: FeatureTerm = { student: pair.student, teacherDims: pair.teacherDims };
      if (featureNeedsAdapter(pair, pair.teacherDims, studentShape.slice(1))) {
        const cs = studentShape[1]!;
        const ct = pair.teacherDims[0]!;
        term.adapter = adapterName(pair.student);
        adapters.set(term.adapter, { data: adapterInit(cs, ct, options.seed ?? 0, i), dims: [cs, ct] });
      }
      features.push(term);
    });
    const graph = buildTrainingGraph(student, { ...options, shapes, features });
    const runner = await createRunner(graph.model, { intraOpThreads: options.threads ?? 1, label: 'training graph' });
    return new OnnxTrainStep(graph, runner, student, options.precision === 'float64' ? DataType.DOUBLE : DataType.FLOAT, adapters);
  }

  /** Dims of a weight, running statistic or adapter. */
  dimsOf(name: string): readonly number[] | undefined {
    return this.dims.get(name);
  }

  private asFloat(td: TensorData): TensorData {
    if (td.dtype === this.floatType) return td;
    const data = this.floatType === DataType.DOUBLE ? Float64Array.from(td.data as ArrayLike<number>) : Float32Array.from(td.data as ArrayLike<number>);
    return { dtype: this.floatType, dims: td.dims, data };
  }

  /** One forward + backward pass over `batch` with the current values; nothing is updated. */
  async run(batch: StepBatch): Promise<StepResult> {
    const g = this.graph;
    const feeds: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
    for (const name of g.dataInputs) {
      const td = batch.inputs[name];
      if (!td) throw new UsageError(`model input '${name}' was not fed`);
      feeds[name] = this.floatType === DataType.DOUBLE && td.dtype === DataType.FLOAT ? this.asFloat(td) : td;
    }
    for (const [name, data] of this.values) feeds[name] = { dtype: this.floatType, dims: this.dims.get(name)!, data };
    if (g.labelsInput) {
      if (!batch.labels) throw new UsageError('this training graph needs labels');
      feeds[g.labelsInput] = isInt64Input(g, g.labelsInput) ? labelIndices(batch.labels) : this.asFloat(batch.labels);
    }
    if (g.teacherInput) {
      if (!batch.teacher) throw new UsageError('this training graph needs teacher outputs');
      feeds[g.teacherInput] = this.asFloat(batch.teacher);
    }
    for (const [student, input] of g.featureInputs) {
      const td = batch.features?.get(student);
      if (!td) throw new UsageError(`this training graph needs the teacher's values for feature tensor '${student}'`);
      feeds[input] = this.asFloat(td);
    }
    const out = await this.runner.run(feeds);
    const scalar = (name: string | undefined): number | undefined => (name ? Number((out[name]!.data as TypedArray)[0]) : undefined);
    const gradients = new Map<string, FloatArray>();
    for (const [w, o] of g.gradients) gradients.set(w, out[o]!.data as FloatArray);
    const stateUpdates = new Map<string, FloatArray>();
    for (const [s, o] of g.stateUpdates) stateUpdates.set(s, out[o]!.data as FloatArray);
    return {
      loss: scalar(g.lossOutput)!,
      hard: scalar(g.hardOutput),
      soft: scalar(g.softOutput),
      feature: scalar(g.featureOutput),
      output: out[g.studentOutput]!,
      gradients,
      stateUpdates,
    };
  }

  /** Writes new running statistics (from a step's stateUpdates) into the values. */
  applyStates(updates: ReadonlyMap<string, FloatArray>): void {
    for (const [name, data] of updates) this.values.get(name)!.set(data);
  }

  release(): Promise<void> {
    return this.runner.release();
  }
}

function isInt64Input(g: TrainingGraph, name: string): boolean {
  const t = g.model.graph.value(name)?.type;
  return !!t && 'elemType' in t && t.elemType === DataType.INT64;
}

/**
 * What the prune command measures around a pass: FLOPs per layer (shapes observed by running the
 * model once in onnxruntime), a check that the pruned model loads and runs with the original's
 * output shapes, file sizes raw and gzip, top-1 accuracy on a labelled data set (src/evaluate) and
 * per-channel activation statistics (the calibration service).
 * Imports: ./weights.js, ./channel-analysis.js (types), ../../ir, ../../onnx, ../../runtime,
 * ../../data, ../../evaluate, ../../calibration, ../../util/gzip.js, ../../errors.js.
 */
import { gzipSize } from '../util/gzip.js';
import { InputError } from '../errors.js';
import { elementCount, isTensorType, type Model, type Node, type TensorData, type Value } from '../ir/index.js';
import { encodeModel } from '../onnx/index.js';
import { batchEnd, feedsOf, randomDataset, take, type Dataset, type InputValues } from '../data/index.js';
import { collectStatistics } from '../calibration/index.js';
import { top1Accuracy } from '../evaluate/index.js';
import { createRunner, inferShapesByRunning, integerInputBounds, maskInputs, modelInputSpecs, type ShapeOverrides } from '../runtime/index.js';
import type { ChannelStatistics } from '../passes/prune/channel-analysis.js';
import { constantInput } from '../passes/prune/weights.js';

export interface ModelSize {
  rawBytes: number;
  gzipBytes: number;
}

export function modelSize(model: Model): ModelSize {
  const bytes = encodeModel(model);
  return { rawBytes: bytes.byteLength, gzipBytes: gzipSize(bytes) };
}

/** Where prune's checks take their feeds from (see probeFeeds). */
export interface ProbeOptions {
  /** Sizes of symbolic input dims other than the batch, for random feeds (`--shape`). */
  shapes?: ShapeOverrides;
  /** `--input` values: these inputs take the given value instead of random ones. */
  inputValues?: InputValues;
  /** Data the user gave: its first samples are the feeds (shapes, constants and batch axes its own). */
  data?: Dataset;
}

/**
 * One batch of at most `batch` samples for the model's inputs: the data's first samples when data
 * is given (fewer where its samples cannot share a run: data's batchEnd), else seeded random inputs
 * (so runs repeat) laid out by the model's batch axes, with `--input` values and scalars as constants.
 */
export function probeFeeds(model: Model, batch: number, options: ProbeOptions = {}): Record<string, TensorData> {
  const data = options.data && options.data.count > 0 ? options.data : undefined;
  if (data) return feedsOf(data, 0, batchEnd(data, 0, batch));
  const random = randomDataset(modelInputSpecs(model), batch, 0, {
    shapeOverrides: options.shapes,
    integerBounds: integerInputBounds(model),
    masks: maskInputs(model),
    constants: options.inputValues,
  });
  return feedsOf(random, 0, batchEnd(random, 0, batch));
}

function numericShape(v: Value | null | undefined): number[] | undefined {
  if (!v || !isTensorType(v.type) || !v.type.shape) return undefined;
  // Symbolic dims are the batch (shapes were observed at batch 1).
  return v.type.shape.map((d) => (typeof d === 'number' ? d : 1));
}

/** Multiply-add FLOPs (2 x MACs) of Conv/ConvTranspose/Gemm/MatMul, given output shapes. */
export function layerFlops(node: Node): number | undefined {
  const y = numericShape(node.outputs[0]);
  const w = constantInput(node, 1);
  if (!y || !w) return undefined;
  switch (node.opType) {
    case 'Conv': {
      // Each output element reduces over (Cin/group) x kernel.
      const perOut = elementCount(w.dims.slice(1));
      return 2 * elementCount(y) * perOut;
    }
    case 'ConvTranspose': {
      // Each input element scatters into Cout/group x kernel outputs.
      const xs = numericShape(node.inputs[0]);
      return xs ? 2 * elementCount(xs) * elementCount(w.dims.slice(1)) : undefined;
    }
    case 'Gemm': {
      const k = node.getInt('transB', 0) ? w.dims[1]! : w.dims[0]!;
      return 2 * elementCount(y) * k;
    }
    case 'MatMul':
      return 2 * elementCount(y) * (w.dims.length >= 2 ? w.dims[w.dims.length - 2]! : w.dims[0]!);
    default:
      return undefined;
  }
}

/**
 * FLOPs of every weighted layer by node name (undefined where unknown), measured on a copy whose
 * value shapes are observed by running it once at batch 1 (probeFeeds). Doubles as a load-and-run check.
 */
export async function measureFlops(model: Model, probe: ProbeOptions = {}): Promise<Map<string, number | undefined>> {
  const copy = model.clone();
  // Observed shapes must come from this run, not from value_info that pruning may have made stale.
  for (const node of copy.graph.nodes) for (const out of node.outputs) if (!out.isGraphOutput()) out.type = undefined;
  await inferShapesByRunning(copy, probeFeeds(copy, 1, probe), { label: 'pruned model' });
  const out = new Map<string, number | undefined>();
  copy.graph.nodes.forEach((node, i) => {
    if (['Conv', 'ConvTranspose', 'Gemm', 'MatMul'].includes(node.opType)) out.set(node.name || `#${i}`, layerFlops(node));
  });
  return out;
}

export interface RunCheck {
  outputs: { name: string; dims: number[] }[];
  finite: boolean;
}

/**
 * Loads `pruned` in onnxruntime and runs it beside `original` on one batch of 2 (probeFeeds: the
 * data's first samples, else random); throws InputError when it fails to load or its outputs'
 * shapes differ from the original's.
 */
export async function checkRuns(original: Model, pruned: Model, probe: ProbeOptions = {}): Promise<RunCheck> {
  const feeds = probeFeeds(original, 2, probe);
  const run = async (model: Model, label: string): Promise<Record<string, TensorData>> => {
    const runner = await createRunner(model, { label, intraOpThreads: 1 });
    try {
      return await runner.run(feeds);
    } finally {
      await runner.release();
    }
  };
  const a = await run(original, 'original model');
  let b: Record<string, TensorData>;
  try {
    b = await run(pruned, 'pruned model');
  } catch (error) {
    throw new InputError(`the pruned model does not run in onnxruntime: ${(error as Error).message}`, { cause: error });
  }
  let finite = true;
  const outputs = Object.entries(a).map(([name, t]) => {
    const other = b[name];
    if (!other || other.dims.join('x') !== t.dims.join('x')) {
      throw new InputError(`pruning changed the shape of model output '${name}' (${t.dims.join('x')} -> ${other?.dims.join('x') ?? 'missing'})`);
    }
    if (other.data instanceof Float32Array || other.data instanceof Float64Array) {
      for (const x of other.data) if (!Number.isFinite(x)) finite = false;
    }
    return { name, dims: [...other.dims] };
  });
  return { outputs, finite };
}

export interface Accuracy {
  top1: number;
  samples: number;
  /** Samples whose label is beyond the output's class count (scored as misses); absent when none. */
  outOfRangeLabels?: number;
  /** The output's class count, with outOfRangeLabels. */
  classes?: number;
}

/**
 * Top-1 accuracy of the model's first output (or `outputName`) against the data set's labels, on
 * its first `maxSamples` samples (src/evaluate: its label policy and batch rule).
 */
export async function measureAccuracy(
  model: Model,
  data: Dataset,
  options: { outputName?: string; maxSamples?: number; batchSize?: number } = {},
): Promise<Accuracy> {
  if (options.maxSamples !== undefined) data = take(data, options.maxSamples);
  const r = await top1Accuracy(model, data, { outputName: options.outputName, batchSize: options.batchSize });
  return { top1: r.accuracy, samples: r.total, ...(r.outOfRange > 0 ? { outOfRangeLabels: r.outOfRange, classes: r.classes } : {}) };
}

/** Batch of the channel statistics runs (kept from before the calibration service, so statistics stay the same). */
const CHANNEL_STATISTICS_BATCH = 256;

/**
 * Mean and variance of every element along the channel axis (`axis`, counted from the end) of the
 * named tensors over a data set's first `maxSamples` samples, reduced over batch and all other
 * axes: prune's requests to the calibration service (one streaming pass).
 */
export async function collectChannelStatistics(
  model: Model,
  requests: readonly { name: string; axis: number }[],
  data: Dataset,
  options: { maxSamples?: number; batchSize?: number } = {},
): Promise<ChannelStatistics> {
  if (options.maxSamples !== undefined) data = take(data, options.maxSamples);
  const collected = await collectStatistics(
    model,
    requests.map((r) => ({ tensor: r.name, kind: 'channel-moments' as const, axis: r.axis })),
    data,
    { batchSize: options.batchSize ?? CHANNEL_STATISTICS_BATCH, runner: { label: 'model for channel statistics' } },
  );
  return collected.channels;
}

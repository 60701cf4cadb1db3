/**
 * Capturing intermediate tensors: chosen values become extra graph outputs of the model handed to
 * onnxruntime (added only while it is serialized, then removed, so the caller's model ends as it
 * was and a multi-GB model is never copied), and onnxruntime returns them with the real outputs.
 * Also fills in missing value types/shapes by running the model with everything captured.
 * Imports: ./runner.js, ../ir/index.js, ../ir/dtype.js, ../ir/samples.js, ../ir/io-spec.js, ../errors.js.
 */
import { UsageError } from '../errors.js';
import type { TensorData } from '../ir/dtype.js';
import { isTensorType, type Dim, type Model, type TensorType, type Value } from '../ir/index.js';
import { batchAxes, modelInputSpecs } from '../ir/io-spec.js';
import { sliceSamples } from '../ir/samples.js';
import { createRunnerWithOutputs, type Runner, type RunnerOptions } from './runner.js';

export interface CaptureRunner {
  /** The captured tensor names, in the order given. */
  readonly names: readonly string[];
  /** Runs one batch and returns the captured tensors (by name), plus nothing else. */
  run(feeds: Record<string, TensorData>): Promise<Record<string, TensorData>>;
  release(): Promise<void>;
}

/**
 * A runner that returns the named tensors of the main graph for each batch: for calibration over
 * many batches with one session. Initializers and Constant outputs are returned without running;
 * graph inputs are returned from the feeds.
 */
export async function createCaptureRunner(model: Model, names: readonly string[], options: RunnerOptions = {}): Promise<CaptureRunner> {
  const graph = model.graph;
  const constants = new Map<string, TensorData>();
  // Graph inputs come from the feeds; an input with an initializer (IR < 4) falls back to it.
  const fromFeeds = new Map<string, TensorData | undefined>();
  const fetch: string[] = [];
  const outputNames = new Set(graph.outputs.map((v) => v.name));
  const extraOutputs: Value[] = [];
  for (const name of names) {
    const value = graph.localValue(name);
    if (!value) throw new UsageError(`cannot capture tensor '${name}': no such tensor in the main graph of the model`);
    const constant = graph.constantTensor(value);
    if (constant && !value.isGraphInput()) {
      constants.set(name, constant.toTensorData());
      continue;
    }
    if (value.isGraphInput() && !value.producer) {
      fromFeeds.set(name, value.initializer?.toTensorData());
      continue;
    }
    if (!outputNames.has(name)) {
      extraOutputs.push(value);
      outputNames.add(name);
    }
    fetch.push(name);
  }
  const runner: Runner | undefined = fetch.length > 0 ? await createRunnerWithOutputs(model, extraOutputs, { label: 'model with captured tensors', ...options }) : undefined;
  return {
    names: [...names],
    async run(feeds) {
      const produced = runner ? await runner.run(feeds, fetch) : {};
      const out: Record<string, TensorData> = {};
      for (const name of names) {
        const t = constants.get(name) ?? (fromFeeds.has(name) ? (feeds[name] ?? fromFeeds.get(name)) : produced[name]);
        if (!t) throw new UsageError(`cannot capture tensor '${name}': not in the feeds`);
        out[name] = t;
      }
      return out;
    },
    async release() {
      await runner?.release();
    },
  };
}

/** One-shot capture: runs `feeds` once and returns the named tensors. */
export async function captureIntermediates(
  model: Model,
  names: readonly string[],
  feeds: Record<string, TensorData>,
  options: RunnerOptions = {},
): Promise<Record<string, TensorData>> {
  const runner = await createCaptureRunner(model, names, options);
  try {
    return await runner.run(feeds);
  } finally {
    await runner.release();
  }
}

function hasFullType(value: Value): boolean {
  return isTensorType(value.type) && value.type.shape !== undefined;
}

/**
 * Fills in the type of every main-graph value that has none (or no shape) from a run over
 * `feeds`. MUTATES `model` and returns the names it typed. When an input's dim 0 is symbolic and
 * the feeds hold 2+ samples, a second run on one sample tells batch-dependent dims apart: those
 * become the input's dim-0 symbol; all other dims are recorded as observed.
 */
export async function inferShapesByRunning(
  model: Model,
  feeds: Record<string, TensorData>,
  options: RunnerOptions = {},
): Promise<string[]> {
  const graph = model.graph;
  const targets: string[] = [];
  for (const node of graph.nodes) {
    for (const out of node.outputs) {
      if (out.name !== '' && !hasFullType(out) && !targets.includes(out.name)) targets.push(out.name);
    }
  }
  if (targets.length === 0) return [];

  // The batch dim of each input is where the model takes it (a state [2,batch,H] at dim 1, a
  // scalar nowhere: ir/io-spec's batchAxes); the first input whose batch dim is symbolic names it.
  const axes = batchAxes(modelInputSpecs(model));
  let batchSymbol: Dim | undefined;
  let batch = 0;
  for (const input of graph.inputs) {
    if (input.initializer || !isTensorType(input.type) || !input.type.shape) continue;
    const axis = axes[input.name];
    const d = axis === null || axis === undefined ? undefined : input.type.shape[axis];
    const fed = feeds[input.name];
    if (fed && typeof d !== 'number' && d !== undefined) {
      batchSymbol = d;
      batch = fed.dims[axis!] ?? 0;
      break;
    }
  }

  const runner = await createCaptureRunner(model, targets, options);
  try {
    const full = await runner.run(feeds);
    const single =
      batchSymbol !== undefined && batch >= 2
        ? await runner.run(Object.fromEntries(Object.entries(feeds).map(([name, t]) => [name, firstSample(t, name in axes ? (axes[name] ?? null) : 0)])))
        : undefined;
    for (const name of targets) {
      const t = full[name]!;
      const shape: Dim[] = t.dims.map((d, i) => {
        const other = single?.[name]?.dims[i];
        return other !== undefined && other !== d && d === batch ? batchSymbol! : d;
      });
      const value = graph.localValue(name)!;
      const type: TensorType = { kind: 'tensor', elemType: t.dtype, shape };
      value.type = type;
    }
  } finally {
    await runner.release();
  }
  return targets;
}

/** The first sample of a feed whose batch dim is `axis` (null: the feed has none and stays whole). */
function firstSample(t: TensorData, axis: number | null): TensorData {
  if (axis === null || t.dims.length <= axis) return t;
  if (axis === 0) return sliceSamples(t, 0, 1);
  const outer = t.dims.slice(0, axis).reduce((a, b) => a * b, 1);
  const inner = t.dims.slice(axis + 1).reduce((a, b) => a * b, 1);
  const count = t.dims[axis]!;
  const dims = t.dims.map((d, i) => (i === axis ? 1 : d));
  const src = t.data as ArrayLike<unknown> & { slice(a: number, b: number): unknown };
  const parts: unknown[] = [];
  for (let o = 0; o < outer; o++) parts.push(src.slice(o * count * inner, o * count * inner + inner));
  if (Array.isArray(t.data)) return { dtype: t.dtype, dims, data: (parts as string[][]).flat() };
  const out = new (t.data.constructor as new (n: number) => Float32Array)(outer * inner);
  parts.forEach((p, o) => out.set(p as Float32Array, o * inner));
  return { dtype: t.dtype, dims, data: out as TensorData['data'] };
}

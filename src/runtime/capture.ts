/**
 * Capturing intermediate tensors: chosen values become extra graph outputs of the model handed to
 * onnxruntime (added only while it is serialized, then removed, so the caller's model ends as it
 * was and a multi-GB model is never copied), and onnxruntime returns them with the real outputs.
 * Also fills in missing value types/shapes by running the model with everything captured.
 * Reductions: for statistics that need a few numbers per tensor (calibration's min/max), the capture
 * graph gets ReduceMin/ReduceMax/ReduceSum/Size nodes on the tensor instead, so onnxruntime returns
 * four scalars per tensor per batch and the activation itself never leaves onnxruntime (nodes added,
 * like the outputs, only while the model is serialized).
 * Histogram bins: on a fixed grid (calibration's second pass), a tensor can come back as uint16 bin
 * indices (Sub + com.microsoft QuantizeLinear: 2 bytes per element, counted by the caller) or as
 * the bin counts themselves (ScatterElements with reduction 'add', ai.onnx opset 16+: `bins`
 * numbers per run, whatever the tensor's size; about 9 ns per element on one thread against 1 ns
 * for the indices, so the caller uses it only for what its memory budget cannot take as indices).
 * Imports: ./runner.js, ../ir/index.js, ../ir/dtype.js, ../ir/samples.js, ../ir/io-spec.js, ../util/release-buffers.js, ../errors.js.
 */
import { UsageError } from '../errors.js';
import { DataType, type TensorData } from '../ir/dtype.js';
import { isTensorType, Tensor, type Dim, type Model, type Node, type TensorType, type Value } from '../ir/index.js';
import { batchAxes, modelInputSpecs } from '../ir/io-spec.js';
import { sliceSamples } from '../ir/samples.js';
import { releaseBuffers } from '../util/release-buffers.js';
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
  const runner = await createStatisticsCapture(model, { whole: names }, options);
  return {
    names: [...names],
    async run(feeds) {
      return (await runner.run(feeds)).tensors;
    },
    release: () => runner.release(),
  };
}

/** A tensor reduced inside onnxruntime for one batch. */
export interface TensorReduction {
  /** Smallest and largest element (exact when `finite`; NaN or +-Infinity may show here otherwise). */
  min: number;
  max: number;
  /**
   * True when every element is finite: their sum is (NaN and +-Infinity propagate into a sum
   * whatever the order of the additions). A float32 sum that overflows reads as not finite too,
   * which is safe: the caller then looks at the values themselves.
   */
  finite: boolean;
  /** Elements in the batch. */
  size: number;
}

export interface StatisticsCapturePlan {
  /** Tensors returned whole (as createCaptureRunner does). */
  whole?: readonly string[];
  /** Tensors reduced to min, max, a finiteness flag and an element count (see canReduce). */
  reduce?: readonly string[];
  /** Tensors of which only the element count is returned (Size), to plan memory. */
  sizes?: readonly string[];
  /** Tensors returned as uint16 bin indices on their grid (see binIndex; names canReduce accepts, bins <= MAX_INDEX_BINS). */
  binIndices?: ReadonlyMap<string, BinGrid>;
  /** Tensors counted into their grid inside onnxruntime (names canReduce accepts; only where canCountBins). */
  binCounts?: ReadonlyMap<string, BinGrid>;
}

/**
 * A fixed histogram grid: `bins` bins of `width` from `lo`. Bin indices from onnxruntime are
 * round-half-even((v - lo) / width - 0.5) in float32, saturated to [0, 65535]: floor((v - lo) /
 * width) except for a value within float32 rounding of a bin edge, which may land one bin over.
 * The caller clamps them to [0, bins - 1] (binCounts are clamped already).
 */
export interface BinGrid {
  lo: number;
  width: number;
  bins: number;
}

/** Most bins a uint16 bin index can address (StatisticsCapturePlan.binIndices). */
export const MAX_INDEX_BINS = 65536;

/** Whether onnxruntime can count bins inside the graph (StatisticsCapturePlan.binCounts): ScatterElements' reduction needs ai.onnx opset 16. */
export function canCountBins(model: Model): boolean {
  return (model.opsetVersion('') ?? 0) >= 16;
}

export interface StatisticsCaptureResult {
  tensors: Record<string, TensorData>;
  reductions: Map<string, TensorReduction>;
  /** Element counts of `reduce` and `sizes` tensors. */
  sizes: Map<string, number>;
  /** plan.binIndices: one uint16 bin index per element (not clamped to the grid's last bin). */
  binIndices: Map<string, Uint16Array>;
  /** plan.binCounts: elements per bin in this run (exact integers). */
  binCounts: Map<string, Int32Array>;
  /**
   * Frees the memory of what onnxruntime returned for this run now, rather than at a later garbage
   * collection (releaseBuffers): afterwards none of this result's tensors computed by the model may
   * be read (tensors from the feeds or the model's constants are left alone).
   */
  release(): void;
}

export interface StatisticsCapture {
  run(feeds: Record<string, TensorData>): Promise<StatisticsCaptureResult>;
  release(): Promise<void>;
}

/**
 * Whether `name` can be reduced inside onnxruntime (StatisticsCapturePlan.reduce): a float or
 * double value computed by a node of the main graph. Graph inputs and constants are already in
 * memory; other dtypes (integers, float16 bits, unknown types) keep the whole-tensor path.
 */
export function canReduce(model: Model, name: string): boolean {
  const value = model.graph.localValue(name);
  if (!value || !value.producer || value.isGraphInput() || model.graph.constantTensor(value)) return false;
  const type = value.type;
  return type !== undefined && isTensorType(type) && (type.elemType === DataType.FLOAT || type.elemType === DataType.DOUBLE);
}

interface AddedNames {
  min?: string;
  max?: string;
  sum?: string;
  size?: string;
  /** Output of uint16 bin indices, or of bin counts. */
  bins?: { output: string; counted: boolean };
}

/**
 * Reduction and binning nodes (with their constants and, for bin indices, the com.microsoft opset
 * import) and their outputs added to `model`'s main graph; `remove()` takes them out again.
 */
function addReductionNodes(
  model: Model,
  reduce: readonly Value[],
  sizes: readonly Value[],
  bins: ReadonlyMap<Value, { grid: BinGrid; counted: boolean }>,
): { outputs: Value[]; names: Map<string, AddedNames>; remove(): void } {
  const graph = model.graph;
  const added: Node[] = [];
  const constants: Value[] = [];
  const outputs: Value[] = [];
  const names = new Map<string, AddedNames>();
  const addedImport = bins.size > 0 && model.opsetVersion('com.microsoft') === undefined;
  if (addedImport) model.opsetImports.push({ domain: 'com.microsoft', version: 1 });
  // onnxruntime orders execution by a depth-first walk from the graph's leaves, last-added first:
  // adding the reductions of late tensors first puts each reduction right after its tensor is made,
  // so no captured activation (nor a transient index tensor) is kept alive until the end of the run.
  const order = new Map(graph.nodes.map((n, i) => [n, i]));
  const position = (v: Value): number => (v.producer ? (order.get(v.producer) ?? -1) : -1);
  const tensors = [...new Set([...reduce, ...sizes, ...bins.keys()])].sort((a, b) => position(b) - position(a));
  const reduced = new Set(reduce);
  const sized = new Set(sizes);
  const constant = (base: string, dtype: DataType, data: Float32Array | Uint16Array | Int32Array | BigInt64Array, dims: number[] = []): Value => {
    const value = graph.addInitializer(Tensor.fromData(graph.uniqueName(base), { dtype, dims, data }));
    constants.push(value);
    return value;
  };
  const node = (opType: string, inputs: Value[], out: string, attributes: Record<string, number | string> = {}, domain = ''): Value => {
    const n = graph.addNode({ opType, inputs, outputs: [graph.uniqueName(out)], attributes, domain, name: graph.uniqueName(`${out}_node`) });
    added.push(n);
    return n.outputs[0]!;
  };
  const output = (value: Value, elemType: number, shape: Dim[]): string => {
    value.type = { kind: 'tensor', elemType: elemType as TensorType['elemType'], shape };
    outputs.push(value);
    return value.name;
  };
  const add = (opType: string, input: Value, base: string, elemType: number): string =>
    output(node(opType, [input], `${input.name}/calibration_${base}`, opType === 'Size' ? {} : { keepdims: 0 }), elemType, []);
  try {
    for (const v of tensors) {
      const type = v.type && isTensorType(v.type) ? v.type.elemType : DataType.FLOAT;
      const entry: AddedNames = {};
      if (reduced.has(v) || sized.has(v)) entry.size = add('Size', v, 'size', DataType.INT64);
      if (reduced.has(v)) {
        entry.min = add('ReduceMin', v, 'min', type);
        entry.max = add('ReduceMax', v, 'max', type);
        entry.sum = add('ReduceSum', v, 'sum', type);
      }
      const binning = bins.get(v);
      if (binning) {
        const { grid, counted } = binning;
        const base = `${v.name}/calibration_bins`;
        const x = type === DataType.FLOAT ? v : node('Cast', [v], `${base}_float`, { to: DataType.FLOAT });
        // round((v - lo) / width - 0.5) = floor((v - lo) / width) off the edges, saturated to uint16.
        const shifted = node('Sub', [x, constant(`${base}_lo`, DataType.FLOAT, Float32Array.of(grid.lo + 0.5 * grid.width))], `${base}_shifted`);
        const scale = constant(`${base}_width`, DataType.FLOAT, Float32Array.of(grid.width));
        const index = node(
          'QuantizeLinear',
          [shifted, scale, constant(`${base}_zero`, DataType.UINT16, Uint16Array.of(0))],
          `${base}_index`,
          {},
          'com.microsoft',
        );
        if (!counted) {
          entry.bins = { output: output(index, DataType.UINT16, v.type && isTensorType(v.type) && v.type.shape ? [...v.type.shape] : []), counted };
        } else {
          const flat = node('Reshape', [index, constant(`${base}_flat`, DataType.INT64, BigInt64Array.of(-1n), [1])], `${base}_flat_index`);
          const wide = node('Cast', [flat], `${base}_int`, { to: DataType.INT32 });
          const last = constant(`${base}_last`, DataType.INT32, Int32Array.of(grid.bins - 1));
          const clipped = node('Clip', [wide, constant(`${base}_first`, DataType.INT32, Int32Array.of(0)), last], `${base}_clipped`);
          const ones = node('Expand', [constant(`${base}_one`, DataType.INT32, Int32Array.of(1)), node('Shape', [clipped], `${base}_shape`)], `${base}_ones`);
          const zeros = constant(`${base}_zeros`, DataType.INT32, new Int32Array(grid.bins), [grid.bins]);
          const counts = node('ScatterElements', [zeros, clipped, ones], `${base}_counts`, { axis: 0, reduction: 'add' });
          entry.bins = { output: output(counts, DataType.INT32, [grid.bins]), counted };
        }
      }
      names.set(v.name, entry);
    }
  } catch (error) {
    remove();
    throw error;
  }
  function remove(): void {
    for (const n of added.reverse()) graph.removeNode(n);
    added.length = 0;
    for (const c of constants) graph.removeInitializer(c, { force: true });
    constants.length = 0;
    if (addedImport) model.opsetImports = model.opsetImports.filter((o) => o.domain !== 'com.microsoft');
  }
  return { outputs, names, remove };
}

const scalar = (t: TensorData | undefined): number => {
  const x = t?.data[0];
  return typeof x === 'bigint' ? Number(x) : Number(x ?? NaN);
};

/**
 * A runner returning, per batch, whole tensors (plan.whole), reductions (plan.reduce: names
 * canReduce accepts) and element counts (plan.sizes) from one onnxruntime session: the calibration
 * service's capture graph. UsageError naming a tensor the main graph lacks or that cannot be reduced.
 */
export async function createStatisticsCapture(model: Model, plan: StatisticsCapturePlan, options: RunnerOptions = {}): Promise<StatisticsCapture> {
  const graph = model.graph;
  const whole = plan.whole ?? [];
  const constants = new Map<string, TensorData>();
  // Graph inputs come from the feeds; an input with an initializer (IR < 4) falls back to it.
  const fromFeeds = new Map<string, TensorData | undefined>();
  const fetch: string[] = [];
  const outputNames = new Set(graph.outputs.map((v) => v.name));
  const extraOutputs: Value[] = [];
  const lookup = (name: string): Value => {
    const value = graph.localValue(name);
    if (!value) throw new UsageError(`cannot capture tensor '${name}': no such tensor in the main graph of the model`);
    return value;
  };
  for (const name of whole) {
    const value = lookup(name);
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
  const reduce = [...new Set(plan.reduce ?? [])].map((name) => {
    const value = lookup(name);
    if (!canReduce(model, name)) throw new UsageError(`cannot reduce tensor '${name}' inside onnxruntime: it is not a float tensor computed by a node`);
    return value;
  });
  const reduced = new Set(reduce.map((v) => v.name));
  const sized = [...new Set(plan.sizes ?? [])]
    .filter((n) => !reduced.has(n))
    .map(lookup)
    .filter((v) => v.producer && !graph.constantTensor(v));
  const bins = new Map<Value, { grid: BinGrid; counted: boolean }>();
  for (const [entries, counted] of [
    [plan.binIndices, false],
    [plan.binCounts, true],
  ] as const) {
    for (const [name, grid] of entries ?? []) {
      const value = lookup(name);
      if (!canReduce(model, name)) throw new UsageError(`cannot bin tensor '${name}' inside onnxruntime: it is not a float tensor computed by a node`);
      if (counted && !canCountBins(model)) throw new UsageError(`cannot count bins of tensor '${name}' inside onnxruntime: the model's opset is below 16`);
      if (!(grid.bins >= 1 && grid.bins <= MAX_INDEX_BINS && grid.width > 0))
        throw new UsageError(`cannot bin tensor '${name}': ${grid.bins} bins of width ${grid.width}`);
      bins.set(value, { grid, counted });
    }
  }
  const reductions = addReductionNodes(model, reduce, sized, bins);
  let runner: Runner | undefined;
  try {
    const extra = [...extraOutputs, ...reductions.outputs];
    if (extra.length > 0 || fetch.length > 0) runner = await createRunnerWithOutputs(model, extra, { label: 'model with captured tensors', ...options });
  } finally {
    reductions.remove();
  }
  const fetchAll = [...fetch, ...reductions.outputs.map((v) => v.name)];
  return {
    async run(feeds) {
      const produced: Record<string, TensorData> = runner ? await runner.run(feeds, fetchAll) : Object.create(null);
      const tensors: Record<string, TensorData> = Object.create(null) as Record<string, TensorData>;
      for (const name of whole) {
        const t =
          constants.get(name) ?? (fromFeeds.has(name) ? ((Object.hasOwn(feeds, name) ? feeds[name] : undefined) ?? fromFeeds.get(name)) : produced[name]);
        if (!t) throw new UsageError(`cannot capture tensor '${name}': not in the feeds`);
        tensors[name] = t;
      }
      const out = new Map<string, TensorReduction>();
      const sizes = new Map<string, number>();
      const binIndices = new Map<string, Uint16Array>();
      const binCounts = new Map<string, Int32Array>();
      for (const [name, r] of reductions.names) {
        if (r.bins) (r.bins.counted ? binCounts : binIndices).set(name, produced[r.bins.output]!.data as never);
        if (r.size === undefined) continue;
        const size = scalar(produced[r.size]);
        sizes.set(name, size);
        if (r.min === undefined) continue;
        const min = scalar(produced[r.min]);
        const max = scalar(produced[r.max!]);
        out.set(name, { min, max, finite: Number.isFinite(scalar(produced[r.sum!])) && Number.isFinite(min) && Number.isFinite(max), size });
      }
      const release = (): void => {
        // Defensive: never a buffer a feed also uses (onnxruntime-node copies every output today).
        const fed = new Set(Object.values(feeds).map((t) => (ArrayBuffer.isView(t.data) ? t.data.buffer : undefined)));
        releaseBuffers(Object.values(produced).map((t) => (ArrayBuffer.isView(t.data) && !fed.has(t.data.buffer) ? t.data.buffer : undefined)));
      };
      return { tensors, reductions: out, sizes, binIndices, binCounts, release };
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
export async function inferShapesByRunning(model: Model, feeds: Record<string, TensorData>, options: RunnerOptions = {}): Promise<string[]> {
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
        ? await runner.run(
            Object.assign(
              Object.create(null),
              Object.fromEntries(Object.entries(feeds).map(([name, t]) => [name, firstSample(t, Object.hasOwn(axes, name) ? (axes[name] ?? null) : 0)])),
            ),
          )
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

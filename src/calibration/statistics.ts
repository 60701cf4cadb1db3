/**
 * The calibration service: a pass declares which statistics it needs, by tensor name and kind, and
 * streamed passes over the calibration data (onnxruntime with a capture graph, batch by batch,
 * pipelined) collect them all. Kinds:
 * - 'range': the exact running min/max of the finite values;
 * - 'histogram': the same min/max plus a StreamingHistogram (percentile / entropy / mse ranges);
 * - 'channel-moments': mean and variance of every index along one axis (counted from the end),
 *   reduced over all other axes and the samples (prune's bias compensation and activation ranking).
 * Where the data is: min/max are computed inside onnxruntime (ReduceMin/ReduceMax on the capture
 * graph, runtime/capture.ts), so a 'range' costs four scalars per tensor per batch, not the
 * activation; a batch whose reductions show NaN or +-Infinity is run again with that tensor
 * captured whole and its finite values scanned here (the semantics stay those of the JS scan).
 * Histograms, when their whole captures at the first pass's batch would not fit the memory budget
 * (and, for a caller that gave no batch, not even at a smaller one down to 1 sample, which is
 * then the batch of a single pass; one sample may take SINGLE_SAMPLE_ALLOWANCE budgets), take two passes over a re-iterable source (a Dataset, an array of feeds): the first
 * (the reductions) replays the grid a StreamingHistogram would grow to batch by batch, the second
 * bins the tensors into that grid inside onnxruntime: uint16 bin indices (2 bytes per element,
 * counted on the binning thread) for as many tensors as the memory budget takes per run (one
 * sample per run: SINGLE_SAMPLE_ALLOWANCE budgets), and, where the opset allows
 * (16+), bin counts from ScatterElements for the rest, so that one pass over the whole graph does
 * every histogram whatever the activation sizes (below opset 16, further passes in groups within
 * the budget). Tensors whose values are needed (channel moments, histograms of tensors that showed
 * NaN/Infinity, other dtypes) are captured whole in groups within the budget (their sums do not
 * depend on the batch size). Otherwise (small activations, or a one-shot source such as a generator) one
 * pass: reductions plus whole captures, histograms grown as they stream (exactly as before; a
 * finite batch's min/max come from onnxruntime's reductions, so only the binning remains, and it
 * runs on a worker thread beside onnxruntime where that pays: binning.ts, the same counts).
 * Nothing per sample is kept: memory depends on the number of tensors, their per-sample sizes, the
 * budget and the batch size, never on the sample count. Quantization (passes/quantize) and pruning
 * (passes/prune) both ask this service; what they compute from the statistics stays with them.
 * The float operations (order of min/max, histogram and moment accumulation) are those the passes
 * used before this service existed: ranges and moments are bit-identical for the same data, and
 * histograms bin into the same grid (a value on a bin edge may land one bin over).
 * Imports: runtime (capture runner, model specs), data (Dataset, batching), ir, errors, binning, histogram.
 */
import { UsageError } from '../errors.js';
import { DataType, elementCount, type TensorData } from '../ir/dtype.js';
import { batchAxes } from '../ir/io-spec.js';
import { isTensorType, type Model, type Node } from '../ir/index.js';
import { batches as datasetBatches, fixedBatchSize, type Dataset } from '../data/index.js';
import {
  canCountBins,
  canReduce,
  MAX_INDEX_BINS,
  type BinGrid,
  createStatisticsCapture,
  modelInputSpecs,
  type RunnerOptions,
  type StatisticsCapture,
  type StatisticsCapturePlan,
  type StatisticsCaptureResult,
} from '../runtime/index.js';
import { type BinningJob, binningThreadPays, createBinner } from './binning.js';
import { DEFAULT_BINS, StreamingHistogram } from './histogram.js';
import { exposeSubgraphValues } from './subgraph-capture.js';

/** One statistic a pass needs: of which tensor, and what. */
export type StatisticRequest =
  | { tensor: string; kind: 'range' }
  | { tensor: string; kind: 'histogram'; bins?: number }
  | { tensor: string; kind: 'channel-moments'; axis: number };

/** Range (and, when asked for, histogram) statistics of one tensor. */
export interface TensorStatistics {
  name: string;
  /** Smallest / largest finite value seen (Infinity / -Infinity when none). */
  min: number;
  max: number;
  /** Elements seen (non-finite ones included). */
  count: number;
  histogram?: StreamingHistogram;
}

/** Per-index moments along the requested axis of one tensor. */
export interface ChannelMoments {
  mean: Float64Array;
  variance: Float64Array;
}

/** How a collection ran: batches, passes and the memory budget (for the caller to report). */
export interface CalibrationBatching {
  /** Samples per run of the first pass (the reductions; the caller's batches for plain feeds). */
  batchSize: number;
  /** True when batchSize came from CollectOptions.batchSize. */
  explicit: boolean;
  /** Samples per run of the whole-tensor captures (histograms, channel moments), when there are any. */
  captureBatchSize?: number;
  /** Groups of whole-captured tensors (one pass over the data each; 0 when none). */
  captureGroups: number;
  /** Histograms of the second pass counted inside onnxruntime (their bin indices did not fit memoryBudget). */
  countedInRuntime?: number;
  /** Passes over the data that ran the model. */
  passes: number;
  /** Bytes of whole-captured tensors one run may return (CollectOptions.memoryBudget). */
  memoryBudget: number;
  /** Largest captured bytes of one whole-capture run, as planned (two passes: from the first pass's sizes; one pass over a Dataset: from the declared types). */
  capturedBytesPerRun?: number;
  /** Batches run again because a reduction showed NaN or +-Infinity. */
  nonFiniteReruns: number;
  /** Histograms (the single pass's, or the bin indices of the second) were counted on a worker thread beside onnxruntime (CollectOptions.binningThread). */
  binningThread: boolean;
}

export interface CollectedStatistics {
  /** 'range' and 'histogram' requests, by tensor name. */
  ranges: Map<string, TensorStatistics>;
  /** 'channel-moments' requests, by tensor name. */
  channels: Map<string, ChannelMoments>;
  batching: CalibrationBatching;
  /**
   * Tensors inside Loop/Scan bodies that could not be carried out of the loop (a value whose shape
   * changes from one iteration to the next cannot be stacked as a scan output), with the reason:
   * they have no statistics.
   */
  uncaptured?: { tensor: string; reason: string }[];
}

/** Progress within one pass over the data (batches and samples count from 0 at each pass). */
export interface CalibrationProgress {
  /** Which pass over the data, from 1 (the reductions; with two passes, then one per capture group). */
  pass: number;
  /** Passes in all: known once the first pass has planned the capture groups; undefined during a first pass that more will follow. */
  passes?: number;
  /** What the pass collects: 'ranges' (reductions, in-memory tensors, and in a single pass everything), 'captures' (histograms into the first pass's grids, channel moments). */
  stage: 'ranges' | 'captures';
  batches: number;
  samples: number;
  totalSamples?: number;
}

export interface CollectOptions {
  /**
   * Samples per onnxruntime run of the first pass when `data` is a Dataset (the reductions: their
   * memory is the model's own activations); default the model's fixed batch dim, else
   * DEFAULT_CALIBRATION_BATCH (at most the sample count), lowered when the model's largest
   * activations at that batch would not fit memoryBudget, and lowered further (down to 1) when
   * that keeps the whole captures of histograms and moments to one pass within memoryBudget (to 1
   * when one sample's captures exceed memoryBudget but fit SINGLE_SAMPLE_ALLOWANCE of it: capturePath).
   * Histogram grids follow the first pass's batches, so a caller that must reproduce earlier
   * ranges passes the batch size it used.
   */
  batchSize?: number;
  /** Samples per run of the whole-tensor captures; default the largest batch (up to batchSize) whose captures fit memoryBudget. */
  captureBatchSize?: number;
  /** Bytes of captured tensors one run may return; default DEFAULT_CAPTURE_BUDGET. */
  memoryBudget?: number;
  runner?: RunnerOptions;
  /** Total samples, for progress fractions only (a Dataset gives its own). */
  totalSamples?: number;
  /** Progress of every pass over the data, batch by batch. */
  onProgress?: (p: CalibrationProgress) => void;
  /**
   * Bin the single pass's histograms (and count the second pass's bin indices) on a worker thread
   * while onnxruntime runs the next batch (binning.ts; the counts are the same). Default: when there is a second core and, for a
   * Dataset, enough values to pay for starting the thread (binningThreadPays).
   */
  binningThread?: boolean;
}

/** Default samples per calibration run for a model without a fixed batch dim. */
export const DEFAULT_CALIBRATION_BATCH = 16;

/**
 * Default CollectOptions.memoryBudget: 64 MiB of captured tensors per run. Each run's captures
 * exist twice (onnxruntime's output and its JS copy) and two runs are in flight when pipelined, so
 * this adds about 256 MiB at most to the model's own footprint (4x that, about 1 GiB, for a model
 * whose single sample's captures take up to SINGLE_SAMPLE_ALLOWANCE budgets: capturePath).
 */
export const DEFAULT_CAPTURE_BUDGET = 64 * 1024 ** 2;

/**
 * How many memory budgets one sample's whole captures may take: when they exceed the budget but
 * fit this many, calibration captures them at batch 1 in one pass (histograms grown as they
 * stream) instead of two passes (capturePath). A fixed factor of the budget, so the path depends
 * only on the model's declared sizes, never on the machine.
 */
export const SINGLE_SAMPLE_ALLOWANCE = 4;

/** The batch and pass count capturePath chose. */
export interface CapturePath {
  /** Samples per run of the first (or only) pass. */
  batchSize: number;
  /** True: whole captures in the first pass, histograms grown as they stream; false: ranges first, then bins on the final grids. */
  onePass: boolean;
}

/**
 * Which path the whole captures (histograms, channel moments) of a collection take, from their
 * bytes per sample (declared types; Infinity when unknown), the first pass's batch and the budget.
 * One pass when a batch's captures fit `budget`, or when the batch is one sample whose captures fit
 * SINGLE_SAMPLE_ALLOWANCE x `budget`. `lowerable` (a Dataset, no explicit or fixed batch): the
 * batch may be lowered to the largest whose captures fit the budget, or to 1 when only one sample
 * fits the allowance. Otherwise two passes at `batchSize`. Pure and machine-independent.
 */
export function capturePath(capturedPerSample: number, batchSize: number, budget: number, lowerable: boolean): CapturePath {
  const allowance = SINGLE_SAMPLE_ALLOWANCE * budget;
  let batch = batchSize;
  if (lowerable && capturedPerSample * batch > budget) {
    if (capturedPerSample <= budget) batch = Math.max(1, Math.floor(budget / capturedPerSample));
    else if (capturedPerSample <= allowance) batch = 1;
  }
  const bytes = capturedPerSample * batch;
  return { batchSize: batch, onePass: bytes <= budget || (batch === 1 && bytes <= allowance) };
}

type Feeds = Record<string, TensorData>;

/** The batch a calibration pass over `dataset` uses for `model` unless told otherwise. */
export function calibrationBatchSize(model: Model, dataset: Dataset, requested?: number): number {
  const fixed = fixedBatchSize(modelInputSpecs(model));
  if (fixed !== undefined) return fixed;
  return Math.max(1, Math.min(requested ?? DEFAULT_CALIBRATION_BATCH, dataset.count));
}

/**
 * The default first-pass batch: calibrationBatchSize, lowered so that four of the model's largest
 * activations (its working set in onnxruntime, roughly) at that batch fit `budget`. Activation
 * sizes come from the value types (known after one run: runtime's inferShapesByRunning).
 */
export function budgetedBatchSize(model: Model, dataset: Dataset, budget = DEFAULT_CAPTURE_BUDGET): number {
  const batch = calibrationBatchSize(model, dataset);
  if (fixedBatchSize(modelInputSpecs(model)) !== undefined) return batch;
  let largest = 0;
  for (const node of model.graph.nodes) for (const v of node.outputs) largest = Math.max(largest, perSampleBytes(model, v.name) ?? 0);
  return largest === 0 ? batch : Math.max(1, Math.min(batch, Math.floor(budget / (4 * largest))));
}

/** Bytes per sample of a value from its declared type: dim 0 symbolic is the batch; undefined when unknown. */
function perSampleBytes(model: Model, name: string): number | undefined {
  const type = model.graph.localValue(name)?.type;
  if (!type || !isTensorType(type) || !type.shape) return undefined;
  let n = 1;
  for (const [i, d] of type.shape.entries()) {
    if (typeof d === 'number') n *= i === 0 ? 1 : d;
    else if (i !== 0) return undefined;
  }
  return n * elementBytes(model, name);
}

/** Elements per sample of `names` together, from their declared types (unknown sizes count 0). */
function valuesPerSample(model: Model, names: readonly string[]): number {
  return names.reduce((a, n) => a + (perSampleBytes(model, n) ?? 0) / elementBytes(model, n), 0);
}

function elementBytes(model: Model, name: string): number {
  const type = model.graph.localValue(name)?.type;
  return type && isTensorType(type) && type.elemType === DataType.DOUBLE ? 8 : 4;
}

function isDataset(data: unknown): data is Dataset {
  return typeof data === 'object' && data !== null && 'inputs' in data && 'count' in data && 'source' in data;
}

interface RangeState {
  kind: 'range' | 'histogram';
  stats: TensorStatistics;
}

interface MomentState {
  axis: number;
  sums?: { s: Float64Array; s2: Float64Array; n: number };
}

/** Merges the requests per tensor; a tensor asked for with two different axes or bin counts is a UsageError. */
function plan(requests: readonly StatisticRequest[]): { ranges: Map<string, RangeState>; moments: Map<string, MomentState> } {
  const ranges = new Map<string, RangeState>();
  const moments = new Map<string, MomentState>();
  for (const r of requests) {
    if (r.kind === 'channel-moments') {
      const seen = moments.get(r.tensor);
      if (seen && seen.axis !== r.axis) {
        throw new UsageError(`calibration: tensor '${r.tensor}' asked for channel moments along axes ${seen.axis} and ${r.axis}`);
      }
      moments.set(r.tensor, { axis: r.axis });
      continue;
    }
    const seen = ranges.get(r.tensor);
    const bins = r.kind === 'histogram' ? (r.bins ?? DEFAULT_BINS) : undefined;
    if (seen?.stats.histogram && bins !== undefined && seen.stats.histogram.bins !== bins) {
      throw new UsageError(`calibration: tensor '${r.tensor}' asked for histograms of ${seen.stats.histogram.bins} and ${bins} bins`);
    }
    // A histogram request subsumes a range request of the same tensor (its min/max are the same).
    if (seen && (seen.kind === 'histogram' || r.kind === 'range')) continue;
    ranges.set(r.tensor, {
      kind: r.kind,
      stats: { name: r.tensor, min: Infinity, max: -Infinity, count: 0, histogram: bins !== undefined ? new StreamingHistogram(bins) : undefined },
    });
  }
  return { ranges, moments };
}

interface Batch {
  feeds: Feeds;
  samples: number;
}

/** The data as batches, re-openable where the source allows (a Dataset, an array): one pass per open(). */
interface Source {
  reiterable: boolean;
  /** `batchSize` applies to a Dataset; other sources keep their own batches. */
  open(batchSize: number): AsyncGenerator<Batch>;
}

function sourceOf(data: Dataset | Iterable<Feeds> | AsyncIterable<Feeds>, axes: Readonly<Record<string, number | null>>): Source {
  if (isDataset(data)) {
    return {
      reiterable: true,
      async *open(batchSize) {
        for (const b of datasetBatches(data, batchSize)) yield { feeds: b.feeds, samples: b.size };
      },
    };
  }
  const isAsync = Symbol.asyncIterator in data;
  const fresh = (): AsyncIterator<Feeds> | Iterator<Feeds> =>
    isAsync ? (data as AsyncIterable<Feeds>)[Symbol.asyncIterator]() : (data as Iterable<Feeds>)[Symbol.iterator]();
  let first: AsyncIterator<Feeds> | Iterator<Feeds> | undefined = fresh();
  // A generator is its own iterator: it can be walked once.
  const reiterable = (first as unknown) !== data;
  return {
    reiterable,
    async *open() {
      const iterator = first ?? fresh();
      first = undefined;
      for (;;) {
        const next = await iterator.next();
        if (next.done) return;
        yield { feeds: next.value, samples: feedsBatchSize(next.value, axes) };
      }
    },
  };
}

/**
 * One pipelined pass: onnxruntime runs batch k+1 on its own threads while this thread folds batch
 * k, so a pass costs about max(inference, statistics), not their sum. Returns the batches seen.
 */
async function runPass(
  batches: AsyncGenerator<Batch>,
  runner: StatisticsCapture,
  fold: (batch: Batch, captured: StatisticsCaptureResult) => Promise<void> | void,
): Promise<number> {
  const start = async (): Promise<{ batch: Batch; captured: Promise<StatisticsCaptureResult> } | undefined> => {
    const next = await batches.next();
    if (next.done) return undefined;
    const captured = runner.run(next.value.feeds);
    captured.catch(() => undefined); // awaited below; avoid an unhandled rejection meanwhile
    return { batch: next.value, captured };
  };
  let count = 0;
  try {
    let current = await start();
    while (current) {
      const captured = await current.captured;
      const batch = current.batch;
      current = await start();
      await fold(batch, captured);
      // The batch's activations are garbage now: their memory goes to the next run (releaseBuffers).
      captured.release();
      count++;
    }
  } finally {
    await runner.release();
    await batches.return(undefined);
  }
  return count;
}

/**
 * The part of `model` that computes `names`: a copy without the nodes none of them depends on (and
 * without graph outputs), so a capture pass for early tensors does not run the rest of the network
 * (onnxruntime runs every node of a graph whatever is fetched). `model` itself when nothing can be
 * cut, or when a node has subgraphs (their reads of outer values are not inputs to follow).
 */
function prefixModel(model: Model, names: readonly string[]): Model {
  const nodes = model.graph.nodes;
  if (nodes.some((n) => n.subgraphs().length > 0)) return model;
  const needed = new Set<Node>();
  const stack = names.map((n) => model.graph.localValue(n)?.producer).filter((n): n is Node => Boolean(n));
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (needed.has(node)) continue;
    needed.add(node);
    for (const v of node.inputs) if (v?.producer) stack.push(v.producer);
  }
  if (needed.size === nodes.length) return model;
  const copy = model.clone();
  const keep = new Set(nodes.flatMap((n, i) => (needed.has(n) ? [i] : [])));
  const copied = [...copy.graph.nodes];
  copy.graph.outputs = [];
  for (let i = copied.length - 1; i >= 0; i--) if (!keep.has(i)) copy.graph.removeNode(copied[i]!, { force: true });
  return copy;
}

/** Bytes per element of a histogram's bin indices from onnxruntime (uint16). */
const INDEX_BYTES = 2;

/** Splits `names` into groups whose bytes per run (`batch` samples) stay within `budget`; a tensor larger than the budget is a group of its own. */
function captureGroups(names: readonly string[], bytes: ReadonlyMap<string, number>, batch: number, budget: number): string[][] {
  const groups: string[][] = [];
  let current: string[] = [];
  let used = 0;
  for (const name of names) {
    const b = (bytes.get(name) ?? 0) * batch;
    if (current.length > 0 && used + b > budget) {
      groups.push(current);
      current = [];
      used = 0;
    }
    current.push(name);
    used += b;
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

/** One collection under way: what it collects, from where, and what every pass folds into. */
interface Collection {
  model: Model;
  options: CollectOptions;
  ranges: Map<string, RangeState>;
  moments: Map<string, MomentState>;
  batching: CalibrationBatching;
  source: Source;
  /** The data is a Dataset (cut into batches here), not a sequence of feeds. */
  fromDataset: boolean;
  budget: number;
  totalSamples?: number;
  /** Tensors whose reductions showed NaN/Infinity at least once: their second-pass binning checks every value. */
  nonFinite: Set<string>;
  /** Largest bytes per sample of each reduced tensor, as the first pass saw them. */
  sizes: Map<string, number>;
}

/** Where each requested tensor's statistics come from (routeStatistics). */
interface Routes {
  /** Graph inputs and constants: in memory already, scanned in the first pass. */
  local: ReadonlySet<string>;
  /** Float activations whose min/max (and sizes) onnxruntime reduces in the first pass. */
  reduced: readonly string[];
  reducedSet: ReadonlySet<string>;
  /** Captured whole: channel moments, tensors that cannot be reduced, histograms of a single pass. */
  whole: readonly string[];
  /** Histograms reduced in the first pass, binned into its grids in the second. */
  binned: readonly string[];
  /** The tensors of the second pass(es); none with a single pass. */
  later: readonly string[];
  twoPass: boolean;
}

/**
 * Where each statistic comes from: graph inputs and constants are in memory already (scanned
 * here in the first pass); float activations are reduced inside onnxruntime; the rest (channel
 * moments, histograms' second pass, tensors of other dtypes) is captured whole. Sets the first
 * pass's batch where it may be lowered, and the planned bytes per run of a single pass.
 */
function routeStatistics(c: Collection, names: readonly string[]): Routes {
  const { model, ranges, moments, batching, options, budget } = c;
  const local = new Set(
    names.filter((n) => {
      const v = model.graph.localValue(n)!;
      return (v.isGraphInput() && !v.producer) || model.graph.constantTensor(v) !== undefined;
    }),
  );
  // One pass when the whole captures of a first-pass batch fit the budget (histograms then grow
  // exactly as they always did) or the source can be walked only once; else two. Without an
  // explicit batch, a smaller first-pass batch whose captures fit keeps it to one pass: one
  // inference plus the binning cost less than two (the text-recognizer stand-in of
  // bench/calibration-speed.mjs: 2.1x inference at batch 1 against 2.9x for two passes at 8).
  // One sample whose captures exceed the budget but fit SINGLE_SAMPLE_ALLOWANCE budgets is captured
  // whole at batch 1 in one pass too (capturePath): two passes cost two inferences.
  const captured = names.filter((n) => !local.has(n) && (moments.has(n) || ranges.get(n)?.kind === 'histogram' || (ranges.has(n) && !canReduce(model, n))));
  const estimates = captured.map((n) => perSampleBytes(model, n));
  const capturedPerSample = estimates.every((b) => b !== undefined) ? estimates.reduce<number>((a, b) => a + b!, 0) : Infinity;
  const lowerable = c.fromDataset && options.batchSize === undefined && fixedBatchSize(modelInputSpecs(model)) === undefined;
  const path = capturePath(capturedPerSample, batching.batchSize || options.batchSize || DEFAULT_CALIBRATION_BATCH, budget, lowerable);
  if (lowerable) batching.batchSize = path.batchSize;
  const twoPass = c.source.reiterable && !path.onePass;
  if (!twoPass && c.fromDataset && captured.length > 0 && Number.isFinite(capturedPerSample)) batching.capturedBytesPerRun = capturedPerSample * path.batchSize;
  const reduced = [...ranges.keys()].filter((n) => !local.has(n) && canReduce(model, n) && (twoPass || ranges.get(n)!.kind === 'range'));
  const reducedSet = new Set(reduced);
  const whole = names.filter((n) => !local.has(n) && (moments.has(n) || (ranges.has(n) && !reducedSet.has(n))));
  const binned = reduced.filter((n) => ranges.get(n)!.kind === 'histogram');
  const later = twoPass ? [...binned, ...whole.filter((n) => !binned.includes(n))] : [];
  return { local, reduced, reducedSet, whole, binned, later, twoPass };
}

/** Folds whole-captured tensors into their ranges, histograms and moments (`only`: just these tensors; `skipRanges`: not these ranges). */
function foldWhole(c: Collection, r: Routes, captured: Record<string, TensorData>, only?: ReadonlySet<string>, skipRanges?: ReadonlySet<string>): void {
  for (const [name, state] of c.ranges) {
    if ((only && !only.has(name)) || skipRanges?.has(name) || !(name in captured)) continue;
    if (r.reducedSet.has(name) && state.kind === 'range') continue; // captured whole for its moments only
    if (r.reducedSet.has(name) && state.kind === 'histogram') state.stats.histogram!.addFixed(numericView(captured[name]!, name), c.nonFinite.has(name));
    else addRange(state.stats, numericView(captured[name]!, name));
  }
  for (const [name, state] of c.moments) if ((!only || only.has(name)) && name in captured) addMoments(state, captured[name]!, name);
}

/** What the first pass (reductions, in-memory tensors, and for a single pass everything) captures. */
interface RangesPass {
  capture: StatisticsCapturePlan;
  /** Whether the pass has anything to do at all, and whether it runs the model. */
  runs: boolean;
  runsModel: boolean;
  /** Histograms captured whole in a single pass and reduced inside onnxruntime too. */
  oneRunHistograms: ReadonlySet<string>;
  /** The same, binned beside onnxruntime (binning.ts), in binner order. */
  offloaded: readonly string[];
  threaded: boolean;
}

function planRangesPass(c: Collection, r: Routes): RangesPass {
  const { model, options, ranges, batching } = c;
  const firstWhole = r.twoPass ? [...r.local] : [...r.local, ...r.whole];
  // One pass: histograms captured whole are reduced inside onnxruntime too, so a finite batch is
  // binned without its JS min/max scan (extend + addFixed: the same grid and counts as add()).
  const oneRunHistograms = new Set(r.twoPass ? [] : r.whole.filter((n) => ranges.get(n)?.kind === 'histogram' && canReduce(model, n)));
  // Their binning runs beside onnxruntime (binning.ts); their buffers move there after every other
  // use of the batch (a tensor's channel moments are summed first).
  const offloaded = [...oneRunHistograms];
  const offloadedPerSample = valuesPerSample(model, offloaded);
  const threaded =
    offloaded.length > 0 &&
    (options.binningThread ?? binningThreadPays(offloadedPerSample * (c.totalSamples ?? 0), offloadedPerSample * (batching.batchSize || 0)));
  return {
    capture: { whole: firstWhole, reduce: [...r.reduced, ...oneRunHistograms], sizes: r.reduced.length > 0 ? r.later : [] },
    runs: firstWhole.length > 0 || r.reduced.length > 0,
    runsModel: r.reduced.length > 0 || firstWhole.some((n) => !r.local.has(n)),
    oneRunHistograms,
    offloaded,
    threaded,
  };
}

/** Runs a batch again with some tensors captured whole (one session, grown when more tensors are wanted). */
interface Rerunner {
  values(feeds: Feeds, wanted: readonly string[]): Promise<Record<string, TensorData>>;
  release(): Promise<void>;
}

function nonFiniteRerunner(c: Collection): Rerunner {
  let rerun: { names: Set<string>; runner: StatisticsCapture } | undefined;
  return {
    async values(feeds, wanted) {
      if (!rerun || wanted.some((n) => !rerun!.names.has(n))) {
        const all = new Set([...(rerun?.names ?? []), ...wanted]);
        await rerun?.runner.release();
        rerun = undefined;
        rerun = { names: all, runner: await createStatisticsCapture(c.model, { whole: [...all] }, { label: 'calibration model', ...c.options.runner }) };
      }
      c.batching.nonFiniteReruns++;
      return (await rerun.runner.run(feeds)).tensors;
    },
    async release() {
      await rerun?.runner.release();
    },
  };
}

function extendRange(s: TensorStatistics, min: number, max: number): void {
  if (s.histogram) s.histogram.extend(min, max);
  else {
    if (min < s.min) s.min = min;
    if (max > s.max) s.max = max;
  }
}

/** Folds a first-pass batch's reductions and sizes; returns the tensors whose reductions showed NaN or +-Infinity. */
function foldReductions(c: Collection, r: Routes, p: RangesPass, batch: Batch, captured: StatisticsCaptureResult): string[] {
  const flagged: string[] = [];
  for (const [name, red] of captured.reductions) {
    if (red.size === 0 || p.oneRunHistograms.has(name)) continue;
    if (!red.finite) {
      flagged.push(name);
      continue;
    }
    extendRange(c.ranges.get(name)!.stats, red.min, red.max);
  }
  for (const [name, size] of captured.sizes) {
    const stats = c.ranges.get(name)?.stats;
    if (stats && r.reducedSet.has(name)) stats.count += size;
    if (batch.samples > 0) c.sizes.set(name, Math.max(c.sizes.get(name) ?? 0, (size / batch.samples) * elementBytes(c.model, name)));
  }
  return flagged;
}

/** NaN or +-Infinity in these tensors: the finite range of this batch from the values themselves. */
function foldNonFinite(c: Collection, values: Record<string, TensorData>, flagged: readonly string[]): void {
  for (const name of flagged) {
    c.nonFinite.add(name);
    const { min, max } = finiteRange(numericView(values[name]!, name));
    extendRange(c.ranges.get(name)!.stats, min, max);
  }
}

/** The binner's jobs for a single pass's histograms of one batch (counting their elements). */
function oneRunBinningJobs(c: Collection, p: RangesPass, captured: StatisticsCaptureResult, ids: ReadonlyMap<string, number>): BinningJob[] {
  const jobs: BinningJob[] = [];
  for (const name of p.oneRunHistograms) {
    const red = captured.reductions.get(name);
    // A float or double tensor (canReduce); min/max come from the final histogram (binner.finish).
    const values = numericView(captured.tensors[name]!, name) as Float32Array | Float64Array;
    const finite = red !== undefined && red.size > 0 && red.finite;
    jobs.push({ id: ids.get(name)!, op: finite ? 'fixed' : 'add', bmin: finite ? red.min : 0, bmax: finite ? red.max : 0, values });
    c.ranges.get(name)!.stats.count += values.length;
  }
  return jobs;
}

/** Sets the min/max of these histograms' statistics from the histograms themselves. */
function settleHistogramRanges(c: Collection, names: readonly string[]): void {
  for (const name of names) {
    const s = c.ranges.get(name)!.stats;
    s.min = s.histogram!.min;
    s.max = s.histogram!.max;
  }
}

/** The first pass: reductions, in-memory tensors, and (single pass) everything else. Returns the samples of its first batch. */
async function runRangesPass(c: Collection, r: Routes, p: RangesPass): Promise<number> {
  const { options, ranges, batching } = c;
  const ids = new Map(p.offloaded.map((n, i) => [n, i]));
  const rerun = nonFiniteRerunner(c);
  let samples = 0;
  let firstSamples = 0;
  // Made first: a binning thread not up yet starts while onnxruntime makes the capture session.
  const binner =
    p.offloaded.length > 0
      ? createBinner(
          p.offloaded.map((n) => ranges.get(n)!.stats.histogram!),
          { thread: p.threaded, maxInFlightBytes: c.budget },
        )
      : undefined;
  batching.binningThread = binner?.threaded ?? false;
  let batchCount = 0;
  try {
    const runner = await createStatisticsCapture(c.model, p.capture, { label: 'calibration model', ...options.runner });
    batchCount = await runPass(c.source.open(batching.batchSize), runner, async (batch, captured) => {
      if (firstSamples === 0) firstSamples = batch.samples;
      const flagged = foldReductions(c, r, p, batch, captured);
      if (flagged.length > 0) foldNonFinite(c, await rerun.values(batch.feeds, flagged), flagged);
      const jobs = oneRunBinningJobs(c, p, captured, ids);
      foldWhole(c, r, captured.tensors, undefined, p.oneRunHistograms);
      // Last: the jobs' buffers move to the binning thread.
      if (jobs.length > 0) await binner!.post(jobs);
      samples += batch.samples;
      options.onProgress?.({
        pass: 1,
        passes: r.later.length > 0 ? undefined : 1,
        stage: 'ranges',
        batches: batchCount + 1,
        samples,
        totalSamples: c.totalSamples,
      });
      batchCount++;
    });
    if (binner) {
      await binner.finish();
      settleHistogramRanges(c, p.offloaded);
    }
  } finally {
    await rerun.release();
    await binner?.close();
  }
  if (batchCount === 0) throw new UsageError('calibration data set is empty');
  if (p.runsModel) batching.passes++;
  return firstSamples;
}

/** The second pass(es): one per group of tensors, at one batch size. */
interface CapturePasses {
  batch: number;
  groups: string[][];
  /** The first pass's histogram grids that bin indices (or counts) can use. */
  grids: ReadonlyMap<string, BinGrid>;
  /** Histograms counted inside onnxruntime (ScatterElements), not returned as bin indices. */
  counted: ReadonlySet<string>;
}

function binGrids(c: Collection, r: Routes): Map<string, BinGrid> {
  const grids = new Map<string, BinGrid>();
  for (const name of r.binned) {
    const h = c.ranges.get(name)!.stats.histogram!;
    // A tensor whose values are needed here (NaN/Infinity seen, channel moments) is captured whole instead.
    if (!c.nonFinite.has(name) && !c.moments.has(name) && h.width > 0 && h.bins <= MAX_INDEX_BINS) grids.set(name, { lo: h.lo, width: h.width, bins: h.bins });
  }
  return grids;
}

/**
 * Groups of the second-pass tensors, in graph order so that each group's pass runs only a prefix of
 * the network (prefixModel). Where onnxruntime can count bins, one pass takes every histogram: the
 * captures that fit the limit (in graph order) come back, the other histograms are counted inside it.
 */
function groupCaptures(
  c: Collection,
  r: Routes,
  grids: ReadonlyMap<string, BinGrid>,
  perRun: ReadonlyMap<string, number>,
  known: boolean,
  runLimit: number,
): { groups: string[][]; counted: Set<string> } {
  const { model } = c;
  const position = new Map(model.graph.nodes.map((n, i) => [n, i]));
  const ordered = [...r.later].sort(
    (a, b) => (position.get(model.graph.localValue(a)!.producer!) ?? -1) - (position.get(model.graph.localValue(b)!.producer!) ?? -1),
  );
  const counted = new Set<string>();
  if (!canCountBins(model) || !known) return { groups: known ? captureGroups(ordered, perRun, 1, runLimit) : [ordered], counted };
  const firstGroup: string[] = [];
  const rest: string[] = [];
  let used = 0;
  for (const name of ordered) {
    const b = perRun.get(name)!;
    if (used + b <= runLimit || (firstGroup.length === 0 && !grids.has(name))) {
      firstGroup.push(name);
      used += b;
    } else if (grids.has(name)) counted.add(name);
    else rest.push(name);
  }
  return { groups: [[...firstGroup, ...counted], ...captureGroups(rest, perRun, 1, runLimit)], counted };
}

/**
 * Plans the second pass(es): histograms binned inside onnxruntime on the first pass's grids (uint16
 * bin indices, 2 bytes per element, or, for what the budget cannot take, bin counts), tensors that
 * need their values (channel moments, non-finite values, other dtypes) captured whole; grouped
 * within the budget. Records the plan in the batching report.
 */
function planCapturePasses(c: Collection, r: Routes): CapturePasses {
  const { model, options, batching, budget } = c;
  const grids = binGrids(c, r);
  const bytes = new Map(
    r.later.map((n) => {
      const b = c.sizes.get(n) ?? perSampleBytes(model, n);
      return [n, b !== undefined && grids.has(n) ? (b / elementBytes(model, n)) * INDEX_BYTES : b] as const;
    }),
  );
  const known = [...bytes.values()].every((b) => b !== undefined);
  const perSample = [...bytes.values()].reduce<number>((a, b) => a + (b ?? 0), 0);
  const first = batching.batchSize || DEFAULT_CALIBRATION_BATCH;
  const batch = options.captureBatchSize ?? (known && perSample > 0 ? Math.max(1, Math.min(first, Math.floor(budget / perSample))) : first);
  const perRun = new Map([...bytes].map(([n, b]) => [n, (b ?? 0) * batch]));
  // One sample per run may take SINGLE_SAMPLE_ALLOWANCE budgets, as in the single pass: bin
  // indices counted beside onnxruntime (binning.ts) cost less than counting them inside it.
  const runLimit = batch === 1 ? SINGLE_SAMPLE_ALLOWANCE * budget : budget;
  const { groups, counted } = groupCaptures(c, r, grids, perRun, known, runLimit);
  batching.captureBatchSize = c.fromDataset ? batch : undefined;
  batching.captureGroups = groups.length;
  batching.countedInRuntime = counted.size;
  batching.capturedBytesPerRun = known ? Math.max(...groups.map((g) => g.reduce((a, n) => a + (counted.has(n) ? 0 : perRun.get(n)!), 0))) : undefined;
  return { batch, groups, grids, counted };
}

/** One second pass: the group's tensors captured whole, binned as indices (counted beside onnxruntime) or counted inside it. */
async function runCaptureGroup(c: Collection, r: Routes, passes: CapturePasses, group: readonly string[], pass: { number: number; of: number }): Promise<void> {
  const { model, options, ranges, batching } = c;
  const { grids, counted, batch } = passes;
  const only = new Set(group);
  const part = (pick: (n: string) => boolean): Map<string, BinGrid> => new Map(group.filter(pick).map((n) => [n, grids.get(n)!]));
  const capturePlan: StatisticsCapturePlan = {
    whole: group.filter((n) => !grids.has(n)),
    binIndices: part((n) => grids.has(n) && !counted.has(n)),
    binCounts: part((n) => counted.has(n)),
  };
  // Bin indices are counted beside onnxruntime (binning.ts), as the single pass's histograms are.
  const indexed = [...capturePlan.binIndices!.keys()];
  const indexedPerSample = valuesPerSample(model, indexed);
  const ids = new Map(indexed.map((n, i) => [n, i]));
  const binner =
    indexed.length > 0
      ? createBinner(
          indexed.map((n) => ranges.get(n)!.stats.histogram!),
          {
            thread: options.binningThread ?? binningThreadPays(indexedPerSample * (c.totalSamples ?? 0), indexedPerSample * batch),
            maxInFlightBytes: c.budget,
          },
        )
      : undefined;
  if (binner?.threaded) batching.binningThread = true;
  let count = 0;
  try {
    const runner = await createStatisticsCapture(prefixModel(model, group), capturePlan, { label: 'calibration model', ...options.runner });
    let progress = { batches: 0, samples: 0 };
    count = await runPass(c.source.open(batch), runner, async (b, captured) => {
      foldWhole(c, r, captured.tensors, only);
      for (const [name, counts] of captured.binCounts) ranges.get(name)!.stats.histogram!.addCounts(counts);
      const jobs = [...captured.binIndices].map(([name, indices]): BinningJob => ({ id: ids.get(name)!, op: 'indices', bmin: 0, bmax: 0, values: indices }));
      if (jobs.length > 0) await binner!.post(jobs);
      progress = { batches: progress.batches + 1, samples: progress.samples + b.samples };
      options.onProgress?.({ pass: pass.number, passes: pass.of, stage: 'captures', ...progress, totalSamples: c.totalSamples });
    });
    await binner?.finish();
  } finally {
    await binner?.close();
  }
  if (count === 0) throw new UsageError('calibration data set is empty');
  batching.passes++;
}

/** Mean and variance per index from the moments' sums. */
function channelMoments(moments: ReadonlyMap<string, MomentState>, into: Map<string, ChannelMoments>): void {
  for (const [name, { sums }] of moments) {
    if (!sums) continue;
    const { s, s2, n } = sums;
    const mean = s.map((x) => x / n);
    into.set(name, { mean, variance: s2.map((x, i) => Math.max(0, x / n - mean[i]! * mean[i]!)) });
  }
}

/**
 * Streamed passes over `data` (a Dataset, cut into batches, or any sequence of feeds, e.g. a
 * generator that makes data on the fly) collecting every requested statistic. UsageError when the
 * data has no samples or a tensor is not numeric. Steps: route each tensor (routeStatistics), the
 * first pass (reductions; a single pass does everything), then, with two passes, the capture
 * groups on the first pass's histogram grids.
 */
export async function collectStatistics(
  model: Model,
  requests: readonly StatisticRequest[],
  data: Dataset | Iterable<Feeds> | AsyncIterable<Feeds>,
  options: CollectOptions = {},
): Promise<CollectedStatistics> {
  const { ranges, moments } = plan(requests);
  const names = [...new Set(requests.map((r) => r.tensor))];
  const budget = options.memoryBudget ?? DEFAULT_CAPTURE_BUDGET;
  const batching: CalibrationBatching = {
    batchSize: 0,
    explicit: options.batchSize !== undefined,
    captureGroups: 0,
    passes: 0,
    memoryBudget: budget,
    nonFiniteReruns: 0,
    binningThread: false,
  };
  const result: CollectedStatistics = { ranges: new Map([...ranges].map(([name, s]) => [name, s.stats])), channels: new Map(), batching };
  if (names.length === 0) return result;
  const nested = names.filter((name) => !model.graph.localValue(name));
  if (nested.length > 0) return collectNested(model, requests, data, options, result);
  let totalSamples = options.totalSamples;
  const axes = batchAxes(modelInputSpecs(model));
  if (isDataset(data)) {
    if (data.count === 0) throw new UsageError(`${data.source}: the calibration data set has no samples`);
    totalSamples ??= data.count;
    batching.batchSize = options.batchSize ?? budgetedBatchSize(model, data, budget);
  }
  const source = sourceOf(data, axes);
  const c: Collection = {
    model,
    options,
    ranges,
    moments,
    batching,
    source,
    fromDataset: isDataset(data),
    budget,
    totalSamples,
    nonFinite: new Set(),
    sizes: new Map(),
  };

  const routes = routeStatistics(c, names);
  const first = planRangesPass(c, routes);
  const firstSamples = first.runs ? await runRangesPass(c, routes, first) : 0;
  if (!c.fromDataset) batching.batchSize = firstSamples;
  settleHistogramRanges(c, routes.binned);
  if (routes.later.length > 0) {
    const passes = planCapturePasses(c, routes);
    // Pass numbers in progress events: the first pass walked the data whenever it had anything to do.
    const firstPasses = first.runs ? 1 : 0;
    for (const [g, group] of passes.groups.entries()) {
      await runCaptureGroup(c, routes, passes, group, { number: firstPasses + g + 1, of: firstPasses + passes.groups.length });
    }
  }
  channelMoments(moments, result.channels);
  return result;
}

/**
 * Statistics of values inside If/Loop/Scan bodies: collected on a copy that carries them out
 * (subgraph-capture.ts). When onnxruntime refuses the copy because a Loop/Scan body value changes
 * shape between iterations (it cannot be stacked as a scan output), the run is made again without
 * the Loop/Scan body values, which are then listed as uncaptured (a re-iterable source only).
 */
async function collectNested(
  model: Model,
  requests: readonly StatisticRequest[],
  data: Dataset | Iterable<Feeds> | AsyncIterable<Feeds>,
  options: CollectOptions,
  result: CollectedStatistics,
): Promise<CollectedStatistics> {
  const run = async (wanted: readonly StatisticRequest[]): Promise<{ inner: CollectedStatistics; alias: (name: string) => string }> => {
    const exposed = exposeSubgraphValues(
      model,
      [...new Set(wanted.map((r) => r.tensor))].filter((n) => !model.graph.localValue(n)),
    );
    const alias = (name: string): string => exposed.aliases.get(name) ?? name;
    const inner = await collectStatistics(
      exposed.model,
      wanted.map((r) => ({ ...r, tensor: alias(r.tensor) })),
      data,
      options,
    );
    return { inner, alias };
  };
  let uncaptured: CollectedStatistics['uncaptured'];
  let done: Awaited<ReturnType<typeof run>>;
  try {
    done = await run(requests);
  } catch (error) {
    const inLoops = new Set(requests.map((r) => r.tensor).filter((n) => insideLoopOrScan(model, n)));
    const reiterable = isDataset(data) || Array.isArray(data);
    if (inLoops.size === 0 || !reiterable || !(error instanceof Error)) throw error;
    const why = error.message.split('\n')[0]!;
    uncaptured = [...inLoops].map((tensor) => ({ tensor, reason: `onnxruntime could not stack its values over the iterations for calibration (${why})` }));
    done = await run(requests.filter((r) => !inLoops.has(r.tensor)));
  }
  for (const r of requests) {
    const s = done.inner.ranges.get(done.alias(r.tensor));
    if (s && !uncaptured?.some((u) => u.tensor === r.tensor)) result.ranges.set(r.tensor, { ...s, name: r.tensor });
    else if (uncaptured?.some((u) => u.tensor === r.tensor)) result.ranges.delete(r.tensor);
    const m = done.inner.channels.get(done.alias(r.tensor));
    if (m) result.channels.set(r.tensor, m);
  }
  return { ...result, batching: done.inner.batching, ...(uncaptured ? { uncaptured } : {}) };
}

/** Whether `name` is a value inside a Loop or Scan body (at any depth). */
function insideLoopOrScan(model: Model, name: string): boolean {
  if (model.graph.localValue(name)) return false;
  const graph = model.graph.allGraphs().find((g) => g.localValue(name));
  for (let g = graph; g?.parentNode; g = g.parentNode.graph) if (g.parentNode.opType === 'Loop' || g.parentNode.opType === 'Scan') return true;
  return false;
}

/** Smallest / largest finite value (Infinity / -Infinity when none). */
function finiteRange(values: ArrayLike<number>): { min: number; max: number } {
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (!Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return { min, max };
}

/** The samples in a feed: the extent of the first input's batch dim (`axes`: ir/io-spec's batchAxes), else 1. */
function feedsBatchSize(feeds: Feeds, axes: Readonly<Record<string, number | null>>): number {
  for (const [name, t] of Object.entries(feeds)) {
    const axis = name in axes ? axes[name] : 0;
    if (axis !== null && axis !== undefined && t.dims.length > axis) return t.dims[axis]!;
  }
  return 1;
}

function addRange(s: TensorStatistics, values: ArrayLike<number>): void {
  if (s.histogram) {
    s.histogram.add(values);
    s.min = s.histogram.min;
    s.max = s.histogram.max;
  } else {
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!;
      if (!Number.isFinite(v)) continue;
      if (v < s.min) s.min = v;
      if (v > s.max) s.max = v;
    }
  }
  s.count += values.length;
}

/** Per-index sums along the axis: each (outer, index) row is summed first, then added, in sample order. */
function addMoments(state: MomentState, t: TensorData, name: string): void {
  // An empty tensor (a branch this batch did not take: subgraph-capture.ts) adds nothing.
  if (elementCount(t.dims) === 0) return;
  const pos = t.dims.length + state.axis;
  if (pos < 0 || pos >= t.dims.length) {
    throw new UsageError(`calibration: tensor '${name}' has shape [${t.dims}], no axis ${state.axis}`);
  }
  const len = t.dims[pos]!;
  const outer = elementCount(t.dims.slice(0, pos));
  const inner = elementCount(t.dims.slice(pos + 1));
  const acc = (state.sums ??= { s: new Float64Array(len), s2: new Float64Array(len), n: 0 });
  if (acc.s.length !== len) {
    throw new UsageError(`calibration: tensor '${name}' has ${len} channels along axis ${state.axis} in one batch and ${acc.s.length} in another`);
  }
  const x = numericView(t, name);
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < len; c++) {
      const base = (o * len + c) * inner;
      let s = 0;
      let s2 = 0;
      for (let i = 0; i < inner; i++) {
        const v = x[base + i]!;
        s += v;
        s2 += v * v;
      }
      acc.s[c] = acc.s[c]! + s;
      acc.s2[c] = acc.s2[c]! + s2;
    }
  }
  acc.n += outer * inner;
}

function numericView(t: TensorData, name: string): ArrayLike<number> {
  if (t.dtype === DataType.FLOAT || t.dtype === DataType.DOUBLE) return t.data as Float32Array;
  if (Array.isArray(t.data) || t.data instanceof BigInt64Array || t.data instanceof BigUint64Array) {
    throw new UsageError(`cannot calibrate tensor '${name}': it is not a float tensor`);
  }
  return t.data;
}

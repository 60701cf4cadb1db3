/**
 * Magnitude pruning: zero the smallest-|w| weights of Conv, ConvTranspose, Gemm and MatMul
 * (initializers and Constant-node weights), either freely (unstructured, one global threshold or
 * one per layer) or as N:M (keep the N largest of every M consecutive weights along the reduction
 * axis, the pattern sparse tensor cores run faster). Zeros shrink the compressed file; dense CPU
 * kernels multiply them like any number. The input model is not mutated.
 * With calibration statistics (mean and E[x^2] of each input channel of every pruned layer) the
 * unstructured pattern can rank by |w| x sqrt(E[x_j^2]) (Wanda) and fold the zeroed weights' mean
 * contribution into the bias (bias correction), which is what keeps one-shot pruning accurate.
 * Imports: ./op-handlers.js, ./weights.js, ./types.js, ./channel-analysis.js (types),
 * ../../ir/index.js, ../../errors.js, ../../util/gzip.js.
 */
import { UsageError } from '../../errors.js';
import { elementCount, type Model, type Node, type Tensor, type TypedArray } from '../../ir/index.js';
import { gzipSize } from '../../util/gzip.js';
import type { ChannelStatistics } from './channel-analysis.js';
import { pruneRow } from './op-handlers.js';
import type { MagnitudeLayerReport, MagnitudePruneOptions, MagnitudePruneReport } from './types.js';
import { addOutputBias, constantInput, PRUNABLE_DTYPES } from './weights.js';

export interface MagnitudePruneResult {
  model: Model;
  report: MagnitudePruneReport;
}

interface Target {
  node: Node;
  tensor: Tensor;
  weightIndex: number;
  reductionAxis: number;
  skipped?: string;
}

/**
 * How a layer's weights meet its data: the activation input and its channel axis (from the end),
 * and per weight element the input channel it multiplies and the output channel it feeds (-1
 * where no per-channel bias can absorb it, e.g. batched MatMul).
 */
export interface WeightGeometry {
  activation: string;
  axis: number;
  inChannels: number;
  outChannels: number;
  inChannel: Int32Array;
  outChannel: Int32Array;
}

export function weightGeometry(node: Node, tensor: Tensor, weightIndex: number): WeightGeometry | undefined {
  const dims = tensor.dims;
  const size = tensor.elementCount;
  const inChannel = new Int32Array(size);
  const outChannel = new Int32Array(size).fill(-1);
  const activationOf = (i: number): string | undefined => node.inputs[i]?.name;
  switch (node.opType) {
    case 'Conv':
    case 'ConvTranspose': {
      if (weightIndex !== 1 || dims.length < 3) return undefined;
      const group = node.getInt('group', 1);
      const kernel = elementCount(dims.slice(2));
      const [a, b] = [dims[0]!, dims[1]!];
      const transposed = node.opType === 'ConvTranspose';
      // Conv W [Cout, Cin/g, k..]; ConvTranspose W [Cin, Cout/g, k..].
      const inPerGroup = transposed ? a / group : b;
      const outPerGroup = transposed ? b : a / group;
      for (let i = 0; i < size; i++) {
        const p = Math.floor(i / kernel);
        const first = Math.floor(p / b);
        const second = p % b;
        const g = Math.floor(first / (transposed ? inPerGroup : outPerGroup));
        inChannel[i] = transposed ? first : g * inPerGroup + second;
        outChannel[i] = transposed ? g * outPerGroup + second : first;
      }
      const x = activationOf(0);
      return x ? { activation: x, axis: 1 - dims.length, inChannels: inPerGroup * group, outChannels: outPerGroup * group, inChannel, outChannel } : undefined;
    }
    case 'Gemm': {
      if (weightIndex !== 1 || dims.length !== 2) return undefined;
      const transB = node.getInt('transB', 0) !== 0;
      const [k, n] = transB ? [dims[1]!, dims[0]!] : [dims[0]!, dims[1]!];
      for (let i = 0; i < size; i++) {
        const [r, c] = [Math.floor(i / dims[1]!), i % dims[1]!];
        inChannel[i] = transB ? c : r;
        outChannel[i] = transB ? r : c;
      }
      const x = activationOf(0);
      return x ? { activation: x, axis: node.getInt('transA', 0) !== 0 ? -2 : -1, inChannels: k, outChannels: n, inChannel, outChannel } : undefined;
    }
    case 'MatMul': {
      if (dims.length < 2) return undefined;
      const [rows, cols] = [dims[dims.length - 2]!, dims[dims.length - 1]!];
      if (weightIndex === 1) {
        // x [.., K] @ W [.., K, N]: rows are input features; a bias per column only when W is 2-D.
        for (let i = 0; i < size; i++) {
          inChannel[i] = Math.floor(i / cols) % rows;
          if (dims.length === 2) outChannel[i] = i % cols;
        }
        const x = activationOf(0);
        return x ? { activation: x, axis: -1, inChannels: rows, outChannels: cols, inChannel, outChannel } : undefined;
      }
      // W [M, K] @ x [.., K, N]: columns of W meet rows of x; outputs are rows, no bias slot.
      for (let i = 0; i < size; i++) inChannel[i] = i % cols;
      const x = activationOf(1);
      return x ? { activation: x, axis: -2, inChannels: cols, outChannels: rows, inChannel, outChannel } : undefined;
    }
    default:
      return undefined;
  }
}

function zeroFraction(t: Tensor): number {
  const w = t.toFloat64();
  let z = 0;
  for (let i = 0; i < w.length; i++) if (w[i] === 0) z++;
  return w.length === 0 ? 0 : z / w.length;
}

/** The weighted layers of the main graph, with why each one stays dense (if it does). */
export function findTargets(model: Model, options: Pick<MagnitudePruneOptions, 'excludeNodes' | 'excludeOpTypes' | 'pruneFirstLast'>): Target[] {
  const excludeNames = new Set(options.excludeNodes);
  const excludeOps = new Set(options.excludeOpTypes);
  const targets: Target[] = [];
  const seen = new Set<Tensor>();
  for (const node of model.graph.nodes) {
    const slot = pruneRow(node)?.weight?.(node);
    if (slot === undefined || typeof slot === 'string') continue;
    const tensor = constantInput(node, slot.index);
    if (!tensor || seen.has(tensor)) continue;
    seen.add(tensor);
    const t: Target = { node, tensor, weightIndex: slot.index, reductionAxis: slot.reductionAxis };
    if (!PRUNABLE_DTYPES.has(tensor.dtype)) t.skipped = 'weight is not a float tensor';
    else if (excludeNames.has(node.name)) t.skipped = 'excluded by --exclude-nodes';
    else if (excludeOps.has(node.opType)) t.skipped = 'excluded by --exclude-op-types';
    targets.push(t);
  }
  if (!options.pruneFirstLast) {
    const live = targets.filter((t) => !t.skipped);
    if (live.length === 1) live[0]!.skipped = 'the only weighted layer, first and last, kept dense (--prune-first-last to prune it)';
    if (live.length > 1) live[0]!.skipped = 'first layer kept dense (--prune-first-last to prune it)';
    if (live.length > 1) live[live.length - 1]!.skipped = 'last layer kept dense (--prune-first-last to prune it)';
  }
  return targets;
}

/** Indices of the k smallest |w| (ties by index, so the choice is deterministic). */
function smallestK(mag: Float64Array, k: number): Uint32Array {
  const idx = Uint32Array.from({ length: mag.length }, (_, i) => i);
  idx.sort((x, y) => mag[x]! - mag[y]! || x - y);
  return idx.subarray(0, k);
}

function zeroAt(tensor: Tensor, indices: ArrayLike<number>): void {
  const data = (tensor.data as TypedArray).slice() as TypedArray;
  // 0 in storage is +0.0 for every prunable float dtype (fp16/bf16 bits included).
  for (let i = 0; i < indices.length; i++) (data as Float32Array)[indices[i]!] = 0;
  tensor.data = data;
  tensor.external = undefined;
}

/** Keep the N largest |w| of every M consecutive weights along `axis`; returns indices to zero. */
export function nmPruneIndices(dims: readonly number[], mag: Float64Array, axis: number, n: number, m: number): number[] {
  const outer = elementCount(dims.slice(0, axis));
  const len = dims[axis]!;
  const inner = elementCount(dims.slice(axis + 1));
  const zero: number[] = [];
  const group: number[] = [];
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      for (let start = 0; start < len; start += m) {
        group.length = 0;
        for (let j = start; j < Math.min(start + m, len); j++) group.push((o * len + j) * inner + i);
        group.sort((x, y) => mag[y]! - mag[x]! || x - y);
        for (let j = n; j < group.length; j++) zero.push(group[j]!);
      }
    }
  }
  return zero;
}

/** Whether every group of M along `axis` holds at most N non-zeros. */
export function checkNM(dims: readonly number[], values: Float64Array, axis: number, n: number, m: number): boolean {
  const outer = elementCount(dims.slice(0, axis));
  const len = dims[axis]!;
  const inner = elementCount(dims.slice(axis + 1));
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      for (let start = 0; start < len; start += m) {
        let nz = 0;
        for (let j = start; j < Math.min(start + m, len); j++) if (values[(o * len + j) * inner + i] !== 0) nz++;
        if (nz > n) return false;
      }
    }
  }
  return true;
}

/**
 * The tensors whose per-channel statistics the data-aware options need: the activation input of
 * every layer that will be pruned, with its channel axis (from the end), for collectChannelStatistics.
 */
export function magnitudeStatisticsRequests(
  model: Model,
  options: Pick<MagnitudePruneOptions, 'excludeNodes' | 'excludeOpTypes' | 'pruneFirstLast'>,
): { name: string; axis: number; spatial: boolean }[] {
  const out = new Map<string, { name: string; axis: number; spatial: boolean }>();
  for (const t of findTargets(model, options)) {
    if (t.skipped) continue;
    const g = weightGeometry(t.node, t.tensor, t.weightIndex);
    if (!g) continue;
    const r = out.get(g.activation) ?? { name: g.activation, axis: g.axis, spatial: false };
    // A Conv that pads, strides or has a kernel > 1 sees each input pixel at some taps only.
    r.spatial ||= convTaps(t.node, t.tensor) !== undefined;
    out.set(g.activation, r);
  }
  return [...out.values()];
}

/** A Conv whose bias correction depends on where pixels are (kernel > 1, padding or stride): its attributes. */
function convTaps(node: Node, weight: Tensor): { kernel: number[]; strides: number[]; dilations: number[]; pads: number[] } | undefined {
  if (node.opType !== 'Conv' || weight.dims.length < 3) return undefined;
  const kernel = weight.dims.slice(2);
  const rank = kernel.length;
  const strides = node.getInts('strides', []).length ? node.getInts('strides', []) : kernel.map(() => 1);
  const dilations = node.getInts('dilations', []).length ? node.getInts('dilations', []) : kernel.map(() => 1);
  const pads = node.getInts('pads', []).length ? node.getInts('pads', []) : kernel.map(() => 0).concat(kernel.map(() => 0));
  const autoPad = node.getString('auto_pad', 'NOTSET');
  if ((autoPad !== 'NOTSET' && autoPad !== 'VALID') || strides.length !== rank || dilations.length !== rank || pads.length !== 2 * rank) return undefined;
  if (kernel.every((k) => k === 1) && strides.every((x) => x === 1) && pads.every((x) => x === 0)) return undefined;
  return { kernel, strides, dilations, pads: autoPad === 'VALID' ? pads.map(() => 0) : pads };
}

/**
 * Per (input channel, kernel tap): the mean over the output positions (and the data) of the
 * input pixel that tap reads, zero padding included, from the per-pixel means of one sample
 * [C, ...spatial]. Folding w x this mean into the bias keeps each output channel's mean exactly.
 */
export function convTapMeans(
  conv: { kernel: number[]; strides: number[]; dilations: number[]; pads: number[] },
  map: { dims: number[]; mean: Float64Array },
): Float64Array | undefined {
  const rank = conv.kernel.length;
  const spatial = map.dims.slice(1);
  if (spatial.length !== rank) return undefined;
  const outDims = spatial.map(
    (n, d) => Math.floor((n + conv.pads[d]! + conv.pads[d + rank]! - conv.dilations[d]! * (conv.kernel[d]! - 1) - 1) / conv.strides[d]!) + 1,
  );
  if (outDims.some((n) => n < 1)) return undefined;
  const channels = map.dims[0]!;
  const taps = elementCount(conv.kernel);
  const pixels = elementCount(spatial);
  const outCount = elementCount(outDims);
  const result = new Float64Array(channels * taps);
  // For each tap and spatial dim, the input coordinate read by each output coordinate (-1: padding).
  const tapIndex = new Array<number>(rank);
  for (let t = 0; t < taps; t++) {
    let rest = t;
    for (let d = rank - 1; d >= 0; d--) {
      tapIndex[d] = rest % conv.kernel[d]!;
      rest = Math.floor(rest / conv.kernel[d]!);
    }
    const coords = outDims.map((n, d) =>
      Int32Array.from({ length: n }, (_, o) => {
        const x = o * conv.strides[d]! - conv.pads[d]! + tapIndex[d]! * conv.dilations[d]!;
        return x >= 0 && x < spatial[d]! ? x : -1;
      }),
    );
    // How often each input pixel is read by this tap (a product of per-dim counts).
    const perDim = coords.map((c, d) => {
      const n = new Float64Array(spatial[d]!);
      for (const x of c) if (x >= 0) n[x] = n[x]! + 1;
      return n;
    });
    for (let c = 0; c < channels; c++) {
      let sum = 0;
      for (let p = 0; p < pixels; p++) {
        let weight = 1;
        let r = p;
        for (let d = rank - 1; d >= 0 && weight !== 0; d--) {
          weight *= perDim[d]![r % spatial[d]!]!;
          r = Math.floor(r / spatial[d]!);
        }
        if (weight !== 0) sum += weight * map.mean[c * pixels + p]!;
      }
      result[c * taps + t] = sum / outCount;
    }
  }
  return result;
}

/** Per input channel: mean and sqrt(E[x^2]) of a layer's activation, checked against its weight. */
function channelMoments(t: Target, g: WeightGeometry, statistics: ChannelStatistics | undefined): { mean: Float64Array; rms: Float64Array } {
  const s = statistics?.get(g.activation);
  if (!s || s.mean.length !== g.inChannels) {
    throw new UsageError(
      `magnitude pruning: no statistics with ${g.inChannels} channels for tensor '${g.activation}' read by node '${t.node.name || t.node.opType}'`,
    );
  }
  return { mean: s.mean, rms: s.mean.map((m, j) => Math.sqrt(s.variance[j]! + m * m)) };
}

/** Indices to zero: the k smallest scores of every group (by default the whole layer). */
function smallestPerGroup(score: Float64Array, sparsity: number, groupOf?: Int32Array): ArrayLike<number> {
  if (!groupOf || groupOf.some((x) => x < 0)) return smallestK(score, Math.floor(sparsity * score.length + 1e-9));
  const members = new Map<number, number[]>();
  for (let i = 0; i < score.length; i++) {
    let list = members.get(groupOf[i]!);
    if (!list) members.set(groupOf[i]!, (list = []));
    list.push(i);
  }
  const zero: number[] = [];
  for (const list of members.values()) {
    list.sort((x, y) => score[x]! - score[y]! || x - y);
    zero.push(...list.slice(0, Math.floor(sparsity * list.length + 1e-9)));
  }
  return zero;
}

/** pruneMagnitude's options: the pass's own, with calibration statistics. */
type MagnitudeInputs = Parameters<typeof pruneMagnitude>[1];

/** The options resolved and checked once. */
interface MagnitudeSettings {
  /** The N:M pattern, when that is the pattern. */
  nm?: { n: number; m: number };
  /** Fraction zeroed (implied by an N:M pattern). */
  sparsity: number;
  criterion: NonNullable<MagnitudePruneOptions['criterion']>;
  biasCorrection: boolean;
}

function magnitudeSettings(options: MagnitudeInputs): MagnitudeSettings {
  const nm = options.pattern.kind === 'n:m' ? options.pattern : undefined;
  if (nm && !(Number.isInteger(nm.n) && Number.isInteger(nm.m) && nm.n >= 1 && nm.m > nm.n)) {
    throw new UsageError(`N:M pattern needs whole numbers with 1 <= N < M, got ${nm.n}:${nm.m}`);
  }
  const sparsity = nm ? (nm.m - nm.n) / nm.m : options.sparsity;
  if (!(sparsity >= 0 && sparsity < 1)) throw new UsageError(`sparsity must be in [0, 1), got ${options.sparsity}`);
  const criterion = options.criterion ?? 'magnitude';
  const biasCorrection = options.biasCorrection ?? false;
  if ((criterion === 'activation' || biasCorrection) && !options.statistics) {
    throw new UsageError(`magnitude pruning: ${criterion === 'activation' ? "criterion 'activation'" : 'bias correction'} needs calibration statistics`);
  }
  return { nm, sparsity, criterion, biasCorrection };
}

/** What the plan knows of one layer: how its weights meet its data, its input channels' moments, each weight's score. */
interface LayerScore {
  geometry?: WeightGeometry;
  moments?: { mean: Float64Array; rms: Float64Array };
  score: Float64Array;
}

/** Plan, step 1: each layer's scores (|w|, times its input channel's RMS for the 'activation' criterion). */
function scoreLayers(live: readonly Target[], options: MagnitudeInputs, settings: MagnitudeSettings): Map<Target, LayerScore> {
  const { criterion, biasCorrection } = settings;
  const scores = new Map<Target, LayerScore>();
  for (const t of live) {
    const g = weightGeometry(t.node, t.tensor, t.weightIndex);
    const layer: LayerScore = { geometry: g, score: t.tensor.toFloat64().map(Math.abs) };
    if (options.statistics && (criterion === 'activation' || biasCorrection)) {
      if (!g) {
        if (criterion === 'activation') throw new UsageError(`magnitude pruning: cannot tell which input channel each weight of node '${t.node.name}' reads`);
      } else {
        const m = channelMoments(t, g, options.statistics);
        layer.moments = m;
        const { score } = layer;
        if (criterion === 'activation') for (let i = 0; i < score.length; i++) score[i] = score[i]! * m.rms[g.inChannel[i]!]!;
      }
    }
    scores.set(t, layer);
  }
  return scores;
}

/** One threshold over every pruned layer: the k-th smallest score; ties at it go by layer order. */
function globalThresholdZeros(live: readonly Target[], scores: ReadonlyMap<Target, LayerScore>, sparsity: number, zeros: Map<Target, ArrayLike<number>>): void {
  const mags = live.map((t) => scores.get(t)!.score);
  const total = mags.reduce((n, m) => n + m.length, 0);
  const k = Math.floor(sparsity * total + 1e-9);
  if (k <= 0) return;
  const all = new Float64Array(total);
  let o = 0;
  for (const m of mags) {
    all.set(m, o);
    o += m.length;
  }
  all.sort();
  const threshold = all[k - 1]!;
  let below = 0;
  for (const m of mags) for (let i = 0; i < m.length; i++) if (m[i]! < threshold) below++;
  let tiesLeft = k - below;
  live.forEach((t, li) => {
    const m = mags[li]!;
    const zero: number[] = [];
    for (let i = 0; i < m.length; i++) {
      if (m[i]! < threshold) zero.push(i);
      else if (m[i] === threshold && tiesLeft > 0) {
        zero.push(i);
        tiesLeft--;
      }
    }
    zeros.set(t, zero);
  });
}

/** Plan, step 2: the indices to zero per layer (an N:M layer whose reduction dim does not fit the pattern is skipped). */
function planZeros(
  live: readonly Target[],
  scores: ReadonlyMap<Target, LayerScore>,
  options: MagnitudeInputs,
  settings: MagnitudeSettings,
): Map<Target, ArrayLike<number>> {
  const { nm, sparsity } = settings;
  const zeros = new Map<Target, ArrayLike<number>>();
  if (nm) {
    for (const t of live) {
      const len = t.tensor.dims[t.reductionAxis] ?? 0;
      if (len % nm.m !== 0) {
        t.skipped = `reduction dim ${len} is not a multiple of ${nm.m}`;
        continue;
      }
      zeros.set(t, nmPruneIndices(t.tensor.dims, scores.get(t)!.score, t.reductionAxis, nm.n, nm.m));
    }
  } else if (options.scope !== 'global') {
    for (const t of live) {
      const groupOf = options.scope === 'output' ? scores.get(t)!.geometry?.outChannel : undefined;
      zeros.set(t, smallestPerGroup(scores.get(t)!.score, sparsity, groupOf));
    }
  } else globalThresholdZeros(live, scores, sparsity, zeros);
  return zeros;
}

/**
 * Bias correction of one layer about to lose the weights at `zero`: E[removed part of y_o] = sum
 * over zeroed w of w x E[x_j], put back as a constant in the output bias. Returns true (or false)
 * when folded, or why it could not be.
 */
function correctBias(t: Target, zero: ArrayLike<number>, layer: LayerScore | undefined, options: MagnitudeInputs): boolean | string {
  const g = layer?.geometry;
  const m = layer?.moments;
  if (!g || !m) return 'the input channel of each weight is unknown';
  const w = t.tensor.toFloat64();
  const delta = new Float64Array(g.outChannels);
  const conv = convTaps(t.node, t.tensor);
  const map = options.spatialMeans?.get(g.activation);
  const tapMeans = conv && map && map.dims[0] === g.inChannels ? convTapMeans(conv, map) : undefined;
  const taps = conv ? elementCount(conv.kernel) : 1;
  let lost = false;
  for (let n = 0; n < zero.length; n++) {
    const i = zero[n]!;
    const mean = tapMeans ? tapMeans[g.inChannel[i]! * taps + (i % taps)]! : m.mean[g.inChannel[i]!]!;
    const contribution = w[i]! * mean;
    if (g.outChannel[i]! < 0) lost ||= contribution !== 0;
    else delta[g.outChannel[i]!] = delta[g.outChannel[i]!]! + contribution;
  }
  if (lost) return 'no per-output bias to fold into';
  return delta.every((d) => d === 0) ? true : addOutputBias(t.node, delta, t.tensor.dtype);
}

/** Apply: zero the planned weights, layer by layer, correcting each bias first when asked; returns the bias corrections. */
function applyZeros(
  zeros: ReadonlyMap<Target, ArrayLike<number>>,
  scores: ReadonlyMap<Target, LayerScore>,
  options: MagnitudeInputs,
  biasCorrection: boolean,
): Map<Target, boolean | string> {
  const corrected = new Map<Target, boolean | string>();
  for (const [t, zero] of zeros) {
    if (biasCorrection) corrected.set(t, correctBias(t, zero, scores.get(t), options));
    zeroAt(t.tensor, zero);
  }
  return corrected;
}

/** The report: every layer before and after, and the totals. */
function magnitudeReport(
  targets: readonly Target[],
  before: readonly { sparsity: number; gzip: number }[],
  corrected: ReadonlyMap<Target, boolean | string>,
  options: MagnitudeInputs,
  settings: MagnitudeSettings,
): MagnitudePruneReport {
  const { nm, sparsity, criterion, biasCorrection } = settings;
  let patternVerified: boolean | undefined;
  if (nm) {
    patternVerified = targets.filter((t) => !t.skipped).every((t) => checkNM(t.tensor.dims, t.tensor.toFloat64(), t.reductionAxis, nm.n, nm.m));
  }
  const layers: MagnitudeLayerReport[] = targets.map((t, i) => {
    const layer: MagnitudeLayerReport = {
      node: t.node.name,
      opType: t.node.opType,
      weight: t.tensor.name,
      shape: [...t.tensor.dims],
      params: t.tensor.elementCount,
      sparsityBefore: before[i]!.sparsity,
      sparsityAfter: zeroFraction(t.tensor),
      rawBytes: t.tensor.byteLength,
      gzipBytesBefore: before[i]!.gzip,
      gzipBytesAfter: t.skipped ? before[i]!.gzip : gzipSize(t.tensor.rawBytes()),
    };
    if (t.skipped) layer.skipped = t.skipped;
    const c = corrected.get(t);
    if (c !== undefined) layer.biasCorrected = c;
    return layer;
  });
  const params = layers.reduce((n, l) => n + l.params, 0);
  const zerosBefore = layers.reduce((n, l) => n + l.sparsityBefore * l.params, 0);
  const zerosAfter = layers.reduce((n, l) => n + l.sparsityAfter * l.params, 0);
  const report: MagnitudePruneReport = {
    pattern: nm ? `${nm.n}:${nm.m}` : 'unstructured',
    sparsity,
    scope: options.scope,
    criterion,
    biasCorrection,
    layers,
    sparsityBefore: params ? zerosBefore / params : 0,
    sparsityAfter: params ? zerosAfter / params : 0,
    prunedParams: layers.filter((l) => !l.skipped).reduce((n, l) => n + l.params, 0),
  };
  if (patternVerified !== undefined) report.patternVerified = patternVerified;
  return report;
}

/** Zero the smallest weights of a copy of `model` (see the module comment). Plan (scores, then indices per layer), then apply once. */
export function pruneMagnitude(
  model: Model,
  options: MagnitudePruneOptions & {
    /** Per input channel mean and variance of every pruned layer's activation (magnitudeStatisticsRequests). */
    statistics?: ChannelStatistics;
    /**
     * Per activation of a padded / strided / k > 1 Conv: the mean of every element of one sample
     * [C, ...spatial]; makes bias correction exact at the borders. Optional.
     */
    spatialMeans?: ReadonlyMap<string, { dims: number[]; mean: Float64Array }>;
  },
): MagnitudePruneResult {
  const settings = magnitudeSettings(options);
  const pruned = model.clone();
  const targets = findTargets(pruned, options);
  const before = targets.map((t) => ({
    sparsity: zeroFraction(t.tensor),
    gzip: gzipSize(t.tensor.rawBytes()),
  }));
  const live = targets.filter((t) => !t.skipped);
  const scores = scoreLayers(live, options, settings);
  const zeros = planZeros(live, scores, options, settings);
  const corrected = applyZeros(zeros, scores, options, settings.biasCorrection);
  return { model: pruned, report: magnitudeReport(targets, before, corrected, options, settings) };
}

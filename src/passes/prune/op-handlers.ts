/**
 * The one op-handler table of the pruning passes, keyed by op type (default ONNX domain). A row
 * says where a layer's weight is and along which axis it reduces (for magnitude and N:M pruning),
 * and how channels flow through the op (for channel pruning): which inputs carry channels, what
 * the outputs carry, which atoms it couples, and how to rewrite its tensors once channels go.
 * Ops without a row block the channels that reach them, so an unknown op never yields a wrong
 * model. Adding an op is adding a row; a duplicate key throws.
 * Imports: ./channel-analysis.js, ./weights.js, ../../ir/tensor-math.js, ../../ir/index.js.
 */
import { nullPrototype } from '../../util/null-prototype.js';
import { AttributeType, elementCount, type Node, type TensorData } from '../../ir/index.js';
import { UNIT_BLOCK, type ChannelAnalysis, type ChannelConstants, type ChannelInfo, type ChannelRewrite } from './channel-analysis.js';
import { addToBias, axisNorms, constantInput, PRUNABLE_DTYPES, setConstantInput, sliceAxis } from './weights.js';
import { fromF64 } from '../../ir/tensor-math.js';

/** Where a layer's weight sits and its reduction (input-channel) axis. */
export interface WeightSlot {
  index: number;
  reductionAxis: number;
}

export interface ChannelOpHandler {
  /** Propagate channel info from inputs to outputs; read inputs only through `a.use`. */
  analyze(node: Node, a: ChannelAnalysis, ctx: AnalysisContext): void;
  /**
   * Say what the removed channels of the outputs hold when their filters are zeroed, from the
   * inputs' constants (read and written through `k`). Without it the outputs' removed channels
   * count as unknown and are dropped uncompensated.
   */
  constants?(node: Node, k: ChannelConstants): void;
  /** Rewrite the node's constants (and attributes) for the kept channels. */
  apply?(node: Node, r: ChannelRewrite): void;
}

export interface AnalysisContext {
  criterion: 'l1' | 'l2';
  /** Default-domain opset of the model (Softmax changed its axis semantics at 13). */
  opset: number;
}

export interface PruneOpRow {
  /** For weighted layers: the weight slot, or why this node's weight cannot be pruned. */
  weight?: (node: Node) => WeightSlot | string;
  channels: ChannelOpHandler;
}

const label = (node: Node): string => `node '${node.name || node.opType}' (${node.opType})`;

// ---- helpers ----------------------------------------------------------------------------------------

/** Channel axis is axis 1 of a value whose rank is known (NCHW-style ops). */
function isAxisOne(info: ChannelInfo): boolean {
  return info.rank !== undefined && info.axis === 1 - info.rank && info.block.size === 1;
}

function setAllOutputs(node: Node, a: ChannelAnalysis, info: ChannelInfo): void {
  for (const out of node.outputs) a.setInfo(out, info);
}

/** Slice several axes of one constant input in one rewrite. */
function rewriteConstant(node: Node, index: number, cuts: { axis: number; keep: number[] }[]): void {
  const t = constantInput(node, index);
  if (!t || cuts.length === 0) return;
  let td: TensorData = t.toTensorData();
  for (const c of cuts) td = sliceAxis(td, c.axis, c.keep);
  setConstantInput(node, index, td);
}

function isFloatConstant(node: Node, index: number): boolean {
  const t = constantInput(node, index);
  return t !== undefined && PRUNABLE_DTYPES.has(t.dtype);
}

/** Output channels are prunable only when weight (and bias, if any) are constants we can slice. */
function biasOk(node: Node, index: number): boolean {
  return !node.inputs[index] || isFloatConstant(node, index);
}

/** A float constant input as float64 values, or undefined. */
function floatValues(node: Node, index: number): Float64Array | undefined {
  const t = node.inputs[index] ? constantInput(node, index) : undefined;
  return t && PRUNABLE_DTYPES.has(t.dtype) ? t.toFloat64() : undefined;
}

/**
 * Per atom of `info`, the value of a constant operand that is uniform over everything but the
 * channel axis (a scalar or a per-channel vector); NaN where it varies, so the channel is not one
 * constant after the op.
 */
function operandPerAtom(node: Node, index: number, info: ChannelInfo): Float64Array {
  const out = new Float64Array(info.atoms.length).fill(NaN);
  const c = constantInput(node, index);
  if (!c || !PRUNABLE_DTYPES.has(c.dtype)) return out;
  const v = c.toFloat64();
  if (v.length === 1) return out.fill(v[0]!);
  const pos = c.dims.length + info.axis;
  const size = info.block.size ?? 1;
  if (pos < 0 || c.dims[pos] !== v.length || v.length !== info.atoms.length * size) return out;
  for (let i = 0; i < info.atoms.length; i++) {
    let same = true;
    for (let j = 1; j < size; j++) if (v[i * size + j] !== v[i * size]) same = false;
    if (same) out[i] = v[i * size]!;
  }
  return out;
}

/** Sum over everything but axes 0 and 1 of a [A, B, ...] weight: one number per (a, b). */
function kernelSums(w: Float64Array, dims: readonly number[]): Float64Array {
  const pairs = dims[0]! * dims[1]!;
  const inner = elementCount(dims.slice(2));
  const out = new Float64Array(pairs);
  for (let p = 0; p < pairs; p++) {
    let s = 0;
    for (let i = 0; i < inner; i++) s += w[p * inner + i]!;
    out[p] = s;
  }
  return out;
}

const anyNonZero = (x: Float64Array): boolean => x.some((v) => v !== 0);

// ---- element-wise -------------------------------------------------------------------------------------

type Scalar = (x: number) => number;
const erf = (x: number): number => {
  // Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7): Math has no erf.
  const t = 1 / (1 + 0.3275911 * Math.abs(x));
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-x * x);
  return x >= 0 ? y : -y;
};

/** What each unary op does to a constant channel (ops missing here leave it unknown). */
const UNARY_CONSTANT: Record<string, (node: Node) => Scalar | undefined> = nullPrototype<(node: Node) => Scalar | undefined>({
  Relu: () => (x) => Math.max(x, 0),
  LeakyRelu: (n) => {
    const alpha = n.getFloat('alpha', 0.01);
    return (x) => (x >= 0 ? x : alpha * x);
  },
  Sigmoid: () => (x) => 1 / (1 + Math.exp(-x)),
  HardSigmoid: (n) => {
    const alpha = n.getFloat('alpha', 0.2);
    const beta = n.getFloat('beta', 0.5);
    return (x) => Math.min(1, Math.max(0, alpha * x + beta));
  },
  HardSwish: () => (x) => x * Math.min(1, Math.max(0, x / 6 + 0.5)),
  Tanh: () => Math.tanh,
  Elu: (n) => {
    const alpha = n.getFloat('alpha', 1);
    return (x) => (x >= 0 ? x : alpha * (Math.exp(x) - 1));
  },
  Selu: (n) => {
    const alpha = n.getFloat('alpha', 1.67326319217681884765625);
    const gamma = n.getFloat('gamma', 1.05070102214813232421875);
    return (x) => gamma * (x > 0 ? x : alpha * (Math.exp(x) - 1));
  },
  Gelu: (n) =>
    n.getString('approximate', 'none') === 'tanh'
      ? (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)))
      : (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
  Softplus: () => (x) => Math.log1p(Math.exp(x)),
  Softsign: () => (x) => x / (1 + Math.abs(x)),
  Mish: () => (x) => x * Math.tanh(Math.log1p(Math.exp(x))),
  Erf: () => erf,
  Exp: () => Math.exp,
  Log: () => Math.log,
  Abs: () => Math.abs,
  Neg: () => (x) => -x,
  Sqrt: () => Math.sqrt,
  Reciprocal: () => (x) => 1 / x,
  Floor: () => Math.floor,
  Ceil: () => Math.ceil,
  Sign: () => Math.sign,
  Sin: () => Math.sin,
  Cos: () => Math.cos,
  Identity: () => (x) => x,
  Dropout: () => (x) => x,
  Clip: (n) => {
    // Opset 11+ takes min/max as optional inputs; older opsets as attributes.
    const lo = n.inputs[1] ? floatValues(n, 1)?.[0] : n.getFloat('min', -Infinity);
    const hi = n.inputs[2] ? floatValues(n, 2)?.[0] : n.getFloat('max', Infinity);
    if (lo === undefined || hi === undefined) return undefined;
    return (x) => Math.min(hi, Math.max(lo, x));
  },
  Cast: (n) => (PRUNABLE_DTYPES.has(n.getInt('to', 0)) ? (x) => x : undefined),
});

/** Pass the input's constants through unchanged (layout ops, pools of a constant). */
const passConstants = (node: Node, k: ChannelConstants): void => {
  k.set(node.outputs[0], k.of(node.inputs[0]).slice());
};

/** Unary element-wise (extra inputs, e.g. Clip's min/max, are scalars and carry no channels). */
const elementwiseUnary: ChannelOpHandler = {
  analyze(node, a) {
    const info = a.use(node.inputs[0]);
    if (info) setAllOutputs(node, a, { ...info, fresh: info.fresh });
  },
  constants(node, k) {
    const f = UNARY_CONSTANT[node.opType]?.(node);
    if (!f) return;
    k.set(node.outputs[0], k.of(node.inputs[0]).map(f));
  },
};

/** How each broadcasting op combines constant channels (ops missing here leave them unknown). */
const NARY_CONSTANT: Record<string, (xs: number[]) => number> = nullPrototype<(xs: number[]) => number>({
  Add: ([a, b]) => a! + b!,
  Sub: ([a, b]) => a! - b!,
  Mul: ([a, b]) => a! * b!,
  Div: ([a, b]) => a! / b!,
  Pow: ([a, b]) => a! ** b!,
  PRelu: ([x, slope]) => (x! < 0 ? x! * slope! : x!),
  Sum: (xs) => xs.reduce((p, q) => p + q, 0),
  Mean: (xs) => xs.reduce((p, q) => p + q, 0) / xs.length,
  Max: (xs) => Math.max(...xs),
  Min: (xs) => Math.min(...xs),
});

/**
 * N-ary broadcasting element-wise ops (Add, Mul, Sum, ...): inputs carrying channels are tied
 * one-to-one (a residual Add couples all its branches); a constant operand must broadcast over
 * the channel axis (size 1) or hold one value per channel (then it is sliced).
 */
const elementwiseBroadcast: ChannelOpHandler = {
  analyze(node, a) {
    const infos = node.inputs.map((v) => a.use(v));
    const ref = infos.find((i): i is ChannelInfo => i !== undefined);
    if (!ref) return;
    const carried = infos.filter((i): i is ChannelInfo => i !== undefined);
    const fail = (reason: string): void => {
      for (const i of carried) a.block(i, reason);
    };
    let rank = ref.rank;
    for (let k = 0; k < node.inputs.length; k++) {
      const v = node.inputs[k];
      const info = infos[k];
      if (!v) continue;
      if (info) {
        if (info !== ref && !a.union(ref, info)) return fail(`${label(node)} adds tensors whose channels do not line up`);
        if (rank !== undefined && info.rank !== undefined) rank = Math.max(rank, info.rank);
        continue;
      }
      const c = constantInput(node, k);
      if (!c) return fail(`${label(node)} combines the channels with a computed tensor of unknown layout`);
      const pos = c.dims.length + ref.axis;
      const full = a.elementCount(ref);
      if (pos >= 0) {
        const d = c.dims[pos]!;
        if (d !== 1 && (d !== full || !PRUNABLE_DTYPES.has(c.dtype))) {
          return fail(`${label(node)} has a constant operand that does not broadcast per channel`);
        }
      }
      if (rank !== undefined) rank = Math.max(rank, c.dims.length);
    }
    setAllOutputs(node, a, { axis: ref.axis, rank, atoms: ref.atoms, block: ref.block });
  },
  constants(node, k) {
    const out = k.info(node.outputs[0]);
    const f = NARY_CONSTANT[node.opType];
    if (!out || !f) return;
    const operands = node.inputs.map((v, i) => (k.info(v) ? k.of(v) : v ? operandPerAtom(node, i, out) : undefined));
    if (operands.some((o) => o === undefined)) return;
    const result = new Float64Array(out.atoms.length);
    for (let i = 0; i < result.length; i++) result[i] = f(operands.map((o) => o![i]!));
    k.set(node.outputs[0], result);
  },
  apply(node, r) {
    const out = r.info(node.outputs[0]);
    if (!r.changed(out)) return;
    const full = r.originalCount(out);
    node.inputs.forEach((v, k) => {
      if (!v || r.info(v)) return;
      const c = constantInput(node, k);
      const pos = c ? c.dims.length + out.axis : -1;
      if (c && pos >= 0 && c.dims[pos] === full && full > 1) rewriteConstant(node, k, [{ axis: pos, keep: r.keptIndices(out) }]);
    });
  },
};

/** Pools, normalising over spatial axes only: channels pass through unchanged on axis 1. */
const channelPreserving: ChannelOpHandler = {
  analyze(node, a) {
    const info = a.use(node.inputs[0]);
    if (!info) return;
    if (!isAxisOne(info)) return a.block(info, `${label(node)} needs its channels on axis 1`);
    // MaxPool's optional indices output encodes flat positions that depend on the channel count.
    const extra = node.outputs.slice(1).some((o) => o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()));
    if (extra) return a.block(info, `${label(node)} has a used indices output`);
    a.setInfo(node.outputs[0]!, { ...info, fresh: info.fresh });
  },
  constants(node, k) {
    // Max/average of a constant is the constant (Lp pools scale it by the window: unknown).
    if (!node.opType.includes('Lp')) passConstants(node, k);
  },
};

/**
 * ReduceMean / ReduceMax over spatial axes only (global average pooling as Keras/tf2onnx and
 * PyTorch's `x.mean((2, 3))` export it): channels stay on axis 1, whatever keepdims does to the rank.
 */
const spatialReduce: ChannelOpHandler = {
  analyze(node, a, ctx) {
    const info = a.use(node.inputs[0]);
    if (!info) return;
    if (!isAxisOne(info)) return a.block(info, `${label(node)} needs its channels on axis 1`);
    const rank = info.rank!;
    const axesT = ctx.opset >= 18 ? constantInput(node, 1) : undefined;
    const axes = ctx.opset >= 18 ? (axesT ? Array.from(axesT.toFloat64()) : undefined) : node.hasAttr('axes') ? node.getInts('axes') : undefined;
    if (!axes || axes.length === 0) return a.block(info, `${label(node)} reduces every axis, channels included`);
    const normalized = new Set(axes.map((x) => (x < 0 ? x + rank : x)));
    if (normalized.has(0) || normalized.has(1)) return a.block(info, `${label(node)} reduces the batch or channel axis`);
    const outRank = node.getInt('keepdims', 1) !== 0 ? rank : rank - normalized.size;
    a.setInfo(node.outputs[0]!, { ...info, axis: 1 - outRank, rank: outRank, fresh: false });
  },
  constants: passConstants,
};

/** Softmax-like ops: fine unless they normalise across the channel axis. */
const softmaxLike: ChannelOpHandler = {
  analyze(node, a, ctx) {
    const info = a.use(node.inputs[0]);
    if (!info) return;
    let axis = node.getInt('axis', ctx.opset >= 13 ? -1 : 1);
    if (axis >= 0) {
      if (info.rank === undefined) return a.block(info, `${label(node)}: cannot tell its axis from the channel axis`);
      axis -= info.rank;
    }
    // Before opset 13 the op normalised over every axis from `axis` on, as one flattened row.
    const across = ctx.opset >= 13 ? axis === info.axis : axis <= info.axis;
    if (across) return a.block(info, `${label(node)} normalises across the channels`);
    setAllOutputs(node, a, { ...info, fresh: false });
  },
};

// ---- normalisation ------------------------------------------------------------------------------------

const batchNormalization: ChannelOpHandler = {
  analyze(node, a) {
    const info = a.use(node.inputs[0]);
    if (!info) return;
    if (!isAxisOne(info)) return a.block(info, `${label(node)} needs its channels on axis 1`);
    for (let k = 1; k <= 4; k++) {
      if (!isFloatConstant(node, k)) return a.block(info, `${label(node)}: input ${k} is not a constant`);
    }
    if (node.outputs.slice(1).some((o) => o.name !== '' && (o.consumers.length > 0 || o.isGraphOutput()))) {
      return a.block(info, `${label(node)} is in training mode (running statistics are used)`);
    }
    if (info.fresh) {
      // Fold BN into the importance: a filter followed by a tiny gamma contributes little.
      const gamma = constantInput(node, 1)!.toFloat64();
      const variance = constantInput(node, 4)!.toFloat64();
      const eps = node.getFloat('epsilon', 1e-5);
      a.scale(
        info,
        Array.from(gamma, (g, i) => Math.abs(g) / Math.sqrt(Math.max(variance[i]!, 0) + eps)),
      );
    }
    a.setInfo(node.outputs[0]!, { ...info, fresh: false });
  },
  constants(node, k) {
    const [gamma, beta, mean, variance] = [1, 2, 3, 4].map((i) => floatValues(node, i)!) as [Float64Array, Float64Array, Float64Array, Float64Array];
    const eps = node.getFloat('epsilon', 1e-5);
    // Replacing a channel by its mean: right after its producer, the running mean is that mean.
    const fresh = k.info(node.inputs[0])?.fresh === true;
    const c = k.mode === 'mean' && fresh ? mean.slice() : k.of(node.inputs[0]);
    k.set(
      node.outputs[0],
      c.map((x, i) => (gamma[i]! * (x - mean[i]!)) / Math.sqrt(variance[i]! + eps) + beta[i]!),
    );
  },
  apply(node, r) {
    const info = r.info(node.inputs[0]);
    if (!r.changed(info)) return;
    const keep = r.keptIndices(info);
    for (let k = 1; k <= 4; k++) rewriteConstant(node, k, [{ axis: 0, keep }]);
  },
};

// ---- layers with weights ------------------------------------------------------------------------------

const conv: ChannelOpHandler = {
  analyze(node, a, ctx) {
    const w = constantInput(node, 1);
    const group = node.getInt('group', 1);
    const xInfo = a.peek(node.inputs[0]);
    if (!w || !PRUNABLE_DTYPES.has(w.dtype)) return;
    const rank = w.dims.length;
    const cout = w.dims[0]!;
    const cinPerGroup = w.dims[1]!;
    const inputOk = (info: ChannelInfo): boolean => info.axis === 1 - rank && info.block.size === 1 && (info.rank ?? rank) === rank;
    if (group === 1) {
      if (xInfo) {
        a.use(node.inputs[0]);
        if (!inputOk(xInfo) || xInfo.atoms.length !== cinPerGroup) a.block(xInfo, `${label(node)}: input channels do not match its weight`);
      }
      if (!biasOk(node, 2)) return;
      a.setInfo(node.outputs[0]!, a.newSpace(node, cout, axisNorms(w, 0, ctx.criterion), 1 - rank, rank));
      return;
    }
    // Depthwise (one filter per input channel): output channel k is input channel k.
    if (xInfo && cinPerGroup === 1 && cout === group && xInfo.atoms.length === group) {
      a.use(node.inputs[0]);
      if (!inputOk(xInfo) || !biasOk(node, 2)) return a.block(xInfo, `${label(node)}: depthwise weights cannot be rewritten`);
      a.setInfo(node.outputs[0]!, { axis: 1 - rank, rank, atoms: xInfo.atoms, block: UNIT_BLOCK });
    }
    // Other grouped convolutions: channels reaching them stay (unused input info gets blocked).
  },
  constants(node, k) {
    const y = k.info(node.outputs[0]);
    if (!y) return;
    const w = constantInput(node, 1)!;
    const bias = floatValues(node, 2);
    if (node.getInt('group', 1) === 1) {
      // A zeroed filter outputs its bias everywhere (padding included).
      k.set(
        node.outputs[0],
        Float64Array.from({ length: y.atoms.length }, (_, o) => bias?.[o] ?? 0),
      );
      return;
    }
    // Depthwise: a constant input channel c gives c * sum(filter) + bias away from the borders.
    const sums = kernelSums(w.toFloat64(), w.dims);
    k.set(
      node.outputs[0],
      k.of(node.inputs[0]).map((c, i) => c * sums[i]! + (bias?.[i] ?? 0)),
    );
  },
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const group = node.getInt('group', 1);
    const removed = group === 1 ? r.removedConstants(node.inputs[0]) : undefined;
    if (removed) {
      // Bias compensation: the dropped input channels were constants; their contribution to
      // every output pixel (exact away from zero-padded borders) moves into the bias.
      const w = constantInput(node, 1)!;
      const sums = kernelSums(w.toFloat64(), w.dims);
      const [cout, cin] = [w.dims[0]!, w.dims[1]!];
      const delta = new Float64Array(cout);
      for (let o = 0; o < cout; o++) for (let j = 0; j < cin; j++) delta[o] = delta[o]! + sums[o * cin + j]! * removed[j]!;
      if (anyNonZero(delta)) addToBias(node, 2, delta, w.dtype);
    }
    const cuts: { axis: number; keep: number[] }[] = [];
    if (r.changed(yInfo)) cuts.push({ axis: 0, keep: r.keptIndices(yInfo) });
    if (group === 1 && r.changed(xInfo)) cuts.push({ axis: 1, keep: r.keptIndices(xInfo) });
    rewriteConstant(node, 1, cuts);
    if (r.changed(yInfo)) {
      if (node.inputs[2]) rewriteConstant(node, 2, [{ axis: 0, keep: r.keptIndices(yInfo) }]);
      if (group !== 1) node.setAttr('group', r.keptCount(yInfo));
    }
  },
};

/** ConvTranspose weights are [Cin, Cout/group, k...]. Only group 1 is handled. */
const convTranspose: ChannelOpHandler = {
  analyze(node, a, ctx) {
    const w = constantInput(node, 1);
    if (!w || !PRUNABLE_DTYPES.has(w.dtype) || node.getInt('group', 1) !== 1) return;
    const rank = w.dims.length;
    const xInfo = a.use(node.inputs[0]);
    if (xInfo && (xInfo.axis !== 1 - rank || xInfo.block.size !== 1 || xInfo.atoms.length !== w.dims[0])) {
      a.block(xInfo, `${label(node)}: input channels do not match its weight`);
    }
    if (node.hasAttr('output_shape') || !biasOk(node, 2)) return;
    a.setInfo(node.outputs[0]!, a.newSpace(node, w.dims[1]!, axisNorms(w, 1, ctx.criterion), 1 - rank, rank));
  },
  constants(node, k) {
    const y = k.info(node.outputs[0]);
    if (!y) return;
    const bias = floatValues(node, 2);
    k.set(
      node.outputs[0],
      Float64Array.from({ length: y.atoms.length }, (_, o) => bias?.[o] ?? 0),
    );
  },
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const removed = r.removedConstants(node.inputs[0]);
    if (removed) {
      // Each output pixel receives on average sum(kernel) / prod(strides) taps of a constant input
      // (exact when the kernel is a multiple of the stride, away from the borders).
      const w = constantInput(node, 1)!;
      const sums = kernelSums(w.toFloat64(), w.dims);
      const [cin, cout] = [w.dims[0]!, w.dims[1]!];
      const stride = node.getInts('strides', []).reduce((p, q) => p * q, 1);
      const delta = new Float64Array(cout);
      for (let j = 0; j < cin; j++) for (let o = 0; o < cout; o++) delta[o] = delta[o]! + (sums[j * cout + o]! * removed[j]!) / stride;
      if (anyNonZero(delta)) addToBias(node, 2, delta, w.dtype);
    }
    const cuts: { axis: number; keep: number[] }[] = [];
    if (r.changed(xInfo)) cuts.push({ axis: 0, keep: r.keptIndices(xInfo) });
    if (r.changed(yInfo)) cuts.push({ axis: 1, keep: r.keptIndices(yInfo) });
    rewriteConstant(node, 1, cuts);
    if (r.changed(yInfo) && node.inputs[2]) rewriteConstant(node, 2, [{ axis: 0, keep: r.keptIndices(yInfo) }]);
  },
};

/** Contribution of constant input features `removed` to each output of x W, W as [K, N] (or [N, K]). */
function featureContribution(w: Float64Array, k: number, n: number, transposed: boolean, removed: Float64Array): Float64Array {
  const delta = new Float64Array(n);
  for (let j = 0; j < k; j++) {
    const c = removed[j]!;
    if (c === 0) continue;
    for (let o = 0; o < n; o++) delta[o] = delta[o]! + c * w[transposed ? o * k + j : j * n + o]!;
  }
  return delta;
}

/** Fold dropped constant features into Gemm's C (created, or widened from a scalar, when needed). */
function compensateGemm(node: Node, removed: Float64Array): void {
  const b = constantInput(node, 1)!;
  const transB = node.getInt('transB', 0) !== 0;
  const [k, n] = transB ? [b.dims[1]!, b.dims[0]!] : [b.dims[0]!, b.dims[1]!];
  const delta = featureContribution(b.toFloat64(), k, n, transB, removed).map((d) => d * node.getFloat('alpha', 1));
  if (!anyNonZero(delta)) return;
  let beta = node.getFloat('beta', 1);
  const c = node.inputs[2] ? constantInput(node, 2) : undefined;
  if (node.inputs[2] && !c) return;
  if (!c || beta === 0) {
    // No C (or a C that beta switches off): the folded constant becomes the whole of C.
    if (beta === 0 && node.inputs[2]) node.setInput(2, null);
    if (beta === 0) node.setAttr('beta', (beta = 1), AttributeType.FLOAT);
    addToBias(
      node,
      2,
      delta.map((d) => d / beta),
      b.dtype,
    );
    return;
  }
  const values = c.toFloat64();
  if (values.length === 1) {
    // A scalar C widens to one value per output feature.
    node.setInput(2, null);
    addToBias(
      node,
      2,
      delta.map((d) => d / beta + values[0]!),
      c.dtype,
    );
    return;
  }
  if (c.dims[c.dims.length - 1] !== n) return;
  for (let i = 0; i < values.length; i++) values[i] = values[i]! + delta[i % n]! / beta;
  setConstantInput(node, 2, fromF64(c.dtype, [...c.dims], values));
}

/** MatMul has no bias: fold into the per-feature constant of an Add that is its only reader. */
function compensateMatMul(node: Node, removed: Float64Array): void {
  const b = constantInput(node, 1)!;
  const [k, n] = [b.dims[0]!, b.dims[1]!];
  const delta = featureContribution(b.toFloat64(), k, n, false, removed);
  if (!anyNonZero(delta)) return;
  const readers = node.outputs[0]!.uses();
  const add = readers.length === 1 && readers[0]!.node.opType === 'Add' ? readers[0]!.node : undefined;
  if (!add || node.outputs[0]!.isGraphOutput()) return;
  const other = 1 - readers[0]!.index;
  const c = constantInput(add, other);
  if (!c || !PRUNABLE_DTYPES.has(c.dtype) || c.elementCount !== n || c.dims[c.dims.length - 1] !== n) return;
  const values = c.toFloat64();
  for (let i = 0; i < n; i++) values[i] = values[i]! + delta[i]!;
  setConstantInput(add, other, fromF64(c.dtype, [...c.dims], values));
}

/** Gemm: Y = alpha * A' B' + beta * C. A's columns (K) are input channels, B' columns (N) output ones. */
const gemm: ChannelOpHandler = {
  analyze(node, a, ctx) {
    const b = constantInput(node, 1);
    if (!b || !PRUNABLE_DTYPES.has(b.dtype) || b.dims.length !== 2 || node.getInt('transA', 0) !== 0) return;
    const transB = node.getInt('transB', 0) !== 0;
    const kAxis = transB ? 1 : 0;
    const nAxis = 1 - kAxis;
    const xInfo = a.use(node.inputs[0]);
    if (xInfo && (xInfo.axis !== -1 || !a.resolveBlock(xInfo, b.dims[kAxis]!))) {
      a.block(xInfo, `${label(node)}: input features do not match its weight`);
    }
    const n = b.dims[nAxis]!;
    const c = node.inputs[2] ? constantInput(node, 2) : undefined;
    if (node.inputs[2]) {
      // C must be a per-feature vector ([N] or [1,N]) or a scalar; a [M,N] C pins the features.
      if (!c || !PRUNABLE_DTYPES.has(c.dtype)) return;
      const last = c.dims.length === 0 ? 1 : c.dims[c.dims.length - 1]!;
      if (elementCount(c.dims) !== last || (last !== 1 && last !== n)) return;
    }
    a.setInfo(node.outputs[0]!, a.newSpace(node, n, axisNorms(b, nAxis, ctx.criterion), -1, 2));
  },
  constants(node, k) {
    const y = k.info(node.outputs[0]);
    if (!y) return;
    const c = floatValues(node, 2);
    const beta = node.getFloat('beta', 1);
    k.set(
      node.outputs[0],
      Float64Array.from({ length: y.atoms.length }, (_, o) => (c ? beta * (c.length === 1 ? c[0]! : c[o]!) : 0)),
    );
  },
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const transB = node.getInt('transB', 0) !== 0;
    const removed = r.removedConstants(node.inputs[0]);
    if (removed) compensateGemm(node, removed);
    const cuts: { axis: number; keep: number[] }[] = [];
    if (r.changed(xInfo)) cuts.push({ axis: transB ? 1 : 0, keep: r.keptIndices(xInfo) });
    if (r.changed(yInfo)) cuts.push({ axis: transB ? 0 : 1, keep: r.keptIndices(yInfo) });
    rewriteConstant(node, 1, cuts);
    const c = node.inputs[2] ? constantInput(node, 2) : undefined;
    if (c && r.changed(yInfo) && c.dims.length > 0 && c.dims[c.dims.length - 1] === r.originalCount(yInfo) && r.originalCount(yInfo) > 1) {
      rewriteConstant(node, 2, [{ axis: c.dims.length - 1, keep: r.keptIndices(yInfo) }]);
    }
  },
};

/** MatMul with a constant 2-D right operand: hidden features behave like channels. */
const matMul: ChannelOpHandler = {
  analyze(node, a, ctx) {
    const b = constantInput(node, 1);
    if (!b || !PRUNABLE_DTYPES.has(b.dtype) || b.dims.length !== 2) return;
    const xInfo = a.use(node.inputs[0]);
    if (xInfo && (xInfo.axis !== -1 || !a.resolveBlock(xInfo, b.dims[0]!))) {
      a.block(xInfo, `${label(node)}: input features do not match its weight`);
    }
    a.setInfo(node.outputs[0]!, a.newSpace(node, b.dims[1]!, axisNorms(b, 1, ctx.criterion), -1, xInfo?.rank));
  },
  constants(node, k) {
    const y = k.info(node.outputs[0]);
    if (y) k.set(node.outputs[0], new Float64Array(y.atoms.length));
  },
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const removed = r.removedConstants(node.inputs[0]);
    if (removed) compensateMatMul(node, removed);
    const cuts: { axis: number; keep: number[] }[] = [];
    if (r.changed(xInfo)) cuts.push({ axis: 0, keep: r.keptIndices(xInfo) });
    if (r.changed(yInfo)) cuts.push({ axis: 1, keep: r.keptIndices(yInfo) });
    rewriteConstant(node, 1, cuts);
  },
};

// ---- layout -------------------------------------------------------------------------------------------

/** Output of a flatten at axis 1: channel c becomes a block of (H*W...) consecutive features. */
function flattenInfo(info: ChannelInfo): ChannelInfo {
  const alreadyFlat = info.rank === 2;
  return { axis: -1, rank: 2, atoms: info.atoms, block: alreadyFlat ? info.block : { size: undefined } };
}

const flatten: ChannelOpHandler = {
  analyze(node, a) {
    const info = a.use(node.inputs[0]);
    if (!info) return;
    const axis = node.getInt('axis', 1);
    if (info.rank === undefined || info.axis !== 1 - info.rank || (axis !== 1 && axis !== 1 - info.rank)) {
      return a.block(info, `${label(node)} does not flatten right before the channel axis`);
    }
    if (info.rank !== 2 && info.block.size !== 1) return a.block(info, `${label(node)} flattens already flattened channels`);
    a.setInfo(node.outputs[0]!, flattenInfo(info));
  },
  constants: passConstants,
};

/**
 * Reshape that flattens [N, C, ...] to [N, C*...]: handled when the target is [0,-1] (or [B,-1] /
 * [B,K] in a model whose inputs fix the batch at B), or when the
 * input's shape is known so a literal feature count can be checked (and is then rewritten).
 */
const reshape: ChannelOpHandler = {
  analyze(node, a) {
    const info = a.use(node.inputs[0]);
    if (!info) return;
    const fail = (): void => a.block(info, `${label(node)} is not a flatten of the channel axis`);
    const shapeT = constantInput(node, 1);
    if (!shapeT || shapeT.elementCount !== 2 || node.getInt('allowzero', 0) !== 0) return fail();
    if (info.rank === undefined || info.axis !== 1 - info.rank || info.block.size !== 1) return fail();
    const [d0, d1] = Array.from(shapeT.toFloat64());
    if (d0 === 0 && d1 === -1) return a.setInfo(node.outputs[0]!, flattenInfo(info));
    // [B, -1] or [B, K] in a model that fixes its batch at B (how exporters write a flatten at
    // batch 1): with dim 0 the batch, dim 1 holds everything else, so K is the feature count.
    if (d0 !== undefined && d0 === node.graph.root.fixedBatchInput()?.size) {
      if (d1 === -1) return a.setInfo(node.outputs[0]!, flattenInfo(info));
      const out = flattenInfo(info);
      if (d1 !== undefined && d1 > 0 && a.resolveBlock(out, d1)) return a.setInfo(node.outputs[0]!, out);
    }
    // A literal target needs the input's real shape to prove it flattens exactly at axis 1.
    const x = node.inputs[0]!;
    const shape = x.type && 'shape' in x.type ? x.type.shape : undefined;
    const tail = shape?.slice(1);
    if (!tail || tail.some((d) => typeof d !== 'number')) return fail();
    const features = (tail as number[]).reduce((p, q) => p * q, 1);
    if (!(d1 === -1 || d1 === features) || !(d0 === -1 || d0 === 0 || (typeof shape![0] === 'number' && d0 === shape![0]))) return fail();
    const out = flattenInfo(info);
    if (!a.resolveBlock(out, features)) return fail();
    a.setInfo(node.outputs[0]!, out);
  },
  constants: passConstants,
  apply(node, r) {
    const out = r.info(node.outputs[0]);
    if (!r.changed(out)) return;
    const shapeT = constantInput(node, 1)!;
    const dims = Array.from(shapeT.toFloat64());
    if (dims[1] === -1) return;
    const data = BigInt64Array.from([BigInt(dims[0]!), BigInt(r.keptCount(out))]);
    setConstantInput(node, 1, { dtype: shapeT.dtype, dims: [...shapeT.dims], data });
  },
};

/** Concat: along the channel axis it joins channel ranges; along another axis it ties inputs. */
const concat: ChannelOpHandler = {
  analyze(node, a) {
    const infos = node.inputs.map((v) => a.use(v));
    const carried = infos.filter((i): i is ChannelInfo => i !== undefined);
    if (carried.length === 0) return;
    const fail = (reason: string): void => carried.forEach((i) => a.block(i, reason));
    if (carried.length !== node.inputs.length) return fail(`${label(node)} joins channels with tensors of unknown channels`);
    const ref = carried[0]!;
    let axis = node.getInt('axis');
    if (axis >= 0) {
      if (ref.rank === undefined) return fail(`${label(node)}: cannot tell its axis from the channel axis`);
      axis -= ref.rank;
    }
    if (carried.some((i) => i.axis !== ref.axis)) return fail(`${label(node)} joins tensors with channels on different axes`);
    if (axis === ref.axis) {
      if (carried.some((i) => i.block.size !== 1)) return fail(`${label(node)} joins flattened channels`);
      a.setInfo(node.outputs[0]!, { axis: ref.axis, rank: ref.rank, atoms: carried.flatMap((i) => [...i.atoms]), block: UNIT_BLOCK });
      return;
    }
    for (const i of carried.slice(1)) if (!a.union(ref, i)) return fail(`${label(node)} joins tensors whose channels do not line up`);
    a.setInfo(node.outputs[0]!, { ...ref, fresh: false });
  },
  constants(node, k) {
    const out = k.info(node.outputs[0]);
    if (!out) return;
    const parts = node.inputs.map((v) => k.of(v));
    if (out.atoms.length === parts.reduce((n, p) => n + p.length, 0) && parts.length > 1) {
      const joined = new Float64Array(out.atoms.length);
      let o = 0;
      for (const p of parts) {
        joined.set(p, o);
        o += p.length;
      }
      k.set(node.outputs[0], joined);
      return;
    }
    // Joined along another axis: one constant only where every input holds the same one.
    k.set(
      node.outputs[0],
      parts[0]!.map((x, i) => (parts.every((p) => p[i] === x) ? x : NaN)),
    );
  },
};

// ---- the table ----------------------------------------------------------------------------------------

const ROWS: [string, PruneOpRow][] = [
  ['Conv', { weight: () => ({ index: 1, reductionAxis: 1 }), channels: conv }],
  ['ConvTranspose', { weight: () => ({ index: 1, reductionAxis: 0 }), channels: convTranspose }],
  [
    'Gemm',
    {
      weight: (node) => ({ index: 1, reductionAxis: node.getInt('transB', 0) !== 0 ? 1 : 0 }),
      channels: gemm,
    },
  ],
  [
    'MatMul',
    {
      weight: (node) => {
        const b = constantInput(node, 1);
        if (b) return { index: 1, reductionAxis: Math.max(0, b.dims.length - 2) };
        const a = constantInput(node, 0);
        if (a) return { index: 0, reductionAxis: a.dims.length - 1 };
        return 'no constant operand';
      },
      channels: matMul,
    },
  ],
  ['BatchNormalization', { channels: batchNormalization }],
  ['Flatten', { channels: flatten }],
  ...['ReduceMean', 'ReduceMax'].map((op): [string, PruneOpRow] => [op, { channels: spatialReduce }]),
  ['Reshape', { channels: reshape }],
  ['Concat', { channels: concat }],
  ...['Softmax', 'LogSoftmax', 'Hardmax'].map((op): [string, PruneOpRow] => [op, { channels: softmaxLike }]),
  ...['MaxPool', 'AveragePool', 'LpPool', 'GlobalAveragePool', 'GlobalMaxPool', 'GlobalLpPool'].map((op): [string, PruneOpRow] => [
    op,
    { channels: channelPreserving },
  ]),
  ...['Add', 'Sub', 'Mul', 'Div', 'Sum', 'Max', 'Min', 'Mean', 'PRelu', 'Pow'].map((op): [string, PruneOpRow] => [op, { channels: elementwiseBroadcast }]),
  ...[
    'Relu',
    'LeakyRelu',
    'Sigmoid',
    'HardSigmoid',
    'HardSwish',
    'Tanh',
    'Elu',
    'Selu',
    'Celu',
    'Gelu',
    'Mish',
    'Softplus',
    'Softsign',
    'ThresholdedRelu',
    'Erf',
    'Exp',
    'Log',
    'Abs',
    'Neg',
    'Sqrt',
    'Reciprocal',
    'Floor',
    'Ceil',
    'Round',
    'Sign',
    'Sin',
    'Cos',
    'Identity',
    'Dropout',
    'Clip',
    'Cast',
  ].map((op): [string, PruneOpRow] => [op, { channels: elementwiseUnary }]),
];

function buildTable(rows: [string, PruneOpRow][]): ReadonlyMap<string, PruneOpRow> {
  const table = new Map<string, PruneOpRow>();
  for (const [op, row] of rows) {
    if (table.has(op)) throw new Error(`prune op table: duplicate row for '${op}'`);
    table.set(op, row);
  }
  return table;
}

export const PRUNE_OPS: ReadonlyMap<string, PruneOpRow> = buildTable(ROWS);

/** The row for a node (default ONNX domain only; a custom-domain op is unknown). */
export function pruneRow(node: Node): PruneOpRow | undefined {
  if (node.domain !== '' && node.domain !== 'ai.onnx') return undefined;
  if (node.subgraphs().length > 0) return undefined;
  return PRUNE_OPS.get(node.opType);
}

export { buildTable };

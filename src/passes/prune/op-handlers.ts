/**
 * The one op-handler table of the pruning passes, keyed by op type (default ONNX domain). A row
 * says where a layer's weight is and along which axis it reduces (for magnitude and N:M pruning),
 * and how channels flow through the op (for channel pruning): which inputs carry channels, what
 * the outputs carry, which atoms it couples, and how to rewrite its tensors once channels go.
 * Ops without a row block the channels that reach them, so an unknown op never yields a wrong
 * model. Adding an op is adding a row; a duplicate key throws.
 * Imports: ./channel-analysis.js, ./weights.js, ../../ir/index.js.
 */
import { elementCount, type Node, type TensorData } from '../../ir/index.js';
import { UNIT_BLOCK, type ChannelAnalysis, type ChannelInfo, type ChannelRewrite } from './channel-analysis.js';
import { axisNorms, constantInput, PRUNABLE_DTYPES, setConstantInput, sliceAxis } from './weights.js';

/** Where a layer's weight sits and its reduction (input-channel) axis. */
export interface WeightSlot {
  index: number;
  reductionAxis: number;
}

export interface ChannelOpHandler {
  /** Propagate channel info from inputs to outputs; read inputs only through `a.use`. */
  analyze(node: Node, a: ChannelAnalysis, ctx: AnalysisContext): void;
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

// ---- element-wise -------------------------------------------------------------------------------------

/** Unary element-wise (extra inputs, e.g. Clip's min/max, are scalars and carry no channels). */
const elementwiseUnary: ChannelOpHandler = {
  analyze(node, a) {
    const info = a.use(node.inputs[0]);
    if (info) setAllOutputs(node, a, { ...info, fresh: info.fresh });
  },
};

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
      a.scale(info, Array.from(gamma, (g, i) => Math.abs(g) / Math.sqrt(Math.max(variance[i]!, 0) + eps)));
    }
    a.setInfo(node.outputs[0]!, { ...info, fresh: false });
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
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const group = node.getInt('group', 1);
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
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const cuts: { axis: number; keep: number[] }[] = [];
    if (r.changed(xInfo)) cuts.push({ axis: 0, keep: r.keptIndices(xInfo) });
    if (r.changed(yInfo)) cuts.push({ axis: 1, keep: r.keptIndices(yInfo) });
    rewriteConstant(node, 1, cuts);
    if (r.changed(yInfo) && node.inputs[2]) rewriteConstant(node, 2, [{ axis: 0, keep: r.keptIndices(yInfo) }]);
  },
};

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
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
    const transB = node.getInt('transB', 0) !== 0;
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
  apply(node, r) {
    const xInfo = r.info(node.inputs[0]);
    const yInfo = r.info(node.outputs[0]);
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
};

/**
 * Reshape that flattens [N, C, ...] to [N, C*...]: handled when the target is [0,-1], or when the
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
  ['Reshape', { channels: reshape }],
  ['Concat', { channels: concat }],
  ...['Softmax', 'LogSoftmax', 'Hardmax'].map((op): [string, PruneOpRow] => [op, { channels: softmaxLike }]),
  ...['MaxPool', 'AveragePool', 'LpPool', 'GlobalAveragePool', 'GlobalMaxPool', 'GlobalLpPool'].map((op): [string, PruneOpRow] => [op, { channels: channelPreserving }]),
  ...['Add', 'Sub', 'Mul', 'Div', 'Sum', 'Max', 'Min', 'Mean', 'PRelu', 'Pow'].map((op): [string, PruneOpRow] => [op, { channels: elementwiseBroadcast }]),
  ...[
    'Relu', 'LeakyRelu', 'Sigmoid', 'HardSigmoid', 'HardSwish', 'Tanh', 'Elu', 'Selu', 'Celu', 'Gelu', 'Mish',
    'Softplus', 'Softsign', 'ThresholdedRelu', 'Erf', 'Exp', 'Log', 'Abs', 'Neg', 'Sqrt', 'Reciprocal', 'Floor', 'Ceil',
    'Round', 'Sign', 'Sin', 'Cos', 'Identity', 'Dropout', 'Clip', 'Cast',
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

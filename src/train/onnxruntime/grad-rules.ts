/**
 * Gradient rules, one row per ONNX op type: how the op's backward pass is written in standard ONNX
 * operators (so onnxruntime runs it with its native kernels), and, for ops whose training-mode
 * forward differs from inference or must keep intermediates (BatchNormalization's batch statistics,
 * MaxPool's argmax indices), how the forward is emitted. Adding an op is adding a row; duplicate keys
 * throw. Shapes come from a probe run (`shape(name)`): dim 0 is the batch and is never baked in.
 * Imports: ../../ir, ../../errors, ./emitter.
 */
import { UsageError } from '../../errors.js';
import { DataType, type Node } from '../../ir/index.js';
import type { Emitter } from './emitter.js';

/** What a rule sees of its node in the training graph being written. */
interface RuleContext {
  node: Node;
  e: Emitter;
  /** Training-mode forward (BatchNormalization on batch statistics). */
  training: boolean;
  shape(name: string): readonly number[];
  /** Names of the node's inputs ('' for an absent optional one) and outputs in the training graph. */
  inputs: readonly string[];
  outputs: readonly string[];
}

export interface ForwardContext extends RuleContext {
  /** Records a running-statistics update (new value of a state input), returned by the graph. */
  update(state: string, value: string): void;
  /** Input slot i is a state input of the training graph (its value can be updated). */
  isState(i: number): boolean;
}

export interface BackwardContext extends RuleContext {
  /** Gradient of output i, or undefined when nothing flows back into it. */
  dy(i: number): string | undefined;
  /** Whether input i needs a gradient. */
  needs(i: number): boolean;
  /** Values the forward rule kept for the backward pass. */
  saved: Readonly<Record<string, string>>;
}

export interface GradRule {
  /**
   * Input slots no gradient flows through (indices, shapes, conditions, exponents), or 'all' for
   * ops whose outputs are integer, boolean or piecewise constant (Shape, Equal, ArgMax, Floor): a
   * path from a weight through them needs no gradient and does not block training. A function
   * decides per node (Cast to an integer type).
   */
  nonDifferentiable?: readonly number[] | 'all' | ((node: Node) => readonly number[] | 'all');
  /** Why this node cannot be differentiated (an attribute the rule does not handle); checked before anything runs. */
  unsupported?(node: Node): string | undefined;
  /** Emits the training forward (default: the node copied as is); returns values kept for backward. */
  forward?(ctx: ForwardContext): Record<string, string>;
  /** Emits the gradients of the inputs that need one (undefined where none). */
  backward(ctx: BackwardContext): (string | undefined)[];
}

const rules = new Map<string, GradRule>();

/** Adds a rule; a second rule for one op type is a programming error. */
export function registerGradRule(opType: string, rule: GradRule): void {
  if (rules.has(opType)) throw new Error(`duplicate gradient rule for op type '${opType}'`);
  rules.set(opType, rule);
}

export function gradRule(opType: string): GradRule | undefined {
  return rules.get(opType);
}

/** Whether input slot `i` of `node` carries a gradient under `rule`. */
export function differentiableSlot(rule: GradRule, node: Node, i: number): boolean {
  const nd = typeof rule.nonDifferentiable === 'function' ? rule.nonDifferentiable(node) : rule.nonDifferentiable;
  if (nd === undefined) return true;
  if (nd === 'all') return false;
  return !nd.includes(i);
}

export function gradRuleOpTypes(): string[] {
  return [...rules.keys()].sort();
}

// ---- helpers ------------------------------------------------------------------------------------

function ints(node: Node, name: string, fallback: number[]): number[] {
  return node.getInts(name, fallback);
}

export interface ConvGeometry {
  strides: number[];
  dilations: number[];
  begin: number[];
  end: number[];
  kernel: number[];
}

export function convGeometry(node: Node, xShape: readonly number[], kernel: number[]): ConvGeometry {
  const n = kernel.length;
  const strides = ints(node, 'strides', Array(n).fill(1));
  const dilations = ints(node, 'dilations', Array(n).fill(1));
  const autoPad = node.getString('auto_pad', 'NOTSET');
  let begin: number[];
  let end: number[];
  if (autoPad === 'NOTSET') {
    const pads = ints(node, 'pads', Array(2 * n).fill(0));
    begin = pads.slice(0, n);
    end = pads.slice(n);
  } else if (autoPad === 'VALID') {
    begin = Array(n).fill(0);
    end = Array(n).fill(0);
  } else {
    begin = [];
    end = [];
    for (let d = 0; d < n; d++) {
      const inSize = xShape[d + 2]!;
      const out = Math.ceil(inSize / strides[d]!);
      const total = Math.max(0, (out - 1) * strides[d]! + (kernel[d]! - 1) * dilations[d]! + 1 - inSize);
      const b = autoPad === 'SAME_LOWER' ? Math.ceil(total / 2) : Math.floor(total / 2);
      begin.push(b);
      end.push(total - b);
    }
  }
  return { strides, dilations, begin, end, kernel };
}

/** [1, 0, 2, 3, ...]: swaps the batch and channel axes. */
export function swap01(rank: number): number[] {
  return [1, 0, ...Array.from({ length: rank - 2 }, (_v, i) => i + 2)];
}

export const spatialAxes = (rank: number): number[] => [0, ...Array.from({ length: rank - 2 }, (_v, i) => i + 2)];

/** Per-channel [C] tensor reshaped to broadcast against [N, C, ...] of the given rank. */
export function channelShaped(e: Emitter, p: string, channels: number, rank: number): string {
  return e.op1('Reshape', [p, e.constI64([channels, ...Array(Math.max(0, rank - 2)).fill(1)])]);
}

// ---- rules --------------------------------------------------------------------------------------

/**
 * Conv y = conv(x, W) and ConvTranspose y = conv^T(x, W), which is the adjoint of the convolution
 * with the same W from y's space to x's. So the geometry is the convolution's (from x to y for Conv,
 * from y to x for ConvTranspose); each op's dX is the other op applied to dY with the same kernel;
 * dW is the convolution's weight gradient, with dY as its output gradient for Conv and as its
 * input for ConvTranspose (X then the output gradient); dB sums dY over all but the channel axis.
 */
function convFamilyBackward({ node, e, inputs, outputs, needs, dy, shape }: BackwardContext, transposed: boolean): (string | undefined)[] {
  const g = dy(0)!;
  const [x, w, b] = inputs as [string, string, string | undefined];
  const xShape = shape(x);
  const wShape = shape(w);
  const yShape = shape(outputs[0]!);
  const group = node.getInt('group', 1);
  const geo = convGeometry(node, transposed ? yShape : xShape, wShape.slice(2));
  const out: (string | undefined)[] = [];
  const pointwise = !transposed && isPointwise(group, geo);
  if (needs(0)) {
    if (pointwise) out[0] = pointwiseInputGrad(e, g, w, xShape, wShape);
    else if (!transposed && isDepthwiseUnitStride(group, geo, xShape, wShape)) out[0] = depthwiseInputGrad(e, g, w, group, geo);
    else out[0] = transposed ? convOfGradient(e, g, w, group, geo) : transposedConvOfGradient(e, g, w, group, geo, xShape, yShape);
  }
  if (needs(1)) {
    if (pointwise) out[1] = pointwiseWeightGrad(e, x, g, xShape, wShape);
    else out[1] = transposed ? convWeightGrad(e, g, x, group, geo, yShape, wShape, xShape) : convWeightGrad(e, x, g, group, geo, xShape, wShape, yShape);
  }
  if (b && needs(2)) out[2] = e.reduceSum(g, spatialAxes(xShape.length), false);
  return out;
}

/*
 * Fast paths (issue 32 item 2): a training step of a MobileNetV3-style student spent most of its
 * time in the general rules' weight-gradient convolutions (dY as kernels the size of the feature
 * map: im2col copies of it) and in ConvTranspose, so the two most common convolutions of those
 * students take plain kernels instead (bench/train-backends.ts, docs/distill.md):
 * - pointwise (1x1, stride 1, no pads, group 1): dX = W^T dY and dW = sum over the batch of
 *   dY X^T, as batched MatMuls over the spatial positions;
 * - depthwise with stride 1 (group = channels, one input channel per group): dX is the depthwise
 *   convolution of dY with the spatially flipped kernel and the complementary pads.
 */

/** A 1x1 convolution with stride 1, no pads and one group: a MatMul over the channels at each position. */
function isPointwise(group: number, geo: ConvGeometry): boolean {
  return group === 1 && geo.kernel.every((k) => k === 1) && geo.strides.every((st) => st === 1) && [...geo.begin, ...geo.end].every((p) => p === 0);
}

/** Depthwise (each group one input and one output channel), stride 1, pads within the dilated kernel's span. */
function isDepthwiseUnitStride(group: number, geo: ConvGeometry, xShape: readonly number[], wShape: readonly number[]): boolean {
  const span = geo.kernel.map((k, d) => (k - 1) * geo.dilations[d]!);
  return (
    group > 1 &&
    xShape[1] === group &&
    wShape[0] === group &&
    wShape[1] === 1 &&
    geo.strides.every((st) => st === 1) &&
    geo.begin.every((p, d) => p <= span[d]!) &&
    geo.end.every((p, d) => p <= span[d]!)
  );
}

/** dY [N, Cout, S...] as [N, Cout, prod S] (and X likewise). */
function flatSpatial(e: Emitter, t: string, channels: number): string {
  return e.op1('Reshape', [t, e.constI64([0, channels, -1])]);
}

/** Pointwise dX = W^T dY: [Cin, Cout] x [N, Cout, P] -> [N, Cin, P], back to X's shape. */
function pointwiseInputGrad(e: Emitter, g: string, w: string, xShape: readonly number[], wShape: readonly number[]): string {
  const [cout, cin] = [wShape[0]!, wShape[1]!];
  const wt = e.op1('Transpose', [e.op1('Reshape', [w, e.constI64([cout, cin])])], { perm: [1, 0] });
  const dx = e.op1('MatMul', [wt, flatSpatial(e, g, cout)], {}, 'conv1x1_dx');
  return e.op1('Reshape', [dx, e.constI64([0, ...xShape.slice(1)])]);
}

/**
 * Pointwise dW = sum_n dY_n X_n^T: the tensor with fewer channels is transposed ([N, P, C]), one
 * batched MatMul over the positions, the batch summed, shaped as W.
 */
function pointwiseWeightGrad(e: Emitter, x: string, g: string, xShape: readonly number[], wShape: readonly number[]): string {
  const [cout, cin] = [wShape[0]!, wShape[1]!];
  const [x3, g3] = [flatSpatial(e, x, cin), flatSpatial(e, g, cout)];
  const perBatch =
    cin <= cout
      ? e.op1('MatMul', [g3, e.op1('Transpose', [x3], { perm: [0, 2, 1] })]) // [N, Cout, Cin]
      : e.op1('Transpose', [e.op1('MatMul', [x3, e.op1('Transpose', [g3], { perm: [0, 2, 1] })])], { perm: [0, 2, 1] });
  const dw = e.reduceSum(perBatch, [0], false);
  return e.op1('Reshape', [dw, e.constI64([...wShape])], {}, 'conv1x1_dw');
}

/**
 * Depthwise stride-1 dX: the depthwise convolution of dY with the kernel flipped along every
 * spatial axis, pads (k - 1) d - p on each side (same dilations, same group).
 */
function depthwiseInputGrad(e: Emitter, g: string, w: string, group: number, geo: ConvGeometry): string {
  const n = geo.kernel.length;
  const axes = Array.from({ length: n }, (_v, d) => d + 2);
  const flipped = e.op1('Slice', [
    w,
    e.constI64(axes.map(() => -1)),
    e.constI64(geo.kernel.map((k) => -(k + 1))),
    e.constI64(axes),
    e.constI64(axes.map(() => -1)),
  ]);
  const span = geo.kernel.map((k, d) => (k - 1) * geo.dilations[d]!);
  // dx[i] = sum_k dy[i + k d - (span - begin)] w[K - 1 - k]: begin pads span - begin, end pads span - end (the size comes out H)
  const pads = [...span.map((sp, d) => sp - geo.begin[d]!), ...span.map((sp, d) => sp - geo.end[d]!)];
  return e.op1('Conv', [g, flipped], { dilations: geo.dilations, pads, kernel_shape: geo.kernel, group }, 'dwconv_dx');
}

/** Conv's dX: the transposed convolution of dY with the same kernel; output_padding restores the input size lost to the stride's rounding. */
function transposedConvOfGradient(
  e: Emitter,
  g: string,
  w: string,
  group: number,
  geo: ConvGeometry,
  xShape: readonly number[],
  yShape: readonly number[],
): string {
  const outputPadding = geo.kernel.map((k, d) => {
    const full = geo.strides[d]! * (yShape[d + 2]! - 1) + (k - 1) * geo.dilations[d]! + 1 - geo.begin[d]! - geo.end[d]!;
    return xShape[d + 2]! - full;
  });
  const attrs = { strides: geo.strides, dilations: geo.dilations, pads: [...geo.begin, ...geo.end], kernel_shape: geo.kernel, output_padding: outputPadding };
  return e.op1('ConvTranspose', [g, w], { ...attrs, ...(group !== 1 ? { group } : {}) }, 'conv_dx');
}

/** ConvTranspose's dX: the convolution of dY with the same kernel (same strides, pads, dilations, group). */
function convOfGradient(e: Emitter, g: string, w: string, group: number, geo: ConvGeometry): string {
  const attrs = { strides: geo.strides, dilations: geo.dilations, pads: [...geo.begin, ...geo.end], kernel_shape: geo.kernel };
  return e.op1('Conv', [g, w], { ...attrs, ...(group !== 1 ? { group } : {}) }, 'convt_dx');
}

registerGradRule('Conv', {
  backward: (ctx) => convFamilyBackward(ctx, false),
});

registerGradRule('ConvTranspose', {
  unsupported(node) {
    if (node.hasAttr('output_shape')) return 'output_shape is not supported (explicit pads are)';
    if (node.getString('auto_pad', 'NOTSET') !== 'NOTSET') return 'auto_pad is not supported (explicit pads are)';
    return undefined;
  },
  backward: (ctx) => convFamilyBackward(ctx, true),
});

/**
 * dW of a convolution y = conv(x, W) as one convolution over the batch: the images are X's
 * channels and the kernels dY's channels (each with the batch as its channels), strides and
 * dilations swapped; the result [Cin/g, Cout, k'...] is cut to the kernel size and transposed.
 */
function convWeightGrad(
  e: Emitter,
  x: string,
  g: string,
  group: number,
  geo: ConvGeometry,
  xShape: readonly number[],
  wShape: readonly number[],
  yShape: readonly number[],
): string {
  const rank = xShape.length;
  const [images, kernels] = group === 1 ? batchAsChannels(e, x, g, rank) : groupedBatchAsChannels(e, x, g, group, xShape, wShape, yShape);
  const pads = [...geo.begin, ...geo.end];
  let dw = e.op1('Conv', [images, kernels], { strides: geo.dilations, dilations: geo.strides, pads, ...(group !== 1 ? { group } : {}) }, 'conv_dw');
  const oversized = geo.kernel.some((k, d) => {
    const span = (yShape[d + 2]! - 1) * geo.strides[d]! + 1;
    return Math.floor((xShape[d + 2]! + geo.begin[d]! + geo.end[d]! - span) / geo.dilations[d]!) + 1 !== k;
  });
  if (oversized) {
    // the stride left trailing input positions unused: the result is larger than the kernel
    const axes = geo.kernel.map((_k, d) => d + 2);
    dw = e.op1('Slice', [dw, e.constI64(geo.kernel.map(() => 0)), e.constI64(geo.kernel), e.constI64(axes)]);
  }
  return e.op1('Transpose', [dw], { perm: swap01(rank) });
}

/** One group: X as [Cin, N, ...] images and dY as [Cout, N, ...] kernels. */
function batchAsChannels(e: Emitter, x: string, g: string, rank: number): [string, string] {
  const xt = e.op1('Transpose', [x], { perm: swap01(rank) });
  const gt = e.op1('Transpose', [g], { perm: swap01(rank) });
  return [xt, gt];
}

/**
 * Grouped (depthwise when each group has one input channel): X [N, g*ci, S...] laid out as ci
 * images of g*N channels (channel gi*N + n) and dY [N, g*co, So...] as g*co kernels of N channels,
 * so a convolution of `group` groups pairs each group's inputs with its own outputs only.
 */
function groupedBatchAsChannels(
  e: Emitter,
  x: string,
  g: string,
  group: number,
  xShape: readonly number[],
  wShape: readonly number[],
  yShape: readonly number[],
): [string, string] {
  const ci = xShape[1]! / group;
  const co = wShape[0]! / group;
  const spatialIn = xShape.slice(2);
  const spatialOut = yShape.slice(2);
  const tail = Array.from({ length: xShape.length - 2 }, (_v, i) => i + 3);
  // X -> [N, g, ci, S] -> [ci, g, N, S] -> [ci, g*N, S]
  const x5 = e.op1('Reshape', [x, e.constI64([-1, group, ci, ...spatialIn])]);
  const images = e.op1('Reshape', [e.op1('Transpose', [x5], { perm: [2, 1, 0, ...tail] }), e.constI64([ci, -1, ...spatialIn])]);
  // dY -> [N, g, co, So] -> [g, co, N, So] -> [g*co, N, So]
  const g5 = e.op1('Reshape', [g, e.constI64([-1, group, co, ...spatialOut])]);
  const kernels = e.op1('Reshape', [e.op1('Transpose', [g5], { perm: [1, 2, 0, ...tail] }), e.constI64([group * co, -1, ...spatialOut])]);
  return [images, kernels];
}

registerGradRule('Relu', {
  backward({ e, outputs, dy }) {
    const g = dy(0)!;
    const mask = e.op1('Cast', [e.op1('Greater', [outputs[0]!, e.constF([0])])], { to: e.floatType });
    return [e.op1('Mul', [g, mask], {}, 'relu_dx')];
  },
});

/**
 * Ops after which a MaxPool window holds tied maxima that the next rule does not send to zero
 * (quantized or rounded values, a Clip's bound — its backward keeps x == bound): there the argmax
 * form keeps every window's gradient on one element, as before. After Relu the ties are the zeros,
 * whose gradient Relu's rule drops whichever element gets it.
 */
const TIE_PRONE = new Set(['Clip', 'QuantizeLinear', 'DequantizeLinear', 'Round', 'Floor', 'Ceil', 'Sign', 'Max', 'Min', 'MaxPool', 'Cast']);

/**
 * Window of a MaxPool whose backward can go without an argmax: 2-D, windows that tile the input
 * exactly (kernel == strides, no padding or dilation, sizes divisible), no indices output asked for,
 * an input computed by an op that does not make ties (TIE_PRONE; a graph input may hold quantized
 * pixels). Then dX is dY spread over each window's maxima (x == the pooled value), split equally
 * between ties: eight ops over NCHW tensors and no MaxPool-with-indices / ScatterElements, which
 * took a quarter of the CTC stand-in's step (bench/train-step-profile.ts, issue 32 item 2).
 */
function tiledPoolWindow(node: Node, outputs: readonly string[], xShape: readonly number[]): [number, number] | undefined {
  const kernel = node.getInts('kernel_shape', []);
  if (xShape.length !== 4 || kernel.length !== 2 || (outputs[1] ?? '') !== '') return undefined;
  const [kh, kw] = kernel as [number, number];
  const strides = node.getInts('strides', [1, 1]);
  const pads = node.getInts('pads', [0, 0, 0, 0]);
  const dilations = node.getInts('dilations', [1, 1]);
  const autoPad = node.getString('auto_pad', 'NOTSET');
  if (strides[0] !== kh || strides[1] !== kw || pads.some((p) => p !== 0) || dilations.some((d) => d !== 1)) return undefined;
  if (autoPad !== 'NOTSET' && autoPad !== 'VALID') return undefined;
  if (xShape[2]! % kh !== 0 || xShape[3]! % kw !== 0) return undefined;
  const producer = node.inputs[0]?.producer;
  if (!producer || TIE_PRONE.has(producer.opType)) return undefined;
  return [kh, kw];
}

registerGradRule('MaxPool', {
  forward({ node, e, inputs, outputs, shape }): Record<string, string> {
    if (node.getInt('storage_order', 0) !== 0) throw new UsageError(`node '${node.name}' (MaxPool): storage_order=1 is not supported for training`);
    const attrs: Record<string, import('../../ir/index.js').Attribute> = Object.create(null) as Record<string, import('../../ir/index.js').Attribute>; // keyed by attribute names
    for (const [k, a] of node.attributes) attrs[k] = a;
    if (tiledPoolWindow(node, outputs, shape(inputs[0]!))) {
      e.op('MaxPool', [inputs[0]!], attrs, [outputs[0]!]);
      return {};
    }
    const indices = outputs[1] && outputs[1] !== '' ? outputs[1] : e.fresh(`${outputs[0]}_argmax`);
    e.op('MaxPool', [inputs[0]!], attrs, [outputs[0]!, indices]);
    return { indices };
  },
  backward({ e, inputs, outputs, dy, saved, shape }) {
    const g = dy(0)!;
    const x = inputs[0]!;
    if (!saved.indices) {
      // all in NCHW, no broadcasting (onnxruntime's broadcast over 2-element inner dims was slower
      // than the argmax form): pooled values and dY upsampled to the input's size (nearest, exact
      // integer factors), each window's count of maxima from an AveragePool of the mask
      const [, c, h, w] = shape(x) as [number, number, number, number];
      const [kh, kw] = [h / shape(outputs[0]!)[2]!, w / shape(outputs[0]!)[3]!];
      // onnxruntime has no double Resize / AveragePool kernel: float64 graphs (finite-difference tests) work in 6-D instead
      const up = (t: string): string =>
        e.floatType === DataType.DOUBLE
          ? e.op1('Reshape', [
              e.op1('Expand', [e.op1('Reshape', [t, e.constI64([-1, c, h / kh, 1, w / kw, 1])]), e.constI64([1, 1, 1, kh, 1, kw])]),
              e.constI64([-1, c, h, w]),
            ])
          : e.op1('Resize', [t, '', e.constF([1, 1, kh, kw], [4])], { mode: 'nearest', coordinate_transformation_mode: 'asymmetric', nearest_mode: 'floor' });
      const mask = e.op1('Cast', [e.op1('Equal', [x, up(outputs[0]!)])], { to: e.floatType });
      const share =
        e.floatType === DataType.DOUBLE // nor AveragePool
          ? e.op1('Reshape', [
              e.op1('ReduceSum', [e.op1('Reshape', [mask, e.constI64([-1, c, h / kh, kh, w / kw, kw])]), e.constI64([3, 5])]),
              e.constI64([-1, c, h / kh, w / kw]),
            ])
          : e.op1('Mul', [e.constF([kh * kw]), e.op1('AveragePool', [mask], { kernel_shape: [kh, kw], strides: [kh, kw] })]);
      return [e.op1('Mul', [mask, up(e.op1('Div', [g, share]))], {}, 'maxpool_dx')];
    }
    // Each output's gradient goes to the input element that was the maximum (indices over the
    // flattened NCHW input); ScatterElements with reduction 'add' sums overlapping windows.
    const flat = e.constI64([-1]);
    const zeros = e.op1('Reshape', [e.zerosLike(x), flat]);
    const scattered = e.op1(
      'ScatterElements',
      [zeros, e.op1('Reshape', [saved.indices!, flat]), e.op1('Reshape', [g, flat])],
      { axis: 0, reduction: 'add' },
      'maxpool_dx',
    );
    return [e.reshapeLike(scattered, x)];
  },
});

function binaryRule(kind: 'Add' | 'Sub' | 'Mul' | 'Div'): GradRule {
  return {
    backward({ e, inputs, outputs, needs, dy, shape }) {
      const g = dy(0)!;
      const [a, b] = inputs as [string, string];
      const yShape = shape(outputs[0]!);
      const out: (string | undefined)[] = [];
      if (needs(0)) {
        let ga = g;
        if (kind === 'Mul') ga = e.op1('Mul', [g, b]);
        if (kind === 'Div') ga = e.op1('Div', [g, b]);
        out[0] = e.unbroadcast(ga, yShape, shape(a), a);
      }
      if (needs(1)) {
        let gb: string;
        if (kind === 'Add') gb = g;
        else if (kind === 'Sub') gb = e.op1('Neg', [g]);
        else if (kind === 'Mul') gb = e.op1('Mul', [g, a]);
        else gb = e.op1('Neg', [e.op1('Div', [e.op1('Mul', [g, outputs[0]!]), b])]);
        out[1] = e.unbroadcast(gb, yShape, shape(b), b);
      }
      return out;
    },
  };
}
registerGradRule('Add', binaryRule('Add'));
registerGradRule('Sub', binaryRule('Sub'));
registerGradRule('Mul', binaryRule('Mul'));
registerGradRule('Div', binaryRule('Div'));

registerGradRule('GlobalAveragePool', {
  backward({ e, inputs, dy, shape }) {
    const x = inputs[0]!;
    const spatial = shape(x)
      .slice(2)
      .reduce((p, d) => p * d, 1);
    const spread = e.op1('Expand', [dy(0)!, e.op1('Shape', [x])]);
    return [e.op1('Div', [spread, e.constF([spatial])], {}, 'gap_dx')];
  },
});

/** Ops that only move elements without changing their order: the gradient is reshaped back. */
function reshapeRule(): GradRule {
  return { nonDifferentiable: [1], backward: ({ e, inputs, dy }) => [e.reshapeLike(dy(0)!, inputs[0]!)] };
}
registerGradRule('Flatten', reshapeRule());
registerGradRule('Reshape', reshapeRule());
registerGradRule('Squeeze', reshapeRule());
registerGradRule('Unsqueeze', reshapeRule());
registerGradRule('Identity', { backward: ({ dy }) => [dy(0)] });

registerGradRule('Gemm', {
  backward({ node, e, inputs, outputs, needs, dy, shape }) {
    const g = dy(0)!;
    const [a, b, c] = inputs as [string, string, string | undefined];
    const alpha = node.getFloat('alpha', 1);
    const beta = node.getFloat('beta', 1);
    const tA = node.getInt('transA', 0);
    const tB = node.getInt('transB', 0);
    const out: (string | undefined)[] = [];
    // Y = alpha op(A) op(B) + beta C
    if (needs(0)) {
      out[0] =
        tA === 0
          ? e.op1('Gemm', [g, b], { alpha, transA: 0, transB: tB === 0 ? 1 : 0 }, 'gemm_da')
          : e.op1('Gemm', [b, g], { alpha, transA: tB, transB: 1 }, 'gemm_da');
    }
    if (needs(1)) {
      out[1] =
        tB === 0
          ? e.op1('Gemm', [a, g], { alpha, transA: tA === 0 ? 1 : 0, transB: 0 }, 'gemm_db')
          : e.op1('Gemm', [g, a], { alpha, transA: 1, transB: tA }, 'gemm_db');
    }
    if (c && c !== '' && needs(2)) {
      const scaled = beta === 1 ? g : e.op1('Mul', [g, e.constF([beta])]);
      out[2] = e.unbroadcast(scaled, shape(outputs[0]!), shape(c), c);
    }
    return out;
  },
});

registerGradRule('MatMul', {
  backward({ e, inputs, outputs, needs, dy, shape }) {
    const g = dy(0)!;
    const [a, b] = inputs as [string, string];
    const aShape = shape(a);
    const bShape = shape(b);
    const out: (string | undefined)[] = [];
    if (aShape.length >= 2 && bShape.length === 2) {
      // [..., K] x [K, N]: dB as one Gemm over the flattened leading dims
      if (needs(0)) out[0] = e.op1('MatMul', [g, e.op1('Transpose', [b], { perm: [1, 0] })], {}, 'matmul_da');
      if (needs(1)) {
        const k = aShape[aShape.length - 1]!;
        const n = bShape[1]!;
        const a2 = e.op1('Reshape', [a, e.constI64([-1, k])]);
        const g2 = e.op1('Reshape', [g, e.constI64([-1, n])]);
        out[1] = e.op1('Gemm', [a2, g2], { transA: 1 }, 'matmul_db');
      }
      return out;
    }
    // Batched (attention) products with broadcasting; rank-1 operands are promoted to matrices as
    // the operator does ([K] -> [1, K] on the left, [K, 1] on the right), the result reshaped back.
    const a2 = aShape.length === 1 ? e.op1('Unsqueeze', [a, e.constI64([0])]) : a;
    const b2 = bShape.length === 1 ? e.op1('Unsqueeze', [b, e.constI64([1])]) : b;
    const aS = aShape.length === 1 ? [1, aShape[0]!] : aShape;
    const bS = bShape.length === 1 ? [bShape[0]!, 1] : bShape;
    const rank = Math.max(aS.length, bS.length);
    const yS = shape(outputs[0]!);
    const fullY = [...broadcastBatch(aS.slice(0, -2), bS.slice(0, -2)), aS[aS.length - 2]!, bS[bS.length - 1]!];
    let g2 = g;
    if (aShape.length === 1 || bShape.length === 1 || yS.length !== fullY.length)
      g2 = e.op1('Reshape', [g, e.constI64(fullY.map((d, i) => (i === 0 && rank > 2 ? -1 : d)))]);
    const swapLast = (r: number): number[] => [...Array.from({ length: r - 2 }, (_v, i) => i), r - 1, r - 2];
    if (needs(0)) {
      const ga = e.op1('MatMul', [g2, e.op1('Transpose', [b2], { perm: swapLast(bS.length) })], {}, 'matmul_da');
      out[0] = e.unbroadcast(ga, fullY.slice(0, -1).concat(aS[aS.length - 1]!), aS, a);
    }
    if (needs(1)) {
      const gb = e.op1('MatMul', [e.op1('Transpose', [a2], { perm: swapLast(aS.length) }), g2], {}, 'matmul_db');
      out[1] = e.unbroadcast(gb, [...fullY.slice(0, -2), bS[bS.length - 2]!, fullY[fullY.length - 1]!], bS, b);
    }
    return out;
  },
});

/** Broadcast of two batch shapes (numpy rules). */
function broadcastBatch(a: readonly number[], b: readonly number[]): number[] {
  const r = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < r; i++) {
    const x = a[i - (r - a.length)] ?? 1;
    const y = b[i - (r - b.length)] ?? 1;
    out.push(x === 1 ? y : x);
  }
  return out;
}

registerGradRule('BatchNormalization', {
  forward({ node, e, training, inputs, outputs, shape, update, isState }): Record<string, string> {
    const [x, scale, bias, mean, variance] = inputs as [string, string, string, string, string];
    const xShape = shape(x);
    const rank = xShape.length;
    const channels = xShape[1] ?? 1;
    const eps = node.getFloat('epsilon', 1e-5);
    const ps = (p: string): string => channelShaped(e, p, channels, rank);
    if (!training) {
      // inference form: y = x * a + b, a = scale / sqrt(var + eps), b = bias - mean * a
      const inv = e.op1('Reciprocal', [e.op1('Sqrt', [e.op1('Add', [variance, e.constF([eps])])])]);
      const a = e.op1('Mul', [scale, inv]);
      const xc = e.op1('Sub', [x, ps(mean)]);
      const xhat = e.op1('Mul', [xc, ps(inv)]);
      e.op('Add', [e.op1('Mul', [xhat, ps(scale)]), ps(bias)], {}, [outputs[0]!]);
      return { xhat, a };
    }
    const axes = spatialAxes(rank);
    const mu = e.reduceMean(x, axes, true);
    const xc = e.op1('Sub', [x, mu]);
    const v = e.reduceMean(e.op1('Mul', [xc, xc]), axes, true);
    const inv = e.op1('Reciprocal', [e.op1('Sqrt', [e.op1('Add', [v, e.constF([eps])])])], {}, 'bn_inv_std');
    const xhat = e.op1('Mul', [xc, inv], {}, 'bn_xhat');
    e.op('Add', [e.op1('Mul', [xhat, ps(scale)]), ps(bias)], {}, [outputs[0]!]);
    // running statistics: momentum x old + (1 - momentum) x batch (biased variance, as the tfjs path)
    const momentum = node.getFloat('momentum', 0.9);
    const flat = e.constI64([channels]);
    if (isState(3))
      update(mean, e.op1('Add', [e.op1('Mul', [mean, e.constF([momentum])]), e.op1('Mul', [e.op1('Reshape', [mu, flat]), e.constF([1 - momentum])])]));
    if (isState(4))
      update(variance, e.op1('Add', [e.op1('Mul', [variance, e.constF([momentum])]), e.op1('Mul', [e.op1('Reshape', [v, flat]), e.constF([1 - momentum])])]));
    return { xhat, inv };
  },
  backward({ e, training, inputs, needs, dy, shape, saved }) {
    const g = dy(0)!;
    const [x, scale] = inputs as [string, string];
    const xShape = shape(x);
    const rank = xShape.length;
    const channels = xShape[1] ?? 1;
    const axes = spatialAxes(rank);
    const xhat = saved.xhat!;
    const out: (string | undefined)[] = [];
    if (needs(2)) out[2] = e.reduceSum(g, axes, false);
    if (needs(1)) out[1] = e.reduceSum(e.op1('Mul', [g, xhat]), axes, false);
    if (needs(0)) {
      if (!training) {
        out[0] = e.op1('Mul', [g, channelShaped(e, saved.a!, channels, rank)], {}, 'bn_dx');
      } else {
        // dx = inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * scale
        const dxhat = e.op1('Mul', [g, channelShaped(e, scale, channels, rank)]);
        const m1 = e.reduceMean(dxhat, axes, true);
        const m2 = e.reduceMean(e.op1('Mul', [dxhat, xhat]), axes, true);
        const inner = e.op1('Sub', [e.op1('Sub', [dxhat, m1]), e.op1('Mul', [xhat, m2])]);
        out[0] = e.op1('Mul', [inner, saved.inv!], {}, 'bn_dx');
      }
    }
    return out;
  },
});

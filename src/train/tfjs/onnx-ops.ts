/**
 * The training interpreter's op table: one row per ONNX op type (default domain), each a forward
 * implementation in @tensorflow/tfjs-core ops whose gradients are registered (./gradients.ts), so
 * every row can be trained through. Adding an op is adding a row; a duplicate row throws.
 *
 * Which input slots hold weights and running statistics is ../parameters.ts's table (shared with the
 * onnxruntime backend). Convolutions and pools run in NHWC (tfjs's layout) and
 * leave their result in NHWC; element-wise ops keep whichever layout they are given (see
 * ./onnx-graph.ts). Shapes and axes follow the ONNX operator spec for opsets 7 to 22.
 *
 * Imports: @tensorflow/tfjs-core, ../../ir (types), ../../errors, ../../ir/tensor-math (broadcastShape).
 */
import * as tf from '@tensorflow/tfjs-core';
import { UsageError } from '../../errors.js';
import { DataType } from '../../ir/dtype.js';
import type { Node } from '../../ir/index.js';
import { broadcastShape } from '../../ir/tensor-math.js';

/** A value during the forward pass, in ONNX layout, NHWC (rank-4 only), or both. */
export interface ValueEntry {
  onnx?: tf.Tensor;
  nhwc?: tf.Tensor;
}

export interface OpContext {
  node: Node;
  opset: number;
  training: boolean;
  /** Keep BatchNormalization in inference form even in training mode. */
  freezeNorm?: boolean;
  /** Per-node, per-step seed for random ops (Dropout). */
  seed: number;
  inputCount: number;
  has(i: number): boolean;
  entry(i: number): ValueEntry | undefined;
  /** Input i in ONNX layout (undefined when absent or empty). */
  input(i: number): tf.Tensor | undefined;
  required(i: number): tf.Tensor;
  /** Rank-4 input i in NHWC. */
  nhwc(i: number): tf.Tensor;
  /** Static numeric values of input i (constants are read from the model, computed ones are downloaded). */
  ints(i: number): number[] | undefined;
  /** Name of the variable behind input i, when it is one. */
  variableName(i: number): string | undefined;
  /** A new value for a non-trainable variable (running statistics), applied after the step. */
  update(name: string, value: tf.Tensor): void;
  set(i: number, t: tf.Tensor, layout?: 'onnx' | 'nhwc'): void;
  setEntry(i: number, e: ValueEntry): void;
  outputUsed(i: number): boolean;
}

export interface OpRow {
  /** Which inputs are trained is not the row's business: ../parameters.ts names them for every backend. */
  run(ctx: OpContext): void;
}

/** Largest float32, used as "minus infinity" padding for max-pooling without inf * 0 = NaN. */
const FLOAT32_LOWEST = -3.4028234663852886e38;

// ---- helpers ------------------------------------------------------------------------------------

function normAxis(axis: number, rank: number, node: Node): number {
  const a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) throw new UsageError(`axis ${axis} is out of range for rank ${rank}`);
  void node;
  return a;
}

/** Shape of an entry in ONNX layout without transposing. */
function onnxShape(e: ValueEntry): number[] {
  if (e.onnx) return e.onnx.shape;
  const [n, h, w, c] = e.nhwc!.shape;
  return [n!, c!, h!, w!];
}

const prod = (xs: readonly number[]): number => xs.reduce((a, b) => a * b, 1);

function range(n: number): number[] {
  return Array.from({ length: n }, (_v, i) => i);
}

interface Geometry {
  strides: number[];
  dilations: number[];
  begin: number[];
  end: number[];
}

/** Strides, dilations and explicit pads of a conv or pool, resolving auto_pad against the input size. */
function geometry(node: Node, spatialIn: number[], kernel: number[]): Geometry {
  const n = spatialIn.length;
  const strides = node.getInts('strides', Array(n).fill(1));
  const dilations = node.getInts('dilations', Array(n).fill(1));
  const autoPad = node.getString('auto_pad', 'NOTSET');
  let begin: number[];
  let end: number[];
  if (autoPad === 'NOTSET') {
    const pads = node.getInts('pads', Array(2 * n).fill(0));
    begin = pads.slice(0, n);
    end = pads.slice(n, 2 * n);
  } else if (autoPad === 'VALID') {
    begin = Array(n).fill(0);
    end = Array(n).fill(0);
  } else if (autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
    begin = [];
    end = [];
    for (let d = 0; d < n; d++) {
      const out = Math.ceil(spatialIn[d]! / strides[d]!);
      const total = Math.max(0, (out - 1) * strides[d]! + (kernel[d]! - 1) * dilations[d]! + 1 - spatialIn[d]!);
      const b = autoPad === 'SAME_LOWER' ? Math.ceil(total / 2) : Math.floor(total / 2);
      begin.push(b);
      end.push(total - b);
    }
  } else throw new UsageError(`auto_pad '${autoPad}' is not supported`);
  return { strides, dilations, begin, end };
}

/** Pads the spatial axes of an NHWC tensor. */
function padNhwc(x: tf.Tensor, begin: number[], end: number[], value: number): tf.Tensor {
  if (begin.every((b) => b === 0) && end.every((e) => e === 0)) return x;
  return tf.pad(
    x,
    [
      [0, 0],
      [begin[0]!, end[0]!],
      [begin[1]!, end[1]!],
      [0, 0],
    ],
    value,
  );
}

/** Inserts (d - 1) zeros between kernel taps along the two spatial axes of an [kh, kw, ci, co] filter. */
function dilateKernel(f: tf.Tensor, dh: number, dw: number): tf.Tensor {
  let k = f;
  const [kh, kw, ci, co] = k.shape as [number, number, number, number];
  if (dh > 1 && kh > 1) {
    k = tf.reshape(k, [kh, 1, kw * ci * co]);
    k = tf.pad(k, [
      [0, 0],
      [0, dh - 1],
      [0, 0],
    ]);
    k = tf.reshape(k, [kh * dh, kw, ci, co]);
    k = tf.slice(k, [0, 0, 0, 0], [(kh - 1) * dh + 1, kw, ci, co]);
  }
  const kh2 = k.shape[0]!;
  if (dw > 1 && kw > 1) {
    k = tf.reshape(k, [kh2, kw, 1, ci * co]);
    k = tf.pad(k, [
      [0, 0],
      [0, 0],
      [0, dw - 1],
      [0, 0],
    ]);
    k = tf.reshape(k, [kh2, kw * dw, ci, co]);
    k = tf.slice(k, [0, 0, 0, 0], [kh2, (kw - 1) * dw + 1, ci, co]);
  }
  return k;
}

/**
 * A 1-D or 2-D spatial input as NHWC (1-D gets H = 1), with a function turning an NHWC result
 * back into the op's output (NHWC for 2-D, ONNX layout for 1-D).
 */
function spatialInput(ctx: OpContext, op: string): { x: tf.Tensor4D; spatial: number[]; finish: (y: tf.Tensor) => void } {
  const e = ctx.entry(0);
  if (!e) throw new UsageError('input 0 is missing');
  const shape = onnxShape(e);
  if (shape.length === 4) {
    return { x: ctx.nhwc(0) as tf.Tensor4D, spatial: shape.slice(2), finish: (y) => ctx.set(0, y, 'nhwc') };
  }
  if (shape.length === 3) {
    const x = tf.transpose(tf.expandDims(ctx.required(0), 2), [0, 2, 3, 1]) as tf.Tensor4D;
    return {
      x,
      spatial: [1, shape[2]!],
      finish: (y) => ctx.set(0, tf.squeeze(tf.transpose(y, [0, 3, 1, 2]), [2])),
    };
  }
  throw new UsageError(`${op}: only 1-D and 2-D inputs ([N, C, L] or [N, C, H, W]) are supported, got rank ${shape.length}`);
}

/** Per-axis 2-D attributes for a 1-D op: H gets kernel 1, stride 1, no pads. */
function as2d(values: number[], fill: number, is1d: boolean): number[] {
  return is1d ? [fill, ...values] : values;
}

// ---- convolution --------------------------------------------------------------------------------

function conv(ctx: OpContext): void {
  const { node } = ctx;
  const w = ctx.required(1);
  const { x, spatial, finish } = spatialInput(ctx, 'Conv');
  const is1d = w.rank === 3;
  const kernel = as2d(w.shape.slice(2), 1, is1d);
  const g = geometry(node, is1d ? [spatial[1]!] : spatial, w.shape.slice(2));
  const strides = as2d(g.strides, 1, is1d);
  const dilations = as2d(g.dilations, 1, is1d);
  const begin = as2d(g.begin, 0, is1d);
  const end = as2d(g.end, 0, is1d);
  const group = node.getInt('group', 1);
  const w4 = is1d ? tf.expandDims(w, 2) : w;
  let filter = tf.transpose(w4, [2, 3, 1, 0]); // [kh, kw, ci/g, co]
  filter = dilateKernel(filter, dilations[0]!, dilations[1]!);
  void kernel;
  // Equal pads on all sides go to the conv kernel itself (no padded copy of the input to make and
  // slice the gradient back out of); anything else is padded explicitly.
  // (tfjs sizes a numeric-pad output from the kernel height and stride height alone, so only for
  // square kernels and equal strides.)
  const uniform = begin.every((b) => b === begin[0]) && end.every((e) => e === begin[0]) && filter.shape[0] === filter.shape[1] && strides[0] === strides[1];
  const pad: number | 'valid' = uniform && begin[0]! > 0 ? begin[0]! : 'valid';
  const xp = (uniform ? x : padNhwc(x, begin, end, 0)) as tf.Tensor4D;
  const ci = x.shape[3];
  const co = w.shape[0]!;
  const s: [number, number] = [strides[0]!, strides[1]!];
  let y: tf.Tensor;
  if (group === 1) {
    y = tf.conv2d(xp, filter as tf.Tensor4D, s, pad);
  } else if (group === ci && w.shape[1] === 1) {
    // Depthwise: output channel c * multiplier + m reads input channel c, as in tfjs.
    const [kh, kw] = filter.shape as [number, number];
    y = tf.depthwiseConv2d(xp, tf.reshape(filter, [kh, kw, ci, co / ci]) as tf.Tensor4D, s, pad);
  } else {
    if (ci % group !== 0 || co % group !== 0) throw new UsageError(`group ${group} does not divide ${ci} input and ${co} output channels`);
    const xs = tf.split(xp, group, 3);
    const fs = tf.split(filter, group, 3);
    y = tf.concat(
      xs.map((xi, i) => tf.conv2d(xi as tf.Tensor4D, fs[i] as tf.Tensor4D, s, pad)),
      3,
    );
  }
  const b = ctx.input(2);
  if (b) y = tf.add(y, b);
  finish(y);
}

function convTranspose(ctx: OpContext): void {
  const { node } = ctx;
  const w = ctx.required(1); // [ci, co/g, kh, kw]
  const { x, spatial, finish } = spatialInput(ctx, 'ConvTranspose');
  const is1d = w.rank === 3;
  const group = node.getInt('group', 1);
  const n = is1d ? 1 : 2;
  const inSp = is1d ? [spatial[1]!] : spatial;
  const k = w.shape.slice(2);
  const strides = node.getInts('strides', Array(n).fill(1));
  const dilations = node.getInts('dilations', Array(n).fill(1));
  const outputPadding = node.getInts('output_padding', Array(n).fill(0));
  const autoPad = node.getString('auto_pad', 'NOTSET');
  const full = inSp.map((d, i) => (d - 1) * strides[i]! + (k[i]! - 1) * dilations[i]! + 1);
  let begin: number[];
  let outSize: number[];
  const explicitShape = node.hasAttr('output_shape') ? node.getInts('output_shape') : undefined;
  if (explicitShape || autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
    const target = explicitShape ? explicitShape.slice(-n) : inSp.map((d, i) => d * strides[i]!);
    begin = target.map((t, i) => {
      const total = full[i]! + outputPadding[i]! - t;
      return autoPad === 'SAME_UPPER' ? Math.floor(total / 2) : total - Math.floor(total / 2);
    });
    outSize = target;
  } else {
    const pads = autoPad === 'VALID' ? Array(2 * n).fill(0) : node.getInts('pads', Array(2 * n).fill(0));
    begin = pads.slice(0, n);
    outSize = full.map((f, i) => f + outputPadding[i]! - pads[i]! - pads[n + i]!);
  }
  const w4 = is1d ? tf.expandDims(w, 2) : w;
  const d2 = as2d(dilations, 1, is1d);
  let filter = dilateKernel(tf.transpose(w4, [2, 3, 1, 0]), d2[0]!, d2[1]!); // [kh, kw, co/g, ci]
  const s2 = as2d(strides, 1, is1d) as [number, number];
  const full2 = as2d(full, 1, is1d);
  const batch = x.shape[0];
  const convT = (xi: tf.Tensor, fi: tf.Tensor): tf.Tensor =>
    tf.conv2dTranspose(xi as tf.Tensor4D, fi as tf.Tensor4D, [batch, full2[0]!, full2[1]!, fi.shape[2]!], s2, 'valid');
  let y: tf.Tensor;
  if (group === 1) y = convT(x, filter);
  else {
    const xs = tf.split(x, group, 3);
    const fs = tf.split(filter, group, 3);
    y = tf.concat(
      xs.map((xi, i) => convT(xi, fs[i]!)),
      3,
    );
  }
  filter = filter as tf.Tensor;
  // Crop the pads, or extend with zeros where output_padding / output_shape reach past the full result.
  const b2 = as2d(begin, 0, is1d);
  const o2 = as2d(outSize, 1, is1d);
  const extend = [0, 1].map((i) => Math.max(0, b2[i]! + o2[i]! - full2[i]!));
  const lead = [0, 1].map((i) => Math.max(0, -b2[i]!));
  if (extend.some((e) => e > 0) || lead.some((l) => l > 0)) {
    y = tf.pad(y, [
      [0, 0],
      [lead[0]!, extend[0]!],
      [lead[1]!, extend[1]!],
      [0, 0],
    ]);
  }
  y = tf.slice(y, [0, Math.max(0, b2[0]!), Math.max(0, b2[1]!), 0], [batch, o2[0]!, o2[1]!, y.shape[3]!]);
  const b = ctx.input(2);
  if (b) y = tf.add(y, b);
  finish(y);
}

// ---- pooling ------------------------------------------------------------------------------------

/**
 * Max pooling whose gradient is right on the wasm backend: tfjs-backend-wasm's MaxPoolGrad routes
 * the gradient wrongly when a window holds only negative values (checked against the cpu backend),
 * so the backward pass runs it on a shifted copy (x - min(x) + 1, padded with 0) where every value
 * is positive and the arg-max positions are those of x. The forward result is the exact max.
 */
function wasmSafeMaxPool(x: tf.Tensor, begin: number[], end: number[], kernel: [number, number], strides: [number, number]): tf.Tensor {
  const f = tf.customGrad(((...args: unknown[]) => {
    const input = args[0] as tf.Tensor;
    const save = args[1] as (ts: tf.Tensor[]) => void;
    save([input]);
    return {
      value: tf.maxPool(padNhwc(input, begin, end, FLOAT32_LOWEST) as tf.Tensor4D, kernel, strides, 'valid'),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const xin = saved[0]!;
        const shifted = padNhwc(tf.add(tf.sub(xin, tf.min(xin)), 1), begin, end, 0) as tf.Tensor4D;
        const pooled = tf.maxPool(shifted, kernel, strides, 'valid');
        const grad = tf
          .engine()
          .runKernel('MaxPoolGrad', { dy, input: shifted, output: pooled }, { filterSize: kernel, strides, pad: 'valid' } as never) as tf.Tensor;
        return [tf.slice(grad, [0, begin[0]!, begin[1]!, 0], xin.shape)];
      },
    };
  }) as Parameters<typeof tf.customGrad>[0]);
  return f(x);
}

function pool(ctx: OpContext, kind: 'max' | 'avg'): void {
  const { node } = ctx;
  if (kind === 'max' && ctx.outputUsed(1)) throw new UsageError('the Indices output of MaxPool is not supported');
  const { x, spatial, finish } = spatialInput(ctx, node.opType);
  const is1d = node.getInts('kernel_shape').length === 1;
  const kernelRaw = node.getInts('kernel_shape');
  const g = geometry(node, is1d ? [spatial[1]!] : spatial, kernelRaw);
  if (g.dilations.some((d) => d !== 1)) throw new UsageError('dilated pooling is not supported');
  const kernel = as2d(kernelRaw, 1, is1d);
  const strides = as2d(g.strides, 1, is1d);
  const begin = as2d(g.begin, 0, is1d);
  const end = as2d(g.end, 0, is1d);
  const ceil = node.getInt('ceil_mode', 0) === 1;
  const out = spatial.map((d, i) => {
    const span = d + begin[i]! + end[i]! - kernel[i]!;
    let o = (ceil ? Math.ceil(span / strides[i]!) : Math.floor(span / strides[i]!)) + 1;
    // A window may not start in the end padding (onnxruntime and PyTorch agree on this rule).
    if (ceil && (o - 1) * strides[i]! >= d + begin[i]!) o--;
    return o;
  });
  const extra = spatial.map((d, i) => Math.max(0, (out[i]! - 1) * strides[i]! + kernel[i]! - (d + begin[i]! + end[i]!)));
  const endAll = end.map((e, i) => e + extra[i]!);
  const k2: [number, number] = [kernel[0]!, kernel[1]!];
  const s2: [number, number] = [strides[0]!, strides[1]!];
  let y: tf.Tensor;
  if (kind === 'max')
    y =
      tf.getBackend() === 'wasm'
        ? wasmSafeMaxPool(x, begin, endAll, k2, s2)
        : tf.maxPool(padNhwc(x, begin, endAll, FLOAT32_LOWEST) as tf.Tensor4D, k2, s2, 'valid');
  else y = tf.avgPool(padNhwc(x, begin, endAll, 0) as tf.Tensor4D, k2, s2, 'valid');
  if (kind === 'avg' && (begin.some((b) => b > 0) || endAll.some((e) => e > 0))) {
    const includePad = node.getInt('count_include_pad', 0) === 1;
    // Divide by the number of taps inside the counted region instead of the kernel size.
    const counts = [0, 1].map((axis) =>
      range(out[axis]!).map((o) => {
        const lo = o * strides[axis]! - begin[axis]!;
        const hi = lo + kernel[axis]!;
        const regionLo = includePad ? -begin[axis]! : 0;
        const regionHi = includePad ? spatial[axis]! + end[axis]! : spatial[axis]!;
        return Math.max(0, Math.min(hi, regionHi) - Math.max(lo, regionLo));
      }),
    );
    const factor = new Float32Array(out[0]! * out[1]!);
    const area = kernel[0]! * kernel[1]!;
    for (let i = 0; i < out[0]!; i++) for (let j = 0; j < out[1]!; j++) factor[i * out[1]! + j] = area / Math.max(1, counts[0]![i]! * counts[1]![j]!);
    y = tf.mul(y, tf.tensor(factor, [1, out[0]!, out[1]!, 1]));
  }
  finish(y);
}

function globalPool(ctx: OpContext, kind: 'max' | 'avg'): void {
  const e = ctx.entry(0)!;
  const reduce = kind === 'avg' ? tf.mean : tf.max;
  if (onnxShape(e).length === 4 && e.nhwc) {
    ctx.set(0, reduce(e.nhwc, [1, 2], true), 'nhwc');
    return;
  }
  const x = ctx.required(0);
  ctx.set(0, reduce(x, range(x.rank).slice(2), true));
}

// ---- normalization ------------------------------------------------------------------------------

/**
 * Per-channel mean and population variance of a channels-last tensor as ones[1, M] x X[M, C]
 * products: on the wasm backend these run ~15x faster than tf.moments's reductions.
 */
export function channelMoments(x: tf.Tensor): { mean: tf.Tensor; variance: tf.Tensor } {
  const channels = x.shape[x.rank - 1]!;
  const rows = x.size / channels;
  const flat = tf.reshape(x, [rows, channels]);
  const average = tf.fill([1, rows], 1 / rows);
  const mean = tf.matMul(average, flat);
  const variance = tf.matMul(average, tf.square(tf.sub(flat, mean)));
  return { mean: tf.reshape(mean, [channels]), variance: tf.reshape(variance, [channels]) };
}

function batchNormalization(ctx: OpContext): void {
  const { node } = ctx;
  const e = ctx.entry(0)!;
  const shape = onnxShape(e);
  const nhwc = shape.length === 4 && !!e.nhwc;
  const x = nhwc ? e.nhwc! : ctx.required(0);
  const channels = shape[1] ?? 1;
  const paramShape = nhwc ? [channels] : [channels, ...Array(Math.max(0, shape.length - 2)).fill(1)];
  const p = (i: number): tf.Tensor => tf.reshape(ctx.required(i), paramShape);
  const eps = node.getFloat('epsilon', 1e-5);
  const training = ctx.training && !ctx.freezeNorm;
  let y: tf.Tensor;
  if (training) {
    const { mean, variance } =
      nhwc || shape.length === 2
        ? channelMoments(x)
        : tf.moments(
            x,
            range(shape.length).filter((a) => a !== 1),
          );
    const normalized = tf.mul(tf.sub(x, tf.reshape(mean, paramShape)), tf.rsqrt(tf.add(tf.reshape(variance, paramShape), eps)));
    y = tf.add(tf.mul(normalized, p(1)), p(2));
    const momentum = node.getFloat('momentum', 0.9);
    const meanName = ctx.variableName(3);
    const varName = ctx.variableName(4);
    if (meanName) ctx.update(meanName, tf.add(tf.mul(ctx.required(3), momentum), tf.mul(mean, 1 - momentum)));
    if (varName) ctx.update(varName, tf.add(tf.mul(ctx.required(4), momentum), tf.mul(variance, 1 - momentum)));
  } else {
    // Two big element-wise ops instead of four: y = x * a + b with per-channel a and b.
    const a = tf.mul(p(1), tf.rsqrt(tf.add(p(4), eps)));
    const b = tf.sub(p(2), tf.mul(p(3), a));
    y = tf.add(tf.mul(x, a), b);
  }
  ctx.set(0, y, nhwc ? 'nhwc' : 'onnx');
}

function layerNormalization(ctx: OpContext): void {
  const { node } = ctx;
  const x = ctx.required(0);
  const axis = normAxis(node.getInt('axis', -1), x.rank, node);
  const axes = range(x.rank).slice(axis);
  const eps = node.getFloat('epsilon', 1e-5);
  const { mean, variance } = tf.moments(x, axes, true);
  const invStd = tf.rsqrt(tf.add(variance, eps));
  let y = tf.mul(tf.mul(tf.sub(x, mean), invStd), ctx.required(1));
  const b = ctx.input(2);
  if (b) y = tf.add(y, b);
  ctx.set(0, y);
  if (ctx.outputUsed(1)) ctx.set(1, mean);
  if (ctx.outputUsed(2)) ctx.set(2, invStd);
}

// ---- element-wise -------------------------------------------------------------------------------

/** Applies fn in whichever layout the input already has (NHWC preferred when that is all there is). */
function unary(fn: (x: tf.Tensor, ctx: OpContext) => tf.Tensor): OpRow {
  return {
    run(ctx) {
      const e = ctx.entry(0);
      if (!e) throw new UsageError('input 0 is missing');
      if (e.nhwc && !e.onnx) ctx.set(0, fn(e.nhwc, ctx), 'nhwc');
      else ctx.set(0, fn(ctx.required(0), ctx));
    },
  };
}

/**
 * Element-wise binary op with numpy broadcasting. When the result is rank 4 and an operand is only
 * available in NHWC, the others are brought to NHWC (small ones by a cheap reshape + transpose).
 */
function binary(fn: (a: tf.Tensor, b: tf.Tensor, ctx: OpContext) => tf.Tensor): OpRow {
  return {
    run(ctx) {
      const ea = ctx.entry(0);
      const eb = ctx.entry(1);
      if (!ea || !eb) throw new UsageError('an input is missing');
      const sa = onnxShape(ea);
      const sb = onnxShape(eb);
      const out = broadcastShape(sa, sb);
      const nhwcOnly = (e: ValueEntry) => !!e.nhwc && !e.onnx;
      if (out.length === 4 && (nhwcOnly(ea) || nhwcOnly(eb))) {
        const toNhwc = (e: ValueEntry, s: number[], i: number): tf.Tensor => {
          if (s.length === 4) return ctx.nhwc(i);
          const t = tf.reshape(ctx.required(i), [...Array(4 - s.length).fill(1), ...s]);
          return tf.transpose(t, [0, 2, 3, 1]);
        };
        ctx.set(0, fn(toNhwc(ea, sa, 0), toNhwc(eb, sb, 1), ctx), 'nhwc');
        return;
      }
      ctx.set(0, fn(ctx.required(0), ctx.required(1), ctx));
    },
  };
}

function staticScalar(ctx: OpContext, i: number): number | undefined {
  const v = ctx.ints(i);
  return v && v.length > 0 ? v[0] : undefined;
}

function clip(ctx: OpContext): void {
  const { node } = ctx;
  let min: number;
  let max: number;
  if (ctx.opset < 11) {
    min = node.getFloat('min', FLOAT32_LOWEST);
    max = node.getFloat('max', -FLOAT32_LOWEST);
  } else {
    min = staticScalar(ctx, 1) ?? FLOAT32_LOWEST;
    max = staticScalar(ctx, 2) ?? -FLOAT32_LOWEST;
  }
  min = Math.max(min, FLOAT32_LOWEST);
  max = Math.min(max, -FLOAT32_LOWEST);
  unary((x) => tf.clipByValue(x, min, max)).run(ctx);
}

function gelu(x: tf.Tensor, approximate: string): tf.Tensor {
  if (approximate === 'tanh') {
    const inner = tf.mul(tf.add(x, tf.mul(tf.pow(x, 3), 0.044715)), Math.sqrt(2 / Math.PI));
    return tf.mul(tf.mul(x, 0.5), tf.add(tf.tanh(inner), 1));
  }
  return tf.mul(tf.mul(x, 0.5), tf.add(tf.erf(tf.mul(x, Math.SQRT1_2)), 1));
}

function dropout(ctx: OpContext): void {
  const { node } = ctx;
  const e = ctx.entry(0)!;
  const ratio = ctx.opset < 12 ? node.getFloat('ratio', 0.5) : (staticScalar(ctx, 1) ?? 0.5);
  if (!ctx.training || ratio === 0) {
    ctx.setEntry(0, e);
    if (ctx.outputUsed(1)) ctx.set(1, tf.cast(tf.onesLike(ctx.required(0)), 'bool'));
    return;
  }
  const x = ctx.required(0);
  const keep = tf.greaterEqual(tf.randomUniform(x.shape, 0, 1, 'float32', ctx.seed), ratio);
  ctx.set(0, tf.mul(x, tf.mul(tf.cast(keep, 'float32'), 1 / (1 - ratio))));
  if (ctx.outputUsed(1)) ctx.set(1, keep);
}

// ---- softmax family -----------------------------------------------------------------------------

function softmaxLike(fn: (x: tf.Tensor) => tf.Tensor): OpRow {
  return {
    run(ctx) {
      const x = ctx.required(0);
      const axis = normAxis(ctx.node.getInt('axis', ctx.opset >= 13 ? -1 : 1), x.rank, ctx.node);
      if (ctx.opset < 13) {
        // Before opset 13 the input is coerced to 2-D at `axis`.
        const y = fn(tf.reshape(x, [prod(x.shape.slice(0, axis)), prod(x.shape.slice(axis))]));
        ctx.set(0, tf.reshape(y, x.shape));
      } else if (axis === x.rank - 1) {
        ctx.set(0, fn(x));
      } else {
        const perm = range(x.rank);
        perm[axis] = x.rank - 1;
        perm[x.rank - 1] = axis;
        ctx.set(0, tf.transpose(fn(tf.transpose(x, perm)), perm));
      }
    },
  };
}

// ---- matrix products ----------------------------------------------------------------------------

function gemm(ctx: OpContext): void {
  const { node } = ctx;
  const a = ctx.required(0);
  const b = ctx.required(1);
  let y = tf.matMul(a as tf.Tensor2D, b as tf.Tensor2D, node.getInt('transA', 0) === 1, node.getInt('transB', 0) === 1);
  const alpha = node.getFloat('alpha', 1);
  if (alpha !== 1) y = tf.mul(y, alpha);
  const c = ctx.input(2);
  if (c) {
    const beta = node.getFloat('beta', 1);
    y = tf.add(y, beta === 1 ? c : tf.mul(c, beta));
  }
  ctx.set(0, y);
}

function matMul(ctx: OpContext): void {
  let a = ctx.required(0);
  let b = ctx.required(1);
  const aVec = a.rank === 1;
  const bVec = b.rank === 1;
  if (aVec) a = tf.expandDims(a, 0);
  if (bVec) b = tf.expandDims(b, 1);
  let y: tf.Tensor;
  if (b.rank === 2) {
    // [..., M, K] x [K, N] as one 2-D product: no broadcast batch dims for the gradient to reduce.
    const lead = a.shape.slice(0, -1);
    y = tf.reshape(tf.matMul(tf.reshape(a, [-1, a.shape[a.rank - 1]!]) as tf.Tensor2D, b as tf.Tensor2D), [...lead, b.shape[1]!]);
  } else {
    const batch = broadcastShape(a.shape.slice(0, -2), b.shape.slice(0, -2));
    const full = (t: tf.Tensor): tf.Tensor => {
      const target = [...batch, ...t.shape.slice(-2)];
      return t.shape.length === target.length && t.shape.every((d, i) => d === target[i]) ? t : tf.broadcastTo(t, target);
    };
    y = tf.matMul(full(a), full(b));
  }
  if (aVec) y = tf.squeeze(y, [y.rank - 2]);
  if (bVec) y = tf.squeeze(y, [y.rank - 1]);
  ctx.set(0, y);
}

// ---- shape and data movement --------------------------------------------------------------------

function axesInput(ctx: OpContext, attrUntil: number): number[] | undefined {
  if (ctx.opset < attrUntil) return ctx.node.hasAttr('axes') ? ctx.node.getInts('axes') : undefined;
  return ctx.ints(1);
}

function reshape(ctx: OpContext): void {
  const x = ctx.required(0);
  const shape = ctx.opset < 5 ? ctx.node.getInts('shape') : ctx.ints(1);
  if (!shape) throw new UsageError('Reshape needs a shape');
  const allowZero = ctx.node.getInt('allowzero', 0) === 1;
  ctx.set(
    0,
    tf.reshape(
      x,
      shape.map((d, i) => (d === 0 && !allowZero ? x.shape[i]! : d)),
    ),
  );
}

function flatten(ctx: OpContext): void {
  const x = ctx.required(0);
  const axis = ctx.node.getInt('axis', 1);
  const a = axis < 0 ? axis + x.rank : axis;
  ctx.set(0, tf.reshape(x, [prod(x.shape.slice(0, a)), prod(x.shape.slice(a))]));
}

function transpose(ctx: OpContext): void {
  const x = ctx.required(0);
  const perm = ctx.node.getInts('perm', range(x.rank).reverse());
  ctx.set(0, tf.transpose(x, perm));
}

function concat(ctx: OpContext): void {
  const entries = range(ctx.inputCount)
    .map((i) => ctx.entry(i))
    .filter((e): e is ValueEntry => !!e);
  const shape0 = onnxShape(entries[0]!);
  const axis = normAxis(ctx.node.getInt('axis'), shape0.length, ctx.node);
  if (shape0.length === 4 && axis === 1 && entries.every((e) => e.nhwc)) {
    ctx.set(
      0,
      tf.concat(
        entries.map((e) => e.nhwc!),
        3,
      ),
      'nhwc',
    );
    return;
  }
  const parts = range(ctx.inputCount)
    .filter((i) => ctx.has(i))
    .map((i) => ctx.required(i));
  const nonEmpty = parts.filter((p) => p.size > 0);
  ctx.set(0, nonEmpty.length === 1 ? nonEmpty[0]! : tf.concat(nonEmpty.length > 0 ? nonEmpty : parts, axis));
}

function squeeze(ctx: OpContext): void {
  const x = ctx.required(0);
  const axes = axesInput(ctx, 13);
  ctx.set(
    0,
    tf.squeeze(
      x,
      axes?.map((a) => normAxis(a, x.rank, ctx.node)),
    ),
  );
}

function unsqueeze(ctx: OpContext): void {
  const x = ctx.required(0);
  const axes = axesInput(ctx, 13);
  if (!axes) throw new UsageError('Unsqueeze needs axes');
  const outRank = x.rank + axes.length;
  const norm = axes.map((a) => normAxis(a, outRank, ctx.node)).sort((p, q) => p - q);
  const shape = [...x.shape];
  for (const a of norm) shape.splice(a, 0, 1);
  ctx.set(0, tf.reshape(x, shape));
}

/** Pads (or crops, for negative amounts) one axis. */
function padAxis(x: tf.Tensor, axis: number, before: number, after: number, mode: string, value: number): tf.Tensor {
  let t = x;
  if (before < 0 || after < 0) {
    const begin = Array(t.rank).fill(0);
    const size = [...t.shape];
    begin[axis] = Math.max(0, -before);
    size[axis] = t.shape[axis]! - Math.max(0, -before) - Math.max(0, -after);
    t = tf.slice(t, begin, size);
  }
  const b = Math.max(0, before);
  const a = Math.max(0, after);
  if (b === 0 && a === 0) return t;
  if (mode === 'constant') {
    const pads = range(t.rank).map((i) => (i === axis ? [b, a] : [0, 0]) as [number, number]);
    return tf.pad(t, pads, value);
  }
  const n = t.shape[axis]!;
  const sliceAt = (i: number): tf.Tensor => {
    const begin = Array(t.rank).fill(0);
    const size = [...t.shape];
    begin[axis] = i;
    size[axis] = 1;
    return tf.slice(t, begin, size);
  };
  let left: tf.Tensor[];
  let right: tf.Tensor[];
  if (mode === 'edge') {
    left = Array(b)
      .fill(0)
      .map(() => sliceAt(0));
    right = Array(a)
      .fill(0)
      .map(() => sliceAt(n - 1));
  } else if (mode === 'reflect') {
    if (b >= n || a >= n) throw new UsageError(`reflect padding of ${Math.max(a, b)} needs an axis longer than ${n}`);
    left = range(b).map((k) => sliceAt(b - k));
    right = range(a).map((k) => sliceAt(n - 2 - k));
  } else throw new UsageError(`Pad mode '${mode}' is not supported`);
  return tf.concat([...left, t, ...right], axis);
}

function pad(ctx: OpContext): void {
  const { node } = ctx;
  const e = ctx.entry(0)!;
  const shape = onnxShape(e);
  const rank = shape.length;
  const mode = node.getString('mode', 'constant');
  let pads: number[];
  let value = 0;
  let axes = range(rank);
  if (ctx.opset < 11) {
    pads = node.getInts(ctx.opset < 2 ? 'paddings' : 'pads');
    value = node.getFloat('value', 0);
  } else {
    pads = ctx.ints(1) ?? [];
    value = staticScalar(ctx, 2) ?? 0;
    const a = ctx.ints(3);
    if (a) axes = a.map((x) => normAxis(x, rank, node));
  }
  const k = axes.length;
  const before = Array(rank).fill(0);
  const after = Array(rank).fill(0);
  axes.forEach((a, i) => {
    before[a] = pads[i] ?? 0;
    after[a] = pads[k + i] ?? 0;
  });
  if (rank === 4 && e.nhwc && !e.onnx) {
    const perm = [0, 2, 3, 1];
    let t = e.nhwc;
    perm.forEach((src, dst) => (t = padAxis(t, dst, before[src]!, after[src]!, mode, value)));
    ctx.set(0, t, 'nhwc');
    return;
  }
  let t = ctx.required(0);
  for (let a = 0; a < rank; a++) t = padAxis(t, a, before[a]!, after[a]!, mode, value);
  ctx.set(0, t);
}

function reduce(fn: typeof tf.mean, axesFromInputSince: number): OpRow {
  return {
    run(ctx) {
      const x = ctx.required(0);
      const keep = ctx.node.getInt('keepdims', 1) === 1;
      let axes = axesInput(ctx, axesFromInputSince);
      if (!axes || axes.length === 0) {
        if (ctx.node.getInt('noop_with_empty_axes', 0) === 1) {
          ctx.set(0, x);
          return;
        }
        axes = range(x.rank);
      }
      ctx.set(
        0,
        fn(
          x,
          axes.map((a) => normAxis(a, x.rank, ctx.node)),
          keep,
        ),
      );
    },
  };
}

function slice(ctx: OpContext): void {
  const x = ctx.required(0);
  let starts: number[];
  let ends: number[];
  let axes: number[] | undefined;
  let steps: number[] | undefined;
  if (ctx.opset < 10) {
    starts = ctx.node.getInts('starts');
    ends = ctx.node.getInts('ends');
    axes = ctx.node.hasAttr('axes') ? ctx.node.getInts('axes') : undefined;
  } else {
    starts = ctx.ints(1) ?? [];
    ends = ctx.ints(2) ?? [];
    axes = ctx.ints(3);
    steps = ctx.ints(4);
  }
  if (steps?.some((s) => s !== 1)) throw new UsageError('Slice with steps other than 1 is not supported');
  const begin = Array(x.rank).fill(0);
  const size = [...x.shape];
  (axes ?? range(starts.length)).forEach((axisRaw, i) => {
    const a = normAxis(axisRaw, x.rank, ctx.node);
    const dim = x.shape[a]!;
    const clampIndex = (v: number): number => Math.min(dim, Math.max(0, v < 0 ? v + dim : v));
    const s = clampIndex(starts[i]!);
    const e = clampIndex(ends[i]!);
    begin[a] = s;
    size[a] = Math.max(0, e - s);
  });
  ctx.set(0, tf.slice(x, begin, size));
}

function split(ctx: OpContext): void {
  const { node } = ctx;
  const x = ctx.required(0);
  const axis = normAxis(node.getInt('axis', 0), x.rank, node);
  const outputs = node.outputs.length;
  let sizes: number[] | undefined = ctx.opset < 13 ? (node.hasAttr('split') ? node.getInts('split') : undefined) : ctx.ints(1);
  if (!sizes) {
    const dim = x.shape[axis]!;
    const chunk = Math.ceil(dim / outputs);
    sizes = range(outputs).map((i) => Math.max(0, Math.min(chunk, dim - i * chunk)));
  }
  tf.split(x, sizes, axis).forEach((t, i) => ctx.set(i, t));
}

function gather(ctx: OpContext): void {
  const x = ctx.required(0);
  const axis = normAxis(ctx.node.getInt('axis', 0), x.rank, ctx.node);
  const indicesTensor = ctx.required(1);
  const dim = x.shape[axis]!;
  const values = ctx.ints(1)!.map((i) => (i < 0 ? i + dim : i));
  const indices = tf.tensor(Int32Array.from(values), indicesTensor.shape, 'int32');
  ctx.set(0, tf.gather(x, indices, axis));
}

function shapeOp(ctx: OpContext): void {
  const shape = onnxShape(ctx.entry(0)!);
  const start = ctx.node.getInt('start', 0);
  const end = ctx.node.hasAttr('end') ? ctx.node.getInt('end') : shape.length;
  const s = shape.slice(start < 0 ? start + shape.length : start, end < 0 ? end + shape.length : end);
  ctx.set(0, tf.tensor(Int32Array.from(s), [s.length], 'int32'));
}

function cast(ctx: OpContext): void {
  const to = ctx.node.getInt('to');
  const x = ctx.required(0);
  const float = to === DataType.FLOAT || to === DataType.DOUBLE || to === DataType.FLOAT16 || to === DataType.BFLOAT16;
  ctx.set(0, tf.cast(x, float ? 'float32' : to === DataType.BOOL ? 'bool' : 'int32'));
}

// ---- the table ----------------------------------------------------------------------------------

const ROWS: ReadonlyArray<readonly [string, OpRow]> = [
  ['Conv', { run: conv }],
  ['ConvTranspose', { run: convTranspose }],
  ['Gemm', { run: gemm }],
  ['MatMul', { run: matMul }],
  ['Add', binary((a, b) => tf.add(a, b))],
  ['Sub', binary((a, b) => tf.sub(a, b))],
  ['Mul', binary((a, b) => tf.mul(a, b))],
  ['Div', binary((a, b) => (a.dtype === 'int32' && b.dtype === 'int32' ? tf.floorDiv(a, b) : tf.div(a, b)))],
  ['Pow', { run: (ctx) => ctx.set(0, tf.pow(ctx.required(0), ctx.required(1))) }],
  ['Relu', unary((x) => tf.relu(x))],
  ['LeakyRelu', unary((x, ctx) => tf.leakyRelu(x, ctx.node.getFloat('alpha', 0.01)))],
  ['Sigmoid', unary((x) => tf.sigmoid(x))],
  ['Tanh', unary((x) => tf.tanh(x))],
  ['HardSigmoid', unary((x, ctx) => tf.clipByValue(tf.add(tf.mul(x, ctx.node.getFloat('alpha', 0.2)), ctx.node.getFloat('beta', 0.5)), 0, 1))],
  ['HardSwish', unary((x) => tf.mul(x, tf.clipByValue(tf.add(tf.mul(x, 1 / 6), 0.5), 0, 1)))],
  ['Clip', { run: clip }],
  ['Erf', unary((x) => tf.erf(x))],
  ['Gelu', unary((x, ctx) => gelu(x, ctx.node.getString('approximate', 'none')))],
  ['Sqrt', unary((x) => tf.sqrt(x))],
  ['Exp', unary((x) => tf.exp(x))],
  ['Log', unary((x) => tf.log(x))],
  ['Neg', unary((x) => tf.neg(x))],
  ['Abs', unary((x) => tf.abs(x))],
  ['Reciprocal', unary((x) => tf.reciprocal(x))],
  ['Softmax', softmaxLike((x) => tf.softmax(x))],
  ['LogSoftmax', softmaxLike((x) => tf.logSoftmax(x))],
  ['BatchNormalization', { run: batchNormalization }],
  ['LayerNormalization', { run: layerNormalization }],
  ['MaxPool', { run: (ctx) => pool(ctx, 'max') }],
  ['AveragePool', { run: (ctx) => pool(ctx, 'avg') }],
  ['GlobalAveragePool', { run: (ctx) => globalPool(ctx, 'avg') }],
  ['GlobalMaxPool', { run: (ctx) => globalPool(ctx, 'max') }],
  ['Flatten', { run: flatten }],
  ['Reshape', { run: reshape }],
  ['Transpose', { run: transpose }],
  ['Concat', { run: concat }],
  ['Identity', { run: (ctx) => ctx.setEntry(0, ctx.entry(0)!) }],
  ['Dropout', { run: dropout }],
  ['Squeeze', { run: squeeze }],
  ['Unsqueeze', { run: unsqueeze }],
  ['Pad', { run: pad }],
  ['ReduceMean', reduce(tf.mean, 18)],
  ['ReduceSum', reduce(tf.sum, 13)],
  ['Slice', { run: slice }],
  ['Split', { run: split }],
  ['Gather', { run: gather }],
  ['Shape', { run: shapeOp }],
  ['Cast', { run: cast }],
  // Constant outputs are read straight from the model (graph.constantTensor); nothing to run.
  ['Constant', { run: () => undefined }],
];

function buildTable(rows: ReadonlyArray<readonly [string, OpRow]>): ReadonlyMap<string, OpRow> {
  const table = new Map<string, OpRow>();
  for (const [op, row] of rows) {
    if (table.has(op)) throw new Error(`duplicate training op row '${op}'`);
    table.set(op, row);
  }
  return table;
}

const TABLE = buildTable(ROWS);

/** Op types the training interpreter supports. */
export const TRAINABLE_OP_TYPES: readonly string[] = [...TABLE.keys()];

export function opHandler(opType: string): OpRow | undefined {
  return TABLE.get(opType);
}

/** Exposed for tests of the registry's duplicate check. */
export const _buildTable = buildTable;

/**
 * Backward kernels that @tensorflow/tfjs-backend-wasm does not ship, registered for the 'wasm'
 * backend and composed from its existing forward kernels (StridedSlice, BatchMatMul, Multiply, Sum,
 * DepthwiseConv2dNative, PadV2, OneHot, ...), so the heavy arithmetic still runs in XNNPACK:
 *   Conv2DBackpropFilter                 a forward conv of x (batch as channels) with dy as the filter
 *   Conv2DBackpropInput                  replaces the native one (a slow scalar loop): forward conv of
 *                                        the dilated dy with the flipped filter
 *   DepthwiseConv2dNativeBackpropFilter  per tap: sum over N,H,W of x-tap * dy
 *   DepthwiseConv2dNativeBackpropInput   depthwise conv of the zero-dilated dy with the flipped filter
 *   UnsortedSegmentSum                   one-hot(segmentIds)^T * x (gradient of gather)
 * Every kernel is checked against the CPU backend in test/train/tfjs/wasm-gradients.test.ts.
 *
 * Imports: @tensorflow/tfjs-core only (the wasm backend is reached through the kernel registry).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelBackend, NamedAttrMap, TensorInfo } from '@tensorflow/tfjs-core';

interface DisposingBackend extends KernelBackend {
  disposeData(dataId: object, force?: boolean): boolean;
}

/** Runs registered wasm kernels directly, tracking intermediates so they can be freed together. */
class KernelScope {
  private readonly temps: TensorInfo[] = [];
  constructor(private readonly backend: DisposingBackend) {}

  run(name: string, inputs: Record<string, TensorInfo> | TensorInfo[], attrs: Record<string, unknown> = {}): TensorInfo {
    const kernel = tf.getKernel(name, 'wasm');
    if (!kernel) throw new Error(`wasm backend has no ${name} kernel`);
    const out = kernel.kernelFunc({ inputs: inputs as never, backend: this.backend, attrs: attrs as NamedAttrMap });
    if (Array.isArray(out)) throw new Error(`${name}: expected one output`);
    this.temps.push(out);
    return out;
  }

  reshape(x: TensorInfo, shape: number[]): TensorInfo {
    return this.run('Reshape', { x }, { shape });
  }

  /** Slices (negative amounts) or zero-pads (positive amounts) each axis at both ends. */
  padOrSlice(x: TensorInfo, amounts: Array<[number, number]>): TensorInfo {
    let cur = x;
    if (amounts.some(([a, b]) => a < 0 || b < 0)) {
      const begin = amounts.map(([a]) => Math.max(0, -a));
      const end = amounts.map(([, b], i) => cur.shape[i]! - Math.max(0, -b));
      cur = this.run(
        'StridedSlice',
        { x: cur },
        stridedAttrs(
          begin,
          end,
          begin.map(() => 1),
        ),
      );
    }
    if (amounts.some(([a, b]) => a > 0 || b > 0)) {
      cur = this.run('PadV2', { x: cur }, { paddings: amounts.map(([a, b]) => [Math.max(0, a), Math.max(0, b)]), constantValue: 0 });
    }
    return cur;
  }

  /** Hands `result` to the engine and frees every other intermediate. */
  finish(result: TensorInfo): TensorInfo {
    for (const t of this.temps) if (t !== result) this.backend.disposeData(t.dataId);
    return result;
  }
}

function stridedAttrs(begin: number[], end: number[], strides: number[]): Record<string, unknown> {
  return { begin, end, strides, beginMask: 0, endMask: 0, ellipsisMask: 0, newAxisMask: 0, shrinkAxisMask: 0 };
}

function requireNhwc(kernel: string, dataFormat: unknown): void {
  if (dataFormat != null && dataFormat !== 'NHWC' && dataFormat !== 'channelsLast') {
    throw new Error(`${kernel} on wasm supports NHWC only, got ${String(dataFormat)}`);
  }
}

/** Attributes of the conv backward kernels (tfjs kernel_names.ts). */
interface ConvAttrs {
  strides: number | [number, number];
  pad: 'valid' | 'same' | number | tf.backend_util.ExplicitPadding;
  dilations?: number | [number, number];
  dimRoundingMode?: 'floor' | 'round' | 'ceil';
  dataFormat?: string;
  filterShape?: [number, number, number, number];
  inputShape?: [number, number, number, number];
}

type KernelImpl = (args: { inputs: Record<string, TensorInfo>; backend: DisposingBackend; attrs: NamedAttrMap }) => TensorInfo;

type ConvInfo = ReturnType<typeof tf.backend_util.computeConv2DInfo>;

/** Strided view of the (padded) input under filter tap (kh, kw): shape [N, outH, outW, C]. */
function tapSlice(scope: KernelScope, xPadded: TensorInfo, info: ConvInfo, kh: number, kw: number): TensorInfo {
  const [n, , , c] = xPadded.shape as [number, number, number, number];
  const h0 = kh * info.dilationHeight;
  const w0 = kw * info.dilationWidth;
  return scope.run(
    'StridedSlice',
    { x: xPadded },
    stridedAttrs(
      [0, h0, w0, 0],
      [n, h0 + (info.outHeight - 1) * info.strideHeight + 1, w0 + (info.outWidth - 1) * info.strideWidth + 1, c],
      [1, info.strideHeight, info.strideWidth, 1],
    ),
  );
}

function padInput(scope: KernelScope, x: TensorInfo, info: ConvInfo): TensorInfo {
  const p = info.padInfo;
  return scope.padOrSlice(x, [
    [0, 0],
    [p.top, p.bottom],
    [p.left, p.right],
    [0, 0],
  ]);
}

function conv2DBackpropFilter(args: { inputs: Record<string, TensorInfo>; backend: DisposingBackend; attrs: NamedAttrMap }): TensorInfo {
  const { x, dy } = args.inputs as { x: TensorInfo; dy: TensorInfo };
  const attrs = args.attrs as unknown as ConvAttrs;
  requireNhwc('Conv2DBackpropFilter', attrs.dataFormat);
  const filterShape = attrs.filterShape!;
  const info = convInfo(x.shape, filterShape, attrs, false);
  const scope = new KernelScope(args.backend);
  // dW[kh,kw,ci,co] = sum over n,oh,ow of xPadded[n, oh*s+kh, ow*s+kw, ci] * dy[n,oh,ow,co]: a forward
  // convolution with the batch as channels, the input channels as batch, and dy as a large filter
  // dilated by the stride. One XNNPACK convolution instead of a tap-by-tap loop.
  const used = (k: number, out: number, stride: number) => k + (out - 1) * stride;
  const xPadded = padInput(scope, x, info);
  const cropped = scope.padOrSlice(xPadded, [
    [0, 0],
    [0, used(info.filterHeight, info.outHeight, info.strideHeight) - xPadded.shape[1]!],
    [0, used(info.filterWidth, info.outWidth, info.strideWidth) - xPadded.shape[2]!],
    [0, 0],
  ]);
  const xT = scope.run('Transpose', { x: cropped }, { perm: [3, 1, 2, 0] }); // [Cin, H, W, N]
  const dyT = scope.run('Transpose', { x: dy }, { perm: [1, 2, 0, 3] }); // [OH, OW, N, Cout]
  const conv = scope.run(
    'Conv2D',
    { x: xT, filter: dyT },
    {
      strides: [1, 1],
      pad: 'valid',
      dataFormat: 'NHWC',
      dilations: [info.strideHeight, info.strideWidth],
    },
  ); // [Cin, KH, KW, Cout]
  return scope.finish(scope.run('Transpose', { x: conv }, { perm: [1, 2, 0, 3] }));
}

/**
 * dx of a convolution: a stride-1 'valid' convolution of the zero-dilated, re-framed dy with the
 * spatially flipped filter. `filter` is [KH, KW, C, 1] (depthwise) or [KH, KW, Cout, Cin] (dense).
 */
function transposedConv(scope: KernelScope, dy: TensorInfo, filter: TensorInfo, inputShape: number[], info: ConvInfo, depthwise: boolean): TensorInfo {
  const [n, h, w] = inputShape as [number, number, number, number];
  const [kh, kw] = filter.shape as [number, number];
  const { outHeight: oh, outWidth: ow, strideHeight: sh, strideWidth: sw } = info;
  const channels = dy.shape[3]!;
  let dilated = dy;
  if (sh > 1 || sw > 1) {
    // [N,OH,1,OW,1,C] padded to [N,OH,sh,OW,sw,C]; trailing zeros are trimmed by padOrSlice below
    const six = scope.reshape(dy, [n, oh, 1, ow, 1, channels]);
    const padded = scope.run(
      'PadV2',
      { x: six },
      {
        paddings: [
          [0, 0],
          [0, 0],
          [0, sh - 1],
          [0, 0],
          [0, sw - 1],
          [0, 0],
        ],
        constantValue: 0,
      },
    );
    dilated = scope.reshape(padded, [n, oh * sh, ow * sw, channels]);
  }
  const top = kh - 1 - info.padInfo.top;
  const left = kw - 1 - info.padInfo.left;
  const bottom = h + kh - 1 - top - dilated.shape[1]!;
  const right = w + kw - 1 - left - dilated.shape[2]!;
  const framed = scope.padOrSlice(dilated, [
    [0, 0],
    [top, bottom],
    [left, right],
    [0, 0],
  ]);
  const kernel = depthwise ? 'DepthwiseConv2dNative' : 'Conv2D';
  return scope.run(kernel, { x: framed, filter }, { strides: [1, 1], pad: 'valid', dilations: [1, 1], dataFormat: 'NHWC' });
}

let nativeConv2DBackpropInput: KernelImpl | undefined;

function conv2DBackpropInput(args: { inputs: Record<string, TensorInfo>; backend: DisposingBackend; attrs: NamedAttrMap }): TensorInfo {
  const { dy, filter } = args.inputs as { dy: TensorInfo; filter: TensorInfo };
  const attrs = args.attrs as unknown as ConvAttrs;
  if (attrs.dataFormat != null && attrs.dataFormat !== 'NHWC' && nativeConv2DBackpropInput) return nativeConv2DBackpropInput(args);
  const inputShape = attrs.inputShape!;
  const info = convInfo(inputShape, filter.shape, attrs, false);
  const scope = new KernelScope(args.backend);
  const flipped = scope.run('Reverse', { x: filter }, { dims: [0, 1] });
  const swapped = scope.run('Transpose', { x: flipped }, { perm: [0, 1, 3, 2] }); // [KH, KW, Cout, Cin]
  return scope.finish(transposedConv(scope, dy, swapped, inputShape, info, false));
}

/**
 * The NHWC geometry of a convolution of `attrs`: depthwise with its dilations, or dense with none
 * (Conv2DBackpropFilter/Input carry no dilations: tfjs differentiates dense convolutions of dilation 1 only).
 */
function convInfo(xShape: readonly number[], filterShape: readonly number[], attrs: ConvAttrs, depthwise: boolean): ConvInfo {
  return tf.backend_util.computeConv2DInfo(
    xShape as [number, number, number, number],
    filterShape as [number, number, number, number],
    attrs.strides,
    depthwise ? (attrs.dilations ?? 1) : 1,
    attrs.pad,
    attrs.dimRoundingMode,
    depthwise,
    'channelsLast',
  );
}

function depthwiseBackpropFilter(args: { inputs: Record<string, TensorInfo>; backend: DisposingBackend; attrs: NamedAttrMap }): TensorInfo {
  const { x, dy } = args.inputs as { x: TensorInfo; dy: TensorInfo };
  const attrs = args.attrs as unknown as ConvAttrs;
  const filterShape = attrs.filterShape!;
  const info = convInfo(x.shape, filterShape, attrs, true);
  const [, , channels, multiplier] = filterShape;
  const scope = new KernelScope(args.backend);
  const xPadded = padInput(scope, x, info);
  const [n, oh, ow] = [info.batchSize, info.outHeight, info.outWidth];
  const dy5 = scope.reshape(dy, [n, oh, ow, channels, multiplier]);
  const taps: TensorInfo[] = [];
  for (let kh = 0; kh < info.filterHeight; kh++) {
    for (let kw = 0; kw < info.filterWidth; kw++) {
      const xs = scope.reshape(tapSlice(scope, xPadded, info, kh, kw), [n, oh, ow, channels, 1]);
      const prod = scope.run('Multiply', { a: xs, b: dy5 });
      taps.push(scope.run('Sum', { x: prod }, { axis: [0, 1, 2], keepDims: false }));
    }
  }
  const stacked =
    taps.length === 1
      ? taps[0]!
      : scope.run(
          'Concat',
          taps.map((t) => scope.reshape(t, [1, channels, multiplier])),
          { axis: 0 },
        );
  return scope.finish(scope.reshape(stacked, filterShape));
}

function depthwiseBackpropInput(args: { inputs: Record<string, TensorInfo>; backend: DisposingBackend; attrs: NamedAttrMap }): TensorInfo {
  const { dy, filter } = args.inputs as { dy: TensorInfo; filter: TensorInfo };
  const attrs = args.attrs as unknown as ConvAttrs;
  const inputShape = attrs.inputShape!;
  const info = convInfo(inputShape, filter.shape, attrs, true);
  if (info.dilationHeight !== 1 || info.dilationWidth !== 1) {
    throw new Error('DepthwiseConv2dNativeBackpropInput on wasm supports dilation 1 only');
  }
  const [kh, kw, channels, multiplier] = filter.shape as [number, number, number, number];
  const [n] = inputShape;
  const { outHeight: oh, outWidth: ow } = info;
  const scope = new KernelScope(args.backend);
  const flipped = scope.run('Reverse', { x: filter }, { dims: [0, 1] });
  let total: TensorInfo | null = null;
  // output channel c*multiplier+m reads input channel c: one depthwise pass per multiplier index
  for (let m = 0; m < multiplier; m++) {
    let dyM = dy;
    let wM = flipped;
    if (multiplier > 1) {
      dyM = scope.run('StridedSlice', { x: dy }, stridedAttrs([0, 0, 0, m], [n, oh, ow, channels * multiplier], [1, 1, 1, multiplier]));
      wM = scope.run('StridedSlice', { x: flipped }, stridedAttrs([0, 0, 0, m], [kh, kw, channels, m + 1], [1, 1, 1, 1]));
    }
    const part = transposedConv(scope, dyM, scope.reshape(wM, [kh, kw, channels, 1]), inputShape, info, true);
    total = total ? scope.run('Add', { a: total, b: part }) : part;
  }
  return scope.finish(total!);
}

function unsortedSegmentSum(args: { inputs: Record<string, TensorInfo>; backend: DisposingBackend; attrs: NamedAttrMap }): TensorInfo {
  const { x, segmentIds } = args.inputs as { x: TensorInfo; segmentIds: TensorInfo };
  const numSegments = args.attrs['numSegments'] as number;
  const scope = new KernelScope(args.backend);
  const k = tf.util.sizeFromShape(segmentIds.shape);
  const restShape = x.shape.slice(segmentIds.shape.length);
  const rest = tf.util.sizeFromShape(restShape);
  const ids = scope.reshape(segmentIds, [k]);
  // one-hot drops negative ids, as TensorFlow's UnsortedSegmentSum does
  // the wasm OneHot kernel always writes int32 (whatever dtype says), so cast explicitly
  const oneHotInt = scope.run('OneHot', { indices: ids }, { depth: numSegments, onValue: 1, offValue: 0, dtype: 'int32' });
  const oneHot = scope.run('Cast', { x: oneHotInt }, { dtype: 'float32' });
  let values = scope.reshape(x, [1, k, rest]);
  if (x.dtype !== 'float32') values = scope.run('Cast', { x: values }, { dtype: 'float32' });
  let out = scope.run('BatchMatMul', { a: scope.reshape(oneHot, [1, k, numSegments]), b: values }, { transposeA: true, transposeB: false });
  if (x.dtype !== 'float32') out = scope.run('Cast', { x: out }, { dtype: x.dtype });
  return scope.finish(scope.reshape(out, [numSegments, ...restShape]));
}

const WASM_KERNELS: ReadonlyArray<readonly [string, KernelImpl]> = [
  ['Conv2DBackpropFilter', conv2DBackpropFilter],
  ['Conv2DBackpropInput', conv2DBackpropInput],
  ['DepthwiseConv2dNativeBackpropFilter', depthwiseBackpropFilter],
  ['DepthwiseConv2dNativeBackpropInput', depthwiseBackpropInput],
  ['UnsortedSegmentSum', unsortedSegmentSum],
];

/** Kernel names this module adds to the wasm backend. */
export const WASM_GRADIENT_KERNELS: readonly string[] = WASM_KERNELS.map(([name]) => name);

/**
 * Registers the missing backward kernels for 'wasm' (idempotent; a kernel that a newer
 * tfjs-backend-wasm already provides is left alone).
 */
export function registerWasmGradientKernels(): void {
  const native = tf.getKernel('Conv2DBackpropInput', 'wasm');
  if (native && native.kernelFunc !== (conv2DBackpropInput as unknown)) {
    // tfjs-backend-wasm 4.x computes this one with a scalar loop (about 10x slower than its forward
    // conv); ours runs it as a forward XNNPACK convolution and keeps the native one for NCHW
    nativeConv2DBackpropInput = native.kernelFunc as unknown as KernelImpl;
    tf.unregisterKernel('Conv2DBackpropInput', 'wasm');
  }
  for (const [kernelName, impl] of WASM_KERNELS) {
    if (tf.getKernel(kernelName, 'wasm')) continue;
    tf.registerKernel({ kernelName, backendName: 'wasm', kernelFunc: impl as never });
  }
}

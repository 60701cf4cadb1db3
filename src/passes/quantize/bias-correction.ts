/**
 * Bias correction (Nagel et al. 2019, "Data-Free Quantization", section 4.2; NNCF's fast bias
 * correction): rounding a layer's weights to int8 shifts the mean of its output, per output
 * channel, by E[(W_q - W) x] = (W_q - W) . E[x] where E[x] is the mean of each input channel over
 * the calibration data. That shift is the same on every sample, so it is a bias error the next
 * layers inherit and that SQNR sees as noise; subtracting it from the layer's bias removes it.
 * For a Conv the mean is taken over the output positions: a tap that reads padding on some of
 * them contributes the fraction of positions where it reads the input (exact when each input
 * channel's mean is the same at every position). Conv and Gemm are corrected (a Conv or Gemm
 * without a bias gets one); a MatMul with a 2-D weight through the float bias Add after it (the
 * Add a transformer or a Dense export writes; it stays float, onnxruntime runs the pair as
 * MatMulIntegerToFloat), and a MatMul without one is left as is. This file is the
 * arithmetic and the statistic requests; qdq.ts applies it while it writes the int8 weights, so
 * the shift is measured against exactly the weights it writes.
 * Imports: the IR, the calibration request type, files beside it.
 */
import { DataType } from '../../ir/dtype.js';
import { isTensorType, type Node, type Tensor } from '../../ir/index.js';
import type { StatisticRequest } from '../../calibration/index.js';

/** Ops whose bias absorbs the shift (a MatMul only through a bias Add: matMulBiasAdd). */
export const BIAS_CORRECTED_OP_TYPES: ReadonlySet<string> = new Set(['Conv', 'Gemm', 'MatMul']);

/**
 * The float bias Add right after a MatMul with a constant 2-D weight [K, N]: the Add, the index of
 * its constant input and that constant ([N] values), or undefined.
 */
export function matMulBiasAdd(node: Node): { add: Node; index: number; bias: Tensor } | undefined {
  const w = node.inputs[1] ? node.graph.constantTensor(node.inputs[1]) : undefined;
  const y = node.outputs[0];
  if (node.opType !== 'MatMul' || !w || w.dims.length !== 2 || !y || y.isGraphOutput() || y.uses().length !== 1) return undefined;
  const add = y.uses()[0]!.node;
  if (add.opType !== 'Add' || (add.domain !== '' && add.domain !== 'ai.onnx')) return undefined;
  const index = add.inputs[0] === y ? 1 : 0;
  const c = add.inputs[index];
  const bias = c ? add.graph.constantTensor(c) : undefined;
  return bias && bias.dtype === DataType.FLOAT && bias.elementCount === w.dims[1] && bias.dims.every((d, i) => i === bias.dims.length - 1 || d === 1)
    ? { add, index, bias }
    : undefined;
}

/** The tensor whose per-channel mean a node's correction needs, and its channel axis counted from the end; undefined when it cannot be corrected. */
export function biasCorrectionInput(node: Node): { tensor: string; axis: number } | undefined {
  const x = node.inputs[0];
  if (!x || x.name === '' || !BIAS_CORRECTED_OP_TYPES.has(node.opType)) return undefined;
  if (node.opType === 'Gemm') return { tensor: x.name, axis: node.getInt('transA', 0) === 1 ? -2 : -1 };
  if (node.opType === 'MatMul') return matMulBiasAdd(node) ? { tensor: x.name, axis: -1 } : undefined;
  const rank = isTensorType(x.type) ? x.type.shape?.length : undefined;
  return rank !== undefined && rank >= 3 ? { tensor: x.name, axis: -(rank - 1) } : undefined;
}

/** The channel-moment requests of the nodes a QDQ plan quantizes (one per input tensor). */
export function biasCorrectionRequests(nodes: readonly Node[]): StatisticRequest[] {
  const seen = new Map<string, number>();
  for (const node of nodes) {
    const input = biasCorrectionInput(node);
    if (input && !seen.has(input.tensor)) seen.set(input.tensor, input.axis);
  }
  return [...seen].map(([tensor, axis]) => ({ tensor, kind: 'channel-moments', axis }));
}

/**
 * For one spatial axis of a Conv: the fraction of output positions at which kernel tap k reads
 * the input rather than padding, for k = 0..kernel-1. All ones when the input size is unknown.
 */
export function tapFractions(size: number | undefined, kernel: number, stride: number, dilation: number, padBegin: number, padEnd: number): Float64Array {
  const out = new Float64Array(kernel).fill(1);
  if (size === undefined || size <= 0) return out;
  const positions = Math.floor((size + padBegin + padEnd - dilation * (kernel - 1) - 1) / stride) + 1;
  if (positions <= 0) return out;
  for (let k = 0; k < kernel; k++) {
    let valid = 0;
    for (let o = 0; o < positions; o++) {
      const i = o * stride - padBegin + k * dilation;
      if (i >= 0 && i < size) valid++;
    }
    out[k] = valid / positions;
  }
  return out;
}

/** Begin and end pads of each spatial axis of a Conv (explicit pads or auto_pad). */
function convPads(
  node: Node,
  sizes: readonly (number | undefined)[],
  kernel: readonly number[],
  strides: readonly number[],
  dilations: readonly number[],
): [number, number][] {
  const autoPad = node.getString('auto_pad', 'NOTSET');
  const pads = node.getInts('pads', []);
  return kernel.map((k, d) => {
    if (autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
      const size = sizes[d];
      if (size === undefined) return [0, 0];
      const total = Math.max(0, (Math.ceil(size / strides[d]!) - 1) * strides[d]! + dilations[d]! * (k - 1) + 1 - size);
      const small = Math.floor(total / 2);
      return autoPad === 'SAME_UPPER' ? [small, total - small] : [total - small, small];
    }
    if (autoPad === 'VALID') return [0, 0];
    return [pads[d] ?? 0, pads[d + kernel.length] ?? 0];
  });
}

/**
 * The mean output shift per output channel of a Conv whose float weight `weight` (dims `dims`:
 * [Cout, Cin/group, k...]) is replaced by `quantized` (dequantized values, same layout), given the
 * mean of each of its input channels (`means`, length Cin).
 */
export function convOutputShift(
  node: Node,
  dims: readonly number[],
  weight: ArrayLike<number>,
  quantized: ArrayLike<number>,
  means: ArrayLike<number>,
): Float64Array {
  const [cout, perGroup] = [dims[0]!, dims[1]!];
  const kernel = dims.slice(2);
  const group = node.getInt('group', 1);
  const x = node.inputs[0];
  const shape = x && isTensorType(x.type) ? x.type.shape : undefined;
  const sizes = kernel.map((_, d) => {
    const s = shape?.[d + 2];
    return typeof s === 'number' ? s : undefined;
  });
  const strides = node.getInts(
    'strides',
    kernel.map(() => 1),
  );
  const dilations = node.getInts(
    'dilations',
    kernel.map(() => 1),
  );
  const pads = convPads(node, sizes, kernel, strides, dilations);
  const fractions = kernel.map((k, d) => tapFractions(sizes[d], k, strides[d]!, dilations[d]!, pads[d]![0], pads[d]![1]));
  // The fraction of each tap (kernel positions in row-major order).
  const taps = kernel.reduce((a, b) => a * b, 1);
  const tapWeight = new Float64Array(taps);
  for (let t = 0; t < taps; t++) {
    let f = 1;
    for (let d = kernel.length - 1, rest = t; d >= 0; d--) {
      f *= fractions[d]![rest % kernel[d]!]!;
      rest = Math.floor(rest / kernel[d]!);
    }
    tapWeight[t] = f;
  }
  const outPerGroup = cout / group;
  const shift = new Float64Array(cout);
  for (let o = 0; o < cout; o++) {
    const firstInput = Math.floor(o / outPerGroup) * perGroup;
    let s = 0;
    for (let c = 0; c < perGroup; c++) {
      const mean = means[firstInput + c]!;
      const base = (o * perGroup + c) * taps;
      for (let t = 0; t < taps; t++) s += (quantized[base + t]! - weight[base + t]!) * tapWeight[t]! * mean;
    }
    shift[o] = s;
  }
  return shift;
}

/** The mean output shift per output of a Gemm (alpha included) whose B `weight` (dims [K, N], or [N, K] with transB) becomes `quantized`. */
export function gemmOutputShift(
  node: Node,
  dims: readonly number[],
  weight: ArrayLike<number>,
  quantized: ArrayLike<number>,
  means: ArrayLike<number>,
): Float64Array {
  const transB = node.getInt('transB', 0) === 1;
  const alpha = node.getFloat('alpha', 1);
  const [k, n] = transB ? [dims[1]!, dims[0]!] : [dims[0]!, dims[1]!];
  const shift = new Float64Array(n);
  for (let j = 0; j < n; j++) {
    let s = 0;
    for (let i = 0; i < k; i++) {
      const at = transB ? j * k + i : i * n + j;
      s += (quantized[at]! - weight[at]!) * means[i]!;
    }
    shift[j] = alpha * s;
  }
  return shift;
}

/** The mean output shift of `node` (Conv or Gemm) from quantizing its float weight `w`, or undefined when the means do not fit it. */
export function outputShift(
  node: Node,
  w: Tensor,
  quantized: { data: Int8Array; scales: Float32Array; axis: number | null },
  means: ArrayLike<number>,
): Float64Array | undefined {
  const weight = w.toFloat64();
  const dequantized = dequantizeWeight(quantized, w.dims);
  if (node.opType === 'Conv') {
    if (w.dims.length < 3 || means.length !== w.dims[1]! * node.getInt('group', 1)) return undefined;
    return convOutputShift(node, w.dims, weight, dequantized, means);
  }
  if (node.opType === 'Gemm' || node.opType === 'MatMul') {
    const k = node.getInt('transB', 0) === 1 ? w.dims[1] : w.dims[0];
    if (w.dims.length !== 2 || means.length !== k) return undefined;
    // A MatMul reads like a Gemm without transB and alpha (their defaults).
    return gemmOutputShift(node, w.dims, weight, dequantized, means);
  }
  return undefined;
}

/** Int8 weights back to floats (per tensor, or per channel along `axis`). */
export function dequantizeWeight(q: { data: Int8Array; scales: Float32Array; axis: number | null }, dims: readonly number[]): Float64Array {
  const out = new Float64Array(q.data.length);
  const channels = q.axis === null ? 1 : dims[q.axis]!;
  const inner = q.axis === null ? q.data.length : dims.slice(q.axis + 1).reduce((a, b) => a * b, 1);
  for (let i = 0; i < q.data.length; i++) out[i] = q.data[i]! * q.scales[q.axis === null ? 0 : Math.floor(i / inner) % channels]!;
  return out;
}

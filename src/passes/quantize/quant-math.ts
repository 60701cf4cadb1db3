/**
 * Quantization arithmetic shared by the INT8 passes: scale/zero-point from a float range, weight
 * quantization (per tensor or per channel along an axis), int32 bias quantization, and the
 * fake-quantize reference used by tests and sensitivity analysis. Pure numbers; imports the
 * dtype table only.
 */
import { DataType } from '../../ir/dtype.js';

export type QuantType = typeof DataType.UINT8 | typeof DataType.INT8;

export interface QuantParams {
  scale: number;
  zeroPoint: number;
  type: QuantType;
}

export function quantRange(type: QuantType): { qmin: number; qmax: number } {
  return type === DataType.UINT8 ? { qmin: 0, qmax: 255 } : { qmin: -128, qmax: 127 };
}

/** Round half to even, as QuantizeLinear does. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  if (Math.abs(x % 1) === 0.5) return 2 * Math.round(x / 2);
  return r;
}

/**
 * Activation parameters for the float range [min, max]. The range is widened to include 0 so that
 * zero (padding, ReLU output) is exact. Symmetric: zero point 0 (int8) or 128 (uint8).
 * `reluLike`: the tensor is known non-negative; with int8 the zero point becomes -128 so the whole
 * code range is used and onnxruntime can drop the Relu before the QuantizeLinear.
 */
export function activationParams(min: number, max: number, type: QuantType, symmetric: boolean, reluLike = false): QuantParams {
  const { qmin, qmax } = quantRange(type);
  let rmin = Math.min(0, Number.isFinite(min) ? min : 0);
  let rmax = Math.max(0, Number.isFinite(max) ? max : 0);
  if (reluLike) rmin = 0;
  if (symmetric && !(reluLike && rmin === 0)) {
    const a = Math.max(Math.abs(rmin), Math.abs(rmax));
    rmin = -a;
    rmax = a;
  }
  const symmetricZero = type === DataType.UINT8 ? 128 : 0;
  if (rmax === rmin) return { scale: 1, zeroPoint: symmetric && !reluLike ? symmetricZero : qmin, type };
  // Float32 rounding of the stored scale must not matter: compute in float64, store float32.
  const scale = Math.fround((rmax - rmin) / (qmax - qmin));
  let zeroPoint: number;
  if (symmetric && !reluLike) zeroPoint = symmetricZero;
  else zeroPoint = Math.min(qmax, Math.max(qmin, roundHalfEven(qmin - rmin / scale)));
  return { scale, zeroPoint, type };
}

export interface QuantizedWeight {
  data: Int8Array;
  scales: Float32Array;
  /** Channel axis, or null for per-tensor. */
  axis: number | null;
}

/**
 * Int8 symmetric weight quantization over [-127, 127] (the -128 code is left unused so that the
 * range is symmetric, as onnxruntime's kernels expect). Per channel along `axis` when not null.
 * `minScales` (one per channel): a scale at least this large (biasWeightScaleFloor), so that an
 * int32 bias at input scale x weight scale fits.
 */
export function quantizeWeight(values: ArrayLike<number>, dims: readonly number[], axis: number | null, minScales?: ArrayLike<number>): QuantizedWeight {
  const n = values.length;
  const channels = axis === null ? 1 : dims[axis]!;
  const inner = axis === null ? n : dims.slice(axis + 1).reduce((a, b) => a * b, 1);
  const channelOf = (i: number): number => (axis === null ? 0 : Math.floor(i / inner) % channels);
  const absMax = new Float64Array(channels);
  for (let i = 0; i < n; i++) {
    const c = channelOf(i);
    const a = Math.abs(values[i]!);
    if (a > absMax[c]!) absMax[c] = a;
  }
  const scales = new Float32Array(channels);
  for (let c = 0; c < channels; c++) scales[c] = Math.max(absMax[c]! > 0 ? absMax[c]! / 127 : 1, minScales?.[c] ?? 0);
  const data = new Int8Array(n);
  for (let i = 0; i < n; i++) {
    const q = roundHalfEven(values[i]! / scales[channelOf(i)]!);
    data[i] = Math.max(-127, Math.min(127, q));
  }
  return { data, scales, axis };
}

/** Largest int32 bias code. */
export const INT32_MAX = 2147483647;

/**
 * The smallest weight scale (per output channel, or one for per-tensor weights: `channels` 1) at
 * which every bias value fits int32 with scale inputScale x weight scale, with a 1e-5 relative
 * margin for the float32 rounding of both scales. onnxruntime's quantizer enlarges the weight
 * scale the same way instead of clamping the bias: the weights of that channel lose resolution,
 * the bias keeps its value. Returns 0 for channels that need nothing.
 */
export function biasWeightScaleFloor(bias: ArrayLike<number>, inputScale: number, channels: number): Float64Array {
  const floor = new Float64Array(channels);
  if (!(inputScale > 0)) return floor;
  for (let i = 0; i < bias.length; i++) {
    const c = channels === 1 ? 0 : i;
    const need = (Math.abs(bias[i]!) / (inputScale * INT32_MAX)) * (1 + 1e-5);
    if (need > floor[c]!) floor[c] = need;
  }
  return floor;
}

/** Int32 bias with scale inputScale * weightScale[c]; reports how many values saturated. */
export function quantizeBias(
  values: ArrayLike<number>,
  inputScale: number,
  weightScales: Float32Array,
): { data: Int32Array; scales: Float32Array; saturated: number } {
  const n = values.length;
  const scales = new Float32Array(n);
  const data = new Int32Array(n);
  let saturated = 0;
  for (let i = 0; i < n; i++) {
    const s = Math.fround(inputScale * weightScales[weightScales.length === 1 ? 0 : i]!);
    scales[i] = s > 0 ? s : 1;
    const q = roundHalfEven(values[i]! / scales[i]!);
    if (q > 2147483647 || q < -2147483648) saturated++;
    data[i] = Math.max(-2147483648, Math.min(2147483647, q));
  }
  return { data, scales, saturated };
}

/** Quantize-then-dequantize one value: the float the QDQ pair hands to the next op. */
export function fakeQuantize(x: number, p: QuantParams): number {
  const { qmin, qmax } = quantRange(p.type);
  const q = Math.max(qmin, Math.min(qmax, roundHalfEven(x / p.scale) + p.zeroPoint));
  return (q - p.zeroPoint) * p.scale;
}

/** Quantize values with given params into the storage array of the quantized type. */
export function quantizeValues(values: ArrayLike<number>, p: QuantParams): Uint8Array | Int8Array {
  const { qmin, qmax } = quantRange(p.type);
  const out = p.type === DataType.UINT8 ? new Uint8Array(values.length) : new Int8Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = Math.max(qmin, Math.min(qmax, roundHalfEven(values[i]! / p.scale) + p.zeroPoint));
  return out;
}

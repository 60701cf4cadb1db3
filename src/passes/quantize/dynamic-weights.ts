/**
 * Weight quantization math for dynamic INT8: int8 symmetric or uint8 asymmetric, per tensor or
 * per output column of a [K, N] matrix, with onnxruntime's integer ranges (reduce_range included)
 * and round-half-to-even as QuantizeLinear does. Pure functions over typed arrays; imports only the
 * shared rounding from ./quant-math.js.
 */
import { roundHalfEven } from './quant-math.js';

/** How weights are stored: int8 symmetric (zero point 0) or uint8 asymmetric. */
export type WeightType = 'int8' | 'uint8';

export interface QuantizedWeight {
  /** Quantized values, row-major [K, N]. */
  data: Int8Array | Uint8Array;
  /** One scale per column (perChannel) or a single one. */
  scales: Float32Array;
  /** Zero points, same length as scales (all 0 for int8 symmetric). */
  zeroPoints: Int8Array | Uint8Array;
}

/** Integer range onnxruntime's quantizer uses (get_qmin_qmax_for_qType). */
export function weightRange(type: WeightType, reduceRange: boolean): { qmin: number; qmax: number } {
  if (type === 'int8') return reduceRange ? { qmin: -64, qmax: 64 } : { qmin: -127, qmax: 127 };
  return reduceRange ? { qmin: 0, qmax: 127 } : { qmin: 0, qmax: 255 };
}

/**
 * Quantizes a row-major [K, N] float matrix. Per-channel means one scale per column (the output
 * feature), which MatMulInteger/MatMulIntegerToFloat accept as a 1-D [N] tensor.
 */
export function quantizeWeight(
  w: Float32Array | Float64Array,
  k: number,
  n: number,
  type: WeightType,
  perChannel: boolean,
  reduceRange: boolean,
): QuantizedWeight {
  const { qmin, qmax } = weightRange(type, reduceRange);
  const groups = perChannel ? n : 1;
  const lo = new Float64Array(groups).fill(0);
  const hi = new Float64Array(groups).fill(0);
  for (let r = 0; r < k; r++) {
    for (let c = 0; c < n; c++) {
      const g = perChannel ? c : 0;
      const v = w[r * n + c]!;
      if (v < lo[g]!) lo[g] = v;
      if (v > hi[g]!) hi[g] = v;
    }
  }
  const scales = new Float32Array(groups);
  const zeroPoints = type === 'int8' ? new Int8Array(groups) : new Uint8Array(groups);
  for (let g = 0; g < groups; g++) {
    let scale: number;
    let zp: number;
    if (type === 'int8') {
      const absMax = Math.max(-lo[g]!, hi[g]!);
      scale = absMax / qmax;
      zp = 0;
    } else {
      scale = (hi[g]! - lo[g]!) / (qmax - qmin);
      zp = scale === 0 ? 0 : Math.min(qmax, Math.max(qmin, roundHalfEven(qmin - lo[g]! / scale)));
    }
    // An all-zero column: any scale reproduces it; 1 avoids dividing by zero downstream.
    scales[g] = scale === 0 || !Number.isFinite(scale) ? 1 : scale;
    zeroPoints[g] = zp;
  }
  const data = type === 'int8' ? new Int8Array(k * n) : new Uint8Array(k * n);
  for (let r = 0; r < k; r++) {
    for (let c = 0; c < n; c++) {
      const g = perChannel ? c : 0;
      const q = roundHalfEven(w[r * n + c]! / scales[g]!) + zeroPoints[g]!;
      data[r * n + c] = Math.min(qmax, Math.max(qmin, q));
    }
  }
  return { data, scales, zeroPoints };
}

/** Dequantized weights in float64 (for references and error reports). */
export function dequantizeWeight(q: QuantizedWeight, k: number, n: number): Float64Array {
  const out = new Float64Array(k * n);
  for (let r = 0; r < k; r++) {
    for (let c = 0; c < n; c++) {
      const g = q.scales.length === 1 ? 0 : c;
      out[r * n + c] = (q.data[r * n + c]! - q.zeroPoints[g]!) * q.scales[g]!;
    }
  }
  return out;
}

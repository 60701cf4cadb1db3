/**
 * Block-wise 4-bit weight quantization in the layout of com.microsoft MatMulNBits (bits = 4), as
 * onnxruntime's MLAS BlockwiseQuantizer (which its matmul_nbits_quantizer calls) writes it:
 * - B [K, N] is quantized along K in blocks of `blockSize` rows; K is padded to a whole number of
 *   blocks (padding rows read as zero, so they change no block's range);
 * - packed data: uint8 [N, blocksPerColumn, blockSize / 2], column by column, two values a byte,
 *   the even row in the low nibble;
 * - scales: float [N * blocksPerColumn], column-major (all blocks of column 0 first);
 * - symmetric: no zero points (the kernel's default 8); scale = -m / 8 with m the block's value of
 *   largest magnitude, so m itself maps to 0 (the -8 end) and the scale carries m's sign;
 * - asymmetric: range widened to include 0, scale = (max - min) / 15, zero point round(-min / scale),
 *   zero points packed two a byte per column: uint8 [N * ceil(blocksPerColumn / 2)];
 * - q = clamp(round(w * (1 / scale) + zp), 0, 15) in float32, rounding half away from zero (roundf).
 * An optional per-block clip ratio (the data-aware search in int4.ts) shrinks a block's range
 * before the scale is taken. Pure functions over typed arrays; imports nothing.
 */

/** A [K, N] matrix quantized to 4 bits in MatMulNBits' layout. */
export interface Int4Matrix {
  k: number;
  n: number;
  blockSize: number;
  blocksPerColumn: number;
  /** Bytes per block: blockSize / 2. */
  blobSize: number;
  /** uint8 [N, blocksPerColumn, blobSize]. */
  data: Uint8Array;
  /** float32 [N * blocksPerColumn], column-major. */
  scales: Float32Array;
  /** uint8 [N * ceil(blocksPerColumn / 2)], two 4-bit zero points a byte; absent when symmetric. */
  zeroPoints?: Uint8Array;
}

/** Block sizes MatMulNBits accepts that this pass writes (powers of two, at least 16). */
export const INT4_BLOCK_SIZES: readonly number[] = [16, 32, 64, 128, 256];

const f = Math.fround;
/** C's roundf: half away from zero. */
const roundAway = (x: number): number => (x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5));

/** Scale and zero point of one block from its (clipped) range, as MLAS range2scale(zp) does. */
export function blockParams(min: number, max: number, symmetric: boolean): { scale: number; zeroPoint: number } {
  if (symmetric) {
    const m = Math.abs(max) > Math.abs(min) ? max : min;
    return { scale: f(-m / 8), zeroPoint: 8 };
  }
  const lo = Math.min(min, 0);
  const hi = Math.max(max, 0);
  const scale = f((hi - lo) / 15);
  let zp = scale !== 0 ? f(0 - lo / scale) : lo;
  zp = zp < 0 ? 0 : zp > 15 ? 15 : roundAway(zp);
  return { scale, zeroPoint: zp };
}

/** The 4-bit code of w in a block with this scale and zero point. */
export function quantizeValue(w: number, scale: number, zeroPoint: number): number {
  const reciprocal = scale !== 0 ? f(1 / scale) : 0;
  const q = roundAway(f(f(w * reciprocal) + zeroPoint));
  return q < 0 ? 0 : q > 15 ? 15 : q;
}

/**
 * Quantizes a row-major [K, N] float matrix. `clip` (optional, [N * blocksPerColumn] in the scales'
 * order, each in (0, 1]) scales each block's min and max before the parameters are taken.
 */
export function quantizeInt4Blockwise(w: ArrayLike<number>, k: number, n: number, blockSize: number, symmetric: boolean, clip?: ArrayLike<number>): Int4Matrix {
  const blocks = Math.ceil(k / blockSize);
  const blobSize = blockSize / 2;
  const data = new Uint8Array(n * blocks * blobSize);
  const scales = new Float32Array(n * blocks);
  const zpBytes = Math.ceil(blocks / 2);
  const zeroPoints = symmetric ? undefined : new Uint8Array(n * zpBytes);
  for (let col = 0; col < n; col++) {
    for (let b = 0; b < blocks; b++) {
      const r0 = b * blockSize;
      const r1 = Math.min(r0 + blockSize, k);
      let min = Infinity;
      let max = -Infinity;
      for (let r = r0; r < r1; r++) {
        const v = w[r * n + col]!;
        if (v < min) min = v;
        if (v > max) max = v;
      }
      const c = clip ? clip[col * blocks + b]! : 1;
      const { scale, zeroPoint } = blockParams(min * c, max * c, symmetric);
      scales[col * blocks + b] = scale;
      if (zeroPoints) zeroPoints[col * zpBytes + (b >> 1)]! |= zeroPoint << ((b & 1) * 4);
      const base = (col * blocks + b) * blobSize;
      for (let r = r0; r < r0 + blockSize; r++) {
        // Padding rows are zeros: their code is the zero point, so they dequantize to 0.
        const q = r < r1 ? quantizeValue(w[r * n + col]!, scale, zeroPoint) : zeroPoint;
        data[base + ((r - r0) >> 1)]! |= q << (((r - r0) & 1) * 4);
      }
    }
  }
  return { k, n, blockSize, blocksPerColumn: blocks, blobSize, data, scales, zeroPoints };
}

/** The 4-bit code of element (row, col). */
export function int4Code(q: Int4Matrix, row: number, col: number): number {
  const b = Math.floor(row / q.blockSize);
  const i = row - b * q.blockSize;
  const byte = q.data[(col * q.blocksPerColumn + b) * q.blobSize + (i >> 1)]!;
  return (byte >> ((i & 1) * 4)) & 15;
}

/** The zero point of block b of column col (8 when symmetric). */
export function int4ZeroPoint(q: Int4Matrix, block: number, col: number): number {
  if (!q.zeroPoints) return 8;
  const byte = q.zeroPoints[col * Math.ceil(q.blocksPerColumn / 2) + (block >> 1)]!;
  return (byte >> ((block & 1) * 4)) & 15;
}

/** The dequantized matrix, row-major [K, N], in float64: (code - zero point) * scale. */
export function dequantizeInt4(q: Int4Matrix): Float64Array {
  const out = new Float64Array(q.k * q.n);
  for (let col = 0; col < q.n; col++) {
    for (let row = 0; row < q.k; row++) {
      const b = Math.floor(row / q.blockSize);
      out[row * q.n + col] = (int4Code(q, row, col) - int4ZeroPoint(q, b, col)) * q.scales[col * q.blocksPerColumn + b]!;
    }
  }
  return out;
}

// Numeric comparisons shared by tests in every folder (no vitest import, so scripts can use it too).

/** Largest |a[i] - b[i]| (NaN if either holds NaN at the same place). */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    m = Number.isNaN(d) ? NaN : Math.max(m, d);
  }
  return m;
}

/**
 * float64 reference of transpose(x, perm) @ w for a weight w [k, n] (row-major): the product of
 * the transposed x's last axis (length k) with w, as float32 [...transposed dims but last, n].
 */
export function transposeMatMulReference(
  x: { dims: number[]; data: ArrayLike<number> },
  perm: number[],
  w: ArrayLike<number>,
  k: number,
  n: number,
): { dims: number[]; data: Float32Array } {
  const size = (d: number[]): number => d.reduce((a, b) => a * b, 1);
  const outDims = perm.map((p) => x.dims[p]!);
  const inStrides = x.dims.map((_, i) => size(x.dims.slice(i + 1)));
  const rows = size(outDims.slice(0, -1));
  const y = new Float32Array(rows * n);
  const idx = new Array<number>(outDims.length).fill(0);
  for (let r = 0; r < rows; r++) {
    let rem = r;
    for (let a = outDims.length - 2; a >= 0; a--) {
      idx[a] = rem % outDims[a]!;
      rem = Math.floor(rem / outDims[a]!);
    }
    for (let j = 0; j < n; j++) {
      let acc = 0;
      for (let kk = 0; kk < k; kk++) {
        idx[outDims.length - 1] = kk;
        let off = 0;
        for (let a = 0; a < perm.length; a++) off += idx[a]! * inStrides[perm[a]!]!;
        acc += x.data[off]! * w[kk * n + j]!;
      }
      y[r * n + j] = acc;
    }
  }
  return { dims: [...outDims.slice(0, -1), n], data: y };
}

// StreamingHistogram's binning of large ReLU-like arrays against counting one value at a time into
// float64 bins (edge bins included), and the one-pass path's claim that extend() then addFixed()
// gives add()'s grid and counts (statistics.ts bins a finite batch that way from onnxruntime's min/max).
import { describe, expect, it } from 'vitest';
import { StreamingHistogram } from '../../src/calibration/index.js';

/** ReLU-like values: runs of zeros and a long tail, some below and above the grid; deterministic. */
function values(n: number, seed = 7): Float32Array {
  const out = new Float32Array(n);
  let s = seed;
  const next = (): number => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
  for (let i = 0; i < n; i++) {
    const r = next();
    out[i] = r < 0.4 ? 0 : r < 0.45 ? -next() * 3 : -Math.log(next() + 1e-9) * 1.5;
  }
  return out;
}

/** One value at a time into float64 bins: floor((v - lo) / width) clamped to the edge bins. */
function reference(v: ArrayLike<number>, lo: number, width: number, bins: number): Float64Array {
  const counts = new Float64Array(bins);
  const inv = 1 / width;
  for (let i = 0; i < v.length; i++) {
    const b = ((v[i]! - lo) * inv) | 0;
    counts[b > bins - 1 ? bins - 1 : b < 0 ? 0 : b]! += 1;
  }
  return counts;
}

describe('StreamingHistogram binning', () => {
  it.each([40_001, 40_003, 65_536, 200_002])('addFixed counts %i values exactly as one-by-one float64 counting', (n) => {
    const h = new StreamingHistogram(4096);
    const v = values(n);
    // A grid narrower than the data: values below and above it land in the edge bins.
    h.extend(-1, 3);
    const { lo, width } = h;
    h.addFixed(v, false);
    h.addFixed(v, false);
    const once = reference(v, lo, width, 4096);
    expect(Array.from(h.counts)).toEqual(Array.from(once, (c) => 2 * c));
    expect(h.total).toBe(2 * n);
    expect(h.counts[0]).toBeGreaterThan(0);
    expect(h.counts[4095]).toBeGreaterThan(0);
  });

  it('extend() then addFixed() in slices gives the grid, range and counts add() grows batch by batch', () => {
    const v = values(150_001, 3);
    const big = new StreamingHistogram(512);
    const small = new StreamingHistogram(512);
    for (let start = 0; start < v.length; start += 50_000) {
      const part = v.subarray(start, Math.min(v.length, start + 50_000));
      big.add(part);
      // The same batch in slices, after growing the grid to its range.
      let min = Infinity;
      let max = -Infinity;
      for (const x of part) {
        min = Math.min(min, x);
        max = Math.max(max, x);
      }
      small.extend(min, max);
      for (let k = 0; k < part.length; k += 1000) small.addFixed(part.subarray(k, k + 1000), false);
    }
    expect([big.lo, big.width, big.min, big.max, big.total]).toEqual([small.lo, small.width, small.min, small.max, small.total]);
    expect(Array.from(big.counts)).toEqual(Array.from(small.counts));
    expect(big.counts.reduce((a, b) => a + b, 0)).toBe(150_001);
  });
});

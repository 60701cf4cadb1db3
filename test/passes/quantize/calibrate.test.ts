// Calibrators against hand-computed ranges and the re-binning histogram (the streaming service: test/calibration).
import { describe, expect, it } from 'vitest';
import { DataType } from '../../../src/ir/index.js';
import { activationParams, fakeQuantize } from '../../../src/passes/quantize/quant-math.js';
import { StreamingHistogram, type TensorStatistics } from '../../../src/calibration/index.js';
import { computeRange } from '../../../src/passes/quantize/calibrate.js';

function stats(values: number[] | Float32Array, bins = 4096): TensorStatistics {
  const h = new StreamingHistogram(bins);
  h.add(values);
  return { name: 't', min: h.min, max: h.max, count: values.length, histogram: h };
}

describe('StreamingHistogram', () => {
  it('re-bins exactly when the range grows: counts and bin contents are preserved', () => {
    const h = new StreamingHistogram(16);
    h.add([0, 0.1, 0.2, 0.3]);
    const w0 = h.width;
    h.add([10]); // far outside: width doubles several times
    expect(h.width / w0).toBeGreaterThanOrEqual(16);
    expect(Math.log2(h.width / w0) % 1).toBe(0); // only doublings
    expect(h.total).toBe(5);
    expect(h.counts.reduce((a, b) => a + b, 0)).toBe(5);
    expect(h.min).toBe(0);
    expect(h.max).toBe(10);
    // Bins still contain their values: the value 10 lies in the last occupied bin.
    const last = [...h.counts]
      .map((c, i) => (c > 0 ? i : -1))
      .filter((i) => i >= 0)
      .pop()!;
    expect(h.lo + last * h.width).toBeLessThanOrEqual(10);
    expect(h.lo + (last + 1) * h.width).toBeGreaterThan(10);
  });

  it('grows downwards for negative data and keeps the size fixed', () => {
    const h = new StreamingHistogram(64);
    for (let k = 0; k < 100; k++) h.add([k, -k * 3]);
    expect(h.counts.length).toBe(64);
    expect(h.total).toBe(200);
    expect(h.lo).toBeLessThanOrEqual(-297);
    expect(h.hi).toBeGreaterThan(99);
  });
});

describe('range methods vs hand-computed ranges', () => {
  // 0, 1, ..., 9999 (uniform).
  const ramp = Float32Array.from({ length: 10000 }, (_, i) => i);

  it('minmax is the exact observed range', () => {
    expect(computeRange(stats([-2.5, 0.25, 7.75]), { method: 'minmax' })).toEqual({ min: -2.5, max: 7.75 });
  });

  it('percentile 99 of 0..9999 cuts 1% at the top and at the bottom', () => {
    const r = computeRange(stats(ramp), { method: 'percentile', percentile: 99 });
    // 99th percentile = 9900, 1st = 100 (within one bin width, 10000/4096 ~ 2.5).
    expect(r.max).toBeCloseTo(9900, -1);
    expect(Math.abs(r.max - 9900)).toBeLessThan(5);
    expect(Math.abs(r.min - 100)).toBeLessThan(5);
  });

  it('symmetric percentile uses |x|: 90th percentile of |x| over -1000..999 is 900', () => {
    const v = Float32Array.from({ length: 2000 }, (_, i) => i - 1000);
    const r = computeRange(stats(v), { method: 'percentile', percentile: 90, symmetric: true });
    expect(Math.abs(r.max - 900)).toBeLessThan(3);
    expect(r.min).toBe(-r.max);
  });

  it('entropy clips rare outliers: uniform [0,1) plus 0.01% at 10 gives a threshold near 1', () => {
    const v = new Float32Array(100000);
    for (let i = 0; i < v.length; i++) v[i] = (i % 10000) / 10000;
    for (let i = 0; i < 10; i++) v[i * 1000 + 1] = 10;
    const r = computeRange(stats(v), { method: 'entropy' });
    expect(r.min).toBe(0);
    expect(r.max).toBeGreaterThan(0.9);
    expect(r.max).toBeLessThan(1.5);
  });

  it('entropy keeps the full range of a plain uniform distribution', () => {
    const v = Float32Array.from({ length: 50000 }, (_, i) => (i % 5000) / 5000);
    const r = computeRange(stats(v), { method: 'entropy' });
    expect(r.max).toBeGreaterThan(0.95);
  });

  it('mse on exponential data (b = 1): clips below the sample max and beats the full range', () => {
    // 200k samples of -ln(u): max ~ ln(200k) = 12.2; the 8-bit MSE-optimal clip is a little lower.
    const n = 200000;
    const v = Float32Array.from({ length: n }, (_, i) => -Math.log((i + 0.5) / n));
    const st = stats(v);
    const r = computeRange(st, { method: 'mse' });
    expect(r.max).toBeLessThan(st.max);
    expect(r.max).toBeGreaterThan(6);
    const err = (max: number): number => {
      const p = activationParams(0, max, DataType.UINT8, false);
      let e = 0;
      for (const x of v) e += (x - fakeQuantize(x, p)) ** 2;
      return e;
    };
    expect(err(r.max)).toBeLessThan(err(st.max));
    // A clean uniform distribution keeps (almost) its full range.
    const u = Float32Array.from({ length: 10000 }, (_, i) => (i % 1000) / 1000);
    expect(computeRange(stats(u), { method: 'mse' }).max).toBeGreaterThan(0.9);
  });
});

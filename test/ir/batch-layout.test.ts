// Moving the sample dim to a model input's batch axis: values against a hand-computed transpose.
import { describe, expect, it } from 'vitest';
import { DataType } from '../../src/ir/dtype.js';
import { moveSampleAxis, sameSample, sampleValue } from '../../src/ir/batch-layout.js';

describe('moveSampleAxis', () => {
  // 3 samples of [2,2] (values 100*sample + 10*row + col) -> [2,3,2] with the samples in dim 1.
  const t = { dtype: DataType.FLOAT, dims: [3, 2, 2], data: Float32Array.from([0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211]) };
  it('axis 1: [B,2,2] -> [2,B,2] (copy)', () => {
    const moved = moveSampleAxis(t, 1);
    expect(moved.dims).toEqual([2, 3, 2]);
    expect(Array.from(moved.data as Float32Array)).toEqual([0, 1, 100, 101, 200, 201, 10, 11, 110, 111, 210, 211]);
  });
  it('axis 2: [B,2,2] -> [2,2,B]', () => {
    const moved = moveSampleAxis(t, 2);
    expect(moved.dims).toEqual([2, 2, 3]);
    expect(Array.from(moved.data as Float32Array)).toEqual([0, 100, 200, 1, 101, 201, 10, 110, 210, 11, 111, 211]);
  });
  it('axis 0, or one sample: the same memory', () => {
    expect(moveSampleAxis(t, 0)).toBe(t);
    const one = { ...t, dims: [1, 2, 6], data: (t.data as Float32Array).subarray(0, 12) };
    expect(moveSampleAxis(one, 1).data).toBe(one.data);
    expect(moveSampleAxis(one, 1).dims).toEqual([2, 1, 6]);
  });
  it('strings move too; sampleValue and sameSample', () => {
    const s = { dtype: DataType.STRING, dims: [2, 2], data: ['a0', 'a1', 'b0', 'b1'] };
    expect(moveSampleAxis(s, 1)).toEqual({ dtype: DataType.STRING, dims: [2, 2], data: ['a0', 'b0', 'a1', 'b1'] });
    expect(sampleValue(t, 1)).toEqual({ dtype: DataType.FLOAT, dims: [2, 2], data: Float32Array.from([100, 101, 110, 111]) });
    const sr = { dtype: DataType.INT64, dims: [3], data: BigInt64Array.of(16000n, 16000n, 8000n) };
    expect([sameSample(sr, 0, 1), sameSample(sr, 1, 2)]).toEqual([true, false]);
  });
});

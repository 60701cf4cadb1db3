// Sample slicing and concatenation along dim 0 (ir/samples.ts).
import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../src/ir/dtype.js';
import { concatSamples, sliceSamples } from '../../src/ir/samples.js';

describe('sliceSamples', () => {
  it('takes samples [1, 3) of a [4, 2] float tensor as a view on the same memory', () => {
    const data = Float32Array.from([0, 1, 10, 11, 20, 21, 30, 31]);
    const t: TensorData = { dtype: DataType.FLOAT, dims: [4, 2], data };
    const s = sliceSamples(t, 1, 3);
    expect(s.dims).toEqual([2, 2]);
    expect(Array.from(s.data as Float32Array)).toEqual([10, 11, 20, 21]);
    data[2] = 99; // a view: the source's change shows through
    expect((s.data as Float32Array)[0]).toBe(99);
  });

  it('halves offsets for packed 4-bit samples and refuses odd sample sizes', () => {
    const packed: TensorData = { dtype: DataType.INT4, dims: [3, 2], data: Uint8Array.from([0x21, 0x43, 0x65]) };
    expect(Array.from(sliceSamples(packed, 1, 3).data as Uint8Array)).toEqual([0x43, 0x65]);
    const odd: TensorData = { dtype: DataType.INT4, dims: [2, 3], data: new Uint8Array(3) };
    expect(() => sliceSamples(odd, 0, 1)).toThrow(/odd size 3/);
  });

  it('copies string samples', () => {
    const t: TensorData = { dtype: DataType.STRING, dims: [3], data: ['a', 'b', 'c'] };
    expect(sliceSamples(t, 2, 3)).toEqual({ dtype: DataType.STRING, dims: [1], data: ['c'] });
  });
});

describe('concatSamples', () => {
  it('joins [1, 2] and [2, 2] int64 tensors into [3, 2] in order', () => {
    const a: TensorData = { dtype: DataType.INT64, dims: [1, 2], data: BigInt64Array.from([1n, 2n]) };
    const b: TensorData = { dtype: DataType.INT64, dims: [2, 2], data: BigInt64Array.from([3n, 4n, 5n, 6n]) };
    const c = concatSamples([a, b]);
    expect(c.dims).toEqual([3, 2]);
    expect(c.data).toBeInstanceOf(BigInt64Array);
    expect(Array.from(c.data as BigInt64Array)).toEqual([1n, 2n, 3n, 4n, 5n, 6n]);
  });

  it('returns a single part as it is, and joins strings', () => {
    const a: TensorData = { dtype: DataType.FLOAT, dims: [1], data: Float32Array.of(1) };
    expect(concatSamples([a])).toBe(a);
    const s = concatSamples([
      { dtype: DataType.STRING, dims: [1], data: ['x'] },
      { dtype: DataType.STRING, dims: [2], data: ['y', 'z'] },
    ]);
    expect(s).toEqual({ dtype: DataType.STRING, dims: [3], data: ['x', 'y', 'z'] });
  });
});

// The capture graph's reductions (ReduceMin/ReduceMax/ReduceSum/Size inside onnxruntime) on a tiny
// graph with NaN and infinities: values against a scan of the whole tensor, the model left as it was.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import { encodeModel } from '../../src/onnx/index.js';
import { canReduce, createStatisticsCapture, inferShapesByRunning } from '../../src/runtime/capture.js';

/** s = x * 2 - 1, l = log(x) (NaN below 0, -Infinity at 0), y = relu(s) (a graph output). */
function model(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 3]);
  const two = b.initializer('two', DataType.FLOAT, [], Float32Array.of(2));
  const one = b.initializer('one', DataType.FLOAT, [], Float32Array.of(1));
  const m = b.node('Mul', [x, two]);
  m.rename('m');
  const s = b.node('Sub', [m, one]);
  s.rename('s');
  const l = b.node('Log', [x]);
  l.rename('l');
  const y = b.node('Relu', [s]);
  y.rename('y');
  b.output(y, DataType.FLOAT, ['N', 3]);
  b.output(l, DataType.FLOAT, ['N', 3]);
  return b.build();
}

const feeds = { x: { dtype: DataType.FLOAT, dims: [2, 3], data: Float32Array.from([0.5, 2, 3, 4, 0, -1]) } };

describe('createStatisticsCapture (reductions inside onnxruntime)', () => {
  it('min, max, finiteness and size per tensor, whole tensors beside them; the model is unchanged', async () => {
    const m = model();
    await inferShapesByRunning(m, feeds);
    const before = encodeModel(m);
    expect(['s', 'l', 'y'].map((n) => canReduce(m, n))).toEqual([true, true, true]);
    expect(['x', 'two'].map((n) => canReduce(m, n))).toEqual([false, false]); // input, constant
    const capture = await createStatisticsCapture(m, { whole: ['x', 's'], reduce: ['s', 'y', 'l'], sizes: ['m'] });
    try {
      const r = await capture.run(feeds);
      // s = [0, 3, 5, 7, -1, -3]; y = relu(s); l has -Infinity (log 0) and NaN (log -1).
      expect(r.reductions.get('s')).toEqual({ min: -3, max: 7, finite: true, size: 6 });
      expect(r.reductions.get('y')).toEqual({ min: 0, max: 7, finite: true, size: 6 });
      expect(r.reductions.get('l')!.finite).toBe(false);
      expect(r.sizes.get('m')).toBe(6);
      expect(Array.from(r.tensors.s!.data as Float32Array)).toEqual([0, 3, 5, 7, -1, -3]);
      expect(r.tensors.x).toBe(feeds.x);
    } finally {
      await capture.release();
    }
    expect(encodeModel(m)).toEqual(before);
  });

  it('release() frees what onnxruntime returned for the run, never the feeds; the next run is unaffected', async () => {
    const m = model();
    await inferShapesByRunning(m, feeds);
    const n = 3 * 2 ** 14; // 192 KiB per tensor: above RELEASE_MIN_BYTES
    const x = Float32Array.from({ length: 3 * n }, (_, i) => (i % 7) - 1);
    const big = { x: { dtype: DataType.FLOAT, dims: [n, 3], data: x } };
    const capture = await createStatisticsCapture(m, { whole: ['x', 's', 'y'], reduce: ['s'] });
    try {
      const r = await capture.run(big);
      const s = r.tensors.s!.data as Float32Array;
      expect(s.length).toBe(3 * n);
      expect(s[1]).toBe(x[1]! * 2 - 1);
      r.release();
      expect([s.length, (r.tensors.y!.data as Float32Array).length]).toEqual([0, 0]);
      expect(r.tensors.x!.data).toBe(x);
      expect(x.length).toBe(3 * n);
      expect(r.reductions.get('s')).toEqual({ min: -3, max: 9, finite: true, size: 3 * n });
      const again = await capture.run(big);
      expect(Array.from((again.tensors.y!.data as Float32Array).subarray(0, 7))).toEqual(Array.from(x.subarray(0, 7), (v) => Math.max(0, 2 * v - 1)));
    } finally {
      await capture.release();
    }
  });

  it('refuses to reduce a tensor it cannot (a graph input) and names a missing one', async () => {
    const m = model();
    await inferShapesByRunning(m, feeds);
    await expect(createStatisticsCapture(m, { reduce: ['x'] })).rejects.toThrow(UsageError);
    await expect(createStatisticsCapture(m, { reduce: ['nope'] })).rejects.toThrow(/'nope'/);
  });
});

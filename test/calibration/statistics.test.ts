// The calibration service: statistics declared by tensor name and kind, one streamed pass over a
// Dataset or a sequence of feeds, against hand-computed values.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import type { Dataset } from '../../src/data/index.js';
import { calibrationBatchSize, CHECK_SAMPLE_COUNT, collectStatistics, DEFAULT_CALIBRATION_COUNT } from '../../src/calibration/index.js';
import { computeRange } from '../../src/passes/quantize/calibrate.js';

/** s = x * 2 - 1, y = relu(s); x is [N, ...rest]. */
function affine(rest: number[]): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', ...rest]);
  const two = b.initializer('two', DataType.FLOAT, [], Float32Array.of(2));
  const one = b.initializer('one', DataType.FLOAT, [], Float32Array.of(1));
  const m = b.node('Mul', [x, two]);
  m.rename('m');
  const s = b.node('Sub', [m, one]);
  s.rename('s');
  const y = b.node('Relu', [s]);
  b.output(y, DataType.FLOAT, ['N', ...rest]);
  return b.build();
}

/** x[n, c, i] = n + 10 c + i for n < 4, c < 2, i < 3. */
function channelData(): Dataset {
  const data = new Float32Array(4 * 2 * 3);
  for (let n = 0; n < 4; n++) for (let c = 0; c < 2; c++) for (let i = 0; i < 3; i++) data[(n * 2 + c) * 3 + i] = n + 10 * c + i;
  return { count: 4, inputs: { x: { dtype: DataType.FLOAT, dims: [4, 2, 3], data } }, source: 'channels.npz', notes: [] };
}

describe('collectStatistics (the calibration service)', () => {
  it('captures an intermediate tensor batch by batch: min/max of x * 2 - 1 over all batches, histogram totals', async () => {
    const model = affine([4]);
    function* batches() {
      // values 0..39 / 10 over 5 batches of 2 samples
      for (let k = 0; k < 5; k++) {
        yield { x: { dtype: DataType.FLOAT, dims: [2, 4], data: Float32Array.from({ length: 8 }, (_, i) => (k * 8 + i) / 10) } };
      }
    }
    let progressCalls = 0;
    const result = await collectStatistics(
      model,
      [
        { tensor: 's', kind: 'histogram' },
        { tensor: 'x', kind: 'range' },
      ],
      batches(),
      { onProgress: () => progressCalls++ },
    );
    expect(progressCalls).toBe(5);
    const st = result.ranges.get('s')!;
    expect(st.min).toBeCloseTo(-1, 6);
    expect(st.max).toBeCloseTo(2 * 3.9 - 1, 5);
    expect(st.count).toBe(40);
    expect(st.histogram!.total).toBe(40);
    const x = result.ranges.get('x')!;
    expect(x.histogram).toBeUndefined();
    expect([x.min, x.max, x.count]).toEqual([0, Math.fround(3.9), 40]);
    expect(computeRange(st, { method: 'percentile', percentile: 100 }).max).toBeCloseTo(6.8, 4);
    expect(result.channels.size).toBe(0);
  });

  it('channel moments along an axis from the end, reduced over samples and the other axes (hand-computed), with the ranges', async () => {
    const model = affine([2, 3]);
    const samples: string[] = [];
    const result = await collectStatistics(
      model,
      [
        { tensor: 'x', kind: 'channel-moments', axis: -2 },
        { tensor: 's', kind: 'channel-moments', axis: -2 },
        { tensor: 's', kind: 'channel-moments', axis: -2 }, // repeated requests merge
        { tensor: 's', kind: 'range' },
        { tensor: 's', kind: 'histogram', bins: 64 }, // a histogram subsumes the range
      ],
      channelData(),
      { batchSize: 3, onProgress: (p) => samples.push(`${p.pass}/${p.passes ?? '?'}:${p.samples}`) },
    );
    // Batches of 3 and 1; 's' has no declared type (its size is unknown before a run), so its
    // moments and histogram come from a second pass, which reports its progress too.
    expect(samples).toEqual(['1/?:3', '1/?:4', '2/2:3', '2/2:4']);
    // Channel 0 holds n + i (n < 4, i < 3): mean 1.5 + 1, variance var(n) + var(i) = 5/4 + 2/3.
    const x = result.channels.get('x')!;
    expect(Array.from(x.mean)).toEqual([2.5, 12.5]);
    expect(x.variance[0]).toBeCloseTo(5 / 4 + 2 / 3, 12);
    expect(x.variance[1]).toBeCloseTo(5 / 4 + 2 / 3, 12);
    const s = result.channels.get('s')!;
    expect(Array.from(s.mean)).toEqual([4, 24]);
    expect(s.variance[0]).toBeCloseTo(4 * (5 / 4 + 2 / 3), 12);
    const range = result.ranges.get('s')!;
    expect([range.min, range.max, range.count, range.histogram!.bins]).toEqual([-1, 2 * 15 - 1, 24, 64]);
  });

  it('refuses an empty data set, conflicting axes and a tensor the model does not have', async () => {
    const model = affine([2, 3]);
    const empty = { ...channelData(), count: 0, inputs: { x: { dtype: DataType.FLOAT, dims: [0, 2, 3], data: new Float32Array(0) } } };
    await expect(collectStatistics(model, [{ tensor: 's', kind: 'range' }], empty)).rejects.toThrow(/channels\.npz: the calibration data set has no samples/);
    await expect(
      collectStatistics(
        model,
        [
          { tensor: 's', kind: 'channel-moments', axis: -1 },
          { tensor: 's', kind: 'channel-moments', axis: -2 },
        ],
        channelData(),
      ),
    ).rejects.toThrow(/tensor 's' asked for channel moments along axes -1 and -2/);
    await expect(collectStatistics(model, [{ tensor: 'nope', kind: 'range' }], channelData())).rejects.toThrow(/'nope'/);
  });

  it("default batch: the model's fixed batch dim, else 16 capped at the sample count; the shared sample counts", () => {
    const data = channelData();
    expect(calibrationBatchSize(affine([2, 3]), data)).toBe(4);
    expect(calibrationBatchSize(affine([2, 3]), { ...data, count: 100 })).toBe(16);
    expect(calibrationBatchSize(affine([2, 3]), { ...data, count: 100 }, 8)).toBe(8);
    const fixed = affine([2, 3]);
    fixed.graph.inputs[0]!.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: [1, 2, 3] };
    expect(calibrationBatchSize(fixed, { ...data, count: 100 }, 8)).toBe(1);
    expect([DEFAULT_CALIBRATION_COUNT, CHECK_SAMPLE_COUNT]).toEqual([100, 64]);
  });
});

// Range methods that do not destroy a model minmax keeps (issue 15 item 5): entropy on one-sided
// tensors (a sigmoid gate, a HardSwish output), bounded tensors kept at minmax, and --calibrate auto.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { StreamingHistogram, type TensorStatistics } from '../../../src/calibration/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { agreement } from '../../../src/metrics/index.js';
import { computeRange, quantizeInt8, type CalibrationMethod } from '../../../src/app/quantize-passes.js';
import { randomFloats, rng } from './models.js';

function stats(values: Float32Array): TensorStatistics {
  const h = new StreamingHistogram(4096);
  h.add(values);
  return { name: 't', min: h.min, max: h.max, count: values.length, histogram: h };
}

describe('entropy on one-sided tensors', () => {
  it('a sigmoid gate in [0.2, 0.8] keeps (nearly) its whole range (it used to collapse to [0, 0.05])', () => {
    const r = rng(3);
    const gate = Float32Array.from({ length: 20000 }, () => 1 / (1 + Math.exp(-(r() * 2 - 1) * 1.3)));
    const range = computeRange(stats(gate), { method: 'entropy', type: DataType.UINT8 });
    expect(range.max).toBeGreaterThan(0.95 * Math.max(...gate));
  });

  it('a HardSwish output keeps its negative dip whole and clips at most 1% at the top', () => {
    const r = rng(4);
    const x = Float32Array.from({ length: 20000 }, () => {
      const v = (r() + r() + r() - 1.5) * 4;
      return (v * Math.min(Math.max(v + 3, 0), 6)) / 6;
    });
    const s = stats(x);
    const range = computeRange(s, { method: 'entropy', type: DataType.UINT8 });
    expect(range.min).toBe(s.min);
    const sorted = [...x].sort((a, b) => a - b);
    expect(range.max).toBeGreaterThanOrEqual(sorted[Math.floor(0.99 * sorted.length)]! - 1e-6);
  });
});

// Conv -> [Sigmoid gate, Conv] -> Mul(x, gate) -> Conv -> output: a squeeze-excite-like gate and a
// signed conv output.
function gated(): Model {
  const b = new GraphBuilder({ opset: 13 });
  const w = (name: string, dims: number[], seed: number, scale: number) =>
    b.initializer(
      name,
      DataType.FLOAT,
      dims,
      randomFloats(
        dims.reduce((a, c) => a * c, 1),
        seed,
        scale,
      ),
    );
  const x = b.input('input', DataType.FLOAT, ['N', 8, 8, 8]);
  const h = b.node('Conv', [x, w('c1.w', [16, 8, 3, 3], 1, 0.2), w('c1.b', [16], 2, 0.2)], { pads: [1, 1, 1, 1] }, { name: 'c1' });
  const g = b.node('Sigmoid', [b.node('Conv', [h, w('g.w', [16, 16, 1, 1], 3, 0.25), w('g.b', [16], 4, 0.3)], {}, { name: 'g' })], {}, { name: 'gate' });
  const m = b.node('Mul', [h, g], {}, { name: 'excite' });
  b.output(b.node('Conv', [m, w('c2.w', [4, 16, 3, 3], 5, 0.1), w('c2.b', [4], 6, 0.1)], { pads: [1, 1, 1, 1] }, { name: 'c2' }), DataType.FLOAT, [
    'N',
    4,
    8,
    8,
  ]);
  return b.build();
}

function data(n: number, seed: number): Dataset {
  return { count: n, inputs: { input: { dtype: DataType.FLOAT, dims: [n, 8, 8, 8], data: randomFloats(n * 512, seed, 1.5) } }, source: 'test', notes: [] };
}

describe('methods on a gated, signed graph', () => {
  it('entropy, percentile and mse stay within 3 dB of minmax; auto is never worse than minmax by more than 0.5 dB', async () => {
    const model = gated();
    const calibration = data(24, 11);
    const held = data(16, 12).inputs;
    const ref = await createRunner(model);
    const want = Object.values(await ref.run(held))[0]!.data as Float32Array;
    await ref.release();
    const sqnr: Record<string, number> = {};
    for (const method of ['minmax', 'percentile', 'entropy', 'mse', 'auto'] as CalibrationMethod[]) {
      const { model: q, report } = await quantizeInt8(model, { calibration, method });
      if (method !== 'minmax') expect(report.calibration.minmaxTensors).toBeGreaterThanOrEqual(1); // the gate
      const r = await createRunner(q);
      sqnr[method] = agreement(want, Object.values(await r.run(held))[0]!.data as Float32Array).sqnrDb;
      await r.release();
      if (method === 'auto') {
        expect(report.calibration.auto!.evaluations).toBeGreaterThan(0);
        expect(report.calibration.auto!.samples).toBe(8);
      }
    }
    for (const m of ['percentile', 'entropy', 'mse']) expect(sqnr[m]!).toBeGreaterThan(sqnr.minmax! - 3);
    expect(sqnr.auto!).toBeGreaterThan(sqnr.minmax! - 0.5);
  });
});

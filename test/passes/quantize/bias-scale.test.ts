// Bias overflow (issue 15 item 4): a bias that does not fit int32 at input scale x weight scale
// enlarges that channel's weight scale instead of being clamped; checked against a float64 reference.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-passes.js';
import { biasWeightScaleFloor, INT32_MAX, quantizeBias, quantizeWeight } from '../../../src/passes/quantize/quant-math.js';
import { rng } from './models.js';

describe('biasWeightScaleFloor', () => {
  it('gives the smallest weight scale at which the bias fits int32', () => {
    const floor = biasWeightScaleFloor([3, 0.1], 1e-5, 2);
    expect(floor[0]).toBeCloseTo((3 / (1e-5 * INT32_MAX)) * (1 + 1e-5), 15);
    const w = quantizeWeight([1e-3, -2e-3, 0.5, 0.25], [2, 2], 0, floor);
    expect(w.scales[0]).toBeGreaterThanOrEqual(floor[0]! * (1 - 1e-7));
    expect(w.scales[1]).toBeCloseTo(0.5 / 127, 9); // untouched: its bias fits
    expect(quantizeBias([3, 0.1], 1e-5, w.scales).saturated).toBe(0);
    expect(quantizeBias([3, 0.1], 1e-5, quantizeWeight([1e-3, -2e-3, 0.5, 0.25], [2, 2], 0).scales).saturated).toBe(1);
  });
});

// y[c] = sum_k w[c][k] x[k] + b[c]: a 1x1 conv whose input spans +-1e-3 and whose channel 0 has
// tiny weights and a bias of 3 (the shape a folded BatchNorm leaves on a dead channel).
const W = [1e-3, -2e-3, 0.5, 0.25];
const B = [3, 0.1];
function conv(): Model {
  const b = new GraphBuilder({ opset: 13 });
  const x = b.input('input', DataType.FLOAT, ['N', 2, 4, 4]);
  const y = b.node(
    'Conv',
    [x, b.initializer('w', DataType.FLOAT, [2, 2, 1, 1], Float32Array.from(W)), b.initializer('b', DataType.FLOAT, [2], Float32Array.from(B))],
    {},
    { name: 'conv' },
  );
  b.output(y, DataType.FLOAT, ['N', 2, 4, 4]);
  return b.build();
}

describe('bias overflow: weight scale enlarged, not clamped', () => {
  it('matches a float64 reference within the output quantization step', async () => {
    const r = rng(5);
    const n = 8;
    const data = Float32Array.from({ length: n * 32 }, () => (r() * 2 - 1) * 1e-3);
    const calibration: Dataset = { count: n, inputs: { input: { dtype: DataType.FLOAT, dims: [n, 2, 4, 4], data } }, source: 'test', notes: [] };
    const { model, report } = await quantizeInt8(conv(), { calibration });
    expect(report.qdq.biasSaturated).toBe(0);
    expect(report.qdq.biasScaleAdjustments).toEqual([expect.objectContaining({ node: 'conv', channels: 1 })]);
    expect(report.notes.some((s) => s.includes('weight scale was enlarged'))).toBe(true);
    const runner = await createRunner(model);
    const got = Object.values(await runner.run({ input: { dtype: DataType.FLOAT, dims: [n, 2, 4, 4], data } }))[0]!;
    await runner.release();
    const out = got.data as Float32Array;
    // Output range [0, ~3.003]: one uint8 step.
    let maxRef = 0;
    const ref = new Float64Array(out.length);
    for (let s = 0; s < n; s++) {
      for (let c = 0; c < 2; c++) {
        for (let p = 0; p < 16; p++) {
          const x0 = data[s * 32 + p]!;
          const x1 = data[s * 32 + 16 + p]!;
          const v = W[c * 2]! * x0 + W[c * 2 + 1]! * x1 + B[c]!;
          ref[s * 32 + c * 16 + p] = v;
          maxRef = Math.max(maxRef, v);
        }
      }
    }
    const step = maxRef / 255;
    let worst = 0;
    for (let i = 0; i < out.length; i++) worst = Math.max(worst, Math.abs(out[i]! - ref[i]!));
    expect(worst).toBeLessThanOrEqual(step);
    // Clamping would have put channel 0's bias at INT32_MAX x s_x x s_w: off by about 2.74.
    const sx = (Math.max(...data) - Math.min(...data)) / 255;
    const clamped = INT32_MAX * sx * (2e-3 / 127);
    expect(3 - clamped).toBeGreaterThan(2.5);
    expect(3 - clamped).toBeGreaterThan(100 * step);
  });
});

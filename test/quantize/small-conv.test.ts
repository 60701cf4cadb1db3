// The small-reduction Conv rule and the float -> int8 boundary behind a MaxPool, on the residual
// CNN (1-channel stem: reduction 1 x 3 x 3 = 9). The mixed graph must match the same QDQ model
// run without graph optimizations (Q/DQ as written) to within one output quantization step, and
// the FP32 model closely.
import { describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runtime/index.js';
import { quantizeInt8 } from '../../src/passes/quantize/int8.js';
import { dataset, residualCnn } from './models.js';

describe('small-reduction Conv left in float', () => {
  it('by default a Cin=1 stem conv stays float with its reason, so does the Add reading its pool; the boundary Q after the MaxPool is per-axis; numerics hold', async () => {
    const fp32 = residualCnn(17, 8, 1);
    const calib = dataset('input', [16, 1, 12, 12], 5);
    // The default minConvReduction (16) applies.
    const { model, report } = await quantizeInt8(fp32, { calibration: calib });
    const skipped = report.qdq.skipped.find((s) => s.node === 'stem.conv');
    expect(skipped?.reason).toMatch(/reduction size 9 .*< 16/);
    expect(report.qdq.byOpType.Conv).toBe(2);
    // The residual Add reads the float pool output: it stays float too (int8 Add only between int8 tensors).
    expect(report.qdq.skipped.find((s) => s.node === 'block.add')?.reason).toMatch(/reads float tensor/);
    const g = model.graph;
    expect(g.nodes.find((n) => n.name === 'stem.conv')!.inputs[1]!.producer).toBeNull();
    const boundary = g.nodes.find((n) => n.opType === 'QuantizeLinear' && n.inputs[0]!.producer?.opType === 'MaxPool')!;
    expect(boundary.getInt('axis', -1)).toBe(1);
    expect(g.constantTensor(boundary.inputs[1]!)!.dims).toEqual([8]);
    // Readers still see a scalar-scale DequantizeLinear (needed for QLinearConv fusion).
    for (const c of boundary.outputs[0]!.consumers) expect(g.constantTensor(c.inputs[1]!)!.dims).toEqual([]);

    const feeds = { input: { ...calib.inputs.input!, dims: [4, 1, 12, 12], data: (calib.inputs.input!.data as Float32Array).subarray(0, 4 * 144) } };
    const run = async (m: typeof model, level: 'disabled' | 'all'): Promise<Float32Array> => {
      const r = await createRunner(m, { graphOptimizationLevel: level, intraOpThreads: 1 });
      try {
        return (await r.run(feeds)).logits!.data as Float32Array;
      } finally {
        await r.release();
      }
    };
    const ref = await run(fp32, 'disabled');
    const asWritten = await run(model, 'disabled');
    const fused = await run(model, 'all');
    const range = Math.max(...ref) - Math.min(...ref);
    let maxFused = 0;
    let maxRef = 0;
    for (let i = 0; i < ref.length; i++) {
      maxFused = Math.max(maxFused, Math.abs(fused[i]! - asWritten[i]!));
      maxRef = Math.max(maxRef, Math.abs(asWritten[i]! - ref[i]!));
    }
    // One uint8 step of the logits range, and a few percent of the range against FP32.
    expect(maxFused).toBeLessThanOrEqual((range / 255) * 1.01 + 1e-6);
    expect(maxRef).toBeLessThan(range * 0.05);
  });
});

// The small-reduction Conv rule and the float -> int8 boundary behind a MaxPool, on the residual
// CNN (1-channel stem: reduction 1 x 3 x 3 = 9). The mixed graph must match the same QDQ model
// run without graph optimizations (Q/DQ as written) to within one output quantization step, and
// the FP32 model closely.
import { describe, expect, it } from 'vitest';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-int8.js';
import { dataset, residualCnn } from './models.js';

describe('small-reduction Conv left in float', () => {
  it('by default a Cin=1 stem conv stays float with its reason; the Add reading its pool runs int8 through a layout anchor; the boundary Q after the MaxPool is per-axis; numerics hold', async () => {
    const fp32 = residualCnn(17, 8, 1);
    const calib = dataset('input', [16, 1, 12, 12], 5);
    // The default minConvReduction (16) applies.
    const { model, report } = await quantizeInt8(fp32, { calibration: calib });
    const skipped = report.qdq.skipped.find((s) => s.node === 'stem.conv');
    expect(skipped?.reason).toMatch(/reduction size 9 .*< 16/);
    expect(report.qdq.byOpType.Conv).toBe(2);
    // The residual Add reads the float pool output, which block.conv1 reads too: both read it
    // through an identity int8 conv (onnxruntime then keeps the int8 Add in NHWC).
    expect(report.qdq.byOpType.Add).toBe(1);
    expect(report.qdq.layoutAnchors).toEqual([{ tensor: 'pool_out', channels: 8, enables: ['block.add'] }]);
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

describe('grouped convs with few channels per group left in float', () => {
  /** Conv 1x1 (16 -> 32) -> Relu -> grouped 3x3 (32 channels, `group` groups) -> Relu -> Conv 1x1 (32 -> 8). */
  async function grouped(group: number, options: { minConvReduction?: number } = {}) {
    const { DataType, GraphBuilder } = await import('../../../src/ir/index.js');
    const { randomFloats } = await import('./models.js');
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('input', DataType.FLOAT, ['N', 16, 8, 8]);
    const conv = (inp: ReturnType<typeof b.input>, cin: number, cout: number, k: number, g: number, name: string, seed: number) =>
      b.node(
        'Conv',
        [inp, b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin / g, k, k], randomFloats((cout * cin * k * k) / g, seed, 0.3))],
        { kernel_shape: [k, k], pads: k === 3 ? [1, 1, 1, 1] : [0, 0, 0, 0], group: g },
        { name },
      );
    const a = b.node('Relu', [conv(x, 16, 32, 1, 1, 'pw1', 140)], {}, { name: 'pw1.relu' });
    const gconv = b.node('Relu', [conv(a, 32, 32, 3, group, 'grouped', 141)], {}, { name: 'grouped.relu' });
    b.output(conv(gconv, 32, 8, 1, 1, 'pw2', 142), DataType.FLOAT, ['N', 8, 8, 8]);
    return quantizeInt8(b.build(), { calibration: dataset('input', [8, 16, 8, 8], 143), ...options });
  }

  it('4 channels per group (ResNeXt 32x4d): float with the reason, and its reader too (onnxruntime would fuse a DQ -> Conv -> Q sandwich anyway); 8 per group or the rule off: int8', async () => {
    const narrow = await grouped(8);
    expect(narrow.report.qdq.skipped.find((s) => s.node === 'grouped')?.reason).toMatch(/^grouped conv with 4 input channels per group \(< 8\)/);
    expect(narrow.report.qdq.skipped.find((s) => s.node === 'pw2')?.reason).toBe("reads the output of FP32 node 'grouped'");
    expect(narrow.report.qdq.byOpType.Conv).toBe(1);
    expect((await grouped(4)).report.qdq.byOpType.Conv).toBe(3);
    expect((await grouped(8, { minConvReduction: 0 })).report.qdq.byOpType.Conv).toBe(3);
    expect((await grouped(32)).report.qdq.byOpType.Conv).toBe(3); // depthwise: its own fast int8 kernel
  });
});

describe('narrow image stems left in float', () => {
  /** NHWC image [N, 16, 16, 3] -> Transpose -> stem 3x3/2 (3 -> `stemOut`) -> Relu -> conv 3x3 (stemOut -> 16) -> Relu -> conv 1x1 (16 -> 32). */
  async function stemNet(stemOut: number, options: { minConvReduction?: number } = {}) {
    const { DataType, GraphBuilder } = await import('../../../src/ir/index.js');
    const { randomFloats } = await import('./models.js');
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('input', DataType.FLOAT, ['N', 16, 16, 3]);
    const conv = (inp: ReturnType<typeof b.input>, cin: number, cout: number, k: number, stride: number, name: string, seed: number) =>
      b.node(
        'Relu',
        [
          b.node(
            'Conv',
            [inp, b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin, k, k], randomFloats(cout * cin * k * k, seed, 0.3))],
            { kernel_shape: [k, k], strides: [stride, stride], pads: k === 3 ? [1, 1, 1, 1] : [0, 0, 0, 0] },
            { name },
          ),
        ],
        {},
        { name: `${name}.relu` },
      );
    const stem = conv(b.node('Transpose', [x], { perm: [0, 3, 1, 2] }, { name: 'to_nchw' }), 3, stemOut, 3, 2, 'stem', 150);
    b.output(conv(conv(stem, stemOut, 16, 3, 1, 'c1', 151), 16, 32, 1, 1, 'c2', 152), DataType.FLOAT, ['N', 32, 8, 8]);
    return quantizeInt8(b.build(), { calibration: dataset('input', [8, 16, 16, 3], 153), ...options });
  }

  it('a 3 -> 16 stem at the model input stays float with the reason, the 16-channel conv after it does not; 32 outputs or the rule off: int8', async () => {
    const narrow = await stemNet(16);
    expect(narrow.report.qdq.skipped.find((s) => s.node === 'stem')?.reason).toMatch(/^image stem with 16 output channels \(< 32\)/);
    expect(narrow.report.qdq.byOpType.Conv).toBe(2); // c1 (16 -> 16 channels, not a stem) and c2
    expect((await stemNet(32)).report.qdq.byOpType.Conv).toBe(3);
    expect((await stemNet(16, { minConvReduction: 0 })).report.qdq.byOpType.Conv).toBe(3);
  });
});

describe('a light op between float ops stays float', () => {
  it('the SiLU after a float narrow stem: its Sigmoid stays float with its Mul (no Q -> QLinearSigmoid -> DQ sandwich); the conv after it runs int8; numerics hold', async () => {
    const { DataType, GraphBuilder } = await import('../../../src/ir/index.js');
    const { randomFloats } = await import('./models.js');
    const { checkFusion } = await import('../../../src/app/quantize-fusion-check.js');
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('input', DataType.FLOAT, ['N', 3, 16, 16]);
    const conv = (inp: ReturnType<typeof b.input>, cin: number, cout: number, name: string, seed: number) =>
      b.node(
        'Conv',
        [inp, b.initializer(`${name}.w`, DataType.FLOAT, [cout, cin, 3, 3], randomFloats(cout * cin * 9, seed, 0.3))],
        { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
        { name },
      );
    const silu = (v: ReturnType<typeof b.input>, name: string) =>
      b.node('Mul', [v, b.node('Sigmoid', [v], {}, { name: `${name}.sig` })], {}, { name: `${name}.silu` });
    const h = silu(conv(x, 3, 16, 'stem', 160), 'stem');
    const y = silu(conv(h, 16, 32, 'c1', 161), 'c1');
    b.output(conv(y, 32, 8, 'c2', 162), DataType.FLOAT, ['N', 8, 16, 16]);
    const fp32 = b.build();
    const calib = dataset('input', [8, 3, 16, 16], 163);
    const { model, report } = await quantizeInt8(fp32, { calibration: calib });
    const reason = (node: string) => report.qdq.skipped.find((s) => s.node === node)?.reason;
    expect(reason('stem')).toMatch(/^image stem/);
    expect(reason('stem.silu')).toMatch(/^reads float tensor/);
    expect(reason('stem.sig')).toMatch(/^between float ops/);
    // The second SiLU reads an int8 conv output: QLinearSigmoid and QLinearMul.
    expect(report.qdq.byOpType).toEqual({ Conv: 2, Sigmoid: 1, Mul: 1 });
    expect((await checkFusion(model)).unfused).toEqual([]);
    const feeds = { input: { ...calib.inputs.input!, dims: [2, 3, 16, 16], data: (calib.inputs.input!.data as Float32Array).subarray(0, 2 * 768) } };
    const run = async (m: typeof model): Promise<Float32Array> => {
      const r = await createRunner(m, { intraOpThreads: 1 });
      try {
        return Object.values(await r.run(feeds))[0]!.data as Float32Array;
      } finally {
        await r.release();
      }
    };
    const [want, got] = [await run(fp32), await run(model)];
    const range = Math.max(...want) - Math.min(...want);
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
    expect(worst).toBeLessThan(range * 0.05);
  });
});

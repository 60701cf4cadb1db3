// Input-channel padding of quantized convs at a float -> int8 boundary: which convs qualify, what
// the graph becomes, and that onnxruntime computes exactly the numbers of the unpadded model (the
// added channels multiply zero weights), both as written and with every graph optimization.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-int8.js';
import { createRunner } from '../../../src/runtime/index.js';
import { dataset, randomFloats } from './models.js';

interface ConvSpec {
  cin: number;
  k: number;
  group?: number;
  cout?: number;
}

/** input -> Conv(spec; 32 outputs unless given, as real stems have: narrower ones stay float) -> Relu -> Conv(cout -> 8, 3x3) -> Relu -> GAP -> Flatten -> Gemm. */
function convNet({ cin, k, group = 1, cout = 32 }: ConvSpec): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', DataType.FLOAT, ['N', cin, 10, 10]);
  const w0 = b.initializer('stem.w', DataType.FLOAT, [cout, cin / group, k, k], randomFloats((cout * cin * k * k) / group, 3, 0.4));
  const b0 = b.initializer('stem.b', DataType.FLOAT, [cout], randomFloats(cout, 4, 0.1));
  const p = (k - 1) / 2;
  const c0 = b.node('Conv', [x, w0, b0], { pads: [p, p, p, p], group }, { name: 'stem' });
  const r0 = b.node('Relu', [c0], {}, { name: 'stem.relu' });
  const w1 = b.initializer('conv1.w', DataType.FLOAT, [8, cout, 3, 3], randomFloats(8 * cout * 9, 5, 0.2));
  const c1 = b.node('Conv', [r0, w1], { pads: [1, 1, 1, 1] }, { name: 'conv1' });
  const r1 = b.node('Relu', [c1], {}, { name: 'conv1.relu' });
  const gap = b.node('GlobalAveragePool', [r1], {}, { name: 'gap' });
  const flat = b.node('Flatten', [gap], { axis: 1 }, { name: 'flatten' });
  const fw = b.initializer('fc.w', DataType.FLOAT, [4, 8], randomFloats(32, 6, 0.5));
  const logits = b.node('Gemm', [flat, fw], { transB: 1 }, { name: 'fc', outputs: ['logits'] }) as Value[];
  b.output(logits[0]!, DataType.FLOAT, ['N', 4]);
  return b.build();
}

async function run(model: Model, feeds: Record<string, import('../../../src/ir/dtype.js').TensorData>, level: 'disabled' | 'all'): Promise<Float32Array> {
  const r = await createRunner(model, { graphOptimizationLevel: level, intraOpThreads: 1 });
  try {
    return (await r.run(feeds)).logits!.data as Float32Array;
  } finally {
    await r.release();
  }
}

describe('input-channel padding', () => {
  it('pads a 3-channel 3x3 stem to 4 channels: Pad before the Q, zero weights, identical outputs', async () => {
    const fp32 = convNet({ cin: 3, k: 3 });
    const calib = dataset('input', [16, 3, 10, 10], 7);
    const padded = await quantizeInt8(fp32, { calibration: calib });
    const plain = await quantizeInt8(fp32, { calibration: calib, padChannels: false });
    expect(padded.report.qdq.paddedConvs).toEqual([{ node: 'stem', tensor: 'input', from: 3, to: 4 }]);
    expect(plain.report.qdq.paddedConvs).toEqual([]);

    const g = padded.model.graph;
    const pad = g.nodes.find((n) => n.opType === 'Pad')!;
    expect(pad.inputs[0]!.name).toBe('input');
    expect([...(g.constantTensor(pad.inputs[1]!)!.data as BigInt64Array)].map(Number)).toEqual([0, 0, 0, 0, 0, 1, 0, 0]);
    expect(pad.outputs[0]!.consumers.map((n) => n.opType)).toEqual(['QuantizeLinear']);
    const stem = g.nodes.find((n) => n.name === 'stem')!;
    const wq = g.constantTensor(stem.inputs[1]!.producer!.inputs[0]!)!;
    expect(wq.dims).toEqual([32, 4, 3, 3]);
    const w = wq.data as Int8Array;
    const plainW = plain.model.graph.constantTensor(plain.model.graph.nodes.find((n) => n.name === 'stem')!.inputs[1]!.producer!.inputs[0]!)!.data as Int8Array;
    for (let o = 0; o < 32; o++) {
      // The original 3 channels keep their int8 values; channel 3 is all zeros.
      expect([...w.subarray(o * 36, o * 36 + 27)]).toEqual([...plainW.subarray(o * 27, o * 27 + 27)]);
      expect([...w.subarray(o * 36 + 27, o * 36 + 36)]).toEqual(new Array(9).fill(0));
    }
    // The graph input keeps its declared shape; nothing else reads it.
    expect(g.inputs[0]!.consumers).toEqual([pad]);

    const feeds = { input: { dtype: DataType.FLOAT, dims: [5, 3, 10, 10], data: randomFloats(1500, 11) } };
    for (const level of ['disabled', 'all'] as const) {
      const a = await run(padded.model, feeds, level);
      const b = await run(plain.model, feeds, level);
      expect([...a]).toEqual([...b]);
    }
    // And both stay close to FP32 (a few output steps).
    const ref = await run(fp32, feeds, 'disabled');
    const got = await run(padded.model, feeds, 'all');
    const range = Math.max(...ref) - Math.min(...ref);
    for (let i = 0; i < ref.length; i++) expect(Math.abs(got[i]! - ref[i]!)).toBeLessThan(range * 0.05);
  });

  it('pads 1x1, 3x3 and 5x5 convs; leaves 7x7 kernels, aligned channels and grouped convs alone', async () => {
    const cases: [ConvSpec, number | null][] = [
      [{ cin: 1, k: 3 }, 4],
      [{ cin: 1, k: 1 }, 4],
      [{ cin: 6, k: 3 }, 8],
      [{ cin: 3, k: 5 }, 4],
      [{ cin: 1, k: 7 }, null],
      [{ cin: 4, k: 3 }, null],
      [{ cin: 2, k: 3, group: 2, cout: 8 }, null],
    ];
    for (const [spec, to] of cases) {
      // minConvReduction 0: the 1-channel 3x3 stem (reduction 9) would otherwise stay float.
      const { report, model } = await quantizeInt8(convNet(spec), { calibration: dataset('input', [8, spec.cin, 10, 10], 2), minConvReduction: 0 });
      expect(
        report.qdq.paddedConvs.map((c) => c.to),
        JSON.stringify(spec),
      ).toEqual(to === null ? [] : [to]);
      expect(model.graph.nodes.some((n) => n.opType === 'Pad')).toBe(to !== null);
    }
  });

  it('never pads a conv whose input comes from another quantized node (no float tensor to pad)', async () => {
    // conv1 reads the stem's 34-channel output, a tensor of the int8 region (Conv+Relu fuse with its Q).
    const { report } = await quantizeInt8(convNet({ cin: 4, k: 3, cout: 34 }), { calibration: dataset('input', [8, 4, 10, 10], 2) });
    expect(report.qdq.paddedConvs).toEqual([]);
  });

  it('by default a 1-channel 1x1 conv is quantized and padded, a 1-channel 3x3 one stays float', async () => {
    const oneByOne = await quantizeInt8(convNet({ cin: 1, k: 1 }), { calibration: dataset('input', [8, 1, 10, 10], 2) });
    expect(oneByOne.report.qdq.paddedConvs.map((c) => c.node)).toEqual(['stem']);
    const threeByThree = await quantizeInt8(convNet({ cin: 1, k: 3 }), { calibration: dataset('input', [8, 1, 10, 10], 2) });
    expect(threeByThree.report.qdq.paddedConvs).toEqual([]);
    expect(threeByThree.report.qdq.skipped.map((s) => s.node)).toContain('stem');
  });

  it('depthwise 3x3 convs (reduction 9) are quantized by default: the small-reduction rule is for ungrouped convs', async () => {
    const dw = await quantizeInt8(depthwiseNet(), { calibration: dataset('input', [8, 3, 10, 10], 2) });
    expect(dw.report.qdq.skipped.filter((s) => s.opType === 'Conv')).toEqual([]);
    expect(dw.report.qdq.byOpType.Conv).toBe(2);
  });
});

/** input(3ch) -> Conv 3->32 3x3 -> Relu -> depthwise Conv 32x(1x3x3) -> Relu -> GAP -> Flatten -> Gemm. */
function depthwiseNet(): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', DataType.FLOAT, ['N', 3, 10, 10]);
  const c0 = b.node('Relu', [
    b.node('Conv', [x, b.initializer('w0', DataType.FLOAT, [32, 3, 3, 3], randomFloats(864, 3, 0.3))], { pads: [1, 1, 1, 1] }, { name: 'stem' }),
  ]);
  const dw = b.node('Relu', [
    b.node('Conv', [c0, b.initializer('w1', DataType.FLOAT, [32, 1, 3, 3], randomFloats(288, 4, 0.5))], { pads: [1, 1, 1, 1], group: 32 }, { name: 'dw' }),
  ]);
  const flat = b.node('Flatten', [b.node('GlobalAveragePool', [dw])], { axis: 1 });
  const logits = b.node(
    'Gemm',
    [flat, b.initializer('fc.w', DataType.FLOAT, [4, 32], randomFloats(128, 6, 0.5))],
    { transB: 1 },
    { name: 'fc', outputs: ['logits'] },
  ) as Value[];
  b.output(logits[0]!, DataType.FLOAT, ['N', 4]);
  return b.build();
}

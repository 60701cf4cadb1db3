// Static INT8 on an attention block built in code: the Softmax output is quantized on the fixed
// [0, 1] grid onnxruntime's QLinearSoftmax expects (a calibrated range wrecked the outputs), the
// report lists speed causes (a transformer-style graph, HardSwish, SiLU around depthwise convs:
// printed only beside a measured speed, test/app/speed-advice.test.ts) apart from its notes, and unnamed nodes (common in
// hand-built and some exported models) get stable names so reports, --exclude-nodes and the
// per-node analysis can tell them apart.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { agreement } from '../../../src/metrics/index.js';
import { analyzeSensitivity, checkFusion, quantizeInt8 } from '../../../src/app/quantize-passes.js';
import { dataset, randomFloats, residualCnn } from './models.js';

const [T, D] = [8, 16];

/** x [N, T, D] -> LayerNorm -> q = x Wq; softmax(q q^T / 4) -> att (x Wv) -> mean over T -> logits. */
function attention(named: boolean): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', T, D]);
  const name = (n: string) => ({ name: n });
  const w = (n: string, seed: number) => b.initializer(n, DataType.FLOAT, [D, D], randomFloats(D * D, seed, 0.5));
  const ln = b.node(
    'LayerNormalization',
    [x, b.initializer('g', DataType.FLOAT, [D], randomFloats(D, 3, 0.1, 1)), b.initializer('b', DataType.FLOAT, [D], randomFloats(D, 4, 0.1))],
    { axis: -1 },
    name('ln'),
  );
  const q = b.node('MatMul', [ln, w('wq', 5)], {}, name('q'));
  const v = b.node('MatMul', [ln, w('wv', 6)], {}, name('v'));
  const scores = b.node('MatMul', [q, b.node('Transpose', [q], { perm: [0, 2, 1] }, name('qt'))], {}, name('scores'));
  const scaled = b.node('Mul', [scores, b.initializer('scale', DataType.FLOAT, [], Float32Array.of(0.25))], {}, name('scaled'));
  const att = b.node('Softmax', [scaled], { axis: -1 }, name('softmax'));
  const mixed = b.node('MatMul', [att, v], {}, name('mix'));
  const pooled = b.node('ReduceMean', [mixed], { axes: [1], keepdims: 0 }, name('pool'));
  const [logits] = b.node(
    'Gemm',
    [pooled, b.initializer('fc', DataType.FLOAT, [4, D], randomFloats(4 * D, 7, 0.5))],
    { transB: 1 },
    { ...name('fc'), outputs: ['logits'] },
  ) as Value[];
  b.output(logits!, DataType.FLOAT, ['N', 4]);
  const model = b.build();
  // The builder names every node; clear them for the unnamed case, as some exporters leave them.
  if (!named) for (const n of model.graph.nodes) n.name = '';
  return model;
}

async function logits(model: Model, x: Float32Array, n: number): Promise<Float32Array> {
  const r = await createRunner(model, { intraOpThreads: 1 });
  try {
    return (await r.run({ x: { dtype: DataType.FLOAT, dims: [n, T, D], data: x } })).logits!.data as Float32Array;
  } finally {
    await r.release();
  }
}

describe('static INT8 on an attention block', () => {
  it('quantizes the Softmax output as [0, 1] in steps of 1/256 and stays close to FP32 in onnxruntime (QLinearSoftmax)', async () => {
    const fp32 = attention(true);
    const calib = dataset('x', [32, T, D], 11);
    const { model, report } = await quantizeInt8(fp32, { calibration: calib });
    const q = model.graph.nodes.find((n) => n.opType === 'QuantizeLinear' && n.inputs[0]!.producer?.opType === 'Softmax')!;
    expect(Array.from(model.graph.constantTensor(q.inputs[1]!)!.toFloat64())).toEqual([1 / 256]);
    expect(Array.from(model.graph.constantTensor(q.inputs[2]!)!.toFloat64())).toEqual([0]);
    const x = calib.inputs.x!.data as Float32Array;
    const sqnr = agreement(await logits(fp32, x, 32), await logits(model, x, 32)).sqnrDb;
    expect(sqnr).toBeGreaterThan(25); // a calibrated Softmax range gave single digits
    expect(report.notes).toEqual([]);
    expect(report.speedCauses.map((c) => c.cause)).toEqual(['transformer']);
    expect(report.speedCauses[0]!.text).toMatch(
      /^Transformer-style graph \(LayerNormalization, 2 MatMul\(s\) with weights on 3-D activations\).*--mode int8-dynamic/,
    );
    expect(report.speedCauses[0]!.text).not.toMatch(/usually|often|slower|faster/);
  });

  it('a bias Add after a 3-D MatMul stays float, so onnxruntime folds MatMul + bias into MatMulIntegerToFloat', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', T, D]);
    const h = b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [D, D], randomFloats(D * D, 21, 0.4))], {}, { name: 'fc1' });
    const biased = b.node('Add', [h, b.initializer('b1', DataType.FLOAT, [D], randomFloats(D, 22, 0.2))], {}, { name: 'fc1_bias' });
    const [y] = b.node(
      'MatMul',
      [b.node('Relu', [biased], {}, { name: 'act' }), b.initializer('w2', DataType.FLOAT, [D, 4], randomFloats(D * 4, 23, 0.4))],
      {},
      { name: 'fc2', outputs: ['logits'] },
    ) as Value[];
    b.output(y!, DataType.FLOAT, ['N', T, 4]);
    const fp32 = b.build();
    const calib = dataset('x', [16, T, D], 24);
    const { model, report } = await quantizeInt8(fp32, { calibration: calib });
    expect(report.qdq.skipped).toContainEqual({ node: 'fc1_bias', opType: 'Add', reason: expect.stringMatching(/^bias Add after a MatMul/) });
    const fusion = await checkFusion(model, { keptFloat: report.qdq.skipped });
    expect(fusion.integerKernels.MatMulIntegerToFloat).toBeGreaterThanOrEqual(1);
    expect(fusion.unfused).toEqual([]);
    const r = await createRunner(model, { intraOpThreads: 1 });
    const f = await createRunner(fp32, { intraOpThreads: 1 });
    const feeds = { x: calib.inputs.x! };
    const sqnr = agreement((await f.run(feeds)).logits!.data as Float32Array, (await r.run(feeds)).logits!.data as Float32Array).sqnrDb;
    await Promise.all([r.release(), f.release()]);
    expect(sqnr).toBeGreaterThan(30);
  });

  it('HardSwish after a conv: a speed cause says it has no int8 form and runs in float between DQ and Q', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 4, 8, 8]);
    const c = b.node('Conv', [x, b.initializer('w', DataType.FLOAT, [8, 4, 3, 3], randomFloats(288, 71, 0.3))], { pads: [1, 1, 1, 1] }, { name: 'conv' });
    b.output(
      b.node(
        'Conv',
        [b.node('HardSwish', [c], {}, { name: 'hs' }), b.initializer('w2', DataType.FLOAT, [2, 8, 1, 1], randomFloats(16, 72, 0.3))],
        {},
        { name: 'head' },
      ),
      DataType.FLOAT,
      ['N', 2, 8, 8],
    );
    const { report } = await quantizeInt8(b.build(), { calibration: dataset('x', [8, 4, 8, 8], 73) });
    expect(report.notes).toEqual([]);
    expect(report.speedCauses).toHaveLength(1);
    expect(report.speedCauses[0]!.cause).toBe('hard-activations');
    expect(report.speedCauses[0]!.text).toMatch(
      /^1 HardSwish\/HardSigmoid node\(s\): onnxruntime folds them into float convolutions for free but has no int8 form/,
    );
  });

  it('SiLU around a depthwise conv: a speed cause naming the Sigmoid/Mul passes; none without depthwise', async () => {
    const build = (group: number) => {
      const b = new GraphBuilder({ opset: 17 });
      const x = b.input('x', DataType.FLOAT, ['N', 4, 8, 8]);
      const c = b.node(
        'Conv',
        [x, b.initializer('w', DataType.FLOAT, [4, 4 / group, 3, 3], randomFloats(36 * (4 / group), 81, 0.3))],
        { pads: [1, 1, 1, 1], group },
        { name: 'conv' },
      );
      const silu = b.node('Mul', [c, b.node('Sigmoid', [c], {}, { name: 'sig' })], {}, { name: 'silu' });
      b.output(b.node('Conv', [silu, b.initializer('w2', DataType.FLOAT, [2, 4, 1, 1], randomFloats(8, 82, 0.3))], {}, { name: 'head' }), DataType.FLOAT, [
        'N',
        2,
        8,
        8,
      ]);
      return b.build();
    };
    const depthwise = await quantizeInt8(build(4), { calibration: dataset('x', [8, 4, 8, 8], 83) });
    expect(depthwise.report.notes).toEqual([]);
    expect(depthwise.report.speedCauses).toHaveLength(1);
    expect(depthwise.report.speedCauses[0]!.text).toMatch(/^1 Sigmoid-gated Mul\(s\) \(SiLU\/Swish, squeeze-excitation\) around 1 depthwise conv\(s\)/);
    const regular = await quantizeInt8(build(1), { calibration: dataset('x', [8, 4, 8, 8], 83) });
    expect(regular.report.notes).toEqual([]);
    expect(regular.report.speedCauses).toEqual([]);
  });

  it('no transformer speed cause on a CNN', async () => {
    const { report } = await quantizeInt8(residualCnn(), { calibration: dataset('input', [8, 2, 12, 12], 2) });
    expect(report.notes).toEqual([]);
    expect(report.speedCauses).toEqual([]);
  });

  it('unnamed nodes get <opType>_<output> names: distinct report rows and per-node analysis', async () => {
    const fp32 = attention(false);
    expect(fp32.graph.nodes.every((n) => n.name === '')).toBe(true);
    const calib = dataset('x', [16, T, D], 12);
    const { report, context } = await quantizeInt8(fp32, { calibration: calib });
    expect(report.preprocess.nodesNamed).toBe(fp32.graph.nodes.length);
    const names = report.qdq.quantized.map((q) => q.node);
    expect(names).toContain(`MatMul_${fp32.graph.nodes.find((n) => n.opType === 'MatMul')!.outputs[0]!.name}`);
    expect(new Set(names).size).toBe(names.length);
    // Each analysis row quantizes one node only, so the rows differ (with empty names every row
    // quantized every unnamed node and all rows were the same).
    const rows = await analyzeSensitivity(context, {});
    expect(new Set(rows.map((r) => r.node)).size).toBe(rows.length);
    expect(new Set(rows.map((r) => r.sqnrDb.toFixed(3))).size).toBeGreaterThan(1);
    // The input model keeps its (empty) names.
    expect(fp32.graph.nodes.every((n) => n.name === '')).toBe(true);
  });
});

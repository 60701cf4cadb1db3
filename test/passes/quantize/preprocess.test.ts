// Pre-processing and opset upgrade: every rewrite is checked against onnxruntime on the original.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { preprocess, upgradeOpset } from '../../../src/passes/preprocess/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-int8.js';
import { compareOutputs } from '../../../src/evaluate/index.js';
import { dataset, randomFloats, residualCnn } from './models.js';

async function outputs(model: Model, feeds: Record<string, { dims: number[]; data: Float32Array }>): Promise<Float32Array[]> {
  const r = await createRunner(model, { graphOptimizationLevel: 'disabled' });
  const td = Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, { dtype: DataType.FLOAT, ...v }]));
  const res = await r.run(td);
  await r.release();
  return Object.values(res).map((t) => t.data as Float32Array);
}

function maxDiff(a: Float32Array[], b: Float32Array[]): number {
  let worst = 0;
  a.forEach((x, k) => x.forEach((v, i) => (worst = Math.max(worst, Math.abs(v - b[k]![i]!)))));
  return worst;
}

const ops = (m: Model): string[] => m.graph.nodes.map((n) => n.opType);

describe('preprocess', () => {
  it('folds BatchNormalization into Conv (weights in a Constant node) and into Gemm', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 2, 5, 5]);
    const w = b.constant('w', { dtype: DataType.FLOAT, dims: [4, 2, 3, 3], data: randomFloats(72, 1) });
    const conv = b.node('Conv', [x, w], { pads: [1, 1, 1, 1] }, { name: 'conv' });
    const bnParams = (p: string, c: number, s: number): Value[] => [
      b.initializer(`${p}.g`, DataType.FLOAT, [c], randomFloats(c, s, 0.5, 1)),
      b.initializer(`${p}.b`, DataType.FLOAT, [c], randomFloats(c, s + 1, 0.2)),
      b.initializer(`${p}.m`, DataType.FLOAT, [c], randomFloats(c, s + 2, 0.3)),
      b.initializer(`${p}.v`, DataType.FLOAT, [c], randomFloats(c, s + 3, 0.4, 1)),
    ];
    const bn = b.node('BatchNormalization', [conv, ...bnParams('bn1', 4, 10)], { epsilon: 1e-3 }, { name: 'bn1' });
    const gap = b.node('GlobalAveragePool', [bn]);
    const flat = b.node('Flatten', [gap]);
    const gemm = b.node(
      'Gemm',
      [flat, b.initializer('fw', DataType.FLOAT, [3, 4], randomFloats(12, 20)), b.initializer('fb', DataType.FLOAT, [3], randomFloats(3, 21))],
      { transB: 1, beta: 0.5 },
    );
    const bn2 = b.node('BatchNormalization', [gemm, ...bnParams('bn2', 3, 30)], {}, { name: 'bn2' });
    b.output(bn2, DataType.FLOAT, ['N', 3]);
    const model = b.build();
    const { model: out, report } = preprocess(model);
    expect(report.constantsToInitializers).toBe(1);
    expect(report.batchNormsFolded.map((f) => f.into)).toEqual(['conv', 'gemm']);
    expect(ops(out)).toEqual(['Conv', 'GlobalAveragePool', 'Flatten', 'Gemm']);
    expect(out.graph.outputs[0]!.name).toBe(bn2.name);
    expect(ops(model)).toContain('BatchNormalization'); // input untouched
    const feeds = { x: { dims: [3, 2, 5, 5], data: randomFloats(150, 5) } };
    expect(maxDiff(await outputs(model, feeds), await outputs(out, feeds))).toBeLessThan(1e-5);
  });

  it('folds constant subexpressions and rewrites MatMul + bias Add as Gemm', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 4]);
    const wt = b.initializer('wt', DataType.FLOAT, [3, 4], randomFloats(12, 2));
    const w = b.node('Transpose', [wt], { perm: [1, 0] }); // constant: folds to [4, 3]
    const two = b.constant('two', { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(2) });
    const w2 = b.node('Mul', [w, two]);
    const mm = b.node('MatMul', [x, w2]);
    const y = b.node('Add', [mm, b.initializer('bias', DataType.FLOAT, [3], randomFloats(3, 3))]);
    b.output(y, DataType.FLOAT, ['N', 3]);
    const model = b.build();
    const { model: out, report } = preprocess(model);
    expect(report.constantsFolded).toBe(2);
    expect(report.matMulAddFused).toHaveLength(1);
    expect(ops(out)).toEqual(['Gemm']);
    const feeds = { x: { dims: [2, 4], data: randomFloats(8, 4) } };
    expect(maxDiff(await outputs(model, feeds), await outputs(out, feeds))).toBeLessThan(1e-5);
  });
});

describe('opset upgrade to 13', () => {
  it('opset 11: Unsqueeze/Squeeze/ReduceSum/Split attributes become inputs; Softmax keeps its 2-D meaning', async () => {
    const b = new GraphBuilder({ opset: 11 });
    const x = b.input('x', DataType.FLOAT, [2, 3, 4]);
    const u = b.node('Unsqueeze', [x], { axes: [0] }); // [1,2,3,4]
    const s = b.node('Squeeze', [u], { axes: [0] }); // [2,3,4]
    const r = b.node('ReduceSum', [s], { axes: [2], keepdims: 1 }); // [2,3,1]
    const [p1, p2] = b.node('Split', [s], { axis: 2, split: [1, 3] }, { outputs: 2 }) as Value[];
    const sm = b.node('Softmax', [s], { axis: 1 }); // old meaning: softmax over the flattened [3*4]
    const ls = b.node('LogSoftmax', [s], { axis: 2 }); // last axis: same meaning
    b.output(r, DataType.FLOAT, [2, 3, 1]);
    b.output(p1!, DataType.FLOAT, [2, 3, 1]);
    b.output(p2!, DataType.FLOAT, [2, 3, 3]);
    b.output(sm, DataType.FLOAT, [2, 3, 4]);
    b.output(ls, DataType.FLOAT, [2, 3, 4]);
    const model = b.build();
    const upgraded = model.clone();
    const res = upgradeOpset(upgraded);
    expect(res.upgraded).toBe(true);
    expect(upgraded.opsetVersion('')).toBe(13);
    expect(res.rewritten).toEqual({ Unsqueeze: 1, Squeeze: 1, ReduceSum: 1, Split: 1, Softmax: 1, LogSoftmax: 1 });
    expect(upgraded.graph.nodes.find((n) => n.opType === 'Unsqueeze')!.hasAttr('axes')).toBe(false);
    const feeds = { x: { dims: [2, 3, 4], data: randomFloats(24, 9, 3) } };
    expect(maxDiff(await outputs(model, feeds), await outputs(upgraded, feeds))).toBeLessThan(1e-6);
  });

  it('opset 9: Clip/Pad/Slice attributes, Upsample -> Resize', async () => {
    const b = new GraphBuilder({ opset: 9 });
    const x = b.input('x', DataType.FLOAT, [1, 1, 3, 4]);
    const c = b.node('Clip', [x], { min: -0.5, max: 0.25 });
    const p = b.node('Pad', [c], { pads: [0, 0, 1, 0, 0, 0, 0, 2], value: 0.5 });
    const sl = b.node('Slice', [p], { starts: [1], ends: [3], axes: [3] });
    const scales = b.initializer('scales', DataType.FLOAT, [4], Float32Array.of(1, 1, 2, 3));
    const up = b.node('Upsample', [sl, scales], { mode: 'nearest' });
    b.output(up, DataType.FLOAT, [1, 1, 8, 6]);
    const model = b.build();
    const upgraded = model.clone();
    const res = upgradeOpset(upgraded);
    expect(res.blockers).toEqual([]);
    expect(ops(upgraded)).toEqual(['Clip', 'Pad', 'Slice', 'Resize']);
    const feeds = { x: { dims: [1, 1, 3, 4], data: randomFloats(12, 11) } };
    expect(maxDiff(await outputs(model, feeds), await outputs(upgraded, feeds))).toBe(0);
  });

  it('refuses (and changes nothing) when a node has no opset-13 form', () => {
    const b = new GraphBuilder({ opset: 8 });
    const x = b.input('x', DataType.FLOAT, [1, 2, 3, 3]);
    const p = (n: string) => b.initializer(n, DataType.FLOAT, [2], Float32Array.of(1, 1));
    const y = b.node('BatchNormalization', [x, p('g'), p('b'), p('m'), p('v')], { spatial: 0 });
    b.output(y, DataType.FLOAT, [1, 2, 3, 3]);
    const model = b.build();
    const res = upgradeOpset(model);
    expect(res.upgraded).toBe(false);
    expect(res.blockers[0]).toMatch(/spatial=0/);
    expect(model.opsetVersion('')).toBe(8);
  });

  it('an opset-11 CNN quantizes per-channel (upgraded to 13) and matches FP32', async () => {
    const model = residualCnn(11);
    const calib = dataset('input', [32, 2, 12, 12], 3);
    const { model: q, report } = await quantizeInt8(model, { calibration: calib });
    expect(report.preprocess.opset?.upgraded).toBe(true);
    expect(q.opsetVersion('')).toBe(13);
    expect(report.qdq.perChannel).toBe(true);
    expect(report.qdq.byOpType).toMatchObject({ Conv: 3, Gemm: 1, Add: 1 });
    const agreement = (await compareOutputs(model, q, dataset('input', [64, 2, 12, 12], 4))).logits!;
    expect(agreement.sqnrDb).toBeGreaterThan(30);
    expect(agreement.top1Agreement).toBeGreaterThanOrEqual(0.95);
  });
});

// The fusion check: what onnxruntime makes of a QDQ model, on a planted unfused pattern and on a
// residual CNN quantized with the default settings.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, Tensor } from '../../../src/ir/index.js';
import { analyzeOptimized, checkFusion } from '../../../src/app/quantize-fusion-check.js';
import { quantizeInt8 } from '../../../src/app/quantize-int8.js';
import { dataset, randomFloats, residualCnn } from './models.js';

describe('fusion check', () => {
  it('reports a planted DequantizeLinear(weight) -> MatMul -> Add(bias) chain with a float activation', async () => {
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, ['N', 8]);
    const g = b.graph;
    // Per-row scales (axis 0): not a layout onnxruntime's weight-only MatMulNBits accepts either.
    const wq = g.addInitializer(
      Tensor.fromData('w_q', { dtype: DataType.INT8, dims: [8, 4], data: Int8Array.from({ length: 32 }, (_, i) => ((i * 7) % 50) - 25) }),
    );
    const ws = b.initializer(
      'w_scale',
      DataType.FLOAT,
      [8],
      Float32Array.from({ length: 8 }, (_, i) => 0.01 * (i + 1)),
    );
    const wz = g.addInitializer(Tensor.fromData('w_zp', { dtype: DataType.INT8, dims: [8], data: new Int8Array(8) }));
    const w = b.node('DequantizeLinear', [wq, ws, wz], { axis: 0 }, { name: 'w_dq' });
    const mm = b.node('MatMul', [x, w], {}, { name: 'planted_matmul' });
    const y = b.node('Add', [mm, b.initializer('bias', DataType.FLOAT, [4], randomFloats(4, 1))], {}, { name: 'planted_add' });
    b.output(y, DataType.FLOAT, ['N', 4]);
    const report = await checkFusion(b.build());
    expect(report.integerKernelCount).toBe(0);
    const planted = report.unfused.find((u) => u.node === 'planted_matmul');
    expect(planted).toBeDefined();
    expect(planted!.opType).toMatch(/^(MatMul|Gemm)$/); // onnxruntime may fuse MatMul+Add into a float Gemm
    expect(planted!.reason).toMatch(/input 'x' is float/);
    expect(report.verdict).toMatch(/^no integer kernels: onnxruntime runs this model in float, with \d+ \(de\)quantize step\(s\) on top of the FP32 work$/);
    expect(report.verdict).not.toMatch(/slower|faster/i); // a structural finding, not a measured speed
  });

  it('a model with nothing quantized is called FP32, not slower', async () => {
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, ['N', 8]);
    b.output(b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [8, 4], randomFloats(32, 2))]), DataType.FLOAT, ['N', 4]);
    const report = await checkFusion(b.build());
    expect(report.verdict).toBe('no integer kernels and no (de)quantize steps: the model runs as FP32 (nothing was quantized)');
  });

  it('default INT8 settings on a residual CNN leave no DequantizeLinear -> float op', async () => {
    const model = residualCnn();
    const { model: q } = await quantizeInt8(model, { calibration: dataset('input', [32, 2, 12, 12], 7) });
    const report = await checkFusion(q);
    expect(report.unfused).toEqual([]);
    expect(report.integerKernels).toEqual({ QLinearConv: 3, QLinearAdd: 1, QLinearGlobalAveragePool: 1, QGemm: 1 });
    expect(report.dequantizeLinear).toBe(0);
  });

  it('an excluded Add really runs in FP32 (with its reader), and the report says why', async () => {
    const model = residualCnn();
    const { model: q, report: r } = await quantizeInt8(model, { calibration: dataset('input', [16, 2, 12, 12], 8), excludeNodes: ['block.add'] });
    expect(r.qdq.skipped.slice(0, 2)).toEqual([
      { node: 'block.add', opType: 'Add', reason: 'excluded' },
      { node: 'gap', opType: 'GlobalAveragePool', reason: "reads the output of FP32 node 'block.add'" },
    ]);
    expect(r.qdq.skipped[2]!.node).toBe('flatten');
    const report = await checkFusion(q);
    const add = report.unfused.find((u) => u.node === 'block.add');
    expect(add).toBeDefined();
    expect(add!.reason).toMatch(/output is not quantized/);
    expect(report.integerKernels.QLinearConv).toBe(3);
    expect(report.integerKernels.QLinearAdd).toBeUndefined();
    expect(report.keptFloat).toEqual([]);
    // Told what the quantizer kept float on purpose, the check files the Add under keptFloat
    // (it reads dequantized activations only) and the verdict no longer counts it.
    const told = await checkFusion(q, { keptFloat: r.qdq.skipped });
    expect(told.unfused.find((u) => u.node === 'block.add')).toBeUndefined();
    expect(told.keptFloat.find((u) => u.node === 'block.add')).toMatchObject({ opType: 'Add', reason: 'excluded' });
    expect(told.verdict).toMatch(/kept float by choice read int8 data/);
  });

  it('a DequantizeLinear of a weight feeding a float op is never excused, even for a node kept float', () => {
    // DQ(weight) -> MatMul in the optimized graph: dequantizes the weight on every run.
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, [1, 4]);
    const wq = b.initializer('wq', DataType.INT8, [4, 2], Int8Array.from([1, 2, 3, 4, 5, 6, 7, 8]));
    const w = b.node('DequantizeLinear', [
      wq,
      b.initializer('s', DataType.FLOAT, [], Float32Array.of(0.1)),
      b.initializer('z', DataType.INT8, [], Int8Array.of(0)),
    ]);
    const y = b.node('MatMul', [x, w], {}, { name: 'mm' });
    b.output(y, DataType.FLOAT, [1, 2]);
    const report = analyzeOptimized(b.build(), undefined, [{ node: 'mm', reason: 'excluded' }]);
    expect(report.unfused.map((u) => u.node)).toEqual(['mm']);
    expect(report.keptFloat).toEqual([]);
  });
});

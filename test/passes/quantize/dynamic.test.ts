// Dynamic INT8: numerics in onnxruntime against a float64 reference computed with the dequantized
// weights (the only other error is the run-time activation rounding, bounded below), Gemm with
// transB/alpha/beta, an MLP, and what onnxruntime's optimizer fuses the emitted pattern into.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { loadModel } from '../../../src/onnx/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeDynamic, type DynamicOptions } from '../../../src/passes/quantize/dynamic.js';
import { quantizeWeight as quantizeSymmetric } from '../../../src/passes/quantize/quant-math.js';

/** Embedding rows as int8-dynamic quantizes them: one scale per row or per table. */
const quantizeRows = (w: Float32Array, rows: number, cols: number, perRow: boolean) => quantizeSymmetric(w, [rows, cols], perRow ? 0 : null);
import { dequantizeWeight, quantizeWeight } from '../../../src/passes/quantize/dynamic-weights.js';
import { rng } from '../../helpers/random.js';
import { randomArray, randomFloats } from './models.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-opt-dyn-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

async function run(model: Model, feeds: Record<string, TensorData>, optimizedPath?: string): Promise<Record<string, TensorData>> {
  const runner = await createRunner(model, { intraOpThreads: 1, optimizedModelFilePath: optimizedPath });
  try {
    return await runner.run(feeds);
  } finally {
    await runner.release();
  }
}

/** The scale DynamicQuantizeLinear picks for x: range (always including 0) over 255. */
function activationScale(x: ArrayLike<number>): number {
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < x.length; i++) {
    lo = Math.min(lo, x[i]!);
    hi = Math.max(hi, x[i]!);
  }
  return Math.fround((hi - lo) / 255);
}

/**
 * y = x · Wdq (+ bias) in float64, and a bound on |y_int8 - y|: each activation moves by at most
 * half a quantization step, so the output moves by at most step/2 · Σ_k |Wdq[k, j]|.
 */
function reference(x: Float32Array, m: number, k: number, wdq: Float64Array, n: number, bias?: ArrayLike<number>): { y: Float64Array; bound: Float64Array } {
  const step = activationScale(x);
  const y = new Float64Array(m * n);
  const bound = new Float64Array(m * n);
  for (let j = 0; j < n; j++) {
    let colAbs = 0;
    for (let t = 0; t < k; t++) colAbs += Math.abs(wdq[t * n + j]!);
    for (let i = 0; i < m; i++) {
      let acc = bias ? bias[j]! : 0;
      for (let t = 0; t < k; t++) acc += x[i * k + t]! * wdq[t * n + j]!;
      y[i * n + j] = acc;
      bound[i * n + j] = (step / 2) * colAbs * 1.001 + 1e-5 * (Math.abs(acc) + 1);
    }
  }
  return { y, bound };
}

function expectWithin(got: Float32Array, ref: { y: Float64Array; bound: Float64Array }): number {
  let worst = 0;
  for (let i = 0; i < ref.y.length; i++) {
    const err = Math.abs(got[i]! - ref.y[i]!);
    expect(err, `element ${i}: ${got[i]} vs ${ref.y[i]}`).toBeLessThanOrEqual(ref.bound[i]!);
    worst = Math.max(worst, err / ref.bound[i]!);
  }
  return worst;
}

async function fusedOps(model: Model, feeds: Record<string, TensorData>, name: string): Promise<string[]> {
  const path = join(tmp, `${name}.onnx`);
  await run(model, feeds, path);
  return (await loadModel(path)).graph.nodes.map((n) => n.opType);
}

describe('quantizeWeight', () => {
  it('int8 symmetric per column: scale = max|w|/127, zero point 0, round half to even', () => {
    // Powers of two so the ties are exact. Column 0: max 127/128 -> scale 2^-7; column 1: scale 2^-6.
    const w = Float32Array.from([127 / 128, -127 / 64, 0.5 / 128, -2.5 / 64, 2.5 / 128, -3.5 / 64, 1.5 / 128, 0]);
    const q = quantizeWeight(w, 4, 2, 'int8', true, false);
    expect(Array.from(q.scales)).toEqual([2 ** -7, 2 ** -6]);
    expect(Array.from(q.zeroPoints)).toEqual([0, 0]);
    // Ties go to even: 0.5 -> 0, -2.5 -> -2, 2.5 -> 2, -3.5 -> -4, 1.5 -> 2.
    expect(Array.from(q.data, (v) => v + 0)).toEqual([127, -127, 0, -2, 2, -4, 2, 0]);
    const pt = quantizeWeight(w, 3, 2, 'int8', false, true);
    expect(pt.scales[0]).toBe(Math.fround(127 / 64 / 64));
    expect(Math.max(...Array.from(pt.data, Math.abs))).toBe(64);
  });

  it('uint8 asymmetric: zero point maps 0 exactly and the range covers min..max', () => {
    const w = Float32Array.from([-1, 0, 0.5, 3]);
    const q = quantizeWeight(w, 4, 1, 'uint8', false, false);
    expect(q.scales[0]).toBeCloseTo(4 / 255, 7);
    expect(q.zeroPoints[0]).toBe(64); // round(1 / (4/255)) = round(63.75)
    const back = dequantizeWeight(q, 4, 1);
    back.forEach((v, i) => expect(Math.abs(v - w[i]!)).toBeLessThanOrEqual(q.scales[0]! / 2 + 1e-7));
    expect(back[1]).toBe(0);
  });
});

describe('quantizeDynamic', () => {
  const matmulModel = (k: number, n: number, w: Float32Array): Model => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', k]);
    const y = b.node('MatMul', [x, b.initializer('w', DataType.FLOAT, [k, n], w)], {}, { name: 'mm' });
    b.output(y, DataType.FLOAT, ['N', n]);
    const model = b.build();
    model.graph.outputs[0]!.rename('y');
    return model;
  };

  for (const [label, options] of [
    ['int8 per-channel', {}],
    ['int8 per-tensor', { perChannel: false }],
    ['uint8 asymmetric per-channel', { weightType: 'uint8' }],
    ['int8 reduce-range', { reduceRange: true }],
  ] as [string, DynamicOptions][]) {
    it(`MatMul [N,64]x[64,24] (${label}) matches x·dequant(W) within half an activation step`, async () => {
      const rand = rng(7);
      const [m, k, n] = [5, 64, 24];
      const w = randomArray(rand, k * n, 0.3);
      const fp32 = matmulModel(k, n, w);
      const { model, report } = quantizeDynamic(fp32, options);
      expect(report.quantized.map((q) => q.node)).toEqual(['mm']);
      const x = randomFloats(m * k, 9, 2);
      const got = (await run(model, { x: { dtype: DataType.FLOAT, dims: [m, k], data: x } })).y!;
      expect(got.dims).toEqual([m, n]);
      const q = quantizeWeight(w, k, n, options.weightType ?? 'int8', options.perChannel ?? true, options.reduceRange ?? false);
      const worst = expectWithin(got.data as Float32Array, reference(x, m, k, dequantizeWeight(q, k, n), n));
      expect(worst).toBeGreaterThan(0.01); // activations really were quantized
      // Weights are now 1 byte each (plus one scale per column).
      expect(report.weightBytesAfter).toBe(
        k * n + (options.perChannel === false ? 4 : 4 * n) + (options.weightType === 'uint8' ? (options.perChannel === false ? 1 : n) : 0),
      );
      expect(fp32.graph.initializers[0]!.dtype).toBe(DataType.FLOAT); // input untouched
    });
  }

  it('Gemm with transB, alpha, beta and a [N] bias folds into MatMulIntegerToFloat-ready form', async () => {
    const rand = rng(13);
    const [m, k, n] = [3, 32, 16];
    const wt = randomArray(rand, n * k, 0.4); // [N, K]
    const c = randomArray(rand, n, 0.5);
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', k]);
    const y = b.node(
      'Gemm',
      [x, b.initializer('wt', DataType.FLOAT, [n, k], wt), b.initializer('c', DataType.FLOAT, [n], c)],
      { transB: 1, alpha: 0.5, beta: 2 },
      { name: 'gemm' },
    );
    b.output(y, DataType.FLOAT, ['N', n]);
    const fp32 = b.build();
    const { model, report } = quantizeDynamic(fp32);
    expect(report.quantized).toEqual([{ node: 'gemm', opType: 'Gemm', weight: 'wt', shape: [k, n], perChannel: true, bias: true }]);
    const xs = randomFloats(m * k, 17, 1);
    const got = (await run(model, { x: { dtype: DataType.FLOAT, dims: [m, k], data: xs } }))[y.name]!;
    // Reference: alpha·x·W^T with W quantized as the pass does (alpha folded in), + beta·c.
    const w = new Float32Array(k * n);
    for (let i = 0; i < k; i++) for (let j = 0; j < n; j++) w[i * n + j] = 0.5 * wt[j * k + i]!;
    const q = quantizeWeight(w, k, n, 'int8', true, false);
    expectWithin(
      got.data as Float32Array,
      reference(
        xs,
        m,
        k,
        dequantizeWeight(q, k, n),
        n,
        Array.from(c, (v) => Math.fround(v * 2)),
      ),
    );
    const ops = await fusedOps(model, { x: { dtype: DataType.FLOAT, dims: [m, k], data: xs } }, 'gemm');
    expect(ops).toEqual(['DynamicQuantizeMatMul']); // scales and bias fused into one integer kernel
  });

  it('MLP (MatMul+Add, Relu, MatMul+Add with the bias first): close to float64 of the float model, fully fused', async () => {
    const rand = rng(23);
    const [k, h, n] = [48, 64, 10];
    const w1 = randomArray(rand, k * h, 0.25);
    const b1 = randomArray(rand, h, 0.1);
    const w2 = randomArray(rand, h * n, 0.25);
    const b2 = randomArray(rand, n, 0.1);
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', k]);
    const a1 = b.node(
      'Add',
      [b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [k, h], w1)], {}, { name: 'fc1' }), b.initializer('b1', DataType.FLOAT, [h], b1)],
      {},
      { name: 'add1' },
    );
    const r = b.node('Relu', [a1], {}, { name: 'relu' });
    const a2 = b.node(
      'Add',
      [b.initializer('b2', DataType.FLOAT, [n], b2), b.node('MatMul', [r, b.initializer('w2', DataType.FLOAT, [h, n], w2)], {}, { name: 'fc2' })],
      {},
      { name: 'add2' },
    );
    b.output(a2, DataType.FLOAT, ['N', n]);
    const fp32 = b.build();
    const { model, report } = quantizeDynamic(fp32);
    expect(report.quantizedByOpType).toEqual({ MatMul: 2 });
    expect(report.weightBytesAfter).toBeLessThan(report.weightBytesBefore / 3);
    const m = 8;
    const xs = randomFloats(m * k, 29, 1);
    const feeds = { x: { dtype: DataType.FLOAT, dims: [m, k], data: xs } };
    const got = (await run(model, feeds))[a2.name]!.data as Float32Array;
    // float64 of the float model: a few percent of the logit range at most.
    let worst = 0;
    let range = 0;
    for (let s = 0; s < m; s++) {
      const hid = Array.from({ length: h }, (_, j) =>
        Math.max(0, b1[j]! + Array.from({ length: k }, (_, t) => xs[s * k + t]! * w1[t * h + j]!).reduce((p, v) => p + v, 0)),
      );
      for (let o = 0; o < n; o++) {
        const ref = b2[o]! + hid.reduce((p, v, j) => p + v * w2[j * n + o]!, 0);
        worst = Math.max(worst, Math.abs(got[s * n + o]! - ref));
        range = Math.max(range, Math.abs(ref));
      }
    }
    expect(worst / range).toBeLessThan(0.03);
    const ops = await fusedOps(model, feeds, 'mlp');
    expect(ops.filter((o) => o === 'DynamicQuantizeMatMul')).toHaveLength(2);
    expect(ops).not.toContain('MatMulInteger');
    expect(ops).not.toContain('Add');
  });

  it('Q/K/V-style MatMuls on one 3-D activation share one DynamicQuantizeLinear and stay exact to the bound', async () => {
    const rand = rng(31);
    const [bsz, seq, k, n] = [2, 5, 32, 16];
    const ws = [0, 1, 2].map(() => randomArray(rand, k * n, 0.3));
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['B', 'S', k]);
    const outs = ws.map((w, i) =>
      b.output(b.node('MatMul', [x, b.initializer(`w${i}`, DataType.FLOAT, [k, n], w)], {}, { name: `proj${i}` }), DataType.FLOAT, ['B', 'S', n]),
    );
    const { model, report } = quantizeDynamic(b.build());
    expect(report.quantized).toHaveLength(3);
    expect(model.graph.nodes.filter((nd) => nd.opType === 'DynamicQuantizeLinear')).toHaveLength(1);
    const xs = randomFloats(bsz * seq * k, 37, 1);
    const feeds = { x: { dtype: DataType.FLOAT, dims: [bsz, seq, k], data: xs } };
    const got = await run(model, feeds);
    ws.forEach((w, i) => {
      const t = got[outs[i]!.name]!;
      expect(t.dims).toEqual([bsz, seq, n]);
      const q = quantizeWeight(w, k, n, 'int8', true, false);
      expectWithin(t.data as Float32Array, reference(xs, bsz * seq, k, dequantizeWeight(q, k, n), n));
    });
    const ops = await fusedOps(model, feeds, 'qkv');
    expect(ops.filter((o) => o === 'MatMulIntegerToFloat')).toHaveLength(3);
  });

  it('leaves Conv, transA Gemm and non-constant weights float, with reasons; opset < 11 is upgraded to 13 first', () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 1, 4, 4]);
    const z = b.input('z', DataType.FLOAT, [4, 4]);
    const conv = b.node('Conv', [x, b.initializer('cw', DataType.FLOAT, [1, 1, 1, 1], Float32Array.of(2))], {}, { name: 'conv' });
    const flat = b.node('Reshape', [conv, b.initializer('shape', DataType.INT64, [2], BigInt64Array.from([4n, 4n]))], {}, { name: 'flat' });
    const g = b.node('Gemm', [flat, b.initializer('gw', DataType.FLOAT, [4, 4], new Float32Array(16).fill(1))], { transA: 1 }, { name: 'gemm_ta' });
    const mm = b.node('MatMul', [g, z], {}, { name: 'mm_dynamic_weight' });
    b.output(mm, DataType.FLOAT, [4, 4]);
    const fp32 = b.build();
    const { report } = quantizeDynamic(fp32);
    expect(report.quantized).toEqual([]);
    expect(report.keptFloat.map((k) => k.node)).toEqual(['conv', 'gemm_ta', 'mm_dynamic_weight']);
    expect(report.keptFloat[1]!.reason).toContain('transA');
    expect(report.keptFloat[2]!.reason).toContain('not a constant');
    // Below opset 11 the model is upgraded to 13 first (nothing here needs a rewrite), then planned as above.
    fp32.opsetImports[0]!.version = 10;
    const old = quantizeDynamic(fp32);
    expect(old.report.opset).toMatchObject({ upgraded: true, from: 10, to: 13 });
    expect(old.model.opsetVersion('')).toBe(13);
    expect(old.report.quantized).toEqual([]);
    expect(old.report.notes.join(' ')).toContain('opset 10 upgraded to 13');
  });
});

describe('quantizeDynamic: embedding Gather', () => {
  it('quantizeRows: int8 symmetric, one scale per row (max|row|/127) or per table, round half to even', () => {
    // Row 1's max is 127 * 2^-4, so 62.5 * 2^-4 is an exact tie (-> 62).
    const w = Float32Array.from([1.27, -0.635, 0.01, 7.9375, 3.90625, 0, 0, 0, 0]);
    const perRow = quantizeRows(w, 3, 3, true);
    expect(Array.from(perRow.scales)).toEqual([0.01, 0.0625, 1].map(Math.fround));
    expect(Array.from(perRow.data)).toEqual([127, -64, 1, 127, 62, 0, 0, 0, 0]);
    const perTable = quantizeRows(w, 3, 3, false);
    expect(Array.from(perTable.scales)).toEqual([0.0625]);
    expect(Array.from(perTable.data)).toEqual([20, -10, 0, 127, 62, 0, 0, 0, 0]);
  });

  it('a table also read by another op (tied embeddings) stays float: an int8 copy would only add to the size', () => {
    const b = new GraphBuilder({ opset: 17 });
    const ids = b.input('ids', DataType.INT64, ['N', 5]);
    const table = b.initializer('wte', DataType.FLOAT, [20, 4], randomFloats(80, 51, 0.3));
    const h = b.node('Gather', [table, ids], { axis: 0 }, { name: 'embed' });
    b.output(b.node('MatMul', [h, b.node('Transpose', [table], { perm: [1, 0] }, { name: 'tied' })], {}, { name: 'lm_head' }), DataType.FLOAT, ['N', 5, 20]);
    const { report } = quantizeDynamic(b.build());
    expect(report.keptFloat.find((k) => k.node === 'embed')?.reason).toBe(
      "the table is also read by 'tied' (Transpose): an int8 copy would only add to the size",
    );
    expect(report.quantized).toEqual([]);
  });

  for (const perChannel of [true, false]) {
    it(`${perChannel ? 'per-row' : 'per-table'} scales: onnxruntime returns exactly the dequantized rows, within half a step of the float table`, async () => {
      const [rows, cols] = [50, 8];
      const table = randomFloats(rows * cols, 31, 0.3);
      for (let c = 0; c < cols; c++) table[3 * cols + c]! *= 20; // one row far larger than the rest
      const b = new GraphBuilder({ opset: 17 });
      const ids = b.input('ids', DataType.INT64, ['N', 5]);
      // A Gather on a shape (not an embedding) is left alone and not reported.
      const shape = b.node('Shape', [ids], {}, { name: 'shape' });
      const len = b.node('Gather', [shape, b.initializer('one', DataType.INT64, [], BigInt64Array.of(1n))], { axis: 0 }, { name: 'seq_len' });
      b.output(len, DataType.INT64, []);
      b.output(b.node('Gather', [b.initializer('embedding', DataType.FLOAT, [rows, cols], table), ids], { axis: 0 }, { name: 'embed' }), DataType.FLOAT, [
        'N',
        5,
        cols,
      ]);
      const fp32 = b.build();
      const { model, report } = quantizeDynamic(fp32, { perChannel });
      expect(report.quantized.map((q) => [q.node, q.opType, q.shape])).toEqual([['embed', 'Gather', [rows, cols]]]);
      expect(report.keptFloat).toEqual([]);
      expect(model.graph.initializers.map((t) => t.name)).not.toContain('embedding');
      const idList = [3, 0, 49, 7, 3, 12, 25, 1, 2, 48];
      const out = (await run(model, { ids: { dtype: DataType.INT64, dims: [2, 5], data: BigInt64Array.from(idList, BigInt) } }))[fp32.graph.outputs[1]!.name]!;
      const q = quantizeRows(table, rows, cols, perChannel);
      const expected = idList.flatMap((r) => Array.from({ length: cols }, (_, c) => Math.fround(q.data[r * cols + c]! * q.scales[perChannel ? r : 0]!)));
      expect(Array.from(out.data as Float32Array)).toEqual(expected);
      idList.forEach((r, i) => {
        const step = q.scales[perChannel ? r : 0]!;
        for (let c = 0; c < cols; c++) expect(Math.abs((out.data as Float32Array)[i * cols + c]! - table[r * cols + c]!)).toBeLessThanOrEqual(step / 2 + 1e-6);
      });
    });
  }
});

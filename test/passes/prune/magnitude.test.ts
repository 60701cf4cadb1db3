// Magnitude and N:M pruning: checked weight by weight against a brute-force selection.
import { describe, expect, it } from 'vitest';
import { DataType, type Model } from '../../../src/ir/index.js';
import { encodeModel } from '../../../src/onnx/index.js';
import { checkNM, pruneMagnitude } from '../../../src/app/prune-passes.js';
import { baseMagnitudeOptions as base, feed, maxAbsDiff, Net, randomFloats, runModel } from './helpers.js';

function weights(model: Model, node: string): Float32Array {
  const n = model.graph.nodes.find((x) => x.name === node)!;
  const slot = n.opType === 'MatMul' && !model.graph.constantTensor(n.inputs[1]!) ? 0 : 1;
  return model.graph.constantTensor(n.inputs[slot]!)!.data as Float32Array;
}

/** conv [8,8,3,3] -> conv [8,8,3,3] -> Flatten -> Gemm [32 x 8*4*4] (transB) -> MatMul [32,4] (a Constant node). */
function model(): Model {
  const n = new Net();
  const x = n.input('x', ['N', 8, 4, 4]);
  const a = n.op('Relu', 'ra', [n.conv('c1', x, 8, 8)]);
  const b = n.op('Relu', 'rb', [n.conv('c2', a, 8, 8)]);
  const f = n.op('Flatten', 'flat', [b], { axis: 1 });
  // Gemm weights 10x larger than the convs', so a global threshold treats the layers differently.
  const h = n.op('Relu', 'rh', [n.op('Gemm', 'fc', [f, n.init('fc.w', [32, 128], randomFloats(32 * 128, 3, 5))], { transB: 1 })]);
  const w = n.b.constant('mm.w', { dtype: DataType.FLOAT, dims: [32, 4], data: randomFloats(128, 4, 1) });
  return n.output(n.op('MatMul', 'mm', [h, w]), ['N', 4]);
}

/** Expected zeros of one layer: exactly the k smallest |w| (ties by index). */
function smallest(w: Float32Array, k: number): Set<number> {
  const idx = Array.from(w, (_, i) => i).sort((i, j) => Math.abs(w[i]!) - Math.abs(w[j]!) || i - j);
  return new Set(idx.slice(0, k));
}

describe('unstructured magnitude pruning', () => {
  it('per layer: exactly the smallest half of every layer is zeroed, nothing else changes', async () => {
    const m = model();
    const bytes = encodeModel(m);
    const { model: out, report } = pruneMagnitude(m, base);
    expect(Buffer.from(encodeModel(m)).equals(Buffer.from(bytes))).toBe(true);
    for (const node of ['c1', 'c2', 'fc', 'mm']) {
      const w0 = weights(m, node);
      const w1 = weights(out, node);
      const zero = smallest(w0, Math.floor(w0.length / 2));
      for (let i = 0; i < w0.length; i++) expect(w1[i]).toBe(zero.has(i) ? 0 : w0[i]);
      expect(report.layers.find((l) => l.node === node)!.sparsityAfter).toBeCloseTo(0.5, 10);
    }
    expect(report.sparsityAfter).toBeCloseTo(0.5, 10);
    const fc = report.layers.find((l) => l.node === 'fc')!;
    expect(fc.shape).toEqual([32, 128]);
    expect(fc.gzipBytesAfter).toBeLessThan(fc.gzipBytesBefore);
    // The pruned model still runs and equals the original with the same weights zeroed.
    const feeds = feed('x', [2, 8, 4, 4]);
    const y = (await runModel(out, feeds))[out.graph.outputs[0]!.name]!;
    expect(y.dims).toEqual([2, 4]);
    expect(maxAbsDiff(y, (await runModel(m, feeds))[m.graph.outputs[0]!.name]!)).toBeGreaterThan(0);
  });

  it('global: one threshold over all layers, so the large-weight Gemm keeps more', () => {
    const m = model();
    const { model: out, report } = pruneMagnitude(m, { ...base, scope: 'global' });
    const all = ['c1', 'c2', 'fc', 'mm'].flatMap((node) => Array.from(weights(m, node), Math.abs));
    const k = Math.floor(all.length / 2);
    const threshold = [...all].sort((p, q) => p - q)[k - 1]!;
    let zeros = 0;
    for (const node of ['c1', 'c2', 'fc', 'mm']) {
      const w0 = weights(m, node);
      const w1 = weights(out, node);
      for (let i = 0; i < w0.length; i++) {
        if (Math.abs(w0[i]!) < threshold) expect(w1[i]).toBe(0);
        if (Math.abs(w0[i]!) > threshold) expect(w1[i]).toBe(w0[i]);
        if (w1[i] === 0) zeros++;
      }
    }
    expect(zeros).toBe(k);
    const sparsity = (node: string) => report.layers.find((l) => l.node === node)!.sparsityAfter;
    expect(sparsity('fc')).toBeLessThan(0.4);
    expect(sparsity('c1')).toBeGreaterThan(0.7);
  });

  it('first and last layers stay dense by default; exclusions by name and op type', () => {
    const m = model();
    const { model: out, report } = pruneMagnitude(m, { ...base, pruneFirstLast: false, excludeOpTypes: ['Gemm'] });
    expect(weights(out, 'c1')).toEqual(weights(m, 'c1'));
    expect(weights(out, 'mm')).toEqual(weights(m, 'mm'));
    expect(weights(out, 'fc')).toEqual(weights(m, 'fc'));
    expect(report.layers.find((l) => l.node === 'c1')!.skipped).toMatch(/first layer/);
    expect(report.layers.find((l) => l.node === 'mm')!.skipped).toMatch(/last layer/);
    expect(report.layers.find((l) => l.node === 'fc')!.skipped).toMatch(/exclude-op-types/);
    expect(report.layers.find((l) => l.node === 'c2')!.sparsityAfter).toBeCloseTo(0.5, 10);
    const byName = pruneMagnitude(m, { ...base, excludeNodes: ['c2'] });
    expect(weights(byName.model, 'c2')).toEqual(weights(m, 'c2'));
  });
});

describe('N:M pruning', () => {
  it('2:4 keeps the two largest of every 4 along the input-channel axis, element by element', () => {
    const m = model();
    const { model: out, report } = pruneMagnitude(m, { ...base, pattern: { kind: 'n:m', n: 2, m: 4 } });
    expect(report.pattern).toBe('2:4');
    expect(report.patternVerified).toBe(true);
    // conv [8, 8, 3, 3]: groups run along axis 1 (Cin) at fixed (cout, kh, kw)
    const w0 = weights(m, 'c2');
    const w1 = weights(out, 'c2');
    for (let o = 0; o < 8; o++) {
      for (let s = 0; s < 9; s++) {
        for (let g = 0; g < 8; g += 4) {
          const idx = [0, 1, 2, 3].map((j) => (o * 8 + g + j) * 9 + s);
          const keep = [...idx].sort((p, q) => Math.abs(w0[q]!) - Math.abs(w0[p]!) || p - q).slice(0, 2);
          for (const i of idx) expect(w1[i]).toBe(keep.includes(i) ? w0[i] : 0);
        }
      }
    }
    // Gemm with transB: B is [N, K], groups run along axis 1 (contiguous K)
    const g0 = weights(m, 'fc');
    const g1 = weights(out, 'fc');
    for (let r = 0; r < 32; r++) {
      for (let k = 0; k < 128; k += 4) {
        const idx = [0, 1, 2, 3].map((j) => r * 128 + k + j);
        const keep = [...idx].sort((p, q) => Math.abs(g0[q]!) - Math.abs(g0[p]!) || p - q).slice(0, 2);
        for (const i of idx) expect(g1[i]).toBe(keep.includes(i) ? g0[i] : 0);
      }
    }
    // MatMul [K, N]: groups run down the rows (axis 0)
    const mm = weights(out, 'mm');
    expect(checkNM([32, 4], Float64Array.from(mm), 0, 2, 4)).toBe(true);
    expect(checkNM([32, 4], Float64Array.from(mm), 1, 1, 4)).toBe(false);
    for (const l of report.layers) expect(l.sparsityAfter).toBeCloseTo(0.5, 10);
  });

  it('a layer whose reduction dim is not a multiple of M stays dense, with the reason', () => {
    const n = new Net();
    const x = n.input('x', ['N', 6, 4, 4]);
    const model = n.output(n.conv('c', x, 6, 4), ['N', 4, 4, 4]);
    const { report } = pruneMagnitude(model, { ...base, pattern: { kind: 'n:m', n: 2, m: 4 } });
    expect(report.layers[0]!.skipped).toMatch(/not a multiple of 4/);
    expect(report.layers[0]!.sparsityAfter).toBe(0);
  });
});

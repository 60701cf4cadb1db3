// Cross-layer equalization (issue 32 item 4): Conv -> Relu/none -> Conv pairs (depthwise-separable
// blocks) rescaled so each channel's weight ranges meet at sqrt(r1 r2): the equalized float model
// gives the same outputs (onnxruntime, float tolerance) and the ranges match a float64 reference;
// ReLU6 and HardSwish block it.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model, type Value } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { equalizeCrossLayer } from '../../../src/passes/quantize/cross-layer-equalization.js';
import { quantizeInt8 } from '../../../src/app/quantize-passes.js';
import { rng } from './models.js';

/** 1x1 expand (8 -> 16, Relu) -> 3x3 depthwise (Relu) -> 1x1 project (16 -> 8): the expand's channel scales spread over 100x and the depthwise undoes it, as folded BatchNorms leave them. */
function separable(activation: 'Relu' | 'Clip6' | 'HardSwish' = 'Relu'): { model: Model; weights: Record<string, { dims: number[]; data: Float32Array }> } {
  const r = rng(31);
  const g = new GraphBuilder({ opset: 13 });
  const x = g.input('x', DataType.FLOAT, ['N', 8, 6, 6]);
  const spread = Float32Array.from({ length: 16 }, (_, c) => 10 ** (-1 + (2 * c) / 15));
  const weights: Record<string, { dims: number[]; data: Float32Array }> = {
    w1: { dims: [16, 8, 1, 1], data: Float32Array.from({ length: 128 }, (_, i) => (r() * 2 - 1) * spread[Math.floor(i / 8)]!) },
    b1: { dims: [16], data: Float32Array.from({ length: 16 }, (_, c) => (r() - 0.5) * spread[c]!) },
    // The depthwise undoes the spread: every channel matters as much downstream.
    w2: { dims: [16, 1, 3, 3], data: Float32Array.from({ length: 144 }, (_, i) => (r() * 2 - 1) / spread[Math.floor(i / 9)]!) },
    b2: { dims: [16], data: Float32Array.from({ length: 16 }, () => r() - 0.5) },
    w3: { dims: [8, 16, 1, 1], data: Float32Array.from({ length: 128 }, () => (r() * 2 - 1) / 4) },
  };
  const init = (name: string): Value => g.initializer(name, DataType.FLOAT, weights[name]!.dims, weights[name]!.data);
  const act = (v: Value, name: string): Value => {
    if (activation === 'Relu') return g.node('Relu', [v], {}, { name });
    if (activation === 'HardSwish') return g.node('HardSwish', [v], {}, { name });
    return g.node(
      'Clip',
      [v, g.initializer(`${name}.lo`, DataType.FLOAT, [], Float32Array.of(0)), g.initializer(`${name}.hi`, DataType.FLOAT, [], Float32Array.of(6))],
      {},
      { name },
    );
  };
  const h1 = act(g.node('Conv', [x, init('w1'), init('b1')], {}, { name: 'expand' }), 'act1');
  const h2 = act(g.node('Conv', [h1, init('w2'), init('b2')], { group: 16, pads: [1, 1, 1, 1] }, { name: 'dw' }), 'act2');
  const y = g.node('Conv', [h2, init('w3')], {}, { name: 'project' });
  g.output(y, DataType.FLOAT, ['N', 8, 6, 6]);
  return { model: g.build(), weights };
}

const weightOf = (model: Model, node: string, input = 1): Float64Array => {
  const n = model.graph.nodes.find((x) => x.name === node)!;
  return model.graph.constantTensor(n.inputs[input]!)!.toFloat64();
};

/** Largest |w| per output channel (rows of `per` values). */
const rowRanges = (w: ArrayLike<number>, rows: number): number[] => {
  const per = w.length / rows;
  return Array.from({ length: rows }, (_, c) => Math.max(...Array.from({ length: per }, (_, i) => Math.abs(w[c * per + i]!))));
};

async function run(model: Model, data: Dataset): Promise<Float32Array> {
  const runner = await createRunner(model);
  const out = Object.values(await runner.run(data.inputs))[0]!.data as Float32Array;
  await runner.release();
  return out;
}

describe('cross-layer equalization', () => {
  it('one sweep on a pair matches the float64 formula s_c = sqrt(r1_c / r2_c)', () => {
    const { model, weights } = separable();
    const { model: eq, report } = equalizeCrossLayer(model, { maxSweeps: 1 });
    expect(report.pairs.map((p) => [p.first, p.second, p.activation])).toEqual([
      ['expand', 'dw', 'Relu'],
      ['dw', 'project', 'Relu'],
    ]);
    // First pair, in float64: r1 = row ranges of w1, r2 = |w2| per depthwise channel.
    const r1 = rowRanges(weights.w1!.data, 16);
    const r2 = rowRanges(weights.w2!.data, 16);
    const s = r1.map((a, c) => Math.sqrt(a / r2[c]!));
    const w1 = weightOf(eq, 'expand');
    const b1 = weightOf(eq, 'expand', 2);
    for (let i = 0; i < 128; i++) expect(w1[i]).toBeCloseTo(weights.w1!.data[i]! / s[Math.floor(i / 8)]!, 6);
    for (let c = 0; c < 16; c++) expect(b1[c]).toBeCloseTo(weights.b1!.data[c]! / s[c]!, 6);
    // After the first pair the expand's and the depthwise's ranges agree at sqrt(r1 r2)
    // (the second pair then rescales the depthwise rows again).
    const eqR1 = rowRanges(w1, 16);
    for (let c = 0; c < 16; c++) expect(eqR1[c]).toBeCloseTo(Math.sqrt(r1[c]! * r2[c]!), 5);
  });

  it('converges on the chain: every pair equalized, the float model unchanged on onnxruntime', async () => {
    const { model, weights } = separable();
    const { model: eq, report } = equalizeCrossLayer(model);
    expect(report.sweeps).toBeGreaterThan(1);
    // At convergence each pair's ranges meet: expand rows = depthwise rows, depthwise rows = project columns.
    const [w1, w2, w3] = [weightOf(eq, 'expand'), weightOf(eq, 'dw'), weightOf(eq, 'project')];
    const [r1, r2] = [rowRanges(w1, 16), rowRanges(w2, 16)];
    const r3 = Array.from({ length: 16 }, (_, c) => Math.max(...Array.from({ length: 8 }, (_, o) => Math.abs(w3[o * 16 + c]!))));
    for (let c = 0; c < 16; c++) {
      expect(r1[c]! / r2[c]!).toBeCloseTo(1, 3);
      expect(r2[c]! / r3[c]!).toBeCloseTo(1, 3);
    }
    // The spread of the expand's ranges shrank from 100x.
    expect(Math.max(...rowRanges(weights.w1!.data, 16)) / Math.min(...rowRanges(weights.w1!.data, 16))).toBeGreaterThan(50);
    expect(Math.max(...r1) / Math.min(...r1)).toBeLessThan(20);
    const r = rng(32);
    const data: Dataset = {
      count: 4,
      inputs: { x: { dtype: DataType.FLOAT, dims: [4, 8, 6, 6], data: Float32Array.from({ length: 4 * 288 }, () => r() * 2 - 1) } },
      source: 'test',
      notes: [],
    };
    const [a, b] = [await run(model, data), await run(eq, data)];
    let scale = 0;
    for (const v of a) scale = Math.max(scale, Math.abs(v));
    for (let i = 0; i < a.length; i++) expect(Math.abs(a[i]! - b[i]!)).toBeLessThan(1e-5 * scale);
  });

  it('ReLU6 and HardSwish are not positively homogeneous: nothing is equalized', () => {
    expect(equalizeCrossLayer(separable('Clip6').model).report.pairs).toEqual([]);
    expect(equalizeCrossLayer(separable('HardSwish').model).report.pairs).toEqual([]);
  });

  it('per-tensor INT8 of the block: equalization raises the SQNR', async () => {
    const { model } = separable();
    const r = rng(33);
    const make = (n: number): Dataset => ({
      count: n,
      inputs: { x: { dtype: DataType.FLOAT, dims: [n, 8, 6, 6], data: Float32Array.from({ length: n * 288 }, () => r() * 2 - 1) } },
      source: 'test',
      notes: [],
    });
    const [calibration, held] = [make(32), make(16)];
    const ref = await run(model, held);
    const sqnr = async (m: Model): Promise<number> => {
      const got = await run(m, held);
      let [s, e] = [0, 0];
      for (let i = 0; i < ref.length; i++) [s, e] = [s + ref[i]! ** 2, e + (ref[i]! - got[i]!) ** 2];
      return 10 * Math.log10(s / e);
    };
    const plain = await quantizeInt8(model, { calibration, perChannel: false });
    const equalized = await quantizeInt8(model, { calibration, perChannel: false, crossLayerEqualization: true });
    expect(equalized.report.crossLayerEqualization?.pairs).toHaveLength(2);
    expect(await sqnr(equalized.model)).toBeGreaterThan((await sqnr(plain.model)) + 6);
  });
});

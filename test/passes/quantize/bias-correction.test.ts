// Bias correction (issue 32 item 4): the bias of a quantized Conv/Gemm absorbs the mean output
// shift of its int8 weights, E[(W_q - W) x], measured here in float64 by running the convolution
// with W_q - W over the calibration samples; and on onnxruntime a depthwise conv with few taps
// reading a large input mean gets a better SQNR against FP32.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import type { Dataset } from '../../../src/data/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeInt8 } from '../../../src/app/quantize-passes.js';
import { quantizeWeight } from '../../../src/passes/quantize/quant-math.js';
import { tapFractions } from '../../../src/passes/quantize/bias-correction.js';
import { rng } from './models.js';

const dataset = (dims: number[], data: Float32Array): Dataset => ({
  count: dims[0]!,
  inputs: { x: { dtype: DataType.FLOAT, dims, data } },
  source: 'test',
  notes: [],
});

/** The float bias the QDQ model hands to `node` (int32 values x their scale), and that scale. */
function writtenBias(model: Model, node: string): { bias: Float64Array; scale: Float32Array } {
  const n = model.graph.nodes.find((x) => x.name === node)!;
  const dq = n.inputs[2]!.producer!;
  const q = model.graph.constantTensor(dq.inputs[0]!)!.toFloat64();
  const s = model.graph.constantTensor(dq.inputs[1]!)!.toFloat64();
  const scale = Float32Array.from(q, (_, i) => s[s.length === 1 ? 0 : i]!);
  return { bias: q.map((v, i) => v * scale[i]!), scale };
}

/** Float64 NCHW conv of `x` [N, C, H, W] with `w` [Cout, C/group, kh, kw], pads symmetric `p`, stride 1: the mean of each output channel. */
type Dims4 = [number, number, number, number];
function meanConvOutput(x: Float32Array, [n, c, h, wd]: Dims4, w: Float64Array, [cout, per, kh, kw]: Dims4, group: number, p: number): Float64Array {
  const [oh, ow] = [h + 2 * p - kh + 1, wd + 2 * p - kw + 1];
  const sums = new Float64Array(cout);
  for (let s = 0; s < n; s++)
    for (let o = 0; o < cout; o++) {
      const g = Math.floor(o / (cout / group));
      for (let y = 0; y < oh; y++)
        for (let xx = 0; xx < ow; xx++)
          for (let ci = 0; ci < per; ci++)
            for (let a = 0; a < kh; a++)
              for (let b = 0; b < kw; b++) {
                const [iy, ix] = [y - p + a, xx - p + b];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                sums[o]! += w[((o * per + ci) * kh + a) * kw + b]! * x[((s * c + g * per + ci) * h + iy) * wd + ix]!;
              }
    }
  return sums.map((v) => v / (n * oh * ow));
}

const dequantized = (w: Float32Array, dims: number[], axis: number): Float64Array => {
  const q = quantizeWeight(w, dims, axis);
  const inner = dims.slice(axis + 1).reduce((a, b) => a * b, 1);
  return Float64Array.from(q.data, (v, i) => v * q.scales[Math.floor(i / inner) % dims[axis]!]!);
};

describe('tapFractions', () => {
  it('counts the output positions at which each tap reads the input', () => {
    // size 5, kernel 3, pad 1: 5 outputs; tap 0 reads padding at output 0, tap 2 at output 4.
    expect([...tapFractions(5, 3, 1, 1, 1, 1)]).toEqual([0.8, 1, 0.8]);
    // stride 2, size 6, kernel 3, pads 0/1 (SAME_UPPER): outputs 0, 2, 4 -> tap 2 at 6 is padding.
    expect([...tapFractions(6, 3, 2, 1, 0, 1)]).toEqual([1, 1, 2 / 3]);
    expect([...tapFractions(undefined, 3, 1, 1, 1, 1)]).toEqual([1, 1, 1]);
  });
});

describe('bias correction against a float64 reference', () => {
  it('padded depthwise conv: bias - mean of conv(x; W_q - W) over samples and positions', async () => {
    const r = rng(11);
    const [n, c, h, wd] = [12, 4, 5, 5];
    const wDims: Dims4 = [c, 1, 3, 3];
    const w = Float32Array.from({ length: 36 }, () => r() * 2 - 1);
    const b = Float32Array.from({ length: c }, () => r() - 0.5);
    const g = new GraphBuilder({ opset: 13 });
    const x = g.input('x', DataType.FLOAT, ['N', c, h, wd]);
    const y = g.node(
      'Conv',
      [x, g.initializer('w', DataType.FLOAT, wDims, w), g.initializer('b', DataType.FLOAT, [c], b)],
      { group: c, pads: [1, 1, 1, 1] },
      { name: 'dw' },
    );
    g.output(y, DataType.FLOAT, ['N', c, h, wd]);
    // Each channel constant over space (mean 3 + noise per sample): the tap-fraction form is exact.
    const data = new Float32Array(n * c * h * wd);
    for (let s = 0; s < n * c; s++) data.fill(3 + r(), s * h * wd, (s + 1) * h * wd);
    const { model, report } = await quantizeInt8(g.build(), { calibration: dataset([n, c, h, wd], data), biasCorrection: true });
    const dW = dequantized(w, wDims, 0).map((v, i) => v - w[i]!);
    const shift = meanConvOutput(data, [n, c, h, wd], dW, wDims, c, 1);
    const { bias, scale } = writtenBias(model, 'dw');
    for (let o = 0; o < c; o++) expect(Math.abs(bias[o]! - (b[o]! - shift[o]!))).toBeLessThanOrEqual(scale[o]! / 2 + 1e-9);
    // The shift is not negligible: many bias steps.
    expect(Math.max(...shift.map(Math.abs))).toBeGreaterThan(20 * Math.max(...scale));
    expect(report.qdq.biasCorrection).toEqual([expect.objectContaining({ node: 'dw', biasAdded: false })]);
  });

  it('1x1 conv without a bias gets one, and Gemm (transB, alpha, no C) too', async () => {
    const r = rng(12);
    const [n, c, cout, h] = [10, 6, 5, 3];
    const w1 = Float32Array.from({ length: cout * c }, () => r() * 2 - 1);
    const w2 = Float32Array.from({ length: 4 * cout }, () => r() * 2 - 1);
    const g = new GraphBuilder({ opset: 13 });
    const x = g.input('x', DataType.FLOAT, ['N', c, h, h]);
    const conv = g.node('Conv', [x, g.initializer('w1', DataType.FLOAT, [cout, c, 1, 1], w1)], {}, { name: 'pw' });
    const pooled = g.node('Flatten', [g.node('GlobalAveragePool', [conv], {}, { name: 'gap' })], { axis: 1 }, { name: 'flat' });
    const y = g.node('Gemm', [pooled, g.initializer('w2', DataType.FLOAT, [4, cout], w2)], { transB: 1, alpha: 0.5 }, { name: 'fc' });
    g.output(y, DataType.FLOAT, ['N', 4]);
    const data = Float32Array.from({ length: n * c * h * h }, () => 2 + r() * 3);
    const { model, report } = await quantizeInt8(g.build(), { calibration: dataset([n, c, h, h], data), biasCorrection: true });
    expect(report.qdq.biasCorrection?.map((b) => [b.node, b.biasAdded])).toEqual([
      ['pw', true],
      ['fc', true],
    ]);
    // Conv: the mean of conv(x; W_q - W).
    const shift1 = meanConvOutput(
      data,
      [n, c, h, h],
      dequantized(w1, [cout, c, 1, 1], 0).map((v, i) => v - w1[i]!),
      [cout, c, 1, 1],
      1,
      0,
    );
    const b1 = writtenBias(model, 'pw');
    for (let o = 0; o < cout; o++) expect(Math.abs(b1.bias[o]! + shift1[o]!)).toBeLessThanOrEqual(b1.scale[o]! / 2 + 1e-9);
    // Gemm: its input is the FP32 model's pooled conv output; the mean of 0.5 (B_q - B) a over samples.
    const pooledMean = new Float64Array(cout);
    for (let s = 0; s < n; s++)
      for (let o = 0; o < cout; o++) {
        let v = 0;
        for (let ci = 0; ci < c; ci++) for (let p = 0; p < h * h; p++) v += w1[o * c + ci]! * data[(s * c + ci) * h * h + p]!;
        pooledMean[o]! += v / (h * h) / n;
      }
    const dB = dequantized(w2, [4, cout], 0).map((v, i) => v - w2[i]!);
    const b2 = writtenBias(model, 'fc');
    for (let j = 0; j < 4; j++) {
      let shift = 0;
      for (let k = 0; k < cout; k++) shift += 0.5 * dB[j * cout + k]! * pooledMean[k]!;
      // Float32 capture of the activations: a relative tolerance on the mean.
      expect(Math.abs(b2.bias[j]! + shift)).toBeLessThanOrEqual(b2.scale[j]! / 2 + 1e-6 * Math.abs(shift) + 1e-9);
    }
  });
});

describe('bias correction of a MatMul through its float bias Add', () => {
  it('3-D MatMul [N, T, K] x [K, N] + bias: the Add constant absorbs (W_q - W) . E[x] over every row', async () => {
    const r = rng(13);
    const [n, t, k, m] = [6, 5, 8, 4];
    const w = Float32Array.from({ length: k * m }, () => r() * 2 - 1);
    const b = Float32Array.from({ length: m }, () => r() - 0.5);
    const g = new GraphBuilder({ opset: 13 });
    const x = g.input('x', DataType.FLOAT, ['N', t, k]);
    const mm = g.node('MatMul', [x, g.initializer('w', DataType.FLOAT, [k, m], w)], {}, { name: 'proj' });
    const y = g.node('Add', [mm, g.initializer('bias', DataType.FLOAT, [m], b)], {}, { name: 'proj_bias' });
    g.output(y, DataType.FLOAT, ['N', t, m]);
    const data = Float32Array.from({ length: n * t * k }, () => 1 + r() * 2);
    const { model, report } = await quantizeInt8(g.build(), { calibration: dataset([n, t, k], data) });
    expect(report.qdq.biasCorrection?.map((c) => [c.node, c.biasAdded])).toEqual([['proj', false]]);
    const dW = dequantized(w, [k, m], 1).map((v, i) => v - w[i]!);
    const mean = new Float64Array(k);
    for (let row = 0; row < n * t; row++) for (let i = 0; i < k; i++) mean[i]! += data[row * k + i]! / (n * t);
    const add = model.graph.nodes.find((v) => v.name === 'proj_bias')!;
    expect(add.opType).toBe('Add');
    const written = model.graph.constantTensor(add.inputs[1]!)!.toFloat64();
    for (let j = 0; j < m; j++) {
      let shift = 0;
      for (let i = 0; i < k; i++) shift += dW[i * m + j]! * mean[i]!;
      expect(Math.abs(shift)).toBeGreaterThan(1e-5);
      expect(written[j]).toBeCloseTo(b[j]! - shift, 6);
    }
  });
});

/** Depthwise 1x3 conv on 16 channels of mean 10 (+-0.5), bias cancelling the mean (a folded BatchNorm), then a 1x1 conv. */
function depthwiseOnMean(): Model {
  const r = rng(21);
  const c = 16;
  const g = new GraphBuilder({ opset: 13 });
  const x = g.input('x', DataType.FLOAT, ['N', c, 8, 8]);
  const w = Float32Array.from({ length: c * 3 }, () => r() * 2 - 1);
  const b = Float32Array.from({ length: c }, (_, o) => -10 * (w[3 * o]! + w[3 * o + 1]! + w[3 * o + 2]!));
  const dw = g.node(
    'Conv',
    [x, g.initializer('w', DataType.FLOAT, [c, 1, 1, 3], w), g.initializer('b', DataType.FLOAT, [c], b)],
    { group: c, pads: [0, 1, 0, 1] },
    { name: 'dw' },
  );
  const w2 = Float32Array.from({ length: c * c }, () => (r() * 2 - 1) / 4);
  const y = g.node('Conv', [dw, g.initializer('w2', DataType.FLOAT, [c, c, 1, 1], w2)], {}, { name: 'pw' });
  g.output(y, DataType.FLOAT, ['N', c, 8, 8]);
  return g.build();
}

/** SQNR (dB) of `model` against `reference` on `data`, and the largest |mean error| of one output channel (NCHW). */
async function errorAgainst(reference: Model, model: Model, data: Dataset): Promise<{ sqnr: number; channelBias: number }> {
  const outputs: { dims: readonly number[]; data: Float32Array }[] = [];
  for (const m of [reference, model]) {
    const runner = await createRunner(m);
    const out = Object.values(await runner.run(data.inputs))[0]!;
    outputs.push({ dims: out.dims, data: out.data as Float32Array });
    await runner.release();
  }
  const [ref, got] = [outputs[0]!.data, outputs[1]!.data];
  const [n, c] = outputs[0]!.dims as [number, number];
  const inner = ref.length / (n * c);
  const channelError = new Float64Array(c);
  let signal = 0;
  let noise = 0;
  for (let i = 0; i < ref.length; i++) {
    signal += ref[i]! ** 2;
    noise += (ref[i]! - got[i]!) ** 2;
    channelError[Math.floor(i / inner) % c]! += (got[i]! - ref[i]!) / (n * inner);
  }
  return { sqnr: 10 * Math.log10(signal / noise), channelBias: Math.max(...channelError.map(Math.abs)) };
}

describe('bias correction on onnxruntime', () => {
  it('depthwise conv with few taps over a large input mean: SQNR improves', async () => {
    const r = rng(22);
    const make = (n: number) => Float32Array.from({ length: n * 16 * 64 }, () => 10 + (r() * 2 - 1) * 0.5);
    const calibration = dataset([32, 16, 8, 8], make(32));
    const held = dataset([16, 16, 8, 8], make(16));
    const fp32 = depthwiseOnMean();
    const plain = await quantizeInt8(fp32, { calibration, biasCorrection: false });
    const corrected = await quantizeInt8(fp32, { calibration });
    expect(corrected.report.qdq.biasCorrection?.map((b) => b.node)).toEqual(['dw', 'pw']);
    const before = await errorAgainst(fp32, plain.model, held);
    const after = await errorAgainst(fp32, corrected.model, held);
    // Measured: 33.8 -> 36.5 dB; what is left is mostly the input's rounding (its range spans 0 to 10.5).
    expect(after.sqnr).toBeGreaterThan(before.sqnr + 2);
    expect(after.channelBias).toBeLessThan(before.channelBias / 4);
  });

  it('is on by default; biasCorrection false collects no channel means and reports nothing', async () => {
    const r = rng(23);
    const calibration = dataset(
      [8, 16, 8, 8],
      Float32Array.from({ length: 8 * 16 * 64 }, () => r()),
    );
    const { report, context } = await quantizeInt8(depthwiseOnMean(), { calibration, biasCorrection: false });
    expect(report.qdq.biasCorrection).toBeUndefined();
    expect(context.channelMeans).toBeUndefined();
    const on = await quantizeInt8(depthwiseOnMean(), { calibration });
    // The means of both convs' inputs: the model input and the depthwise conv's output.
    expect(on.context.channelMeans!.get('x')).toHaveLength(16);
    expect(on.context.channelMeans!.size).toBe(2);
  });
});

// INT8 QDQ numerics against a float64 fake-quantization reference, on hand-built graphs by
// topology: per-channel Conv, Gemm with transB, MatMul, residual Add, Concat. Each QDQ model runs
// in onnxruntime twice: without graph optimizations (Q/DQ executed as written: must equal the
// float64 reference to float32 rounding) and with all of them (integer kernels: within one output
// quantization step).
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { quantizeQdq, type QdqOptions } from '../../../src/passes/quantize/qdq.js';
import { checkFusion } from '../../../src/app/quantize-fusion-check.js';
import { activationParams, fakeQuantize, type QuantParams } from '../../../src/passes/quantize/quant-math.js';
import type { Range } from '../../../src/passes/quantize/calibrate.js';
import { randomFloats } from './models.js';

const u8 = (r: Range): QuantParams => activationParams(r.min, r.max, DataType.UINT8, false);
const fq = (v: ArrayLike<number>, p: QuantParams): Float64Array => Float64Array.from(v, (x) => fakeQuantize(x, p));

/** Per-channel int8 symmetric fake quantization of a weight along axis `axis`. */
function fqWeight(w: Float32Array, dims: number[], axis: number | null): { values: Float64Array; scales: number[] } {
  const channels = axis === null ? 1 : dims[axis]!;
  const inner = axis === null ? w.length : dims.slice(axis + 1).reduce((a, b) => a * b, 1);
  const ch = (i: number): number => (axis === null ? 0 : Math.floor(i / inner) % channels);
  const maxAbs = new Array<number>(channels).fill(0);
  w.forEach((x, i) => (maxAbs[ch(i)] = Math.max(maxAbs[ch(i)]!, Math.abs(x))));
  const scales = maxAbs.map((m) => Math.fround(m / 127));
  return { values: Float64Array.from(w, (x, i) => Math.max(-127, Math.min(127, Math.round(x / scales[ch(i)]!))) * scales[ch(i)]!), scales };
}

function fqBias(b: Float32Array, inputScale: number, wScales: number[]): Float64Array {
  return Float64Array.from(b, (x, i) => {
    const s = Math.fround(inputScale * wScales[wScales.length === 1 ? 0 : i]!);
    return Math.round(x / s) * s;
  });
}

function conv2d(x: ArrayLike<number>, xd: number[], w: ArrayLike<number>, wd: number[], b: ArrayLike<number> | null, pad: number): Float64Array {
  const [n, cin, h, wi] = xd as [number, number, number, number];
  const [cout, , kh, kw] = wd as [number, number, number, number];
  const oh = h + 2 * pad - kh + 1;
  const ow = wi + 2 * pad - kw + 1;
  const out = new Float64Array(n * cout * oh * ow);
  for (let s = 0; s < n; s++)
    for (let o = 0; o < cout; o++)
      for (let y = 0; y < oh; y++)
        for (let xx = 0; xx < ow; xx++) {
          let acc = b ? b[o]! : 0;
          for (let c = 0; c < cin; c++)
            for (let i = 0; i < kh; i++)
              for (let j = 0; j < kw; j++) {
                const yy = y + i - pad;
                const xj = xx + j - pad;
                if (yy < 0 || yy >= h || xj < 0 || xj >= wi) continue;
                acc += x[((s * cin + c) * h + yy) * wi + xj]! * w[((o * cin + c) * kh + i) * kw + j]!;
              }
          out[((s * cout + o) * oh + y) * ow + xx] = acc;
        }
  return out;
}

function matmul(a: ArrayLike<number>, m: number, k: number, b: ArrayLike<number>, n: number, bTransposed = false): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let acc = 0;
      for (let t = 0; t < k; t++) acc += a[i * k + t]! * (bTransposed ? b[j * k + t]! : b[t * n + j]!);
      out[i * n + j] = acc;
    }
  return out;
}

const rangeOf = (v: ArrayLike<number>): Range => {
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < v.length; i++) {
    min = Math.min(min, v[i]!);
    max = Math.max(max, v[i]!);
  }
  return { min, max };
};

async function runBoth(
  model: Model,
  feeds: Record<string, Float32Array>,
  dims: Record<string, number[]>,
): Promise<{ plain: Float32Array; fused: Float32Array }> {
  const td = Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, { dtype: DataType.FLOAT, dims: dims[k]!, data: v }]));
  const out: Float32Array[] = [];
  for (const level of ['disabled', 'all'] as const) {
    const r = await createRunner(model, { graphOptimizationLevel: level, intraOpThreads: 1 });
    const res = await r.run(td);
    out.push(Object.values(res)[0]!.data as Float32Array);
    await r.release();
  }
  return { plain: out[0]!, fused: out[1]! };
}

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number): void {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!));
  expect(worst).toBeLessThanOrEqual(tol);
}

function dqAxes(model: Model): { axis: number | undefined; scaleLength: number }[] {
  return model.graph.nodes
    .filter((n) => n.opType === 'DequantizeLinear' && model.graph.constantTensor(n.inputs[0]!)?.dtype === DataType.INT8)
    .map((n) => ({ axis: n.hasAttr('axis') ? n.getInt('axis') : undefined, scaleLength: model.graph.constantTensor(n.inputs[1]!)!.elementCount }));
}

describe('QDQ numerics vs float64 reference', () => {
  it('per-channel Conv (channels of very different magnitude), bias int32, output Q', async () => {
    const xd = [2, 2, 5, 5];
    const wd = [3, 2, 3, 3];
    const x = randomFloats(100, 1);
    const w = randomFloats(54, 2);
    // Channel 0 is 100x smaller: per-tensor scales would crush it.
    for (let i = 0; i < 18; i++) w[i]! *= 0.01;
    const bias = Float32Array.of(0.05, -0.2, 0.3);
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, xd);
    const y = b.node(
      'Conv',
      [xv, b.initializer('w', DataType.FLOAT, wd, w), b.initializer('b', DataType.FLOAT, [3], bias)],
      { pads: [1, 1, 1, 1] },
      { name: 'conv' },
    );
    const r = b.node('Relu', [y], {}, { name: 'relu' });
    const out = b.node('Sigmoid', [r], {}, { name: 'sig' }); // a consumer so the Relu output is an inner tensor
    b.output(out, DataType.FLOAT, [2, 3, 5, 5]);
    const model = b.build();

    const fp = conv2d(x, xd, w, wd, bias, 1);
    const xr: Range = { min: -1, max: 1 };
    const yr: Range = { min: 0, max: rangeOf(fp).max };
    const sigR: Range = { min: 0.4, max: 1 };
    const ranges = new Map<string, Range>([
      ['x', xr],
      [r.name, yr],
      [out.name, sigR],
    ]);
    // minConvReduction 0: a 2 -> 3 conv on the model input would be a narrow image stem, kept float for speed.
    const q = quantizeQdq(model, { ranges, excludeOpTypes: ['Sigmoid'], minConvReduction: 0 });
    expect(q.report.byOpType).toEqual({ Conv: 1 });
    expect(q.report.quantized[0]!.absorbed).toBe('relu');
    expect(dqAxes(q.model)).toEqual([{ axis: 0, scaleLength: 3 }]);

    const px = u8(xr);
    const pw = fqWeight(w, wd, 0);
    const conv = conv2d(fq(x, px), xd, pw.values, wd, fqBias(bias, px.scale, pw.scales), 1);
    const py = u8(yr);
    const ref = Float64Array.from(
      fq(
        conv.map((v) => Math.max(0, v)),
        py,
      ),
      (v) => 1 / (1 + Math.exp(-v)),
    );
    const { plain, fused } = await runBoth(q.model, { x }, { x: xd });
    expectClose(plain, ref, 1e-5);
    // Integer kernel: at most one output step (through the sigmoid, slope <= 1/4).
    expectClose(fused, ref, py.scale * 0.25 + 1e-5);
    // And it is close to FP32: channel 0 keeps its precision thanks to per-channel scales.
    const fp32 = fp.map((v) => 1 / (1 + Math.exp(-Math.max(0, v))));
    expectClose(fused, fp32, 0.02);
  });

  it('ConvTranspose (2x2, stride 2): weights per output channel on axis 1, bias int32; runs float between int8 tensors', async () => {
    const xd = [2, 3, 3, 3];
    const wd = [3, 2, 2, 2]; // [Cin, Cout, kh, kw]
    const x = randomFloats(54, 21);
    const w = randomFloats(24, 22);
    for (let i = 0; i < 24; i++) if (Math.floor(i / 4) % 2 === 1) w[i]! *= 0.02; // output channel 1 is 50x smaller
    const bias = Float32Array.of(0.1, -0.05);
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, xd);
    const y = b.node(
      'ConvTranspose',
      [xv, b.initializer('w', DataType.FLOAT, wd, w), b.initializer('b', DataType.FLOAT, [2], bias)],
      { strides: [2, 2] },
      { name: 'up' },
    );
    const out = b.node('Sigmoid', [y], {}, { name: 'sig' });
    b.output(out, DataType.FLOAT, [2, 2, 6, 6]);
    const model = b.build();
    // Non-overlapping 2x2 windows: y[n, o, 2i+a, 2j+c] = sum_ci x[n, ci, i, j] w[ci, o, a, c] + b[o].
    const convT = (xs: ArrayLike<number>, ws: ArrayLike<number>, bs: ArrayLike<number>): Float64Array => {
      const outp = new Float64Array(2 * 2 * 36);
      for (let n = 0; n < 2; n++)
        for (let o = 0; o < 2; o++)
          for (let i = 0; i < 3; i++)
            for (let j = 0; j < 3; j++)
              for (let a = 0; a < 2; a++)
                for (let c = 0; c < 2; c++) {
                  let v = bs[o]!;
                  for (let ci = 0; ci < 3; ci++) v += xs[((n * 3 + ci) * 3 + i) * 3 + j]! * ws[((ci * 2 + o) * 2 + a) * 2 + c]!;
                  outp[((n * 2 + o) * 6 + 2 * i + a) * 6 + 2 * j + c] = v;
                }
      return outp;
    };
    const fp = convT(x, w, bias);
    const xr: Range = { min: -1, max: 1 };
    const yr = rangeOf(fp);
    const q = quantizeQdq(model, {
      ranges: new Map([
        ['x', xr],
        [y.name, yr],
      ]),
      excludeOpTypes: ['Sigmoid'],
    });
    expect(q.report.byOpType).toEqual({ ConvTranspose: 1 });
    expect(q.report.floatCompute.map((f) => f.node)).toEqual(['up']);
    expect(dqAxes(q.model)).toEqual([{ axis: 1, scaleLength: 2 }]);
    const px = u8(xr);
    const pw = fqWeight(w, wd, 1);
    const py = u8(yr);
    const ref = Float64Array.from(fq(convT(fq(x, px), pw.values, fqBias(bias, px.scale, pw.scales)), py), (v) => 1 / (1 + Math.exp(-v)));
    const { plain, fused } = await runBoth(q.model, { x }, { x: xd });
    expectClose(plain, ref, 1e-5);
    expectClose(fused, ref, py.scale * 0.25 + 1e-5);
    // Output channel 1 keeps its precision (per-channel scales): close to FP32 everywhere.
    expectClose(
      fused,
      Float64Array.from(fp, (v) => 1 / (1 + Math.exp(-v))),
      0.01,
    );
  });

  it('Split: every piece keeps the input parameters, so onnxruntime splits 8-bit data (within one step of the float64 reference)', async () => {
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, [1, 2, 4, 4]);
    const r = b.node(
      'Relu',
      [b.node('Conv', [xv, b.initializer('w', DataType.FLOAT, [4, 2, 1, 1], randomFloats(8, 41))], {}, { name: 'conv' })],
      {},
      { name: 'relu' },
    );
    const pieces = b.node(
      'Split',
      [r, b.initializer('sizes', DataType.INT64, [2], BigInt64Array.of(1n, 3n))],
      { axis: 1 },
      { name: 'split', outputs: ['p0', 'p1'] },
    ) as unknown as [typeof r, typeof r];
    const cat = b.node(
      'Concat',
      [
        b.node('Conv', [pieces[0], b.initializer('wa', DataType.FLOAT, [2, 1, 1, 1], randomFloats(2, 42))], {}, { name: 'ca' }),
        b.node('Conv', [pieces[1], b.initializer('wb', DataType.FLOAT, [2, 3, 1, 1], randomFloats(6, 43))], {}, { name: 'cb' }),
      ],
      { axis: 1 },
      { name: 'cat' },
    );
    b.output(cat, DataType.FLOAT, [1, 4, 4, 4]);
    b.output(pieces[1], DataType.FLOAT, [1, 3, 4, 4]);
    const model = b.build();
    const x = randomFloats(32, 44);
    const ranges = new Map<string, Range>([
      ['x', { min: -1, max: 1 }],
      [r.name, { min: 0, max: 1.5 }],
      ['ca_output', { min: -1, max: 1 }],
      ['cb_output', { min: -1, max: 1 }],
      [cat.name, { min: -1, max: 1 }],
    ]);
    for (const n of model.graph.nodes) for (const o of n.outputs) if (!ranges.has(o.name)) ranges.set(o.name, { min: -2, max: 2 });
    const q = quantizeQdq(model, { ranges });
    expect(q.report.byOpType.Split).toBe(1);
    // The Q after each piece uses the Relu output's scale and zero point (the same initializers).
    const qAfter = (name: string) => q.model.graph.nodes.find((n) => n.opType === 'QuantizeLinear' && n.inputs[0]!.name.startsWith(name))!;
    const reluQ = qAfter(r.name);
    for (const piece of ['p0', 'p1']) expect([qAfter(piece).inputs[1], qAfter(piece).inputs[2]]).toEqual([reluQ.inputs[1], reluQ.inputs[2]]);
    const fusion = await checkFusion(q.model);
    expect(fusion.unfused).toEqual([]);
    expect(fusion.eightBitDataMovement.Split).toBe(1);
    // The second graph output is the piece itself: quantized once (at the Relu), split unchanged.
    const runner = await createRunner(q.model, { intraOpThreads: 1 });
    const out = await runner.run({ x: { dtype: DataType.FLOAT, dims: [1, 2, 4, 4], data: x } });
    await runner.release();
    const pr = u8({ min: 0, max: 1.5 });
    const px = u8({ min: -1, max: 1 });
    const w = fqWeight(randomFloats(8, 41), [4, 2, 1, 1], 0);
    const relu = fq(
      conv2d(fq(x, px), [1, 2, 4, 4], w.values, [4, 2, 1, 1], null, 0).map((v) => Math.max(0, v)),
      pr,
    );
    expectClose(out['p1']!.data as Float32Array, relu.subarray(16), pr.scale + 1e-6);
  });

  it('a data-movement op whose readers stay float is not quantized, so the Gemm before it keeps a float output', async () => {
    // The shape an opset upgrade gives an old classifier head: Gemm -> Flatten -> Softmax -> Reshape.
    const b = new GraphBuilder({ opset: 13 });
    const x = b.input('x', DataType.FLOAT, ['N', 8]);
    const fc = b.node(
      'Gemm',
      [x, b.initializer('w', DataType.FLOAT, [4, 8], randomFloats(32, 61)), b.initializer('c', DataType.FLOAT, [4], randomFloats(4, 62, 0.1))],
      { transB: 1 },
      { name: 'fc' },
    );
    const flat = b.node('Flatten', [fc], { axis: 1 }, { name: 'flat' });
    const prob = b.node('Softmax', [flat], { axis: 1 }, { name: 'softmax' });
    b.output(prob, DataType.FLOAT, ['N', 4]);
    const model = b.build();
    const ranges = new Map<string, Range>([
      ['x', { min: -1, max: 1 }],
      [fc.name, { min: -3, max: 3 }],
      [flat.name, { min: -3, max: 3 }],
    ]);
    const q = quantizeQdq(model, { ranges });
    expect(q.report.byOpType).toEqual({ Gemm: 1 });
    expect(q.report.skipped).toContainEqual({
      node: 'flat',
      opType: 'Flatten',
      reason: 'its readers stay float: in 8-bit it would only add a DequantizeLinear',
    });
    expect(q.report.quantized[0]).toMatchObject({ node: 'fc', outputQuantized: false });
    const fusion = await checkFusion(q.model);
    expect(fusion.integerKernels).toEqual({ QGemm: 1 });
    expect(fusion.unfused).toEqual([]);
  });

  it('per-tensor Conv on request uses one weight scale', () => {
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, [1, 2, 4, 4]);
    const y = b.node('Conv', [xv, b.initializer('w', DataType.FLOAT, [3, 2, 1, 1], randomFloats(6, 3))]);
    b.output(y, DataType.FLOAT, [1, 3, 4, 4]);
    const q = quantizeQdq(b.build(), {
      ranges: new Map([
        ['x', { min: -1, max: 1 }],
        [y.name, { min: -2, max: 2 }],
      ]),
      perChannel: false,
      minConvReduction: 0,
    });
    expect(dqAxes(q.model)).toEqual([{ axis: undefined, scaleLength: 1 }]);
    // The graph output keeps its name on the final DequantizeLinear.
    expect(q.model.graph.outputs[0]!.name).toBe(y.name);
    expect(q.model.graph.outputs[0]!.producer!.opType).toBe('DequantizeLinear');
  });

  it('Gemm with transB: per-row weight scales (axis 0), int32 bias, float output -> QGemm', async () => {
    const x = randomFloats(24, 4);
    const w = randomFloats(30, 5, 0.5);
    const bias = randomFloats(5, 6, 0.1);
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, [4, 6]);
    const y = b.node(
      'Gemm',
      [xv, b.initializer('w', DataType.FLOAT, [5, 6], w), b.initializer('c', DataType.FLOAT, [5], bias)],
      { transB: 1, beta: 0.5 },
      { name: 'gemm' },
    );
    b.output(y, DataType.FLOAT, [4, 5]);
    const xr: Range = { min: -1, max: 1 };
    const q = quantizeQdq(b.build(), { ranges: new Map([['x', xr]]) });
    expect(dqAxes(q.model)).toEqual([{ axis: 0, scaleLength: 5 }]);
    const gemm = q.model.graph.nodes.find((n) => n.opType === 'Gemm')!;
    expect(gemm.getFloat('beta')).toBe(1); // beta folded into the int32 bias
    const px = u8(xr);
    const pw = fqWeight(w, [5, 6], 0);
    const ref = matmul(fq(x, px), 4, 6, pw.values, 5, true).map(
      (v, i) =>
        v +
        fqBias(
          bias.map((c) => c * 0.5),
          px.scale,
          pw.scales,
        )[i % 5]!,
    );
    const { plain, fused } = await runBoth(q.model, { x }, { x: [4, 6] });
    expectClose(plain, ref, 1e-5);
    expectClose(fused, ref, 1e-4);
  });

  it('Gemm without transB quantizes the weight per column (axis 1)', () => {
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, [2, 3]);
    const y = b.node('Gemm', [xv, b.initializer('w', DataType.FLOAT, [3, 4], randomFloats(12, 7))]);
    b.output(y, DataType.FLOAT, [2, 4]);
    const q = quantizeQdq(b.build(), { ranges: new Map([['x', { min: -1, max: 1 }]]) });
    expect(dqAxes(q.model)).toEqual([{ axis: 1, scaleLength: 4 }]);
  });

  it('MatMul with a constant weight: per-column scales', async () => {
    const x = randomFloats(12, 8);
    const w = randomFloats(20, 9);
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, [3, 4]);
    const y = b.node('MatMul', [xv, b.initializer('w', DataType.FLOAT, [4, 5], w)]);
    b.output(y, DataType.FLOAT, [3, 5]);
    const xr: Range = { min: -1, max: 1 };
    const q = quantizeQdq(b.build(), { ranges: new Map([['x', xr]]) });
    expect(dqAxes(q.model)).toEqual([{ axis: 1, scaleLength: 5 }]);
    const ref = matmul(fq(x, u8(xr)), 3, 4, fqWeight(w, [4, 5], 1).values, 5);
    const { plain, fused } = await runBoth(q.model, { x }, { x: [3, 4] });
    expectClose(plain, ref, 1e-5);
    expectClose(fused, ref, 1e-4);
  });

  it('residual Add: h feeds the Conv and the Add through separate DequantizeLinear nodes', async () => {
    const xd = [1, 2, 4, 4];
    const x = randomFloats(32, 10);
    const w0 = randomFloats(4, 12, 0.8);
    const w = randomFloats(36, 11, 0.3);
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, xd);
    const h = b.node('Conv', [xv, b.initializer('w0', DataType.FLOAT, [2, 2, 1, 1], w0)], {}, { name: 'conv0' });
    const c = b.node('Conv', [h, b.initializer('w', DataType.FLOAT, [2, 2, 3, 3], w)], { pads: [1, 1, 1, 1] }, { name: 'conv' });
    const y = b.node('Add', [c, h], {}, { name: 'add' });
    y.rename('y');
    b.output(y, DataType.FLOAT, xd);
    const hFp = conv2d(x, xd, w0, [2, 2, 1, 1], null, 0);
    const fpConv = conv2d(hFp, xd, w, [2, 2, 3, 3], null, 1);
    const xr: Range = { min: -1, max: 1 };
    const hr = rangeOf(hFp);
    const cr = rangeOf(fpConv);
    const yr = rangeOf(fpConv.map((v, i) => v + hFp[i]!));
    const q = quantizeQdq(b.build(), {
      ranges: new Map([
        ['x', xr],
        [h.name, hr],
        [c.name, cr],
        ['y', yr],
      ]),
      minConvReduction: 0,
    });
    expect(q.report.byOpType).toEqual({ Conv: 2, Add: 1 });
    expect(q.model.graph.outputs[0]!.name).toBe('y');
    const hq = q.model.graph.nodes.filter((n) => n.opType === 'QuantizeLinear' && n.inputs[0]!.name === h.name);
    expect(hq).toHaveLength(1);
    expect(hq[0]!.outputs[0]!.consumers.map((n) => n.opType)).toEqual(['DequantizeLinear', 'DequantizeLinear']);
    const px = u8(xr);
    const hQ = fq(conv2d(fq(x, px), xd, fqWeight(w0, [2, 2, 1, 1], 0).values, [2, 2, 1, 1], null, 0), u8(hr));
    const pw = fqWeight(w, [2, 2, 3, 3], 0);
    const convQ = fq(conv2d(hQ, xd, pw.values, [2, 2, 3, 3], null, 1), u8(cr));
    const py = u8(yr);
    const ref = fq(
      convQ.map((v, i) => v + hQ[i]!),
      py,
    );
    const { plain, fused } = await runBoth(q.model, { x }, { x: xd });
    expectClose(plain, ref, 1e-5);
    expectClose(fused, ref, py.scale + 1e-5);
  });

  it('an Add reading a float tensor that no quantized Conv reads (here a graph input) stays float, with the reason', () => {
    const xd = [1, 2, 4, 4];
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, xd);
    const zv = b.input('z', DataType.FLOAT, xd);
    const c = b.node('Conv', [xv, b.initializer('w', DataType.FLOAT, [2, 2, 3, 3], randomFloats(36, 11, 0.3))], { pads: [1, 1, 1, 1] }, { name: 'conv' });
    const y = b.node('Add', [c, zv], {}, { name: 'add' });
    b.output(y, DataType.FLOAT, xd);
    const r: Range = { min: -1, max: 1 };
    // minConvReduction 0: the 2 -> 2 conv on the model input would otherwise stay float as a narrow image stem.
    const q = quantizeQdq(b.build(), {
      ranges: new Map([
        ['x', r],
        ['z', r],
        [c.name, r],
        [y.name, r],
      ]),
      minConvReduction: 0,
    });
    expect(q.report.byOpType).toEqual({ Conv: 1 });
    expect(q.report.skipped).toEqual([{ node: 'add', opType: 'Add', reason: "reads float tensor 'z': an int8 Add only pays off between int8 tensors" }]);
    // Sensitivity analysis quantizes one node at a time and still gets it.
    expect(
      quantizeQdq(b.build(), {
        ranges: new Map([
          ['x', r],
          ['z', r],
          [c.name, r],
          [y.name, r],
        ]),
        onlyNodes: ['add'],
      }).report.byOpType,
    ).toEqual({ Add: 1 });
  });

  it('layout anchor: an Add reading a float tensor that a quantized Conv also reads runs int8, both reading an identity int8 depthwise conv; numerics = float64 reference', async () => {
    const xd = [1, 8, 5, 5];
    const x = randomFloats(200, 30);
    const w = randomFloats(8 * 8 * 9, 31, 0.2);
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, xd);
    const c = b.node('Conv', [xv, b.initializer('w', DataType.FLOAT, [8, 8, 3, 3], w)], { pads: [1, 1, 1, 1] }, { name: 'conv' });
    c.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: xd };
    const y = b.node('Add', [c, xv], {}, { name: 'add' });
    y.rename('y');
    b.output(y, DataType.FLOAT, xd);
    const xr: Range = { min: -1, max: 1 };
    const pw = fqWeight(w, [8, 8, 3, 3], 0);
    const fpConv = conv2d(fq(x, u8(xr)), xd, pw.values, [8, 8, 3, 3], null, 1);
    const cr = rangeOf(fpConv);
    const xQ = fq(x, u8(xr));
    const convQ = fq(fpConv, u8(cr));
    const yr = rangeOf(convQ.map((v, i) => v + xQ[i]!));
    const ranges = new Map([
      ['x', xr],
      [c.name, cr],
      ['y', yr],
    ]);
    const q = quantizeQdq(b.build(), { ranges });
    expect(q.report.byOpType).toEqual({ Conv: 1, Add: 1 });
    expect(q.report.layoutAnchors).toEqual([{ tensor: 'x', channels: 8, enables: ['add'] }]);
    const anchor = q.model.graph.nodes.find((n) => n.name === 'x_layout_anchor')!;
    expect(anchor.getInt('group')).toBe(8);
    // Both readers of x read the anchor's output (each through its own DequantizeLinear).
    const anchored = anchor.outputs[0]!.consumers[0]!;
    expect(anchored.opType).toBe('QuantizeLinear');
    expect(anchored.outputs[0]!.consumers.map((d) => d.outputs[0]!.consumers[0]!.name).sort()).toEqual(['add', 'conv']);
    const ref = fq(
      convQ.map((v, i) => v + xQ[i]!),
      u8(yr),
    );
    const { plain, fused } = await runBoth(q.model, { x }, { x: xd });
    expectClose(plain, ref, 1e-5);
    expectClose(fused, ref, u8(yr).scale + 1e-5);
    // In onnxruntime: two QLinearConvs (anchor, conv) and a QLinearAdd, nothing left in float.
    const fusion = await checkFusion(q.model);
    expect(fusion.integerKernels).toEqual({ QLinearConv: 2, QLinearAdd: 1 });
    expect(fusion.unfused).toEqual([]);
    // Without anchors the Add stays float, with the reason.
    const plainPlan = quantizeQdq(b.build(), { ranges, layoutAnchors: false });
    expect(plainPlan.report.byOpType).toEqual({ Conv: 1 });
    expect(plainPlan.report.skipped[0]!.reason).toMatch(/^reads float tensor 'x'/);
    // Nor with int8 activations (no QLinearConv fuses with them on this build).
    expect(quantizeQdq(b.build(), { ranges, activationType: 'int8' }).report.layoutAnchors).toEqual([]);
  });

  it('no layout anchor for an elementwise op whose only other input is a constant, nor for one that broadcasts', () => {
    const xd = [1, 8, 5, 5];
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, xd);
    const c = b.node('Conv', [xv, b.initializer('w', DataType.FLOAT, [8, 8, 3, 3], randomFloats(576, 32, 0.2))], { pads: [1, 1, 1, 1] }, { name: 'conv' });
    c.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: xd };
    const scaled = b.node('Mul', [xv, b.initializer('half', DataType.FLOAT, [], Float32Array.of(0.5))], {}, { name: 'scale' });
    const pooled = b.node('GlobalAveragePool', [c], {}, { name: 'gap' });
    pooled.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: [1, 8, 1, 1] };
    const gated = b.node('Mul', [xv, pooled], {}, { name: 'gate' });
    b.output(b.node('Add', [scaled, gated], {}, { name: 'sum' }), DataType.FLOAT, xd);
    const r: Range = { min: -1, max: 1 };
    const q = quantizeQdq(b.build(), {
      ranges: new Map([
        ['x', r],
        [c.name, r],
        [pooled.name, r],
        [scaled.name, r],
        [gated.name, r],
      ]),
    });
    expect(q.report.layoutAnchors).toEqual([]);
    expect(
      q.report.skipped
        .filter((k) => k.opType === 'Mul')
        .map((k) => k.node)
        .sort(),
    ).toEqual(['gate', 'scale']);
  });

  it('Concat of two differently scaled inputs re-quantizes to the output range', async () => {
    const a = randomFloats(6, 12, 0.5);
    const c = randomFloats(6, 13, 3);
    const b = new GraphBuilder({ opset: 13 });
    const av = b.input('a', DataType.FLOAT, [2, 3]);
    const cv = b.input('c', DataType.FLOAT, [2, 3]);
    const y = b.node('Concat', [av, cv], { axis: 1 }, { name: 'cat' });
    y.rename('y');
    const z = b.node('Sigmoid', [y]);
    b.output(z, DataType.FLOAT, [2, 6]);
    const ar: Range = { min: -0.5, max: 0.5 };
    const cr: Range = { min: -3, max: 3 };
    const yr: Range = { min: -3, max: 3 };
    // Between float inputs and a float Sigmoid the defaults leave a lone Concat float (nothing to
    // gain); the numerics are checked on exactly this node, as sensitivity analysis quantizes it.
    expect(
      quantizeQdq(b.build(), {
        opTypes: ['Concat'],
        ranges: new Map([
          ['a', ar],
          ['c', cr],
          ['y', yr],
        ]),
      }).report.skipped,
    ).toEqual([
      { node: 'cat', opType: 'Concat', reason: 'between float ops: in 8-bit it would only add a QuantizeLinear before it and a DequantizeLinear after it' },
    ]);
    const options: QdqOptions = { onlyNodes: ['cat'] };
    const q = quantizeQdq(b.build(), {
      ...options,
      ranges: new Map([
        ['a', ar],
        ['c', cr],
        ['y', yr],
      ]),
    });
    expect(q.report.byOpType).toEqual({ Concat: 1 });
    const fa = fq(a, u8(ar));
    const fc = fq(c, u8(cr));
    const cat: number[] = [];
    for (let r = 0; r < 2; r++) cat.push(...fa.slice(r * 3, r * 3 + 3), ...fc.slice(r * 3, r * 3 + 3));
    const ref = Float64Array.from(fq(cat, u8(yr)), (v) => 1 / (1 + Math.exp(-v)));
    const { plain, fused } = await runBoth(q.model, { a, c }, { a: [2, 3], c: [2, 3] });
    expectClose(plain, ref, 1e-5);
    expectClose(fused, ref, u8(yr).scale * 0.25 + 1e-5);
  });

  it('respects --exclude-nodes and --exclude-op-types', () => {
    const b = new GraphBuilder({ opset: 13 });
    const xv = b.input('x', DataType.FLOAT, [1, 4]);
    const h = b.node('MatMul', [xv, b.initializer('w1', DataType.FLOAT, [4, 4], randomFloats(16, 14))], {}, { name: 'mm1' });
    const y = b.node('MatMul', [h, b.initializer('w2', DataType.FLOAT, [4, 4], randomFloats(16, 15))], {}, { name: 'mm2' });
    b.output(y, DataType.FLOAT, [1, 4]);
    const model = b.build();
    const ranges = new Map([
      ['x', { min: -1, max: 1 }],
      [h.name, { min: -2, max: 2 }],
    ]);
    expect(quantizeQdq(model, { ranges, excludeNodes: ['mm2'] }).report.quantized.map((q) => q.node)).toEqual(['mm1']);
    const none = quantizeQdq(model, { ranges, excludeOpTypes: ['MatMul'] });
    expect(none.report.quantized).toHaveLength(0);
    expect(none.report.skipped.map((s) => s.reason)).toEqual(['excluded', 'excluded']);
    // The input model is untouched.
    expect(model.graph.nodes.map((n) => n.opType)).toEqual(['MatMul', 'MatMul']);
  });
});

/**
 * Every tiny fixture graph loads and runs in onnxruntime-node, with the expected output shape and
 * values equal to a float64 reference computed here from the model's own initializers.
 */
import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../../src/ir/dtype.js';
import type { Model } from '../../../src/ir/model.js';
import { createRunner } from '../../../src/runtime/index.js';
import { concat, convBnChain, depthwiseConv, flattenGemm, gemmTransB, ifSubgraph, matMul, residualAdd, seededFloats } from '../../../fixtures/tiny-graphs.js';

const TOL = 1e-5; // float32 inference vs float64 reference on values of order 1

function weight(model: Model, name: string): Float64Array {
  const t = model.graph.value(name)?.initializer;
  if (!t) throw new Error(`no initializer ${name}`);
  return t.toFloat64();
}

/** A tensor of shape `dims` (float64 values) in NCHW. */
interface Nd {
  dims: number[];
  data: Float64Array;
}

function input(dims: number[], seed: number): { feed: TensorData; nd: Nd } {
  const data = seededFloats(
    seed,
    dims.reduce((a, b) => a * b, 1),
  );
  return { feed: { dtype: DataType.FLOAT, dims, data }, nd: { dims, data: Float64Array.from(data) } };
}

/** NCHW convolution with groups, symmetric pads and strides; w [M, C/group, KH, KW]. */
function conv(x: Nd, w: Float64Array, wDims: number[], bias: Float64Array | null, opts: { pad: number; stride: number; group: number }): Nd {
  const [n, c, h, wd] = x.dims as [number, number, number, number];
  const [m, cg, kh, kw] = wDims as [number, number, number, number];
  const oh = Math.floor((h + 2 * opts.pad - kh) / opts.stride) + 1;
  const ow = Math.floor((wd + 2 * opts.pad - kw) / opts.stride) + 1;
  const out = new Float64Array(n * m * oh * ow);
  const mPerGroup = m / opts.group;
  for (let b = 0; b < n; b++)
    for (let o = 0; o < m; o++) {
      const g = Math.floor(o / mPerGroup);
      for (let y = 0; y < oh; y++)
        for (let xo = 0; xo < ow; xo++) {
          let s = bias ? bias[o]! : 0;
          for (let ci = 0; ci < cg; ci++)
            for (let i = 0; i < kh; i++)
              for (let j = 0; j < kw; j++) {
                const iy = y * opts.stride + i - opts.pad;
                const ix = xo * opts.stride + j - opts.pad;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                s += x.data[((b * c + g * cg + ci) * h + iy) * wd + ix]! * w[((o * cg + ci) * kh + i) * kw + j]!;
              }
          out[((b * m + o) * oh + y) * ow + xo] = s;
        }
    }
  return { dims: [n, m, oh, ow], data: out };
}

function batchNorm(x: Nd, model: Model, name: string): Nd {
  const [scale, bias, mean, variance] = ['scale', 'bias', 'mean', 'var'].map((k) => weight(model, `${name}.${k}`));
  const [, c, h, w] = x.dims as [number, number, number, number];
  const data = x.data.map((v, i) => {
    const ch = Math.floor(i / (h * w)) % c;
    return ((v - mean![ch]!) / Math.sqrt(variance![ch]! + 1e-5)) * scale![ch]! + bias![ch]!;
  });
  return { dims: x.dims, data };
}

const relu = (x: Nd): Nd => ({ dims: x.dims, data: x.data.map((v) => Math.max(0, v)) });

/** [n, k] x [k, m] (or w^T when transB) times alpha, plus beta * bias. */
function gemm(
  x: Float64Array,
  n: number,
  k: number,
  w: Float64Array,
  m: number,
  transB: boolean,
  bias: Float64Array | null,
  alpha = 1,
  beta = 1,
): Float64Array {
  const out = new Float64Array(n * m);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < m; j++) {
      let s = 0;
      for (let t = 0; t < k; t++) s += x[i * k + t]! * (transB ? w[j * k + t]! : w[t * m + j]!);
      out[i * m + j] = alpha * s + (bias ? beta * bias[j]! : 0);
    }
  return out;
}

async function run(model: Model, feeds: Record<string, TensorData>): Promise<TensorData> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    const out = await runner.run(feeds);
    return out['y']!;
  } finally {
    await runner.release();
  }
}

function expectClose(actual: TensorData, expected: Nd): void {
  expect(actual.dims).toEqual(expected.dims);
  const a = actual.data as Float32Array;
  let maxDiff = 0;
  for (let i = 0; i < expected.data.length; i++) maxDiff = Math.max(maxDiff, Math.abs(a[i]! - expected.data[i]!));
  expect(maxDiff).toBeLessThan(TOL);
}

describe('tiny fixture graphs run in onnxruntime and match a float64 reference', () => {
  it('residual add: relu(conv(x)) + x', async () => {
    const model = residualAdd();
    const { feed, nd } = input([1, 4, 6, 6], 100);
    const c = relu(conv(nd, weight(model, 'w'), [4, 4, 3, 3], weight(model, 'b'), { pad: 1, stride: 1, group: 1 }));
    expectClose(await run(model, { x: feed }), { dims: c.dims, data: c.data.map((v, i) => v + nd.data[i]!) });
  });

  it('concat of a 1x1 and a 3x3 conv along channels', async () => {
    const model = concat();
    const { feed, nd } = input([1, 3, 5, 5], 101);
    const a = conv(nd, weight(model, 'wa'), [2, 3, 1, 1], null, { pad: 0, stride: 1, group: 1 });
    const b = conv(nd, weight(model, 'wb'), [4, 3, 3, 3], null, { pad: 1, stride: 1, group: 1 });
    const data = new Float64Array(6 * 25);
    data.set(a.data, 0);
    data.set(b.data, 2 * 25); // batch 1: channel blocks are contiguous
    expectClose(await run(model, { x: feed }), { dims: [1, 6, 5, 5], data });
  });

  it('depthwise conv (group = channels, stride 2)', async () => {
    const model = depthwiseConv();
    const { feed, nd } = input([1, 4, 6, 6], 102);
    expectClose(await run(model, { x: feed }), conv(nd, weight(model, 'w'), [4, 1, 3, 3], weight(model, 'b'), { pad: 1, stride: 2, group: 4 }));
  });

  it('MatMul with a dynamic batch', async () => {
    const model = matMul();
    const { feed, nd } = input([5, 6], 103);
    expectClose(await run(model, { x: feed }), { dims: [5, 3], data: gemm(nd.data, 5, 6, weight(model, 'w'), 3, false, null) });
  });

  it('Gemm with transB=1, alpha and beta', async () => {
    const model = gemmTransB();
    const { feed, nd } = input([4, 6], 104);
    expectClose(await run(model, { x: feed }), { dims: [4, 3], data: gemm(nd.data, 4, 6, weight(model, 'w'), 3, true, weight(model, 'b'), 0.5, 2) });
  });

  it('Conv -> BN -> Relu -> Conv -> BN chain', async () => {
    const model = convBnChain();
    const { feed, nd } = input([1, 3, 6, 6], 105);
    let y = relu(batchNorm(conv(nd, weight(model, 'w1'), [4, 3, 3, 3], null, { pad: 1, stride: 1, group: 1 }), model, 'bn1'));
    y = batchNorm(conv(y, weight(model, 'w2'), [4, 4, 1, 1], weight(model, 'b2'), { pad: 0, stride: 1, group: 1 }), model, 'bn2');
    expectClose(await run(model, { x: feed }), y);
  });

  it('Flatten -> Gemm', async () => {
    const model = flattenGemm();
    const { feed, nd } = input([3, 2, 3, 3], 106);
    expectClose(await run(model, { x: feed }), { dims: [3, 4], data: gemm(nd.data, 3, 18, weight(model, 'w'), 4, true, weight(model, 'b')) });
  });

  it('If with a then-branch initializer and an outer-scope read in the else branch', async () => {
    const model = ifSubgraph();
    const { feed, nd } = input([2, 3], 107);
    const scale = model.graph.nodes
      .find((n) => n.opType === 'If')!
      .subgraphs()[0]!
      .localValue('scale')!
      .initializer!.toFloat64();
    const offset = weight(model, 'offset');
    for (const flag of [true, false]) {
      const out = await run(model, { x: feed, cond: { dtype: DataType.BOOL, dims: [], data: Uint8Array.of(flag ? 1 : 0) } });
      const data = nd.data.map((v, i) => (flag ? v * scale[i % 3]! : v + offset[i % 3]!));
      expectClose(out, { dims: [2, 3], data });
    }
  });

  it('weights are deterministic across calls', () => {
    expect(weight(residualAdd(), 'w')).toEqual(weight(residualAdd(), 'w'));
    expect(Array.from(seededFloats(1, 3))).toEqual(Array.from(seededFloats(1, 3)));
  });
});

// FP16 conversion: numerics against float64 / float32 references run in onnxruntime, clamping of
// out-of-range constants, calibration-range fallback, keep-io-types boundaries without cast chains,
// block lists, subgraphs, size.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, Tensor, float16ToFloat32, float32ToFloat16, isTensorType, type Model, type Node, type Value } from '../../../src/ir/index.js';
import { encodeModel } from '../../../src/onnx/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { convertToFloat16 } from '../../../src/passes/quantize/fp16.js';
import type { TensorData } from '../../../src/ir/dtype.js';
import { rng } from '../../helpers/random.js';
import { randomArray, randomFloats } from './models.js';

const f32 = (dims: number[], data: Float32Array): TensorData => ({ dtype: DataType.FLOAT, dims, data });

async function run(model: Model, feeds: Record<string, TensorData>): Promise<Record<string, TensorData>> {
  const runner = await createRunner(model, { intraOpThreads: 1 });
  try {
    return await runner.run(feeds);
  } finally {
    await runner.release();
  }
}

/** Every node reads only values produced earlier (or graph inputs/initializers/outer values). */
function assertTopological(model: Model): void {
  const seen = new Set<Value>([...model.graph.inputs, ...model.graph.initializerValues]);
  for (const n of model.graph.nodes) {
    for (const v of n.inputs) if (v && v.producer && v.graph === model.graph) expect(seen.has(v), `${n.name} reads ${v.name} before it is made`).toBe(true);
    n.outputs.forEach((o) => seen.add(o));
  }
}

/** No Cast reads the output of another Cast. */
function castChains(model: Model): Node[] {
  return model.graph.nodes.filter((n) => n.opType === 'Cast' && n.inputs[0]?.producer?.opType === 'Cast');
}

// x [N,16] -> MatMul w1 [16,32] -> Add b1 -> Relu -> Gemm(transB) w2 [8,32], b2 -> Sigmoid -> y [N,8]
function mlp(seed = 3): { model: Model; w1: Float32Array; b1: Float32Array; w2: Float32Array; b2: Float32Array } {
  const rand = rng(seed);
  const w1 = randomArray(rand, 16 * 32, 0.5);
  const b1 = randomArray(rand, 32, 0.1);
  const w2 = randomArray(rand, 8 * 32, 0.5);
  const b2 = randomArray(rand, 8, 0.1);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 16]);
  const h = b.node(
    'Add',
    [b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [16, 32], w1)], {}, { name: 'fc1' }), b.initializer('b1', DataType.FLOAT, [32], b1)],
    {},
    { name: 'bias1' },
  );
  const r = b.node('Relu', [h], {}, { name: 'relu' });
  const g = b.node('Gemm', [r, b.initializer('w2', DataType.FLOAT, [8, 32], w2), b.initializer('b2', DataType.FLOAT, [8], b2)], { transB: 1 }, { name: 'fc2' });
  b.output(b.node('Sigmoid', [g], {}, { name: 'sigmoid' }), DataType.FLOAT, ['N', 8]);
  const model = b.build();
  model.graph.outputs[0]!.rename('y');
  return { model, w1, b1, w2, b2 };
}

function mlpReference(x: Float32Array, n: number, p: ReturnType<typeof mlp>): Float64Array {
  const y = new Float64Array(n * 8);
  for (let s = 0; s < n; s++) {
    const h = new Float64Array(32);
    for (let j = 0; j < 32; j++) {
      let acc = p.b1[j]!;
      for (let k = 0; k < 16; k++) acc += x[s * 16 + k]! * p.w1[k * 32 + j]!;
      h[j] = Math.max(0, acc);
    }
    for (let o = 0; o < 8; o++) {
      let acc = p.b2[o]!;
      for (let j = 0; j < 32; j++) acc += h[j]! * p.w2[o * 32 + j]!;
      y[s * 8 + o] = 1 / (1 + Math.exp(-acc));
    }
  }
  return y;
}

// A small CNN with the structures real models have: Conv+BN+Relu, residual Add, pooling, Concat,
// Reshape by a Constant shape, a Constant float scale, ConstantOfShape, Gemm and Softmax.
function cnn(seed = 5): Model {
  const rand = rng(seed);
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('input', DataType.FLOAT, ['N', 1, 8, 8]);
  const c1 = b.node(
    'Conv',
    [
      x,
      b.initializer('conv1_w', DataType.FLOAT, [4, 1, 3, 3], randomArray(rand, 36, 0.6)),
      b.initializer('conv1_b', DataType.FLOAT, [4], randomArray(rand, 4, 0.1)),
    ],
    { pads: [1, 1, 1, 1] },
    { name: 'conv1' },
  );
  const bn = b.node(
    'BatchNormalization',
    [
      c1,
      b.initializer('bn_scale', DataType.FLOAT, [4], Float32Array.from([1.1, 0.9, 1.2, 0.8])),
      b.initializer('bn_bias', DataType.FLOAT, [4], Float32Array.from([0.1, -0.1, 0.05, 0])),
      b.initializer('bn_mean', DataType.FLOAT, [4], Float32Array.from([0.01, -0.02, 0.03, 0])),
      b.initializer('bn_var', DataType.FLOAT, [4], Float32Array.from([1.5, 0.7, 1.1, 0.9])),
    ],
    {},
    { name: 'bn1' },
  );
  const r1 = b.node('Relu', [bn], {}, { name: 'relu1' });
  const c2 = b.node(
    'Conv',
    [r1, b.initializer('conv2_w', DataType.FLOAT, [4, 4, 3, 3], randomArray(rand, 144, 0.3))],
    { pads: [1, 1, 1, 1] },
    { name: 'conv2' },
  );
  const res = b.node('Add', [c2, r1], {}, { name: 'residual' });
  const pool = b.node('MaxPool', [res], { kernel_shape: [2, 2], strides: [2, 2] }, { name: 'pool' });
  const gap = b.node('GlobalAveragePool', [pool], {}, { name: 'gap' });
  const flat = b.node('Flatten', [gap], {}, { name: 'flatten' });
  const shape = b.constant('flat_shape', { dtype: DataType.INT64, dims: [2], data: BigInt64Array.from([0n, -1n]) });
  const pooled = b.node('Reshape', [pool, shape], {}, { name: 'reshape' });
  const half = b.constant('half', { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(0.5) });
  const scaled = b.node('Mul', [pooled, half], {}, { name: 'scale' });
  const shapeOf = b.node('Shape', [flat], {}, { name: 'shape_of' });
  const ones = b.node(
    'ConstantOfShape',
    [shapeOf],
    { value: Tensor.fromData('value', { dtype: DataType.FLOAT, dims: [1], data: Float32Array.of(0.25) }) },
    { name: 'ones' },
  );
  const shifted = b.node('Add', [flat, ones], {}, { name: 'shift' });
  const cat = b.node('Concat', [shifted, scaled], { axis: 1 }, { name: 'concat' });
  const fc = b.node(
    'Gemm',
    [
      cat,
      b.initializer('fc_w', DataType.FLOAT, [10, 68], randomArray(rand, 680, 0.4)),
      b.initializer('fc_b', DataType.FLOAT, [10], randomArray(rand, 10, 0.1)),
    ],
    { transB: 1 },
    { name: 'fc' },
  );
  b.output(b.node('Softmax', [fc], { axis: 1 }, { name: 'softmax' }), DataType.FLOAT, ['N', 10]);
  const model = b.build();
  model.graph.outputs[0]!.rename('probs');
  return model;
}

describe('convertToFloat16', () => {
  it('MLP: outputs match a float64 reference within float16 tolerance; float32 boundary; no cast chains', async () => {
    const p = mlp();
    const { model, report } = convertToFloat16(p.model, {});
    const n = 16;
    const x = randomFloats(n * 16, 11, 1);
    const out = (await run(model, { x: f32([n, 16], x) })).y!;
    expect(out.dtype).toBe(DataType.FLOAT);
    const ref = mlpReference(x, n, p);
    let maxErr = 0;
    for (let i = 0; i < ref.length; i++) maxErr = Math.max(maxErr, Math.abs((out.data as Float32Array)[i]! - ref[i]!));
    // Sigmoid outputs in (0,1): float16 has 11 significant bits (2^-11 ~ 4.9e-4 relative); a few
    // roundings through two layers stay below 4e-3, while float32 would be ~1e-7.
    expect(maxErr).toBeLessThan(4e-3);
    expect(maxErr).toBeGreaterThan(1e-5); // it really computed in float16
    // Exactly two Casts: input to float16, output back to float32.
    const casts = model.graph.nodes.filter((nd) => nd.opType === 'Cast');
    expect(casts.map((c) => c.getInt('to')).sort()).toEqual([DataType.FLOAT, DataType.FLOAT16]);
    expect(castChains(model)).toEqual([]);
    expect(model.graph.inputs[0]!.type).toMatchObject({ elemType: DataType.FLOAT });
    expect(model.graph.outputs[0]!.name).toBe('y');
    expect(model.graph.outputs[0]!.type).toMatchObject({ elemType: DataType.FLOAT, shape: ['N', 8] });
    expect(report.nodesConverted).toBe(5);
    expect(report.keptFloat32).toEqual([]);
    assertTopological(model);
    // Input model untouched.
    expect(p.model.graph.initializers.every((t) => t.dtype === DataType.FLOAT)).toBe(true);
    expect(p.model.graph.nodes.some((nd) => nd.opType === 'Cast')).toBe(false);
  });

  it('CNN (Conv+BN+Relu, residual, pooling, Constant, ConstantOfShape, Concat, Gemm): loads in onnxruntime, matches float32, size halved', async () => {
    const fp32 = cnn();
    const { model, report } = convertToFloat16(fp32, {});
    const n = 4;
    const x = f32([n, 1, 8, 8], randomFloats(n * 64, 21, 1));
    const ref = (await run(fp32, { input: x })).probs!.data as Float32Array;
    const got = (await run(model, { input: x })).probs!.data as Float32Array;
    let maxErr = 0;
    for (let i = 0; i < ref.length; i++) maxErr = Math.max(maxErr, Math.abs(got[i]! - ref[i]!));
    expect(maxErr).toBeLessThan(2e-3);
    // Every float constant is float16 now; Constant and ConstantOfShape values too.
    expect(model.graph.initializers.filter((t) => t.dtype === DataType.FLOAT).map((t) => t.name)).toEqual([]);
    const constant = model.graph.nodes.find((nd) => nd.opType === 'Constant' && nd.getTensor('value')?.dims.length === 0)!;
    expect(constant.getTensor('value')!.dtype).toBe(DataType.FLOAT16);
    const cos = model.graph.nodes.find((nd) => nd.opType === 'ConstantOfShape')!;
    expect(cos.getTensor('value')!.dtype).toBe(DataType.FLOAT16);
    expect(float16ToFloat32((cos.getTensor('value')!.data as Uint16Array)[0]!)).toBe(0.25);
    const intBytes = 16; // the int64 Reshape shape does not change
    expect((report.weightBytesAfter - intBytes) * 2).toBe(report.weightBytesBefore - intBytes);
    const ratio = encodeModel(model).byteLength / encodeModel(fp32).byteLength;
    expect(ratio).toBeLessThan(0.7); // graph structure and int64 shapes do not halve
    expect(castChains(model)).toEqual([]);
    expect(model.graph.nodes.filter((nd) => nd.opType === 'Cast')).toHaveLength(2);
    assertTopological(model);
  });

  it('out-of-range weights are clamped to ±65504 with a warning naming the tensor, and outputs stay finite', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 4]);
    const big = b.initializer('big_w', DataType.FLOAT, [1, 4], Float32Array.from([1e6, -7e4, 3, 65504]));
    const m = b.node('Mul', [x, big], {}, { name: 'mul_big' });
    const y = b.node('Mul', [m, b.initializer('small', DataType.FLOAT, [], Float32Array.of(1e-3))], {}, { name: 'mul_small' });
    b.output(y, DataType.FLOAT, [1, 4]);
    const warnings: string[] = [];
    const { model, report } = convertToFloat16(b.build(), { onWarning: (w) => warnings.push(w) });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("'big_w'");
    expect(report.clampedTensors).toEqual([{ name: 'big_w', count: 2, maxAbs: 1e6 }]);
    const out = (await run(model, { x: f32([1, 4], Float32Array.from([0.5, 0.5, 1, 1])) }))[y.name]!.data as Float32Array;
    expect(Array.from(out).every(Number.isFinite)).toBe(true);
    // Clamped weights 65504, -65504 times 0.5 times 1e-3 (float16 product rounding ~5e-4 relative).
    const expected = [32.752, -32.752, 0.003, 65.504];
    expected.forEach((e, i) => expect(Math.abs(out[i]! - e)).toBeLessThanOrEqual(Math.abs(e) * 2e-3));
  });

  it('activation ranges beyond float16 keep the touching nodes float32, with finite, accurate outputs', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [1, 3]);
    const r = b.node('Relu', [x], {}, { name: 'relu' });
    const up = b.node('Mul', [r, b.initializer('k', DataType.FLOAT, [], Float32Array.of(1000))], {}, { name: 'scale_up' });
    const down = b.node('Mul', [up, b.initializer('k_inv', DataType.FLOAT, [], Float32Array.of(1e-3))], {}, { name: 'scale_down' });
    const y = b.node('Mul', [down, b.initializer('t', DataType.FLOAT, [], Float32Array.of(1e-3))], {}, { name: 'shrink' });
    b.output(y, DataType.FLOAT, [1, 3]);
    const fp32 = b.build();
    const feeds = { x: f32([1, 3], Float32Array.from([100, 200, 1])) }; // up reaches 2e5 > 65504
    // Without ranges every node converts; 2e5 then overflows float16 wherever the runtime really
    // computes in float16 (GPUs; onnxruntime's x86 CPU provider happens to compute these in float32).
    expect(convertToFloat16(fp32).report.keptFloat32).toEqual([]);
    const ranges = new Map([[up.name, { min: 0, max: 2e5 }]]);
    const { model, report } = convertToFloat16(fp32, { activationRanges: ranges });
    expect(report.keptFloat32.map((k) => k.node).sort()).toEqual(['scale_down', 'scale_up']);
    expect(report.keptFloat32[0]!.reason).toContain(up.name);
    const out = (await run(model, feeds))[y.name]!.data as Float32Array;
    [100, 200, 1].forEach((v, i) => expect(Math.abs(out[i]! - v * 1e-3)).toBeLessThan(v * 1e-3 * 2e-3));
    expect(castChains(model)).toEqual([]);
    // x -> Cast fp16 -> relu -> Cast fp32 -> scale_up, scale_down -> Cast fp16 -> shrink -> Cast fp32.
    expect(model.graph.nodes.filter((nd) => nd.opType === 'Cast')).toHaveLength(4);
  });

  it('block lists and original Casts: float32 islands get one Cast per boundary, never Cast -> Cast', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 4]);
    const idx = b.input('idx', DataType.INT64, ['N', 4]);
    const fromInt = b.node('Cast', [idx], { to: DataType.FLOAT }, { name: 'idx_float' });
    const a = b.node('Add', [x, fromInt], {}, { name: 'add' });
    const s = b.node('Sin', [a], {}, { name: 'sin' }); // user-blocked
    const m = b.node('Mul', [s, a], {}, { name: 'mul' });
    const k = b.node(
      'TopK',
      [m, b.constant('k', { dtype: DataType.INT64, dims: [1], data: BigInt64Array.of(2n) })],
      { axis: 1 },
      { name: 'topk', outputs: 2 },
    ) as Value[];
    const back = b.node('Cast', [m], { to: DataType.FLOAT }, { name: 'identity_cast' }); // a no-op Cast at the output
    b.output(k[0]!, DataType.FLOAT, ['N', 2]);
    b.output(k[1]!, DataType.INT64, ['N', 2]);
    b.output(back, DataType.FLOAT, ['N', 4]);
    const fp32 = b.build();
    const { model, report } = convertToFloat16(fp32, { opBlockList: ['Sin'] });
    expect(report.keptFloat32.map((r) => `${r.node}:${r.reason}`).sort()).toEqual(['sin:op block list', 'topk:op block list']);
    expect(castChains(model)).toEqual([]);
    expect(model.graph.nodes.find((nd) => nd.name === 'idx_float')!.getInt('to')).toBe(DataType.FLOAT16);
    const feeds = {
      x: f32([2, 4], Float32Array.from([0.1, 0.2, 0.3, 0.4, -1, -2, 0.5, 1.5])),
      idx: { dtype: DataType.INT64, dims: [2, 4], data: BigInt64Array.from([0n, 1n, 2n, 3n, 1n, 1n, 0n, 2n]) },
    };
    const ref = await run(fp32, feeds);
    const got = await run(model, feeds);
    for (const name of Object.keys(ref)) {
      expect(got[name]!.dtype).toBe(ref[name]!.dtype);
      const r = Array.from(ref[name]!.data as Float32Array, Number);
      const g = Array.from(got[name]!.data as Float32Array, Number);
      r.forEach((v, i) => expect(Math.abs(g[i]! - v)).toBeLessThanOrEqual(Math.abs(v) * 2e-3 + 1e-3));
    }
    // The output names survive; all float outputs are float32.
    expect(model.graph.outputs.map((o) => o.name)).toEqual(fp32.graph.outputs.map((o) => o.name));
    for (const o of model.graph.outputs) expect(isTensorType(o.type) && o.type.elemType).toBe(o === model.graph.outputs[1] ? DataType.INT64 : DataType.FLOAT);
    assertTopological(model);
  });

  it('keepIoTypes false: float16 inputs and outputs, no boundary Casts', async () => {
    const p = mlp();
    const { model } = convertToFloat16(p.model, { keepIoTypes: false });
    expect(model.graph.nodes.filter((nd) => nd.opType === 'Cast')).toHaveLength(0);
    expect(model.graph.inputs[0]!.type).toMatchObject({ elemType: DataType.FLOAT16 });
    expect(model.graph.outputs[0]!.type).toMatchObject({ elemType: DataType.FLOAT16 });
    const { float32ToFloat16 } = await import('../../../src/ir/dtype.js');
    const x = randomFloats(16, 11, 1);
    const out = (await run(model, { x: { dtype: DataType.FLOAT16, dims: [1, 16], data: Uint16Array.from(x, float32ToFloat16) } })).y!;
    expect(out.dtype).toBe(DataType.FLOAT16);
    const ref = mlpReference(
      Float32Array.from(x, (v) => float16ToFloat32(float32ToFloat16(v))),
      1,
      p,
    );
    (out.data as Uint16Array).forEach((bits, i) => expect(Math.abs(float16ToFloat32(bits) - ref[i]!)).toBeLessThan(4e-3));
  });

  it('onnxruntime contrib ops (com.microsoft Gelu) stay float32, and the MatMuls after them still convert (their types propagate)', async () => {
    const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
    const x = b.input('x', DataType.FLOAT, ['N', 8]);
    const h = b.node('MatMul', [x, b.initializer('w1', DataType.FLOAT, [8, 16], randomFloats(128, 30, 0.4))], {}, { name: 'mm1' });
    const g = b.node('Gelu', [h], {}, { name: 'gelu', domain: 'com.microsoft' });
    const y = b.node(
      'MatMul',
      [b.node('Relu', [g], {}, { name: 'relu' }), b.initializer('w2', DataType.FLOAT, [16, 4], randomFloats(64, 31, 0.4))],
      {},
      { name: 'mm2' },
    );
    b.output(y, DataType.FLOAT, ['N', 4]);
    const model = b.build();
    const { model: half, report } = convertToFloat16(model);
    expect(report.keptFloat32).toEqual([{ node: 'gelu', opType: 'Gelu', reason: "custom domain 'com.microsoft'" }]);
    expect(report.convertedByOpType).toEqual({ MatMul: 2, Relu: 1 });
    const feeds = { x: { dtype: DataType.FLOAT, dims: [3, 8], data: randomFloats(24, 32, 1) } as TensorData };
    const [want, got] = [await run(model, feeds), await run(half, feeds)];
    const w = Object.values(want)[0]!.data as Float32Array;
    (Object.values(got)[0]!.data as Float32Array).forEach((v, i) => expect(Math.abs(v - w[i]!)).toBeLessThan(1e-2));
  });

  it('a large weight of a float32-only contrib op (com.microsoft FusedMatMul) is stored as float16 with a Cast onnxruntime folds at load; outputs = float64 with float16-rounded weights', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { decodeModel } = await import('../../../src/onnx/index.js');
    const { readFileSync } = await import('node:fs');
    const b = new GraphBuilder({ opset: 17, opsets: { 'com.microsoft': 1 } });
    const x = b.input('x', DataType.FLOAT, ['N', 64]);
    const wData = randomFloats(64 * 32, 40, 0.3);
    const small = b.initializer('small', DataType.FLOAT, [32, 4], randomFloats(128, 41, 0.3)); // below 1024 values: stays float32
    const h = b.node('FusedMatMul', [x, b.initializer('w', DataType.FLOAT, [64, 32], wData)], { alpha: 1.0 }, { name: 'fmm', domain: 'com.microsoft' });
    const y = b.node('FusedMatMul', [h, small], { alpha: 1.0 }, { name: 'fmm2', domain: 'com.microsoft' });
    b.output(y, DataType.FLOAT, ['N', 4]);
    const model = b.build();
    const { model: half, report } = convertToFloat16(model);
    expect(report.storedAsFloat16).toEqual(['w']);
    expect(half.graph.initializers.find((t) => t.name === 'w')!.dtype).toBe(DataType.FLOAT16);
    expect(half.graph.initializers.find((t) => t.name === 'small')!.dtype).toBe(DataType.FLOAT);
    const cast = half.graph.nodes.find((n) => n.opType === 'Cast')!;
    expect(cast.inputs[0]!.name).toBe('w');
    expect(cast.outputs[0]!.consumers.map((n) => n.name)).toEqual(['fmm']);
    expect(report.weightBytesAfter).toBe(report.weightBytesBefore - 64 * 32 * 2);
    // Reference: float64 matmuls with the weight rounded to float16.
    const w16 = Float64Array.from(wData, (v) => float16ToFloat32(float32ToFloat16(v)));
    const sw = Float64Array.from(model.graph.initializers.find((t) => t.name === 'small')!.toFloat64());
    const xData = randomFloats(3 * 64, 42, 1);
    const ref = new Float64Array(3 * 4);
    for (let n = 0; n < 3; n++)
      for (let o = 0; o < 4; o++) {
        let acc = 0;
        for (let k = 0; k < 32; k++) {
          let hk = 0;
          for (let i = 0; i < 64; i++) hk += xData[n * 64 + i]! * w16[i * 32 + k]!;
          acc += hk * sw[k * 4 + o]!;
        }
        ref[n * 4 + o] = acc;
      }
    const got = Object.values(await run(half, { x: f32([3, 64], xData) }))[0]!.data as Float32Array;
    got.forEach((v, i) => expect(Math.abs(v - ref[i]!)).toBeLessThan(1e-4));
    // onnxruntime folds the Cast of the initializer when it loads the model.
    const dir = mkdtempSync(join(tmpdir(), 'fp16-fold-'));
    try {
      const optimized = join(dir, 'opt.onnx');
      const r = await createRunner(half, { graphOptimizationLevel: 'basic', optimizedModelFilePath: optimized });
      await r.release();
      expect(decodeModel(readFileSync(optimized)).graph.nodes.map((n) => n.opType)).not.toContain('Cast');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('If subgraph: the node stays float32 and the outer value its branches read is cast back', async () => {
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, [3]);
    const cond = b.input('cond', DataType.BOOL, []);
    const r = b.node('Relu', [x], {}, { name: 'relu' });
    const branch = (op: string, name: string): import('../../../src/ir/index.js').Graph => {
      const g = new (r.graph.constructor as typeof import('../../../src/ir/index.js').Graph)(name);
      const one = g.addInitializer(Tensor.fromData(`${name}_one`, { dtype: DataType.FLOAT, dims: [], data: Float32Array.of(1) }));
      const n = g.addNode({ opType: op, inputs: [r, one], outputs: [`${name}_out`], name: `${name}_${op}` });
      g.addOutput(n.outputs[0]!, { kind: 'tensor', elemType: DataType.FLOAT, shape: [3] });
      return g;
    };
    const ifOut = b.node('If', [cond], { then_branch: branch('Add', 'then'), else_branch: branch('Sub', 'else') }, { name: 'if' });
    const y = b.node('Neg', [ifOut], {}, { name: 'neg' });
    b.output(y, DataType.FLOAT, [3]);
    const fp32 = b.build();
    const { model, report } = convertToFloat16(fp32);
    expect(report.keptFloat32.map((k) => k.node)).toEqual(['if']);
    const data = Float32Array.from([-1, 0.5, 2]);
    for (const c of [1, 0]) {
      const out = (await run(model, { x: f32([3], data), cond: { dtype: DataType.BOOL, dims: [], data: Uint8Array.of(c) } }))[y.name]!.data as Float32Array;
      const expected = Array.from(data, (v) => -(Math.max(0, v) + (c ? 1 : -1)));
      expected.forEach((e, i) => expect(Math.abs(out[i]! - e)).toBeLessThan(2e-3));
    }
    expect(castChains(model)).toEqual([]);
    assertTopological(model);
  });
});

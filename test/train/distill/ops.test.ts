/**
 * Every op of the training interpreter: forward parity with onnxruntime-node (relative error
 * < 1e-4) on the cpu and wasm backends, and its backward against central finite differences
 * (cpu backend, float32 forward, float64 loss on the host).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { DataType, GraphBuilder } from '../../../src/ir/index.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { TrainableGraph } from '../../../src/train/tfjs/onnx-graph.js';
import { TRAINABLE_OP_TYPES, _buildTable } from '../../../src/train/tfjs/onnx-ops.js';
import { UsageError } from '../../../src/errors.js';
import { expectParity, gradCheck, randomFloats, singleOp, spacedFloats, tfOutputs, type OpCase } from './helpers.js';

const I = (name: string, dims: number[], extra: Partial<{ data: Float32Array }> = {}) => ({ name, dims, ...extra });
const W = (name: string, dims: number[], seed = 3) => ({
  name,
  dims,
  kind: 'init' as const,
  data: randomFloats(
    dims.reduce((a, b) => a * b, 1),
    seed,
    0.8,
  ),
});
const ints = (name: string, values: number[]) => ({ name, dims: [values.length], dtype: DataType.INT64, intData: values });

interface Case {
  name: string;
  make: () => OpCase;
  /** Skip the gradient check (ops without a float input path, e.g. Shape). */
  noGrad?: boolean;
  eps?: number;
}

/** Conv -> BatchNormalization -> Relu -> MaxPool -> Add(residual) -> GlobalAveragePool -> Flatten -> Gemm: the NHWC path end to end. */
function cnnBlock(): OpCase {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, [2, 2, 8, 8]);
  const w = b.initializer('w', DataType.FLOAT, [4, 2, 3, 3], randomFloats(72, 5, 0.5));
  const c = b.node('Conv', [x, w], { pads: [1, 1, 1, 1] });
  const bn = b.node('BatchNormalization', [
    c,
    b.initializer('s', DataType.FLOAT, [4], randomFloats(4, 6, 0.5, 1)),
    b.initializer('bb', DataType.FLOAT, [4], randomFloats(4, 7)),
    b.initializer('m', DataType.FLOAT, [4], randomFloats(4, 8, 0.2)),
    b.initializer('v', DataType.FLOAT, [4], randomFloats(4, 9, 0.5, 1)),
  ]);
  const r = b.node('Relu', [bn]);
  const w2 = b.initializer('w2', DataType.FLOAT, [4, 4, 3, 3], randomFloats(144, 10, 0.3));
  const c2 = b.node('Conv', [r, w2, b.initializer('b2', DataType.FLOAT, [4], randomFloats(4, 11))], { pads: [1, 1, 1, 1] });
  const add = b.node('Add', [c2, r]);
  const mp = b.node('MaxPool', [add], { kernel_shape: [2, 2], strides: [2, 2] });
  const cat = b.node('Concat', [mp, mp], { axis: 1 });
  const gap = b.node('GlobalAveragePool', [cat]);
  const flat = b.node('Flatten', [gap]);
  const fc = b.node(
    'Gemm',
    [flat, b.initializer('fw', DataType.FLOAT, [3, 8], randomFloats(24, 12)), b.initializer('fb', DataType.FLOAT, [3], randomFloats(3, 13))],
    { transB: 1 },
  );
  b.output(fc, DataType.FLOAT, [2, 3]);
  return { model: b.build(), feeds: { x: { dtype: DataType.FLOAT, dims: [2, 2, 8, 8], data: spacedFloats(256, 3) } } };
}

/** The Shape -> Gather -> Unsqueeze -> Concat -> Reshape pattern exporters write for Flatten. */
function dynamicReshape(): OpCase {
  const b = new GraphBuilder({ opset: 13 });
  const x = b.input('x', DataType.FLOAT, [2, 3, 2, 2]);
  const shape = b.node('Shape', [x]);
  const n = b.node('Gather', [shape, b.initializer('zero', DataType.INT64, [], BigInt64Array.of(0n))], { axis: 0 });
  const n1 = b.node('Unsqueeze', [n, b.initializer('ax', DataType.INT64, [1], BigInt64Array.of(0n))]);
  const cat = b.node('Concat', [n1, b.initializer('minus1', DataType.INT64, [1], BigInt64Array.of(-1n))], { axis: 0 });
  const r = b.node('Reshape', [x, cat]);
  const y = b.node('Cast', [r], { to: DataType.FLOAT });
  b.output(y, DataType.FLOAT, [2, 12]);
  return { model: b.build(), feeds: { x: { dtype: DataType.FLOAT, dims: [2, 3, 2, 2], data: spacedFloats(24, 4) } } };
}

const CASES: Case[] = [
  {
    name: 'Conv pads strides bias',
    make: () => singleOp('Conv', [I('x', [2, 3, 7, 7]), W('w', [4, 3, 3, 3]), W('b', [4], 4)], { pads: [1, 0, 2, 1], strides: [2, 1] }),
  },
  { name: 'Conv dilations', make: () => singleOp('Conv', [I('x', [1, 2, 8, 8]), W('w', [3, 2, 3, 3])], { dilations: [2, 1], pads: [2, 1, 1, 0] }) },
  { name: 'Conv SAME_UPPER strided', make: () => singleOp('Conv', [I('x', [1, 2, 8, 7]), W('w', [3, 2, 4, 3])], { strides: [2, 2], auto_pad: 'SAME_UPPER' }) },
  { name: 'Conv SAME_LOWER', make: () => singleOp('Conv', [I('x', [1, 2, 6, 6]), W('w', [3, 2, 2, 2])], { auto_pad: 'SAME_LOWER' }) },
  { name: 'Conv groups', make: () => singleOp('Conv', [I('x', [1, 4, 6, 6]), W('w', [6, 2, 3, 3]), W('b', [6], 5)], { group: 2, pads: [1, 1, 1, 1] }) },
  {
    name: 'Conv depthwise strided',
    make: () => singleOp('Conv', [I('x', [1, 3, 7, 7]), W('w', [6, 1, 3, 3])], { group: 3, strides: [2, 2], pads: [1, 1, 1, 1] }),
  },
  { name: 'Conv 1-D', make: () => singleOp('Conv', [I('x', [2, 3, 10]), W('w', [4, 3, 3]), W('b', [4], 6)], { pads: [1, 1] }) },
  {
    name: 'ConvTranspose strided pads output_padding',
    make: () =>
      singleOp('ConvTranspose', [I('x', [1, 3, 4, 4]), W('w', [3, 2, 3, 3]), W('b', [2], 7)], { strides: [2, 2], pads: [1, 1, 1, 1], output_padding: [1, 1] }),
  },
  { name: 'ConvTranspose groups', make: () => singleOp('ConvTranspose', [I('x', [1, 4, 3, 3]), W('w', [4, 1, 2, 2])], { group: 2 }) },
  {
    name: 'Gemm transA transB alpha beta',
    make: () => singleOp('Gemm', [I('a', [5, 4]), W('b', [3, 5]), W('c', [3], 8)], { transA: 1, transB: 1, alpha: 0.7, beta: 1.3 }),
  },
  { name: 'MatMul 3-D x 2-D', make: () => singleOp('MatMul', [I('a', [2, 3, 4]), W('b', [4, 5])]) },
  { name: 'MatMul broadcast batch', make: () => singleOp('MatMul', [I('a', [2, 1, 3, 4]), I('b', [3, 4, 2])]) },
  { name: 'MatMul 1-D', make: () => singleOp('MatMul', [I('a', [4]), I('b', [2, 4, 3])]) },
  { name: 'Add broadcast bias', make: () => singleOp('Add', [I('a', [2, 3, 4]), W('b', [3, 1])]) },
  { name: 'Sub broadcast', make: () => singleOp('Sub', [I('a', [2, 3, 4]), I('b', [4])]) },
  { name: 'Mul broadcast', make: () => singleOp('Mul', [I('a', [2, 3, 4]), I('b', [2, 1, 4])]) },
  {
    name: 'Div broadcast',
    make: () =>
      singleOp(
        'Div',
        [I('a', [2, 3, 4]), W('b', [3, 4])].map((s) => (s.name === 'b' ? { ...s, data: randomFloats(12, 4, 0.75, 1.25) } : s)),
      ),
  },
  { name: 'Relu', make: () => singleOp('Relu', [I('x', [3, 5])]) },
  { name: 'LeakyRelu', make: () => singleOp('LeakyRelu', [I('x', [3, 5])], { alpha: 0.1 }) },
  { name: 'Sigmoid', make: () => singleOp('Sigmoid', [I('x', [3, 5])]) },
  { name: 'Tanh', make: () => singleOp('Tanh', [I('x', [3, 5])]) },
  { name: 'HardSigmoid', make: () => singleOp('HardSigmoid', [I('x', [3, 5], { data: spacedFloats(15, 2, 4) })], { alpha: 0.3, beta: 0.4 }) },
  { name: 'HardSwish', make: () => singleOp('HardSwish', [I('x', [3, 5], { data: spacedFloats(15, 2, 4.5) })], {}, { opset: 14 }) },
  {
    name: 'Clip inputs',
    make: () =>
      singleOp('Clip', [
        I('x', [3, 5]),
        { name: 'lo', dims: [], kind: 'init', data: Float32Array.of(-0.55) },
        { name: 'hi', dims: [], kind: 'init', data: Float32Array.of(0.65) },
      ]),
  },
  { name: 'Clip attributes (opset 6)', make: () => singleOp('Clip', [I('x', [3, 5])], { min: -0.55, max: 0.65 }, { opset: 6 }) },
  { name: 'Softmax axis 1', make: () => singleOp('Softmax', [I('x', [2, 3, 4])], { axis: 1 }) },
  { name: 'Softmax opset 11 (2-D coercion)', make: () => singleOp('Softmax', [I('x', [2, 3, 4])], { axis: 1 }, { opset: 11 }) },
  { name: 'LogSoftmax', make: () => singleOp('LogSoftmax', [I('x', [2, 3, 4])], { axis: -1 }) },
  {
    name: 'BatchNormalization',
    make: () =>
      singleOp(
        'BatchNormalization',
        [I('x', [2, 3, 4, 4]), W('s', [3], 2), W('bias', [3], 3), W('mean', [3], 4), { ...W('var', [3], 5), data: Float32Array.of(0.5, 1.2, 2) }],
        { epsilon: 1e-3 },
      ),
  },
  { name: 'MaxPool pads strides', make: () => singleOp('MaxPool', [I('x', [1, 2, 7, 7])], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] }) },
  { name: 'MaxPool ceil_mode', make: () => singleOp('MaxPool', [I('x', [1, 2, 6, 6])], { kernel_shape: [3, 3], strides: [2, 2], ceil_mode: 1 }) },
  {
    name: 'AveragePool exclude pad',
    make: () => singleOp('AveragePool', [I('x', [1, 2, 6, 6])], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] }),
  },
  {
    name: 'AveragePool count_include_pad',
    make: () => singleOp('AveragePool', [I('x', [1, 2, 6, 6])], { kernel_shape: [3, 3], strides: [1, 1], pads: [1, 1, 1, 1], count_include_pad: 1 }),
  },
  { name: 'GlobalAveragePool', make: () => singleOp('GlobalAveragePool', [I('x', [2, 3, 4, 5])]) },
  { name: 'Flatten axis 2', make: () => singleOp('Flatten', [I('x', [2, 3, 4, 5])], { axis: 2 }) },
  { name: 'Reshape 0 and -1', make: () => singleOp('Reshape', [I('x', [2, 3, 4]), ints('shape', [0, -1, 2])]) },
  { name: 'Transpose', make: () => singleOp('Transpose', [I('x', [2, 3, 4])], { perm: [2, 0, 1] }) },
  { name: 'Concat axis 1', make: () => singleOp('Concat', [I('a', [2, 3, 2]), I('b', [2, 1, 2])], { axis: 1 }) },
  { name: 'Identity', make: () => singleOp('Identity', [I('x', [2, 3])]) },
  { name: 'Dropout (inference)', make: () => singleOp('Dropout', [I('x', [2, 3])]) },
  { name: 'Squeeze', make: () => singleOp('Squeeze', [I('x', [2, 1, 3, 1]), ints('axes', [1, -1])]) },
  { name: 'Unsqueeze', make: () => singleOp('Unsqueeze', [I('x', [2, 3]), ints('axes', [0, 3])]) },
  {
    name: 'Pad constant',
    make: () => singleOp('Pad', [I('x', [2, 3, 4]), ints('pads', [0, 1, 2, 1, 0, -1]), { name: 'v', dims: [], kind: 'init', data: Float32Array.of(0.25) }]),
  },
  { name: 'Pad reflect', make: () => singleOp('Pad', [I('x', [1, 2, 4, 4]), ints('pads', [0, 0, 2, 1, 0, 0, 1, 2])], { mode: 'reflect' }) },
  { name: 'Pad edge', make: () => singleOp('Pad', [I('x', [1, 2, 3, 3]), ints('pads', [0, 0, 1, 2, 0, 0, 2, 1])], { mode: 'edge' }) },
  { name: 'ReduceMean', make: () => singleOp('ReduceMean', [I('x', [2, 3, 4])], { axes: [1, 2], keepdims: 0 }) },
  { name: 'ReduceMean opset 18', make: () => singleOp('ReduceMean', [I('x', [2, 3, 4]), ints('axes', [-1])], {}, { opset: 18 }) },
  { name: 'Erf', make: () => singleOp('Erf', [I('x', [3, 5])]) },
  { name: 'Gelu', make: () => singleOp('Gelu', [I('x', [3, 5], { data: spacedFloats(15, 3, 3) })], {}, { opset: 20 }) },
  { name: 'Gelu tanh', make: () => singleOp('Gelu', [I('x', [3, 5], { data: spacedFloats(15, 3, 3) })], { approximate: 'tanh' }, { opset: 20 }) },
  {
    name: 'LayerNormalization',
    make: () => singleOp('LayerNormalization', [I('x', [2, 3, 4]), W('scale', [4], 2), W('bias', [4], 3)], { axis: -1, epsilon: 1e-5 }),
  },
  { name: 'LayerNormalization axis 1', make: () => singleOp('LayerNormalization', [I('x', [2, 3, 4]), W('scale', [3, 4], 2)], { axis: 1 }) },
  { name: 'Slice', make: () => singleOp('Slice', [I('x', [3, 6]), ints('starts', [1, -4]), ints('ends', [3, 100]), ints('axes', [0, 1])]) },
  { name: 'Sqrt', make: () => singleOp('Sqrt', [I('x', [3, 4], { data: randomFloats(12, 3, 0.75, 1.25) })]) },
  { name: 'Exp', make: () => singleOp('Exp', [I('x', [3, 4])]) },
  { name: 'Log', make: () => singleOp('Log', [I('x', [3, 4], { data: randomFloats(12, 3, 0.75, 1.25) })]) },
  {
    name: 'Pow',
    make: () => singleOp('Pow', [I('x', [3, 4], { data: randomFloats(12, 3, 0.75, 1.25) }), { name: 'e', dims: [], kind: 'init', data: Float32Array.of(3) }]),
  },
  { name: 'dynamic reshape (Shape, Gather, Unsqueeze, Concat, Cast)', make: dynamicReshape },
  { name: 'CNN block (NHWC path: Conv, BN, Relu, Add, MaxPool, Concat, GAP, Gemm)', make: cnnBlock, eps: 1e-3 },
];

beforeAll(async () => {
  await initTrainingBackend({ backend: 'wasm' });
  await initTrainingBackend({ backend: 'cpu' });
});

describe('forward parity with onnxruntime (cpu backend)', () => {
  it.each(CASES.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    await tf.setBackend('cpu');
    await expectParity(c.make());
  });
});

describe('forward parity with onnxruntime (wasm backend)', () => {
  it.each(CASES.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    await tf.setBackend('wasm');
    await expectParity(c.make());
    await tf.setBackend('cpu');
  });
});

describe('backward against finite differences (cpu backend)', () => {
  it.each(CASES.filter((c) => !c.noGrad).map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    await tf.setBackend('cpu');
    const result = gradCheck(c.make(), { eps: c.eps });
    expect(result.checked).toBeGreaterThan(0);
    expect(result.worst).toBeLessThan(1e-2);
  });

  it('BatchNormalization in training mode (batch statistics)', async () => {
    await tf.setBackend('cpu');
    const c = singleOp('BatchNormalization', [
      I('x', [3, 2, 3, 3]),
      W('s', [2], 2),
      W('bias', [2], 3),
      W('mean', [2], 4),
      { ...W('var', [2], 5), data: Float32Array.of(0.5, 1.2) },
    ]);
    const result = gradCheck(c, { training: true });
    expect(result.worst).toBeLessThan(1e-2);
  });
});

/** Gradients of sum(output * R) for every trainable variable, in training mode, on one backend. */
async function gradientsOn(backend: 'cpu' | 'wasm', c: OpCase): Promise<Map<string, Float32Array>> {
  await tf.setBackend(backend);
  const graph = new TrainableGraph(c.model);
  try {
    const out: Map<string, Float32Array> = new Map();
    tf.tidy(() => {
      const names = Object.keys(c.feeds);
      const inputs = names.map((k) => tf.tensor(c.feeds[k]!.data as Float32Array, c.feeds[k]!.dims));
      const loss = (feeds: Record<string, tf.Tensor>): tf.Scalar => {
        const y = graph.forward(feeds, { training: true }).outputs[graph.outputNames()[0]!]!;
        return tf.sum(tf.mul(y, tf.tensor(randomFloats(y.size, 5), y.shape))) as tf.Scalar;
      };
      const feedsOf = (xs: tf.Tensor[]) => Object.fromEntries(names.map((k, i) => [k, xs[i]!]));
      tf.grads((...xs: tf.Tensor[]) => loss(feedsOf(xs)))(inputs).forEach((g, i) => out.set(`input:${names[i]}`, g.dataSync() as Float32Array));
      const vars = graph.trainableVariables();
      if (vars.length === 0) return;
      const { grads } = tf.variableGrads(
        () => loss(feedsOf(inputs)),
        vars.map((v) => v.variable),
      );
      for (const v of vars) out.set(v.name, grads[v.variable.name]!.dataSync() as Float32Array);
    });
    return out;
  } finally {
    graph.dispose();
  }
}

describe('wasm backward equals cpu backward (training mode, whole graphs)', () => {
  it.each([
    ['CNN block', cnnBlock],
    ['depthwise + grouped + strided convs', () => CASES.find((c) => c.name === 'Conv depthwise strided')!.make()],
    ['uneven pads', () => CASES.find((c) => c.name === 'Conv pads strides bias')!.make()],
    ['ConvTranspose', () => CASES.find((c) => c.name === 'ConvTranspose strided pads output_padding')!.make()],
    ['MaxPool on negative values, padded', () => CASES.find((c) => c.name === 'MaxPool pads strides')!.make()],
    ['MaxPool ceil_mode', () => CASES.find((c) => c.name === 'MaxPool ceil_mode')!.make()],
    ['AveragePool exclude pad', () => CASES.find((c) => c.name === 'AveragePool exclude pad')!.make()],
  ] as const)('%s', async (_name, make) => {
    const c = make();
    const cpu = await gradientsOn('cpu', c);
    const wasm = await gradientsOn('wasm', c);
    await tf.setBackend('cpu');
    expect(cpu.size).toBeGreaterThan(0);
    for (const [name, g] of cpu) {
      let diff = 0;
      let scale = 0;
      const w = wasm.get(name)!;
      for (let i = 0; i < g.length; i++) {
        diff = Math.max(diff, Math.abs(g[i]! - w[i]!));
        scale = Math.max(scale, Math.abs(g[i]!));
      }
      expect(diff / Math.max(scale, 1e-6)).toBeLessThan(1e-4);
    }
  });
});

describe('training-mode semantics', () => {
  it('BatchNormalization uses batch statistics and moves running stats by the momentum', async () => {
    await tf.setBackend('cpu');
    const x = spacedFloats(2 * 2 * 2 * 2, 5);
    const c = singleOp(
      'BatchNormalization',
      [
        I('x', [2, 2, 2, 2], { data: x }),
        { name: 's', dims: [2], kind: 'init', data: Float32Array.of(1, 2) },
        { name: 'bias', dims: [2], kind: 'init', data: Float32Array.of(0, 0.5) },
        { name: 'mean', dims: [2], kind: 'init', data: Float32Array.of(0.1, -0.1) },
        { name: 'var', dims: [2], kind: 'init', data: Float32Array.of(1, 1) },
      ],
      { epsilon: 1e-5, momentum: 0.8 },
    );
    const graph = new TrainableGraph(c.model);
    // hand-computed per-channel batch mean and (population) variance over N, H, W
    const stats = [0, 1].map((ch) => {
      const vals: number[] = [];
      for (let n = 0; n < 2; n++) for (let i = 0; i < 4; i++) vals.push(x[n * 8 + ch * 4 + i]!);
      const mean = vals.reduce((a, b) => a + b, 0) / vals.length;
      const variance = vals.reduce((a, b) => a + (b - mean) ** 2, 0) / vals.length;
      return { mean, variance };
    });
    const { y, updates } = tf.tidy(() => {
      const r = graph.forward({ x: tf.tensor(x, [2, 2, 2, 2]) }, { training: true });
      return { y: r.outputs[graph.outputNames()[0]!]!.dataSync(), updates: r.updates };
    });
    const expected = Float32Array.from(x, (v, i) => {
      const ch = Math.floor(i / 4) % 2;
      const { mean, variance } = stats[ch]!;
      return ((v - mean) / Math.sqrt(variance + 1e-5)) * [1, 2][ch]! + [0, 0.5][ch]!;
    });
    for (let i = 0; i < y.length; i++) expect(y[i]).toBeCloseTo(expected[i]!, 4);
    graph.applyUpdates(updates);
    const mean = graph.variables.get('mean')!.dataSync();
    const variance = graph.variables.get('var')!.dataSync();
    expect(mean[0]).toBeCloseTo(0.8 * 0.1 + 0.2 * stats[0]!.mean, 5);
    expect(mean[1]).toBeCloseTo(0.8 * -0.1 + 0.2 * stats[1]!.mean, 5);
    expect(variance[1]).toBeCloseTo(0.8 + 0.2 * stats[1]!.variance, 5);
    graph.dispose();
  });

  it('Dropout drops about `ratio` of the values in training and scales the rest', async () => {
    await tf.setBackend('cpu');
    const c = singleOp('Dropout', [
      I('x', [100, 100], { data: new Float32Array(10000).fill(1) }),
      { name: 'r', dims: [], kind: 'init', data: Float32Array.of(0.25) },
    ]);
    const graph = new TrainableGraph(c.model);
    const y = tf.tidy(() => graph.forward({ x: tf.ones([100, 100]) }, { training: true, seed: 3 }).outputs[graph.outputNames()[0]!]!.dataSync());
    const zeros = y.filter((v) => v === 0).length;
    expect(zeros / 10000).toBeGreaterThan(0.22);
    expect(zeros / 10000).toBeLessThan(0.28);
    expect(y.find((v) => v !== 0)).toBeCloseTo(1 / 0.75, 5);
    expect(tfOutputs(graph, c.feeds)[graph.outputNames()[0]!]!.data.every((v) => v === 1)).toBe(true);
    graph.dispose();
  });
});

describe('op table', () => {
  it('covers every op the issue lists', () => {
    for (const op of [
      'Conv',
      'ConvTranspose',
      'Gemm',
      'MatMul',
      'Add',
      'Sub',
      'Mul',
      'Div',
      'Relu',
      'LeakyRelu',
      'Sigmoid',
      'Tanh',
      'HardSigmoid',
      'HardSwish',
      'Clip',
      'Softmax',
      'LogSoftmax',
      'BatchNormalization',
      'MaxPool',
      'AveragePool',
      'GlobalAveragePool',
      'Flatten',
      'Reshape',
      'Transpose',
      'Concat',
      'Identity',
      'Dropout',
      'Squeeze',
      'Unsqueeze',
      'Pad',
      'ReduceMean',
      'Gelu',
      'Erf',
      'LayerNormalization',
    ]) {
      expect(TRAINABLE_OP_TYPES).toContain(op);
    }
  });

  it('throws on a duplicate row', () => {
    expect(() =>
      _buildTable([
        ['Relu', { run: () => undefined }],
        ['Relu', { run: () => undefined }],
      ]),
    ).toThrow(/duplicate training op row 'Relu'/);
  });

  it('names the op type and node of an unsupported op', () => {
    const c = singleOp('Einsum', [I('a', [2, 3]), I('b', [3, 2])], { equation: 'ij,jk->ik' });
    expect(() => new TrainableGraph(c.model)).toThrow(UsageError);
    expect(() => new TrainableGraph(c.model)).toThrow(/op type 'Einsum' of node 'einsum_node'/);
  });
});

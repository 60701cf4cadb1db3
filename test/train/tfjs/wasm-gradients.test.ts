/**
 * The backward kernels added to the wasm backend, each against tfjs-backend-cpu's own kernel on
 * small random inputs, plus one whole training step's gradients wasm vs cpu.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { randomFloats } from '../../helpers/random.js';

/** Deterministic inputs in [-0.5, 0.5), so both backends see identical numbers. */
const randomArray = (n: number, seed: number): Float32Array => randomFloats(n, seed, 0.5);

type Inputs = Record<string, { shape: number[]; data: Float32Array | Int32Array }>;

async function runOn(backend: 'cpu' | 'wasm', kernel: string, inputs: Inputs, attrs: Record<string, unknown>) {
  await tf.setBackend(backend);
  return tf.tidy(() => {
    const ts: Record<string, tf.Tensor> = {};
    for (const [k, v] of Object.entries(inputs)) ts[k] = tf.tensor(v.data, v.shape, v.data instanceof Int32Array ? 'int32' : 'float32');
    const out = tf.engine().runKernel(kernel, ts, attrs as never) as tf.Tensor;
    return { shape: out.shape, data: out.dataSync() as Float32Array };
  });
}

/** max |a - b| / (max |b| + 1e-6): one relative number per comparison. */
function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / (scale + 1e-6);
}

const TOL = 1e-5; // float32 sums of at most a few thousand terms, different summation order

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
  await initTrainingBackend({ backend: 'wasm' });
});

async function compare(kernel: string, inputs: Inputs, attrs: Record<string, unknown>) {
  const cpu = await runOn('cpu', kernel, inputs, attrs);
  const wasm = await runOn('wasm', kernel, inputs, attrs);
  expect(wasm.shape).toEqual(cpu.shape);
  const err = relError(wasm.data, cpu.data);
  expect(err).toBeLessThan(TOL);
  // guard against comparing two all-zero results
  expect(Math.max(...Array.from(cpu.data, Math.abs))).toBeGreaterThan(1e-3);
  return err;
}

function convCase(x: number[], f: number[], strides: number, pad: unknown) {
  const info = tf.backend_util.computeConv2DInfo(x as never, f as never, strides, 1, pad as never, undefined, false);
  const dyShape = [info.batchSize, info.outHeight, info.outWidth, info.outChannels];
  return { dyShape, info };
}

describe('wasm backward kernels match the cpu backend', () => {
  const convCases: Array<[string, number[], number[], number, unknown]> = [
    ['3x3 stride 1 same', [2, 9, 9, 3], [3, 3, 3, 4], 1, 'same'],
    ['3x3 stride 2 same (odd size)', [2, 9, 9, 3], [3, 3, 3, 4], 2, 'same'],
    ['5x5 stride 2 valid', [1, 11, 10, 2], [5, 5, 2, 3], 2, 'valid'],
    ['1x1 stride 1', [2, 5, 5, 6], [1, 1, 6, 4], 1, 'valid'],
    [
      '3x3 explicit pads',
      [1, 7, 8, 2],
      [3, 3, 2, 2],
      1,
      [
        [0, 0],
        [2, 1],
        [0, 1],
        [0, 0],
      ],
    ],
    ['3x3 stride 2 valid, even size (unused last row)', [2, 8, 8, 3], [3, 3, 3, 5], 2, 'valid'],
  ];
  for (const [name, xShape, fShape, strides, pad] of convCases) {
    it(`Conv2DBackpropInput ${name}`, async () => {
      const { dyShape } = convCase(xShape, fShape, strides, pad);
      await compare(
        'Conv2DBackpropInput',
        {
          dy: { shape: dyShape, data: randomArray(tf.util.sizeFromShape(dyShape), 8) },
          filter: { shape: fShape, data: randomArray(tf.util.sizeFromShape(fShape), 9) },
        },
        { strides, pad, dataFormat: 'NHWC', inputShape: xShape },
      );
    });
    it(`Conv2DBackpropFilter ${name}`, async () => {
      const { dyShape } = convCase(xShape, fShape, strides, pad);
      await compare(
        'Conv2DBackpropFilter',
        {
          x: { shape: xShape, data: randomArray(tf.util.sizeFromShape(xShape), 1) },
          dy: { shape: dyShape, data: randomArray(tf.util.sizeFromShape(dyShape), 2) },
        },
        { strides, pad, dataFormat: 'NHWC', filterShape: fShape },
      );
    });
  }

  const dwCases: Array<[string, number[], number[], number, unknown]> = [
    ['3x3 multiplier 1 stride 1 same', [2, 8, 8, 3], [3, 3, 3, 1], 1, 'same'],
    ['3x3 multiplier 2 stride 2 same', [2, 9, 9, 3], [3, 3, 3, 2], 2, 'same'],
    ['5x5 multiplier 1 stride 2 valid', [1, 12, 11, 4], [5, 5, 4, 1], 2, 'valid'],
  ];
  for (const [name, xShape, fShape, strides, pad] of dwCases) {
    const info = tf.backend_util.computeConv2DInfo(xShape as never, fShape as never, strides, 1, pad as never, undefined, true);
    const dyShape = [info.batchSize, info.outHeight, info.outWidth, info.outChannels];
    it(`DepthwiseConv2dNativeBackpropFilter ${name}`, async () => {
      await compare(
        'DepthwiseConv2dNativeBackpropFilter',
        {
          x: { shape: xShape, data: randomArray(tf.util.sizeFromShape(xShape), 3) },
          dy: { shape: dyShape, data: randomArray(tf.util.sizeFromShape(dyShape), 4) },
        },
        { strides, pad, dilations: 1, filterShape: fShape },
      );
    });
    it(`DepthwiseConv2dNativeBackpropInput ${name}`, async () => {
      await compare(
        'DepthwiseConv2dNativeBackpropInput',
        {
          dy: { shape: dyShape, data: randomArray(tf.util.sizeFromShape(dyShape), 5) },
          filter: { shape: fShape, data: randomArray(tf.util.sizeFromShape(fShape), 6) },
        },
        { strides, pad, dilations: 1, inputShape: xShape },
      );
    });
  }

  it('the composed kernels free every intermediate buffer', async () => {
    await tf.setBackend('wasm');
    const backend = tf.backend() as unknown as { numDataIds(): number };
    const x = tf.tensor4d(randomArray(2 * 9 * 9 * 3, 1), [2, 9, 9, 3]);
    const dy = tf.tensor4d(randomArray(2 * 5 * 5 * 3, 2), [2, 5, 5, 3]);
    const dw = tf.tensor4d(randomArray(3 * 3 * 3 * 1, 3), [3, 3, 3, 1]);
    const w = tf.tensor4d(randomArray(3 * 3 * 3 * 3, 4), [3, 3, 3, 3]);
    const before = backend.numDataIds();
    const attrs = { strides: 2, pad: 'same', dilations: 1, dataFormat: 'NHWC' };
    const outs = [
      tf.engine().runKernel('Conv2DBackpropFilter', { x, dy }, { ...attrs, filterShape: [3, 3, 3, 3] } as never),
      tf.engine().runKernel('Conv2DBackpropInput', { dy, filter: w }, { ...attrs, inputShape: [2, 9, 9, 3] } as never),
      tf.engine().runKernel('DepthwiseConv2dNativeBackpropFilter', { x, dy }, { ...attrs, filterShape: [3, 3, 3, 1] } as never),
      tf.engine().runKernel('DepthwiseConv2dNativeBackpropInput', { dy, filter: dw }, { ...attrs, inputShape: [2, 9, 9, 3] } as never),
    ] as tf.Tensor[];
    expect(backend.numDataIds()).toBe(before + outs.length);
    tf.dispose([...outs, x, dy, dw, w]);
  });

  it('UnsortedSegmentSum with repeated ids', async () => {
    await compare(
      'UnsortedSegmentSum',
      {
        x: { shape: [6, 2, 3], data: randomArray(36, 7) },
        segmentIds: { shape: [6], data: Int32Array.from([0, 2, 2, 1, 0, 3]) },
      },
      { numSegments: 5 },
    );
  });
});

/** A small CNN with every structure the example uses: conv, batch-norm, relu, residual add, pooling. */
function smallCnnLoss(vars: Record<string, tf.Variable>, x: tf.Tensor4D, labels: tf.Tensor2D): tf.Scalar {
  const bn = (t: tf.Tensor4D, g: tf.Variable, b: tf.Variable) => {
    const { mean, variance } = tf.moments(t, [0, 1, 2]);
    return tf.add(tf.mul(tf.mul(tf.sub(t, mean), tf.rsqrt(tf.add(variance, 1e-5))), g), b) as tf.Tensor4D;
  };
  let y = tf.relu(bn(tf.conv2d(x, vars['w1'] as tf.Tensor4D, 1, 'same'), vars['g1']!, vars['b1']!));
  const r = tf.depthwiseConv2d(y, vars['dw'] as tf.Tensor4D, 1, 'same');
  y = tf.relu(tf.add<tf.Tensor4D>(y, bn(tf.conv2d(r, vars['w2'] as tf.Tensor4D, 1, 'same'), vars['g2']!, vars['b2']!)));
  y = tf.maxPool(y, 2, 2, 'valid');
  y = tf.avgPool(tf.conv2d(y, vars['w3'] as tf.Tensor4D, 2, 'same'), 2, 1, 'same');
  const pooled = tf.mean(y, [1, 2]) as tf.Tensor2D;
  const logits = tf.add(tf.matMul(pooled, vars['fc'] as tf.Tensor2D), vars['fcb']!);
  return tf.losses.softmaxCrossEntropy(labels, logits) as tf.Scalar;
}

describe('one training step: gradients on wasm equal those on cpu', () => {
  it('small CNN (conv, BN, relu, depthwise, residual add, max/avg pool, matmul, softmax CE)', async () => {
    const shapes: Record<string, number[]> = {
      w1: [3, 3, 1, 4],
      g1: [4],
      b1: [4],
      dw: [3, 3, 4, 1],
      w2: [1, 1, 4, 4],
      g2: [4],
      b2: [4],
      w3: [3, 3, 4, 6],
      fc: [6, 10],
      fcb: [10],
    };
    const results: Record<string, Record<string, Float32Array>> = {};
    for (const backend of ['cpu', 'wasm'] as const) {
      await tf.setBackend(backend);
      const vars: Record<string, tf.Variable> = {};
      let seed = 11;
      for (const [k, s] of Object.entries(shapes)) {
        vars[k] = tf.variable(tf.tensor(randomArray(tf.util.sizeFromShape(s), seed++), s), true, `${backend}_${k}`);
      }
      const x = tf.tensor4d(randomArray(4 * 12 * 12, 99), [4, 12, 12, 1]);
      const labels = tf.oneHot(tf.tensor1d([1, 3, 5, 7], 'int32'), 10) as tf.Tensor2D;
      const { grads } = tf.variableGrads(() => smallCnnLoss(vars, x, labels), Object.values(vars));
      results[backend] = {};
      for (const k of Object.keys(shapes)) results[backend]![k] = grads[`${backend}_${k}`]!.dataSync() as Float32Array;
      tf.dispose([...Object.values(grads), ...Object.values(vars), x, labels]);
    }
    for (const k of Object.keys(shapes)) {
      expect(relError(results['wasm']![k]!, results['cpu']![k]!), k).toBeLessThan(1e-4);
    }
  });
});

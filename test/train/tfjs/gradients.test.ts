/**
 * The gradient table against central finite differences, one case per registered kernel, on the
 * CPU backend: for L(x) = sum(f(x) * R) with fixed random R, the analytic directional derivative
 * <dL/dx, v> must equal (L(x + eps v) - L(x - eps v)) / (2 eps) for a random direction v.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { GRADIENT_KERNELS } from '../../../src/train/tfjs/gradients.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';

type Kind = 'any' | 'positive' | 'spaced';
interface InputSpec {
  shape: number[];
  kind?: Kind;
}
interface Case {
  kernel: string;
  label?: string;
  inputs: InputSpec[];
  f: (...xs: tf.Tensor[]) => tf.Tensor | tf.Tensor[];
}

const EPS = 1e-2;
// float32 finite differences with eps 1e-2: truncation and rounding both stay well below this,
// while a wrong gradient formula is off by O(1)
const TOL = 1e-2;

/** Values for one input. 'spaced' puts every value at least 2/n apart, away from kinks (0, ties). */
function values(spec: InputSpec, seed: number): Float32Array {
  const n = spec.shape.reduce((a, b) => a * b, 1);
  if (spec.kind === 'positive') return seededFloats(seed, n, 0.5, 2);
  if (spec.kind === 'spaced') {
    const order = Array.from(seededFloats(seed, n), (v, i) => [v, i] as const).sort((a, b) => a[0] - b[0]);
    const out = new Float32Array(n);
    // grid offset by a quarter step so no value sits on 0
    order.forEach(([, i], rank) => {
      out[i] = -1 + (2 * (rank + 0.25)) / n;
    });
    return out;
  }
  return seededFloats(seed, n);
}

const c = (kernel: string, inputs: InputSpec[], f: Case['f'], label?: string): Case => ({ kernel, inputs, f, label });
const S = (...shape: number[]): InputSpec => ({ shape });
const P = (...shape: number[]): InputSpec => ({ shape, kind: 'positive' });
const G = (...shape: number[]): InputSpec => ({ shape, kind: 'spaced' });

const CASES: Case[] = [
  c('Add', [S(2, 3), S(3)], (a, b) => tf.add(a!, b!)),
  c('Add', [S(2, 6, 6, 3), S(3)], (a, b) => tf.add(a!, b!), 'per-channel bias: reduction as a matmul'),
  c('Multiply', [S(2, 6, 6, 3), S(1, 1, 3)], (a, b) => tf.mul(a!, b!), 'per-channel scale: reduction as a matmul'),
  c('Sub', [S(2, 3), S(2, 1)], (a, b) => tf.sub(a!, b!)),
  c('Multiply', [S(2, 3), S(1, 3)], (a, b) => tf.mul(a!, b!)),
  c('RealDiv', [S(2, 3), P(3)], (a, b) => tf.div(a!, b!)),
  c('Maximum', [G(2, 3), G(3)], (a, b) => tf.maximum(a!, tf.add(b!, 0.01))),
  c('Minimum', [G(2, 3), G(3)], (a, b) => tf.minimum(a!, tf.add(b!, 0.01))),
  c('SquaredDifference', [S(2, 3), S(3)], (a, b) => tf.squaredDifference(a!, b!)),
  c('Pow', [P(2, 3), S(3)], (a, b) => tf.pow(a!, b!)),
  c('Prelu', [G(2, 3), S(3)], (x, alpha) => tf.prelu(x!, alpha!)),
  c('Neg', [S(5)], (x) => tf.neg(x!)),
  c('Identity', [S(5)], (x) => tf.clone(x!)),
  c('AddN', [S(2, 3), S(2, 3), S(2, 3)], (a, b, d) => tf.addN([a!, b!, tf.mul(d!, 2)])),
  c('Cast', [S(5)], (x) => tf.cast(x!, 'float32')),
  c('Exp', [S(5)], (x) => tf.exp(x!)),
  c('Log', [P(5)], (x) => tf.log(x!)),
  c('Sqrt', [P(5)], (x) => tf.sqrt(x!)),
  c('Rsqrt', [P(5)], (x) => tf.rsqrt(x!)),
  c('Square', [S(5)], (x) => tf.square(x!)),
  c('Reciprocal', [P(5)], (x) => tf.reciprocal(x!)),
  c('Abs', [G(6)], (x) => tf.abs(x!)),
  c('Relu', [G(6)], (x) => tf.relu(x!)),
  c('Relu6', [G(8)], (x) => tf.relu6(tf.mul(x!, 8))),
  c('LeakyRelu', [G(6)], (x) => tf.leakyRelu(x!, 0.1)),
  c('Elu', [G(6)], (x) => tf.elu(x!)),
  c('Sigmoid', [S(5)], (x) => tf.sigmoid(x!)),
  c('Tanh', [S(5)], (x) => tf.tanh(x!)),
  c('Softplus', [S(5)], (x) => tf.softplus(x!)),
  c('Erf', [S(5)], (x) => tf.erf(x!)),
  c('ClipByValue', [G(8)], (x) => tf.clipByValue(x!, -0.49, 0.51)),
  c('Step', [G(6)], (x) => tf.add(tf.step(x!), x!)),
  c('Sign', [G(6)], (x) => tf.add(tf.sign(x!), x!)),
  c('Floor', [G(6)], (x) => tf.add(tf.floor(tf.mul(x!, 2.5)), x!)),
  c('Ceil', [G(6)], (x) => tf.add(tf.ceil(tf.mul(x!, 2.5)), x!)),
  c('Round', [G(6)], (x) => tf.add(tf.round(tf.mul(x!, 2.5)), x!)),
  c('Sum', [S(2, 3, 4)], (x) => tf.sum(x!, [0, 2])),
  c('Mean', [S(2, 3, 4)], (x) => tf.mean(x!, [1], true)),
  c('Max', [G(2, 3, 4)], (x) => tf.max(x!, [2])),
  c('Min', [G(2, 3, 4)], (x) => tf.min(x!, [0, 1], true)),
  c('Reshape', [S(2, 6)], (x) => tf.reshape(x!, [3, 4])),
  c('ExpandDims', [S(2, 3)], (x) => tf.expandDims(x!, 1)),
  c('Transpose', [S(2, 3, 4)], (x) => tf.transpose(x!, [2, 0, 1])),
  c('Concat', [S(2, 3), S(2, 2)], (a, b) => tf.concat([a!, b!], 1)),
  c('SplitV', [S(2, 5)], (x) => {
    const [a, b] = tf.split(x!, [2, 3], 1);
    return tf.concat([tf.mul(a!, 2), b!], 1);
  }),
  c('Pack', [S(2, 3), S(2, 3)], (a, b) => tf.stack([a!, b!], 1)),
  c('Unpack', [S(2, 3)], (x) => {
    const [a, b] = tf.unstack(x!, 0);
    return tf.sub(tf.mul(a!, 3), b!);
  }),
  c('Slice', [S(4, 5)], (x) => tf.slice(x!, [1, 2], [2, 3])),
  c('PadV2', [S(2, 3)], (x) =>
    tf.pad(
      x!,
      [
        [1, 0],
        [2, 1],
      ],
      0.5,
    ),
  ),
  c('Tile', [S(2, 3)], (x) => tf.tile(x!, [2, 3])),
  c('Select', [S(2, 3), S(2, 3)], (a, b) =>
    tf.where(
      tf.tensor2d(
        [
          [1, 0, 1],
          [0, 0, 1],
        ],
        [2, 3],
        'bool',
      ),
      a!,
      b!,
    ),
  ),
  c('GatherV2', [S(4, 3)], (x) => tf.gather(x!, tf.tensor1d([2, 0, 2, 3], 'int32'), 0)),
  c('BatchMatMul', [S(2, 3), S(3, 4)], (a, b) => tf.matMul(a!, b!), 'plain'),
  c('BatchMatMul', [S(3, 2), S(3, 4)], (a, b) => tf.matMul(a!, b!, true, false), 'transposeA'),
  c('BatchMatMul', [S(2, 3), S(4, 3)], (a, b) => tf.matMul(a!, b!, false, true), 'transposeB'),
  c('BatchMatMul', [S(3, 2), S(4, 3)], (a, b) => tf.matMul(a!, b!, true, true), 'both transposed'),
  c('Softmax', [S(2, 5)], (x) => tf.softmax(x!)),
  c('Conv2D', [S(2, 5, 5, 2), S(3, 3, 2, 3)], (x, w) => tf.conv2d(x as tf.Tensor4D, w as tf.Tensor4D, 2, 'same')),
  c('Conv2DBackpropInput', [S(1, 3, 3, 3), S(3, 3, 2, 3)], (dy, w) => tf.conv2dTranspose(dy as tf.Tensor4D, w as tf.Tensor4D, [1, 5, 5, 2], 2, 'same')),
  c('DepthwiseConv2dNative', [S(1, 5, 5, 2), S(3, 3, 2, 2)], (x, w) => tf.depthwiseConv2d(x as tf.Tensor4D, w as tf.Tensor4D, 1, 'same')),
  c('MaxPool', [G(1, 4, 4, 2)], (x) => tf.maxPool(x as tf.Tensor4D, 2, 2, 'valid')),
  c('AvgPool', [S(1, 4, 4, 2)], (x) => tf.avgPool(x as tf.Tensor4D, 2, 1, 'same')),
  c('FusedBatchNorm', [S(2, 3, 3), S(3), P(3), S(3), S(3)], (x, mean, variance, offset, scale) => tf.batchNorm(x!, mean!, variance!, offset!, scale!, 1e-3)),
];

function lossOf(f: Case['f'], weights: tf.Tensor[] | null, xs: tf.Tensor[]): { loss: tf.Scalar; weights: tf.Tensor[] } {
  const out = f(...xs);
  const outs = Array.isArray(out) ? out : [out];
  const w = weights ?? outs.map((o, i) => tf.tensor(seededFloats(900 + i, o.size), o.shape));
  const loss = tf.addN(outs.map((o, i) => tf.sum(tf.mul(o, w[i]!)))) as tf.Scalar;
  return { loss, weights: w };
}

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

describe('gradient table: analytic vs finite differences (cpu backend)', () => {
  it('every registered kernel has a case here', () => {
    const tested = new Set(CASES.map((k) => k.kernel));
    expect(GRADIENT_KERNELS.filter((k) => !tested.has(k))).toEqual([]);
  });

  CASES.forEach((testCase, index) => {
    it(`${testCase.kernel}${testCase.label ? ` (${testCase.label})` : ''}`, () => {
      // the kernel under test must be the one that produced the gradient: registered by us
      expect(tf.getGradient(testCase.kernel)).toBeDefined();
      const xs = testCase.inputs.map((spec, i) => tf.tensor(values(spec, 10 * index + i), spec.shape));
      const dirs = testCase.inputs.map((spec, i) =>
        tf.tensor(
          seededFloats(
            500 + 10 * index + i,
            spec.shape.reduce((a, b) => a * b, 1),
          ),
          spec.shape,
        ),
      );
      const { weights } = tf.tidy(() => {
        const r = lossOf(testCase.f, null, xs);
        return { weights: r.weights.map((w) => tf.keep(w)) };
      });
      const grads = tf.grads((...args: tf.Tensor[]) => lossOf(testCase.f, weights, args).loss)(xs);
      let analytic = 0;
      grads.forEach((g, i) => {
        analytic += tf.sum(tf.mul(g, dirs[i]!)).dataSync()[0]!;
      });
      const shifted = (sign: number) =>
        tf.tidy(
          () =>
            lossOf(
              testCase.f,
              weights,
              xs.map((x, i) => tf.add(x, tf.mul(dirs[i]!, sign * EPS))),
            ).loss.dataSync()[0]!,
        );
      const numeric = (shifted(1) - shifted(-1)) / (2 * EPS);
      expect(Math.abs(analytic - numeric)).toBeLessThan(TOL * Math.max(1, Math.abs(numeric)));
      tf.dispose([...xs, ...dirs, ...weights, ...grads]);
    });
  });
});

/** The distillation losses against values computed by hand (float64 in JS). */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { crossEntropy, distillationLoss, meanSquaredError, softTargetKl } from '../../../src/train/tfjs/losses.js';

const student = [
  [1, 2, 3],
  [1, 0, 0],
];
const teacher = [
  [0.5, 1, 4],
  [2, -1, 0],
];
const labels = [2, 0];

const softmax = (xs: number[], t = 1): number[] => {
  const e = xs.map((x) => Math.exp(x / t));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
};

// CE row 0: -log(e^3 / (e + e^2 + e^3)) = 0.40760596; row 1: -log(e / (e + 2)) = 0.55144471
const CE = (0.40760596444438 + 0.5514447139320511) / 2;

function klByHand(t: number): number {
  let total = 0;
  for (let i = 0; i < 2; i++) {
    const pt = softmax(teacher[i]!, t);
    const ps = softmax(student[i]!, t);
    total += pt.reduce((a, p, k) => a + p * Math.log(p / ps[k]!), 0);
  }
  return (t * t * total) / 2;
}

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

describe('losses', () => {
  it('cross-entropy matches the hand-computed value', () => {
    const v = tf.tidy(() => crossEntropy(tf.tensor2d(student), tf.tensor1d(labels, 'int32')).dataSync()[0]!);
    expect(v).toBeCloseTo(CE, 5);
    expect(CE).toBeCloseTo(-Math.log(softmax(student[0]!)[2]!) / 2 - Math.log(softmax(student[1]!)[0]!) / 2, 10);
  });

  it('T^2 KL(teacher || student) at T = 2 and T = 1', () => {
    for (const t of [1, 2, 4]) {
      const v = tf.tidy(() => softTargetKl(tf.tensor2d(student), tf.tensor2d(teacher), t).dataSync()[0]!);
      expect(v).toBeCloseTo(klByHand(t), 5);
    }
    // a concrete number, so the hand formula itself is pinned: T = 2
    expect(klByHand(2)).toBeCloseTo(0.33426, 4);
  });

  it('KL is zero when student equals teacher', () => {
    const v = tf.tidy(() => softTargetKl(tf.tensor2d(teacher), tf.tensor2d(teacher), 3).dataSync()[0]!);
    expect(Math.abs(v)).toBeLessThan(1e-6);
  });

  it('alpha x CE + (1 - alpha) x T^2 KL', () => {
    const v = tf.tidy(
      () => distillationLoss(tf.tensor2d(student), tf.tensor2d(teacher), tf.tensor1d(labels, 'int32'), { alpha: 0.3, temperature: 2 }).total.dataSync()[0]!,
    );
    expect(v).toBeCloseTo(0.3 * CE + 0.7 * klByHand(2), 5);
    const labelsOnly = tf.tidy(
      () => distillationLoss(tf.tensor2d(student), undefined, tf.tensor1d(labels, 'int32'), { alpha: 0.3, temperature: 2 }).total.dataSync()[0]!,
    );
    expect(labelsOnly).toBeCloseTo(CE, 5);
    const teacherOnly = tf.tidy(
      () => distillationLoss(tf.tensor2d(student), tf.tensor2d(teacher), undefined, { alpha: 0.3, temperature: 2 }).total.dataSync()[0]!,
    );
    expect(teacherOnly).toBeCloseTo(klByHand(2), 5);
  });

  it('MSE for regression and features', () => {
    const v = tf.tidy(() => meanSquaredError(tf.tensor2d(student), tf.tensor2d(teacher)).dataSync()[0]!);
    // squared differences: 0.25 1 1 1 1 0 -> 4.25 / 6
    expect(v).toBeCloseTo(4.25 / 6, 6);
    const reg = tf.tidy(
      () =>
        distillationLoss(
          tf.tensor2d(student),
          tf.tensor2d(teacher),
          tf.tensor2d([
            [1, 2, 2],
            [1, 0, 1],
          ]),
          { alpha: 0.5, temperature: 1, kind: 'mse' },
        ).total.dataSync()[0]!,
    );
    expect(reg).toBeCloseTo(0.5 * (2 / 6) + 0.5 * (4.25 / 6), 6);
  });
});

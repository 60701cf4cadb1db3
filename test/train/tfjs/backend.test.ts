/**
 * Backend selection: wasm by default when no TensorFlow binding is installed, an explicit
 * 'tensorflow' without the package is a usage error (exit code 2), and every backend can train.
 */
import { describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { UsageError } from '../../../src/errors.js';
import { lacks } from '../../helpers/skips.js';

const hasTensorflowBinding = async () => {
  for (const pkg of ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node']) {
    try {
      await import(/* @vite-ignore */ pkg);
      return true;
    } catch {
      // not installed
    }
  }
  return false;
};

// These two are about a machine without the binding (as CI is); with it installed they cannot run.
const withBinding = lacks(
  await hasTensorflowBinding(),
  'backend selection without tfjs-node',
  'a TensorFlow binding is installed here',
  'run on a machine without @tensorflow/tfjs-node',
);

describe('training backend selection', () => {
  it.skipIf(withBinding)("'auto' picks wasm (SIMD) when no TensorFlow binding is installed", async () => {
    const info = await initTrainingBackend();
    expect(info.name).toBe('wasm');
    expect(tf.getBackend()).toBe('wasm');
    expect(info.description).toContain('SIMD');
  });

  it.skipIf(withBinding)("an explicit 'tensorflow' without the package is a UsageError (exit code 2)", async () => {
    const error = await initTrainingBackend({ backend: 'tensorflow' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UsageError);
    expect((error as UsageError).exitCode).toBe(2);
    expect((error as UsageError).message).toContain('@tensorflow/tfjs-node');
  });

  it('gradients work on the chosen backend: d/dx sum(relu(x) * x) = 2x for x > 0, else 0', async () => {
    for (const backend of ['cpu', 'wasm'] as const) {
      const info = await initTrainingBackend({ backend });
      expect(tf.getBackend()).toBe(info.name);
      const g = tf.grad((x: tf.Tensor) => tf.sum(tf.mul(tf.relu(x), x)))(tf.tensor1d([-1.5, 0.5, 2]));
      expect(Array.from(g.dataSync())).toEqual([0, 1, 4]);
    }
  });
});

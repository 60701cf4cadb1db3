/**
 * The example CNN's exporter against its tfjs definition (same logits on random weights), and the
 * committed fixtures: interface, batch-norm nodes, and FP32 accuracy on the evaluation split.
 */
import { existsSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { DataType } from '../../../src/ir/dtype.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { createRunner } from '../../../src/runtime/index.js';
import { loadModel } from '../../../src/onnx/index.js';
import { readNpz } from '../../../src/data/index.js';
import { type CnnConfig, channelMoments, exportOnnx, forward, initParams, paramSpecs, toTfModel } from '../../../fixtures/example-cnn.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';

const TINY: CnnConfig = {
  name: 'tiny-cnn',
  stem: 4,
  stages: [
    { channels: 4, blocks: 1 },
    { channels: 8, blocks: 1 },
  ],
};

beforeAll(async () => {
  await initTrainingBackend({ backend: 'wasm' });
});

describe('example CNN export', () => {
  it('ONNX logits equal the tfjs model in inference mode (random weights and BN statistics)', async () => {
    const params = initParams(TINY, 3);
    // non-trivial running statistics, so the BatchNormalization nodes are really exercised
    for (const spec of paramSpecs(TINY)) {
      if (spec.name.endsWith('.bn.mean')) params.set(spec.name, seededFloats(7, spec.shape[0]!, -0.3, 0.3));
      if (spec.name.endsWith('.bn.var')) params.set(spec.name, seededFloats(8, spec.shape[0]!, 0.5, 2));
    }
    const model = exportOnnx(TINY, params);
    expect(model.graph.nodes.filter((n) => n.opType === 'BatchNormalization')).toHaveLength(6);
    expect(model.graph.nodes.filter((n) => n.opType === 'Add')).toHaveLength(2);
    const x = seededFloats(9, 3 * 784);
    const runner = await createRunner(model, { intraOpThreads: 1 });
    const ort = (await runner.run({ input: { dtype: DataType.FLOAT, dims: [3, 1, 28, 28], data: x } }))['logits']!;
    await runner.release();
    const tfModel = toTfModel(TINY, params);
    const ref = tf.tidy(() => forward(tfModel, tf.tensor4d(x, [3, 28, 28, 1]), false).dataSync());
    tf.dispose([...tfModel.vars.values()]);
    expect(ort.dims).toEqual([3, 10]);
    let maxDiff = 0;
    for (let i = 0; i < 30; i++) maxDiff = Math.max(maxDiff, Math.abs((ort.data as Float32Array)[i]! - ref[i]!));
    expect(maxDiff).toBeLessThan(1e-4);
  });

  it('channelMoments equals tf.moments over N, H, W', () => {
    const y = tf.tensor4d(seededFloats(4, 2 * 5 * 5 * 3, -2, 2), [2, 5, 5, 3]);
    const ours = channelMoments(y);
    const ref = tf.moments(y, [0, 1, 2]);
    const close = (a: tf.Tensor, b: tf.Tensor) => Math.max(...Array.from(tf.abs(tf.sub(a, b)).dataSync()));
    expect(close(ours.mean, ref.mean)).toBeLessThan(1e-6);
    expect(close(ours.variance, ref.variance)).toBeLessThan(1e-5);
  });
});

const FIXTURES = ['fashion-cnn', 'fashion-teacher'].map((name) => `fixtures/${name}.onnx`);
const haveFixtures = FIXTURES.every((f) => existsSync(f)) && existsSync('fixtures/fashion-eval.npz');

describe.runIf(haveFixtures)('committed example models', () => {
  for (const file of FIXTURES) {
    it(`${file}: input [N,1,28,28] -> logits [N,10], BN kept, FP32 accuracy >= 88% on fashion-eval.npz`, async () => {
      const model = await loadModel(file);
      expect(model.graph.inputs.map((v) => v.name)).toEqual(['input']);
      expect(model.graph.outputs.map((v) => v.name)).toEqual(['logits']);
      expect(model.graph.nodes.some((n) => n.opType === 'BatchNormalization')).toBe(true);
      const data = await readNpz('fixtures/fashion-eval.npz');
      const runner = await createRunner(file, { intraOpThreads: 1 });
      const logits = (await runner.run({ input: data['input']! }))['logits']!;
      await runner.release();
      const labels = data['labels']!.data as BigInt64Array;
      const values = logits.data as Float32Array;
      let correct = 0;
      for (let i = 0; i < labels.length; i++) {
        let best = 0;
        for (let c = 1; c < 10; c++) if (values[i * 10 + c]! > values[i * 10 + best]!) best = c;
        if (BigInt(best) === labels[i]) correct++;
      }
      expect(labels.length).toBe(2000);
      expect(correct / labels.length).toBeGreaterThanOrEqual(0.88);
    });
  }
});

/**
 * Feature distillation (`--feature teacherTensor=studentTensor`) on the onnxruntime backend: the
 * MSE feature terms (through a trainable 1x1 channel adapter where channel counts differ) are part of
 * the training graph. One step (the whole batch, SGD without momentum, BN in training mode) gives the
 * same loss, feature loss and gradients of every weight and adapter as the tfjs cpu loop; `auto`
 * picks onnxruntime for a run with --feature, and the run trains to the tfjs run's weights.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { DataType, type Model, type TensorData } from '../../../src/ir/index.js';
import { distill } from '../../../src/train/distill.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { TrainableGraph } from '../../../src/train/tfjs/onnx-graph.js';
import type { LoopOptions, TrainData } from '../../../src/train/core/loop.js';
import { trainLoop } from '../../../src/train/tfjs/loop.js';
import { ortTrainLoop } from '../../../src/train/onnxruntime/loop.js';
import { adapterInit } from '../../../src/train/core/feature-adapters.js';
import { smallCnn, syntheticImages } from '../distill/models.js';
import { randomFloats } from '../distill/random.js';

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

const COUNT = 32;

function floats(dims: number[], seed: number, scale: number): TensorData {
  const n = dims.reduce((a, b) => a * b, 1);
  return { dtype: DataType.FLOAT, dims, data: randomFloats(n, seed, scale) };
}

/** Labels, teacher logits and two teacher feature tensors: [N,6,6,6] for 'features' (adapter 4->6) and [N,4,6,6] for 'conv_out'. */
function data(): TrainData {
  const images = syntheticImages(COUNT, 1);
  return {
    count: COUNT,
    inputs: images.inputs,
    labels: images.labels,
    teacher: floats([COUNT, 4], 11, 2),
    features: new Map([
      ['features', floats([COUNT, 6, 6, 6], 12, 1)],
      ['conv_out', floats([COUNT, 4, 6, 6], 13, 1)],
    ]),
  };
}

const LR = 0.1;
const options: LoopOptions = {
  epochs: 1,
  batchSize: COUNT,
  seed: 5,
  learningRate: LR,
  optimizer: { kind: 'sgd', momentum: 0, weightDecay: 0 },
  schedule: 'constant',
  lossKind: 'kd',
  alpha: 0.5,
  temperature: 2,
  features: [
    { teacher: 't.features', student: 'features' },
    { teacher: 't.conv', student: 'conv_out' },
  ],
  featureWeight: 0.7,
  outputName: 'logits',
};

function initialValues(model: Model): Map<string, Float32Array> {
  return new Map(model.graph.initializerValues.map((v) => [v.name, Float32Array.from(v.initializer!.data as Float32Array)]));
}

describe('feature terms in the onnxruntime training graph', () => {
  it('one step: the same loss, feature loss and gradients (weights and adapter) as the tfjs cpu loop', async () => {
    const model = smallCnn(4);
    const graph = new TrainableGraph(model);
    let ref: Awaited<ReturnType<typeof trainLoop>>;
    try {
      ref = await trainLoop(graph, data(), options);
    } finally {
      graph.dispose();
    }
    const ort = await ortTrainLoop(model, data(), { ...options, threads: 1 });
    expect(ref.steps).toBe(1);
    expect(ort.steps).toBe(1);
    const [a, b] = [ort.history[0]!, ref.history[0]!];
    expect(b.featureLoss).toBeGreaterThan(0.5);
    expect(Math.abs(a.featureLoss! - b.featureLoss!) / b.featureLoss!).toBeLessThan(1e-5);
    expect(Math.abs(a.loss - b.loss) / b.loss).toBeLessThan(1e-5);
    expect(a.hardLoss).toBeCloseTo(b.hardLoss!, 5);
    expect(a.softLoss).toBeCloseTo(b.softLoss!, 5);

    // the adapter starts from the same seeded value on both (../feature-adapters.ts)
    const initial = initialValues(model);
    initial.set('adapter:features', adapterInit(4, 6, options.seed, 0));
    expect([...ort.values.keys()].sort()).toEqual([...ref.values.keys()].sort());
    expect(ort.values.has('adapter:features')).toBe(true);
    expect(ort.values.has('adapter:conv_out')).toBe(false); // same channel count: no adapter
    // gradient = (w0 - w1) / lr; conv.b feeds BatchNormalization (gradient zero up to rounding)
    for (const [name, w1] of ref.values) {
      if (name === 'conv.b' || name === 'bn.mean' || name === 'bn.var') continue;
      const w0 = initial.get(name)!;
      const o1 = ort.values.get(name)!;
      let scale = 0;
      let diff = 0;
      for (let i = 0; i < w0.length; i++) {
        const gRef = (w0[i]! - w1[i]!) / LR;
        const gOrt = (w0[i]! - o1[i]!) / LR;
        scale = Math.max(scale, Math.abs(gRef));
        diff = Math.max(diff, Math.abs(gRef - gOrt));
      }
      expect(scale, `${name} has a gradient`).toBeGreaterThan(1e-4);
      if (process.env.SHOW_NUMBERS) console.log(`${name}: gradient relative difference ${(diff / scale).toExponential(2)}`);
      expect(diff / scale, `${name} gradient`).toBeLessThan(1e-4);
    }
    // the running statistics follow the same batch statistics
    for (const name of ['bn.mean', 'bn.var']) {
      const x = ort.values.get(name)!;
      const y = ref.values.get(name)!;
      for (let i = 0; i < x.length; i++) expect(x[i]).toBeCloseTo(y[i]!, 5);
    }
  });

  it("distill --feature: 'auto' trains on onnxruntime, to the weights the tfjs run reaches", async () => {
    const common = {
      student: smallCnn(4),
      teacher: smallCnn(6, { seed: 3 }),
      train: syntheticImages(96, 1),
      epochs: 1,
      batchSize: 16,
      learningRate: 0.05,
      optimizer: 'sgd' as const,
      momentum: 0.9,
      features: [{ teacher: 'features', student: 'features' }],
      featureWeight: 0.5,
    };
    const ort = await distill({ ...common, backend: 'auto' });
    const ref = await distill({ ...common, backend: 'cpu' });
    expect(ort.report.backend.name).toBe('onnxruntime');
    expect(ort.report.history[0]!.featureLoss).toBeCloseTo(ref.report.history[0]!.featureLoss!, 4);
    expect(ort.report.validationError).toBeLessThan(1e-5);
    for (const name of ['conv.w', 'bn.scale', 'fc.w']) {
      const x = ort.model.graph.value(name)!.initializer!.data as Float32Array;
      const y = ref.model.graph.value(name)!.initializer!.data as Float32Array;
      const scale = Math.max(...Array.from(y, Math.abs));
      let diff = 0;
      for (let i = 0; i < x.length; i++) diff = Math.max(diff, Math.abs(x[i]! - y[i]!));
      expect(diff / scale, name).toBeLessThan(1e-4);
    }
  });
});

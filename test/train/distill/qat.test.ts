/**
 * Quantization-aware training on a case built to break PTQ: a trained CNN whose BatchNormalization
 * channel 0 is scaled up 400x (and the classifier's weights for that channel down 400x), which leaves
 * the FP32 function unchanged but, with per-tensor weights and per-tensor activations, leaves the
 * other channels only a handful of int8 levels. QAT from the PTQ ranges must recover the accuracy,
 * and its export must have exactly PTQ's form (same nodes, same fused integer kernels).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { DataType } from '../../../src/ir/index.js';
import { checkFusion, quantizeInt8, type Int8Context } from '../../../src/app/quantize-passes.js';
import { top1Accuracy } from '../../../src/evaluate/index.js';
import { distill } from '../../../src/train/distill.js';
import { quantizeAwareTraining } from '../../../src/app/qat.js';
import type { Model } from '../../../src/ir/index.js';
import { smallCnn, syntheticImages } from './models.js';

const NOISE = 2.5;
const FACTOR = 400;
const train = syntheticImages(512, 1, NOISE);
const evalSet = syntheticImages(400, 2, NOISE);

let stressed: Model;
let ptq: Model;
let context: Int8Context;

beforeAll(async () => {
  const { model } = await distill({ student: smallCnn(4), train, eval: evalSet, epochs: 6, batchSize: 32, learningRate: 0.01, backend: 'cpu' });
  const g = model.graph;
  const scale = Float32Array.from(g.value('bn.scale')!.initializer!.data as Float32Array);
  const bias = Float32Array.from(g.value('bn.bias')!.initializer!.data as Float32Array);
  scale[0]! *= FACTOR;
  bias[0]! *= FACTOR;
  g.value('bn.scale')!.initializer!.data = scale;
  g.value('bn.bias')!.initializer!.data = bias;
  const fc = Float32Array.from(g.value('fc.w')!.initializer!.data as Float32Array);
  // fc.w is [4, 36] over the flattened [channel, 3, 3] features: channel 0 is columns 0..8
  for (let k = 0; k < 4; k++) for (let j = 0; j < 9; j++) fc[k * 36 + j]! /= FACTOR;
  g.value('fc.w')!.initializer!.data = fc;
  stressed = model;
  // The 1-channel stem (reduction 9) would stay float by default; this test needs it quantized.
  ({ model: ptq, context } = await quantizeInt8(stressed, { calibration: train, calibrationCount: 512, perChannel: false, minConvReduction: 0 }));
});

describe('quantization-aware training', () => {
  it('recovers the accuracy PTQ lost, and exports exactly the PTQ form', async () => {
    const fp32 = (await top1Accuracy(stressed, evalSet)).accuracy;
    const ptqAccuracy = (await top1Accuracy(ptq, evalSet)).accuracy;
    expect(ptqAccuracy).toBeLessThan(fp32 - 0.2);

    const { model: qat, report } = await quantizeAwareTraining(context.preprocessed, {
      ranges: context.ranges,
      qdq: context.qdqOptions,
      train,
      eval: evalSet,
      epochs: 3,
      batchSize: 32,
      learningRate: 3e-3,
      backend: 'cpu',
    });
    const qatAccuracy = (await top1Accuracy(qat, evalSet)).accuracy;
    expect(report.accuracy).toBeCloseTo(qatAccuracy, 10);
    expect(qatAccuracy).toBeGreaterThan(ptqAccuracy + 0.3);
    expect(qatAccuracy).toBeGreaterThan(fp32 - 0.06);
    // the fake-quantized interpreter predicts the exported INT8 model's accuracy
    expect(Math.abs(report.fakeQuantAccuracy.after! - qatAccuracy)).toBeLessThan(0.05);
    expect(report.fakeQuantized).toEqual({ activations: 4, weights: 2 });

    // same graph as PTQ: node sequence, initializer names and dtypes, fused integer kernels
    expect(qat.graph.nodes.map((n) => n.opType)).toEqual(ptq.graph.nodes.map((n) => n.opType));
    const inits = (m: Model) => m.graph.initializers.map((t) => `${t.name}:${t.dtype}:${t.dims.join('x')}`).sort();
    expect(inits(qat)).toEqual(inits(ptq));
    expect(qat.graph.initializers.some((t) => t.dtype === DataType.INT8)).toBe(true);
    // activation scales and zero points are PTQ's (the ranges are kept); weights were retrained
    const scaleOf = (m: Model, name: string) => Array.from(m.graph.value(name)!.initializer!.data as Float32Array);
    const activationScales = ptq.graph.nodes.filter((n) => n.opType === 'QuantizeLinear').map((n) => n.inputs[1]!.name);
    expect(activationScales.length).toBeGreaterThan(0);
    for (const name of activationScales) expect(scaleOf(qat, name)).toEqual(scaleOf(ptq, name));
    const [fusedPtq, fusedQat] = [await checkFusion(ptq), await checkFusion(qat)];
    expect(fusedQat.integerKernels).toEqual(fusedPtq.integerKernels);
    expect(fusedQat.integerKernelCount).toBeGreaterThan(0);
    expect(fusedQat.unfused.length).toBe(fusedPtq.unfused.length);
  });

  it('leaves no tensors behind and does not modify its input model', async () => {
    const before = tf.memory().numTensors;
    const w = Float32Array.from(context.preprocessed.graph.initializers[0]!.data as Float32Array);
    await quantizeAwareTraining(context.preprocessed, {
      ranges: context.ranges,
      qdq: context.qdqOptions,
      train,
      epochs: 1,
      batchSize: 64,
      backend: 'cpu',
      teacher: true,
    });
    expect(tf.memory().numTensors).toBe(before);
    expect(Array.from(context.preprocessed.graph.initializers[0]!.data as Float32Array)).toEqual(Array.from(w));
  });

  it('a model exported with a fixed batch (Reshape to [1, 36]) fine-tunes on a batch-dynamic copy; the QDQ export keeps it', async () => {
    const fixed = smallCnn(4, { fixedBatch: 1 });
    const { context: c } = await quantizeInt8(fixed, { calibration: train, calibrationCount: 64 });
    const warnings: string[] = [];
    const { model } = await quantizeAwareTraining(c.preprocessed, {
      ranges: c.ranges,
      qdq: c.qdqOptions,
      train,
      epochs: 1,
      batchSize: 64,
      backend: 'cpu',
      onWarning: (w) => warnings.push(w),
    });
    expect(warnings[0]).toMatch(
      /^the model fixes its batch at 1: training uses a copy with a dynamic batch dim \(Reshape 'flatten': \[1, 36\] -> \[-1, 36\]\)/,
    );
    expect(model.graph.inputs[0]!.type).toMatchObject({ shape: ['N', 1, 6, 6] });
    expect((await checkFusion(model)).unfused).toEqual([]);
  });
});

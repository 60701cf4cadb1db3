/**
 * One step on the example student (fixtures/fashion-cnn.onnx: Conv, BatchNormalization in training
 * mode, Relu, MaxPool, residual Add, GlobalAveragePool, Flatten, Gemm) with the KD loss: the
 * onnxruntime training graph's loss, gradients and new running statistics equal the tfjs 'cpu'
 * backend's (the reference of src/train) on the same batch within float32 tolerance, and so do the
 * weights after one SGD step (HostOptimizer against src/train/tfjs/optimizer.ts).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { DataType, type TensorData } from '../../../src/ir/index.js';
import { loadModel } from '../../../src/onnx/index.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { distillationLoss } from '../../../src/train/tfjs/losses.js';
import { TrainableGraph } from '../../../src/train/tfjs/onnx-graph.js';
import { Optimizer } from '../../../src/train/tfjs/optimizer.js';
import { HostOptimizer } from '../../../src/train/onnxruntime/host-optimizer.js';
import { OnnxTrainStep } from '../../../src/train/onnxruntime/session.js';
import { seededFloats } from '../../../fixtures/tiny-graphs.js';

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

// 4 samples: the tfjs cpu reference's backward pass (pure JavaScript) is nearly all of this file's
// time and grows with the batch (8 samples took twice as long and compare the same way).
const N = 4;

describe('onnxruntime training graph on the example student', () => {
  it('loss, gradients and running statistics equal the tfjs cpu backend (KD: labels + T=4 teacher)', async () => {
    const model = await loadModel('fixtures/fashion-cnn.onnx');
    const x: TensorData = { dtype: DataType.FLOAT, dims: [N, 1, 28, 28], data: seededFloats(1, N * 784, 0, 1) };
    const labelData = Int32Array.from({ length: N }, (_v, i) => (i * 3) % 10);
    const teacher: TensorData = { dtype: DataType.FLOAT, dims: [N, 10], data: seededFloats(2, N * 10, -3, 3) };
    const options = { alpha: 0.4, temperature: 4, kind: 'kd' as const };

    // tfjs reference: the training loop's own step (training-mode forward, variableGrads)
    const graph = new TrainableGraph(model);
    const params = graph.trainableVariables();
    let updates: ReturnType<TrainableGraph['forward']>['updates'] = [];
    const { value, grads } = tf.variableGrads(
      () => {
        const r = graph.forward({ input: tf.tensor(x.data as Float32Array, [...x.dims]) }, { training: true, fetch: ['logits'] });
        updates = r.updates;
        return distillationLoss(r.outputs.logits!, tf.tensor(teacher.data as Float32Array, [N, 10]), tf.tensor(labelData, [N], 'int32'), options).total;
      },
      params.map((p) => p.variable),
    );
    const refLoss = value.dataSync()[0]!;
    const refGrads = new Map(params.map((p) => [p.name, grads[p.variable.name]!.dataSync() as Float32Array]));
    const refStats = new Map(updates.map((u) => [u.name, u.value.dataSync() as Float32Array]));

    const step = await OnnxTrainStep.create(model, {
      loss: { kind: 'kd', alpha: 0.4, temperature: 4 },
      withLabels: true,
      withTeacher: true,
      probe: { input: { ...x, dims: [2, 1, 28, 28], data: (x.data as Float32Array).subarray(0, 2 * 784) } },
    });
    const labels: TensorData = { dtype: DataType.INT32, dims: [N], data: labelData };
    const r = await step.run({ inputs: { input: x }, labels, teacher });
    await step.release();
    expect(params.map((p) => p.name).every((n) => step.graph.weights.includes(n))).toBe(true);

    // the same parameters, in the same order
    expect(step.graph.weights).toEqual(params.map((p) => p.name));
    expect(r.loss).toBeCloseTo(refLoss, 4);
    let worst = 0;
    for (const [name, ref] of refGrads) {
      const ours = r.gradients.get(name)!;
      expect(ours.length, name).toBe(ref.length);
      const scale = Math.max(...Array.from(ref, Math.abs));
      let diff = 0;
      for (let i = 0; i < ref.length; i++) diff = Math.max(diff, Math.abs(Number(ours[i]) - ref[i]!));
      worst = Math.max(worst, diff / scale);
    }
    // float32 accumulation orders differ (im2col/GEMM vs transposed conv): 6e-6 relative measured
    expect(worst).toBeLessThan(1e-4);
    expect([...r.stateUpdates.keys()].sort()).toEqual([...refStats.keys()].sort());
    for (const [name, ref] of refStats) {
      const ours = r.stateUpdates.get(name)!;
      for (let i = 0; i < ref.length; i++) expect(Math.abs(Number(ours[i]) - ref[i]!)).toBeLessThan(1e-4 * Math.max(1, Math.abs(ref[i]!)));
    }
    // one SGD step (momentum 0.9, weight decay 1e-3) on both: the same updated weights
    const sgd = { kind: 'sgd' as const, momentum: 0.9, weightDecay: 1e-3 };
    const hostParams = step.graph.weights.map((name) => ({ name, data: step.values.get(name)!, rank: model.graph.value(name)!.initializer!.dims.length }));
    new HostOptimizer(sgd).apply(hostParams, r.gradients, 0.1);
    const tfOpt = new Optimizer(sgd);
    tfOpt.apply(params, new Map(params.map((p) => [p.name, grads[p.variable.name]!])), 0.1);
    let weightDiff = 0;
    for (const [k, p] of hostParams.entries()) {
      const want = params[k]!.variable.dataSync();
      for (let i = 0; i < want.length; i++) weightDiff = Math.max(weightDiff, Math.abs(p.data[i]! - want[i]!));
    }
    expect(weightDiff).toBeLessThan(1e-5);
    tfOpt.dispose();
    if (process.env.FD_VERBOSE)
      console.log(
        `example student: loss ${r.loss} vs ${refLoss}, worst relative gradient difference ${worst.toExponential(2)}, updated weights max diff ${weightDiff.toExponential(2)}`,
      );
    tf.dispose([value, ...Object.values(grads)]);
    for (const u of updates) u.value.dispose();
    graph.dispose();
  });
});

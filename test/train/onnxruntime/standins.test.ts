/**
 * One onnxruntime training step on each stand-in of fixtures/train-standins.ts, label-free
 * distillation from its wider teacher's outputs:
 * - MobileNetV3-style 48x192 classifier (depthwise Conv, HardSwish, squeeze-excite): loss and every
 *   gradient equal the tfjs 'cpu' backend's step (src/train, the reference) within float32 tolerance;
 * - FPN detector (Conv/BN/Relu, Resize nearest x2, Add): tfjs has no Resize, so the tfjs reference
 *   runs the same net with the upsampling written as Unsqueeze/Concat/Reshape (the same numbers);
 * - LSTM tagger: tfjs has no LSTM, so its gradients (W, R, B in the LSTM layout, the head) are
 *   checked against finite differences in float64.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { DataType, Tensor, type Model, type TensorData } from '../../../src/ir/index.js';
import { createRunner } from '../../../src/runtime/index.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { distillationLoss } from '../../../src/train/tfjs/losses.js';
import { TrainableGraph } from '../../../src/train/tfjs/onnx-graph.js';
import { trainingCoverage } from '../../../src/train/onnxruntime/build.js';
import { OnnxTrainStep } from '../../../src/train/onnxruntime/session.js';
import { FPN_DEFAULT, fpnDetector, lstmTagger, mobileNetV3Classifier, standinInputs } from '../../../fixtures/train-standins.js';
import { fdCheck } from './rules-fd.js';

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});

/**
 * Largest difference between onnxruntime's gradient of a parameter and tfjs's, relative to the
 * largest magnitude of tfjs's gradient of that parameter, over all parameters.
 */
function worstGradientDifference(
  params: readonly { name: string; variable: tf.Variable }[],
  reference: tf.NamedTensorMap,
  gradients: ReadonlyMap<string, ArrayLike<number | bigint>>,
): number {
  let worst = 0;
  for (const p of params) {
    const ref = reference[p.variable.name]!.dataSync() as Float32Array;
    const ours = gradients.get(p.name)!;
    const scale = Math.max(1e-8, ...Array.from(ref, Math.abs));
    let diff = 0;
    for (let i = 0; i < ref.length; i++) diff = Math.max(diff, Math.abs(Number(ours[i]) - ref[i]!));
    worst = Math.max(worst, diff / scale);
  }
  return worst;
}

/** A copy of `model` with each nearest x2 Resize written as Unsqueeze -> Concat x2 -> Reshape. */
function nearestAsConcat(model: Model): Model {
  const copy = model.clone();
  const g = copy.graph;
  for (const node of [...g.nodes]) {
    if (node.opType !== 'Resize') continue;
    const x = node.inputs[0]!;
    const out = node.outputs[0]!;
    const i64 = (name: string, v: number[]) =>
      g.addInitializer(Tensor.fromData(g.uniqueName(name), { dtype: DataType.INT64, dims: [v.length], data: BigInt64Array.from(v.map(BigInt)) }));
    const u = g.insertBefore(node, { opType: 'Unsqueeze', inputs: [x, i64('ax', [3, 5])], outputs: [g.uniqueName('up6')] }).outputs[0]!;
    const w = g.insertBefore(node, { opType: 'Concat', inputs: [u, u], attributes: { axis: 5 }, outputs: [g.uniqueName('upw')] }).outputs[0]!;
    const h = g.insertBefore(node, { opType: 'Concat', inputs: [w, w], attributes: { axis: 3 }, outputs: [g.uniqueName('uph')] }).outputs[0]!;
    const r = g.insertBefore(node, { opType: 'Reshape', inputs: [h, i64('shape', [0, 0, -1, FPN_DEFAULT.width / 2])], outputs: [g.uniqueName('up')] });
    g.replaceAllUsesWith(out, r.outputs[0]!);
    g.removeNode(node);
  }
  return copy;
}

async function forward(model: Model, inputs: Record<string, TensorData>): Promise<TensorData> {
  const r = await createRunner(model);
  try {
    return (await r.run(inputs))[model.graph.outputs[0]!.name]!;
  } finally {
    await r.release();
  }
}

describe('training stand-ins on onnxruntime', () => {
  it('MobileNetV3-style 48x192 classifier: one KD step (teacher only, T=2) equals the tfjs cpu step', async () => {
    const student = mobileNetV3Classifier();
    const teacherModel = mobileNetV3Classifier({ widthMultiplier: 2 });
    expect(trainingCoverage(student)).toEqual({ covered: true, missing: [] });
    const inputs = standinInputs('mobilenet', 2, 11);
    const teacher = await forward(teacherModel, inputs);
    const options = { kind: 'kd' as const, alpha: 0, temperature: 2 };

    const graph = new TrainableGraph(student);
    const params = graph.trainableVariables();
    const x = inputs.image!;
    const { value, grads } = tf.variableGrads(
      () => {
        const r = graph.forward({ image: tf.tensor(x.data as Float32Array, [...x.dims]) }, { training: true, fetch: ['logits'] });
        return distillationLoss(r.outputs.logits!, tf.tensor(teacher.data as Float32Array, [...teacher.dims]), undefined, options).total;
      },
      params.map((p) => p.variable),
    );
    const refLoss = value.dataSync()[0]!;

    const step = await OnnxTrainStep.create(student, {
      loss: { kind: 'kd', alpha: 0, temperature: 2 },
      withLabels: false,
      withTeacher: true,
      probe: standinInputs('mobilenet', 2, 12),
    });
    const r = await step.run({ inputs, teacher });
    await step.release();
    expect(step.graph.weights).toEqual(params.map((p) => p.name));
    expect(Math.abs(r.loss - refLoss)).toBeLessThan(1e-5 * Math.max(1, refLoss));
    const worst = worstGradientDifference(params, grads, r.gradients);
    if (process.env.FD_VERBOSE) console.log(`mobilenet: loss ${r.loss} vs ${refLoss}, worst relative gradient difference ${worst.toExponential(2)}`);
    // float32 accumulation orders differ (depthwise and 1x1 convs, transposed convs)
    expect(worst).toBeLessThan(1e-4);
    tf.dispose([value, ...Object.values(grads)]);
    graph.dispose();
  });

  it('FPN detector (Resize nearest x2 in the FPN): one MSE step equals tfjs on the same net with the upsampling as Concat/Reshape', async () => {
    const student = fpnDetector();
    expect(trainingCoverage(student)).toEqual({ covered: true, missing: [] });
    const N = 3;
    const inputs = standinInputs('fpn', N, 13);
    const teacher = await forward(fpnDetector({ channels: 16 }), inputs);
    // tfjs has no Resize: the reference graph repeats each pixel 2x2 with Unsqueeze/Concat/Reshape,
    // which is what nearest x2 (asymmetric, floor) computes
    const reference = nearestAsConcat(student);
    const x = inputs.image!;
    const graph = new TrainableGraph(reference);
    const params = graph.trainableVariables();
    const { value, grads } = tf.variableGrads(
      () => {
        const r = graph.forward({ image: tf.tensor(x.data as Float32Array, [...x.dims]) }, { training: true, fetch: ['maps'] });
        return distillationLoss(r.outputs.maps!, tf.tensor(teacher.data as Float32Array, [...teacher.dims]), undefined, {
          kind: 'mse',
          alpha: 0,
          temperature: 1,
        }).total;
      },
      params.map((p) => p.variable),
    );
    const refLoss = value.dataSync()[0]!;
    const step = await OnnxTrainStep.create(student, {
      loss: { kind: 'mse', alpha: 0, temperature: 1 },
      withLabels: false,
      withTeacher: true,
      probe: standinInputs('fpn', 2, 15),
    });
    const r = await step.run({ inputs, teacher });
    await step.release();
    expect(step.graph.model.graph.nodes.some((n) => n.opType === 'Resize')).toBe(true);
    expect([...step.graph.weights].sort()).toEqual(params.map((p) => p.name).sort());
    expect(Math.abs(r.loss - refLoss)).toBeLessThan(1e-5 * Math.max(1, refLoss));
    const worst = worstGradientDifference(params, grads, r.gradients);
    if (process.env.FD_VERBOSE) console.log(`fpn: loss ${r.loss} vs ${refLoss}, worst relative gradient difference ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(1e-4);
    tf.dispose([value, ...Object.values(grads)]);
    graph.dispose();
  });

  it('LSTM tagger: gradients of W, R, B (LSTM layout) and the head equal finite differences (float64)', async () => {
    const student = lstmTagger();
    expect(trainingCoverage(student)).toEqual({ covered: true, missing: [] });
    const inputs = standinInputs('lstm', 3, 14);
    const r = await fdCheck(student, inputs, { precision: 'float64', samples: 6 });
    expect(r.weights).toEqual(['lstm.W', 'lstm.R', 'lstm.B', 'head.w', 'head.b']);
    expect(r.worst).toBeLessThan(1e-6);
    // the teacher is the same architecture, wider, with the same output
    const teacher = await forward(lstmTagger({ hidden: 48 }), inputs);
    expect([...teacher.dims]).toEqual([3, 16, 5]);
  });
});

/**
 * The training loop and distillation on a synthetic task: write-back round trip, learning from
 * labels and from a teacher, checkpoint/resume equal to an uninterrupted run, gradual pruning,
 * early stopping, feature distillation, students made from the teacher.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { decodeModel, encodeModel } from '../../../src/onnx/index.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { distill, studentFromTeacher } from '../../../src/app/distill.js';
import { TrainableGraph } from '../../../src/train/tfjs/onnx-graph.js';
import { learningRateAt } from '../../../src/train/core/schedule.js';
import { sparsityAt, isUpdateStep } from '../../../src/train/core/pruning-masks.js';
import { epochPermutation } from '../../../src/train/core/batching.js';
import { smallCnn, syntheticImages, templateTeacher } from './models.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-distill-'));
const train = syntheticImages(256, 1);
const evalSet = syntheticImages(200, 2);

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('write-back', () => {
  it('0 training steps give a model with identical bytes (built and decoded models)', async () => {
    for (const model of [smallCnn(4), decodeModel(encodeModel(smallCnn(3, { dropout: true })))]) {
      const before = encodeModel(model);
      const graph = new TrainableGraph(model);
      expect(Buffer.from(encodeModel(graph.exportModel())).equals(Buffer.from(before))).toBe(true);
      graph.dispose();
      const { model: trained, report } = await distill({ student: model, train, epochs: 0, backend: 'cpu' });
      expect(report.steps).toBe(0);
      expect(Buffer.from(encodeModel(trained)).equals(Buffer.from(before))).toBe(true);
      expect(Buffer.from(encodeModel(model)).equals(Buffer.from(before))).toBe(true);
    }
  });

  it('trained values land in the clone; the input model is untouched', async () => {
    const model = smallCnn(4);
    const original = Float32Array.from(model.graph.value('conv.w')!.initializer!.data as Float32Array);
    const { model: trained } = await distill({ student: model, train, epochs: 1, batchSize: 32, learningRate: 0.01, backend: 'cpu' });
    expect(Array.from(model.graph.value('conv.w')!.initializer!.data as Float32Array)).toEqual(Array.from(original));
    const after = trained.graph.value('conv.w')!.initializer!.data as Float32Array;
    expect(after.some((v, i) => v !== original[i])).toBe(true);
    // running statistics moved too (BatchNormalization in training mode)
    const mean = trained.graph.value('bn.mean')!.initializer!.data as Float32Array;
    expect(mean.some((v) => v !== 0)).toBe(true);
  });
});

describe('learning', () => {
  it('a student exported with a fixed batch (Reshape to [1, 36]) trains on a batch-dynamic copy and is written that way', async () => {
    const warnings: string[] = [];
    const student = smallCnn(4, { fixedBatch: 1 });
    const { model, report } = await distill({
      student,
      train,
      eval: evalSet,
      epochs: 2,
      batchSize: 32,
      learningRate: 0.01,
      backend: 'cpu',
      onWarning: (w) => warnings.push(w),
    });
    expect(warnings).toEqual([
      "the student fixes its batch at 1: training uses a copy with a dynamic batch dim (Reshape 'flatten': [1, 36] -> [-1, 36]); the written model keeps the dynamic batch dim",
    ]);
    expect(model.graph.inputs[0]!.type).toMatchObject({ shape: ['N', 1, 6, 6] });
    const reshape = model.graph.nodes.find((n) => n.name === 'flatten')!;
    expect(Array.from(model.graph.constantTensor(reshape.inputs[1]!)!.data as BigInt64Array)).toEqual([-1n, 36n]);
    expect(report.history.at(-1)!.evalAccuracy).toBeGreaterThan(0.5); // 4 classes: chance is 0.25
    // The input model keeps its fixed batch.
    expect(student.graph.inputs[0]!.type).toMatchObject({ shape: [1, 1, 6, 6] });
  });

  it('labels only: a small CNN learns the task; the written model agrees with the interpreter in onnxruntime', async () => {
    const { report } = await distill({ student: smallCnn(4), train, eval: evalSet, epochs: 4, batchSize: 32, learningRate: 0.01, backend: 'cpu' });
    expect(report.mode).toBe('labels');
    expect(report.history).toHaveLength(4);
    expect(report.history[3]!.loss).toBeLessThan(report.history[0]!.loss);
    expect(report.accuracy.student!).toBeGreaterThan(0.9);
    expect(report.validationError).toBeLessThan(1e-4);
    expect(report.samplesPerSecond).toBeGreaterThan(0);
  });

  it('teacher only (alpha ignored without labels): the student matches a teacher it never saw labels from', async () => {
    const unlabeled = { ...train, labels: undefined };
    const { report } = await distill({
      student: smallCnn(4),
      teacher: templateTeacher(),
      train: unlabeled,
      eval: evalSet,
      epochs: 4,
      batchSize: 32,
      learningRate: 0.01,
      temperature: 2,
      backend: 'cpu',
    });
    expect(report.mode).toBe('distill');
    expect(report.accuracy.teacher!).toBeGreaterThan(0.95);
    expect(report.accuracy.student!).toBeGreaterThan(0.9);
    expect(report.history[0]!.softLoss).toBeGreaterThan(report.history[3]!.softLoss!);
    expect(report.history[0]!.hardLoss).toBeUndefined();
  });
});

describe('checkpoint and resume', () => {
  it('1 epoch + checkpoint + resume gives bit-identical weights and history to 3 uninterrupted epochs', async () => {
    const common = {
      teacher: templateTeacher(),
      train,
      eval: evalSet,
      epochs: 3,
      batchSize: 32,
      learningRate: 0.01,
      alpha: 0.3,
      backend: 'cpu' as const,
      seed: 5,
    };
    const straight = await distill({ ...common, student: smallCnn(4, { dropout: true }) });
    const ckpt = path.join(dir, 'run.ckpt.npz');
    const first = await distill({ ...common, student: smallCnn(4, { dropout: true }), checkpointPath: ckpt, stopAfterEpoch: 1 });
    expect(first.report.interrupted).toBe(true);
    expect(first.report.history).toHaveLength(1);
    const resumed = await distill({ ...common, student: smallCnn(4, { dropout: true }), checkpointPath: ckpt, resumeFrom: ckpt });
    expect(resumed.report.resumedAfterEpoch).toBe(1);
    expect(resumed.report.history.map((h) => h.loss)).toEqual(straight.report.history.map((h) => h.loss));
    expect(resumed.report.history.map((h) => h.evalAccuracy)).toEqual(straight.report.history.map((h) => h.evalAccuracy));
    expect(Buffer.from(encodeModel(resumed.model)).equals(Buffer.from(encodeModel(straight.model)))).toBe(true);
  });

  it('a finished run trains on with more epochs on the tfjs loop too: 1 then 2 equals 2 uninterrupted (constant schedule)', async () => {
    const common = {
      teacher: templateTeacher(),
      train,
      batchSize: 32,
      learningRate: 0.01,
      alpha: 0.3,
      backend: 'cpu' as const,
      seed: 3,
      schedule: 'constant' as const,
    };
    const straight = await distill({ ...common, epochs: 2, student: smallCnn(4) });
    const ckpt = path.join(dir, 'extend.ckpt.npz');
    await distill({ ...common, epochs: 1, student: smallCnn(4), checkpointPath: ckpt });
    const more = await distill({ ...common, epochs: 2, student: smallCnn(4), resumeFrom: ckpt });
    expect([more.report.resumedAfterEpoch, more.report.extendedFromEpochs]).toEqual([1, 1]);
    expect(more.report.history.map((h) => h.loss)).toEqual(straight.report.history.map((h) => h.loss));
    expect(Buffer.from(encodeModel(more.model)).equals(Buffer.from(encodeModel(straight.model)))).toBe(true);
  });

  it('refuses a checkpoint written with other settings', async () => {
    const ckpt = path.join(dir, 'other.ckpt.npz');
    await distill({ student: smallCnn(4), train, epochs: 2, batchSize: 32, backend: 'cpu', checkpointPath: ckpt, stopAfterEpoch: 1 });
    await expect(distill({ student: smallCnn(4), train, epochs: 2, batchSize: 64, backend: 'cpu', resumeFrom: ckpt })).rejects.toThrow(
      /other settings \(batchSize/,
    );
  });
});

describe('schedules', () => {
  it('cosine and step learning rates', () => {
    const base = { baseLearningRate: 0.1, totalSteps: 100, stepsPerEpoch: 10 };
    expect(learningRateAt({ ...base, kind: 'cosine' }, 0)).toBeCloseTo(0.1, 10);
    expect(learningRateAt({ ...base, kind: 'cosine' }, 50)).toBeCloseTo(0.05, 10);
    expect(learningRateAt({ ...base, kind: 'cosine' }, 100)).toBeCloseTo(0, 10);
    expect(learningRateAt({ ...base, kind: 'step', stepEpochs: 3, gamma: 0.5 }, 29)).toBeCloseTo(0.1, 10);
    expect(learningRateAt({ ...base, kind: 'step', stepEpochs: 3, gamma: 0.5 }, 30)).toBeCloseTo(0.05, 10);
    expect(learningRateAt({ ...base, kind: 'step', stepEpochs: 3, gamma: 0.5 }, 65)).toBeCloseTo(0.025, 10);
  });

  it('polynomial pruning schedule (tfmot PolynomialDecay, power 3)', () => {
    const s = { finalSparsity: 0.8, beginStep: 0, endStep: 100, frequency: 10 };
    expect(sparsityAt(s, 0)).toBeCloseTo(0, 10);
    expect(sparsityAt(s, 50)).toBeCloseTo(0.8 * (1 - 0.5 ** 3), 10);
    expect(sparsityAt(s, 100)).toBeCloseTo(0.8, 10);
    expect(sparsityAt(s, 150)).toBeCloseTo(0.8, 10);
    expect([0, 5, 10, 100, 101].map((t) => isUpdateStep(s, t))).toEqual([true, false, true, true, false]);
  });

  it('shuffling depends on (seed, epoch) only', () => {
    const a = epochPermutation(50, 3, 2);
    expect(Array.from(a)).toEqual(Array.from(epochPermutation(50, 3, 2)));
    expect(Array.from(a)).not.toEqual(Array.from(epochPermutation(50, 3, 3)));
    expect([...a].sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_v, i) => i));
  });
});

describe('pruning, early stopping, features, students', () => {
  it('--prune-to 0.8 keeps pruned weights at zero and still learns', async () => {
    const { model, report } = await distill({
      student: smallCnn(8),
      train,
      eval: evalSet,
      epochs: 4,
      batchSize: 32,
      learningRate: 0.01,
      pruneTo: 0.8,
      backend: 'cpu',
    });
    for (const name of ['conv.w', 'fc.w']) {
      const w = model.graph.value(name)!.initializer!.data as Float32Array;
      const zeros = w.filter((v) => v === 0).length;
      expect(zeros).toBe(Math.floor(0.8 * w.length));
    }
    expect(report.sparsity!.overall).toBeGreaterThanOrEqual(0.79);
    expect(report.accuracy.student!).toBeGreaterThan(0.8);
    // only epochs at full sparsity are candidates for the best checkpoint
    expect(report.bestEpoch!).toBeGreaterThanOrEqual(3);
  });

  it('early stopping after `patience` epochs without improvement', async () => {
    const { report } = await distill({
      student: smallCnn(4),
      train,
      eval: evalSet,
      epochs: 6,
      batchSize: 32,
      learningRate: 0,
      patience: 2,
      freezeNorm: true,
      backend: 'cpu',
    });
    // lr 0 and frozen BatchNormalization: epoch 1 is the best, epochs 2 and 3 do not improve, training stops after epoch 3
    expect(report.history).toHaveLength(3);
    expect(report.stoppedEarly).toBe(true);
    expect(report.bestEpoch).toBe(1);
  });

  it('feature distillation with a channel adapter lowers the feature loss', async () => {
    const teacher = smallCnn(6, { seed: 9 });
    const { report } = await distill({
      student: smallCnn(3),
      teacher,
      train,
      epochs: 3,
      batchSize: 32,
      learningRate: 0.01,
      backend: 'cpu',
      features: [{ teacher: 'features', student: 'features' }],
    });
    expect(report.history[0]!.featureLoss).toBeGreaterThan(report.history[2]!.featureLoss!);
  });

  it('a student from the teacher by channel pruning has fewer weights and trains', async () => {
    const teacher = smallCnn(8, { seed: 4 });
    const student = studentFromTeacher(teacher, 0.5);
    expect(student.graph.value('conv.w')!.initializer!.dims).toEqual([4, 1, 3, 3]);
    const { report } = await distill({
      student,
      teacher: templateTeacher(),
      train,
      eval: evalSet,
      epochs: 5,
      batchSize: 32,
      learningRate: 0.01,
      backend: 'cpu',
    });
    expect(report.accuracy.student!).toBeGreaterThan(0.85);
  });

  it('reports unsupported ops before training', async () => {
    const model = smallCnn(2);
    model.graph.nodes.find((n) => n.opType === 'Relu')!.opType = 'Selu';
    await expect(distill({ student: model, train, backend: 'cpu' })).rejects.toThrow(/op type 'Selu' of node 'relu'/);
  });
});

describe('tfjs memory', () => {
  it('a training run leaves no tensors behind', async () => {
    const before = tf.memory().numTensors;
    await distill({ student: smallCnn(4), teacher: templateTeacher(), train, eval: evalSet, epochs: 1, batchSize: 64, backend: 'cpu', pruneTo: 0.5 });
    expect(tf.memory().numTensors).toBe(before);
  });
});

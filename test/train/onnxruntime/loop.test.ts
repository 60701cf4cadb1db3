/**
 * Distillation on the onnxruntime backend (src/train/onnxruntime/loop.ts through train/distill):
 * a full run against the tfjs 'cpu' reference on the same data (same updated weights within float32
 * tolerance), checkpoint/resume bit-identical to an uninterrupted run, gradual pruning to exact zeros
 * at the target sparsity (the same masks as the tfjs pruner's rule), freezeNorm and early stopping,
 * the `auto` choice and its reasons (with --feature pairs too), and the UsageError for an op without a gradient rule.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataType, Tensor, type Model } from '../../../src/ir/index.js';
import { encodeModel } from '../../../src/onnx/index.js';
import { distill } from '../../../src/train/distill.js';
import { initTrainingBackend } from '../../../src/train/tfjs/backend.js';
import { magnitudeMask } from '../../../src/train/core/pruning-masks.js';
import { UsageError } from '../../../src/errors.js';
import { smallCnn, syntheticImages, templateTeacher } from '../distill/models.js';
import { renderDistillSummary } from '../../../src/report/distill-summary.js';
import type { DistillWorkflowResult } from '../../../src/app/distill.js';

const dir = mkdtempSync(path.join(tmpdir(), 'model-opt-train-ort-'));
const train = syntheticImages(128, 1);
const evalSet = syntheticImages(96, 2);
const bigTrain = syntheticImages(256, 1);

beforeAll(async () => {
  await initTrainingBackend({ backend: 'cpu' });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function weights(model: Model): Map<string, Float32Array> {
  return new Map(model.graph.initializerValues.filter((v) => v.initializer!.dtype === 1).map((v) => [v.name, v.initializer!.data as Float32Array]));
}

/**
 * Largest |a - b| over the float initializers, relative to the largest |b| of each tensor. conv.b
 * is left out: it feeds BatchNormalization, so its gradient is zero up to rounding noise (1e-9),
 * which SGD leaves at 1e-8 and Adam's normalisation turns into lr-sized steps of either sign.
 */
function worstRelative(a: Model, b: Model, skipConvBias = true): number {
  const wb = weights(b);
  let worst = 0;
  for (const [name, x] of weights(a)) {
    if (skipConvBias && name === 'conv.b') continue;
    const y = wb.get(name)!;
    const scale = Math.max(1e-6, ...Array.from(y, Math.abs));
    for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(x[i]! - y[i]!) / scale);
  }
  return worst;
}

describe('onnxruntime training backend against the tfjs cpu reference', () => {
  it('one epoch of SGD (labels + teacher, BN in training mode) gives the same weights, running statistics and history', async () => {
    const common = {
      teacher: templateTeacher(),
      train,
      eval: evalSet,
      epochs: 1,
      batchSize: 16,
      learningRate: 0.05,
      optimizer: 'sgd' as const,
      momentum: 0.9,
      weightDecay: 1e-3,
      schedule: 'constant' as const,
      alpha: 0.5,
      temperature: 2,
    };
    const ref = await distill({ ...common, student: smallCnn(4), backend: 'cpu' });
    const ort = await distill({ ...common, student: smallCnn(4), backend: 'onnxruntime' });
    expect(ort.report.backend.name).toBe('onnxruntime');
    expect(ref.report.steps).toBe(8);
    expect(ort.report.steps).toBe(8);
    // 8 steps of float32 arithmetic in two accumulation orders: measured 1.1e-7 (a few ulps)
    expect(worstRelative(ort.model, ref.model)).toBeLessThan(1e-5);
    const running = (m: Model) => Array.from(m.graph.value('bn.mean')!.initializer!.data as Float32Array);
    expect(running(ort.model).some((v) => v !== 0)).toBe(true);
    expect(ort.report.history[0]!.loss).toBeCloseTo(ref.report.history[0]!.loss, 4);
    expect(ort.report.history[0]!.softLoss).toBeCloseTo(ref.report.history[0]!.softLoss!, 4);
    expect(ort.report.history[0]!.trainAccuracy).toBeCloseTo(ref.report.history[0]!.trainAccuracy!, 6);
    expect(ort.report.history[0]!.evalAccuracy).toBeCloseTo(ref.report.history[0]!.evalAccuracy!, 6);
    expect(ort.report.accuracy.studentBefore).toBe(ref.report.accuracy.studentBefore);
    expect(ort.report.validationError).toBeLessThan(1e-5);
  });

  it('AdamW with a cosine schedule, frozen BatchNormalization and label-free soft targets (alpha 0, no labels) tracks the reference', async () => {
    const common = {
      teacher: templateTeacher(),
      train: { ...train, labels: undefined },
      epochs: 2,
      batchSize: 32,
      learningRate: 0.01,
      temperature: 2,
      alpha: 0,
      // inference-form BN gives conv.b a real gradient (see worstRelative), so every tensor compares
      freezeNorm: true,
      weightDecay: 1e-2,
    };
    const ref = await distill({ ...common, student: smallCnn(4), backend: 'cpu' });
    const ort = await distill({ ...common, student: smallCnn(4), backend: 'onnxruntime' });
    expect(worstRelative(ort.model, ref.model, false)).toBeLessThan(1e-4);
    expect(ort.report.history[1]!.softLoss).toBeCloseTo(ref.report.history[1]!.softLoss!, 4);
    expect(ort.report.history[1]!.softLoss!).toBeLessThan(ort.report.history[0]!.softLoss!);
    expect(ort.report.history[0]!.hardLoss).toBeUndefined();
  });
});

describe('onnxruntime loop: resume, pruning, early stopping', () => {
  it('1 epoch + checkpoint + resume gives bit-identical weights and history to 3 uninterrupted epochs', async () => {
    const common = {
      teacher: templateTeacher(),
      train,
      eval: evalSet,
      epochs: 3,
      batchSize: 32,
      learningRate: 0.01,
      alpha: 0.3,
      backend: 'onnxruntime' as const,
      seed: 5,
      pruneTo: 0.5,
    };
    const straight = await distill({ ...common, student: smallCnn(4) });
    const ckpt = path.join(dir, 'run.ckpt.npz');
    const first = await distill({ ...common, student: smallCnn(4), checkpointPath: ckpt, stopAfterEpoch: 1 });
    expect(first.report.interrupted).toBe(true);
    expect(first.report.history).toHaveLength(1);
    const resumed = await distill({ ...common, student: smallCnn(4), checkpointPath: ckpt, resumeFrom: ckpt });
    expect(resumed.report.resumedAfterEpoch).toBe(1);
    expect(resumed.report.history.map((h) => h.loss)).toEqual(straight.report.history.map((h) => h.loss));
    expect(resumed.report.history.map((h) => h.evalAccuracy)).toEqual(straight.report.history.map((h) => h.evalAccuracy));
    expect(Buffer.from(encodeModel(resumed.model)).equals(Buffer.from(encodeModel(straight.model)))).toBe(true);
    // other settings: refused, naming the setting
    await expect(distill({ ...common, learningRate: 0.02, student: smallCnn(4), resumeFrom: ckpt })).rejects.toThrow(/other settings \(learningRate\)/);
  });

  it('a finished run trains on with more --epochs: 2 epochs then resume to 3 equals 3 uninterrupted epochs (constant schedule); fewer is refused', async () => {
    const common = {
      teacher: templateTeacher(),
      train,
      eval: evalSet,
      batchSize: 32,
      learningRate: 0.01,
      alpha: 0.3,
      backend: 'onnxruntime' as const,
      seed: 9,
      schedule: 'constant' as const,
    };
    const straight = await distill({ ...common, epochs: 3, student: smallCnn(4) });
    const ckpt = path.join(dir, 'extend.ckpt.npz');
    const finished = await distill({ ...common, epochs: 2, student: smallCnn(4), checkpointPath: ckpt });
    expect(finished.report.interrupted).toBe(false);
    const more = await distill({ ...common, epochs: 3, student: smallCnn(4), checkpointPath: ckpt, resumeFrom: ckpt });
    expect(more.report.resumedAfterEpoch).toBe(2);
    expect(more.report.extendedFromEpochs).toBe(2);
    expect(more.report.history.map((h) => h.loss)).toEqual(straight.report.history.map((h) => h.loss));
    expect(Buffer.from(encodeModel(more.model)).equals(Buffer.from(encodeModel(straight.model)))).toBe(true);
    const summary = renderDistillSummary({
      report: more.report,
      parameters: { teacher: 1, student: 1 },
      output: 'student.onnx',
    } as unknown as DistillWorkflowResult);
    expect(summary).toContain("resumed after epoch 2 and trained on to 3 epochs (the checkpoint's run had 2)");
    // The checkpoint now holds the 3-epoch run: fewer epochs than that are refused, naming both.
    await expect(distill({ ...common, epochs: 2, student: smallCnn(4), resumeFrom: ckpt })).rejects.toThrow(
      /the checkpoint's run has 3 epochs \(3 done\); --epochs 2 is fewer/,
    );
  });

  it('--prune-to 0.8: pruned weights are exact zeros at the target count, by the magnitude rule, and the student still learns', async () => {
    const { model, report } = await distill({
      student: smallCnn(8),
      train: bigTrain,
      eval: evalSet,
      epochs: 4,
      batchSize: 32,
      learningRate: 0.01,
      pruneTo: 0.8,
      backend: 'onnxruntime',
    });
    for (const name of ['conv.w', 'fc.w']) {
      const w = model.graph.value(name)!.initializer!.data as Float32Array;
      expect(w.filter((v) => v === 0).length).toBe(Math.floor(0.8 * w.length));
      // the zeros are where the (shared) magnitude rule puts them: recomputing the mask keeps them
      const mask = magnitudeMask(w, 0.8);
      for (let i = 0; i < w.length; i++) if (w[i] === 0) expect(mask[i]).toBe(0);
    }
    // biases, BN parameters are not pruned
    expect((model.graph.value('fc.b')!.initializer!.data as Float32Array).every((v) => v !== 0)).toBe(true);
    expect(report.sparsity!.layers.map((l) => l.name)).toEqual(['conv.w', 'fc.w']);
    expect(report.sparsity!.overall).toBeCloseTo((Math.floor(0.8 * 72) + Math.floor(0.8 * 288)) / 360, 6);
    expect(report.accuracy.student!).toBeGreaterThan(0.8);
    expect(report.bestEpoch!).toBeGreaterThanOrEqual(3);
  });

  it('early stopping after `patience` epochs without improvement (lr 0, frozen BatchNormalization: weights unchanged)', async () => {
    const student = smallCnn(4);
    const { model, report } = await distill({
      student,
      train,
      eval: evalSet,
      epochs: 6,
      batchSize: 32,
      learningRate: 0,
      patience: 2,
      freezeNorm: true,
      backend: 'onnxruntime',
    });
    expect(report.history).toHaveLength(3);
    expect(report.stoppedEarly).toBe(true);
    expect(report.bestEpoch).toBe(1);
    expect(Buffer.from(encodeModel(model)).equals(Buffer.from(encodeModel(student)))).toBe(true);
  });
});

describe('backend choice', () => {
  it('auto picks onnxruntime for a covered student and says why, with --feature too; an uncovered feature path falls back to tfjs with the reason', async () => {
    const messages: string[] = [];
    const onProgress = (e: { phase: string; message: string }) => e.phase === 'backend' && messages.push(e.message);
    const a = await distill({ student: smallCnn(4), train, epochs: 1, batchSize: 64, onProgress });
    expect(a.report.backend.name).toBe('onnxruntime');
    expect(a.report.backend.reason).toMatch(/every op/);
    expect(messages[0]).toBe(
      'training backend: onnxruntime (onnxruntime-node training graph, 1 intra-op thread) (auto: every op on the path to the loss has a gradient rule)',
    );
    const withFeature = (student: Model, name: string) =>
      distill({
        student,
        teacher: smallCnn(4, { seed: 3 }),
        train,
        epochs: 1,
        batchSize: 64,
        features: [{ teacher: 'features', student: name }],
        onProgress,
      });
    const b = await withFeature(smallCnn(4), 'features');
    expect(b.report.backend.name).toBe('onnxruntime');
    expect(b.report.history[0]!.featureLoss).toBeGreaterThan(0);
    // a feature tensor behind Pad in reflect mode (the interpreter runs it, no gradient rule takes it)
    const side = smallCnn(4);
    const g = side.graph;
    const pads = g.addInitializer(Tensor.fromData('side.pads', { dtype: DataType.INT64, dims: [8], data: new BigInt64Array(8) }));
    g.addNode({ opType: 'Pad', inputs: [g.value('features')!, pads], outputs: ['side'], attributes: { mode: 'reflect' }, name: 'side.pad' });
    const c = await withFeature(side, 'side');
    expect(c.report.backend.name).not.toBe('onnxruntime');
    expect(c.report.backend.reason).toMatch(/no gradient rule for node 'side.pad' \(Pad\): mode 'reflect' is not supported .* feature tensor 'side'/);
    expect(messages[2]).toMatch(/not onnxruntime: cannot train on onnxruntime/);
    await initTrainingBackend({ backend: 'cpu' });
  });

  it('an op without a gradient rule: auto names the node and op and falls back; --backend onnxruntime is a UsageError before training', async () => {
    const model = smallCnn(2);
    model.graph.nodes.find((n) => n.opType === 'Relu')!.opType = 'Selu';
    const messages: string[] = [];
    const steps: number[] = [];
    const error = await distill({ student: model, train, backend: 'onnxruntime', onProgress: (e) => e.step && steps.push(e.step) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UsageError);
    expect((error as Error).message).toMatch(/no gradient rule for node 'relu' \(Selu\)/);
    expect(steps).toEqual([]);
    // auto: the reason names the node, then the tfjs interpreter (no Selu either) refuses too
    await expect(distill({ student: model, train, onProgress: (e) => e.phase === 'backend' && messages.push(e.message) })).rejects.toThrow(/Selu/);
    expect(messages[0]).toMatch(/not onnxruntime: .*'relu' \(Selu\)/);
    await initTrainingBackend({ backend: 'cpu' });
  });
});

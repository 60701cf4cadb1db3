// QA pass session 7, smaller findings (helper R), on what the training reports record: a
// label-free distillation records the alpha its loss used (0: soft targets only), not the default
// 0.5; QAT with labelled training data and no eval data reports its fake-quantized accuracy on the
// training data (it printed '- -> -'), and the numbers match onnxruntime on the same data.
import { describe, expect, it } from 'vitest';
import { quantizeInt8 } from '../../src/app/quantize-passes.js';
import { top1Accuracy } from '../../src/evaluate/index.js';
import { distill } from '../../src/train/distill.js';
import { quantizeAwareTraining } from '../../src/app/qat.js';
import { smallCnn, syntheticImages } from '../train/distill/models.js';

const train = syntheticImages(256, 1, 0.6);

describe('distill report settings.alpha', () => {
  it('is the alpha the loss used: 0 without labels, 1 without a teacher, as given with both', async () => {
    const teacher = smallCnn(4, { seed: 7 });
    const common = { student: smallCnn(4), epochs: 1, batchSize: 64, backend: 'cpu' as const };
    const unlabelled = { ...train, labels: undefined };
    const free = await distill({ ...common, teacher, train: unlabelled, alpha: 0.5 });
    expect(free.report.settings.alpha).toBe(0);
    const labelsOnly = await distill({ ...common, train, alpha: 0.5 });
    expect(labelsOnly.report.settings.alpha).toBe(1);
    const both = await distill({ ...common, teacher, train, alpha: 0.3 });
    expect(both.report.settings.alpha).toBe(0.3);
  });
});

describe('QAT fake-quantized accuracy without eval data', () => {
  for (const backend of ['cpu', 'onnxruntime'] as const) {
    it(`${backend}: before and after on the labelled training data, close to onnxruntime's PTQ and QAT models there`, async () => {
      const fp32 = smallCnn(4);
      const { model: ptq, context } = await quantizeInt8(fp32, { calibration: train, calibrationCount: 256, minConvReduction: 0 });
      const { model: qat, report } = await quantizeAwareTraining(context.preprocessed, {
        ranges: context.ranges,
        qdq: context.qdqOptions,
        train,
        epochs: 1,
        batchSize: 32,
        learningRate: 3e-3,
        backend,
      });
      expect(report.fakeQuantAccuracy.on).toBe('training');
      // the fake-quantized forward predicts the int8 models' accuracy on the same 256 samples (measured:
      // equal on both backends, 10.94% -> 18.75%); at most one sample may round the other way
      const ptqAccuracy = (await top1Accuracy(ptq, train)).accuracy;
      const qatAccuracy = (await top1Accuracy(qat, train)).accuracy;
      expect(qatAccuracy).not.toBe(ptqAccuracy);
      expect(Math.abs(report.fakeQuantAccuracy.before! - ptqAccuracy)).toBeLessThanOrEqual(1 / 256);
      expect(Math.abs(report.fakeQuantAccuracy.after! - qatAccuracy)).toBeLessThanOrEqual(1 / 256);
      expect(report.accuracy).toBeUndefined(); // the export is scored only on --eval-data
    });
  }
});

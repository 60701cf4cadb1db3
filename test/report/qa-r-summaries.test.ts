// QA pass session 7, smaller findings (helper R): the reporters' wording. p-values below a
// thousandth read 'p<0.001' (not 'p=<0.001'); the distill summary prints parameter counts with
// separators as inspect does, no row of dashes without eval data, and the speed-up (median of
// paired ratios) on its own row with its interval, apart from the two p50s it need not equal;
// labels that are the class indices plus one get a '1-based' hint.
import { describe, expect, it } from 'vitest';
import { formatAccuracy, formatPClause } from '../../src/report/format.js';
import { renderDistillSummary } from '../../src/report/distill-summary.js';
import { labelRangeLines, labelRangeWarnings } from '../../src/report/table.js';
import { labelRangeMessage, labelsLookOneBased } from '../../src/evaluate/index.js';
import type { DistillWorkflowResult } from '../../src/app/distill.js';
import type { DistillReport } from '../../src/train/distill.js';
import { sampleResult } from '../benchmark/sample-result.js';

describe('p-values', () => {
  it("read 'p<0.001' below a thousandth and 'p=x' otherwise", () => {
    expect(formatPClause(0.0004)).toBe('p<0.001');
    expect(formatPClause(0.0042)).toBe('p=0.004');
    expect(formatPClause(0.1796)).toBe('p=0.18');
    expect(formatPClause(1)).toBe('p=1.00');
    const result = sampleResult();
    const accuracy = result.models[1]!.accuracy!;
    accuracy.comparison = { ...accuracy.comparison!, pValue: 2e-9 };
    // 88.8%, -1.2 pt [-2.70, +0.31] as in report.test.ts, with a tiny p
    expect(formatAccuracy(accuracy)).toBe('88.80% (-1.20 pt [-2.70, +0.31], p<0.001)');
  });
});

describe('out-of-range labels', () => {
  it("hint '1-based' exactly when the labels are 1..C for C classes", () => {
    // 47 of 100 labels are 2 for a 2-class output, the rest 1: labels - 1 are exactly 0..1
    expect(labelsLookOneBased({ outOfRange: 47, total: 100, classes: 2, minLabel: 1, maxLabel: 2 })).toBe(true);
    expect(labelRangeMessage({ outOfRange: 47, total: 100, classes: 2, minLabel: 1, maxLabel: 2 })).toBe(
      '47 of 100 labels are out of range for the 2 classes of the output (scored as misses); labels look 1-based (min 1, max 2): subtract 1',
    );
    // 0-based labels with a few strays, labels starting at 2, labels beyond C: no hint
    expect(labelsLookOneBased({ outOfRange: 3, total: 64, classes: 10, minLabel: 0, maxLabel: 1000 })).toBe(false);
    expect(labelsLookOneBased({ outOfRange: 3, total: 64, classes: 10, minLabel: 2, maxLabel: 10 })).toBe(false);
    expect(labelsLookOneBased({ outOfRange: 3, total: 64, classes: 10, minLabel: 1, maxLabel: 11 })).toBe(false);
    expect(labelRangeMessage({ outOfRange: 0, total: 64, classes: 10 })).toBeNull();
  });

  it('the benchmark report line and the warning text carry the hint', () => {
    const result = sampleResult();
    result.models[0]!.accuracy!.details = { k: 1, correct: 4, outOfRangeLabels: 47, classes: 2, minLabel: 1, maxLabel: 2 };
    const message = `47 of ${result.models[0]!.accuracy!.total} labels are out of range for the 2 classes of the output (scored as misses); labels look 1-based (min 1, max 2): subtract 1`;
    expect(labelRangeWarnings(result)).toEqual([message]);
    expect(labelRangeLines(result)).toEqual([`data: ${message}`]);
  });
});

function distillResult(accuracy: DistillReport['accuracy'], evalSamples?: number): DistillWorkflowResult {
  const report = {
    schemaVersion: 1,
    backend: { name: 'onnxruntime', description: 'onnxruntime cpu' },
    settings: {},
    trainSamples: 200,
    evalSamples,
    mode: 'distill',
    history: [{ epoch: 1, loss: 0.5, learningRate: 1e-3, samplesPerSecond: 1000, seconds: 0.2 }],
    stoppedEarly: false,
    interrupted: false,
    steps: 4,
    samplesPerSecond: 1000,
    accuracy,
    validationError: 1e-7,
  } as unknown as DistillReport;
  return {
    teacher: 'teacher.onnx',
    student: 'student.onnx',
    output: 'out.onnx',
    parameters: { teacher: 177562, student: 47506 },
    report,
    latency: { teacherMs: 0.12, studentMs: 0.07, speedup: 1.32, speedupInterval: { low: 1.2, high: 1.45, verdict: 'faster' } },
  };
}

describe('distill summary', () => {
  it('parameters with separators; the speed-up on its own row with its interval', () => {
    const text = renderDistillSummary(distillResult({ teacher: 0.9, studentBefore: 0.5, student: 0.85 }, 100));
    const row = (label: string) => text.split('\n').find((l) => l.includes(label))!;
    expect(row('parameters')).toMatch(/│ 177,562 +│ 47,506 +│/);
    expect(row('latency, batch 1 (p50 ms')).toMatch(/│ 0\.120 +│ 0\.070 +│/);
    expect(row('latency, batch 1 (p50 ms')).not.toContain('speed-up');
    expect(row('speed-up, batch 1 (median of paired ratios, 95% CI)')).toContain('1.32x [1.20, 1.45]');
    expect(row('accuracy (onnxruntime)')).toContain('50.00% -> 85.00%');
    expect(text).not.toContain('not measured');
  });

  it('without eval data: no accuracy row of dashes, a line saying why', () => {
    const text = renderDistillSummary(distillResult({}));
    expect(text).not.toContain('accuracy (onnxruntime)');
    expect(text).not.toContain('- -> -');
    expect(text).toContain('accuracy: not measured (no --eval-data)');
  });
});

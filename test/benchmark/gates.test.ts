import { describe, expect, it } from 'vitest';
import { evaluateGates } from '../../src/benchmark/gates.js';
import { formatAccuracy } from '../../src/report/format.js';
import { sampleResult } from './sample-result.js';

// Sample: baseline 90.0%, candidate 88.8% on 500 samples (b = 10, c = 4): drop 1.2 pt.
// Agresti-Min interval of candidate - baseline (python): (-0.027037331742672834, 0.003132949272553316)
// -> drop [-0.313, 2.704] pt; exact McNemar p = 2 * sum_{k<=4} C(14,k) / 2^14 = 0.1795654296875.
describe('gates', () => {
  const models = sampleResult().models;

  it('max-accuracy-drop in points: passes at 1.2pt, fails at 1pt, names model, value and interval', () => {
    const [pass] = evaluateGates(models, { maxAccuracyDrop: { kind: 'points', value: 1.2 } });
    expect(pass!.passed).toBe(true);
    expect(pass!.measured.estimate).toBeCloseTo(1.2, 10);
    const [fail] = evaluateGates(models, { maxAccuracyDrop: { kind: 'points', value: 1 } });
    expect(fail).toMatchObject({ gate: 'max-accuracy-drop', model: 'model-int8.onnx', passed: false, unit: 'pt', limit: '1pt' });
    expect(fail!.measured.low).toBeCloseTo(-0.3132949272553316, 10);
    expect(fail!.measured.high).toBeCloseTo(2.7037331742672834, 10);
    expect(fail!.message).toBe(
      'max-accuracy-drop: model-int8.onnx dropped 1.20 pt (95% CI -0.31 to 2.70 pt) on 500 samples (McNemar p=0.18); limit 1pt exceeded',
    );
  });

  it('max-accuracy-drop formats the McNemar p-value as the reporters do', () => {
    const withP = (pValue: number) =>
      models.map((m) => (m.accuracy?.comparison ? { ...m, accuracy: { ...m.accuracy, comparison: { ...m.accuracy.comparison, pValue } } } : m));
    const message = (pValue: number) => evaluateGates(withP(pValue), { maxAccuracyDrop: { kind: 'points', value: 5 } })[0]!.message;
    expect(message(1)).toContain('(McNemar p=1.00)');
    expect(message(0.0042)).toContain('(McNemar p=0.004)');
    expect(message(0.0004)).toContain('(McNemar p<0.001)');
    expect(formatAccuracy(withP(1)[1]!.accuracy)).toContain('p=1.00)');
  });

  it('max-accuracy-drop relative: 1.2pt of 90% is a 1.333% drop', () => {
    const [fail] = evaluateGates(models, { maxAccuracyDrop: { kind: 'relative', value: 0.01 } });
    expect(fail!.passed).toBe(false);
    expect(fail!.unit).toBe('%');
    expect(fail!.measured.estimate).toBeCloseTo(1.3333333, 6);
    const [pass] = evaluateGates(models, { maxAccuracyDrop: { kind: 'relative', value: 0.015 } });
    expect(pass!.passed).toBe(true);
    expect(pass!.limit).toBe('1.5%');
  });

  it('min-speedup: 2.0x passes a 2x gate, fails 2.5x', () => {
    const [pass] = evaluateGates(models, { minSpeedup: 2 });
    expect(pass).toMatchObject({ gate: 'min-speedup', passed: true, batchSize: 1 });
    const [fail] = evaluateGates(models, { minSpeedup: 2.5 });
    expect(fail!.passed).toBe(false);
    expect(fail!.message).toBe('min-speedup: model-int8.onnx at batch 1 is 2.000x (95% CI 1.800 to 2.200x) (faster); limit 2.5x not reached');
  });

  it('max-latency-p99 applies to candidates (p99 of [0.5,0.55,0.6,0.5,0.52] = 0.598 ms: h = 0.99 * 4, 0.55 + 0.96 * 0.05)', () => {
    const [pass] = evaluateGates(models, { maxLatencyP99Ms: 0.6 });
    expect(pass).toMatchObject({ gate: 'max-latency-p99', model: 'model-int8.onnx', passed: true });
    expect(pass!.measured.estimate).toBeCloseTo(0.598, 12);
    const [fail] = evaluateGates(models, { maxLatencyP99Ms: 0.59 });
    expect(fail!.passed).toBe(false);
    // Without candidates the baseline is gated: p99 of [1,1.1,1.2,1,1.05] = 1.196 ms.
    const [only] = evaluateGates(models.slice(0, 1), { maxLatencyP99Ms: 1 });
    expect(only).toMatchObject({ model: 'model.onnx', passed: false });
    expect(only!.measured.estimate).toBeCloseTo(1.196, 12);
  });

  it('no gates requested: no results', () => {
    expect(evaluateGates(models, {})).toEqual([]);
  });
});

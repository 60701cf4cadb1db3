/**
 * The quantize report says when its fidelity check is too small for its agreement floor: with all n
 * held-out samples agreeing, the one-sided 95% bound is about 1 - 3/n (the rule of three), so fewer
 * than 3 / (1 - floor) samples (60 for 95%) cannot show the floor even when the guard says met.
 */
import { describe, expect, it } from 'vitest';
import type { FidelityReport } from '../../src/app/quantize.js';
import { fidelityRows, weakCheck } from '../../src/report/quantize-summary.js';

type Enabled = Extract<FidelityReport, { enabled: true }>;

function report(samples: number, kind: 'class-scores' | 'class-sequence' | 'embedding', budget: Partial<Enabled['budget']> = {}): Enabled {
  const output = {
    kind,
    kindWhy: 'test',
    judged: true,
    sqnrDb: 40,
    cosineSimilarity: 0.9999,
    top1Agreement: 1,
    met: true,
  } as unknown as Enabled['final']['outputs'][string];
  const measure = { outputs: { y: output }, worstSqnrDb: 40, met: true, failures: [] };
  return {
    enabled: true,
    decidedBy: 'fidelity',
    heldOut: { source: 'calibration-rest', samples, start: 64, end: 64 + samples },
    budget: { minSqnrDb: 20, minTop1Agreement: 0.95, ...budget },
    initial: measure,
    final: measure,
    met: true,
    floatNodes: [],
    sensitivity: [],
    steps: [],
    runs: 1,
  } as unknown as Enabled;
}

describe('weakCheck', () => {
  it('16 samples cannot show 95%: the bound they show and the samples that can; 60 can', () => {
    expect(weakCheck(report(16, 'class-sequence'))).toBe(
      'a weak check: 16 samples all agreeing only show agreement above about 81.3% (rule of three, one-sided 95%), not the 95% floor; 60+ held-out samples can (more --calibration-data, or --eval-data)',
    );
    expect(weakCheck(report(59, 'class-scores'))).toMatch(/^a weak check: 59 samples .* above about 94\.9%/);
    expect(weakCheck(report(60, 'class-scores'))).toBe('');
    // A 99% floor needs 300.
    expect(weakCheck(report(100, 'class-scores', { minTop1Agreement: 0.99 }))).toMatch(/300\+ held-out samples/);
    // The row under the budget carries it.
    expect(fidelityRows(report(16, 'class-scores'))[0]![1]).toMatch(/\na weak check: 16 samples/);
  });

  it('says nothing where the agreement floor does not decide: an embedding, a metric budget, no floor', () => {
    expect(weakCheck(report(8, 'embedding'))).toBe('');
    expect(weakCheck(report(8, 'class-scores', { outputsDecide: false }))).toBe('');
    expect(weakCheck(report(8, 'class-scores', { minTop1Agreement: 0 }))).toBe('');
  });
});

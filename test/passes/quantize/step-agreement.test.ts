/**
 * Per-step argmax agreement for sequence outputs [N, T, C] (issue 15: a CTC recognizer's
 * log-probabilities kept 25.8 dB SQNR while exact match dropped 5 points): hand-made tensors with
 * hand-counted flips, streaming in batches, and the shapes that have no steps.
 */
import { describe, expect, it } from 'vitest';
import { AgreementAccumulator, agreement, channelLayout, NEAR_TIE_NATS, stepAgreement } from '../../../src/metrics/agreement.js';
import { DEFAULT_KIND_BUDGET, judgeOutput } from '../../../src/metrics/output-kinds.js';

/** [N, T, C] row-major scores with a 1 at each step's class (0.1 elsewhere). */
function oneHot(classes: number, steps: number[][]): Float32Array {
  const out = new Float32Array(steps.length * steps[0]!.length * classes).fill(0.1);
  steps.forEach((line, n) => line.forEach((c, t) => (out[(n * line.length + t) * classes + c] = 1)));
  return out;
}

describe('stepAgreement ([N, T, C], argmax over the last axis)', () => {
  // N = 2, T = 3, C = 4: one of the 6 steps flips (sample 0, step 1: class 2 -> 1).
  const ref = oneHot(4, [
    [0, 2, 3],
    [1, 1, 0],
  ]);
  const cand = oneHot(4, [
    [0, 1, 3],
    [1, 1, 0],
  ]);

  it('counts matching steps over N x T', () => {
    expect(stepAgreement(ref, cand, [2, 3, 4])).toBeCloseTo(5 / 6, 12);
    expect(stepAgreement(ref, ref, [2, 3, 4])).toBe(1);
    // Every step of sample 1 flipped too: 2 of 6 left.
    const worse = oneHot(4, [
      [0, 1, 3],
      [2, 3, 1],
    ]);
    expect(stepAgreement(ref, worse, [2, 3, 4])).toBeCloseTo(2 / 6, 12);
  });

  it('a small error that flips a step lowers step agreement while SQNR stays high', () => {
    // Log-probability-like scores: step 0 of sample 0 is nearly tied (0.50 vs 0.49); a 0.02 shift flips it.
    const r = Float32Array.from([0.5, 0.49, -5, -5, /* t1 */ -5, 3, -5, -5, /* sample 1 */ 3, -5, -5, -5, -5, -5, 3, -5]);
    const c = Float32Array.from(r);
    c[1] = 0.51;
    const a = new AgreementAccumulator(null, channelLayout([2, 2, 4]));
    a.add(r, c);
    const m = a.result();
    expect(m.stepAgreement).toBeCloseTo(3 / 4, 12);
    expect(m.steps).toBe(4);
    expect(m.top1Agreement).toBeNull();
    expect(m.sqnrDb).toBeGreaterThan(40);
  });

  it('streams: two batches give the same numbers as one', () => {
    const acc = new AgreementAccumulator(null, channelLayout([1, 3, 4]));
    acc.add(ref.subarray(0, 12), cand.subarray(0, 12));
    acc.add(ref.subarray(12), cand.subarray(12));
    const m = acc.result();
    expect(m.steps).toBe(6);
    expect(m.stepAgreement).toBeCloseTo(5 / 6, 12);
  });

  it('only for rank 3 with T > 1 and C > 1; [N, C] keeps top-1 agreement instead', () => {
    expect(stepAgreement(ref, cand, [2, 12])).toBeNull(); // [N, C]
    expect(stepAgreement(ref.subarray(0, 8), cand.subarray(0, 8), [2, 1, 4])).toBeNull(); // T = 1
    expect(stepAgreement(ref.subarray(0, 6), cand.subarray(0, 6), [2, 3, 1])).toBeNull(); // C = 1
    expect(stepAgreement(ref, cand, [2, 3, 2, 2])).toBeNull(); // [N, C, H, W]: no class axis last
    const rows = agreement(ref, cand, 4); // as [6, 4] class scores
    expect(rows.top1Agreement).toBeCloseTo(5 / 6, 12);
    expect(rows.stepAgreement).toBeUndefined();
    expect(rows.steps).toBeUndefined();
  });
});

describe('sequence agreement beyond FP32 near-ties (reported beside sequence agreement)', () => {
  it('a line that differs only where the reference is a near-tie counts; a decisive flip does not; probabilities by their log-ratio', () => {
    // N = 3 lines, T = 2 steps, C = 3 log-probability-like scores. Line 0 identical; line 1 flips
    // step 0, where the reference's top two are 0.05 apart (< NEAR_TIE_NATS); line 2 flips step 1,
    // 2 apart (decisive).
    const ref = Float32Array.from([0, -0.05, -4, /**/ -4, 0, -4, /* 1 */ 0, -0.05, -4, /**/ -4, 0, -4, /* 2 */ 0, -0.05, -4, /**/ -4, 0, -2]);
    const cand = Float32Array.from([0, -0.05, -4, /**/ -4, 0, -4, /* 1 */ -0.06, 0, -4, /**/ -4, 0, -4, /* 2 */ 0, -0.05, -4, /**/ -4, -2, 0]);
    const a = agreement3(ref, cand, [3, 2, 3]);
    expect(a.sequenceAgreement).toBeCloseTo(1 / 3, 12);
    expect(a.sequenceAgreementBeyondTies).toBeCloseTo(2 / 3, 12);
    // The same steps as probabilities (softmax of each step): the gap is the log of the ratio, the same decisions.
    const softmax = (v: Float32Array): Float32Array => {
      const out = new Float32Array(v.length);
      for (let s = 0; s < v.length; s += 3) {
        const e = [0, 1, 2].map((k) => Math.exp(v[s + k]!));
        const z = e[0]! + e[1]! + e[2]!;
        e.forEach((x, k) => (out[s + k] = x / z));
      }
      return out;
    };
    const p = agreement3(softmax(ref), softmax(cand), [3, 2, 3]);
    expect(p.sequenceAgreementBeyondTies).toBeCloseTo(2 / 3, 12);
    expect(NEAR_TIE_NATS).toBe(0.1);
  });

  it('the class-sequence judgement names how many lines agree beyond the near-ties when it misses', () => {
    const base = {
      count: 1,
      rows: 0,
      top1Agreement: null,
      maxAbsError: 0,
      relativeL2: 0,
      cosineSimilarity: 1,
      sqnrDb: 40,
      thresholdAgreement: 1,
      unitInterval: false,
    };
    const a = { ...base, sequenceAgreement: 0.785, sequenceAgreementBeyondTies: 0.945, sequenceOddsAgreement: 0.9, stepAgreement: 0.9968, steps: 16000 };
    expect(judgeOutput('y', 'class-sequence', a, DEFAULT_KIND_BUDGET).failures).toEqual([
      "'y': odds-weighted sequence agreement 90.0% < 95.0% (samples whose argmax over the last axis matches FP32's at every step: 78.5%; per-step 99.68% of 16000; a differing sample counts FP32's odds of its path against its own, squared); 94.5% agree at every step where FP32's top two classes are 0.1 nats or more apart",
    ]);
    // Every flip decisive: nothing to add.
    expect(judgeOutput('y', 'class-sequence', { ...a, sequenceAgreementBeyondTies: 0.785 }, DEFAULT_KIND_BUDGET).failures[0]).toMatch(
      /against its own, squared\)$/,
    );
  });
});

function agreement3(ref: Float32Array, cand: Float32Array, dims: number[]) {
  const acc = new AgreementAccumulator(null, channelLayout(dims));
  acc.add(ref, cand);
  return acc.result();
}

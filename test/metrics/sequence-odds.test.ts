/**
 * Sequence agreement weighted by the reference's odds (what a class sequence is judged on): each
 * sample that differs counts the reference's probability of the candidate's arg-max path over its
 * own, computed here in float64 from a log-softmax written out, for log-probabilities, raw logits
 * (any offset per step), and probabilities; a near-tie flip costs little, a decisive one the whole
 * line; a flip onto a NaN score never counts as agreement.
 */
import { describe, expect, it } from 'vitest';
import { AgreementAccumulator, channelLayout, ODDS_SHARPNESS } from '../../src/metrics/agreement.js';

/**
 * Float64 reference: mean over samples of prod over steps of (p_ref(candidate's class) / p_ref(reference's
 * class)) to the power ODDS_SHARPNESS (the reference's probabilities at temperature 1 / ODDS_SHARPNESS).
 */
function oddsReference(ref: number[], cand: number[], dims: number[]): number {
  const [n, t, c] = dims as [number, number, number];
  const argmax = (v: number[], s: number): number => {
    let b = 0;
    for (let k = 1; k < c; k++) if (v[s + k]! > v[s + b]!) b = k;
    return b;
  };
  let total = 0;
  for (let i = 0; i < n; i++) {
    let ratio = 1;
    for (let j = 0; j < t; j++) {
      const s = (i * t + j) * c;
      let z = 0;
      for (let k = 0; k < c; k++) z += Math.exp(ref[s + k]!);
      const p = (k: number): number => Math.exp(ref[s + k]!) / z;
      ratio *= (p(argmax(cand, s)) / p(argmax(ref, s))) ** ODDS_SHARPNESS;
    }
    total += ratio;
  }
  return total / n;
}

function measured(ref: number[], cand: number[], dims: number[]) {
  const acc = new AgreementAccumulator(null, channelLayout(dims));
  acc.add(Float32Array.from(ref), Float32Array.from(cand));
  return acc.result();
}

// N = 4 lines, T = 2 steps, C = 3 classes (log-probability-like). Line 0 identical; line 1 flips
// a near-tie (0.05 nats); line 2 flips a decided step (2 nats); line 3 flips both of its steps (0.3 + 1).
const dims = [4, 2, 3];
const ref = [...[0, -3, -4, -4, 0, -4], ...[0, -0.05, -4, -4, 0, -4], ...[0, -3, -4, -4, 0, -2], ...[-0.3, 0, -5, -1, -6, 0]];
const cand = [...[0, -3, -4, -4, 0, -4], ...[-0.1, 0, -4, -4, 0, -4], ...[0, -3, -4, -4, -1, 0], ...[0, -1, -5, 0, -6, -1]];

describe('sequenceOddsAgreement', () => {
  it('equals the float64 odds of the candidate path under the reference, for log-probs, offset logits and probabilities', () => {
    const want = oddsReference(ref, cand, dims);
    // By hand, with ODDS_SHARPNESS = 2: (1 + e^-0.1 + e^-4 + e^-2.6) / 4
    expect(ODDS_SHARPNESS).toBe(2);
    expect(want).toBeCloseTo((1 + Math.exp(-0.1) + Math.exp(-4) + Math.exp(-2.6)) / 4, 12);
    const a = measured(ref, cand, dims);
    expect(a.sequenceAgreement).toBeCloseTo(1 / 4, 12);
    expect(a.sequenceOddsAgreement).toBeCloseTo(want, 6);
    // Raw logits: a different offset at every step changes nothing (the difference of two logits is that of their log-probs).
    const offset = ref.map((v, i) => v + 3 * Math.floor(i / 3) - 5);
    expect(measured(offset, cand, dims).sequenceOddsAgreement).toBeCloseTo(want, 6);
    // Probabilities (softmax of each step): compared through their log.
    const probs = ref.map((_, i) => {
      const s = i - (i % 3);
      const z = Math.exp(ref[s]!) + Math.exp(ref[s + 1]!) + Math.exp(ref[s + 2]!);
      return Math.exp(ref[i]!) / z;
    });
    expect(measured(probs, cand, dims).sequenceOddsAgreement).toBeCloseTo(want, 5);
  });

  it('a near-tie flip keeps almost the whole line, a decisive flip loses it; identical outputs are exactly 1', () => {
    const nearTie = measured(ref.slice(0, 12), cand.slice(0, 12), [2, 2, 3]);
    expect(nearTie.sequenceAgreement).toBe(0.5);
    expect(nearTie.sequenceOddsAgreement).toBeGreaterThan(0.95);
    const decisive = measured(ref.slice(12, 18), cand.slice(12, 18), [1, 2, 3]);
    expect(decisive.sequenceOddsAgreement).toBeCloseTo(Math.exp(-4), 6);
    expect(measured(ref, ref, dims).sequenceOddsAgreement).toBe(1);
  });

  it('a probability of 0 for the candidate class counts the line as lost; a flip onto a NaN reference score is not agreement', () => {
    const p = [1, 0, 0, 0, 1, 0];
    expect(measured(p, [0, 1, 0, 0, 1, 0], [1, 2, 3]).sequenceOddsAgreement).toBe(0);
    // A flip onto a class whose reference score is NaN: no odds to count, and the NaN shows.
    const nan = measured([0, Number.NaN, -1, 0, -1, -2], [0, 1, -1, 0, -1, -2], [1, 2, 3]);
    expect(nan.sequenceOddsAgreement).toBeNaN();
  });
});

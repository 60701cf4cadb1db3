import { describe, expect, it } from 'vitest';
import {
  agreement,
  AgreementAccumulator,
  channelLayout,
  bootstrapMedianCI,
  erfc,
  mcnemar,
  mcnemarFromCounts,
  pairedSpeedup,
  cannotBeFaster,
  speedupVerdict,
  percentile,
  summarize,
  topKCorrect,
} from '../../src/metrics/index.js';
import { formatWorstChannel } from '../../src/report/format.js';

// Reference numbers below come from numpy 1.x (np.percentile default 'linear', std ddof=1) and
// Python's math.comb / math.erfc; the script is quoted in the comments next to each block.
describe('summary statistics', () => {
  const x = [12.1, 10.4, 11.0, 13.7, 10.9, 25.3, 11.2, 10.8, 11.5, 12.0];

  it('matches numpy mean, std(ddof=1), percentiles and cv', () => {
    const s = summarize(x);
    expect(s.count).toBe(10);
    expect(s.mean).toBeCloseTo(12.89, 12); // x.mean()
    expect(s.std).toBeCloseTo(4.459309861900656, 12); // x.std(ddof=1)
    expect(s.min).toBe(10.4);
    expect(s.max).toBe(25.3);
    expect(s.p25).toBeCloseTo(10.925, 12); // np.percentile(x, 25)
    expect(s.p50).toBeCloseTo(11.35, 12); // np.percentile(x, 50)
    expect(s.p75).toBeCloseTo(12.075, 12); // np.percentile(x, 75)
    expect(s.p90).toBeCloseTo(14.86, 12); // np.percentile(x, 90)
    expect(s.p95).toBeCloseTo(20.08, 12); // np.percentile(x, 95)
    expect(s.p99).toBeCloseTo(24.256, 12); // np.percentile(x, 99)
    expect(s.cv).toBeCloseTo(0.3459511141893449, 12);
  });

  it('interpolates linearly between ranks (hand: [1,2,3,4] p25 = 1.75)', () => {
    expect(percentile([4, 1, 3, 2], 25)).toBe(1.75);
    expect(percentile([4, 1, 3, 2], 0)).toBe(1);
    expect(percentile([4, 1, 3, 2], 100)).toBe(4);
    expect(percentile([7], 99)).toBe(7);
  });
});

describe('bootstrap interval of the median', () => {
  it('matches the exact bootstrap distribution for 1..11', () => {
    // For odd n the bootstrap median M* satisfies P(M* <= x_(j)) = P(Bin(n, j/n) >= (n+1)/2).
    // n = 11: P(M* <= 2) = 0.0072, P(M* <= 3) = 0.0512 -> 2.5% quantile is 3;
    //         P(M* <= 8) = 0.9488, P(M* <= 9) = 0.9928 -> 97.5% quantile is 9.
    const values = Array.from({ length: 11 }, (_, i) => i + 1);
    const ci = bootstrapMedianCI(values, { resamples: 20000, seed: 7 });
    expect(ci.estimate).toBe(6);
    expect(ci.low).toBe(3);
    expect(ci.high).toBe(9);
  });

  it('is deterministic for a seed and collapses for constant data', () => {
    const values = [1.1, 0.9, 1.3, 1.0, 1.2, 0.95, 1.05];
    expect(bootstrapMedianCI(values, { seed: 3 })).toEqual(bootstrapMedianCI(values, { seed: 3 }));
    expect(bootstrapMedianCI([2, 2, 2, 2])).toEqual({ estimate: 2, low: 2, high: 2 });
  });

  it('paired speed-up: ratios baseline/candidate, verdict from the interval', () => {
    const base = [10, 11, 10, 12, 10, 11, 10, 10, 11, 10, 12, 10];
    const slow = base.map((t) => t * 2); // every ratio is exactly 0.5
    const s = pairedSpeedup(base, slow);
    expect(s).toEqual({ estimate: 0.5, low: 0.5, high: 0.5, verdict: 'slower' });
    const fast = pairedSpeedup(slow, base);
    expect(fast.estimate).toBe(2);
    expect(fast.verdict).toBe('faster');
    // Ratios straddling 1 -> no significant difference.
    const mixed = pairedSpeedup([1, 1, 1, 1, 1, 1], [0.9, 1.1, 0.95, 1.05, 1.0, 0.92]);
    expect(mixed.low).toBeLessThan(1);
    expect(mixed.high).toBeGreaterThan(1);
    expect(mixed.verdict).toBe('no significant difference');
  });

  it('groups one rotation of rounds so a slot effect cancels (hand: alternating 1.0/1.1 -> ratio 1)', () => {
    // Round r runs A first when r is even and B first when odd; the first slot is 10% slower.
    const a = Array.from({ length: 40 }, (_, r) => (r % 2 === 0 ? 1.1 : 1.0));
    const b = Array.from({ length: 40 }, (_, r) => (r % 2 === 0 ? 1.0 : 1.1));
    expect(pairedSpeedup(a, b, { groupSize: 2 })).toEqual({ estimate: 1, low: 1, high: 1, verdict: 'no significant difference' });
    // Per round the ratios are 1.1 and 1/1.1: a bimodal mix whose median sits between the modes.
    const ungrouped = pairedSpeedup(a, b);
    expect(ungrouped.estimate).toBeCloseTo((1.1 + 1 / 1.1) / 2, 12);
  });

  it('verdict: interval within +-2% that excludes 1 is within noise', () => {
    expect(speedupVerdict({ estimate: 1.01, low: 1.005, high: 1.015 })).toBe('within noise');
    expect(speedupVerdict({ estimate: 1.02, low: 1.005, high: 1.03 })).toBe('faster');
    expect(speedupVerdict({ estimate: 0.99, low: 0.985, high: 0.995 })).toBe('within noise');
    expect(speedupVerdict({ estimate: 0.5, low: 0.45, high: 0.55 })).toBe('slower');
    expect(speedupVerdict({ estimate: 1, low: 0.9, high: 1.1 })).toBe('no significant difference');
  });

  it('cannotBeFaster: an interval topped at or under 1.02 never has the verdict faster; one above it can', () => {
    for (let low = 0.5; low <= 1.02; low += 0.005)
      for (let high = low; high <= 1.02 + 1e-12; high += 0.005) {
        const ci = { estimate: (low + high) / 2, low, high };
        expect(cannotBeFaster(ci)).toBe(true);
        expect(speedupVerdict(ci)).not.toBe('faster');
      }
    expect(cannotBeFaster({ estimate: 1.02, low: 1.005, high: 1.03 })).toBe(false);
    expect(speedupVerdict({ estimate: 1.02, low: 1.005, high: 1.03 })).toBe('faster');
  });
});

describe('McNemar', () => {
  it('exact binomial for few discordant pairs', () => {
    // 2 * sum_{k<=3} C(13,k) / 2^13 = 2 * 378 / 8192 = 0.09228515625
    const r = mcnemarFromCounts(3, 10, 200);
    expect(r.method).toBe('exact-binomial');
    expect(r.pValue).toBeCloseTo(0.09228515625, 12);
    expect(r.difference.estimate).toBeCloseTo(0.035, 12);
    // Agresti-Min interval: cells + 1/2, n + 2.
    expect(r.difference.low).toBeCloseTo(-0.0013351643063042457, 12);
    expect(r.difference.high).toBeCloseTo(0.07064209499937354, 12);
    expect(mcnemarFromCounts(0, 5, 100).pValue).toBeCloseTo(0.0625, 12); // 2 / 2^5
  });

  it('chi-square with continuity correction for many discordant pairs', () => {
    // (|20-40|-1)^2/60 = 6.016666..., p = erfc(sqrt(s/2)) = 0.01417138825401233
    const r = mcnemarFromCounts(20, 40, 500);
    expect(r.method).toBe('chi-square-continuity');
    expect(r.statistic).toBeCloseTo(6.016666666666667, 12);
    expect(r.pValue).toBeCloseTo(0.01417138825401233, 6);
    expect(r.difference.estimate).toBeCloseTo(0.04, 12);
    expect(r.difference.low).toBeCloseTo(0.009546812195620695, 12);
    expect(r.difference.high).toBeCloseTo(0.07013446270477772, 12);
  });

  it('identical predictions: difference exactly 0, p = 1, interval +-0.0039 on 500', () => {
    const correct = Array.from({ length: 500 }, (_, i) => (i % 7 === 0 ? 0 : 1));
    const r = mcnemar(correct, correct);
    expect(r.difference.estimate).toBe(0);
    expect(r.pValue).toBe(1);
    expect(r.difference.low).toBeCloseTo(-0.0039043107261754065, 12);
    expect(r.difference.high).toBeCloseTo(0.0039043107261754065, 12);
  });

  it('counts discordant pairs from per-sample flags', () => {
    const r = mcnemar([1, 1, 0, 0, 1, true], [1, 0, 1, 1, 0, true]);
    expect(r.baselineOnly).toBe(2);
    expect(r.candidateOnly).toBe(2);
  });

  it('erfc agrees with math.erfc', () => {
    expect(erfc(0)).toBeCloseTo(1, 7);
    expect(erfc(1)).toBeCloseTo(0.15729920705028513, 7);
    expect(erfc(-0.5)).toBeCloseTo(1.5204998778130465, 7);
  });
});

describe('accuracy and agreement', () => {
  it('top-k with ties broken toward the lower index', () => {
    const scores = [
      0.1,
      0.7,
      0.2, // label 1: top-1 right
      0.5,
      0.3,
      0.2, // label 1: top-1 wrong, top-2 right
      0.2,
      0.3,
      0.5, // label 0: wrong even in top-2
      0.4,
      0.4,
      0.2, // label 1: tie with class 0 -> rank 1
    ];
    const labels = [1, 1, 0, 1];
    expect(Array.from(topKCorrect(scores, 3, labels, 1))).toEqual([1, 0, 0, 0]);
    expect(Array.from(topKCorrect(scores, 3, labels, 2))).toEqual([1, 1, 0, 1]);
  });

  it('matches numpy for max abs error, relative L2, cosine, SQNR', () => {
    const r = [1.0, 2.0, 3.0, 0.5, -1.0, 0.2];
    const c = [1.1, 2.0, 2.9, 0.6, -1.2, 0.7];
    const m = agreement(r, c, 3);
    expect(m.maxAbsError).toBeCloseTo(0.5, 12);
    expect(m.relativeL2).toBeCloseTo(0.14466758993013462, 12);
    expect(m.cosineSimilarity).toBeCloseTo(0.9899390666870135, 12);
    expect(m.sqnrDb).toBeCloseTo(16.792575070924144, 10);
    expect(m.top1Agreement).toBe(0.5);
    // Streaming in two batches gives the same numbers.
    const acc = new AgreementAccumulator(3);
    acc.add(r.slice(0, 3), c.slice(0, 3));
    acc.add(r.slice(3), c.slice(3));
    expect(acc.result()).toEqual(m);
  });

  it('worst channel along axis 1 of an [N, C, L] output, streamed per sample (hand-computed)', () => {
    // N=2, C=2, L=2. Channel 0: ref [10, 20 | 30, 40], errors 1 each -> 10 log10(3000 / 4) = 28.75 dB;
    // channel 1: ref [1, 1 | 1, 1], errors 0.5 each -> 10 log10(4 / 1) = 6.02 dB.
    const ref = [10, 20, 1, 1, 30, 40, 1, 1];
    const cand = [11, 21, 1.5, 1.5, 31, 41, 1.5, 1.5];
    expect(channelLayout([2, 2, 2])).toEqual({ channels: 2, inner: 2, rank: 3 });
    expect(channelLayout([2, 10])).toBeUndefined();
    const acc = new AgreementAccumulator(null, channelLayout([1, 2, 2]));
    acc.add(ref.slice(0, 4), cand.slice(0, 4));
    acc.add(ref.slice(4), cand.slice(4));
    const m = acc.result();
    expect(m.worstChannel!.index).toBe(1);
    expect(m.worstChannel!.sqnrDb).toBeCloseTo(10 * Math.log10(4), 10);
    expect(m.sqnrDb).toBeCloseTo(10 * Math.log10(3004 / 5), 10); // overall: 27.8 dB hides channel 1
    expect(formatWorstChannel(m)).toBe(', worst channel 1: 6.0 dB');
    expect(formatWorstChannel({ sqnrDb: 30, worstChannel: { index: 0, sqnrDb: 25 } })).toBe('');
    expect(agreement(ref, cand).worstChannel).toBeUndefined();
  });

  it('identical outputs: zero error and infinite SQNR', () => {
    const m = agreement([1, -2, 3], [1, -2, 3]);
    expect(m).toMatchObject({ maxAbsError: 0, relativeL2: 0, cosineSimilarity: 1, sqnrDb: Infinity, top1Agreement: null });
  });
});

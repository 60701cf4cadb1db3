/**
 * Judging an output by what it means (issue 30): the embedding statistics against a float64
 * reference computed here (cosine per vector, mask-pooled cosine, nearest neighbours), and each
 * kind's verdict where the old one-size budget (SQNR + top-1 of the argmax) got it wrong.
 */
import { describe, expect, it } from 'vitest';
import {
  AgreementAccumulator,
  DEFAULT_KIND_BUDGET,
  describeKindBudget,
  EmbeddingAccumulator,
  judgeOutput,
  nearestNeighbours,
  parseOutputKind,
} from '../../src/metrics/index.js';
import { nearestK, neighbourRecall } from '../../src/metrics/embedding.js';
import { describeBudget } from '../../src/app/quantize-fidelity.js';

/** A seeded stream in [-1, 1). */
function stream(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 31 - 1;
  };
}

const cos64 = (a: number[], b: number[]): number => {
  let d = 0;
  let x = 0;
  let y = 0;
  for (let i = 0; i < a.length; i++) {
    d += a[i]! * b[i]!;
    x += a[i]! * a[i]!;
    y += b[i]! * b[i]!;
  }
  return d / Math.sqrt(x * y);
};

describe('embedding agreement', () => {
  const r = stream(7);
  const [N, S, D] = [12, 5, 8];
  const ref = Float32Array.from({ length: N * S * D }, () => r());
  const cand = ref.map((v) => v + 0.05 * r());
  const mask = Float32Array.from({ length: N * S }, (_, i) => (i % S < 2 + (Math.floor(i / S) % 3) ? 1 : 0));

  it('cosine per vector and of the mask-pooled vectors equal a float64 reference; masked vectors are skipped', () => {
    const acc = new EmbeddingAccumulator(D, S);
    acc.add(ref.subarray(0, 5 * S * D), cand.subarray(0, 5 * S * D), mask.subarray(0, 5 * S));
    acc.add(ref.subarray(5 * S * D), cand.subarray(5 * S * D), mask.subarray(5 * S));
    const got = acc.result();
    const vectorCos: number[] = [];
    const pooledCos: number[] = [];
    for (let n = 0; n < N; n++) {
      const pr = new Array<number>(D).fill(0);
      const pc = new Array<number>(D).fill(0);
      for (let s = 0; s < S; s++) {
        if (mask[n * S + s] === 0) continue;
        const at = (n * S + s) * D;
        const a = Array.from(ref.subarray(at, at + D));
        const b = Array.from(cand.subarray(at, at + D));
        vectorCos.push(cos64(a, b));
        for (let k = 0; k < D; k++) {
          pr[k]! += a[k]!;
          pc[k]! += b[k]!;
        }
      }
      pooledCos.push(cos64(pr, pc));
    }
    const mean = (xs: number[]): number => xs.reduce((p, q) => p + q, 0) / xs.length;
    expect(got.vectors).toBe(vectorCos.length);
    expect(got.vectorCosine.mean).toBeCloseTo(mean(vectorCos), 12);
    expect(got.vectorCosine.min).toBeCloseTo(Math.min(...vectorCos), 12);
    expect(got.pooledCosine!.mean).toBeCloseTo(mean(pooledCos), 12);
    expect(got.pooledCosine!.masked).toBe(true);
    expect(got.samples).toBe(N);
  });

  it('nearest neighbours: the same under small noise; a swap of two samples moves exactly their neighbours', () => {
    const rows = [
      [1, 0, 0],
      [0.9, 0.1, 0],
      [0, 1, 0],
      [0, 0.95, 0.1],
      [0, 0, 1],
    ].map((x) => Float64Array.from(x));
    expect(Array.from(nearestNeighbours(rows))).toEqual([1, 0, 3, 2, 3]);
    const acc = new EmbeddingAccumulator(3, 1);
    const flat = (xs: Float64Array[]): Float32Array => Float32Array.from(xs.flatMap((x) => Array.from(x)));
    // The candidate moves sample 4 next to sample 0: sample 0's and 4's nearest change, and 1 keeps 0.
    const moved = rows.map((x, i) => (i === 4 ? Float64Array.from([1, 0, 0.05]) : x));
    acc.add(flat(rows), flat(moved));
    const res = acc.result();
    const refNn = nearestNeighbours(rows);
    const candNn = nearestNeighbours(moved);
    const same = refNn.filter((v, i) => v === candNn[i]).length;
    expect(res.neighbourAgreement).toBeCloseTo(same / rows.length, 12);
    expect(res.neighbourAgreement).toBeLessThan(1);
  });
});

describe('judging by kind', () => {
  it('an embedding whose argmax flips often but whose vectors keep their direction: met as an embedding, missed as class scores', () => {
    // 32 samples of 96 near-equal features (a pooled feature vector): small noise flips the argmax.
    const r = stream(3);
    const [N, D] = [32, 96];
    const ref = Float32Array.from({ length: N * D }, (_, i) => 1 + 0.01 * r() + (i % D) * 1e-4 + Math.floor(i / D) * 0.02 * ((i % 7) - 3));
    const cand = ref.map((v) => v + 0.004 * r());
    const a = new AgreementAccumulator(D);
    a.add(ref, cand);
    const e = new EmbeddingAccumulator(D, 1);
    e.add(ref, cand);
    const metrics = { ...a.result(), embedding: e.result() };
    expect(metrics.top1Agreement!).toBeLessThan(0.95);
    const asScores = judgeOutput('emb', 'class-scores', metrics, DEFAULT_KIND_BUDGET);
    const asEmbedding = judgeOutput('emb', 'embedding', metrics, DEFAULT_KIND_BUDGET);
    expect(asScores.met).toBe(false);
    expect(asScores.failures.join()).toMatch(/'emb': top-1 agreement/);
    expect(asEmbedding.met).toBe(true);
    expect(asEmbedding.judgedOn).toMatch(/^mean cosine (0\.99\d\d|1\.0000)/);
    expect(asEmbedding.judgedOn).toMatch(/nearest-neighbour agreement (9\d|100)\.\d% of 32 samples/);
  });

  it('an embedding that lost its direction misses: cosine and nearest neighbours', () => {
    const r = stream(5);
    const [N, D] = [20, 16];
    const ref = Float32Array.from({ length: N * D }, () => r());
    const cand = ref.map((v) => v + 0.8 * r());
    const a = new AgreementAccumulator(null);
    a.add(ref, cand);
    const e = new EmbeddingAccumulator(D, 1);
    e.add(ref, cand);
    const j = judgeOutput('emb', 'embedding', { ...a.result(), embedding: e.result() }, DEFAULT_KIND_BUDGET);
    expect(j.met).toBe(false);
    expect(j.failures[0]).toMatch(/'emb': mean cosine 0\.\d+ < 0\.99/);
  });

  it('a probability: decisions at 0.5 and the largest error; a state is not judged', () => {
    const ref = Float32Array.from([0.1, 0.9, 0.45, 0.7, 0.2, 0.95, 0.3, 0.8, 0.05, 0.6]);
    const close = ref.map((v) => v + 0.02);
    const flipped = Float32Array.from(ref, (v, i) => (i < 2 ? 1 - v : v));
    const measure = (c: Float32Array) => {
      const a = new AgreementAccumulator(null);
      a.add(ref, c);
      return a.result();
    };
    const ok = judgeOutput('p', 'probability', measure(close), DEFAULT_KIND_BUDGET);
    expect(ok.met).toBe(true);
    expect(ok.judgedOn).toMatch(/decision agreement \(at 0\.5\) 100\.0%/);
    const bad = judgeOutput('p', 'probability', measure(flipped), DEFAULT_KIND_BUDGET);
    expect(bad.met).toBe(false);
    expect(bad.failures.join(';')).toMatch(/decision agreement \(at 0\.5\) 80\.0% < 95\.0%.*largest error 0\.8 > 0\.1/);
    expect(judgeOutput('h', 'state', measure(flipped), DEFAULT_KIND_BUDGET).met).toBe(true);
  });

  it('a dense map of probabilities is also judged thresholded; aliases parse', () => {
    const ref = Float32Array.from({ length: 400 }, (_, i) => (i % 20) / 20);
    const cand = ref.map((v, i) => (i % 25 === 0 ? 1 - v : v));
    const a = new AgreementAccumulator(null);
    a.add(ref, cand);
    const j = judgeOutput('mask', 'dense-map', a.result(), DEFAULT_KIND_BUDGET);
    expect(j.failures.some((f) => /thresholded agreement/.test(f))).toBe(true);
    expect(parseOutputKind('hidden-state')).toBe('embedding');
    expect(parseOutputKind('Class-Scores')).toBe('class-scores');
    expect(parseOutputKind('boxes')).toBeUndefined();
  });
});

/** Agreement of 8 values with no class axis, close to FP32 (each test changes what it is about). */
const measured = {
  count: 8,
  rows: 0,
  top1Agreement: null,
  maxAbsError: 0.01,
  relativeL2: 0.01,
  cosineSimilarity: 0.9999,
  sqnrDb: 40,
  thresholdAgreement: 1,
  unitInterval: false,
};

describe('every kind in words, and the rest of the verdicts', () => {
  const base = measured;

  it("describeKindBudget names each kind's floors", () => {
    const b = DEFAULT_KIND_BUDGET;
    expect(describeKindBudget('class-scores', b)).toBe('SQNR >= 20 dB, top-1 agreement >= 95%');
    expect(describeKindBudget('class-sequence', b)).toBe('SQNR >= 20 dB, odds-weighted sequence agreement >= 95%');
    expect(describeKindBudget('embedding', b)).toBe('mean cosine >= 0.99, nearest-neighbour agreement >= 80%');
    expect(describeKindBudget('dense-map', b)).toBe('SQNR >= 20 dB (probabilities: >= 99% thresholded agreement)');
    expect(describeKindBudget('probability', b)).toBe('decision agreement >= 95%, largest error <= 0.1');
    expect(describeKindBudget('state', b)).toBe('not judged');
  });

  it('the budget line of a model whose judged outputs are all class sequences names sequence agreement', () => {
    const floors = { minSqnrDb: 20, minTop1Agreement: 0.95 };
    expect(describeBudget(floors, { y: 'class-sequence' })).toBe('SQNR >= 20 dB, odds-weighted sequence agreement >= 95%');
    expect(describeBudget(floors, { y: 'class-sequence', logits: 'class-scores' })).toBe('SQNR >= 20 dB, top-1 agreement >= 95%');
    expect(describeBudget(floors)).toBe('SQNR >= 20 dB, top-1 agreement >= 95%');
  });

  it('a class sequence misses on its argmax paths and says per-step agreement; a dense map outside [0, 1] is SQNR alone', () => {
    const seq = judgeOutput(
      'log_probs',
      'class-sequence',
      { ...base, sequenceAgreement: 0.5, stepAgreement: 0.9, steps: 80, sequenceOddsAgreement: 0.6 },
      DEFAULT_KIND_BUDGET,
    );
    expect(seq.met).toBe(false);
    expect(seq.failures).toEqual([
      "'log_probs': odds-weighted sequence agreement 60.0% < 95.0% (samples whose argmax over the last axis matches FP32's at every step: 50.0%; per-step 90.00% of 80; a differing sample counts FP32's odds of its path against its own, squared)",
    ]);
    expect(seq.short).toBe('SQNR 40.0 dB, seq 50.0%, odds 60.0%');
    // Differing only where FP32 hardly decides: the odds keep it within the budget, the plain count is reported.
    const ties = judgeOutput(
      'log_probs',
      'class-sequence',
      { ...base, sequenceAgreement: 0.785, stepAgreement: 0.997, steps: 80, sequenceOddsAgreement: 0.986 },
      DEFAULT_KIND_BUDGET,
    );
    expect(ties.met).toBe(true);
    expect(ties.judgedOn).toBe('SQNR 40.0 dB, sequence agreement 78.5%, odds-weighted sequence agreement 98.6%');
    const map = judgeOutput('depth', 'dense-map', { ...base, sqnrDb: 12 }, DEFAULT_KIND_BUDGET);
    expect(map.failures).toEqual(["'depth': SQNR 12.0 dB < 20 dB"]);
    expect(map.judgedOn).toBe('SQNR 12.0 dB');
  });

  it('a sequence embedding is judged on its pooled vectors; nearest neighbours of few samples are reported, not judged', () => {
    const embedding = {
      dim: 4,
      vectors: 40,
      vectorCosine: { mean: 0.985, min: 0.9 },
      pooledCosine: { mean: 0.995, min: 0.99, masked: true },
      samples: 8,
      neighbourAgreement: 0.5,
    };
    const j = judgeOutput('last_hidden_state', 'embedding', { ...base, embedding }, DEFAULT_KIND_BUDGET);
    expect(j.met).toBe(true);
    expect(j.judgedOn).toBe(
      'mean cosine of the mask-pooled vectors 0.9950, per vector 0.9850, nearest-neighbour agreement 50.0% of 8 samples (not judged below 16 samples), SQNR 40.0 dB (not judged)',
    );
  });

  it('neighbourRecall: the reference neighbour kept exactly (k = 1) or among the k nearest, as nearestK ranks them', () => {
    const rows = [
      [0, 0],
      [1, 0],
      [3, 0],
      [3.5, 0],
      [10, 0],
    ].map((r) => Float64Array.from(r));
    expect(nearestK(rows, 2)).toEqual([
      [1, 2],
      [0, 2],
      [3, 1],
      [2, 1],
      [3, 2],
    ]);
    // The candidate moves sample 1 to 2.6: 1's nearest becomes 2 (0 is its third), 2's becomes 1 (3 its second).
    const moved = rows.map((r, i) => (i === 1 ? Float64Array.from([2.6, 0]) : r));
    expect(neighbourRecall(rows, rows, 1)).toBe(1);
    expect(neighbourRecall(rows, moved, 1)).toBe(3 / 5);
    expect(neighbourRecall(rows, moved, 2)).toBe(4 / 5);
    expect(neighbourRecall(rows, moved, 3)).toBe(1);
  });
});

describe('verdicts on the edges', () => {
  const base = { ...measured, cosineSimilarity: 0.995, sqnrDb: Infinity, unitInterval: true };

  it('class scores without a class axis: SQNR alone (identical: inf dB); an embedding measured without its vectors falls back to the overall cosine', () => {
    const scores = judgeOutput('y', 'class-scores', base, DEFAULT_KIND_BUDGET);
    expect([scores.met, scores.judgedOn, scores.short]).toEqual([true, 'SQNR inf dB', 'SQNR inf dB']);
    const e = judgeOutput('e', 'embedding', { ...base, cosineSimilarity: 0.98 }, DEFAULT_KIND_BUDGET);
    expect(e.failures).toEqual(["'e': mean cosine 0.9800 < 0.99"]);
    expect(e.short).toBe('cos 0.9800');
  });

  it('a probability map in [0, 1] within 99% is met; a probability off by more than 0.1 misses on its error alone', () => {
    const map = judgeOutput('mask', 'dense-map', { ...base, sqnrDb: 30, thresholdAgreement: 0.995 }, DEFAULT_KIND_BUDGET);
    expect([map.met, map.short]).toEqual([true, 'SQNR 30.0 dB, thr 99.5%']);
    const p = judgeOutput('p', 'probability', { ...base, maxAbsError: 0.25 }, DEFAULT_KIND_BUDGET);
    expect(p.failures).toEqual(["'p': largest error 0.25 > 0.1"]);
    expect(['map', 'values', 'logits', 'features', 'recurrent-state', 'sequence', 'classes', 'probabilities'].map(parseOutputKind)).toEqual([
      'dense-map',
      'dense-map',
      'class-scores',
      'embedding',
      'state',
      'class-sequence',
      'class-scores',
      'class-scores',
    ]);
  });
});

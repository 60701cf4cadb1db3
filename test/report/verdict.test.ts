// The one-line verdicts and the noise warning (report/verdict.ts) on hand-made results with known
// numbers: speed-up phrases both ways round, size ratios, the paired accuracy difference, and each
// of the three noise rules (cv over 20%, an interval wider than ±10%, "faster" with a worse p99).
import { describe, expect, it } from 'vitest';
import type { OptimizeResult } from '../../src/app/optimize.js';
import type { PruneWorkflowResult } from '../../src/app/prune.js';
import type { QuantizeResult } from '../../src/app/quantize.js';
import type { SpeedCheck } from '../../src/app/speed-check.js';
import {
  NOISE_CV_LIMIT,
  benchmarkNoise,
  benchmarkVerdicts,
  optimizeNoise,
  optimizeVerdict,
  pruneVerdict,
  quantizeVerdict,
  sizePhrase,
  speedCheckNoise,
  speedPhrase,
} from '../../src/report/verdict.js';
import { latencyPoint, sampleResult } from '../benchmark/sample-result.js';

describe('phrases', () => {
  it('says faster or slower with the interval read the same way round', () => {
    expect(speedPhrase({ estimate: 1.62, low: 1.52, high: 1.68, verdict: 'faster' })).toBe('1.62x faster [1.52, 1.68]');
    // 0.8x = 1.25x slower; the interval [0.75, 0.85] inverts to [1/0.85, 1/0.75] = [1.18, 1.33].
    expect(speedPhrase({ estimate: 0.8, low: 0.75, high: 0.85, verdict: 'slower' })).toBe('1.25x slower [1.18, 1.33]');
    expect(speedPhrase({ estimate: 0.95, low: 0.9, high: 1.13, verdict: 'no significant difference' })).toBe('no clear speed difference (0.95x [0.90, 1.13])');
    expect(speedPhrase({ estimate: 1.01, low: 1.005, high: 1.015, verdict: 'within noise' })).toBe('same speed (1.01x [1.00, 1.01])');
  });
  it('gives sizes as a ratio, "same size" within 5%', () => {
    expect(sizePhrase(445 * 1024, 128 * 1024)).toBe('3.48x smaller');
    expect(sizePhrase(100, 120)).toBe('1.20x larger');
    expect(sizePhrase(100, 98)).toBe('same size');
    expect(sizePhrase(412, 246, ' (gzip)')).toBe('1.67x smaller (gzip)');
    expect(sizePhrase(0, 10)).toBe('');
  });
});

describe('benchmark', () => {
  it('one verdict per candidate: speed-up, accuracy difference with its significance, size', () => {
    // McNemar p = 0.18 (b=10, c=4 of 500): not significant; 400000 / 110000 = 3.64.
    expect(benchmarkVerdicts(sampleResult())).toEqual(['model-int8.onnx: 2.00x faster [1.80, 2.20], accuracy -1.20 pt (n.s.), 3.64x smaller']);
    const result = sampleResult();
    result.settings.batchSizes = [1, 8];
    result.models[1]!.latency.push(latencyPoint([2, 2.1, 2.2, 2, 2], 8, { estimate: 0.9, low: 0.85, high: 0.95, verdict: 'slower' }));
    delete result.models[1]!.accuracy;
    delete result.models[0]!.accuracy;
    expect(benchmarkVerdicts(result)).toEqual([
      'model-int8.onnx: 2.00x faster [1.80, 2.20] at batch 1, 1.11x slower [1.05, 1.18] at batch 8, top-1 agreement 97.00%, 3.64x smaller',
    ]);
  });

  it('no warning on a steady run; each noise rule on its own names what it saw and what to do', () => {
    expect(benchmarkNoise(sampleResult())).toEqual([]);
    // cv: one run 5x the others -> std / mean well over 20%.
    const noisy = sampleResult();
    noisy.models[0]!.latency[0] = latencyPoint([1, 1, 1, 1, 5]);
    expect(noisy.models[0]!.latency[0]!.stats.cv).toBeGreaterThan(NOISE_CV_LIMIT);
    const [cvWarning] = benchmarkNoise(noisy);
    expect(cvWarning).toMatch(/^warning: the timing is too noisy to trust: run-to-run variation \(cv\) model\.onnx \d+%, over the 20% limit\./);
    expect(cvWarning).toContain('Re-run with more --iterations or a longer --duration, fewer background jobs, and threads pinned (--threads 1');
    // Interval: [1.5, 2.5] around 2.0 is ±25%.
    const wide = sampleResult();
    wide.models[1]!.latency[0]!.speedup = { estimate: 2, low: 1.5, high: 2.5, verdict: 'faster' };
    expect(benchmarkNoise(wide)[0]).toContain('model-int8.onnx: speed-up interval [1.50, 2.50] is ±25% wide');
    // Across 1.0 with the estimate 6% above it: narrow (±6.5%), but a difference the noise hides.
    const crossing = sampleResult();
    crossing.models[1]!.latency[0]!.speedup = { estimate: 1.06, low: 0.99, high: 1.13, verdict: 'no significant difference' };
    expect(benchmarkNoise(crossing)[0]).toContain('model-int8.onnx: speed-up interval [0.99, 1.13] crosses 1.0 around 1.06x: faster or not cannot be told');
    // Across 1.0 around 1.0 itself: no difference, and the interval says so; no warning.
    crossing.models[1]!.latency[0]!.speedup = { estimate: 1.0, low: 0.97, high: 1.03, verdict: 'no significant difference' };
    expect(benchmarkNoise(crossing)).toEqual([]);
    // Faster at the median, slower in the tail: candidate p99 above the baseline's 1.2 ms.
    const tail = sampleResult();
    tail.models[1]!.latency[0] = latencyPoint([0.5, 0.5, 0.5, 0.5, 1.5], 1, { estimate: 2, low: 1.9, high: 2.1, verdict: 'faster' });
    tail.models[1]!.latency[0]!.stats.cv = 0.1;
    expect(benchmarkNoise(tail)[0]).toMatch(/model-int8\.onnx is called faster but its p99 \(1\.4\d\d ms\) is above the baseline's \(1\.19\d ms\)/);
  });
});

const speed = (over: Partial<SpeedCheck> = {}): SpeedCheck => ({
  batchSize: 1,
  threads: 1,
  runs: 300,
  baselineP50Ms: 0.1,
  p50Ms: 0.062,
  speedup: { estimate: 1.62, low: 1.58, high: 1.66, verdict: 'faster' },
  baselineP99Ms: 0.2,
  p99Ms: 0.15,
  baselineCv: 0.05,
  cv: 0.06,
  ...over,
});

describe('speed checks (quantize, prune --measure-speed) and optimize', () => {
  it('warn on cv, a wide interval or a worse p99, suggesting more runs', () => {
    expect(speedCheckNoise(undefined)).toEqual([]);
    expect(speedCheckNoise(speed())).toEqual([]);
    expect(speedCheckNoise(speed({ baselineCv: 0.3 }))[0]).toMatch(
      /run-to-run variation \(cv\) input 30%, over the 20% limit\. Re-run with more runs \(--measure-speed 1000\)/,
    );
    expect(speedCheckNoise(speed({ speedup: { estimate: 1, low: 0.8, high: 1.2, verdict: 'no significant difference' } }))[0]).toContain(
      'speed-up interval [0.80, 1.20] is ±20% wide',
    );
    expect(speedCheckNoise(speed({ p99Ms: 0.3 }))[0]).toContain("called faster but its p99 (0.300 ms) is above the input's (0.200 ms)");
  });

  it("optimize: the chosen candidate's verdict, and the candidates whose intervals stayed wide", () => {
    const candidate = (name: string, speedup: OptimizeResult['candidates'][number]['speedup'], status: 'chosen' | 'rejected') =>
      ({
        name,
        speedup,
        status,
        sizeBytes: 128 * 1024,
        fidelity: { accuracyDropPoints: 0.05, sqnrDb: 37.7, top1Agreement: 0.998 },
      }) as OptimizeResult['candidates'][number];
    const result = {
      input: { path: 'm.onnx', sizeBytes: 445 * 1024 },
      output: { path: 'o.onnx', sizeBytes: 128 * 1024, sha256: '' },
      candidates: [
        candidate('int8', { estimate: 1.62, low: 1.52, high: 1.68, verdict: 'faster' }, 'chosen'),
        candidate('int8-dynamic', { estimate: 1.0, low: 0.8, high: 1.3, verdict: 'no significant difference' }, 'rejected'),
      ],
    } as OptimizeResult;
    expect(optimizeVerdict(result)).toBe('int8: 1.62x faster [1.52, 1.68], accuracy -0.05 pt, 3.48x smaller');
    expect(optimizeNoise(result)).toEqual([
      'warning: the timing is too noisy to trust: int8-dynamic: speed-up interval [0.80, 1.30] is ±25% wide. Re-run with more --iterations (up to 200 by default), fewer background jobs, and threads pinned (--threads 1; on Linux taskset -c 2)',
    ]);
    // Timing that settled a candidate once it could no longer be faster (its interval at or under
    // 1.02x) stopped it on purpose: no warning for it; a wide interval reaching above 1.02x still warns.
    result.settings = { precisionFor: 'faster' } as OptimizeResult['settings'];
    result.candidates.push(candidate('int8-mixed', { estimate: 0.86, low: 0.71, high: 1.01, verdict: 'no significant difference' }, 'rejected'));
    expect(optimizeNoise(result)).toHaveLength(1);
    expect(optimizeNoise(result)[0]).toMatch(/int8-dynamic: speed-up interval \[0\.80, 1\.30\] is ±25% wide\. Re-run/);
    result.settings = { precisionFor: 'every' } as OptimizeResult['settings'];
    expect(optimizeNoise(result)[0]).toMatch(/int8-mixed: speed-up interval \[0\.71, 1\.01\] is ±17% wide/);
    result.candidates[0]!.status = 'rejected';
    expect(optimizeVerdict(result)).toBe('no candidate beat FP32 within the budget: wrote FP32');
  });
});

describe('quantize and prune', () => {
  it('quantize: the measured speed-up, the fidelity against its budget (or the labelled guard), the size', () => {
    const outputs = { logits: { sqnrDb: 39.6, top1Agreement: 1, cosineSimilarity: 0.9999 } };
    const result = {
      mode: 'int8',
      input: { path: 'm.onnx', sizeBytes: 445 * 1024 },
      output: { path: 'q.onnx', sizeBytes: 128 * 1024 },
      speed: speed(),
      fidelity: { enabled: true, met: true, final: { outputs } },
    } as unknown as QuantizeResult;
    expect(quantizeVerdict(result)).toBe('int8: 1.62x faster [1.58, 1.66], top-1 agreement 100.00% (budget met), 3.48x smaller');
    // No --measure-speed, an output without classes, nothing written.
    const unmeasured = {
      ...result,
      speed: undefined,
      output: null,
      fidelity: { enabled: true, met: false, final: { outputs: { y: { sqnrDb: 12.3, top1Agreement: null } } } },
    };
    expect(quantizeVerdict(unmeasured as unknown as QuantizeResult)).toBe('int8: SQNR 12.3 dB (budget MISSED), nothing written');
    // The labelled guard decides: its accuracy drop (0.25 pt) against its budget.
    const guarded = { ...result, guard: { met: true, chosen: { dropPoints: 0.25 } } };
    expect(quantizeVerdict(guarded as unknown as QuantizeResult)).toBe('int8: 1.62x faster [1.58, 1.66], accuracy -0.25 pt (budget met), 3.48x smaller');
  });

  it('prune: speed, top-1 change and the gzip size for zeros, the raw size for removed channels', () => {
    const size = (raw: number, gzip: number) => ({ rawBytes: raw, gzipBytes: gzip });
    const result = {
      report: { pattern: '2:4' },
      size: { before: size(445, 412), after: size(445, 246) },
      accuracy: { before: { top1: 0.895 }, after: { top1: 0.83 } },
    } as unknown as PruneWorkflowResult;
    expect(pruneVerdict(result)).toBe('2:4: top-1 -6.50 pt, 1.67x smaller (gzip)');
    const channel = {
      ...result,
      report: { pattern: 'channel' },
      size: { before: size(400, 370), after: size(200, 185) },
      accuracy: null,
      score: { metric: 'ctc', before: 0.7, after: 0.68 },
      speed: speed({ speedup: { estimate: 1.3, low: 1.25, high: 1.35, verdict: 'faster' } }),
    };
    expect(pruneVerdict(channel as unknown as PruneWorkflowResult)).toBe('channel: 1.30x faster [1.25, 1.35], ctc -2.00 pt, 2.00x smaller');
  });
});

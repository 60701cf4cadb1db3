// A hand-made benchmark result for gate and reporter tests (no runtime needed).
import { mcnemarFromCounts, summarize, type Interval } from '../../src/metrics/index.js';
import type { BenchmarkResult, LatencyPoint, ModelResult } from '../../src/benchmark/types.js';
import { throughputAtMedian } from '../../src/benchmark/throughput.js';

export function latencyPoint(
  times: number[],
  batchSize = 1,
  speedup?: Interval & { verdict: 'faster' | 'slower' | 'no significant difference' },
): LatencyPoint {
  const stats = summarize(times);
  const point: LatencyPoint = {
    batchSize,
    stats,
    throughput: throughputAtMedian(batchSize, stats),
    p99Interval: { estimate: stats.p99, low: stats.p99 * 0.9, high: stats.p99 * 1.1 },
  };
  if (speedup) point.speedup = speedup;
  return point;
}

/** Baseline 90.0% (450/500); candidate 88.8% (444/500) with b=10, c=4 discordant pairs. */
export function sampleResult(): BenchmarkResult {
  const file = (p: string) => ({ path: p, sizeBytes: 400_000, gzipBytes: 370_000, sha256: 'ab'.repeat(32) });
  const baseline: ModelResult = {
    role: 'baseline',
    label: 'model.onnx',
    file: file('fixtures/model.onnx'),
    loadMs: 12.5,
    peakMemoryBytes: 30 * 1024 * 1024,
    accuracy: { metric: 'top1', k: 1, correct: 450, total: 500, value: 0.9 },
    latency: [latencyPoint([1.0, 1.1, 1.2, 1.0, 1.05])],
  };
  const candidate: ModelResult = {
    role: 'candidate',
    label: 'model-int8.onnx',
    file: { ...file('out/model-int8.onnx'), sizeBytes: 110_000, gzipBytes: 90_000 },
    loadMs: 8.25,
    peakMemoryBytes: 20 * 1024 * 1024,
    accuracy: { metric: 'top1', k: 1, correct: 444, total: 500, value: 0.888, comparison: mcnemarFromCounts(10, 4, 500) },
    agreement: {
      logits: {
        count: 5000,
        rows: 500,
        top1Agreement: 0.97,
        maxAbsError: 0.5,
        relativeL2: 0.05,
        cosineSimilarity: 0.9987,
        sqnrDb: 26,
        thresholdAgreement: 1,
        unitInterval: false,
      },
    },
    latency: [latencyPoint([0.5, 0.55, 0.6, 0.5, 0.52], 1, { estimate: 2.0, low: 1.8, high: 2.2, verdict: 'faster' })],
  };
  return {
    manifest: {
      modelOptVersion: '0.1.0',
      nodeVersion: 'v20.0.0',
      onnxruntimeVersion: '1.30.0',
      platform: 'linux-x64',
      cpu: { model: 'Test CPU', cores: 2, flags: ['avx2', 'avx512_vnni'] },
      threads: 1,
      providers: ['cpu'],
      files: [
        { path: 'fixtures/model.onnx', sha256: 'ab'.repeat(32), sizeBytes: 400_000 },
        { path: 'out/model-int8.onnx', sha256: 'ab'.repeat(32), sizeBytes: 110_000 },
      ],
      command: 'model-opt benchmark fixtures/model.onnx out/model-int8.onnx --data eval.npz',
      timestamp: '2025-01-01T00:00:00.000Z',
    },
    settings: {
      warmup: 10,
      iterations: 5,
      durationMs: null,
      interleave: 'warm',
      burst: 10,
      batchSizes: [1],
      threads: 1,
      providers: ['cpu'],
      requestedProviders: ['cpu'],
      metric: 'top1',
      outputName: 'logits',
      seed: 0,
      bootstrapResamples: 2000,
      interleaving: 'rounds, rotating start',
    },
    data: { source: 'file', path: 'eval.npz', samples: 500, labels: true, notes: [] },
    models: [baseline, candidate],
    gates: [],
    passed: true,
  };
}

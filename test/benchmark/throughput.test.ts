/**
 * The benchmark's throughput column comes from the median latency (batch / p50), so one slow run
 * cannot make it disagree with the paired speed-up beside it (a median too); the table footer and
 * the Markdown report say so, and name the execution provider that ran.
 */
import { describe, expect, it } from 'vitest';
import { throughputAtMedian } from '../../src/benchmark/index.js';
import { summarize } from '../../src/metrics/index.js';
import { renderMarkdown, renderTable } from '../../src/report/index.js';
import { latencyPoint, sampleResult } from './sample-result.js';

describe('throughput at the median latency', () => {
  // 19 runs of 0.5 ms and one of 20 ms (a page fault, another process): mean 1.475 ms, median 0.5 ms.
  const times = [...Array.from({ length: 19 }, () => 0.5), 20];

  it('is batch size / p50, not batch size / mean', () => {
    const stats = summarize(times);
    expect(stats.mean).toBeCloseTo(1.475, 12);
    expect(stats.p50).toBe(0.5);
    expect(throughputAtMedian(1, stats)).toBe(2000);
    expect(throughputAtMedian(8, stats)).toBe(16000);
    // What the mean would have said: 678/s, a third of what 19 runs in 20 did.
    expect((1 * 1000) / stats.mean).toBeCloseTo(677.97, 2);
  });

  it('an outlier in the baseline leaves the throughput ratio at the typical speed-up', () => {
    const baseline = summarize(times);
    const candidate = summarize(Array.from({ length: 20 }, () => 0.32));
    // Typical run: 0.5 ms against 0.32 ms = 1.5625x; the mean-based ratio would say 4.6x.
    expect(throughputAtMedian(1, candidate) / throughputAtMedian(1, baseline)).toBeCloseTo(1.5625, 12);
    expect(baseline.mean / candidate.mean).toBeCloseTo(4.609, 3);
  });

  it('the table and the Markdown report show it and say how it is computed, with the provider', () => {
    const result = sampleResult();
    result.models[0]!.latency = [latencyPoint(times)];
    const table = renderTable(result);
    expect(table).toMatch(/│ 2000\/s +│/);
    expect(table).toContain('provider cpu; throughput = batch size / p50 latency;');
    expect(renderMarkdown(result)).toContain('throughput = batch size / p50 latency');
    result.settings.requestedProviders = ['tensorrt', 'cpu'];
    expect(renderTable(result)).toContain('provider cpu (asked for tensorrt, cpu);');
  });
});

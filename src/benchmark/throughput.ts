/**
 * Throughput of a timed batch size, from the median latency: batch size / p50. The mean would let
 * one slow run (a page fault, another process) move the column far from the typical run and from
 * the paired speed-up beside it, which is a median too. Pure; imports metrics types only.
 */
import type { SummaryStats } from '../metrics/index.js';

/** Samples per second at the median latency: batchSize / p50 (p50 in milliseconds). */
export function throughputAtMedian(batchSize: number, stats: Pick<SummaryStats, 'p50'>): number {
  return (batchSize * 1000) / stats.p50;
}

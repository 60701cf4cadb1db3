import { describe, expect, it } from 'vitest';
import { DataType } from '../../src/ir/index.js';
import { niceTicks, renderBatchingPlot, renderLatencyThroughputSvg } from '../../src/report/batching-plot.js';
import { renderBatchingJson, renderBatchingTable, tritonSnippet } from '../../src/report/batching-table.js';
import { VirtualClock } from '../../src/serve/clock.js';
import { createSimulatedExecutor, linearCost } from '../../src/serve/executor.js';
import { runBatchingSweep } from '../../src/serve/sweep.js';
import { parseTritonConfig } from '../../src/serve/triton-config.js';

async function simulatedSweep() {
  const clock = new VirtualClock();
  return runBatchingSweep({
    label: 'sim.onnx',
    batching: { maxBatchSize: 16, maxQueueDelayUs: 0, instances: 1 },
    loads: [1, 4, 16].map((concurrency) => ({ kind: 'concurrency' as const, concurrency })),
    sloP99Ms: 6,
    searchSpace: { maxBatchSizes: [16], preferredBatchSizes: [[]], maxQueueDelaysUs: [0], instances: [1] },
    measurement: { windowMs: 100 },
    searchMeasurement: { windowMs: 100 },
    executors: async (n) => Array.from({ length: n }, () => createSimulatedExecutor(clock, linearCost(1, 0.25))),
    inputSpecs: [{ name: 'x', dtype: DataType.FLOAT, shape: ['N', 1] }],
    clock,
  });
}

describe('batching reports', () => {
  it('nice ticks cover the range in 1-2-5 steps', () => {
    expect(niceTicks(3200)).toEqual([0, 1000, 2000, 3000, 4000]);
    expect(niceTicks(4.2)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(niceTicks(0)).toEqual([0, 1]);
  });

  it('plots one polyline per series with a point per load, and the target line', async () => {
    const result = await simulatedSweep();
    const svg = renderBatchingPlot(result);
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.trim().endsWith('</svg>')).toBe(true);
    const lines = [...svg.matchAll(/<polyline [^>]*points="([^"]*)"/g)].map((m) => m[1]!.split(' ').length);
    // dynamic batching (3 loads), no batching (3 loads), recommended setting, unbatched search candidate.
    expect(lines.slice(0, 2)).toEqual([3, 3]);
    expect(lines.length).toBe(4);
    expect(svg).toContain('p99 target 6 ms');
    expect(svg).toContain('<title>dynamic batching at c=16: 3200.0 req/s, p99 5.000 ms</title>');
    // Each point is labelled with its load, and points stay in load order.
    expect(svg).toMatch(/>c=16<\/text>/);
  });

  it('places points by value on the axes', () => {
    const svg = renderLatencyThroughputSvg(
      [
        {
          label: 'a',
          points: [
            { throughput: 500, p99: 5 },
            { throughput: 1000, p99: 10 },
          ],
        },
      ],
      { width: 720, height: 460 },
    );
    // x: 70 + v / 1000 * 630; the plot area is 460 - 40 - 84 (axis title and one legend row below it) = 336 high: y = 40 + 336 - v / 10 * 336
    expect(svg).toContain('points="385.0,208.0 700.0,40.0"');
  });

  it('prints the comparison table, the recommendation and a Triton block that parses', async () => {
    const result = await simulatedSweep();
    const text = renderBatchingTable(result);
    expect(text).toMatch(/concurrency 16 .*dynamic .*3200\/s/);
    expect(text).toMatch(/4\.00x/);
    expect(text).toMatch(/recommended: max batch 16, delay 0 us, 1 instance: 3200\/s at p99 5\.00 ms \(4\.00x the best without batching\)/);
    const snippet = tritonSnippet(result.slo!.recommended!);
    expect(parseTritonConfig(snippet)).toMatchObject({ maxBatchSize: 16, dynamicBatching: { maxQueueDelayMicroseconds: 0 }, instanceGroup: [{ count: 1 }] });
    const doc = JSON.parse(renderBatchingJson(result)) as { schemaVersion: number; kind: string; rows: unknown[] };
    expect(doc).toMatchObject({ schemaVersion: 1, kind: 'batching-sweep' });
    expect(doc.rows).toHaveLength(3);
  });

  it('fits an 80-column terminal: load, batching, throughput, p99 and gain stay, the rest is named', async () => {
    const result = await simulatedSweep();
    const text = renderBatchingTable(result, { width: 80 });
    expect(Math.max(...text.split('\n').map((l) => [...l].length))).toBeLessThanOrEqual(80);
    const header = text.split('\n').find((l) => l.startsWith('│ load'))!;
    expect(
      header
        .split('│')
        .map((c) => c.trim())
        .filter(Boolean),
    ).toEqual(expect.arrayContaining(['load', 'batching', 'throughput', 'p99 ms', 'gain']));
    expect(text).toMatch(/concurrency 16 .*dynamic .*3200\/s/);
    expect(text).toMatch(/not shown at 80 columns: p90 ms, queue p99, compute p50,/);
    // Without a width (a pipe): every column, as before.
    expect(renderBatchingTable(result)).toContain('│ load ');
    expect(renderBatchingTable(result)).toMatch(/compute p50 .* mean batch \(sizes\) .* rejected/);
  });
});

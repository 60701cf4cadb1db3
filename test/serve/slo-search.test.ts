import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../src/ir/index.js';
import { DynamicBatcher } from '../../src/serve/batcher.js';
import { VirtualClock } from '../../src/serve/clock.js';
import { createSimulatedExecutor, linearCost } from '../../src/serve/executor.js';
import { expandSearchSpace, searchSlo, type SloSearchSpace } from '../../src/serve/slo-search.js';
import { runBatchingSweep } from '../../src/serve/sweep.js';

const one = (): Record<string, TensorData> => ({ x: { dtype: DataType.FLOAT, dims: [1, 1], data: Float32Array.of(1) } });
const cost = linearCost(1, 0.25); // ms for a batch of b: 1 + 0.25 b

/*
 * A simulated model with known costs, closed-loop ramps 1, 2, 4, ... (see load-generator tests):
 * the best throughput within the target for each setting is known in closed form.
 *   p99 <= 8 ms: no batching 800/s; max 16 x1: 3200/s (c=16, 5 ms); max 16 x2: 6400/s (c=32,
 *   5 ms) <- best; max 16 x2 preferred 8: 5333/s; max 32 x1: 3200/s (c=32 would take 9 ms).
 *   p99 <= 4 ms: max 16 x2 preferred 8 wins with 5333/s (two batches of 8 in parallel, 3 ms);
 *   without the preferred size, c=16 forms one batch of 16 (5 ms, too slow).
 */
const space: SloSearchSpace = { maxBatchSizes: [16, 32], preferredBatchSizes: [[], [8]], maxQueueDelaysUs: [0], instances: [1, 2] };

async function search(sloP99Ms: number) {
  const clock = new VirtualClock();
  return searchSlo(
    async (setting, config) =>
      new DynamicBatcher(
        Array.from({ length: setting.instances }, () => createSimulatedExecutor(clock, cost)),
        config,
        clock,
      ),
    one,
    { sloP99Ms, space, measurement: { windowMs: 100 } },
    clock,
  );
}

describe('SLO search on a simulated model', () => {
  it('expands the grid (with the unbatched baseline, without invalid combinations)', () => {
    const settings = expandSearchSpace({ maxBatchSizes: [4, 16], preferredBatchSizes: [[], [8]], maxQueueDelaysUs: [0, 100], instances: [1] });
    // unbatched + max 4 x {[]} x 2 delays + max 16 x {[], [8]} x 2 delays
    expect(settings).toHaveLength(1 + 2 + 4);
    expect(settings.some((s) => s.maxBatchSize === 4 && s.preferredBatchSizes.includes(8))).toBe(false);
  });

  it('picks the known best under p99 <= 8 ms', async () => {
    const r = await search(8);
    expect(r.best?.setting).toEqual({ maxBatchSize: 16, preferredBatchSizes: [], maxQueueDelayUs: 0, instances: 2 });
    expect(r.best!.point.throughput).toBeCloseTo(6400, 6);
    expect(r.best!.point.latencyMs.p99).toBeCloseTo(5, 9);
    const byKey = new Map(r.candidates.map((c) => [JSON.stringify(c.setting), c.best?.throughput]));
    expect(byKey.get(JSON.stringify({ maxBatchSize: 1, preferredBatchSizes: [], maxQueueDelayUs: 0, instances: 1 }))).toBeCloseTo(800, 6);
    expect(byKey.get(JSON.stringify({ maxBatchSize: 16, preferredBatchSizes: [8], maxQueueDelayUs: 0, instances: 2 }))).toBeCloseTo(16000 / 3, 6);
    expect(byKey.get(JSON.stringify({ maxBatchSize: 32, preferredBatchSizes: [], maxQueueDelayUs: 0, instances: 1 }))).toBeCloseTo(3200, 6);
  });

  it('picks a different known best under p99 <= 4 ms', async () => {
    const r = await search(4);
    expect(r.best?.setting).toEqual({ maxBatchSize: 16, preferredBatchSizes: [8], maxQueueDelayUs: 0, instances: 2 });
    expect(r.best!.point.throughput).toBeCloseTo(16000 / 3, 6);
    expect(r.best!.point.latencyMs.p99).toBeCloseTo(3, 9);
  });

  it('reports no recommendation when nothing meets the target', async () => {
    const r = await search(1);
    expect(r.best).toBeUndefined();
    expect(r.candidates.every((c) => c.best === undefined)).toBe(true);
  });
});

describe('runBatchingSweep (simulated executors)', () => {
  it('compares batching with no batching per load and runs the search', async () => {
    const clock = new VirtualClock();
    const result = await runBatchingSweep({
      batching: { maxBatchSize: 16, maxQueueDelayUs: 0, instances: 1 },
      loads: [{ kind: 'concurrency', concurrency: 16 }],
      sloP99Ms: 8,
      searchSpace: { maxBatchSizes: [16], preferredBatchSizes: [[]], maxQueueDelaysUs: [0], instances: [1, 2] },
      measurement: { windowMs: 100 },
      searchMeasurement: { windowMs: 100 },
      executors: async (n) => Array.from({ length: n }, () => createSimulatedExecutor(clock, cost)),
      inputSpecs: [{ name: 'x', dtype: DataType.FLOAT, shape: ['N', 1] }],
      clock,
    });
    const row = result.rows[0]!;
    expect(row.batched.throughput).toBeCloseTo(3200, 6);
    expect(row.unbatched!.throughput).toBeCloseTo(800, 6); // 1 / 1.25 ms
    expect(row.throughputGain).toBeCloseTo(4, 6);
    expect(result.slo?.recommended).toEqual({ maxBatchSize: 16, preferredBatchSizes: [], maxQueueDelayUs: 0, instances: 2 });
  });
});

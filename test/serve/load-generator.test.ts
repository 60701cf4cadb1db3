import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../src/ir/index.js';
import { DynamicBatcher } from '../../src/serve/batcher.js';
import { VirtualClock, type Clock } from '../../src/serve/clock.js';
import { createSimulatedExecutor, linearCost } from '../../src/serve/executor.js';
import { measureLoad } from '../../src/serve/load-generator.js';

const one = (): Record<string, TensorData> => ({ x: { dtype: DataType.FLOAT, dims: [1, 1], data: Float32Array.of(1) } });

function setup(maxBatchSize: number, instances: number, cost = linearCost(1, 0.25), delayUs = 0) {
  const clock = new VirtualClock();
  const executors = Array.from({ length: instances }, () => createSimulatedExecutor(clock, cost));
  return { clock, batcher: new DynamicBatcher(executors, { maxBatchSize, maxQueueDelayUs: delayUs }, clock) };
}

describe('closed loop (concurrency)', () => {
  // With every client resubmitting on its response, the steady state is known exactly:
  // concurrency c <= max batch m gives batches of c, latency cost(c), throughput c / cost(c).
  it.each([
    [1, 1, 1, 1.25, 800],
    [16, 1, 16, 5, 3200],
    [16, 1, 32, 10, 3200], // two batches of 16 queue behind each other
    [16, 2, 32, 5, 6400], // two instances in parallel
  ])('max batch %i, %i instance(s), concurrency %i: p99 %f ms, %f req/s', async (m, inst, c, p99, thr) => {
    const { clock, batcher } = setup(m, inst);
    const r = await measureLoad(batcher, { kind: 'concurrency', concurrency: c }, one, { windowMs: 100 }, clock);
    expect(r.stable).toBe(true);
    expect(r.windows).toHaveLength(3);
    expect(r.latencyMs.p99).toBeCloseTo(p99, 9);
    expect(r.latencyMs.p50).toBeCloseTo(p99, 9);
    expect(r.throughput).toBeCloseTo(thr, 6);
    expect(r.computeMs.p50).toBeCloseTo(linearCost(1, 0.25)(Math.min(c, m)), 9);
    expect(r.batchSizes).toEqual([[Math.min(c, m), r.completed / Math.min(c, m)]]);
    expect(r.rejected).toBe(0);
  });

  it('splits latency into queue and compute time', async () => {
    const { clock, batcher } = setup(16, 1);
    const r = await measureLoad(batcher, { kind: 'concurrency', concurrency: 32 }, one, { windowMs: 100 }, clock);
    // Half the requests wait one batch (5 ms), half none: p50 of queue is ~0 or 5, p99 is 5.
    expect(r.queueMs.p99).toBeCloseTo(5, 9);
    expect(r.computeMs.p99).toBeCloseTo(5, 9);
    expect(r.latencyMs.mean).toBeCloseTo(r.queueMs.mean + r.computeMs.mean, 9);
  });
});

describe('open loop (request rate)', () => {
  it('constant arrivals under capacity: throughput equals the rate, no queueing beyond the delay', async () => {
    const { clock, batcher } = setup(8, 1, linearCost(1, 0.1), 1000);
    const r = await measureLoad(batcher, { kind: 'rate', rate: 2000, arrivals: 'constant' }, one, { windowMs: 200 }, clock);
    expect(r.stable).toBe(true);
    expect(r.throughput).toBeGreaterThan(2000 * 0.99);
    expect(r.throughput).toBeLessThan(2000 * 1.01);
    expect(r.queueMs.max).toBeLessThanOrEqual(1 + linearCost(1, 0.1)(8) + 1e-9);
  });

  it('Poisson arrivals average the rate', async () => {
    const { clock, batcher } = setup(32, 1, linearCost(1, 0.05), 500);
    const r = await measureLoad(batcher, { kind: 'rate', rate: 3000 }, one, { windowMs: 500, seed: 11 }, clock);
    expect(r.throughput).toBeGreaterThan(3000 * 0.9);
    expect(r.throughput).toBeLessThan(3000 * 1.1);
    expect(r.meanBatchSize).toBeGreaterThan(2);
  });

  it('overload is reported as not stable, and the run stays bounded', async () => {
    // Capacity without batching: 1 / 1.1 ms = 909 req/s; offered 2000 req/s: latency keeps growing.
    const { clock, batcher } = setup(1, 1, linearCost(1, 0.1));
    const r = await measureLoad(batcher, { kind: 'rate', rate: 2000, arrivals: 'constant' }, one, { windowMs: 100, maxWindows: 6 }, clock);
    expect(r.stable).toBe(false);
    expect(r.windows).toHaveLength(6);
    expect(r.throughput).toBeLessThan(920);
    expect(r.windows[5]!.p99Ms).toBeGreaterThan(r.windows[3]!.p99Ms);
  });

  it('stops at the request bound', async () => {
    const { clock, batcher } = setup(8, 1, linearCost(1, 0.1));
    const r = await measureLoad(batcher, { kind: 'rate', rate: 1000, arrivals: 'constant' }, one, { windowMs: 100, maxRequests: 250 }, clock);
    expect(r.limit).toBe('requests');
    expect(r.stable).toBe(false);
  });

  it('counts rejected requests when the queue is full', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, linearCost(1, 0.1));
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 1, maxQueueSize: 4 }, clock);
    const r = await measureLoad(batcher, { kind: 'rate', rate: 2000, arrivals: 'constant' }, one, { windowMs: 100 }, clock);
    // Served ~909/s; the remaining ~1091/s are turned away.
    expect(r.throughput).toBeCloseTo(1000 / 1.1, -1);
    expect(r.rejected / (r.measuredMs / 1000)).toBeGreaterThan(1000);
    expect(r.latencyMs.max).toBeLessThanOrEqual(5 * 1.1 + 1e-9);
  });
});

describe('validity of a point', () => {
  it('marks a point invalid when the request cap runs out during the warm-up', async () => {
    const { clock, batcher } = setup(16, 1, () => 0.01);
    const m = await measureLoad(batcher, { kind: 'concurrency', concurrency: 16 }, one, { windowMs: 100, maxRequests: 2000 }, clock);
    expect(m.valid).toBe(false);
    expect(m.invalidReason).toMatch(/request cap \(2000\) ran out/);
  });

  it('a simulated point has no generator lag and is valid', async () => {
    const { clock, batcher } = setup(8, 1);
    const m = await measureLoad(batcher, { kind: 'rate', rate: 500 }, one, { windowMs: 200, maxWindows: 4 }, clock);
    expect(m).toMatchObject({ valid: true, generatorLagMs: 0 });
    expect(m.rejectedTotal).toBeGreaterThanOrEqual(m.rejected);
  });

  it('marks a point invalid when the event loop it shares with the batcher is starved', async () => {
    // A clock whose sleeps come back 30 ms late stands in for a starved event loop.
    const { clock, batcher } = setup(8, 1);
    const late: Clock = {
      now: () => clock.now(),
      setTimer: (fn, ms) => clock.setTimer(fn, ms),
      clearTimer: (t) => clock.clearTimer(t),
      sleep: (ms) => clock.sleep(ms + 30),
    };
    const m = await measureLoad(batcher, { kind: 'concurrency', concurrency: 4 }, one, { windowMs: 200, maxWindows: 4 }, late);
    expect(m.valid).toBe(false);
    expect(m.generatorLagMs).toBeCloseTo(30, 6);
    expect(m.invalidReason).toMatch(/load generator is the bottleneck/);
  });
});

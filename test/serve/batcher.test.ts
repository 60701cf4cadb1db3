import { describe, expect, it } from 'vitest';
import { DataType, type TensorData } from '../../src/ir/index.js';
import { DynamicBatcher, RequestRejectedError, type InferenceResult } from '../../src/serve/batcher.js';
import { RealClock, VirtualClock } from '../../src/serve/clock.js';
import { createOrtExecutors, createSimulatedExecutor, linearCost, type BatchExecutor } from '../../src/serve/executor.js';
import { measureLoad } from '../../src/serve/load-generator.js';
import { InputError } from '../../src/errors.js';
import { elementwiseModel, fixedBatchModel, mlpModel } from './models.js';

const sample = (values: number[], dims = [1, values.length]): Record<string, TensorData> => ({
  x: { dtype: DataType.FLOAT, dims, data: Float32Array.from(values) },
});

function seededValues(n: number, seed: number): number[] {
  let s = seed;
  return Array.from({ length: n }, () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648 - 0.5;
  });
}

describe('batch assembly and splitting', () => {
  it('splits a simulated batch back exactly, with requests of 1 and 2 samples', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, linearCost(1, 0.1));
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 8, maxQueueDelayUs: 5000 }, clock);
    const reqs = [sample([1, 2]), sample([3, 4, 5, 6], [2, 2]), sample([7, 8])];
    const results = await Promise.all(reqs.map((r) => batcher.submit(r)));
    expect(ex.calls).toEqual([4]); // one batch of 1 + 2 + 1 samples
    expect(results.map((r) => r.outputs['x_out']!.dims)).toEqual([
      [1, 2],
      [2, 2],
      [1, 2],
    ]);
    expect(Array.from(results[1]!.outputs['x_out']!.data as Float32Array)).toEqual([7, 9, 11, 13]);
    expect(Array.from(results[2]!.outputs['x_out']!.data as Float32Array)).toEqual([15, 17]);
    expect(results.every((r) => r.timing.batchSize === 4 && r.timing.batchId === 0)).toBe(true);
  });

  it('onnxruntime: batched outputs equal one-by-one outputs (bitwise for an elementwise model)', async () => {
    const [ex] = await createOrtExecutors(elementwiseModel(), 1, { maxBatchSize: 16, intraOpThreads: 1 });
    try {
      const reqs = Array.from({ length: 11 }, (_, i) => sample(seededValues(6, i + 1), [1, 3, 2]));
      const alone = [];
      for (const r of reqs) alone.push(await ex!.execute(r, 1));
      const batcher = new DynamicBatcher([ex!], { maxBatchSize: 16, maxQueueDelayUs: 20_000 });
      const batched = await Promise.all(reqs.map((r) => batcher.submit(r)));
      expect(batched[0]!.timing.batchSize).toBe(11);
      for (let i = 0; i < reqs.length; i++) {
        for (const name of ['y', 'z']) {
          expect(batched[i]!.outputs[name]!.dims).toEqual([1, 3, 2]);
          expect(Array.from(batched[i]!.outputs[name]!.data as Float32Array)).toEqual(Array.from(alone[i]![name]!.data as Float32Array));
        }
      }
    } finally {
      await ex!.release?.();
    }
  });

  it('onnxruntime: an MLP gives the same outputs batched (within float32 rounding of GEMM blocking)', async () => {
    const [ex] = await createOrtExecutors(mlpModel(), 1, { maxBatchSize: 32, intraOpThreads: 1 });
    try {
      const reqs = Array.from({ length: 20 }, (_, i) => sample(seededValues(16, 100 + i)));
      const alone = [];
      for (const r of reqs) alone.push(await ex!.execute(r, 1));
      const batcher = new DynamicBatcher([ex!], { maxBatchSize: 32, preferredBatchSizes: [20] });
      const batched = await Promise.all(reqs.map((r) => batcher.submit(r)));
      expect(new Set(batched.map((b) => b.timing.batchSize))).toEqual(new Set([20]));
      let maxDiff = 0;
      for (let i = 0; i < reqs.length; i++) {
        const a = alone[i]!['y']!.data as Float32Array;
        const b = batched[i]!.outputs['y']!.data as Float32Array;
        expect(b.length).toBe(4);
        for (let k = 0; k < 4; k++) maxDiff = Math.max(maxDiff, Math.abs(a[k]! - b[k]!));
      }
      expect(maxDiff).toBeLessThan(1e-5);
    } finally {
      await ex!.release?.();
    }
  });

  it('refuses a model whose batch dim is fixed, pointing at batchify', async () => {
    await expect(createOrtExecutors(fixedBatchModel(1), 1, { maxBatchSize: 8 })).rejects.toThrow(InputError);
    await expect(createOrtExecutors(fixedBatchModel(1), 1, { maxBatchSize: 8 })).rejects.toThrow(
      /input 'x' has a fixed batch dimension of 1.*model-opt batchify/,
    );
    // Max batch size 1 (no batching) is fine.
    const ex = await createOrtExecutors(fixedBatchModel(1), 1, { maxBatchSize: 1 });
    await Promise.all(ex.map((e) => e.release?.()));
  });

  it('batches requests by shape: another shape waits for a batch of its own (as Triton)', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 1);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 4, maxQueueDelayUs: 5000 }, clock);
    // Arriving together: 2-wide, 3-wide, 2-wide, 3-wide. FIFO runs of one shape form the batches.
    const rs = await Promise.all([sample([1, 2]), sample([1, 2, 3]), sample([3, 4]), sample([4, 5, 6])].map((r) => batcher.submit(r)));
    expect(rs.map((r) => r.outputs['x_out']!.dims)).toEqual([
      [1, 2],
      [1, 3],
      [1, 2],
      [1, 3],
    ]);
    expect(ex.calls).toEqual([1, 1, 1, 1]); // each run of one shape is cut by the next request
    const same = await Promise.all([sample([1, 2, 3]), sample([4, 5, 6])].map((r) => batcher.submit(r)));
    expect(same.map((r) => r.timing.batchSize)).toEqual([2, 2]);
    await expect(batcher.submit(sample([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5, 2]))).rejects.toThrow(/5 samples does not fit the max batch size 4/);
  });

  it('queue timeouts fire as time passes, not when the next batch is formed', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 100);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 1, defaultTimeoutUs: 10_000 }, clock);
    const first = batcher.submit(sample([0]));
    const second = batcher.submit(sample([1]));
    let rejectedAt = -1;
    second.catch(() => (rejectedAt = clock.now()));
    await expect(second).rejects.toMatchObject({ reason: 'timeout' });
    expect(rejectedAt).toBe(10); // the instance is busy until t=100
    expect((await first).timing.doneMs).toBe(100);
  });
});

/** Submit requests at given virtual times; returns their results in submission order. */
async function submitAt(clock: VirtualClock, batcher: DynamicBatcher, times: number[]): Promise<InferenceResult[]> {
  const out: Promise<InferenceResult>[] = [];
  for (const t of times) {
    out.push(
      new Promise<InferenceResult>((resolve, reject) => {
        clock.setTimer(() => batcher.submit(sample([t])).then(resolve, reject), t);
      }),
    );
  }
  return Promise.all(out);
}

describe('batch formation rules', () => {
  it('sends the largest preferred size at once, holds the rest until the delay runs out', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 1);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 8, preferredBatchSizes: [2, 4], maxQueueDelayUs: 10_000 }, clock);
    const r = await submitAt(clock, batcher, [0, 0, 0, 0, 0, 0, 0]);
    // 7 waiting: prefix 4 is preferred -> 4 now; at t=1 three wait, prefix 2 -> 2 now; the last
    // one waits for its delay (t=10), then goes alone.
    expect(ex.calls).toEqual([4, 2, 1]);
    expect(r.map((x) => x.timing.dispatchMs)).toEqual([0, 0, 0, 0, 1, 1, 10]);
  });

  it('without preferred sizes, waits for the delay unless the batch reaches max size', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 2);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 4, maxQueueDelayUs: 5000 }, clock);
    const r = await submitAt(clock, batcher, [0, 1, 2, 3, 20, 21]);
    // Four arrive by t=3 -> max size reached -> sent at 3; the two at 20/21 wait until 25.
    expect(ex.calls).toEqual([4, 2]);
    expect(r.map((x) => x.timing.dispatchMs)).toEqual([3, 3, 3, 3, 25, 25]);
  });

  it('with zero delay sends whatever is waiting when an instance is free', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 5);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 16 }, clock);
    await submitAt(clock, batcher, [0, 1, 2, 3, 4, 6]);
    // t=0 alone; 1..4 queue while it runs and go together at 5; 6 goes at 10.
    expect(ex.calls).toEqual([1, 4, 1]);
  });

  it('spreads batches over idle instances', async () => {
    const clock = new VirtualClock();
    const a = createSimulatedExecutor(clock, () => 4);
    const b = createSimulatedExecutor(clock, () => 4);
    const batcher = new DynamicBatcher([a, b], { maxBatchSize: 2 }, clock);
    const r = await submitAt(clock, batcher, [0, 0, 0, 0, 0]);
    expect(a.calls).toEqual([2, 1]);
    expect(b.calls).toEqual([2]);
    expect(r.map((x) => x.timing.instance)).toEqual([0, 0, 1, 1, 0]);
    expect(r[4]!.timing.dispatchMs).toBe(4);
  });
});

describe('queue delay', () => {
  it('no request waits longer than max delay plus one batch of compute (simulated, open loop)', async () => {
    const clock = new VirtualClock();
    const cost = linearCost(1, 0.1);
    const ex = createSimulatedExecutor(clock, cost);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 16, maxQueueDelayUs: 2000 }, clock);
    const m = await measureLoad(batcher, { kind: 'rate', rate: 1500 }, () => sample([1]), { windowMs: 200, maxWindows: 5, seed: 3 }, clock);
    expect(m.completed).toBeGreaterThan(500);
    expect(m.queueMs.max).toBeLessThanOrEqual(2 + cost(16) + 1e-9);
    expect(m.queueMs.max).toBeGreaterThan(1.5); // the delay is used at this load
  });

  it('real clock: a lone request is held about max delay, never much longer', async () => {
    const clock = new RealClock();
    const ex: BatchExecutor = { execute: async (inputs) => inputs };
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 8, maxQueueDelayUs: 4000 }, clock);
    const waits: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await batcher.submit(sample([i]));
      waits.push(r.timing.dispatchMs - r.timing.arrivalMs);
    }
    // Never dispatched early (a property of the batcher); held about the delay, judged on the
    // median: a shared 2-core machine can delay any one timer by tens of ms (issue 36).
    for (const w of waits) expect(w).toBeGreaterThanOrEqual(3.9);
    const median = [...waits].sort((a, b) => a - b)[2]!;
    expect(median, waits.join(', ')).toBeLessThan(4 + 25);
  });
});

describe('queue limits and ordering', () => {
  it('rejects requests when max_queue_size are waiting', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 10);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 1, maxQueueSize: 3 }, clock);
    const first = batcher.submit(sample([0]));
    await clock.sleep(1); // the first request is now running; the queue is empty
    const queued = [1, 2, 3].map((i) => batcher.submit(sample([i])));
    const extra = batcher.submit(sample([4]));
    await expect(extra).rejects.toBeInstanceOf(RequestRejectedError);
    await expect(extra).rejects.toMatchObject({ reason: 'queue-full' });
    await Promise.all([first, ...queued]);
    expect(batcher.stats).toMatchObject({ submitted: 5, rejected: 1, batches: 4 });
  });

  it('rejects requests that waited past the queue timeout', async () => {
    const clock = new VirtualClock();
    const ex = createSimulatedExecutor(clock, () => 10);
    const batcher = new DynamicBatcher([ex], { maxBatchSize: 1, defaultTimeoutUs: 15_000 }, clock);
    const settled = await Promise.allSettled([0, 1, 2].map((i) => batcher.submit(sample([i]))));
    // The second waits 10 ms (ok), the third would wait 20 ms: rejected at t=20.
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect((settled[2] as PromiseRejectedResult).reason).toMatchObject({ reason: 'timeout' });
  });

  it('preserve_ordering holds a fast response until earlier ones are done', async () => {
    const run = async (preserveOrdering: boolean): Promise<number[]> => {
      const clock = new VirtualClock();
      const slow = createSimulatedExecutor(clock, () => 10);
      const fast = createSimulatedExecutor(clock, () => 1);
      const batcher = new DynamicBatcher([slow, fast], { maxBatchSize: 1, preserveOrdering }, clock);
      const r = await Promise.all([0, 1].map((i) => batcher.submit(sample([i]))));
      return r.map((x) => x.timing.doneMs);
    };
    expect(await run(false)).toEqual([10, 1]);
    expect(await run(true)).toEqual([10, 10]);
  });
});

// Histogram binning on the worker thread (src/calibration/binning.ts) against the same histograms
// built by direct StreamingHistogram calls (whose counts histogram-binning.test.ts holds to
// one-by-one float64 counting): batches whose ranges grow the grid, batches with NaN/Infinity,
// a byte limit that makes post() wait, the hand-off of states from this thread, errors, and the
// calibration service with the thread on and off giving the same statistics.
import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { StreamingHistogram, collectStatistics, type StatisticRequest } from '../../src/calibration/index.js';
import {
  applyBinningJobs,
  binningThreadPays,
  binningThreadReady,
  BINNING_THREAD_MIN_BATCH_VALUES,
  BINNING_THREAD_MIN_VALUES,
  createBinner,
  stopBinningThread,
  type BinningJob,
} from '../../src/calibration/binning.js';
import { DataType, GraphBuilder } from '../../src/ir/index.js';
import type { Dataset } from '../../src/data/index.js';
import { lacks } from '../helpers/skips.js';

const twoCores = availableParallelism() > 1;
// The thread's failure paths need the thread, which runs only with two cores or more.
const noThread = lacks(
  !twoCores,
  'binning thread failures',
  'one core here: calibration bins in-process, with no thread to fail',
  'run on a machine with 2+ cores',
);

/** Deterministic ReLU-like batches whose range widens batch by batch; batch 3 holds NaN and Infinity. */
function batches(count: number, n: number): Float32Array[] {
  let s = 11;
  const next = (): number => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
  return Array.from({ length: count }, (_, b) => {
    const v = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const r = next();
      v[i] = r < 0.4 ? 0 : (r < 0.5 ? -next() : -Math.log(next() + 1e-9)) * (1 + b);
    }
    if (b === 3) {
      v[5] = Number.NaN;
      v[9] = Number.POSITIVE_INFINITY;
    }
    return v;
  });
}

/** The jobs statistics.ts would post: 'fixed' with the finite range, 'add' for a batch with non-finite values. */
function jobsOf(id: number, v: Float32Array): BinningJob {
  let min = Infinity;
  let max = -Infinity;
  let finite = true;
  for (const x of v) {
    if (!Number.isFinite(x)) finite = false;
    else {
      min = Math.min(min, x);
      max = Math.max(max, x);
    }
  }
  return finite ? { id, op: 'fixed', bmin: min, bmax: max, values: v } : { id, op: 'add', bmin: 0, bmax: 0, values: v };
}

/** Two tensors' histograms built by direct calls, as the reference. */
function direct(data: Float32Array[][]): StreamingHistogram[] {
  const hs = data.map(() => new StreamingHistogram(1024));
  for (let b = 0; b < data[0]!.length; b++) {
    for (const [id, tensor] of data.entries()) {
      const job = jobsOf(id, tensor[b]!);
      if (job.op === 'fixed') {
        hs[id]!.extend(job.bmin, job.bmax);
        hs[id]!.addFixed(job.values, false);
      } else hs[id]!.add(job.values);
    }
  }
  return hs;
}

const state = (h: StreamingHistogram) => ({ ...h.snapshot(), counts: Array.from(h.counts) });

afterAll(async () => {
  await stopBinningThread();
});

describe('histogram binning beside onnxruntime', () => {
  const data = [batches(6, 30_001), batches(6, 20_003).map((v) => v.map((x) => -x))];
  const reference = direct(data);

  it.each([
    ['in-process', false, 1 << 30],
    ['on the thread', true, 1 << 30],
    ['on the thread, one batch in flight at a time', true, 1],
  ])('%s: grids, ranges, counts and non-finite counts equal direct StreamingHistogram calls', async (_, thread, maxInFlightBytes) => {
    if (thread) expect(await binningThreadReady()).toBe(twoCores);
    const hs = data.map(() => new StreamingHistogram(1024));
    const binner = createBinner(hs, { thread, maxInFlightBytes });
    expect(binner.threaded).toBe(thread);
    const copies = data.map((tensor) => tensor.map((v) => v.slice()));
    try {
      for (let b = 0; b < 6; b++) {
        const jobs = copies.map((tensor, id) => jobsOf(id, tensor[b]!));
        await binner.post(jobs);
        // On the thread the buffers moved there (the caller must not read them); in-process they stay.
        if (thread && twoCores) expect(jobs[0]!.values.length).toBe(0);
        else expect(jobs[0]!.values.length).toBe(30_001);
      }
      await binner.finish();
    } finally {
      await binner.close();
    }
    for (const [i, h] of hs.entries()) expect(state(h)).toEqual(state(reference[i]!));
    expect(hs[0]!.nonFinite).toBe(2);
    expect(hs[0]!.total).toBe(6 * 30_001 - 2);
  });

  it('a Binner made before the thread is up bins here, then moves its states to the thread: the same counts', async () => {
    await stopBinningThread();
    const hs = data.map(() => new StreamingHistogram(1024));
    const binner = createBinner(hs, { thread: true, maxInFlightBytes: 1 << 30 });
    try {
      for (let b = 0; b < 6; b++) {
        await binner.post(data.map((tensor, id) => jobsOf(id, tensor[b]!.slice())));
        // Let the thread come up part-way through.
        if (b === 1) await binningThreadReady();
      }
      await binner.finish();
    } finally {
      await binner.close();
    }
    for (const [i, h] of hs.entries()) expect(state(h)).toEqual(state(reference[i]!));
  });

  it.skipIf(noThread)('an error on the thread rejects that Binner only; the next one works', async () => {
    const bad = createBinner([new StreamingHistogram(64)], { thread: true, maxInFlightBytes: 1 << 30 });
    await bad.post([{ id: 5, op: 'add', bmin: 0, bmax: 0, values: Float32Array.of(1, 2) }]);
    await expect(bad.finish()).rejects.toThrow(/calibration binning thread: no histogram 5/);
    await bad.close();
    const h = new StreamingHistogram(64);
    const good = createBinner([h], { thread: true, maxInFlightBytes: 1 << 30 });
    await good.post([{ id: 0, op: 'fixed', bmin: 1, bmax: 3, values: Float32Array.of(1, 2, 3) }]);
    await good.finish();
    await good.close();
    expect([h.min, h.max, h.total]).toEqual([1, 3, 3]);
  });

  it.skipIf(noThread)('a Binner whose thread is stopped under it fails with the reason; in-process binning names a missing histogram', async () => {
    const binner = createBinner([new StreamingHistogram(64)], { thread: true, maxInFlightBytes: 1 << 30 });
    await binner.post([{ id: 0, op: 'add', bmin: 0, bmax: 0, values: Float32Array.of(1) }]);
    await stopBinningThread();
    await expect(binner.finish()).rejects.toThrow(/binning thread exited/);
    await binner.close();
    expect(() => applyBinningJobs([], [{ id: 0, op: 'add', bmin: 0, bmax: 0, values: Float32Array.of(1) }])).toThrow(/no histogram 0/);
  });

  it('the default: the thread only for calibrations with enough values in all and per batch, and only with a second core', () => {
    expect(binningThreadPays(BINNING_THREAD_MIN_VALUES - 1, BINNING_THREAD_MIN_BATCH_VALUES)).toBe(false);
    expect(binningThreadPays(BINNING_THREAD_MIN_VALUES, BINNING_THREAD_MIN_BATCH_VALUES - 1)).toBe(false);
    expect(binningThreadPays(BINNING_THREAD_MIN_VALUES, BINNING_THREAD_MIN_BATCH_VALUES)).toBe(twoCores);
  });

  it('an idle thread does not keep the process alive', () => {
    // The built module (npm test builds first): prestart, use and finish a Binner, then let the process end.
    const url = new URL('../../dist/calibration/binning.js', import.meta.url).href;
    const histogramUrl = new URL('../../dist/calibration/histogram.js', import.meta.url).href;
    const script = `const b = await import(${JSON.stringify(url)}); const { StreamingHistogram } = await import(${JSON.stringify(histogramUrl)});
b.prestartBinningThread(); await b.binningThreadReady();
const h = new StreamingHistogram(64); const binner = b.createBinner([h], { thread: true, maxInFlightBytes: 1e9 });
await binner.post([{ id: 0, op: 'add', bmin: 0, bmax: 0, values: Float32Array.of(1, 2, 3) }]); await binner.finish(); await binner.close();
console.log(h.total);`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(out.trim()).toBe('3');
  });
});

describe('collectStatistics with the binning thread', () => {
  it('histograms (one pass; two passes with bin indices) are the same with the thread on and off', async () => {
    // x -> Relu(x * w + b) per channel: a 2x8x16x16 activation per sample.
    const b = new GraphBuilder({ opset: 17 });
    const x = b.input('x', DataType.FLOAT, ['N', 2, 16, 16]);
    const w = b.initializer(
      'w',
      DataType.FLOAT,
      [8, 2, 1, 1],
      Float32Array.from({ length: 16 }, (_, i) => (i % 5) - 2),
    );
    const conv = b.node('Conv', [x, w], {}, { name: 'conv', outputs: ['conv_out'] })[0]!;
    const relu = b.node('Relu', [conv], {}, { name: 'relu', outputs: ['relu_out'] })[0]!;
    b.output(relu, DataType.FLOAT, ['N', 8, 16, 16]);
    const model = b.build();
    for (const v of model.graph.nodes.flatMap((n) => n.outputs)) v.type = { kind: 'tensor', elemType: DataType.FLOAT, shape: ['N', 8, 16, 16] };
    const count = 40;
    const data = new Float32Array(count * 2 * 16 * 16);
    let s = 3;
    for (let i = 0; i < data.length; i++) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      data[i] = (s / 2 ** 32) * 4 - 1 + Math.floor(i / (2 * 16 * 16)) * 0.25;
    }
    const dataset: Dataset = { count, inputs: { x: { dtype: DataType.FLOAT, dims: [count, 2, 16, 16], data } }, source: 'test', notes: [] };
    // relu_out's channel moments too: its values are summed here before its buffer moves to the thread.
    const requests: StatisticRequest[] = [
      ...['conv_out', 'relu_out'].map((tensor) => ({ tensor, kind: 'histogram' as const, bins: 512 })),
      { tensor: 'relu_out', kind: 'channel-moments', axis: -3 },
    ];
    // One pass (captures within the budget), and two passes (a budget of 64 KiB: ranges, then bin
    // indices from onnxruntime counted on the thread).
    for (const memoryBudget of [undefined, 64 * 1024]) {
      const off = await collectStatistics(model, requests, dataset, { batchSize: 8, binningThread: false, memoryBudget });
      const on = await collectStatistics(model, requests, dataset, { batchSize: 8, binningThread: true, memoryBudget });
      expect(off.batching.binningThread).toBe(false);
      expect(on.batching.binningThread).toBe(true);
      expect(on.batching.passes).toBe(memoryBudget === undefined ? 1 : 2);
      for (const name of ['conv_out', 'relu_out']) {
        const a = off.ranges.get(name)!;
        const c = on.ranges.get(name)!;
        expect([c.min, c.max, c.count]).toEqual([a.min, a.max, a.count]);
        expect(state(c.histogram!)).toEqual(state(a.histogram!));
        expect(a.count).toBe(count * 8 * 16 * 16);
        expect(a.histogram!.total).toBe(count * 8 * 16 * 16);
      }
      // Relu of a conv with negative weights: zeros at the bottom.
      expect(on.ranges.get('relu_out')!.min).toBe(0);
      const [m, mOn] = [off.channels.get('relu_out')!, on.channels.get('relu_out')!];
      expect([Array.from(mOn.mean), Array.from(mOn.variance)]).toEqual([Array.from(m.mean), Array.from(m.variance)]);
      // Against a float64 reference: channel c is Relu(w[2c] x0 + w[2c + 1] x1) per pixel.
      const reference = Array.from({ length: 8 }, (_, c) => {
        let sum = 0;
        for (let n = 0; n < count; n++)
          for (let p = 0; p < 256; p++) sum += Math.max(0, (((2 * c) % 5) - 2) * data[n * 512 + p]! + (((2 * c + 1) % 5) - 2) * data[n * 512 + 256 + p]!);
        return sum / (count * 256);
      });
      m.mean.forEach((x, c) => expect(x).toBeCloseTo(reference[c]!, 5));
    }
  });
});

// The calibration service's reductions, two-pass histograms and memory-bounded capture groups,
// against a scan of the whole captured tensors (today's JS semantics) on small graphs.
import { describe, expect, it } from 'vitest';
import { DataType, GraphBuilder, type Model } from '../../src/ir/index.js';
import type { Dataset } from '../../src/data/index.js';
import { sliceSamples } from '../../src/ir/samples.js';
import { capturePath, collectStatistics, SINGLE_SAMPLE_ALLOWANCE, type StatisticRequest, StreamingHistogram } from '../../src/calibration/index.js';
import { createCaptureRunner, inferShapesByRunning } from '../../src/runtime/index.js';

/** A chain of `depth` blocks t_i = tanh(t_{i-1} * w_i + b_i) plus l = log(x) (NaN and -Infinity) and e = exp(x * 100) (+Infinity). */
function chain(depth: number): Model {
  const b = new GraphBuilder({ opset: 17 });
  const x = b.input('x', DataType.FLOAT, ['N', 8]);
  let t = x;
  for (let i = 0; i < depth; i++) {
    const w = b.initializer(
      `w${i}`,
      DataType.FLOAT,
      [8, 8],
      Float32Array.from({ length: 64 }, (_, k) => Math.sin(k * 0.7 + i) * 0.6),
    );
    const bias = b.initializer(
      `b${i}`,
      DataType.FLOAT,
      [8],
      Float32Array.from({ length: 8 }, (_, k) => (k - 4) * 0.1),
    );
    const mm = b.node('MatMul', [t, w]);
    mm.rename(`mm${i}`);
    const add = b.node('Add', [mm, bias]);
    add.rename(`add${i}`);
    t = b.node(i % 2 === 0 ? 'Tanh' : 'Relu', [add]);
    t.rename(`t${i}`);
  }
  const l = b.node('Log', [x]);
  l.rename('l');
  const hundred = b.initializer('hundred', DataType.FLOAT, [], Float32Array.of(100));
  const big = b.node('Mul', [x, hundred]);
  big.rename('big');
  const e = b.node('Exp', [big]);
  e.rename('e');
  b.output(t, DataType.FLOAT, ['N', 8]);
  b.output(l, DataType.FLOAT, ['N', 8]);
  b.output(e, DataType.FLOAT, ['N', 8]);
  return b.build();
}

/** 40 samples of 8 values in [-1.5, 1.5), some exactly 0 (log 0 = -Infinity), some above 0.9 (exp(x * 100) = Infinity). */
function data(count = 40): Dataset {
  const x = Float32Array.from({ length: count * 8 }, (_, i) => (i % 13 === 0 ? 0 : Math.sin(i * 1.37) * 1.5));
  return { count, inputs: { x: { dtype: DataType.FLOAT, dims: [count, 8], data: x } }, source: 'chain.npz', notes: [] };
}

async function typed(depth: number): Promise<Model> {
  const m = chain(depth);
  await inferShapesByRunning(m, { x: sliceSamples(data().inputs.x!, 0, 4) });
  return m;
}

/** Finite min/max of every tensor, scanning whole captures sample by sample. */
async function byHand(m: Model, names: readonly string[], ds: Dataset): Promise<Map<string, { min: number; max: number; count: number }>> {
  const runner = await createCaptureRunner(m, names);
  const out = new Map(names.map((n) => [n, { min: Infinity, max: -Infinity, count: 0 }]));
  try {
    for (let i = 0; i < ds.count; i++) {
      const got = await runner.run({ x: sliceSamples(ds.inputs.x!, i, i + 1) });
      for (const name of names) {
        const r = out.get(name)!;
        for (const v of got[name]!.data as Float32Array) {
          r.count++;
          if (!Number.isFinite(v)) continue;
          if (v < r.min) r.min = v;
          if (v > r.max) r.max = v;
        }
      }
    }
  } finally {
    await runner.release();
  }
  return out;
}

describe('calibration ranges from reductions inside onnxruntime', () => {
  it('equal the whole-tensor scan exactly: activations, graph outputs, the input, NaN and +-Infinity left out', async () => {
    const m = await typed(4);
    const names = ['x', 'mm0', 'add1', 't2', 't3', 'l', 'e', 'big'];
    const want = await byHand(m, names, data());
    const got = await collectStatistics(
      m,
      names.map((tensor) => ({ tensor, kind: 'range' as const })),
      data(),
      { batchSize: 16 },
    );
    for (const name of names) {
      const s = got.ranges.get(name)!;
      const w = want.get(name)!;
      expect([name, s.min, s.max, s.count]).toEqual([name, w.min, w.max, w.count]);
    }
    // l (log 0, log of negatives) and e (exp overflow) had non-finite values in every batch: re-run with them whole.
    expect(got.batching).toMatchObject({ batchSize: 16, passes: 1, captureGroups: 0, nonFiniteReruns: 3 });
    expect(Number.isFinite(got.ranges.get('e')!.max)).toBe(true);
  });

  it('a one-shot generator gets the same ranges in one pass', async () => {
    const m = await typed(2);
    const ds = data();
    function* feeds() {
      for (let i = 0; i < ds.count; i += 10) yield { x: sliceSamples(ds.inputs.x!, i, i + 10) };
    }
    const names = ['t0', 't1', 'l', 'e'];
    const want = await byHand(m, names, ds);
    const got = await collectStatistics(
      m,
      names.map((tensor) => ({ tensor, kind: 'range' as const })),
      feeds(),
    );
    for (const name of names) expect([name, got.ranges.get(name)!.min, got.ranges.get(name)!.max]).toEqual([name, want.get(name)!.min, want.get(name)!.max]);
    expect(got.batching).toMatchObject({ batchSize: 10, passes: 1 });
  });
});

describe('two-pass histograms and memory-bounded capture groups', () => {
  const histogramNames = ['mm0', 'add0', 't0', 'mm1', 't1', 'mm2', 't2', 'l', 'e'];

  it('bin into the grid the streaming histogram grows to: same min/max, grid, totals, and counts within one bin', async () => {
    const m = await typed(3);
    const ds = data();
    const requests: StatisticRequest[] = histogramNames.map((tensor) => ({ tensor, kind: 'histogram', bins: 256 }));
    // 9 tensors of 32 bytes per sample: 16 samples' captures (4608 bytes) do not fit 1000 bytes: two passes.
    const twoPass = await collectStatistics(m, requests, ds, { batchSize: 16, captureBatchSize: 7, memoryBudget: 1000 });
    // They fit the default budget: one pass, histograms grown batch by batch exactly as before.
    const onePass = await collectStatistics(m, requests, ds, { batchSize: 16 });
    // Today's path: the same batches of 16 from a generator (one pass, histograms grown as they stream).
    function* feeds() {
      for (let i = 0; i < ds.count; i += 16) yield { x: sliceSamples(ds.inputs.x!, i, Math.min(ds.count, i + 16)) };
    }
    const streamed = await collectStatistics(m, requests, feeds());
    // 7 samples: the seven finite tensors come back as uint16 bin indices (7 x 16 bytes each, 784
    // bytes in all: one group); l and e had NaN/Infinity, so they are captured whole (7 x 32 bytes
    // each) in a second group.
    expect(twoPass.batching).toMatchObject({ batchSize: 16, captureBatchSize: 7, captureGroups: 2, passes: 3, capturedBytesPerRun: 784, countedInRuntime: 0 });
    expect(onePass.batching).toMatchObject({ batchSize: 16, captureGroups: 0, passes: 1 });
    for (const name of histogramNames) {
      const a = twoPass.ranges.get(name)!;
      const b = streamed.ranges.get(name)!;
      const ha = a.histogram!;
      const hb = b.histogram!;
      expect([name, a.min, a.max, a.count, ha.lo, ha.width, ha.total, ha.nonFinite]).toEqual([
        name,
        b.min,
        b.max,
        b.count,
        hb.lo,
        hb.width,
        hb.total,
        hb.nonFinite,
      ]);
      expect(Array.from(onePass.ranges.get(name)!.histogram!.counts)).toEqual(Array.from(hb.counts));
      // Cumulative counts differ by at most the mass that can sit on a bin edge: never more than one bin's shift.
      let ca = 0;
      let cb = 0;
      for (let i = 0; i < ha.bins; i++) {
        ca += ha.counts[i]!;
        cb += hb.counts[i]!;
        expect(Math.abs(ca - cb)).toBeLessThanOrEqual(i + 1 < ha.bins ? ha.counts[i + 1]! + hb.counts[i]! : 0);
      }
    }
  });

  it('a small budget splits the captures into groups that together cover every requested tensor, with the same statistics', async () => {
    const m = await typed(6);
    const ds = data();
    const requests: StatisticRequest[] = [
      ...histogramNames.map((tensor) => ({ tensor, kind: 'histogram' as const, bins: 64 })),
      { tensor: 't4', kind: 'channel-moments', axis: -1 },
      { tensor: 'add5', kind: 'channel-moments', axis: -1 },
      { tensor: 'add5', kind: 'range' },
    ];
    const roomy = await collectStatistics(m, requests, ds, { batchSize: 8, memoryBudget: 2000 });
    const tight = await collectStatistics(m, requests, ds, { batchSize: 8, memoryBudget: 25 });
    const allowance = await collectStatistics(m, requests, ds, { batchSize: 8, memoryBudget: 100 });
    // Per sample: 7 finite histograms as uint16 indices (16 bytes each), l and e (non-finite) and
    // the two moment tensors whole (32 bytes each): 240 bytes, 8 samples in 2000.
    expect(roomy.batching).toMatchObject({ captureBatchSize: 8, captureGroups: 1, passes: 2, countedInRuntime: 0, capturedBytesPerRun: 1920 });
    // Budget 25 at one sample per run, which may take 4 budgets (SINGLE_SAMPLE_ALLOWANCE), 100
    // bytes: six indices (96 bytes) come back, t2's bins are counted inside onnxruntime in the
    // same pass, the four whole tensors take two more groups (3 + 1).
    expect(tight.batching).toMatchObject({ captureBatchSize: 1, captureGroups: 3, passes: 4, countedInRuntime: 1, capturedBytesPerRun: 96 });
    // Budget 100: the 240 bytes of one sample fit its 400, one group.
    expect(allowance.batching).toMatchObject({ captureBatchSize: 1, captureGroups: 1, passes: 2, countedInRuntime: 0, capturedBytesPerRun: 240 });
    for (const other of [tight, allowance]) {
      for (const name of [...histogramNames, 'add5']) {
        const a = roomy.ranges.get(name)!;
        const b = other.ranges.get(name)!;
        expect([name, b.min, b.max, b.count, b.histogram?.total]).toEqual([name, a.min, a.max, a.count, a.histogram?.total]);
        if (a.histogram) expect(Array.from(b.histogram!.counts)).toEqual(Array.from(a.histogram.counts));
      }
      for (const name of ['t4', 'add5']) {
        expect(Array.from(other.channels.get(name)!.mean)).toEqual(Array.from(roomy.channels.get(name)!.mean));
        expect(Array.from(other.channels.get(name)!.variance)).toEqual(Array.from(roomy.channels.get(name)!.variance));
      }
    }
  });

  it('without an explicit batch, a smaller first-pass batch whose captures fit keeps histograms to one pass, grown as they stream', async () => {
    const m = await typed(3);
    const ds = data();
    const requests: StatisticRequest[] = histogramNames.map((tensor) => ({ tensor, kind: 'histogram', bins: 256 }));
    // 9 tensors x 32 bytes = 288 bytes per sample; the budgeted batch (4 x 32 bytes per sample in
    // 1500: 11) would capture 3168 bytes, 5 samples (1440 bytes) fit: one pass at batch 5.
    const got = await collectStatistics(m, requests, ds, { memoryBudget: 1500 });
    expect(got.batching).toMatchObject({ batchSize: 5, explicit: false, captureGroups: 0, passes: 1 });
    function* feeds() {
      for (let i = 0; i < ds.count; i += 5) yield { x: sliceSamples(ds.inputs.x!, i, Math.min(ds.count, i + 5)) };
    }
    const streamed = await collectStatistics(m, requests, feeds());
    for (const name of histogramNames) {
      const a = got.ranges.get(name)!;
      const b = streamed.ranges.get(name)!;
      expect([name, a.min, a.max, a.count, a.histogram!.lo, a.histogram!.width]).toEqual([name, b.min, b.max, b.count, b.histogram!.lo, b.histogram!.width]);
      expect(Array.from(a.histogram!.counts)).toEqual(Array.from(b.histogram!.counts));
    }
  });

  it('progress events for every pass: the ranges pass, then one per capture group, samples counted from 0 in each', async () => {
    const m = await typed(3);
    const requests: StatisticRequest[] = histogramNames.map((tensor) => ({ tensor, kind: 'histogram', bins: 256 }));
    const events: string[] = [];
    const got = await collectStatistics(m, requests, data(), {
      batchSize: 16,
      captureBatchSize: 7,
      memoryBudget: 1000,
      onProgress: (p) => events.push(`${p.pass}/${p.passes ?? '?'} ${p.stage} ${p.batches}:${p.samples}/${p.totalSamples}`),
    });
    // 40 samples: batches of 16 in the first pass (16, 32, 40), of 7 in the two capture passes.
    const captures = (pass: number) => [7, 14, 21, 28, 35, 40].map((n, i) => `${pass}/3 captures ${i + 1}:${n}/40`);
    expect(got.batching.passes).toBe(3);
    expect(events).toEqual(['1/? ranges 1:16/40', '1/? ranges 2:32/40', '1/? ranges 3:40/40', ...captures(2), ...captures(3)]);
  });

  it('the default first-pass batch comes from the activation sizes and the budget', async () => {
    const m = await typed(2);
    const got = await collectStatistics(m, [{ tensor: 't1', kind: 'range' }], data(), { memoryBudget: 4 * 32 * 5 });
    // Largest activation 32 bytes per sample; four of them per sample within 640 bytes: batch 5.
    expect(got.batching).toMatchObject({ batchSize: 5, explicit: false, passes: 1 });
  });
});

describe('the single-sample allowance: one pass at batch 1 when one sample exceeds the budget but fits SINGLE_SAMPLE_ALLOWANCE of it', () => {
  const histogramNames = ['mm0', 'add0', 't0', 'mm1', 't1', 'mm2', 't2', 'l', 'e'];

  it('chooses the path from the per-sample capture bytes, the batch and the budget alone', () => {
    expect(SINGLE_SAMPLE_ALLOWANCE).toBe(4);
    const cases: [perSample: number, batch: number, lowerable: boolean, want: { batchSize: number; onePass: boolean }][] = [
      [0, 16, true, { batchSize: 16, onePass: true }], // nothing captured whole
      [60, 16, true, { batchSize: 16, onePass: true }], // 960 bytes fit 1000
      [100, 16, true, { batchSize: 10, onePass: true }], // lowered to the largest batch that fits
      [1000, 16, true, { batchSize: 1, onePass: true }], // one sample fits the budget exactly
      [1001, 16, true, { batchSize: 1, onePass: true }], // over the budget, within the allowance
      [4000, 16, true, { batchSize: 1, onePass: true }], // the allowance exactly (4 x 1000)
      [4001, 16, true, { batchSize: 16, onePass: false }], // over the allowance: ranges, then bins
      [Infinity, 16, true, { batchSize: 16, onePass: false }], // a size not declared
      [3000, 1, false, { batchSize: 1, onePass: true }], // an explicit batch of 1 takes the allowance too
      [3000, 2, false, { batchSize: 2, onePass: false }], // an explicit batch of 2 does not
      [400, 2, false, { batchSize: 2, onePass: true }],
      [100, 16, false, { batchSize: 16, onePass: false }], // not lowerable: the batch stays
    ];
    for (const [perSample, batch, lowerable, want] of cases) {
      expect([perSample, batch, lowerable, capturePath(perSample, batch, 1000, lowerable)]).toEqual([perSample, batch, lowerable, want]);
    }
  });

  it('a model whose one sample exceeds the budget but fits the allowance takes one pass at batch 1: histograms exactly those grown sample by sample, within one bin of two passes', async () => {
    const m = await typed(3);
    const ds = data();
    const requests: StatisticRequest[] = histogramNames.map((tensor) => ({ tensor, kind: 'histogram', bins: 256 }));
    // 9 tensors x 32 bytes = 288 bytes per sample. Budget 260: the budgeted batch is 2 (4 x 32
    // bytes per sample), one sample's 288 bytes exceed 260 but fit 4 x 260: one pass at 1.
    const allowed = await collectStatistics(m, requests, ds, { memoryBudget: 260 });
    expect(allowed.batching).toMatchObject({ batchSize: 1, explicit: false, captureGroups: 0, passes: 1, capturedBytesPerRun: 288 });
    // An explicit batch of 1 takes the same path; an explicit 2 (576 bytes) takes two passes.
    const explicitOne = await collectStatistics(m, requests, ds, { batchSize: 1, memoryBudget: 260 });
    expect(explicitOne.batching).toMatchObject({ batchSize: 1, explicit: true, captureGroups: 0, passes: 1 });
    const explicitTwo = await collectStatistics(m, requests, ds, { batchSize: 2, memoryBudget: 260 });
    expect(explicitTwo.batching.passes).toBeGreaterThanOrEqual(2);
    // Budget 70: 288 bytes exceed 4 x 70, so the current path: ranges at batch 1, then the bins.
    const twoPass = await collectStatistics(m, requests, ds, { memoryBudget: 70 });
    expect(twoPass.batching).toMatchObject({ batchSize: 1, explicit: false });
    expect(twoPass.batching.passes).toBeGreaterThanOrEqual(2);
    // The reference: a generator of single samples (a one-shot source: one pass, histograms grown as they stream).
    function* feeds() {
      for (let i = 0; i < ds.count; i++) yield { x: sliceSamples(ds.inputs.x!, i, i + 1) };
    }
    const streamed = await collectStatistics(m, requests, feeds());
    // And by hand: StreamingHistogram.add() over whole captures of single samples (no reductions).
    const byHandHistograms = new Map(histogramNames.map((n) => [n, new StreamingHistogram(256)]));
    const runner = await createCaptureRunner(m, histogramNames);
    try {
      for (let i = 0; i < ds.count; i++) {
        const got = await runner.run({ x: sliceSamples(ds.inputs.x!, i, i + 1) });
        for (const name of histogramNames) byHandHistograms.get(name)!.add(got[name]!.data as Float32Array);
      }
    } finally {
      await runner.release();
    }
    for (const name of histogramNames) {
      const ref = streamed.ranges.get(name)!;
      const hr = ref.histogram!;
      const h = byHandHistograms.get(name)!;
      expect([name, hr.lo, hr.width, hr.min, hr.max, hr.total, hr.nonFinite]).toEqual([name, h.lo, h.width, h.min, h.max, h.total, h.nonFinite]);
      expect(Array.from(hr.counts)).toEqual(Array.from(h.counts));
      for (const got of [allowed, explicitOne]) {
        const a = got.ranges.get(name)!;
        expect([name, a.min, a.max, a.count, a.histogram!.lo, a.histogram!.width, a.histogram!.total, a.histogram!.nonFinite]).toEqual([
          name,
          ref.min,
          ref.max,
          ref.count,
          hr.lo,
          hr.width,
          hr.total,
          hr.nonFinite,
        ]);
        expect(Array.from(a.histogram!.counts)).toEqual(Array.from(hr.counts));
      }
      // Two passes bin into the same grid; a value on a bin edge may land one bin over.
      const b = twoPass.ranges.get(name)!;
      const hb = b.histogram!;
      expect([name, b.min, b.max, b.count, hb.lo, hb.width, hb.total]).toEqual([name, ref.min, ref.max, ref.count, hr.lo, hr.width, hr.total]);
      let ca = 0;
      let cb = 0;
      for (let i = 0; i < hb.bins; i++) {
        ca += hr.counts[i]!;
        cb += hb.counts[i]!;
        expect(Math.abs(ca - cb)).toBeLessThanOrEqual(i + 1 < hb.bins ? hr.counts[i + 1]! + hb.counts[i]! : 0);
      }
    }
  });
});

// Histogram bins computed inside onnxruntime (runtime/capture.ts: uint16 bin indices, and bin
// counts by ScatterElements) against the JS binning (StreamingHistogram.addFixed) of the same
// captured tensors of the example model, element by element and count by count.
import { describe, expect, it } from 'vitest';
import { readNpz } from '../../src/data/index.js';
import { StreamingHistogram } from '../../src/calibration/histogram.js';
import { collectStatistics, type StatisticRequest } from '../../src/calibration/index.js';
import { sliceSamples } from '../../src/ir/samples.js';
import { loadModel } from '../../src/onnx/index.js';
import { computeRange } from '../../src/app/quantize-passes.js';
import { canReduce, createStatisticsCapture, inferShapesByRunning, type BinGrid } from '../../src/runtime/index.js';

const MODEL = 'fixtures/fashion-cnn.onnx';
const CALIB = 'fixtures/fashion-calib.npz';

describe('histogram bins inside onnxruntime on the example model', () => {
  it('indices equal the JS bin of each value except within float32 rounding of an edge (one bin over); counts equal the indices', async () => {
    const model = await loadModel(MODEL);
    const all = await readNpz(CALIB);
    const inputName = model.graph.inputs[0]!.name;
    const key = Object.keys(all).find((n) => n !== 'labels')!;
    const feeds = { [inputName]: sliceSamples(all[key]!, 0, 64) };
    await inferShapesByRunning(model, { [inputName]: sliceSamples(all[key]!, 0, 2) });
    const names = model.graph.nodes.flatMap((n) => n.outputs.map((v) => v.name)).filter((n) => canReduce(model, n));
    expect(names.length).toBeGreaterThanOrEqual(9);

    // The grids: a StreamingHistogram of 4096 bins extended to each tensor's range on this batch
    // (as the ranges pass does), from the values captured whole.
    const whole = await createStatisticsCapture(model, { whole: names });
    const values = (await whole.run(feeds)).tensors;
    await whole.release();
    const grids = new Map<string, BinGrid>();
    const js = new Map<string, StreamingHistogram>();
    for (const name of names) {
      const h = new StreamingHistogram(4096);
      const v = values[name]!.data as Float32Array;
      h.extend(
        v.reduce((a, b) => Math.min(a, b), Infinity),
        v.reduce((a, b) => Math.max(a, b), -Infinity),
      );
      grids.set(name, { lo: h.lo, width: h.width, bins: h.bins });
      h.addFixed(v, false);
      js.set(name, h);
    }
    const run = async (plan: { binIndices?: Map<string, BinGrid>; binCounts?: Map<string, BinGrid> }) => {
      const capture = await createStatisticsCapture(model, plan);
      try {
        return await capture.run(feeds);
      } finally {
        await capture.release();
      }
    };
    const got = { binIndices: (await run({ binIndices: grids })).binIndices, binCounts: (await run({ binCounts: grids })).binCounts };

    let elements = 0;
    let moved = 0;
    for (const name of names) {
      const { lo, width, bins } = grids.get(name)!;
      const v = values[name]!.data as Float32Array;
      const indices = got.binIndices.get(name)!;
      expect([name, indices.length]).toEqual([name, v.length]);
      const fromIndices = new StreamingHistogram(4096);
      Object.assign(fromIndices, { lo, width });
      fromIndices.addIndices(indices);
      for (let i = 0; i < v.length; i++) {
        const t = (v[i]! - lo) / width;
        const want = Math.min(bins - 1, Math.max(0, Math.trunc(t)));
        const have = Math.min(bins - 1, indices[i]!);
        if (have !== want) {
          moved++;
          // Only a value within float32 rounding of a bin edge moves, and by one bin.
          expect([name, i, Math.abs(have - want)]).toEqual([name, i, 1]);
          expect(Math.abs(t - Math.round(t))).toBeLessThan(1e-3);
        }
      }
      elements += v.length;
      // The counts from ScatterElements are exactly those of the indices.
      expect([name, ...got.binCounts.get(name)!]).toEqual([name, ...fromIndices.counts]);
      // Against the JS histogram: same total; cumulative counts differ by at most one bin's shift.
      const h = js.get(name)!;
      expect([name, fromIndices.total]).toEqual([name, h.total]);
      let ca = 0;
      let cb = 0;
      for (let i = 0; i < bins; i++) {
        ca += fromIndices.counts[i]!;
        cb += h.counts[i]!;
        expect(Math.abs(ca - cb)).toBeLessThanOrEqual(i + 1 < bins ? fromIndices.counts[i + 1]! + h.counts[i]! : 0);
      }
    }
    // Almost every value lands where the JS binning puts it.
    expect(moved / elements).toBeLessThan(1e-3);
    console.log(`bins-in-runtime: ${moved} of ${elements} values one bin over`);
  });

  it('a two-pass collection counting some histograms inside onnxruntime gives the counts of one that takes them all as indices', async () => {
    const model = await loadModel(MODEL);
    const all = await readNpz(CALIB);
    const inputName = model.graph.inputs[0]!.name;
    const key = Object.keys(all).find((n) => n !== 'labels')!;
    await inferShapesByRunning(model, { [inputName]: sliceSamples(all[key]!, 0, 2) });
    const names = model.graph.nodes.flatMap((n) => n.outputs.map((v) => v.name)).filter((n) => canReduce(model, n));
    const requests: StatisticRequest[] = names.map((tensor) => ({ tensor, kind: 'histogram' }));
    const ds = { count: 96, inputs: { [inputName]: sliceSamples(all[key]!, 0, 96) }, source: CALIB, notes: [] };
    // The example's calibrated activations are about 160 000 values per sample: 4 MiB forces two
    // passes at batch 32 (20 MB as float) and takes every histogram as indices at batch 4 (1.3 MB);
    // 256 KiB leaves some to be counted inside onnxruntime.
    const indices = await collectStatistics(model, requests, ds, { batchSize: 32, captureBatchSize: 4, memoryBudget: 4 * 1024 * 1024 });
    const counted = await collectStatistics(model, requests, ds, { batchSize: 32, captureBatchSize: 4, memoryBudget: 256 * 1024 });
    expect(indices.batching).toMatchObject({ passes: 2, countedInRuntime: 0 });
    expect(counted.batching.passes).toBe(2);
    expect(counted.batching.countedInRuntime).toBeGreaterThan(0);
    for (const name of names) {
      const a = indices.ranges.get(name)!;
      const b = counted.ranges.get(name)!;
      expect([name, b.min, b.max, b.count, b.histogram!.total, b.histogram!.lo]).toEqual([name, a.min, a.max, a.count, a.histogram!.total, a.histogram!.lo]);
      expect([name, ...b.histogram!.counts]).toEqual([name, ...a.histogram!.counts]);
    }
    // Against one pass with the histograms grown in JS (the default here: everything fits 64 MiB):
    // percentile, entropy and mse ranges within one bin.
    const onePass = await collectStatistics(model, requests, ds, { batchSize: 32 });
    expect(onePass.batching).toMatchObject({ passes: 1, captureGroups: 0 });
    for (const name of names) {
      const a = onePass.ranges.get(name)!;
      const b = counted.ranges.get(name)!;
      for (const method of ['percentile', 'entropy', 'mse'] as const) {
        const ra = computeRange(a, { method });
        const rb = computeRange(b, { method });
        const width = b.histogram!.width;
        expect([name, method, Math.abs(ra.min - rb.min) <= width, Math.abs(ra.max - rb.max) <= width]).toEqual([name, method, true, true]);
      }
    }
  });
});

// The fidelity guard (app/quantize-fidelity.ts): held-out sample selection, the fallback's k
// schedule and blocks, and a deliberately broken INT8 range caught without labels and repaired by
// keeping the responsible node(s) float.
import { describe, expect, it } from 'vitest';
import { DataType } from '../../../src/ir/index.js';
import {
  FidelityJudge,
  groupUnits,
  growingCounts,
  guardFidelity,
  int8FallbackSpace,
  planHeldOut,
  quantizeInt8,
  requantize,
  sliceDataset,
  DEFAULT_FIDELITY_BUDGET,
} from '../../../src/app/quantize-passes.js';
import { dataset, residualCnn } from './models.js';

describe('planHeldOut: which samples check the quantized model', () => {
  it('the samples after --calibration-count when the file has more (the example: 100 set the ranges, 100-163 check)', () => {
    expect(planHeldOut({ available: 164, calibrationCount: 100, setsRanges: true })).toEqual({
      calibrationSamples: 100,
      check: { start: 100, end: 164 },
      source: 'calibration-rest',
    });
    expect(planHeldOut({ available: 130, calibrationCount: 100, setsRanges: true })).toEqual({
      calibrationSamples: 100,
      check: { start: 100, end: 130 },
      source: 'calibration-rest',
    });
    expect(planHeldOut({ available: 48, calibrationCount: 32, setsRanges: true })).toMatchObject({ calibrationSamples: 32, check: { start: 32, end: 48 } });
  });
  it('otherwise the last min(64, floor(N/4)) are held out, with a note; too few: the calibration samples (weak)', () => {
    const p = planHeldOut({ available: 48, calibrationCount: 100, setsRanges: true });
    expect(p).toMatchObject({ calibrationSamples: 36, check: { start: 36, end: 48 }, source: 'calibration-tail' });
    expect(p.note).toMatch(/last 12 were held out.*first 36/);
    expect(planHeldOut({ available: 1000, calibrationCount: 1000, setsRanges: true })).toMatchObject({
      calibrationSamples: 936,
      check: { start: 936, end: 1000 },
    });
    expect(planHeldOut({ available: 3, calibrationCount: 100, setsRanges: true })).toMatchObject({
      calibrationSamples: 3,
      check: { start: 0, end: 3 },
      source: 'calibration-reused',
    });
  });
  it('--eval-data first (labels not needed); modes without ranges check on the first samples; no data: random', () => {
    expect(planHeldOut({ available: 164, calibrationCount: 100, evalCount: 2000, setsRanges: true })).toEqual({
      calibrationSamples: 100,
      check: { start: 0, end: 64 },
      source: 'eval-data',
    });
    expect(planHeldOut({ available: 40, calibrationCount: 100, setsRanges: false })).toEqual({
      calibrationSamples: 0,
      check: { start: 0, end: 40 },
      source: 'calibration',
    });
    expect(planHeldOut({ calibrationCount: 100, setsRanges: false })).toMatchObject({ check: { start: 0, end: 8 }, source: 'random' });
  });
  it('sliceDataset takes samples [start, end) with their labels', () => {
    const d = dataset('x', [10, 3], 1, 4);
    const s = sliceDataset(d, 6, 9);
    expect(s.count).toBe(3);
    expect([...(s.inputs['x']!.data as Float32Array)]).toEqual([...(d.inputs['x']!.data as Float32Array).subarray(18, 27)]);
    expect([...(s.labels!.data as BigInt64Array)]).toEqual([...(d.labels!.data as BigInt64Array).subarray(6, 9)]);
  });
});

describe('the fallback schedule', () => {
  it('grows k = 1, 2, 4, ... up to the limit; groups many nodes into blocks of consecutive nodes', () => {
    expect(growingCounts(1)).toEqual([1]);
    expect(growingCounts(3)).toEqual([1, 2, 3]);
    expect(growingCounts(8)).toEqual([1, 2, 4, 8]);
    expect(growingCounts(11)).toEqual([1, 2, 4, 8, 11]);
    const nodes = Array.from({ length: 100 }, (_, i) => ({ node: `n${i}`, opType: i % 2 ? 'Conv' : 'Add' }));
    const units = groupUnits(nodes, 48);
    expect(units.length).toBe(34);
    expect(units[0]).toEqual({ nodes: ['n0', 'n1', 'n2'], opType: 'Add+Conv' });
    expect(units.flatMap((u) => u.nodes)).toEqual(nodes.map((n) => n.node));
    expect(groupUnits(nodes.slice(0, 5), 48).map((u) => u.nodes.length)).toEqual([1, 1, 1, 1, 1]);
  });
});

describe('guardFidelity on a deliberately broken INT8 range (no labels)', () => {
  const setup = async () => {
    const model = residualCnn(17, 32);
    const all = dataset('input', [64, 2, 12, 12], 21);
    // Bias correction off: the broken tensor's producer and consumer tie in the ranking (7.9 dB
    // each) and the tie decides the steps (keeping conv1 float also keeps conv2, its direct
    // reader, float: with bias correction on conv1 ranks first and one step meets the budget).
    const { context, model: good } = await quantizeInt8(model, { calibration: all, calibrationCount: 48, biasCorrection: false });
    const heldOut = sliceDataset(all, 48, 64);
    return { model, context, good, heldOut };
  };
  const BROKEN = 'block.conv1.relu_out';

  it('the range of one activation at 1/100 of its true range: caught below budget, repaired by keeping its producer/consumer float', async () => {
    const { model, context, good, heldOut } = await setup();
    const judge = new FidelityJudge(model, heldOut, { ...DEFAULT_FIDELITY_BUDGET });
    const healthy = await judge.measure(good);
    expect(healthy.met).toBe(true);
    expect(healthy.outputs['logits']!.sqnrDb).toBeGreaterThan(30);

    const r = context.ranges.get(BROKEN)!;
    context.ranges.set(BROKEN, { min: r.min / 100, max: r.max / 100 });
    const broken = await requantize(context, {});
    const g = await guardFidelity({ model: broken.model, extra: broken.report }, () => int8FallbackSpace(context), judge);
    // Before the fallback: far below 20 dB on the held-out samples.
    expect(g.initial.met).toBe(false);
    expect(g.initial.outputs['logits']!.sqnrDb).toBeLessThan(15);
    expect(g.initial.failures[0]).toMatch(/'logits': SQNR .* < 20 dB/);
    // The ranking puts the broken tensor's producer and consumer first (each writes or reads it
    // through the broken QuantizeLinear), far below every other node.
    expect(new Set(g.sensitivity.slice(0, 2).flatMap((u) => u.nodes))).toEqual(new Set(['block.conv1.conv', 'block.conv2.conv']));
    expect(g.sensitivity[1]!.sqnrDb).toBeLessThan(15);
    expect(g.sensitivity[2]!.sqnrDb).toBeGreaterThan(30);
    // Ranked in one batched pass (no sensitivity runs of the judge).
    expect(g.ranking).toBe('batched');
    // After: within budget with only the node that writes the broken tensor float (found by the
    // refinement: the prefix of two met, and so did it without conv2, at the same 43.5 dB).
    expect(g.met).toBe(true);
    expect(g.floatNodes).toEqual(['block.conv1.conv']);
    expect(g.final.outputs['logits']!.sqnrDb).toBeGreaterThanOrEqual(20);
    expect(g.extra.skipped.map((s) => s.node)).toEqual(expect.arrayContaining(g.floatNodes));
    // Steps: the first (nothing float) missed, prefixes of 1 and 2, then the refinement; runs: the
    // healthy model's, then 4 (were 1 + 6 sensitivity + 2 before the batched ranking).
    expect(g.steps[0]).toMatchObject({ floatNodes: [], met: false });
    expect(g.steps.map((s) => [s.floatNodes.length, s.met])).toEqual([
      [0, false],
      [1, false],
      [2, true],
      [1, true],
    ]);
    expect(g.runs).toBe(5);
  });

  it('a budget no mix can meet: met false, at most half the nodes tried float, the best attempt returned', async () => {
    const { model, context, good, heldOut } = await setup();
    const judge = new FidelityJudge(model, heldOut, { minSqnrDb: 200, minTop1Agreement: 0.95 });
    const first = await requantize(context, {});
    const g = await guardFidelity({ model: good, extra: first.report }, () => int8FallbackSpace(context), judge);
    expect(g.met).toBe(false);
    expect(g.steps.map((s) => s.floatNodes.length)).toEqual([0, 1, 2, 3]);
    expect(g.final.worstSqnrDb).toBe(Math.max(...g.steps.map((s) => s.worstSqnrDb)));
  });

  it('a deadline: no measurement starts after it; the best attempt so far comes back, marked stoppedAtDeadline', async () => {
    const { model, context, good, heldOut } = await setup();
    const judge = new FidelityJudge(model, heldOut, { minSqnrDb: 200, minTop1Agreement: 0.95 });
    const first = await requantize(context, {});
    // Passed before the search: the first model is measured (the caller's own), nothing more.
    const g = await guardFidelity({ model: good, extra: first.report }, () => int8FallbackSpace(context), judge, { deadline: performance.now() - 1 });
    expect(g).toMatchObject({ met: false, stoppedAtDeadline: true, floatNodes: [], runs: 1 });
    expect(g.steps).toHaveLength(1);
    // One far off: the same search as without one.
    const later = await guardFidelity({ model: good, extra: first.report }, () => int8FallbackSpace(context), judge, { deadline: performance.now() + 600_000 });
    expect(later.stoppedAtDeadline).toBeUndefined();
    expect(later.steps.map((s) => s.floatNodes.length)).toEqual([0, 1, 2, 3]);
  });

  it('float outputs are judged (integer ones would be reported only)', async () => {
    const { model, good, heldOut } = await setup();
    const judge = new FidelityJudge(model, heldOut, { minSqnrDb: 20, minTop1Agreement: 0.95 });
    const m = await judge.measure(good);
    expect(Object.values(m.outputs).every((o) => o.judged)).toBe(true);
    expect(model.graph.outputs.every((o) => (o.type as { elemType?: number }).elemType === DataType.FLOAT)).toBe(true);
  });
});
